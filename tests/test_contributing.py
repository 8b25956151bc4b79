"""CONTRIBUTING.md's worked examples run as written.

A block follows a marker line ``<!-- example: NAME -->`` (``file=PATH`` where the block is a
file the commands read). Each test writes the example's file blocks into a fresh folder, runs
every ``crs ...`` line of its command blocks through typer's CliRunner (exit 0 required), or
executes its Python block against the registry it extends, then checks that the new item is
usable: the encoder lists and embeds at its declared width, the dataset checks and extracts,
the perturbation changes an image the same way every time, the axis is computed.

Only public names are used: the command line, the registries and their record types. The
registries the Python examples extend are copies, so no other test sees the new items.
"""

import functools
import json
import re
import shlex
import tomllib
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from typer.testing import CliRunner

from crs.cli import app

ROOT = Path(__file__).resolve().parents[1]
GUIDE = (ROOT / "CONTRIBUTING.md").read_text(encoding="utf-8")
MARKED = re.compile(r"^<!-- example: (\S+)(?: file=(\S+))? -->\n```(\w*)\n(.*?)^```", re.S | re.M)


def examples() -> dict[str, list[tuple[str | None, str, str]]]:
    """name -> its blocks in order, each (file or None, language, text)."""
    out: dict[str, list] = {}
    for name, file, lang, text in MARKED.findall(GUIDE):
        out.setdefault(name, []).append((file or None, lang, text))
    return out


EXAMPLES = examples()


def block(name: str, *, file: bool = False, lang: str | None = None) -> tuple[str | None, str]:
    """(file, text) of the one block of example ``name`` that is (or is not) a file, of language ``lang``."""
    found = [(f, t) for f, lg, t in EXAMPLES[name] if bool(f) == file and (lang is None or lg == lang)]
    assert len(found) == 1, f"CONTRIBUTING.md: example {name!r} should have one such block, has {len(found)}"
    return found[0]


def run_commands(text: str) -> list[str]:
    """Run each `crs ...` line of a command block; their outputs, in order."""
    lines = [ln.strip() for ln in re.sub(r"\\\n\s*", " ", text).splitlines() if ln.strip()]
    assert lines and all(ln.startswith("crs ") for ln in lines), lines
    outputs = []
    for line in lines:
        r = CliRunner().invoke(app, shlex.split(line)[1:])
        assert r.exit_code == 0, f"CONTRIBUTING.md: {line!r} exited {r.exit_code}\n{r.output}"
        outputs.append(r.output)
    return outputs


def embedding_shape(store: Path, dataset: str, encoder: str, condition: str = "clean") -> list[int]:
    """The stored shape [image, width] of one embedding array, read from its Zarr v3 metadata."""
    meta = store / "datasets" / dataset / "embeddings" / encoder / condition / "x" / "zarr.json"
    return json.loads(meta.read_text())["shape"]


def test_the_guide_has_the_five_examples():
    assert set(EXAMPLES) == {"encoder", "dataset", "perturbation", "axis", "version"}


