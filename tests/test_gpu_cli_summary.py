"""benchmarks/gpu_cli_summary.py: what the GPU command-line check reports of its steps and runs."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import torch


def _run(folder: Path, weight: float, auc: float) -> None:
    (folder / "checkpoints").mkdir(parents=True)
    torch.save({"state_dict": {"w": torch.full((2, 3), weight), "steps": torch.tensor(4)}},
               folder / "checkpoints" / "last.ckpt")
    (folder / "metrics.json").write_text(json.dumps({"test_auc": auc, "epochs": 4}))


def test_the_summary_reports_failed_steps_missing_runs_and_the_differences_it_measures(tmp_path, benchmark_script):
    work = tmp_path / "work"
    _run(work / "straight", 0.5, 0.76)
    _run(work / "resumed", 0.25, 0.75)
    for name, probs in (("pred_gpu", [0.1, 0.5]), ("pred_cpu", [0.1, 0.75])):
        pq.write_table(pa.table({"probability": pa.array(probs, pa.float32())}), work / f"{name}.parquet")
    steps = tmp_path / "steps.tsv"
    steps.write_text("train_fp32\t0\t28\ntune_gpu\t1\t26\n")
    out = tmp_path / "summary.json"
    benchmark_script("gpu_cli_summary").main(["--work", str(work), "--steps", str(steps), "--out", str(out)])
    result = json.loads(out.read_text())
    assert result["steps"] == {"train_fp32": {"exit_status": 0, "seconds": 28},
                               "tune_gpu": {"exit_status": 1, "seconds": 26}}
    assert result["runs"]["fp32"] is None and result["runs"]["straight"]["test_auc"] == 0.76
    assert result["resume"] == {"max_abs_weight_diff_straight_vs_resumed": 0.25, "same_keys": True}
    assert result["predict"] == {"rows": 2, "max_abs_prob_diff_gpu_visible_vs_hidden": 0.25}
    assert result["tune_best_yaml_written"] is False
