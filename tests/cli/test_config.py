"""The `crs run` config: schema, errors with key and line, round trip, path resolution."""

import dataclasses
import typing
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from crs.foundations import config as C

ROOT = Path(__file__).resolve().parents[2]


def test_example_file_is_the_built_in_config_and_parses():
    assert (ROOT / "examples" / "crs-run.toml").read_text(encoding="utf-8") == C.EXAMPLE
    cfg = C.parse(C.EXAMPLE)
    assert cfg.encoders.names == ("demo-resnet", "demo-vit", "demo-stats")
    assert cfg.extract.severities == (3,)  # one severity: the demo runs in about a minute
    assert cfg.score.weights == (1 / 3, 1 / 3, 1 / 3)


def test_an_empty_file_is_the_defaults():
    assert C.parse("") == C.Config()


@pytest.mark.parametrize("text, key, line, words", [
    ("[probe]\nseeds = 2\nseedz = 3\n", "probe.seedz", 3, "unknown key"),
    ("store = 'a'\n\n[probez]\nx = 1\n", "probez", 3, "unknown key"),
    ("[probe]\nseeds = \"five\"\n", "probe.seeds", 2, "must be an integer"),
    ("[probe]\nseeds = true\n", "probe.seeds", 2, "must be an integer"),
    ("[probe]\nfractions = [0.1, 0.5]\n", "probe.fractions", 2, "must include 1"),
    ("[probe]\nl2 = [0.1, \"a\"]\n", "probe.l2", 2, "list of numbers"),
    ("[score]\nweights = [1, 1, 1]\n", "score.weights", 2, "sum to 1"),
    ("[score]\nweights = [\"1/2\", \"1/0\", 0]\n", "score.weights", 2, "fraction"),
    ("[extract]\nseverities = [0, 3]\n", "extract.severities", 2, "integers 1..5"),
    ("[extract]\ndtype = \"float64\"\n", "extract.dtype", 2, "'float16', 'float32'"),
    ("[extract]\nfamilies = [\"jpeg\", \"jpeg\"]\n", "extract.families", 2, "'jpeg' twice"),
    ("[extract]\nfamilies = [\"\"]\n", "extract.families", 2, "non-empty names"),
    ("probe.tol = 2.0\n", "probe.tol", 1, "(0, 1)"),
    ("probe = 3\n", "probe", 1, "must be a table"),
    ("[datasets]\nroots = {isic2019 = 1}\n", "datasets.roots", 2, "table of strings"),
    ("[datasets.roots]\n\"isic2019\" = 5\n", "datasets.roots", 1, "table of strings"),
    ("[report]\nenabled = \"yes\"\n", "report.enabled", 2, "true or false"),
    ("\n\n[encoders]\nnames = []\n", "encoders.names", 4, "at least one"),
])
def test_bad_values_name_the_key_and_line(text, key, line, words):
    with pytest.raises(C.ConfigError) as e:
        C.parse(text, "bench.toml")
    assert e.value.key == key and e.value.line == line, str(e.value)
    assert f"bench.toml line {line}: {key}:" in str(e.value) and words in str(e.value)


def test_invalid_toml_says_where():
    with pytest.raises(C.ConfigError, match=r"bench.toml: not valid TOML: .*line 2"):
        C.parse("[probe]\nseeds = \n", "bench.toml")


def test_weights_accept_fractions_and_numbers():
    assert C.parse('[score]\nweights = ["1/2", 0.25, "0.25"]').score.weights == (0.5, 0.25, 0.25)
    assert C.parse("[score]\nweights = [1, 0, 0]").score.weights == (1.0, 0.0, 0.0)


def test_locate_understands_dotted_quoted_and_inline_keys():
    text = ('# [probe]\nstore = "x"  # comment\n[ "probe" ]\n  seeds = 1\n"tol" = 0.1\n'
            '[datasets]\nroots = { isic2019 = "d" }\nscore.bootstrap = 5\n[datasets.roots]\nchexpert = "c"\n')
    assert C.locate(text, ("store",)) == 2
    assert C.locate(text, ("probe",)) == 3
    assert C.locate(text, ("probe", "seeds")) == 4
    assert C.locate(text, ("probe", "tol")) == 5
    assert C.locate(text, ("datasets", "roots", "isic2019")) == 7  # inside an inline table: its key's line
    assert C.locate(text, ("datasets", "score", "bootstrap")) == 8
    assert C.locate(text, ("datasets", "roots", "chexpert")) == 10
    assert C.locate(text, ("report", "out")) is None


def test_locate_skips_multiline_strings():
    text = '[datasets]\nfindings = """\nseeds = 1\n"""\n[probe]\nseeds = 2\n'
    assert C.locate(text, ("probe", "seeds")) == 6


def test_a_one_line_string_holding_triple_quotes_opens_no_multiline_string():
    """image_root = "'''" (found by the wrong-type property test) hid every later key's line."""
    for value in ('"\'\'\'"', "'\"\"\"'", '"""a"""', "'''b'''"):
        text = f"[datasets]\nimage_root = {value}\nallow_absolute_paths = 1\n"
        assert C.locate(text, ("datasets", "allow_absolute_paths")) == 3, value
        with pytest.raises(C.ConfigError) as e:
            C.parse(text, "b.toml")
        assert e.value.line == 3, value


def test_resolve_takes_relative_paths_from_the_config_folder():
    cfg = C.parse('store = "s.zarr"\nresults = "/abs/r"\n[datasets]\nnames = ["csv:data/x.csv"]\n'
                  '[datasets.roots]\nisic2019 = "isic"\n[report]\nout = "rep"\n')
    r = C.resolve(cfg, "/base")
    assert r.store == "/base/s.zarr" and r.results == "/abs/r" and r.report.out == "/base/rep"
    assert r.datasets.names == ("csv:/base/data/x.csv",) and r.datasets.roots == {"isic2019": "/base/isic"}
    assert C.resolve(C.parse('store = "s3://bucket/s.zarr"'), "/base").store == "s3://bucket/s.zarr"


