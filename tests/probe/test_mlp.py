"""The MLP probe head: the vmapped grid against probes fitted alone, masks, weight decay, what
only a nonlinear head can fit, determinism, and ``crs probe --head mlp`` then ``crs score``."""

import json

import jax
import jax.numpy as jnp
import numpy as np
import polars as pl
import pytest
from sklearn.metrics import roc_auc_score
from typer.testing import CliRunner

from crs.probe import core, mlp
from crs.probe.problem import TrainingSet


def blobs(seed, n=160, F=6, K=3, spread=1.0):
    rng = np.random.default_rng(seed)
    y = rng.integers(0, K, n)
    X = (rng.normal(size=(K, F))[y] * spread + rng.normal(size=(n, F))).astype(np.float32)
    return X, np.eye(K, dtype=np.float32)[y], y


def multilabel(seed, n=160, F=6, K=3):
    rng = np.random.default_rng(seed)
    T = (rng.random((n, K)) < 0.35).astype(np.float32)
    X = (T @ rng.normal(size=(K, F)) + rng.normal(size=(n, F))).astype(np.float32)
    known = (rng.random((n, K)) > 0.2).astype(np.float32)  # U-Ignore-like entries
    return X, T, known


def leaves(params):
    return [np.asarray(a) for a in jax.tree.leaves(params)]


def fit(X, T, order, sizes, wd, seeds, task="multiclass", known=None, hidden=8, layout=None, **settings):
    known = np.ones_like(T) if known is None else known
    return mlp.fit(TrainingSet(X, T, known, np.atleast_2d(order), sizes, wd, task, seeds), hidden,
                   mlp.Settings(**settings), layout=layout)


def test_the_objective_is_the_documented_formula():
    """objective() against a numpy reference of the module docstring's formula, both tasks."""
    X, T, known = multilabel(0, n=40)
    params = mlp.init_params(1, X.shape[1], 5, T.shape[1])
    k1, b1 = np.asarray(params["Dense_0"]["kernel"]), np.asarray(params["Dense_0"]["bias"])
    k2, b2 = np.asarray(params["Dense_1"]["kernel"]), np.asarray(params["Dense_1"]["bias"])
    h = X @ k1 + b1
    h = 0.5 * h * (1 + np.tanh(np.sqrt(2 / np.pi) * (h + 0.044715 * h ** 3)))
    z = h @ k2 + b2
    wd = 0.3
    pen = 0.5 * wd * ((k1 ** 2).sum() + (k2 ** 2).sum())
    bce = np.logaddexp(0, z) - T * z
    want = ((known * bce).sum(0) / known.sum(0)).sum() + pen
    got = mlp.objective(params, X, T, known, wd, "multilabel", 5)
    assert float(got) == pytest.approx(want, rel=1e-5)
    y = np.argmax(T, -1)  # any one-hot target will do for the multiclass form
    Tc = np.eye(T.shape[1], dtype=np.float32)[y]
    logp = z - np.log(np.exp(z).sum(-1, keepdims=True))
    want = -(Tc * logp).sum(-1).mean() + pen
    got = mlp.objective(params, X, Tc, np.ones_like(Tc), wd, "multiclass", 5)
    assert float(got) == pytest.approx(want, rel=1e-5)


# The tests share shapes (160 training rows x 6 features, 3 classes, hidden 8, fractions of 60 and 160
# rows, grids of 2 seeds x 3 weight decays, single probes) so that few programs are compiled.
SIZES, WD, SEEDS = (60, 160), [0.03, 0.1, 1.0], [3, 11]


def orders(n=160, S=2, seed=5):
    rng = np.random.default_rng(seed)
    return np.stack([rng.permutation(n) for _ in range(S)])


