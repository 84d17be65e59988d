"""Why does the demo model stop short of the oracle? One setting changed at a time, on the demo's own split.

Prepares ``configs/synthetic.yaml``'s log once, then trains it through
``autoint train``'s own code path once per variant (the demo's settings plus a
few ``--set`` overrides) and records the best epoch's validation AUC, the test
AUC of that epoch, the epochs run and the wall time. Variants are chosen by
validation AUC only; the test column is there to be read, not to choose by.

    .venv/bin/python benchmarks/demo_variants.py                 # every variant below
    .venv/bin/python benchmarks/demo_variants.py --only demo demo-unscaled

Results: ``benchmarks/results/demo_variants.json`` (entries of variants not
re-run are kept).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from quality import ROOT, prepare_split  # noqa: E402  (a sibling script)

RESULTS = HERE / "results" / "demo_variants.json"

# name → overrides of configs/synthetic.yaml (the demo as it stood before attention was scaled first).
UNSCALED = ["model.scale_attention=false"]
VARIANTS: dict[str, list[str]] = {
    "demo-unscaled": UNSCALED,
    "unscaled-8-heads": [*UNSCALED, "model.num_heads=8"],
    "unscaled-wide-term": [*UNSCALED, "model.first_order=true"],
    "unscaled-2-layers": [*UNSCALED, "model.num_layers=2"],
    "demo": [],  # scaled attention, the shipped config
    "scaled-20-epochs": ["train.max_epochs=20"],
    "scaled-2-layers": ["model.num_layers=2"],
}


def run(name: str, overrides: list[str], processed: Path, work: Path) -> dict[str, Any]:
    from autoint.config import load_config
    from autoint.train import train

    cfg = load_config(ROOT / "configs" / "synthetic.yaml", overrides)
    started = time.perf_counter()
    result = train(cfg, processed, work / "runs" / name, tracking_uri=f"sqlite:///{work / 'mlflow.db'}",
                   progress=False)
    metrics = json.loads((Path(result.run_dir) / "metrics.json").read_text())
    return {"overrides": overrides, "valid_auc": round(metrics["best_epoch_val_auc"], 4),
            "test_auc": round(result.test_metrics["test_auc"], 4),
            "test_logloss": round(result.test_metrics["test_logloss"], 4),
            "epochs": result.epochs, "best_epoch": result.best_epoch,
            "precision": cfg.train.precision, "wall_s": round(time.perf_counter() - started, 1)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", nargs="+", choices=list(VARIANTS), default=list(VARIANTS))
    parser.add_argument("--output", type=Path, default=RESULTS)
    args = parser.parse_args()
    doc = json.loads(args.output.read_text()) if args.output.is_file() else {}
    results = doc.get("variants", {})
    command = "python benchmarks/demo_variants.py " + " ".join(sys.argv[1:])
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        _, processed, report, _ = prepare_split("synthetic", Path("."), work, [])
        for name in args.only:
            results[name] = {**run(name, VARIANTS[name], processed, work), "command": command}
            print(json.dumps({name: results[name]}), flush=True)
    doc = {"config": "configs/synthetic.yaml", "rows": report["rows"],
           "note": "one run per variant on this machine; chosen by valid_auc (best epoch), test_auc read after",
           "variants": {k: results[k] for k in [*VARIANTS, *results] if k in results}}
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(doc, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
