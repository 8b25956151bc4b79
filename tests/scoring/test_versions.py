"""The CRS versions are objects in one registry (crs.scoring.versions): nothing outside it compares a version's
number, the registry refuses a number given twice or one it lacks, and every definition is whole."""

from __future__ import annotations

import ast
from pathlib import Path

import numpy as np
import pytest

from crs.foundations import names
from crs.foundations.errors import BadInput
from crs.scoring import versions
from crs.scoring.versions import v1, v2
from crs.scoring.versions.registry import registry

ROOT = Path(__file__).resolve().parents[2]
PRODUCT = ("crs", "extract", "probe", "scoring", "store")
OWN = ROOT / "scoring" / "versions"
NUMBERS = {1, 2, "1", "2"}


def _name(node: ast.AST) -> str:
    """What a compared expression is called: a name, an attribute, a call's function or a subscript's key."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    if isinstance(node, ast.Call):
        return _name(node.func)
    if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant):
        return str(node.slice.value)
    return ""


def _number(node: ast.AST) -> bool:
    if isinstance(node, ast.Constant):
        return node.value in NUMBERS
    if isinstance(node, ast.Tuple | ast.List | ast.Set):
        return any(_number(e) for e in node.elts)
    return False


def version_comparisons(source: str) -> list[int]:
    """The lines of ``source`` that compare something named like a version (crs_version, version,
    check_version(...), settings["crs_version"]) with a literal 1 or 2 (==, !=, in, >=, ...)."""
    lines = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            if any("version" in _name(s).lower() for s in sides) and any(_number(s) for s in sides):
                lines.append(node.lineno)
    return lines


def test_no_module_outside_the_registry_compares_a_crs_version():
    found = [f"{f.relative_to(ROOT)}:{line}" for folder in PRODUCT for f in sorted((ROOT / folder).rglob("*.py"))
             if OWN not in f.parents for line in version_comparisons(f.read_text())]
    assert found == []


@pytest.mark.parametrize("source", [
    'if version == "1": pass', "x = None if check_version(v) != '1' else 2", 'ok = s["crs_version"] in ("2",)',
    "if options.crs_version >= 2: pass", 'if "1" == crs_version: pass',
])
def test_the_finder_finds_a_version_comparison(source):
    assert version_comparisons(source) == [1]


def test_the_finder_leaves_other_comparisons_alone():
    assert version_comparisons('if version != SCHEMA_VERSION: pass\nif n == 1: pass\nif d.number == v: pass') == []


def test_the_registry_refuses_a_number_given_twice():
    with pytest.raises(ValueError, match="CRS version '2' is defined twice"):
        registry([v1.DEFINITION, v2.DEFINITION, v2.DEFINITION])


@pytest.mark.parametrize("bad", ["3", 0, "v2", "", None])
def test_an_unknown_version_is_refused_naming_the_versions(bad):
    with pytest.raises(BadInput, match=r"CRS version must be one of 1, 2, got .*docs/crs-v1.md, docs/crs-v2.md"):
        versions.get(bad)


def test_a_version_is_taken_as_crs_records_it():
    assert [versions.check(v) for v in ("1", 1, 2.0, " 2 ", "2.0")] == ["1", "1", "2", "2", "2"]
    assert versions.get(1) is v1.DEFINITION and versions.get("2") is v2.DEFINITION


def test_the_shared_names_are_the_registrys():
    """crs.foundations.names keeps the versions for the settings schema, which may not import a stage: the
    registry's."""
    assert names.CRS_VERSIONS == versions.VERSIONS == ("1", "2")
    assert names.CRS_LATEST == versions.LATEST and versions.LATEST in versions.VERSIONS


@pytest.mark.parametrize("number", versions.VERSIONS)
def test_every_definition_is_whole(number):
    d = versions.get(number)
    assert d.number == number and (ROOT / d.docs_path).is_file()
    assert versions.constants(number) == dict(d.constants)
    recorded = versions.constants(number)
    for words in (d.words.q, d.words.calibration, d.words.worst, d.words.balance):
        assert isinstance(words(recorded), str) and words(recorded)
    x = np.random.default_rng(0).uniform(0.4, 1.0, (3, 2, 4))  # [encoder, dataset, axis]
    q = d.q(x, "median").mean(axis=-2)
    parts = d.components(q, None)
    assert len(parts) == 3 and all(p.shape == (3,) and np.all((p >= 0) & (p <= 1)) for p in parts)


def test_v1_has_no_constants_and_v2_records_its_own():
    assert versions.constants("1") == {}
    assert versions.constants("2") == {"q_floor": v2.Q_FLOOR, "dominance_scale": v2.DOMINANCE_SCALE,
                                       "worst_scale": v2.WORST_SCALE, "kink_scale": v2.KINK_SCALE,
                                       "reference_scale": v2.REFERENCE_SCALE, "noise_floor": v2.NOISE_FLOOR,
                                       "balance_offset": v2.BALANCE_OFFSET, "calibration_scale": v2.CALIBRATION_SCALE}
    with pytest.raises(TypeError):
        v2.DEFINITION.constants["q_floor"] = 1.0  # a definition cannot be changed in place