def test_the_vmapped_grid_takes_each_probes_own_path():
    """Every probe of a 2-seed x 2-fraction x 3-weight-decay grid against the same probe fitted alone
    (its seed, its subset, its weight decay). Over the first steps the paths agree to float32
    rounding; fitted to a tight tolerance on a well-posed problem (penalised, overlapping classes),
    the probes agree to 2e-3 in probability. (Weakly penalised probes on nearly separable data
    amplify rounding differences along flat directions, so end points are not compared there.)"""
    X, T, _ = blobs(0)
    order = orders()
    for steps, tol, atol in ((4, 0.0, 1e-5), (500, 1e-5, 2e-3)):
        grid = fit(X, T, order, SIZES, WD, SEEDS, max_steps=steps, tol=tol)
        assert grid.converged.shape == (2, 2, 3)
        pg = np.asarray(mlp.probabilities(X, grid.params, "multiclass"))  # [S, Fr, L, n, K]
        for s in range(2):
            for j, m in enumerate(SIZES):
                for i, w in enumerate(WD):
                    one = fit(X, T, order[s], (m,), [w], [SEEDS[s]], max_steps=steps, tol=tol)
                    po = np.asarray(mlp.probabilities(X, one.params, "multiclass"))[0, 0, 0]
                    np.testing.assert_allclose(pg[s, j, i], po, atol=atol)
                    if steps == 4:
                        assert int(grid.steps[s, j, i]) == int(one.steps[0, 0, 0]) == 4
                    else:
                        assert bool(grid.converged[s, j, i]) and bool(one.converged[0, 0, 0])
                        assert float(grid.objective[s, j, i]) == pytest.approx(float(one.objective[0, 0, 0]),
                                                                              rel=1e-5)


@pytest.mark.parametrize("task", ["multiclass", "multilabel"])
def test_one_program_for_every_fraction_fits_the_probes_of_one_program_per_fraction(task):
    """The tests' grids are small enough to share one program (rows past a fraction's subset weighted 0);
    a program per fraction trains on the subset's rows alone. Same probes: to float32 rounding over the
    first steps (both tasks, the multilabel set with unknown entries), and to 2e-3 in probability at a
    tight tolerance."""
    X, T, known = blobs(0)[:2] + (None,) if task == "multiclass" else multilabel(2)
    assert mlp.shared(2, 3, 160, 6, 3, 8) and not mlp.shared(5, 4, 20_000, 768, 5, 128)
    # the multilabel masks over the first steps only: its weakly penalised probes run all 500 steps
    for steps, tol, atol in ((4, 0.0, 1e-5), (500, 1e-5, 2e-3))[:2 if task == "multiclass" else 1]:
        a, b = (fit(X, T, orders(), SIZES, WD, SEEDS, task, known, max_steps=steps, tol=tol, layout=layout)
                for layout in ("shared", "per_fraction"))
        pa, pb = (np.asarray(mlp.probabilities(X, f.params, task)) for f in (a, b))
        np.testing.assert_allclose(pa, pb, atol=atol)
        if steps == 4:
            assert (np.asarray(a.steps) == 4).all() and (np.asarray(b.steps) == 4).all()
        else:
            assert bool(a.converged.all()) and bool(b.converged.all())
    with pytest.raises(ValueError, match="layout must be"):
        fit(X, T, orders(), SIZES, WD, SEEDS, task, known, layout="both")


def test_every_weight_decay_and_fraction_of_a_seed_starts_from_the_seeds_initialisation():
    """With a tolerance every gradient passes, no probe takes a step: each holds its start."""
    X, T, _ = blobs(1)
    out = fit(X, T, orders(seed=1), SIZES, WD, [7, 8], tol=np.inf)
    assert np.asarray(out.steps).max() == 0 and bool(out.converged.all())
    starts = {seed: leaves(mlp.init_params(seed, X.shape[1], 8, T.shape[1])) for seed in (7, 8)}
    assert not all(np.array_equal(a, b) for a, b in zip(starts[7], starts[8]))
    for s, seed in enumerate((7, 8)):
        for a, b in zip(leaves(out.params), starts[seed]):
            for j in range(2):
                for i in range(3):
                    np.testing.assert_array_equal(a[s, j, i], b)
    moved = fit(X, T, np.arange(160), (60,), [1e-2], [7], max_steps=1)
    assert int(moved.steps[0, 0, 0]) == 1
    assert not np.array_equal(leaves(moved.params)[0][0, 0, 0], starts[7][0])


