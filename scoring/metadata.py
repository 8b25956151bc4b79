"""Each encoder's metadata (revision, licence, cost) from the provenance of its embeddings in the store."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import polars as pl

from crs.foundations.errors import CrsError

METADATA = {  # column: its Polars type; what encoder_metadata reads from an embedding array's provenance
    "revision": pl.String, "licence": pl.String, "gated": pl.Boolean, "parameters": pl.Int64,
    "gflops": pl.Float64, "width": pl.Int64, "images_per_s": pl.Float64, "device": pl.String,
    "revision_expected": pl.Boolean,
}  # fmt: skip


def encoder_metadata(store, encoders: Sequence[str], datasets: Sequence[str]) -> pl.DataFrame:
    """One row per encoder: the ``METADATA`` columns, read from the provenance of its clean embeddings.

    The provenance of (encoder, first dataset of the comparison set)'s clean array: the
    array's attrs["provenance"] where present, else the attrs themselves (stores that
    spread it there). revision = the hub commit actually loaded (``weights.revision_loaded``),
    else 'sha256:<digest>' of a local weights file, else the revision the extraction
    asked for; licence and gated from the encoder spec; parameters, width, images_per_s,
    device and gflops = flops_per_image / 1e9 from ``cost``. Whatever is absent (no store,
    an old store, embeddings not in the store) is null, never an error.
    """
    rows = [{"encoder": e, **_metadata_of(_clean_provenance(store, e, datasets))} for e in encoders]
    return pl.DataFrame(rows, schema={"encoder": pl.String, **METADATA})


def filled(meta: pl.DataFrame, known: Mapping[str, Mapping] | None) -> pl.DataFrame:
    """``meta`` (``encoder_metadata``) with each null cell taken from ``known`` (encoder -> {column: value}: what
    ``crs merge`` recorded of the sites' stores, whose embeddings a merged store does not hold) where it has a value
    of the column's type; the store's own values stay."""
    if not known:
        return meta
    kinds = {pl.String: str, pl.Boolean: bool, pl.Int64: int, pl.Float64: float}
    rows = []
    for row in meta.iter_rows(named=True):
        site = known.get(row["encoder"]) or {}
        rows.append({c: v if v is not None or c == "encoder" else _as(kinds[METADATA[c]], site.get(c))
                     for c, v in row.items()})
    return pl.DataFrame(rows, schema=meta.schema)


def _clean_provenance(store, encoder: str, datasets: Sequence[str]) -> dict:
    read = getattr(store, "embedding_attrs", None)
    if read is None or not datasets:
        return {}
    try:
        attrs = read(datasets[0], encoder, "clean")
    except (KeyError, CrsError):  # absent, or metadata unreadable: decoration only, never a refusal
        return {}
    inner = attrs.get("provenance")
    return inner if isinstance(inner, dict) else dict(attrs)


def _metadata_of(p: dict) -> dict:
    def part(key: str) -> dict:
        value = p.get(key)
        return value if isinstance(value, dict) else {}

    weights, cost, spec = part("weights"), part("cost"), part("encoder_spec")
    sha = weights.get("weights_sha256")
    revision = weights.get("revision_loaded") or (f"sha256:{sha}" if sha else None) or p.get("revision")
    flops = _as(float, cost.get("flops_per_image"))
    return {
        "revision": _as(str, revision),
        "licence": _as(str, spec.get("licence")),
        "gated": _as(bool, spec.get("gated")),
        "parameters": _as(int, cost.get("parameters")),
        "gflops": None if flops is None else flops / 1e9,
        "width": _as(int, cost.get("width", spec.get("width"))),
        "images_per_s": _as(float, cost.get("images_per_s")),
        "device": _as(str, cost.get("device")),
        # pretrained weights from a hub have a revision; random-weight and built-in encoders have none
        "revision_expected": (None if "pretrained" not in spec else
                              bool(spec.get("pretrained")) and spec.get("source") != "builtin"),
    }


def _as(kind, value):
    """``value`` as ``kind`` (str, bool, int or float), None where absent or not of a fitting JSON type."""
    fits = {str: (str,), bool: (bool,), int: (int,), float: (int, float)}[kind]
    if value is None or not isinstance(value, fits) or (kind is not bool and isinstance(value, bool)):
        return None
    return kind(value)
