#!/usr/bin/env bash
# The test suite on a lent GPU machine, with that machine's own torch, Lightning and Python (older than the
# CPU build the suite is kept green on), and sparse Adam's warnings there, with and without embedding decay.
#
# Here: fill .gpu/cliwheels as benchmarks/gpu_cli_check.sh says (MLflow, Optuna, DuckDB and their needs).
# There (the folder .gpu travels with the tree):
#     bash benchmarks/gpu_suite_check.sh .gpu/cliwheels OUT_DIR [PYTEST_ARGS...]
# OUT_DIR gets versions.txt, sparse_<device>_<decay>.log and sparse.tsv (exit status and how many lines
# mention sparse invariants), suite.log (pytest's summary: -ra lists every failure and skip) and suite.xml.
# The suite runs without AUTOINT_DATA_DIR (the shared data stay here), so the tests that need it skip.
set -uo pipefail
WHEELS="$(cd "$1" && pwd)"
OUT="$(mkdir -p "$2" && cd "$2" && pwd)"
shift 2
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PY="${PYTHON:-python3}"
SITE="$(mktemp -d)"
W="$(mktemp -d)"
"$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$SITE" "$WHEELS"/*.whl || exit 1
export PYTHONPATH="$ROOT:$SITE${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1 MPLBACKEND=Agg
export MLFLOW_TRACKING_URI="sqlite:///$W/mlflow.db"
cd "$ROOT"
trap 'rm -rf "$SITE" "$W"' EXIT
"$PY" -c "import sys, torch, lightning, mlflow, pandas; print('python', sys.version.split()[0], 'torch', torch.__version__, \
'lightning', lightning.__version__, 'pandas', pandas.__version__, 'mlflow', mlflow.__version__, \
torch.cuda.get_device_name(0))" 2>&1 | tee "$OUT/versions.txt"

# Sparse Adam, one epoch each: decay 0.0003 runs our decayed gradient, 0 torch's SparseAdam alone. The first
# run makes the embedded log and its processed folder; the other three then run side by side.
sparse() {  # sparse DEVICE DECAY
  local log="$OUT/sparse_$1_$2.log"
  MLFLOW_TRACKING_URI="sqlite:///$W/mlflow_$1_$2.db" "$PY" -m autoint.cli train configs/synthetic.yaml \
    --accelerator "$1" --set train.optimizer=sparse_adam --set "train.embedding_weight_decay=$2" \
    --max-epochs 1 --out "$W/sparse_$1_$2" --quiet > "$log" 2>&1
  local rc=$?
  printf '%s\t%s\t%s\t%s\n' "$1" "$2" "$rc" "$(grep -ci 'sparse invariant' "$log")" >> "$OUT/sparse.tsv"
}
sparse gpu 0
sparse cpu 0 & sparse gpu 0.0003 & sparse cpu 0.0003 &
wait
cat "$OUT/sparse.tsv"

workers=()
if "$PY" -c "import xdist" 2>/dev/null; then
  workers=(-n "$(nproc)")
fi
# Past SUITE_SECONDS pytest gets Ctrl-C (SIGINT), so it still prints the failures and skips it has seen.
timeout -s INT -k 30 "${SUITE_SECONDS:-600}" "$PY" -m pytest -q -p no:cacheprovider "${workers[@]}" --junitxml "$OUT/suite.xml" \
  "$@" > "$OUT/suite.log" 2>&1
echo "suite exit status $?" | tee -a "$OUT/suite.log"
tail -n 5 "$OUT/suite.log"
