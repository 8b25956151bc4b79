"""Piped output never cuts a number: a table gets the width it needs when stdout is not a terminal."""

from rich.table import Table

from crs.commands import console


def test_a_wide_table_is_printed_whole_to_a_pipe():
    t = Table(title="wide")
    for i in range(30):
        t.add_column(f"col{i}", no_wrap=True)
    t.add_row(*[f"0.{i:06d}" for i in range(30)])
    assert not console.out.is_terminal  # pytest captures stdout: what `crs score | cat` sees
    with console.out.capture() as cap:
        console.show(t)
    text = cap.get()
    assert "…" not in text and all(f"0.{i:06d}" in text for i in range(30))
    assert max(len(line) for line in text.splitlines()) > console.out.width  # wider than the pipe's text width
