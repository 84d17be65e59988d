"""benchmarks/matmul_bound.py: the FLOPs a training step is held to, and the rows of speed.py it reads."""

from __future__ import annotations

import json

import pytest


@pytest.fixture(scope="module")
def bound(benchmark_script):
    return benchmark_script("matmul_bound")


@pytest.mark.parametrize(("categorical", "numeric"), [(8, 1), (39, 0)])
def test_step_flops_match_the_papers_model_counted_by_hand(bound, categorical, numeric):
    # Per layer: Q, K, V and the residual projection (input width 16, then 2 heads x 32 = 64), and per head
    # the scores and the weighted values (F x F x 32 each); then the output layer; backward twice forward.
    b, f = 8, categorical + numeric
    forward = sum(4 * 2 * b * f * w * 64 + 2 * 2 * 2 * b * f * f * 32 for w in (16, 64, 64)) + 2 * b * f * 64
    assert bound.step_flops(categorical, numeric, batch=b) == 3 * forward


def test_measured_rates_take_autoints_paper_width_rows(bound, tmp_path):
    doc = {"machine": {"cpu": "some CPU"}, "datasets": {"movielens": {"variants": {
        "fp32": {"ours": {"train": {"samples_per_s": 100.0}}, "peers": {}},
        "fp32-2x8": {"ours": {"train": {"samples_per_s": 300.0}}, "peers": {}},  # other widths: no bound
        "bf16": {"ours": {"train": {"samples_per_s": 200.0}}, "peers": {}}}}}}
    path = tmp_path / "speed.json"
    path.write_text(json.dumps(doc))
    rows = bound.measured_rates(path)
    assert [(r["variant"], r["train_samples_per_s"], r["cpu"]) for r in rows] == [
        ("fp32", 100.0, "some CPU"), ("bf16", 200.0, "some CPU")]