def test_unknown_labels_do_not_change_the_fit():
    """Flipping the targets of unknown (masked) entries leaves the fit bit for bit as it was;
    flipping known ones changes it (so the comparison can fail)."""
    X, T, known = multilabel(2)
    order = orders(seed=2)
    base = fit(X, T, order, SIZES, WD, SEEDS, task="multilabel", known=known, max_steps=60)
    flipped = np.where(known > 0, T, 1 - T)
    assert (flipped != T).sum() > 20
    same = fit(X, flipped, order, SIZES, WD, SEEDS, task="multilabel", known=known, max_steps=60)
    for a, b in zip(leaves(base.params), leaves(same.params)):
        np.testing.assert_array_equal(a, b)
    known_flip = T.copy()
    rows, cols = np.nonzero(known > 0)
    known_flip[rows[:10], cols[:10]] = 1 - known_flip[rows[:10], cols[:10]]
    other = fit(X, known_flip, order, SIZES, WD, SEEDS, task="multilabel", known=known, max_steps=60)
    assert not all(np.array_equal(a, b) for a, b in zip(leaves(base.params), leaves(other.params)))


def test_a_larger_weight_decay_gives_smaller_kernels():
    X, T, _ = blobs(3)
    out = fit(X, T, orders(seed=3), SIZES, [1e-3, 1e-1, 1.0], SEEDS)
    norms = np.asarray(mlp.kernel_norm(out.params))  # [S, Fr, L]
    assert norms.shape == (2, 2, 3)
    assert (np.diff(norms, axis=-1) < 0).all(), norms


def test_well_separated_blobs_are_classified():
    X, T, y = blobs(4, n=260, spread=3.0)
    tr, te = np.arange(160), np.arange(160, 260)
    out = fit(X[tr], T[tr], np.arange(160), (160,), [1e-2], [0])
    assert bool(out.converged.all())
    p = np.asarray(mlp.probabilities(X[te], out.params, "multiclass"))[0, 0, 0]
    assert (p.argmax(-1) == y[te]).mean() >= 0.97


def test_the_mlp_separates_xor_where_no_linear_probe_can():
    """Two classes on the diagonals of a square (plus noise features): no hyperplane separates them."""
    rng = np.random.default_rng(6)
    n = 400
    X = rng.uniform(-1, 1, size=(n, 6)).astype(np.float32)  # two signal dimensions, four of noise
    y = ((X[:, 0] > 0) ^ (X[:, 1] > 0)).astype(np.int64)
    T = np.eye(2, dtype=np.float32)[y]
    tr, te = np.arange(160), np.arange(160, n)
    order = np.arange(160)
    lin = core.fit(TrainingSet(jnp.asarray(X[tr]), jnp.asarray(T[tr]), jnp.ones((160, 2)), jnp.asarray(order[None]),
                               (160,), jnp.asarray([1e-3], jnp.float32), "multiclass"))
    p_lin = np.asarray(core.probabilities(jnp.asarray(X[te]), lin.W, lin.b, "multiclass"))[0, 0, 0, :, 1]
    out = fit(X[tr], T[tr], order, (160,), [1e-3], [0])
    p_mlp = np.asarray(mlp.probabilities(X[te], out.params, "multiclass"))[0, 0, 0, :, 1]
    auc_lin, auc_mlp = roc_auc_score(y[te], p_lin), roc_auc_score(y[te], p_mlp)
    assert auc_lin < 0.65
    assert auc_mlp > 0.9 and auc_mlp > auc_lin + 0.3


def test_two_fits_are_identical():
    X, T, known = multilabel(7)
    a = fit(X, T, orders(seed=7), SIZES, WD, SEEDS, task="multilabel", known=known, max_steps=80)
    b = fit(X, T, orders(seed=7), SIZES, WD, SEEDS, task="multilabel", known=known, max_steps=80)
    for x, y in zip(leaves(a), leaves(b)):
        np.testing.assert_array_equal(x, y)


