#!/usr/bin/env bash
# One prepared check for a lent GPU machine (an H200; 15 minutes of device time in all,
# nothing installed there beyond PyTorch, JAX, timm and transformers). Finishes within
# ~8 minutes and prints one JSON line per benchmark (lines starting with '{').
#
#   run: bash benchmarks/device_check.sh            (from the repository root)
#        CHECKS="extract_vit_large gpu_tests" bash benchmarks/device_check.sh   (only those checks)
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
  case " ${CHECKS:-$label} " in *" $label "*) ;; *) return 0 ;; esac  # CHECKS="a b": run only those labels
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

# extraction: two large encoders with random weights, bf16 autocast, files to a complete store
bench extract_vit_large 170 $PY benchmarks/extract_bench.py --encoder vit-large --images 2048 --batch 256 \
  --file-size 256 --severities 3 --workers 12 --chunk 512 --device cuda --precision auto
bench extract_siglip_so400m 190 $PY benchmarks/extract_bench.py --encoder siglip-so400m --images 1024 --batch 128 \
  --file-size 384 --severities 3 --workers 12 --chunk 256 --device cuda --precision auto
# GPU-only unit tests of the extraction stage (perturbations on CUDA equal the CPU's)
bench gpu_tests 60 $PY -m pytest -q -m gpu tests/extract/test_perturb.py -p no:cacheprovider
# the probe engine on the GPU: the paper-scale grid (20,000 x 768, 280 probes), compile and run apart
JAX_PLATFORMS=cuda bench probe_jax 100 $PY benchmarks/probe_bench.py --jax-only --skip-plain --no-multilabel
