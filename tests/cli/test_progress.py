"""Progress a batch job can read: plain lines at a fixed interval with done/total, the average rate since the
start with its unit and the time left; the terminal bar shows the same average rate."""

import pytest
from typer.testing import CliRunner

from crs.foundations import config as C
from crs.foundations.progress import LineProgress, Progress, average_rate, clock, status_line, time_left


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


def test_the_rate_is_the_average_since_the_start_not_a_recent_window():
    assert average_rate(30, 187.5) == pytest.approx(0.16)
    assert average_rate(0, 10) is None and average_rate(3, 0) is None
    assert time_left(30, 185, 187.5) == pytest.approx(155 / 0.16)
    assert time_left(30, None, 187.5) is None
    assert clock(187) == "0:03:07" and clock(90061) == "25:01:01"


def test_a_status_line_says_done_total_rate_with_unit_and_time_left():
    line = status_line("demo-resnet × demo_derm", 30, 185, 187.5, "chunks")
    assert line == ("demo-resnet × demo_derm: 30/185 chunks (16%), 0.16 chunks/s average, 0:03:08 elapsed, "
                    "about 0:16:09 left")
    assert "left" not in status_line("x", 185, 185, 1156.25, "chunks", finished=True)
    assert "time left unknown" in status_line("x", 0, 185, 5, "chunks")
    assert status_line("score", 0, None, 65, "steps") == "score: running, 0:01:05 elapsed"


def test_line_progress_writes_each_running_task_per_interval_and_a_line_at_the_end():
    lines, t = [], Clock()
    p = LineProgress(30, lines.append, clock=t)
    assert isinstance(p, Progress)
    a = p.add_task("probes", total=4, unit="pairs")
    p.add_task("score", total=None)
    t.now += 30
    p.advance(a)
    assert lines == []  # an advance alone writes nothing: the interval does
    p.log()
    assert lines == ["probes: 1/4 pairs (25%), 0.0333 pairs/s average, 0:00:30 elapsed, about 0:01:30 left",
                     "score: running, 0:00:30 elapsed"]
    t.now += 30
    p.update(a, description="probes demo-vit × demo_cxr", advance=3)  # complete: its last line, at once
    assert lines[-1] == "probes demo-vit × demo_cxr: 4/4 pairs (100%), 0.0667 pairs/s average, 0:01:00 elapsed"
    p.log()
    assert lines[-1] == "score: running, 0:01:00 elapsed"  # a finished task is not repeated
    p.__exit__(None, None, None)
    assert lines[-1] == "score: done, 0:01:00 elapsed" and len(lines) == 5


def test_a_step_without_a_count_ends_when_it_says_so_not_at_the_end_of_the_command():
    lines, t = [], Clock()
    p = LineProgress(30, lines.append, clock=t)
    score = p.add_task("score", total=None)
    t.now += 4
    p.update(score, visible=False)  # scoring is over (crs.stages.score.run): its line now
    assert lines == ["score: done, 0:00:04 elapsed"]
    t.now += 60  # the report runs: the score line is neither repeated nor left open
    p.log()
    p.__exit__(None, None, None)
    assert lines == ["score: done, 0:00:04 elapsed"]


def test_the_interval_thread_writes_without_any_advance():
    """Three lines arrive from the background thread alone: the test waits for them (no advance, no log
    call), whatever the machine's load; the timeout only ends a test whose thread writes nothing."""
    import threading

    lines, three = [], threading.Event()

    def write(line):
        lines.append(line)
        if len(lines) >= 3:
            three.set()

    with LineProgress(0.001, write, unit="chunks") as p:  # the command's unit where the task names none
        p.add_task("demo-stats × demo_derm", total=185)
        assert three.wait(60), f"the interval thread wrote {len(lines)} lines, not 3"
        written = len(lines)
    assert written >= 3 and all(ln.startswith("demo-stats × demo_derm: 0/185 chunks") for ln in lines)


def test_log_interval_is_one_setting_for_the_toml_and_every_stage_command():
    from crs.cli import STAGE_OPTIONS

    assert C.Config().log_interval == 30
    assert C.parse("log_interval = 5\n").log_interval == 5.0
    with pytest.raises(C.ConfigError, match="log_interval"):
        C.parse("log_interval = 0\n")
    assert C.parse(C.to_toml(C.Config(log_interval=7.5))).log_interval == 7.5
    for name in ("extract", "probe", "score", "report", "demo"):
        assert ("log_interval",) in STAGE_OPTIONS[name], name


def test_a_command_whose_output_is_a_file_writes_plain_lines(tmp_path, monkeypatch):
    """Under CliRunner stderr is not a terminal: the score stage's lines arrive as plain text."""
    from crs import stages
    from crs.cli import app

    def fake_score(results, settings, store=None, progress=None):
        progress.add_task("score (2 encoders)", total=None, unit="steps")
        raise KeyboardInterrupt  # stop here: the lines so far are what a log shows
    monkeypatch.setattr(stages.score, "run", fake_score)
    r = CliRunner().invoke(app, ["score", "--results", str(tmp_path), "--log-interval", "5"])
    assert r.exit_code == 130
    assert "score (2 encoders): running, 0:00:00 elapsed" in r.output and "\x1b[" not in r.output
    r = CliRunner().invoke(app, ["score", "--results", str(tmp_path), "--log-interval", "0"])
    assert r.exit_code == 2 and "--log-interval must be positive" in r.output


def test_the_terminal_bar_shows_the_average_rate_with_its_unit(monkeypatch):
    import io

    from rich.console import Console

    from crs.commands import console

    buf = io.StringIO()
    monkeypatch.setattr(console, "err", Console(file=buf, force_terminal=True, width=160, color_system=None))
    bar = console.progress_bar(False)
    assert not isinstance(bar, LineProgress)
    t = bar.add_task("demo-stats × demo_derm", total=10, unit="chunks")
    bar.start_task(t)
    task = bar.tasks[0]
    monkeypatch.setattr(type(task), "elapsed", property(lambda self: 8.0))
    bar.update(t, completed=2)
    row = bar.make_tasks_table(bar.tasks)
    console = Console(file=io.StringIO(), width=160, color_system=None)
    console.print(row)
    text = console.file.getvalue()
    assert "0.25 chunks/s" in text and "0:00:32" in text  # 2 in 8 s; 8 left at 0.25/s


def test_the_terminal_bar_of_a_step_without_a_count_shows_its_time_alone(monkeypatch):
    """score and report count nothing (one vectorised step): the bar shows the time elapsed, no '0/?' or rate."""
    import io

    from rich.console import Console

    from crs.commands import console

    monkeypatch.setattr(console, "err", Console(file=io.StringIO(), force_terminal=True, width=160, color_system=None))
    bar = console.progress_bar(False)
    bar.add_task("score (3 encoders)", total=None)
    task = bar.tasks[0]
    monkeypatch.setattr(type(task), "elapsed", property(lambda self: 65.0))
    console = Console(file=io.StringIO(), width=160, color_system=None)
    console.print(bar.make_tasks_table(bar.tasks))
    text = console.file.getvalue()
    assert "score (3 encoders)" in text and "0:01:05" in text
    assert "/?" not in text and "/s" not in text and "-:--:--" not in text