def test_bad_settings_name_the_value():
    X, T, _ = blobs(0, n=20)
    with pytest.raises(ValueError, match="hidden width must be at least 1, not 0"):
        fit(X, T, np.arange(20), (20,), [1.0], [0], hidden=0)
    with pytest.raises(ValueError, match="one per seed"):
        fit(X, T, np.arange(20), (20,), [1.0], [0, 1])
    with pytest.raises(ValueError, match="subset sizes must increase"):
        fit(X, T, np.arange(20), (30,), [1.0], [0])


# ------------------------------------------------------------------ the command line, end to end
runner = CliRunner()


def invoke(*args):
    return runner.invoke(app_(), [str(a) for a in args])


def app_():
    from crs.cli import app

    return app


@pytest.mark.parametrize("args, message", [
    (["--head", "deep"], "--head must be linear or mlp, not 'deep'"),
    (["--head", "mlp", "--hidden", "0"], "--hidden must be at least 1, not 0"),
    (["--hidden", "64"], "--hidden 64 applies to --head mlp only"),
])
def test_bad_head_options_exit_2(tmp_path, args, message):
    r = invoke("probe", "--all", "--store", tmp_path / "s.zarr", *args)
    assert r.exit_code == 2 and message in r.output


@pytest.mark.slow  # started first (tests/conftest.py)
def test_probe_head_mlp_then_score_ranks_it_beside_the_linear_probe(tmp_path):
    store, results = tmp_path / "s.zarr", tmp_path / "results"
    r = invoke("extract", "-e", "demo-stats", "-d", "demo_derm", "--size", "0.25", "--store", store,
               "--chunk", "64", "--severities", "1", "--json")
    assert r.exit_code == 0, r.output
    common = ("--all", "--store", store, "--results", results, "--seeds", "2", "--fractions", "0.5,1",
              "--l2", "1e-2,1e-1", "--json")
    r = invoke("probe", *common)
    assert r.exit_code == 0, r.output
    linear = pl.read_parquet(results / "run_records" / "demo-stats__demo_derm.parquet")
    r = invoke("probe", *common, "--head", "mlp", "--hidden", "16")
    assert r.exit_code == 0, r.output
    runs = json.loads(r.output)["runs"]
    assert [run["encoder"] for run in runs] == ["demo-stats+mlp"]

    # the linear records are left as they were; the MLP's sit beside them under their own name
    assert pl.read_parquet(results / "run_records" / "demo-stats__demo_derm.parquet").equals(linear)
    rec = pl.read_parquet(results / "run_records" / "demo-stats+mlp__demo_derm.parquet")
    assert rec["encoder"].unique().to_list() == ["demo-stats+mlp"]
    assert rec.height == linear.height and rec.columns == linear.columns
    assert set(rec["l2"].unique()) <= {1e-2, 1e-1}
    assert rec["iterations"].min() >= 1
    assert rec.filter(pl.col("condition") == "clean")["auroc"].min() > 0.5
    grid = pl.read_parquet(results / "probe_selection" / "demo-stats+mlp__demo_derm.parquet")
    assert grid.height == 2 * 2 * 2 and grid.filter(pl.col("chosen")).height == 4
    from crs.store import Store

    probs, attrs = Store(str(store), mode="r").read_predictions("demo_derm", "demo-stats+mlp", "clean")
    assert probs.shape[:2] == (2, 2) and attrs["head"] == "mlp" and attrs["hidden"] == 16
    assert attrs["form"] == "log_prob" and np.allclose(np.exp(probs.astype(np.float64)).sum(-1), 1.0, atol=1e-5)

    r = invoke("score", "--results", results, "--store", store, "--bootstrap", "20", "--json")
    assert r.exit_code == 0, r.output
    names = {e["encoder"] for e in json.loads(r.output)["encoders"]}
    assert names == {"demo-stats", "demo-stats+mlp"}
