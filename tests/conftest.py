"""Test-wide settings: offline, CPU only, quiet."""

import os

# Never ask the hub: a missing file would cost ~46 s of retries before failing.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")

# Compiled probe programs are cached for the session in a temporary folder, never in the user's home.
if "CRS_JAX_CACHE" not in os.environ:
    import tempfile

    os.environ["CRS_JAX_CACHE"] = tempfile.mkdtemp(prefix="crs-jax-cache-")
