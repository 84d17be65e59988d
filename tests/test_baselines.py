"""benchmarks/quality.py's baselines: the same processed split as autoint, wide fields bucketed for HGB,
and results files of the first layout read back with their command."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from autoint.config import config_from_dict
from autoint.datasets.synthetic import SyntheticConfig, generate
from autoint.preprocess import prepare

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def quality(benchmark_script):
    return benchmark_script("quality")


def test_baselines_on_a_processed_split(tmp_path: Path, quality, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(quality, "HGB_TOP", 4)  # every field of 5-8 values is then "wide"
    monkeypatch.setattr(quality, "LR_C", (0.1, 1.0))
    monkeypatch.setattr(quality, "HGB_LEARNING_RATES", (0.1,))
    gen = SyntheticConfig(n_rows=6_000, n_categorical=4, n_numeric=2, cardinality=(5, 8), n_crosses=1,
                          cross_strength=2.0, seed=3)
    raw = generate(gen, tmp_path / "raw")
    cfg = config_from_dict({"data": {"format": "synthetic", "synthetic": gen.to_dict(),
                                     "split": {"method": "random", "seed": 1}}})
    prepare(cfg, raw, tmp_path / "processed", progress=False)
    data = quality.load_split(tmp_path / "processed")
    rows = json.loads((tmp_path / "processed" / "prepare.json").read_text())["rows"]
    assert {s: len(data[s]["y"]) for s in quality.SPLITS} == rows

    lr = quality.logistic_regression(data)
    assert lr["C"] in (0.1, 1.0) and set(lr["valid_auc"]) == {"0.1", "1.0"}
    x, categorical, notes = quality._hgb_design(data)
    assert categorical == [True] * 4 + [False] * 2 and len(notes) == 4  # all four fields bucketed
    assert all(x[s][:, :4].max() <= 4 for s in quality.SPLITS)  # 4 kept ids (codes 0-3) + the rare bucket 4
    hgb = quality.gradient_boosting(data)
    oracle = quality.oracle(cfg, raw)
    assert oracle["test_rows"] == len(data["test"]["y"])
    for model in (lr, hgb):
        assert 0.5 < model["test_auc"] <= oracle["test_auc"] + 0.03, (model, oracle)


def test_first_layout_read_as_an_autoint_part(tmp_path: Path, quality) -> None:
    old = tmp_path / "quality.json"
    old.write_text(json.dumps({"command": "python benchmarks/quality.py", "results": [
        {"dataset": "criteo", "config": "configs/criteo.yaml", "overrides": [], "rows": {"train": 8},
         "test_auc": 0.7, "test_logloss": 0.46, "epochs": 12, "prepare_s": 0.5, "train_s": 37.6}]}))
    entry = quality._old_entries(old)["criteo"]
    assert entry["autoint"] == {"test_auc": 0.7, "test_logloss": 0.46, "epochs": 12, "train_s": 37.6,
                                "command": "python benchmarks/quality.py"}
    assert "test_auc" not in entry and entry["rows"] == {"train": 8}
    assert quality._old_entries(tmp_path / "none.json") == {}


def test_tune_shipped_starts_from_the_shipped_settings_within_the_space(benchmark_script) -> None:
    """benchmarks/tune_shipped.py's first trial is the shipped config; every value is one the space accepts
    (no embedding L2, 0, goes in as the log range's low end), so Optuna runs it as given."""
    module = benchmark_script("tune_shipped")
    from autoint.config import load_config

    for config in ("criteo", "movielens", "frappe", "synthetic"):
        cfg = load_config(ROOT / "configs" / f"{config}.yaml")
        first = module.shipped_settings(cfg)
        assert set(first) == set(module.SPACE)
        assert first["model.num_layers"] == cfg.model.num_layers and first["train.lr"] == cfg.train.lr
        tuned = config_from_dict({**cfg.to_dict(), "tune": {"space": module.SPACE, "enqueue": [first]}})
        for key, value in first.items():
            entry = module.SPACE[key]
            assert (value in entry["choices"]) if "choices" in entry else entry["low"] <= value <= entry["high"], key
        assert tuned.tune.enqueue == [first]
    assert module.shipped_settings(load_config(ROOT / "configs" / "criteo.yaml"))[
        "train.embedding_weight_decay"] == module.SPACE["train.embedding_weight_decay"]["low"]


def test_tune_shipped_reselect_retrains_the_shipped_and_best_trials_and_picks_by_mean_validation(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, benchmark_script) -> None:
    """``--reselect K``: the shipped trial (number 0) and the K best others, each trained with every new seed;
    the pick is the highest mean validation AUC of those runs, whatever the study's own (lucky) values said."""
    import types

    import autoint.train
    from autoint.config import load_config
    from autoint.tune import _encoded

    module = benchmark_script("tune_shipped")
    cfg = load_config(ROOT / "configs" / "criteo.yaml")
    base = module.shipped_settings(cfg)

    def trial(number: int, value: float, layers: int) -> types.SimpleNamespace:
        return types.SimpleNamespace(number=number, value=value,
                                     params=_encoded(module.SPACE, {**base, "model.num_layers": layers}))

    trials = [trial(0, 0.70, 3), trial(1, 0.90, 1), trial(2, 0.80, 2), trial(3, 0.60, 1)]
    # Retrained, the study's best (1 layer) regresses and the 2-layer trial holds up; the seed nudges each run.
    truth = {1: 0.72, 2: 0.75, 3: 0.70}
    calls = []

    def fake_train(run_cfg, processed, folder, tracking_uri, progress):
        calls.append((run_cfg.model.num_layers, run_cfg.train.seed))
        folder.mkdir(parents=True)
        val = truth[run_cfg.model.num_layers] + run_cfg.train.seed / 1000
        (folder / "metrics.json").write_text(json.dumps({"best_epoch_val_auc": val}))
        return types.SimpleNamespace(run_dir=str(folder), test_metrics={"test_auc": 0.5})

    monkeypatch.setattr(autoint.train, "train", fake_train)
    study = types.SimpleNamespace(trials=trials)
    out = module.reselect(cfg, tmp_path / "data", tmp_path / "work", study, trials, k=2, seeds=[1, 2])
    assert [c["trial"] for c in out["candidates"]] == [0, 1, 2]  # shipped first, then the 2 best; trial 3 left out
    assert calls == [(3, 1), (3, 2), (1, 1), (1, 2), (2, 1), (2, 2)]
    assert out["picked_trial"] == 2 and out["candidates"][2]["mean_val_auc"] == pytest.approx(0.7515)
