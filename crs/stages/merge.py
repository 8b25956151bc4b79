"""``crs merge``: several sites' bundles as one results folder that ``crs score`` and ``crs report`` read like
any other (docs/export-merge.md).

Every file is checked against its bundle's manifest, then the sites' fairness records are compared and every
mismatch named (exit 2). Each site's dataset DS becomes the stratum ``SITE.DS``; the merged store holds the
datasets' tables and the prediction arrays only, and the run records name it.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path
from typing import NamedTuple

from crs.foundations import provenance
from crs.foundations.errors import BadInput, UserError
from crs.foundations.names import VALIDATION
from crs.stages.bundles import FORMAT, FORMAT_VERSION, MANIFEST, SITE_RECORD, check_out, publish, sha256_file

STORE_NAME = "store.zarr"
MERGE_RECORD = "merge.json"
STRATUM = "{site}.{dataset}"  # '/' separates the store's groups: a stratum is a dataset name
FAILED = "failed at its site (reason withheld by the bundle)"


class DamagedBundle(UserError):
    """A bundle file whose digest is not the one its manifest records, or that its manifest does not list."""


class UnfairMerge(UserError):
    """Bundles whose results cannot be compared: other revisions, generators, seeds, settings or score versions."""


class Merged(NamedTuple):
    out: Path
    sites: list[str]
    encoders: list[str]  # the encoders every site ran: those merged
    left_out: dict[str, list[str]]  # encoder -> the sites that ran it, for encoders not every site ran
    score: dict  # the score settings every site used (CRS version, constants, reference, weights)


def stratum(site: str, dataset: str) -> str:
    return STRATUM.format(site=site, dataset=dataset)


def verify_bundle(bundle: Path) -> dict:
    """The bundle's manifest once every file matches it; DamagedBundle naming the first file that does not."""
    bundle = Path(bundle)
    try:
        manifest = json.loads((bundle / MANIFEST).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise DamagedBundle(f"{bundle / MANIFEST} does not read ({exc}); is {str(bundle)!r} a bundle written by "
                            "`crs export`? Export it again at its site") from exc
    if manifest.get("format") != FORMAT or manifest.get("format_version") != FORMAT_VERSION:
        raise DamagedBundle(f"{bundle} is not a {FORMAT} of version {FORMAT_VERSION} (its manifest records "
                            f"{manifest.get('format')!r} version {manifest.get('format_version')!r}); export it "
                            "again with this version of crs")
    listed = manifest.get("files", {})
    present = {p.relative_to(bundle).as_posix() for p in bundle.rglob("*") if p.is_file()} - {MANIFEST}
    for name in sorted(present - set(listed)):
        raise DamagedBundle(f"{bundle / name} is not listed in {bundle / MANIFEST}: the bundle was altered after "
                            "export; delete the file or export the bundle again")
    for name, entry in sorted(listed.items()):
        path = bundle / name
        if not path.is_file():
            raise DamagedBundle(f"{path} is listed in {bundle / MANIFEST} and missing: the bundle is incomplete; "
                                "copy it again or export it again")
        if sha256_file(path) != entry["sha256"]:
            raise DamagedBundle(f"{path}: its sha256 is not the one {bundle / MANIFEST} records (the file was altered "
                                "or damaged in transit); copy it again from the site, or export it again")
    return manifest


def mismatches(records: dict[str, dict]) -> list[str]:
    """Every difference between the sites' fairness records (``site.json``) that makes a comparison unfair."""
    found = []

    def compare(what: str, values: dict[str, object]) -> None:
        distinct = {json.dumps(v, sort_keys=True, default=str) for v in values.values()}
        if len(distinct) > 1:
            found.append(f"{what} differ: " + "; ".join(f"{s}: {json.dumps(v, sort_keys=True, default=str)}"
                                                         for s, v in sorted(values.items())))

    names = sorted({e for r in records.values() for e in r["encoders"]})
    for encoder in names:
        ran = {s: r["encoders"][encoder]["revision"] for s, r in records.items() if encoder in r["encoders"]}
        compare(f"the revisions of encoder {encoder!r}", ran)
    compare("the perturbation generators", {s: sorted({g for gs in r["perturbation_generators"].values()
                                                         for g in gs}) for s, r in records.items()})
    compare("the probe seeds", {s: r["seeds"] for s, r in records.items()})
    compare("the label fractions", {s: r["fractions"] for s, r in records.items()})
    compare("the probe settings", {s: sorted({json.dumps(v, sort_keys=True, default=str)
                                              for v in r["probe_settings"].values()}) for s, r in records.items()})
    for key, what in (("crs_version", "the CRS versions"), ("crs_constants", "the CRS constants"),
                      ("reference", "the reference encoders"), ("weights", "the CRS weights")):
        compare(what, {s: r["score"].get(key) for s, r in records.items()})
    return found


def agreed_metadata(records: dict[str, dict], encoders: list[str]) -> dict[str, dict]:
    """encoder -> {column: value} of what the sites' stores recorded of it (``crs.scoring.metadata``: revision,
    licence, cost), for ``crs score`` of the merged folder: a value every site that recorded one agrees on; None
    where sites differ (a throughput or a device is each site's own machine) or none recorded it."""
    out = {}
    for encoder in encoders:
        seen: dict[str, set] = {}
        for record in records.values():
            for column, value in (record["encoders"].get(encoder, {}).get("metadata") or {}).items():
                if value is not None:
                    seen.setdefault(column, set()).add(json.dumps(value, sort_keys=True))
        out[encoder] = {c: json.loads(next(iter(v))) if len(v) == 1 else None for c, v in sorted(seen.items())}
    return out


def merge(bundles: list[Path], out: Path) -> Merged:
    """Merge ``bundles`` into the results folder ``out`` (docs/export-merge.md)."""
    out = Path(out)
    if not bundles:
        raise BadInput("no bundle given; pass one or more folders written by `crs export`")
    check_out(out)
    sites: dict[str, tuple[Path, dict, dict]] = {}
    for bundle in map(Path, bundles):
        manifest = verify_bundle(bundle)
        record = json.loads((bundle / SITE_RECORD).read_text(encoding="utf-8"))
        site = record["site"]
        if site in sites:
            raise BadInput(f"two bundles are of site {site!r} ({sites[site][0]} and {bundle}); merge one bundle a "
                           "site, or export one of them again with another --site")
        sites[site] = (bundle, manifest, record)
    unfair = mismatches({s: r for s, (_, _, r) in sites.items()})
    if unfair:
        raise UnfairMerge("these bundles cannot be compared fairly: " + " | ".join(unfair) + ". Score every site "
                          "with the same encoders, perturbation generator, probe settings and `crs score` settings, "
                          "then export again")
    ran = {e: sorted(s for s, (_, _, r) in sites.items() if e in r["encoders"])
           for _, _, r in sites.values() for e in r["encoders"]}
    common = sorted(e for e, where in ran.items() if len(where) == len(sites))
    if not common:
        raise BadInput(f"no encoder was run at every site ({json.dumps(ran, sort_keys=True)}); probe at least one "
                       "encoder at every site")
    left_out = {e: where for e, where in sorted(ran.items()) if e not in common}
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        _write_merged(tmp, sites, common)
        first = next(iter(sites.values()))[2]["score"]
        score = {k: first.get(k) for k in ("crs_version", "crs_constants", "reference", "weights")}
        (tmp / MERGE_RECORD).write_text(json.dumps({
            "sites": {s: {"bundle_manifest_sha256": sha256_file(b / MANIFEST)} for s, (b, _, _) in sites.items()},
            "encoders": common, "left_out": left_out, "score": score, "provenance": provenance.collect(),
            "encoder_metadata": agreed_metadata({s: r for s, (_, _, r) in sites.items()}, common)},
            indent=1, sort_keys=True, default=str), encoding="utf-8")
        publish(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return Merged(out, sorted(sites), common, left_out, score)


def _write_merged(tmp: Path, sites: dict, common: list[str]) -> None:
    from crs.store import Store  # zarr: crs --help loads no stage

    store = Store(str(tmp / STORE_NAME), "a")
    for site, (bundle, _, _) in sorted(sites.items()):
        for folder in sorted((bundle / "datasets").iterdir()):
            _write_dataset(store, site, folder)
        for folder in sorted((bundle / "predictions").iterdir()):
            for encoder in common:
                if (folder / encoder).is_dir():
                    _write_pair_predictions(store, site, folder.name, encoder, folder / encoder)
        _write_site_records(tmp, site, bundle, common)


def _renamed(site: str, condition: str) -> str:
    from crs.foundations.conditions import parse, shift

    if condition == VALIDATION:
        return condition
    c = parse(condition)
    return shift(stratum(site, c.dataset)) if c.kind == "shift" else condition


def _write_dataset(store, site: str, folder: Path) -> None:
    import numpy as np

    from crs.store import DatasetTable  # zarr: crs --help loads no stage

    arrays = {k: np.load(folder / f"{k}.npy", allow_pickle=False) for k in ("label", "split", "id", "group",
                                                                             "counted")}
    attrs = json.loads((folder / "attrs.json").read_text(encoding="utf-8"))
    for key in ("shift_target", "target_of"):
        if isinstance(attrs.get(key), str):
            attrs[key] = stratum(site, attrs[key])
    name = stratum(site, folder.name)
    store.write_dataset(DatasetTable(arrays["id"], arrays["label"], arrays["split"], arrays["group"], name=name,
                                     attrs=attrs))
    failed = arrays["id"][~arrays["counted"]]
    if failed.size:
        store.add_failures(name, failed, [""] * failed.size, [FAILED] * failed.size)


def _write_pair_predictions(store, site: str, dataset: str, encoder: str, folder: Path) -> None:
    import numpy as np

    from crs.foundations import records  # polars: crs --help loads no stage
    from crs.store.layout import key_condition  # zarr: crs --help loads no stage

    name, conditions, generation = stratum(site, dataset), [], None
    for path in sorted(folder.glob("*.npy")):
        attrs = json.loads(path.with_suffix(".json").read_text(encoding="utf-8"))
        condition = _renamed(site, key_condition(path.stem))
        attrs.pop("condition", None)
        store.write_predictions(name, encoder, condition, np.load(path, allow_pickle=False), attrs)
        conditions.append(condition)
        generation = attrs.get(records.PREDICTION_GENERATION)
    store.commit_predictions(name, encoder, generation, conditions)


def _write_site_records(tmp: Path, site: str, bundle: Path, common: list[str]) -> None:
    """The site's run records of the common encoders, datasets and shift conditions renamed, naming the merged
    store; generation and probe provenance as the site wrote them."""
    import polars as pl  # polars: crs --help loads no stage

    from crs.foundations import records  # polars: crs --help loads no stage

    for src in sorted((bundle / records.RUN_RECORDS_DIR).glob("*.parquet")):
        frame = records.read_checked(src)
        encoder, dataset = frame["encoder"][0], frame["dataset"][0]
        if encoder not in common:
            continue
        meta = records.metadata(src)
        renamed = frame.with_columns(
            pl.lit(stratum(site, dataset)).alias("dataset"),
            pl.col("condition").map_elements(lambda c: _renamed(site, c), return_dtype=pl.String))
        keep = {k: meta[k] for k in (records.PROVENANCE,) if k in meta}
        records.write_parquet(records.path(tmp, encoder, stratum(site, dataset)), renamed, meta[records.GENERATION],
                              {**keep, records.STORE: STORE_NAME})
