"""Ranks and the AUROC-versus-CRS comparison (docs/crs-v1.md section 4)."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np


def rank_desc(values: np.ndarray) -> np.ndarray:
    """Ranks [..., n] of values [..., n], 1 = highest; tied values share their average rank.

    rank_i = 1 + #{j : v_j > v_i} + (#{j : v_j = v_i} - 1) / 2, so leading axes
    (bootstrap replicates) are ranked independently without a loop.
    """
    v = np.asarray(values, dtype=float)
    mine = v[..., :, None]  # [..., i, 1]
    other = v[..., None, :]  # [..., 1, j]
    above = (other > mine).sum(axis=-1)
    same = (other == mine).sum(axis=-1)
    return 1.0 + above + (same - 1) / 2.0


def _pair_signs(
    a: np.ndarray, b: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    i, j = np.triu_indices(len(a), k=1)
    return i, j, np.sign(a[i] - a[j]), np.sign(b[i] - b[j])


def kendall_tau_b(a: Sequence[float], b: Sequence[float]) -> float:
    """Kendall's tau-b = (n_c - n_d) / sqrt((n_0 - n_1)(n_0 - n_2)).

    n_0 = n(n-1)/2 pairs, n_c / n_d concordant / discordant pairs, n_1 / n_2 pairs tied
    in a / in b. NaN where either sequence is constant (as scipy.stats.kendalltau).
    """
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if a.shape != b.shape or a.ndim != 1:
        raise ValueError(f"need two 1-d sequences of equal length, got shapes {a.shape}, {b.shape}")
    _, _, sa, sb = _pair_signs(a, b)
    n0 = sa.size
    n1, n2 = int((sa == 0).sum()), int((sb == 0).sum())
    den = math.sqrt((n0 - n1) * (n0 - n2))
    return float((sa * sb).sum() / den) if den > 0 else math.nan


def compare(names: Sequence[str], auroc: Sequence[float], crs: Sequence[float]) -> dict:
    """The AUROC-versus-CRS comparison of docs/crs-v1.md section 4.

    Returns pairs (n(n-1)/2), discordant_pairs (pairs the two orders strictly
    disagree on; a tie in either is not discordant), mean_abs_rank_shift (mean over
    encoders of |AUROC rank - CRS rank|, average ranks for ties), kendall_tau_b, and
    reversed_pairs: [a, b] for every pair where AUROC ranks a above b and CRS ranks b
    above a, listed in AUROC order of a, then of b.
    """
    names = list(names)
    a, c = np.asarray(auroc, dtype=float), np.asarray(crs, dtype=float)
    if not len(names) == a.size == c.size:
        raise ValueError(f"got {len(names)} names, {a.size} AUROC and {c.size} CRS values")
    auroc_rank, crs_rank = rank_desc(a), rank_desc(c)
    i, j, sa, sc = _pair_signs(a, c)
    flipped = sa * sc < 0
    order = {
        e: k
        for k, e in enumerate(sorted(range(len(names)), key=lambda e: (auroc_rank[e], names[e])))
    }
    pairs = []
    for p, r in zip(i[flipped], j[flipped], strict=True):
        hi, lo = (p, r) if a[p] > a[r] else (r, p)
        pairs.append((order[hi], order[lo], [names[hi], names[lo]]))
    n = len(names)
    return {
        "pairs": n * (n - 1) // 2,
        "discordant_pairs": int(flipped.sum()),
        "mean_abs_rank_shift": float(np.abs(auroc_rank - crs_rank).mean()) if n else math.nan,
        "kendall_tau_b": kendall_tau_b(a, c),
        "reversed_pairs": [pair for *_, pair in sorted(pairs)],
    }


def ordinal(place: int) -> str:
    """1 -> '1st', 2 -> '2nd', 3 -> '3rd', 11 -> '11th', 22 -> '22nd'."""
    n = int(place)
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def tie_group(rank_low: float, rank_high: float) -> str | None:
    """The places an encoder's rank interval covers, in words (docs/crs-v1.md section 5).

    Places are whole positions 1, 2, ...; a replicate rank of 1.5 (two encoders tied for
    the top) covers places 1 and 2, so the interval covers places floor(rank_low) to
    ceil(rank_high). One place gives its ordinal ('1st'), several 'tied 1st-2nd': the
    encoder cannot be told apart from those holding the other places of the range.
    None where there is no interval (NaN).
    """
    if not (math.isfinite(rank_low) and math.isfinite(rank_high)):
        return None
    lo, hi = math.floor(rank_low), math.ceil(rank_high)
    if lo > hi:
        raise ValueError(f"rank interval [{rank_low}, {rank_high}] is empty")
    return ordinal(lo) if lo == hi else f"tied {ordinal(lo)}-{ordinal(hi)}"
