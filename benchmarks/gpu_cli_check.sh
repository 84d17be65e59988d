#!/usr/bin/env bash
# The command line on a GPU: `autoint train` (default, fp32, fp16 and sparse-Adam precisions), --resume,
# predict/evaluate/inspect of a GPU-trained model (also with the GPU hidden), and `autoint tune`, on the
# embedded synthetic log, with the machine's own torch and Lightning and no package index.
#
# Here: the wheels of what the GPU image lacks (MLflow, Optuna, DuckDB and their needs), for CPython 3.12:
#     pip download --only-binary=:all: --python-version 3.12 --implementation cp \
#         --platform manylinux_2_28_x86_64 --platform manylinux2014_x86_64 --platform any \
#         -d .gpu/cliwheels mlflow==3.17.2 optuna==5.0.0 duckdb==2.0.1
# then delete from .gpu/cliwheels the packages the machine already holds (torch, numpy, pandas, pyarrow, ...).
# There (the folder .gpu travels with the tree):
#     bash benchmarks/gpu_cli_check.sh .gpu/cliwheels OUT_DIR
# Each step's exit status and log, and the inspection's output, go to OUT_DIR/logs.tgz; benchmarks/gpu_cli_summary.py
# writes OUT_DIR/gpu_cli_check.json (a lent machine sends back a few files only).
set -uo pipefail
WHEELS="$(cd "$1" && pwd)"
OUT="$(mkdir -p "$2" && cd "$2" && pwd)"
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PY="${PYTHON:-python3}"
SITE="$(mktemp -d)"
W="$(mktemp -d)"
LOGS="$W/logs"
mkdir -p "$LOGS"
"$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$SITE" "$WHEELS"/*.whl || exit 1
export PYTHONPATH="$ROOT:$SITE${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1 MPLBACKEND=Agg
export MLFLOW_TRACKING_URI="sqlite:///$W/mlflow.db"
cd "$ROOT"
"$PY" -c "import torch, lightning, mlflow, optuna, duckdb; print('torch', torch.__version__, 'lightning', \
lightning.__version__, 'mlflow', mlflow.__version__, torch.cuda.get_device_name(0))" 2>&1 | tee "$LOGS/versions.txt"

ai() { "$PY" -m autoint.cli "$@"; }
step() {  # step NAME COMMAND...: its output in LOGS/NAME.log, its exit status and seconds in LOGS/steps.tsv
  local name="$1"; shift
  local t0=$SECONDS
  "$@" > "$LOGS/$name.log" 2>&1
  local rc=$?
  printf '%s\t%s\t%s\n' "$name" "$rc" "$((SECONDS - t0))" | tee -a "$LOGS/steps.tsv"
  [ "$rc" -eq 0 ] || tail -n 8 "$LOGS/$name.log"
}
CFG=configs/synthetic.yaml
step train_auto ai train $CFG --accelerator gpu --out "$W/auto" --quiet
step train_fp32 ai train $CFG --accelerator gpu --precision 32-true --out "$W/fp32" --quiet
step train_fp16 ai train $CFG --accelerator gpu --precision 16-mixed --out "$W/fp16" --quiet
step train_sparse_fp16 ai train $CFG --accelerator gpu --precision 16-mixed --set train.optimizer=sparse_adam \
  --out "$W/sparse16" --quiet
step train_straight4 ai train $CFG --accelerator gpu --precision 32-true --set train.patience=10 --max-epochs 4 \
  --out "$W/straight" --quiet
step train_first2 ai train $CFG --accelerator gpu --precision 32-true --set train.patience=10 --max-epochs 2 \
  --out "$W/resumed" --quiet
step train_resume4 ai train $CFG --accelerator gpu --precision 32-true --set train.patience=10 --resume --max-epochs 4 \
  --out "$W/resumed" --quiet
step predict_gpu ai predict "$W/fp32" --input data/synthetic/synthetic.parquet --output "$W/pred_gpu.parquet"
step predict_cpu env CUDA_VISIBLE_DEVICES= "$PY" -m autoint.cli predict "$W/fp32" \
  --input data/synthetic/synthetic.parquet --output "$W/pred_cpu.parquet"
step evaluate_gpu ai evaluate "$W/fp32" --data data/processed/synthetic --quiet
step inspect_gpu ai inspect "$W/fp32" --data data/processed/synthetic --out "$W/inspect" --rows 5000
step tune_gpu ai tune configs/tune_synthetic.yaml --trials 2 --max-epochs 2 --out "$W/tune" --quiet
"$PY" "$ROOT/benchmarks/gpu_cli_summary.py" --work "$W" --steps "$LOGS/steps.tsv" --out "$OUT/gpu_cli_check.json"
cp -r "$W/inspect" "$LOGS/inspect" 2>/dev/null
tar czf "$OUT/logs.tgz" -C "$W" logs
