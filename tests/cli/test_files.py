"""crs.foundations.files.atomic_write: whole files only, with the mode the user's umask gives any new file."""

import os
import stat

import pytest

from crs.foundations.files import atomic_write, umask


@pytest.mark.parametrize("mask, mode", [(0o022, 0o644), (0o002, 0o664), (0o077, 0o600)])
def test_a_written_file_has_the_mode_the_umask_gives(tmp_path, mask, mode):
    old = os.umask(mask)
    try:
        assert umask() == mask
        atomic_write(tmp_path / "scores.json", lambda p: p.write_text("{}"))
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "scores.json").stat().st_mode) == mode
    assert [p.name for p in tmp_path.iterdir()] == ["scores.json"]


def test_a_failed_write_leaves_the_old_file_and_no_temporary(tmp_path):
    (tmp_path / "a.txt").write_text("old")

    def fail(p):
        p.write_text("half")
        raise RuntimeError("disk gone")
    with pytest.raises(RuntimeError):
        atomic_write(tmp_path / "a.txt", fail)
    assert (tmp_path / "a.txt").read_text() == "old" and [p.name for p in tmp_path.iterdir()] == ["a.txt"]
