"""benchmarks/speed.py --median-of: medians over runs, the piece sizes of --diagnose included."""

from __future__ import annotations

import json


def _run(train: float, pieces: dict[str, float]) -> dict:
    ours = {"train": {"samples_per_s": train, "median_step_ms": 1000 / train},
            "infer_forward": {"samples_per_s": 2 * train}, "infer_predict": {"samples_per_s": 3 * train},
            "pieces": {"rows_per_pass_auto": 256, "inference_samples_per_s": pieces,
                       "training_samples_per_s": {k: v / 4 for k, v in pieces.items()}}}
    return {"settings": {"command": f"run {train}", "summary": "s"},
            "datasets": {"movielens": {"variants": {"fp32": {"ours": ours, "peers": {}}}}}}


def test_the_median_of_runs_takes_each_piece_size_median_too(benchmark_script, tmp_path):
    speed = benchmark_script("speed")
    paths = []
    for i, (train, pieces) in enumerate([(10.0, {"128": 1.0, "256": 9.0}), (30.0, {"128": 3.0, "256": 7.0}),
                                         (20.0, {"128": 2.0, "256": 8.0})]):
        paths.append(tmp_path / f"run{i}.json")
        paths[-1].write_text(json.dumps(_run(train, pieces)))
    ours = speed.median_report(paths)["datasets"]["movielens"]["variants"]["fp32"]["ours"]
    assert ours["train"]["samples_per_s"] == 20.0 and ours["train"]["runs_samples_per_s"] == [10, 30, 20]
    assert ours["pieces"]["inference_samples_per_s"] == {"128": 2.0, "256": 8.0}
    assert ours["pieces"]["runs_inference_samples_per_s"] == {"128": [1.0, 3.0, 2.0], "256": [9.0, 7.0, 8.0]}
    assert ours["pieces"]["training_samples_per_s"] == {"128": 0.5, "256": 2.0}
    assert ours["pieces"]["rows_per_pass_auto"] == 256
