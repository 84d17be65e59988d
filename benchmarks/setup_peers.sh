#!/usr/bin/env bash
# Creates one virtual environment per peer AutoInt library under benchmarks/.peers/<name>,
# for `python benchmarks/speed.py --peers`.
#
#     bash benchmarks/setup_peers.sh            # all three peers
#     bash benchmarks/setup_peers.sh fuxictr    # only some: deepctr, fuxictr, rechub
#
# Idempotent: a venv whose packages already import is left alone (delete its folder
# to rebuild it). torch==2.13.0 is installed first and pinned through a constraints
# file for everything after it, so no peer can pull another torch (and gigabytes of
# CUDA wheels with it).
#
# Peers and what they need (from their wheels' metadata):
#   deepctr  deepctr-torch==0.3.0   torch>=2.4, tqdm, scikit-learn; its __init__ also imports
#                                   requests (undeclared), so it is added here
#   fuxictr  fuxictr==2.3.10        pandas, pyyaml, scikit-learn, numpy, h5py, tqdm, pyarrow,
#                                   polars, ray[data]>=2.52 (imported by its dataloaders package),
#                                   pydantic; torch itself is not declared
#   rechub   torch-rechub==0.9.0    numpy, pandas, scikit-learn, torch>=1.10, tqdm (no extras)
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
PEERS_DIR="${AUTOINT_PEERS_DIR:-$HERE/.peers}"
PYTHON="${PYTHON:-python3}"
TORCH_PIN="torch==2.13.0"

declare -A SPEC=(
  [deepctr]="deepctr-torch==0.3.0"
  [fuxictr]="fuxictr==2.3.10"
  [rechub]="torch-rechub==0.9.0"
)
declare -A EXTRA=(  # undeclared imports, and pyarrow for the runners to read Parquet
  [deepctr]="requests pyarrow"
  [fuxictr]="pyarrow"
  [rechub]="pyarrow"
)
declare -A PROBE=(
  [deepctr]="import deepctr_torch.models"
  [fuxictr]="import fuxictr.pytorch.models, fuxictr.pytorch.dataloaders, fuxictr.features"
  [rechub]="import torch_rechub.models.ranking, torch_rechub.trainers"
)

names=("$@")
if [ ${#names[@]} -eq 0 ]; then
  names=(deepctr fuxictr rechub)
fi
for name in "${names[@]}"; do
  if [ -z "${SPEC[$name]+x}" ]; then
    echo "setup_peers.sh: unknown peer '$name' (choose from: ${!SPEC[*]})" >&2
    exit 2
  fi
done

mkdir -p "$PEERS_DIR"
constraints="$PEERS_DIR/constraints.txt"
echo "$TORCH_PIN" > "$constraints"

for name in "${names[@]}"; do
  venv="$PEERS_DIR/$name"
  py="$venv/bin/python"
  probe="${PROBE[$name]}; import torch; assert torch.__version__.startswith('2.13.0'), torch.__version__"
  if [ -x "$py" ] && "$py" -c "$probe" >/dev/null 2>&1; then
    echo "[$name] ready: $venv"
    continue
  fi
  echo "[$name] creating $venv"
  "$PYTHON" -m venv "$venv"
  "$py" -m pip install -q --upgrade pip >/dev/null
  "$py" -m pip install -q "$TORCH_PIN"
  "$py" -m pip install -q -c "$constraints" "${SPEC[$name]}" ${EXTRA[$name]}
  if ! "$py" -c "$probe"; then
    echo "[$name] installed, but its packages do not import (see above)" >&2
    exit 1
  fi
  echo "[$name] ready: $venv ($("$py" -c 'import torch; print("torch", torch.__version__)'))"
done
