"""crs.foundations.strata against slow, obvious references (a loop per row)."""

import numpy as np
import pytest

from crs.foundations import strata


def _rarest_positive(labels):
    """Per row: the positive finding with the fewest positive rows (ties: lower index), K for none."""
    counts = (labels == 1).sum(0)
    K = labels.shape[1]
    out = []
    for row in labels:
        positives = [k for k in range(K) if row[k] == 1]
        out.append(min(positives, key=lambda k: (counts[k], k)) if positives else K)
    return np.array(out, dtype=np.int64)


def _rank(counts, index):
    """Position of ``index`` among the class indices sorted by (count, index); len(counts) stays itself."""
    order = sorted(range(len(counts)), key=lambda k: (counts[k], k))
    return len(counts) if index == len(counts) else order.index(index)


@pytest.mark.parametrize("seed", range(20))
def test_strata_and_their_rarity_ranks_match_a_row_by_row_reference(seed):
    rng = np.random.default_rng(seed)
    n, K = int(rng.integers(1, 40)), int(rng.integers(1, 6))
    multi = rng.choice(np.array([-1, 0, 1], dtype=np.int8), size=(n, K), p=[0.2, 0.5, 0.3])
    want = _rarest_positive(multi)
    assert (strata.strata(multi, exclusive=False) == want).all()
    counts = (multi == 1).sum(0)
    assert (strata.rarity_strata(multi) == [_rank(counts, s) for s in want]).all()

    single = rng.integers(0, K, n)
    assert (strata.strata(single, exclusive=True) == single).all()
    counts = np.bincount(single, minlength=single.max() + 1)
    assert (strata.rarity_strata(single) == [_rank(counts, s) for s in single]).all()


def test_finding_set_strata_rank_the_groups_exact_sets_of_findings():
    labels = np.array([[1, 0], [0, 0], [0, 1], [1, 0], [0, 0]], dtype=np.int8)
    groups = np.array([0, 0, 1, 2, 3])  # sets: {0}, {1}, {0}, {}
    got = strata.finding_set_strata(labels, groups, 4)
    # sorted as boolean tuples: (F, F) < (F, T) < (T, F)
    assert got.tolist() == [2, 1, 2, 0]
