"""The JSON of benchmarks/gpu_cli_check.sh: each step's exit status and seconds, each training run's metrics,
resumed against straight training (weights and test AUC), and the GPU-trained model's scores with and without a
visible GPU.

    python benchmarks/gpu_cli_summary.py --work RUNS_DIR --steps OUT/steps.tsv --out OUT/gpu_cli_check.json
"""

from __future__ import annotations

import argparse
import json
import platform
from pathlib import Path

import torch

RUNS = ("auto", "fp32", "fp16", "sparse16", "straight", "resumed")


def _metrics(run: Path) -> dict | None:
    path = run / "metrics.json"
    return json.loads(path.read_text()) if path.is_file() else None


def _weights(run: Path) -> dict | None:
    path = run / "checkpoints" / "last.ckpt"
    if not path.is_file():
        return None
    return torch.load(path, map_location="cpu", weights_only=True)["state_dict"]


def _max_abs_diff(a: dict, b: dict) -> float:
    return max(float((a[k].double() - b[k].double()).abs().max()) for k in a if a[k].is_floating_point())


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--work", type=Path, required=True)
    p.add_argument("--steps", type=Path, required=True)
    p.add_argument("--out", type=Path, required=True)
    args = p.parse_args(argv)

    steps = {}
    for line in args.steps.read_text().splitlines():
        name, rc, seconds = line.split("\t")
        steps[name] = {"exit_status": int(rc), "seconds": int(seconds)}
    result: dict = {"device": torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu",
                    "torch": torch.__version__, "python": platform.python_version(), "steps": steps,
                    "runs": {name: _metrics(args.work / name) for name in RUNS}}

    straight, resumed = _weights(args.work / "straight"), _weights(args.work / "resumed")
    if straight is not None and resumed is not None:
        result["resume"] = {"max_abs_weight_diff_straight_vs_resumed": _max_abs_diff(straight, resumed),
                            "same_keys": sorted(straight) == sorted(resumed)}

    gpu, cpu = args.work / "pred_gpu.parquet", args.work / "pred_cpu.parquet"
    if gpu.is_file() and cpu.is_file():
        import pyarrow.parquet as pq

        a = pq.read_table(gpu).column("probability").to_numpy()
        b = pq.read_table(cpu).column("probability").to_numpy()
        result["predict"] = {"rows": len(a), "max_abs_prob_diff_gpu_visible_vs_hidden": float(abs(a - b).max())}

    tune_best = args.work / "tune" / "best.yaml"
    result["tune_best_yaml_written"] = tune_best.is_file()
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
