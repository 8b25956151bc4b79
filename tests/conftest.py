"""Test-wide settings: offline, CPU only, quiet."""

import os

# Never ask the hub: a missing file would cost ~46 s of retries before failing.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")
