"""Test AUC / logloss of the shipped configs on real data, through the real training path.

    python benchmarks/quality.py --data-dir ../shared/data [--only movielens criteo] [--set KEY=VALUE ...]

For each data set: prepare the raw files with the shipped config (80/10/10
random split, seed 2024), train with `autoint.train.train` (early stopping on
validation AUC, best checkpoint tested), and report test AUC and logloss as
JSON. MLflow runs go to a throw-away store in the work folder. Extra
``--set`` overrides apply to every config, for experiments.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

DATASETS = {
    # name: (config, raw path under the data folder)
    "movielens": ("configs/movielens.yaml", "movielens_100k"),
    "criteo": ("configs/criteo.yaml", "criteo_kaggle_head10k/train.txt"),
    "frappe": ("configs/frappe.yaml", "frappe_partial"),
}


def run(name: str, data_dir: Path, work: Path, overrides: list[str]) -> dict:
    from autoint.config import load_config
    from autoint.preprocess import prepare
    from autoint.train import train

    config, raw = DATASETS[name]
    cfg = load_config(ROOT / config, overrides)
    processed = work / name / "processed"
    started = time.perf_counter()
    report = prepare(cfg, data_dir / raw, processed, progress=False)
    prepared = time.perf_counter()
    result = train(cfg, processed, work / name / "run", tracking_uri=f"sqlite:///{work / 'mlflow.db'}",
                   progress=False)
    return {
        "dataset": name,
        "config": config,
        "overrides": overrides,
        "rows": report["rows"],
        "test_auc": round(result.test_metrics["test_auc"], 4),
        "test_logloss": round(result.test_metrics["test_logloss"], 4),
        "epochs": result.epochs,
        "prepare_s": round(prepared - started, 1),
        "train_s": round(result.fit_seconds, 1),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data-dir", type=Path, default=os.environ.get("AUTOINT_DATA_DIR"),
                        help="folder holding criteo_kaggle_head10k/, movielens_100k/, frappe_partial/")
    parser.add_argument("--only", nargs="*", choices=sorted(DATASETS), default=["movielens", "criteo"])
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--work", type=Path, help="work folder (default: a temporary one)")
    parser.add_argument("--output", type=Path, help="write the JSON here too")
    args = parser.parse_args()
    if args.data_dir is None or not Path(args.data_dir).is_dir():
        parser.error("--data-dir (or AUTOINT_DATA_DIR) must name the real data folder")
    torch_threads = os.environ.get("AUTOINT_THREADS")
    if torch_threads:
        import torch

        torch.set_num_threads(int(torch_threads))
    with tempfile.TemporaryDirectory() as tmp:
        work = args.work or Path(tmp)
        results = [run(name, Path(args.data_dir), work, args.set) for name in args.only]
    text = json.dumps({"command": "python benchmarks/quality.py " + " ".join(sys.argv[1:]), "results": results},
                      indent=2)
    print(text)
    if args.output:
        args.output.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
