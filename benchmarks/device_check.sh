#!/usr/bin/env bash
# One prepared check for a lent GPU machine (an H200; 15 minutes of device time in all,
# nothing installed there beyond PyTorch, JAX, timm and transformers). Finishes within
# ~7 minutes and prints one JSON line per benchmark (lines starting with '{').
#
#   run: bash benchmarks/device_check.sh            (from the repository root)
#        CHECKS="extract_vit_large gpu_tests" bash benchmarks/device_check.sh   (a subset, by label)
#
# Labels (default: the first four): extract_vit_base, extract_vit_large, extract_siglip_so400m
# (issue 41's goals: pipeline/raw >= 0.9 at the default severities, 1..5, of the dermatology suite,
# 76 conditions; each line holds the raw and pipeline rates, their ratio, the time per stage per 1,000
# forward images, and the null encoder's ceiling with its own stages: >= 3x ViT-L's raw rate),
# gpu_tests (the GPU-marked tests of the extraction stage), probe_jax (the probe engine, not run by
# default). Each extraction check takes ~60-90 s, its limit below.
#
# Our own small pure-Python dependencies (zarr, polars, typer, rich, numcodecs, ...) are
# installed from wheels carried in shared/wheels when present (`pip download -d
# shared/wheels zarr polars pyarrow typer rich hypothesis` on a machine with the registry);
# without them the script says which import is missing and stops.
set -u
cd "$(dirname "$0")/.."
export PYTHONPATH="$PWD/.bench-path${PYTHONPATH:+:$PYTHONPATH}"
export HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
PY=${PYTHON:-python3}

if [ -d shared/wheels ]; then
  $PY -m pip install -q --no-index --find-links shared/wheels zarr polars pyarrow typer rich 2>&1 | tail -2
fi
# the crs package without reinstalling torch & co: a path file mapping the stage folders
mkdir -p .bench-path/crs
for stage in extract store probe scoring; do ln -sfn "$PWD/$stage" ".bench-path/crs/$stage"; done
for f in crs/*.py crs/stages; do ln -sfn "$PWD/$f" ".bench-path/crs/$(basename "$f")"; done
# pytest puts the working directory first on sys.path, where crs/ lacks the stage folders: link them there too
for stage in extract store probe scoring; do [ -e "crs/$stage" ] || ln -sfn "../$stage" "crs/$stage"; done
$PY - <<'PY' || exit 1
import importlib, sys
missing = [m for m in ("torch", "timm", "transformers", "zarr", "numpy", "PIL") if importlib.util.find_spec(m) is None]
if missing:
    print("device_check: missing modules:", ", ".join(missing), "(carry wheels in shared/wheels)", file=sys.stderr)
    sys.exit(1)
import torch
print("device_check: torch", torch.__version__, "cuda", torch.cuda.is_available(),
      torch.cuda.get_device_name(0) if torch.cuda.is_available() else "", file=sys.stderr)
PY
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader 1>&2 || true

bench() {  # label, timeout seconds, command...
  local label=$1 limit=$2; shift 2
  local t0=$SECONDS
  timeout "$limit" "$@" > ".bench-$label.out" 2> ".bench-$label.err"
  local rc=$?
  local line
  line=$(grep '^{' ".bench-$label.out" | tail -1)
  if [ -n "$line" ]; then
    echo "$line"
  else
    echo "{\"benchmark\": \"$label\", \"rc\": $rc, \"seconds\": $((SECONDS - t0)), \"stdout_tail\": \"$(tail -c 300 ".bench-$label.out" | tr '\n"\\' '   ')\", \"stderr_tail\": \"$(tail -c 300 ".bench-$label.err" | tr '\n"\\' '   ')\"}"
  fi
}

CHECKS=${CHECKS:-extract_vit_base extract_vit_large extract_siglip_so400m gpu_tests}
want() { case " $CHECKS " in *" $1 "*) return 0;; *) return 1;; esac; }
EXTRACT="$PY benchmarks/extract_bench.py --severities default --workers 12 --device cuda --precision auto --no-suite-rates --null-ceiling"

# extraction, random weights, bf16 autocast, files to a complete store: 1,024 files x 76 conditions
# = 39,424 forward images at 224 px; 256 files (9,856) for SigLIP so400m at 384 px
want extract_vit_base && bench extract_vit_base 100 $EXTRACT --encoder vit-base --images 1024 --batch 256 \
  --file-size 256 --chunk 512
want extract_vit_large && bench extract_vit_large 130 $EXTRACT --encoder vit-large --images 1024 --batch 256 \
  --file-size 256 --chunk 512
want extract_siglip_so400m && bench extract_siglip_so400m 130 $EXTRACT --encoder siglip-so400m --images 256 \
  --batch 128 --file-size 384 --chunk 128
# GPU-only unit tests of the extraction stage (perturbations on CUDA equal the CPU's)
want gpu_tests && bench gpu_tests 60 $PY -m pytest -q -m gpu tests/extract -p no:cacheprovider
# the probe engine on the GPU: the paper-scale grid (20,000 x 768, 280 probes), compile and run apart
want probe_jax && JAX_PLATFORMS=cuda bench probe_jax 100 $PY benchmarks/probe_bench.py --jax-only --skip-plain \
  --no-multilabel
