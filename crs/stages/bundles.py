"""``crs export``: one site's results as a bundle it can release (docs/export-merge.md).

A bundle holds what ``crs score`` reads and nothing else: the run records, the stored prediction arrays
(log-probabilities) of every condition scored and of the validation split, every row's
labels and splits with their ids hashed under a salt that stays at the site, the fairness record the merge
compares (``site.json``) and a manifest with the sha256 of every file. It is written whole (a temporary
folder, then one rename) and never over a folder that holds anything.
"""

from __future__ import annotations

import hashlib
import json
import re
import secrets
import shutil
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

if TYPE_CHECKING:
    import numpy as np

from crs.foundations import provenance
from crs.foundations.errors import BadInput
from crs.foundations.files import sha256_file
from crs.foundations.names import SPLIT_CODE, VALIDATION

FORMAT = "crs-bundle"
FORMAT_VERSION = 1
MANIFEST = "manifest.json"
SITE_RECORD = "site.json"
SALT_FILE = ".crs-site-salt"  # in RESULTS: never copied into a bundle
SITE_NAME = re.compile(r"^[a-z0-9][a-z0-9_\-]{0,62}$")
SHARED_SPLITS = ("test", "val", "train")  # scoring reads all three: train labels decide which classes count
# dataset attributes that can name files or that the merged store writes anew
PRIVATE_ATTRS = frozenset({"identity", "written", "n_images", "row_order", "source_row", "root", "csv"})
ARRAY_ATTRS_DROPPED = frozenset({"commit", "written"})  # the merged store records its own


class Exported(NamedTuple):
    out: Path  # the bundle (for a dry run: where it would have gone)
    files: list[tuple[str, int]]  # (path inside the bundle, bytes), sorted
    dry_run: bool


def check_site(site: str) -> str:
    if not SITE_NAME.match(site or ""):
        raise BadInput(f"site name {site!r} is not usable: lowercase letters, digits, '_' and '-', starting with a "
                       "letter or digit (it names the site's strata SITE.DATASET); pass e.g. --site hospital-a")
    return site


def check_out(out: Path) -> None:
    """Refuse an --out that exists and is not an empty folder (a bundle or results folder is never overwritten)."""
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise BadInput(f"--out {str(out)!r} exists and is not an empty folder; pass a new path (nothing is "
                       "overwritten)")


def site_salt(results: Path) -> bytes:
    """The results folder's salt for hashing ids, drawn once and kept in RESULTS/.crs-site-salt."""
    path = results / SALT_FILE
    if not path.exists():
        path.write_text(secrets.token_hex(32), encoding="utf-8")
    return bytes.fromhex(path.read_text(encoding="utf-8").strip())


def hashed(values: np.ndarray, salt: bytes) -> np.ndarray:
    """sha256(salt, 0x00, id) as hex: the same id gives the same digest at one site, another at another."""
    import numpy as np
    return np.array([hashlib.sha256(salt + b"\0" + str(v).encode()).hexdigest() for v in values.tolist()], dtype=str)


def publish(tmp: Path, out: Path) -> None:
    """Move the finished folder ``tmp`` to ``out`` in one rename (an empty ``out`` is replaced)."""
    if out.exists():
        out.rmdir()
    tmp.rename(out)


def write_manifest(folder: Path, head: dict) -> list[tuple[str, int]]:
    """manifest.json: ``head`` and the sha256 and size of every other file under ``folder``; the files listed."""
    files = sorted(p for p in folder.rglob("*") if p.is_file() and p.name != MANIFEST)
    listed = {p.relative_to(folder).as_posix(): {"sha256": sha256_file(p), "bytes": p.stat().st_size} for p in files}
    (folder / MANIFEST).write_text(json.dumps({**head, "files": listed}, indent=1, sort_keys=True), encoding="utf-8")
    return [(k, v["bytes"]) for k, v in listed.items()]


