#!/usr/bin/env bash
# The speed table on a GPU: autoint against FuxiCTR 2.3.10, fp32 and bf16 autocast, batch 1024 and 8192,
# on one CUDA device, with the machine's own torch and Lightning (no package index needed there).
#
# Here, on a machine with the preprocessing engine and the shared data:
#     .venv/bin/python benchmarks/speed.py --prepare-only --work .gpu/work        # processed folders
#     pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
#         --platform manylinux2014_x86_64 --platform any -d .gpu/wheels fuxictr==2.3.10 polars==1.33.1
# There (the folder .gpu travels with the tree; speed.py reads nothing else):
#     bash benchmarks/gpu_speed.sh .gpu OUT_DIR [EPOCHS]
#
# FuxiCTR's dataloaders package imports ray (for its Parquet loader) at import time; the npz loader this
# benchmark uses never calls it. Where ray is not installed (its wheel is larger than what travels to a
# lent GPU machine), benchmarks/peers/ray_standin.py puts a stand-in on the path so those imports succeed;
# any use of it raises.
set -euo pipefail
GPU_DIR="$(cd "$1" && pwd)"
OUT="$2"
EPOCHS="${3:-5}"
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
SITE="$(mktemp -d)"
trap 'rm -rf "$SITE"' EXIT
PY="${PYTHON:-python3}"
mkdir -p "$OUT"
"$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$SITE" "$GPU_DIR"/wheels/*.whl
if ! "$PY" -c "import ray" 2>/dev/null; then
  "$PY" "$HERE/peers/ray_standin.py" "$SITE"
fi
export PYTHONPATH="$HERE/..:$SITE${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
"$PY" -c "import torch; print(torch.__version__, torch.cuda.get_device_name(0))"
for batch in 1024 8192; do
  "$PY" "$HERE/speed.py" --device cuda --reuse-prepared --work "$GPU_DIR/work" --datasets movielens criteo \
    --variants fp32 bf16 --peers fuxictr --peer-python "$(command -v "$PY")" --threads 8 --epochs "$EPOCHS" \
    --set train.batch_size=$batch --out "$OUT/speed_gpu_batch$batch.json" 2>&1 | tee "$OUT/speed_gpu_batch$batch.log"
done
