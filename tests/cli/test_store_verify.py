"""`crs store verify PATH [--repair] [--json]`, wired to crs.store.integrity (verify, format_findings, Finding).

The store's own checks are tested with the store; here a stand-in module with the same names shows what the
command does with what they return (the exit code, the text, the JSON, --repair passed through)."""

import json
from dataclasses import dataclass

import pytest
from typer.testing import CliRunner

from crs.cli import app

runner = CliRunner()


@dataclass(frozen=True)
class Finding:
    array: str
    chunk: str | None
    problem: str
    repair: str


def _fake(monkeypatch, findings, changes=()):
    from crs.store import integrity

    calls = []

    def verify(path, *, repair=False, storage_options=None, changed=None):
        calls.append((path, repair))
        if repair and changed is not None:
            changed.extend(changes)
        return list(findings)
    monkeypatch.setattr(integrity, "Finding", Finding)
    monkeypatch.setattr(integrity, "verify", verify)
    monkeypatch.setattr(integrity, "format_findings", lambda fs, changed=(): "\n".join(
        [f"repaired: {c}" for c in changed] + [f"{f.array} chunk {f.chunk}: {f.problem}; {f.repair}" for f in fs]))
    return calls


BAD = [Finding("demo_derm/embeddings/demo-stats/clean/x", "2/0", "missing", "run `crs extract` again"),
       Finding("demo_derm/label", None, "zarr.json is not valid JSON", "re-create the store")]


def test_a_sound_store_exits_0(monkeypatch, tmp_path):
    calls = _fake(monkeypatch, [])
    r = runner.invoke(app, ["store", "verify", str(tmp_path / "s.zarr")])
    assert r.exit_code == 0, r.output
    assert "as committed" in r.output and calls == [(str(tmp_path / "s.zarr"), False)]


def test_findings_are_listed_and_exit_2(monkeypatch, tmp_path):
    calls = _fake(monkeypatch, BAD)
    r = runner.invoke(app, ["store", "verify", str(tmp_path), "--repair"])
    assert r.exit_code == 2
    assert "clean/x chunk 2/0: missing; run `crs extract` again" in r.output and "demo_derm/label" in r.output
    assert calls == [(str(tmp_path), True)]


def test_a_repair_says_what_it_changed_and_never_nothing_to_repair_then(monkeypatch, tmp_path):
    _fake(monkeypatch, [], changes=["removed datasets/d/predictions/e/clean, a symbolic link (to /x)"])
    r = runner.invoke(app, ["store", "verify", str(tmp_path), "--repair"])
    assert r.exit_code == 0, r.output
    assert "repaired: removed datasets/d/predictions/e/clean" in r.output and "nothing to repair" not in r.output
    _fake(monkeypatch, [])
    r = runner.invoke(app, ["store", "verify", str(tmp_path), "--repair"])
    assert r.exit_code == 0 and "nothing to repair" in r.output, r.output


@pytest.mark.parametrize("findings, code", [([], 0), (BAD, 2)])
def test_json_is_the_list_of_findings(monkeypatch, tmp_path, findings, code):
    _fake(monkeypatch, findings)
    r = runner.invoke(app, ["store", "verify", str(tmp_path), "--json"])
    assert r.exit_code == code
    got = json.loads(r.stdout)
    assert got == [{"array": f.array, "chunk": f.chunk, "problem": f.problem, "repair": f.repair} for f in findings]


def test_a_store_error_from_verify_is_one_line_exit_2(monkeypatch, tmp_path):
    from crs.foundations.errors import UserError

    _fake(monkeypatch, [])

    def refuse(path, **kw):
        raise UserError(f"{path} is not a CRS store")
    from crs.store import integrity

    monkeypatch.setattr(integrity, "verify", refuse)
    r = runner.invoke(app, ["store", "verify", str(tmp_path)])
    assert r.exit_code == 2 and "is not a CRS store" in r.output
