import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from crs.probe import subsets

FRACTIONS = [0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1.0]


@settings(max_examples=30, deadline=None)
@given(st.integers(0, 1000), st.integers(20, 400), st.integers(2, 6))
def test_nested_stratified_and_deterministic(seed, n, K):
    rng = np.random.default_rng(seed)
    y = rng.choice(K, size=n, p=np.arange(1, K + 1) / np.arange(1, K + 1).sum())
    m = subsets.subset_masks(y, "multiclass", [0, 1], FRACTIONS)
    assert m.shape == (2, len(FRACTIONS), n)
    assert np.array_equal(m, subsets.subset_masks(y, "multiclass", [0, 1], FRACTIONS))
    for s in range(2):
        for j in range(1, len(FRACTIONS)):
            assert np.all(m[s, j - 1] <= m[s, j])  # nested
        assert m[s, -1].all()
        for j, f in enumerate(FRACTIONS):
            size = int(m[s, j].sum())
            assert size == subsets.subset_size(f, n)
            present = len(np.unique(y))
            if size >= present:  # room for every class: every class is there
                assert len(np.unique(y[m[s, j] > 0])) == present
    assert not np.array_equal(m[0], m[1]) or n < 3


def test_proportions_follow_the_classes():
    y = np.repeat([0, 1, 2], [600, 300, 100])
    m = subsets.subset_masks(y, "multiclass", [3], [0.1])[0, 0] > 0
    counts = np.bincount(y[m], minlength=3)
    assert abs(counts[0] - 60) <= 1 and abs(counts[1] - 30) <= 1 and abs(counts[2] - 10) <= 1


def test_multilabel_strata_and_missing_counts():
    labels = np.array([[1, 0], [0, 0], [0, 0], [1, 1], [0, -1], [0, 0]], np.int8)
    st_ = subsets.strata(labels, "multilabel")
    # label 1 is rarest (1 positive) and wins over label 0 on row 3; rows without positives -> 2
    assert st_.tolist() == [0, 2, 2, 1, 2, 2]
    mask = np.array([[1, 1, 0, 0, 0, 0], [1, 1, 1, 1, 1, 1]], np.float32)
    assert subsets.classes_missing(labels, "multilabel", mask, 2).tolist() == [1, 0]
    y = np.array([0, 0, 1, 2])
    assert subsets.classes_missing(y, "multiclass", np.array([1, 1, 0, 0], np.float32), 3) == 2
