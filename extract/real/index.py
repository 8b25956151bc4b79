"""A layout reader's result (``Index``) and the helpers readers share: reading a CSV with file and line
columns, reporting problems by line, checking codings, and the chest X-ray label policies."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import polars as pl

from crs.foundations.errors import UserError

UNCERTAIN = ("ignore", "ones", "zeros")

COMPETITION = ("Atelectasis", "Cardiomegaly", "Consolidation", "Edema", "Pleural Effusion")
CHEXPERT_FINDINGS = (
    "No Finding", "Enlarged Cardiomediastinum", "Cardiomegaly", "Lung Opacity", "Lung Lesion", "Edema",
    "Consolidation", "Pneumonia", "Atelectasis", "Pneumothorax", "Pleural Effusion", "Pleural Other",
    "Fracture", "Support Devices",
)

SHOWN_PER_KIND = 5  # problems of one kind listed before a summary line
MISSING = ("", "na", "nan", "n/a")  # a label cell holding one of these (any case, spaces around) is missing


class DatasetError(UserError, ValueError):
    """A dataset folder or CSV that cannot be used as given (exit code 2)."""


@dataclass(frozen=True)
class Problem:
    file: str  # relative to the dataset root where it lies under it
    line: int | None  # 1-based line of the file (the header is line 1); None: the whole file
    message: str  # what is wrong and what was expected
    fatal: bool = True  # False: a warning; the folder stays usable

    def __str__(self) -> str:
        where = f"{self.file}:{self.line}" if self.line is not None else self.file
        return f"{where}: {self.message}"


@dataclass
class Index:
    """A layout reader's result; ``frame`` is None when the CSV files could not be read."""

    frame: pl.DataFrame | None  # id, path, group, split (str|null), label | y0..yK-1, file, line
    problems: list[Problem] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    named: pl.Series | None = None  # every image path any row names, used or not (for extra files)
    files: list[str] = field(default_factory=list)  # the CSV files read
    classes: tuple[str, ...] | None = None  # set by readers whose classes come from the data (csv)

    @property
    def fatal(self) -> list[Problem]:
        return [p for p in self.problems if p.fatal]


# ------------------------------------------------------------------ reading helpers


def read_checked_csv(root: Path, rel: str, required: Sequence[str], idx: Index,
                     optional: Sequence[str] = ()) -> pl.DataFrame | None:
    """Every value as a string (codings are checked exactly), plus file and line columns."""
    path = root / rel
    if not path.is_file():
        what = "not a regular file (a FIFO, device or folder)" if path.exists() else "missing"
        idx.problems.append(Problem(rel, None, f"{what}; expected {path} (the file as it ships)"))
        return None
    try:
        header = pl.read_csv(path, n_rows=0, infer_schema=False).columns
    except Exception as exc:
        idx.problems.append(Problem(rel, None, f"cannot be read as CSV ({exc}); expected the file as it ships"))
        return None
    missing = [c for c in required if c not in header]
    if missing:
        idx.problems.append(Problem(rel, 1, f"missing column(s) {', '.join(map(repr, missing))}; expected "
                                             f"the columns {', '.join(required)}"))
        return None
    idx.files.append(rel)
    keep = [c for c in header if c in set(required) | set(optional)]
    try:
        df = pl.read_csv(path, columns=keep, infer_schema=False)
    except Exception as exc:
        idx.problems.append(Problem(rel, None, f"cannot be read as CSV ({exc})"))
        return None
    return df.with_row_index("line", offset=2).with_columns(pl.col("line").cast(pl.Int64), file=pl.lit(rel))


def report_rows(idx: Index, bad: pl.DataFrame, message: Callable[[dict], str], summary: str,
                fatal: bool = True) -> None:
    """One problem for each of the first rows of ``bad`` (which has file, line), then a count."""
    for row in bad.head(SHOWN_PER_KIND).iter_rows(named=True):
        idx.problems.append(Problem(row["file"], row["line"], message(row), fatal))
    if bad.height > SHOWN_PER_KIND:
        idx.problems.append(Problem(bad["file"][0], None, f"{bad.height - SHOWN_PER_KIND} more rows: {summary}", fatal))


def check_codes(df: pl.DataFrame, cols: Sequence[str], allowed: Sequence[float], blank_ok: bool, idx: Index) -> None:
    names = ", ".join(f"{v:g}" for v in allowed) + (" or blank" if blank_ok else "")
    for c in cols:
        value = pl.col(c).str.strip_chars().cast(pl.Float64, strict=False)
        ok = value.is_in(list(allowed)).fill_null(False)
        if blank_ok:
            ok = ok | pl.col(c).is_null() | (pl.col(c).str.strip_chars() == "")  # quoted "" is blank too
        bad = df.filter(~ok)
        report_rows(idx, bad, lambda r, c=c: f"column {c!r} holds {r[c]!r}; expected {names}",
                    f"values in column {c!r} outside {names}")


def check_unique(df: pl.DataFrame, key: str, what: str, idx: Index) -> None:
    bad = df.filter(pl.col(key).is_duplicated()).sort(key, "line")
    report_rows(idx, bad, lambda r: f"duplicate {what} {r[key]!r}; expected each {what} once",
                f"duplicate {what}s")


def _policy(col: str, uncertain: str, blank: int) -> pl.Expr:
    """A 1/0/-1/blank coded column as int8 under the uncertain-label policy."""
    v = pl.col(col).str.strip_chars().cast(pl.Float64, strict=False)
    u = {"ignore": -1, "ones": 1, "zeros": 0}[uncertain]
    return (pl.when(v.is_null()).then(blank).when(v == -1).then(u).otherwise(v)).cast(pl.Int8)


def label_columns(findings: Sequence[str], uncertain: str, blank: int) -> list[pl.Expr]:
    return [_policy(f, uncertain, blank).alias(f"y{k}") for k, f in enumerate(findings)]


# ------------------------------------------------------------------ the layout record
@dataclass(frozen=True)
class Layout:
    name: str
    task: str
    classes: tuple[str, ...]
    ordinal: bool
    modality: str
    shift_target: str | None
    root_holds: str  # what --root must contain
    source: str  # where the data comes from and under which terms
    description: str
    read: Callable[..., Index]