def export(results: Path, out: Path, site: str, store: str | None = None, dry_run: bool = False) -> Exported:
    """Write RESULTS' bundle to ``out`` (docs/export-merge.md); with ``dry_run``, list what it would hold."""
    from crs.foundations import records  # polars: crs --help loads no stage

    results, out = Path(results), Path(out)
    check_site(site)
    check_out(out)
    table = records.read(results)
    scored = _site_scores(results)
    opened = _open_store(results, store)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        pairs = sorted(table.select("encoder", "dataset").unique().rows())
        _write_records(results, tmp, pairs)
        _write_predictions(opened, table, tmp, pairs)
        _write_datasets(opened, table, tmp, site_salt(results) if not dry_run else secrets.token_bytes(32))
        record = fairness_record(results, opened, table, scored, site)
        (tmp / SITE_RECORD).write_text(json.dumps(record, indent=1, sort_keys=True, default=str), encoding="utf-8")
        files = write_manifest(tmp, {"format": FORMAT, "format_version": FORMAT_VERSION, "site": site,
                                     "crs_bench": provenance.collect()["crs_bench"]})
        if dry_run:
            shutil.rmtree(tmp)
        else:
            publish(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return Exported(out, files, dry_run)


def _site_scores(results: Path) -> dict:
    path = results / "scores" / "scores.json"
    if not path.is_file():
        raise BadInput(f"no scores under {path.parent}: a bundle carries the site's score settings (CRS version, "
                       f"constants, reference); run `crs score --results {results}` first")
    return json.loads(path.read_text(encoding="utf-8"))["settings"]


def _open_store(results: Path, store: str | None):
    from crs.foundations import records  # polars: crs --help loads no stage
    from crs.store import Store  # zarr: crs --help loads no stage

    found = store or records.recorded_store(results)
    if found is None:
        raise BadInput(f"the run records under {results} name no single store; pass --store with the store the "
                       "probes read")
    return Store(str(found), mode="r")


def _write_records(results: Path, tmp: Path, pairs) -> None:
    """Each pair's run records, values and generation as written, the probe provenance kept, the store path left out."""
    from crs.foundations import records  # polars: crs --help loads no stage

    for encoder, dataset in pairs:
        src = records.path(results, encoder, dataset)
        frame = records.read_checked(src)
        meta = records.metadata(src)
        keep = {records.PROVENANCE: meta[records.PROVENANCE]} if records.PROVENANCE in meta else {}
        records.write_parquet(tmp / records.RUN_RECORDS_DIR / src.name, frame, meta[records.GENERATION], keep)


def _write_predictions(store, table, tmp: Path, pairs) -> None:
    """predictions/DS/ENC/COND.npy (float32 as stored) and .json (its attributes) for every condition scored and
    the validation split."""
    import numpy as np
    import polars as pl  # polars: crs --help loads no stage

    from crs.store import StoreError, condition_key  # zarr: crs --help loads no stage

    for encoder, dataset in pairs:
        conds = table.filter((pl.col("encoder") == encoder) & (pl.col("dataset") == dataset))["condition"]
        folder = tmp / "predictions" / dataset / encoder
        folder.mkdir(parents=True, exist_ok=True)
        for condition in sorted({*conds.unique().to_list(), VALIDATION}):
            try:
                values, attrs = store.read_predictions(dataset, encoder, condition)
            except StoreError:
                if condition == VALIDATION:
                    continue  # scored without temperature scaling at the site too
                raise
            np.save(folder / f"{condition_key(condition)}.npy", values, allow_pickle=False)
            kept = {k: v for k, v in attrs.items() if k not in ARRAY_ATTRS_DROPPED}
            (folder / f"{condition_key(condition)}.json").write_text(json.dumps(kept, sort_keys=True, default=str),
                                                                      encoding="utf-8")


def shared_datasets(table) -> list[str]:
    """The datasets scored and the shift targets their conditions name."""
    from crs.foundations.conditions import parse

    targets = {parse(c).dataset for c in table["condition"].unique().to_list() if parse(c).kind == "shift"}
    return sorted(set(table["dataset"].unique().to_list()) | targets)


def _write_datasets(store, table, tmp: Path, salt: bytes) -> None:
    """datasets/DS/: labels, splits, hashed ids and groups, and counted (not in the failures table) of every row
    (the train labels decide which classes a probe can measure: ``crs.scoring.measurable``); attrs.json without
    what names files."""
    import numpy as np
    for dataset in shared_datasets(table):
        t = store.dataset(dataset)
        n = int(np.isin(t.split, [SPLIT_CODE[s] for s in SHARED_SPLITS]).sum())
        if not np.isin(t.split[:n], [SPLIT_CODE[s] for s in SHARED_SPLITS]).all():
            raise BadInput(f"dataset {dataset!r} in {store.path!r} is not in store order (test, val, train); "
                           f"check the store with `crs store verify {store.path}`")
        folder = tmp / "datasets" / dataset
        folder.mkdir(parents=True, exist_ok=True)
        counted = ~np.isin(np.arange(n), store.excluded_rows(dataset))
        arrays = {"label": np.asarray(t.labels[:n]), "split": np.asarray(t.split[:n], np.int8),
                  "id": hashed(t.ids[:n], salt), "group": hashed(t.group[:n], salt), "counted": counted}
        for name, value in arrays.items():
            np.save(folder / f"{name}.npy", value, allow_pickle=False)
        attrs = {k: v for k, v in t.attrs.items() if k not in PRIVATE_ATTRS}
        (folder / "attrs.json").write_text(json.dumps(attrs, sort_keys=True, default=str), encoding="utf-8")


def fairness_record(results: Path, store, table, scored: dict, site: str) -> dict:
    """What the merge compares across sites (docs/export-merge.md), with the export's provenance."""
    from crs.foundations import records  # polars: crs --help loads no stage
    from crs.scoring.metadata import encoder_metadata  # polars: crs --help loads no stage

    encoders = sorted(table["encoder"].unique().to_list())
    datasets = sorted(table["dataset"].unique().to_list())
    meta = {r.pop("encoder"): r for r in encoder_metadata(store, encoders, datasets).iter_rows(named=True)}
    probe = {}
    for encoder, dataset in sorted(table.select("encoder", "dataset").unique().rows()):
        settings, _ = records.probe_settings(records.path(results, encoder, dataset))
        probe[f"{encoder} × {dataset}"] = settings
    generators = {d: sorted(store.perturbation_generators(d)) for d in datasets}
    score_keys = ("crs_version", "crs_constants", "reference", "weights")
    return {
        "site": site,
        "encoders": {e: {"revision": meta[e]["revision"], "metadata": meta[e]} for e in encoders},
        "datasets": datasets,
        "perturbation_generators": generators,
        "seeds": sorted(int(s) for s in table["seed"].unique().to_list()),
        "fractions": sorted(float(f) for f in table["fraction"].unique().to_list()),
        "probe_settings": probe,
        "score": {**{k: scored.get(k) for k in score_keys}, "bootstrap": scored.get("bootstrap")},
        "provenance": provenance.collect(),
    }