def test_settings_hash_is_stable_and_sensitive():
    assert C.settings_hash({"a": 1, "b": [1, 2]}) == C.settings_hash({"b": [1, 2], "a": 1})
    assert C.settings_hash({"a": 1}) != C.settings_hash({"a": 2})


# ---------------------------------------------------------------- properties
names = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), min_size=1, max_size=12)
ident = st.from_regex(r"[a-z][a-z0-9_]{0,10}", fullmatch=True)


@st.composite
def configs(draw):
    fr = draw(st.lists(st.floats(0.001, 0.999), max_size=4))
    w = draw(st.sampled_from([(1 / 3, 1 / 3, 1 / 3), (1.0, 0.0, 0.0), (0.5, 0.25, 0.25)]))
    return C.Config(
        store=draw(names), results=draw(names),
        encoders=C.Encoders(names=tuple(draw(st.lists(names, min_size=1, max_size=3))),
                            file=draw(st.none() | names), trust_remote_code=draw(st.booleans())),
        datasets=C.Datasets(names=tuple(draw(st.lists(names, min_size=1, max_size=3))),
                            roots=draw(st.dictionaries(names, names, max_size=2)),
                            size=draw(st.floats(0.01, 10)), split_seed=draw(st.integers(-5, 2**40)),
                            uncertain=draw(st.sampled_from(["ignore", "ones", "zeros"])),
                            image_root=draw(st.none() | names),
                            modality=draw(st.none() | st.sampled_from(["dermatology", "radiology"]))),
        extract=C.Extract(perturb=draw(st.booleans()),
                          severities=tuple(draw(st.lists(st.integers(1, 5), min_size=1, max_size=5))),
                          families=tuple(draw(st.lists(names, max_size=3, unique=True))),
                          chunk=draw(st.integers(1, 4096)), device=draw(names)),
        probe=C.Probe(seeds=draw(st.integers(1, 20)), fractions=tuple(fr) + (1.0,),
                      l2=tuple(draw(st.lists(st.floats(1e-8, 1e4), min_size=1, max_size=4))),
                      tol=draw(st.floats(1e-9, 0.5))),
        score=C.Score(reference=draw(names), weights=w, bootstrap=draw(st.integers(1, 10**6))),
        report=C.Report(enabled=draw(st.booleans()), out=draw(st.none() | names)),
    )


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(configs())
def test_any_valid_config_round_trips(cfg):
    assert C.parse(C.to_toml(cfg)) == cfg


def _scalar_fields():
    """(section or None, field name, type) for every setting of the schema."""
    out = []
    for f in dataclasses.fields(C.Config):
        tp = typing.get_type_hints(C.Config)[f.name]
        if dataclasses.is_dataclass(tp):
            out += [(f.name, g.name, typing.get_type_hints(tp)[g.name]) for g in dataclasses.fields(tp)]
        else:
            out.append((None, f.name, tp))
    return out


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cfg=configs(), where=st.sampled_from([None, *C.SECTIONS]), key=ident, data=st.data())
def test_any_unknown_key_is_reported_on_its_line(cfg, where, key, data):
    known = {f.name for f in dataclasses.fields(C.Config if where is None else getattr(C, where.capitalize()))}
    if key in known:
        return
    lines = C.to_toml(cfg).split("\n")
    if where is None:  # top level: before the first table
        at = data.draw(st.integers(0, lines.index("[encoders]")))
    else:
        head = lines.index(f"[{where}]")
        end = next((i for i in range(head + 1, len(lines)) if lines[i].startswith("[")), len(lines))
        at = data.draw(st.integers(head + 1, end))
    lines.insert(at, f"{key} = 1")
    text = "\n".join(lines) + "\n"
    with pytest.raises(C.ConfigError) as e:
        C.parse(text, "b.toml")
    full = key if where is None else f"{where}.{key}"
    assert e.value.key == full and e.value.line == at + 1, (str(e.value), text)


WRONG = {str: 12, int: "12", float: "1.5", bool: 1}


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cfg=configs(), field=st.sampled_from(_scalar_fields()))
def test_any_wrong_type_is_reported_with_key_and_line(cfg, field):
    section, name, tp = field
    base = next(a for a in (typing.get_args(tp) or (tp,)) if a is not type(None))
    bad = C.tomlfile._toml_value(WRONG.get(base, True))  # lists, tables, weights: a boolean is never right
    lines = _drop_table(C.to_toml(cfg).split("\n"), f"[{section}.{name}]")
    cur, at = None, None
    for i, ln in enumerate(lines):  # the field's own line, if the file sets it
        if ln.startswith("["):
            cur = ln.strip("[]")
        if cur == section and ln.startswith(f"{name} = "):
            at = i
    if at is None:  # not set (None or a table): add it at the start of its section
        at = 0 if section is None else lines.index(f"[{section}]") + 1
        lines.insert(at, "")
    lines[at] = f"{name} = {bad}"
    with pytest.raises(C.ConfigError) as e:
        C.parse("\n".join(lines) + "\n", "b.toml")
    key = name if section is None else f"{section}.{name}"
    assert e.value.key == key and e.value.line == at + 1, str(e.value)


def _drop_table(lines, header):
    out, skipping = [], False
    for ln in lines:
        if ln.startswith("["):
            skipping = ln == header
        if not skipping:
            out.append(ln)
    return out
