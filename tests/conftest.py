"""Test-wide settings: offline, CPU only, quiet."""

import os

# Never ask the hub: a missing file would cost ~46 s of retries before failing.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")

# XLA compiles the tests' programs the quick way: without LLVM's optimisations and with its older loop
# emitters (TEST_XLA_FLAGS). Most test programs run for milliseconds on tiny data and take a second or more
# to compile, so this more than halves their compiling. The code under test is the same JAX program; only
# XLA's machine code differs, and its rounding with it, so every test that compares results compares two
# runs under the same flags or to a tolerance.
# The one check of production bits, the golden run's digests (tests/test_golden_run.py), runs its
# pipeline in a process of its own under the flags the suite was started with (PRODUCTION_XLA_FLAGS).
# Set CRS_TESTS_XLA_OPT=default to run every test under those flags; an XLA_FLAGS that names either flag
# is kept as it is. Set here, before anything imports JAX, and inherited by pytest-xdist's workers and by
# every CLI subprocess the tests start.
TEST_XLA_FLAGS = ("--xla_backend_optimization_level=0", "--xla_cpu_use_fusion_emitters=false")
PRODUCTION_XLA_FLAGS = "CRS_TESTS_PRODUCTION_XLA_FLAGS"
if PRODUCTION_XLA_FLAGS not in os.environ:  # the first process (the controller); the workers inherit both
    os.environ[PRODUCTION_XLA_FLAGS] = _given = os.environ.get("XLA_FLAGS", "")
    if os.environ.get("CRS_TESTS_XLA_OPT") != "default" and not any(f.split("=")[0] in _given for f in TEST_XLA_FLAGS):
        os.environ["XLA_FLAGS"] = " ".join([_given, *TEST_XLA_FLAGS]).strip()

# One OpenMP thread per test process (torch's intra-op pool, and OpenBLAS under numpy), unless
# OMP_NUM_THREADS is set already or CRS_TESTS_THREADS=default. pytest-xdist runs a worker per core, and
# each worker's torch would start a thread per core whose OpenMP barriers spin while they wait, taking
# the other workers' cores. Results can round differently with other thread counts, so the golden run's
# digests run under the setting the suite was started with (PRODUCTION_OMP_NUM_THREADS, as
# PRODUCTION_XLA_FLAGS above).
PRODUCTION_OMP_NUM_THREADS = "CRS_TESTS_PRODUCTION_OMP_NUM_THREADS"
if PRODUCTION_OMP_NUM_THREADS not in os.environ:  # the controller; the workers and subprocesses inherit it
    os.environ[PRODUCTION_OMP_NUM_THREADS] = os.environ.get("OMP_NUM_THREADS", "")
    if os.environ.get("CRS_TESTS_THREADS") != "default" and "OMP_NUM_THREADS" not in os.environ:
        os.environ["OMP_NUM_THREADS"] = "1"

# Property tests check values, never time: Hypothesis's default 200 ms deadline per example is a timed
# assertion, which a loaded machine can fail whatever the code computes.
from hypothesis import settings as _hypothesis_settings  # noqa: E402

_hypothesis_settings.register_profile("crs", deadline=None)
_hypothesis_settings.load_profile("crs")

# Compiled probe programs are cached for the run in a temporary folder, never in the user's home. The
# first process that loads this file (pytest-xdist's controller, or the only process with -n 0) makes
# the folder; the workers and the CLI subprocesses the tests start inherit the variable, so a program
# compiled by one of them is read from disk by the others. The folder is removed when that run ends.
_OWN_CACHE = None
if "CRS_JAX_CACHE" not in os.environ:
    import tempfile

    _OWN_CACHE = os.environ["CRS_JAX_CACHE"] = tempfile.mkdtemp(prefix="crs-jax-cache-")


def pytest_unconfigure(config):
    if _OWN_CACHE is not None:
        import shutil

        shutil.rmtree(_OWN_CACHE, ignore_errors=True)


def pytest_collection_modifyitems(config, items):
    """Tests marked ``slow`` run first; the order is otherwise kept.

    pyproject.toml runs pytest-xdist with ``--dist loadscope --no-loadscope-reorder``: a module's
    tests go to one worker together (a module- or session-scoped fixture is built once per
    worker that runs the module, not once per worker that runs one of its tests), modules are
    handed out one at a time in this order, and a module with a slow test comes first. So the
    long cases start at once on both workers and the run ends on short modules, not with one
    worker idle while the other finishes a minute-long case. A module whose fixtures are costly
    is marked ``slow`` as a whole, so that the move never splits it when run without xdist."""
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)
