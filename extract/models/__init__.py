"""Load an encoder from its registry record and turn image batches into embeddings.

Every loader goes through its library's normal path (``crs.extract.encoders`` lists the
kinds). Safetensors are read where the repo has them; a PyTorch checkpoint is opened
with ``torch.load(..., weights_only=True)``, which refuses pickled code. Remote code is
never run unless the user passes ``--trust-remote-code``. ``HF_HOME``, ``HF_TOKEN`` and
``HF_HUB_OFFLINE`` are read by huggingface_hub itself. ``weights=`` points a record at a
local file or folder instead of the hub (an air-gapped server, or the tests' tiny models).

What was loaded is recorded on the Encoder (``weights_info``): for hub weights the commit
of the cache snapshot the files were read from (``HF_HOME/hub/models--ORG--NAME/snapshots/
<commit>/``), for a ``--weights`` file its sha256. ``weights_status`` says, without
downloading or loading anything, whether a record's weights are in the cache.

Modules: ``encoder`` (the ``Encoder`` wrapper and the built-in models), ``loaders`` (one
loader a library, ``load``, the loader registry), ``weights`` (checkpoint files and what
was loaded) and ``hub`` (hub errors, the local cache, ``weights_status``).
"""

from crs.extract.models.encoder import ColourTextureStats, Encoder, NullModel, pick_device
from crs.extract.models.hub import WeightsError, cached_revisions, hub_errors, preflight, weights_status
from crs.extract.models.loaders import (
    LOADERS,
    Loader,
    ProjectedTrunk,
    build_random,
    load,
    processor_settings,
    register_loader,
)
from crs.extract.models.weights import file_sha256, loaded_weights_info, map_keys, read_state_dict, weights_sha256

__all__ = [
    "LOADERS", "ColourTextureStats", "Encoder", "Loader", "NullModel", "ProjectedTrunk", "WeightsError", "build_random",
    "cached_revisions", "file_sha256", "hub_errors", "load", "loaded_weights_info", "map_keys", "pick_device",
    "preflight", "processor_settings", "read_state_dict", "register_loader", "weights_sha256", "weights_status",
]
