"""The warnings a score gives about what its numbers rest on (tied predictions, replicates without a CRS, few
seeds: each says what to do), and its notes (off-centre intervals: how to read a number, with nothing to do)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import polars as pl

from crs.scoring.axes import AXES
from crs.scoring.bootstrap import incomplete, interval, seed_scale, unit_words
from crs.scoring.versions import LATEST, get

SHIFT_WARN = 0.5  # half-widths: mean replicate vs estimate (shifted_axis_notes)


TIE_SHARE_WARN = 0.5  # above this share of tied test predictions an AUROC says little about ranking


TIES_LISTED = 8  # conditions named per (encoder, dataset) in a tie warning


def tie_warnings(records: pl.DataFrame, limit: float = TIE_SHARE_WARN) -> list[str]:
    """One warning per (encoder, dataset) whose AUROC rests mostly on ties, from the run records' ``tie_share``.

    ``tie_share`` (written by the probe; run records without it give no
    warning) is the share of a condition's test predictions tied with another image's;
    a condition is named where its largest share over seeds and fractions exceeds ``limit``.
    """
    if "tie_share" not in records.columns:
        return []
    worst = (
        records.filter(pl.col("tie_share").is_not_null() & ~pl.col("tie_share").is_nan())
        .group_by("encoder", "dataset", "condition")
        .agg(pl.col("tie_share").max())
        .filter(pl.col("tie_share") > limit)
        .sort(["encoder", "dataset", "tie_share", "condition"], descending=[False, False, True, False])
    )
    out = []
    for (encoder, dataset), g in worst.group_by("encoder", "dataset", maintain_order=True):
        named = [f"{r['condition']} {r['tie_share']:.0%}" for r in g.head(TIES_LISTED).iter_rows(named=True)]
        more = f" and {g.height - TIES_LISTED} more" if g.height > TIES_LISTED else ""
        out.append(
            f"{encoder} on {dataset}: the AUROC rests mostly on tied test predictions (share of tied "
            f"predictions above {limit:.0%}: {', '.join(named)}{more}); its ranking of these images is "
            "largely arbitrary, so read those AUROC values, and the axes built on them, with care"
        )
    return out


def shifted_axis_notes(axis_reps: np.ndarray, axis_point: np.ndarray, encoders: Sequence[str],
                       limit: float = SHIFT_WARN, version: str = LATEST) -> list[str]:
    """A note per axis whose replicates sit off the estimate: mean(replicates) - estimate beyond ``limit``
    half-widths of the 95 % interval, for the encoder where it is largest. A note, not a warning: it says how
    to read an interval, and there is nothing for the user to change (the report and scores.json carry it,
    the command line shows it with --verbose).

    A percentile interval then covers what the estimator gives at this test size, not the population value:
    docs/bootstrap-coverage.md measured it for C, whose binned ECE is biased upwards on small test sets
    (shift about -1 half-width for C, at most 0.3 for D, L and R; this limit separates them). A CRS ``version``
    whose C has another estimator names that estimator's cause instead (``Words.calibration_shift``: v2's C is
    debiased and its replicates recentred).
    """
    notes: list[str] = []
    if axis_reps.shape[0] < 2:
        return notes
    with np.errstate(invalid="ignore"):
        low, high = interval(axis_reps)  # [encoder, axis]
        half = (high - low) / 2
        shift = (np.nanmean(axis_reps, axis=0) - axis_point) / np.where(half > 0, half, np.nan)
    for k, a in enumerate(AXES):
        col = np.abs(shift[:, k])
        if not np.isfinite(col).any() or np.nanmax(col) <= limit:
            continue
        e = int(np.nanargmax(col))
        notes.append(
            f"the {a} intervals are off-centre: the bootstrap replicates of {encoders[e]} sit "
            f"{shift[e, k]:+.2f} half-widths from its estimate{_why_shifted(a, version)}; read the {a} interval "
            "with that in mind"
        )
    return notes


def calibration_above_one_notes(axis_point: np.ndarray, encoders: Sequence[str], version: str = LATEST) -> list[str]:
    """A note naming the encoders whose C estimate lies above 1, where the version's C may (``Calibration.unclipped``,
    v2's 1 - kappa S): S is estimated without bias, so for a well calibrated encoder it falls below 0 about half
    the time. A note, not a warning: nothing is wrong and nothing is to be done."""
    if not get(version).calibration.unclipped:
        return []
    c = np.asarray(axis_point, dtype=float)[:, AXES.index("calibration")]
    above = [f"{encoders[e]} ({c[e]:.3f})" for e in np.flatnonzero(c > 1.0)]
    if not above:
        return []
    return [f"calibration above 1 for {', '.join(above)}: C is 1 − κ S with S, the squared calibration error, "
            "estimated without bias, so for a well calibrated encoder S's estimate falls below 0 about half the "
            "time; read C at or above 1 as no calibration error detectable at this test size"]


def _why_shifted(axis: str, version: str) -> str:
    """What an off-centre axis interval means and its known cause, in the warning's words: the version's own
    words for C where it has them (``Words.calibration_shift``), else those of v1's binned ECE."""
    own = get(version).words.calibration_shift
    if axis == "calibration" and own is not None:
        return f" ({own})"
    return (", so they cover what the estimator gives at this test-set size rather than the population value "
            f"({_known_cause(axis)})")


def _known_cause(axis: str) -> str:
    """The known cause of an off-centre axis interval under v1's definitions."""
    if axis == "calibration":
        return "docs/bootstrap-coverage.md: the binned ECE behind calibration is biased upwards on small test sets"
    return ("docs/bootstrap-coverage.md measured such a shift only for calibration; here it may be chance, as with "
            "few bootstrap replicates, or a bias of this axis's statistic on a small test set")


def say_if_no_interval(reps, x_boot: np.ndarray, datasets: Sequence[str], unit: str, warnings: list[str]) -> None:
    """A warning when some replicate has no CRS, so the intervals are empty and no best set (tier) is given."""
    bad = incomplete(reps)
    if not bad.any():
        return
    where = ~np.isfinite(x_boot[bad]).all(axis=(0, 1, 3))  # [dataset]: a replicate without an axis value there
    names = [d for d, b in zip(datasets, where, strict=True) if b] or list(datasets)
    warnings.append(
        f"{int(bad.sum())} of {bad.size} bootstrap replicates ({unit_words(unit)}) have no CRS: the test split of "
        f"{', '.join(names)} is too small for that bootstrap (a draw left no class with both positive "
        "and negative images to score), so the CRS and rank intervals and P(rank 1) are empty and no "
        "set for the best encoder (tier) is given; use `--bootstrap-unit seed` or a larger test split"
    )


FEW_SEEDS = 5  # below this the seed part of an interval is widened more than 1.6 times


def say_if_few_seeds(n_seeds: int, unit: str, warnings: list[str]) -> None:
    """A warning when the seed draw has so few seeds that its widening (``bootstrap.seed_scale``) dominates."""
    if unit == "image" or not 1 < n_seeds < FEW_SEEDS:
        return
    warnings.append(
        f"only {n_seeds} seeds: the seed part of every interval is widened {seed_scale(n_seeds):.2f} times for so "
        f"few, so the CRS and label-efficiency intervals are wide; probe {FEW_SEEDS} or more seeds "
        f"(`crs probe --seeds {FEW_SEEDS}`) to narrow them"
    )