def test_an_encoder_file_record_lists_and_embeds_at_its_width(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    name, toml_text = block("encoder", file=True)
    Path(name).write_text(toml_text, encoding="utf-8")
    (record,) = tomllib.loads(toml_text)["encoder"]
    _, commands = block("encoder")
    listing, _, info = run_commands(commands)
    assert record["name"] in listing and record["name"] in info
    assert embedding_shape(Path("try.zarr"), "demo_derm", record["name"])[1] == record["width"]


def test_a_csv_dataset_checks_and_extracts(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    name, csv_text = block("dataset", file=True)
    Path(name).write_text(csv_text, encoding="utf-8")
    from PIL import Image

    rows = pl.read_csv(Path(name))
    for i, path in enumerate(rows["path"]):  # a tiny image for every row the CSV names
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        pixels = np.random.default_rng(i).integers(0, 256, (24, 24, 3), dtype=np.uint8)
        Image.fromarray(pixels).save(path)
    _, commands = block("dataset")
    check, _, info = run_commands(commands)
    dataset = Path(name).stem
    assert "usable" in check and dataset in info
    store = Path("lesions.zarr")
    assert embedding_shape(store, dataset, "demo-stats")[0] == rows.height
    perturbed = [p.name for p in (store / "datasets" / dataset / "embeddings" / "demo-stats").iterdir()
                 if "@" in p.name]
    assert perturbed and all(p.endswith("@3") for p in perturbed)


def test_a_perturbation_family_is_registered_and_deterministic():
    import torch

    from crs.extract import perturb
    from crs.foundations.conditions import parse

    registry: dict = {}
    _, code = block("perturbation", lang="python")
    exec(code, {"family": functools.partial(perturb.family, registry=registry), "torch": torch,
                "Seeds": perturb.Seeds})
    (name,) = registry
    fam = registry[name]
    assert name not in perturb.FAMILIES and len(fam.values) == 5
    condition = f"{name}@3"
    assert parse(condition).family == name
    x = torch.rand(3, 3, 16, 16, generator=torch.Generator().manual_seed(0))
    ids = ["img-a", "img-b", "img-c"]
    y = fam.fn(x.clone(), fam.values[2], perturb.Seeds(ids, condition))
    assert y.shape == x.shape and float(y.min()) >= 0 and float(y.max()) <= 1
    assert not torch.equal(y, x)
    assert torch.equal(y, fam.fn(x.clone(), fam.values[2], perturb.Seeds(ids, condition)))
    # one image alone gets what it got in the batch: the draws follow the image, not its position
    assert torch.equal(y[1:2], fam.fn(x[1:2].clone(), fam.values[2], perturb.Seeds(ids[1:2], condition)))


def test_an_axis_is_registered_and_computed(monkeypatch):
    from crs.scoring import axes

    monkeypatch.setattr(axes, "REGISTRY", dict(axes.REGISTRY))
    _, code = block("axis", lang="python")
    exec(code, {"register": axes.register, "Axis": axes.Axis, "pl": pl, "np": np, "retain_array": axes.retain_array})
    (new,) = set(axes.REGISTRY) - set(axes.AXES)
    monkeypatch.setattr(axes, "AXES", tuple(axes.REGISTRY))

    # one run: D = 0.9; two perturbed conditions retain (0.85 - 0.5) / 0.4 and (0.7 - 0.5) / 0.4
    records = pl.DataFrame({
        "encoder": ["e"] * 4, "dataset": ["d"] * 4, "seed": [0] * 4,
        "fraction": [1.0, 0.5, 1.0, 1.0],
        "condition": ["clean", "clean", "gaussian_noise@1", "gaussian_noise@2"],
        "auroc": [0.9, 0.8, 0.85, 0.7], "ece": [0.1] * 4,
    })
    table = axes.axes_by_seed(records)
    assert table.columns[3:3 + len(axes.AXES)] == list(axes.AXES)
    assert table[new][0] == pytest.approx(0.5) and table["robustness"][0] == pytest.approx(0.6875)

    arrays = axes.AxisArrays(d=np.array([0.9]), ece=np.array([0.1]), low_fraction=np.array([[0.8]]),
                             perturbed=np.array([[0.85, 0.7]]), shift=None)
    from_arrays = axes.axes_from(arrays)[0]
    assert from_arrays.shape == (len(axes.AXES),)
    np.testing.assert_allclose(from_arrays, table.select(axes.AXES).row(0), rtol=1e-12)


def test_a_crs_version_is_one_module_and_a_registry_entry(monkeypatch):
    from crs.scoring import crs as core
    from crs.scoring.versions import registry, v1, v2

    _, code = block("version", lang="python")
    module: dict = {}
    exec(code, module)
    definitions = registry.registry([v1.DEFINITION, v2.DEFINITION, module["DEFINITION"]])
    monkeypatch.setattr(registry, "DEFINITIONS", definitions)
    monkeypatch.setattr(registry, "VERSIONS", tuple(definitions))

    assert registry.constants("3")["q_floor"] == 0.5 and registry.get("3").docs_path == "docs/crs-v3.md"
    x = np.random.default_rng(0).uniform(0.3, 1.0, (4, 2, 4))  # [encoder, dataset, axis]
    v3, same = core.score(x, "median", version="3"), core.score(x, "median", version="2")
    assert np.all(np.abs(v3.q_dataset) <= np.abs(same.q_dataset) + 1e-12) and not np.allclose(v3.crs, same.crs)
    assert "max(1 − x_ref, 0.5)" in registry.get("3").words.q(registry.constants("3"))
    with pytest.raises(ValueError, match="defined twice"):
        registry.registry([*definitions.values(), module["DEFINITION"]])
