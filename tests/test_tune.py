"""autoint tune (an Optuna study, every trial an MLflow child run) and the model registry (--register, @champion).

One tiny synthetic log is prepared per module. The study runs three enqueued
trials: two that learn (so both complete) and one with a learning rate of 1e-7,
whose validation AUC after its first epoch sits at chance, below the median of
the other two: the pruner stops it after that epoch, deterministically.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import mlflow
import optuna
import pandas as pd
import pytest
import yaml

from autoint import tracking
from autoint.cli import main
from autoint.config import ConfigError, TuneConfig, load_config

SMALL = [
    "data.format=synthetic",
    "data.synthetic={n_rows: 6000, n_categorical: 6, n_numeric: 2, n_crosses: 2, seed: 7}",
    "model.num_layers=1",
    "model.head_dim=8",
    "model.embedding_dim=8",
    "model.embedding_init_std=1.0",
    "train.batch_size=256",
    "train.max_epochs=2",
    "train.patience=5",
    "train.seed=11",
]
TUNE = [
    "tune.pruner={kind: median, startup_trials: 2, warmup_epochs: 0}",
    "tune.space={train.lr: {low: 1.0e-7, high: 0.05, log: true}, model.num_layers: {low: 1, high: 2}}",
    "tune.enqueue=[{train.lr: 0.01, model.num_layers: 1}, {train.lr: 0.02, model.num_layers: 2}, "
    "{train.lr: 1.0e-7, model.num_layers: 1}]",
]


def sqlite_uri(folder: Path) -> str:
    return f"sqlite:///{folder / 'mlflow.db'}"


@pytest.fixture(scope="module")
def processed(tmp_path_factory) -> Path:
    from autoint.train import ensure_processed

    root = tmp_path_factory.mktemp("tune-data")
    cfg = load_config(None, [*SMALL, f"data.raw={root / 'raw' / 'synthetic.parquet'}"])
    return ensure_processed(cfg, root / "processed", None, progress=False)


@pytest.fixture(scope="module")
def study(processed, tmp_path_factory):
    """A 3-trial study, with every look at the test split counted."""
    import autoint.tune
    from autoint.system import CTRSystem

    root = tmp_path_factory.mktemp("tune")
    tests, evaluated = [], []
    original_end, original_evaluate = CTRSystem.on_test_epoch_end, autoint.tune.evaluate

    def counted_end(self):
        tests.append(1)
        return original_end(self)

    def counted_evaluate(checkpoint, *args, **kwargs):
        evaluated.append(str(checkpoint))
        return original_evaluate(checkpoint, *args, **kwargs)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(CTRSystem, "on_test_epoch_end", counted_end)
        mp.setattr(autoint.tune, "evaluate", counted_evaluate)
        result = autoint.tune.tune(load_config(None, [*SMALL, *TUNE]), root / "study", data=processed, trials=3,
                                   study="tiny", tracking_uri=sqlite_uri(root), register="tuned")
    return {"result": result, "root": root, "tests": len(tests), "evaluated": evaluated, "processed": processed}


def optuna_study(result) -> optuna.Study:
    return optuna.load_study(study_name=result.study, storage=result.storage)


def children(uri: str, parent: str) -> list:
    client = mlflow.MlflowClient(uri)
    exp = client.get_run(parent).info.experiment_id
    return client.search_runs([exp], filter_string=f"tags.`mlflow.parentRunId` = '{parent}'")


# ----------------------------------------------------------------------------- the study
def test_every_trial_is_a_child_run_of_one_parent(study):
    result = study["result"]
    trials = optuna_study(result).trials
    runs = {r.info.run_id: r for r in children(result.tracking_uri, result.parent_run_id)}
    assert len(trials) == len(runs) == 3 and result.ran == 3
    for t in trials:
        run = runs[t.user_attrs["mlflow_run_id"]]
        assert run.data.tags["autoint.trial"] == str(t.number)
        assert run.data.params["train.lr"] == str(t.params["train.lr"])  # the trial's whole config
        assert run.data.params["model.num_layers"] == str(t.params["model.num_layers"])
        assert run.data.metrics["duration_s"] > 0
        history = tracking.metric_history(result.tracking_uri, run.info.run_id, "val_auc")
        reported = [t.intermediate_values[step] for step in sorted(t.intermediate_values)]
        assert [v for _, v in history] == pytest.approx(reported)
        state = t.state.name.lower()
        assert run.data.tags["autoint.trial_state"] == state
        assert run.info.status == {"complete": "FINISHED", "pruned": "KILLED"}[state]


def test_a_clearly_worse_trial_is_pruned_after_its_first_epoch(study):
    result = study["result"]
    by_number = {t.number: t for t in optuna_study(result).trials}
    assert [by_number[n].state.name for n in range(3)] == ["COMPLETE", "COMPLETE", "PRUNED"]
    worse = by_number[2]
    assert worse.params["train.lr"] == pytest.approx(1e-7) and list(worse.intermediate_values) == [0]
    assert worse.intermediate_values[0] < min(by_number[n].intermediate_values[0] for n in (0, 1))
    assert not (Path(result.out) / "trials" / "0002").exists()  # a pruned trial keeps no checkpoint
    assert result.states == {"complete": 2, "pruned": 1}


def test_the_parent_holds_the_best_trial_plots_and_best_yaml(study):
    result = study["result"]
    s = optuna_study(result)
    assert result.best_trial == s.best_trial.number and result.best_value == pytest.approx(s.best_value)
    info = tracking.run_info(result.tracking_uri, result.parent_run_id)
    assert info["status"] == "FINISHED"
    assert info["metrics"]["best_val_auc"] == pytest.approx(s.best_value)
    assert info["tags"]["autoint.best_trial"] == str(s.best_trial.number)
    assert json.loads(info["tags"]["best.train.lr"]) == pytest.approx(s.best_params["train.lr"])
    assert json.loads(info["params"]["tune.space.train.lr"])["log"] is True
    names = {a.path for a in mlflow.MlflowClient(result.tracking_uri).list_artifacts(result.parent_run_id)}
    assert {"best.yaml", "config.yaml", "metrics.json", "plots"} <= names
    plots = {Path(a.path).name for a in mlflow.MlflowClient(result.tracking_uri).list_artifacts(
        result.parent_run_id, "plots")}
    assert plots == {"optimization_history.png", "param_importances.png"}  # importances: 2 trials completed

    best = yaml.safe_load((Path(result.out) / "best.yaml").read_text())
    assert "tune" not in best  # a train config: `autoint train best.yaml` trains the best trial again
    assert best["train"]["lr"] == pytest.approx(s.best_params["train.lr"])
    assert best["model"]["num_layers"] == s.best_params["model.num_layers"]
    assert load_config(Path(result.out) / "best.yaml").model.num_layers == s.best_params["model.num_layers"]
    # The folder the trials trained on (--data here), in best.yaml and in each trial's params and tags: best.yaml
    # named the config's folder, which a study varying data.min_count had not trained on.
    assert best["data"]["processed"] == str(study["processed"])
    for run in children(result.tracking_uri, result.parent_run_id):
        assert run.data.params["data.processed"] == str(study["processed"])
        assert run.data.tags["autoint.data"] == str(Path(study["processed"]).resolve())


def test_the_test_split_is_scored_once_and_only_for_the_best_trial(study):
    result = study["result"]
    best = optuna_study(result).best_trial
    assert study["tests"] == 1  # no trial ran a test loop; the end of the study did, once
    assert study["evaluated"] == [str(Path(result.out) / best.user_attrs["checkpoint_in_folder"])]
    assert 0.5 < result.test_metrics["test_auc"] <= 1.0
    for run in children(result.tracking_uri, result.parent_run_id):
        has_test = any(k.startswith("test_") for k in run.data.metrics)
        assert has_test == (run.info.run_id == result.best_run_id), run.data.tags["autoint.trial"]
    parent = tracking.run_info(result.tracking_uri, result.parent_run_id)
    assert parent["metrics"]["test_auc"] == pytest.approx(result.test_metrics["test_auc"])
    assert result.model_uri == f"runs:/{result.best_run_id}/model"
    import mlflow
    import torch

    mlflow.set_tracking_uri(result.tracking_uri)  # the served checkpoint: the weights, not Adam's moments
    (served,) = Path(mlflow.artifacts.download_artifacts(artifact_uri=result.model_uri)).rglob("*.ckpt")
    assert "optimizer_states" not in torch.load(served, map_location="cpu", weights_only=True)
    summary = json.loads((Path(result.out) / "metrics.json").read_text())
    assert summary["best_trial"] == best.number
    assert summary["test_auc"] == pytest.approx(result.test_metrics["test_auc"])


def test_tune_registers_the_best_model_as_champion(study):
    result = study["result"]
    assert result.registered == "models:/tuned/1"
    assert tracking.run_id_from_model_uri("models:/tuned@champion", result.tracking_uri) == result.best_run_id


def test_resume_adds_trials_to_the_same_study_and_parent_run(study, processed, capsys):
    result = study["result"]
    cfg_path = Path(result.out) / "config.yaml"  # the config tuned, its tune section included
    assert "tune" in yaml.safe_load(cfg_path.read_text())
    # Another MLflow experiment would scatter the study's runs (the new trials' runs went there, their parent not):
    # refused, before any trial.
    code = main(["tune", str(cfg_path), "--out", result.out, "--resume", "--trials", "1", "--data", str(processed),
                 "--set", "tracking.experiment=elsewhere"])
    out, err = capsys.readouterr()
    assert code == 2 and "tracking.experiment: 'autoint' in the study, 'elsewhere' now" in err, err
    assert len(optuna_study(result).trials) == 3
    # tune.enqueue may change between commands: the new entry runs first (it was ignored on --resume); the three
    # entries the study has run already are not queued again.
    enqueue = "tune.enqueue=[{train.lr: 0.003, model.num_layers: 2}, {train.lr: 0.01, model.num_layers: 1}]"
    code = main(["tune", str(cfg_path), "--out", result.out, "--resume", "--trials", "1", "--data", str(processed),
                 "--set", enqueue])
    out, err = capsys.readouterr()
    assert code == 0, err
    s = optuna_study(result)
    assert len(s.trials) == 4 and "tiny: 1 trial run now, 4 in all" in out
    assert s.trials[3].params == {"train.lr": 0.003, "model.num_layers": 2}
    # the printed command repeats what this one named: followed, it resumes the same study
    assert (f"more trials   autoint tune {cfg_path} --set '{enqueue}' --data {processed} --out {result.out} "
            "--resume --trials N") in out
    assert len(children(result.tracking_uri, result.parent_run_id)) == 4
    assert result.parent_run_id in out
    exps = mlflow.MlflowClient(result.tracking_uri).search_runs(
        [mlflow.MlflowClient(result.tracking_uri).get_run(result.parent_run_id).info.experiment_id],
        filter_string="tags.`autoint.kind` = 'tune'")
    assert [r.info.run_id for r in exps] == [result.parent_run_id]  # no second parent run


def test_the_resume_hint_repeats_the_settings_a_study_was_searched_with():
    """A study started with --max-epochs 1 printed `autoint tune CONFIG --out DIR --resume --trials N`, which the
    study refused ("train.max_epochs: 1 in the study, 20 now"; a helper's hunt)."""
    import argparse

    from autoint.cli import _tune_again

    args = argparse.Namespace(config="my cfg.yaml", set=["model.num_layers=2"], max_epochs=1, max_bad_fraction=None,
                              raw=["a.csv"], data=None, study="s", storage=None, tracking_uri="sqlite:///m.db")
    assert _tune_again(args, Path("runs/t")) == (
        "autoint tune 'my cfg.yaml' --set model.num_layers=2 --set train.max_epochs=1 --raw a.csv --study s "
        "--tracking-uri sqlite:///m.db --out runs/t --resume --trials N")
    args.storage = "postgresql://user:secret@db/optuna"  # printed on stdout, into CI logs: the password hidden
    args.tracking_uri = "http://me:pa#ss@mlflow:5000"  # and the tracking URI's, though unencoded (a review's catch)
    again = _tune_again(args, Path("runs/t"))
    assert "--storage 'postgresql://user:***@db/optuna'" in again and "--tracking-uri 'http://me:***@mlflow:5000'" \
        in again and "secret" not in again and "pa#ss" not in again


def test_a_study_saved_under_the_engine_caps_old_default_resumes():
    """data.memory_limit (prepare's engine cap, whose default went from 1GB to 512MB) may change between a study's
    commands; a study saved before it could was still refused, its saved side unfiltered (a review's catch). So may
    train.keep_freed_memory, which studies saved before it was a setting lack (another review's catch)."""
    from types import SimpleNamespace

    from autoint.errors import InputError
    from autoint.tune import SETTINGS_KEY, _check_same_search, study_settings

    cfg = load_config(None, [*SMALL, *TUNE])
    saved = {**study_settings(cfg), "data.memory_limit": "1GB", "tracking.experiment": "autoint"}
    _check_same_search(SimpleNamespace(user_attrs={SETTINGS_KEY: saved}, study_name="s"), cfg, "sqlite:///s.db")
    # nor does a study saved before train.keep_freed_memory was a setting (no key), or with it set either way
    for memory in ({}, {"train.keep_freed_memory": False}):
        old = {**{k: v for k, v in saved.items() if k != "train.keep_freed_memory"}, **memory}
        _check_same_search(SimpleNamespace(user_attrs={SETTINGS_KEY: old}, study_name="s"), cfg, "sqlite:///s.db")
    changed = {**saved, "train.batch_size": 128}
    with pytest.raises(InputError, match=r"differs in train\.batch_size"):
        _check_same_search(SimpleNamespace(user_attrs={SETTINGS_KEY: changed}, study_name="s"), cfg, "sqlite:///s.db")


def test_a_study_folder_can_be_moved(study, processed, tmp_path, capsys):
    """tune.json names the folder's own study.db and each trial's checkpoint is kept relative to the folder too, so
    a moved study resumes from where it now is: before, --resume reopened the old absolute path."""
    import shutil

    from autoint.tune import _best_checkpoint

    result = study["result"]
    state = json.loads((Path(result.out) / "tune.json").read_text())
    assert state["storage_file"] == "study.db"
    shutil.copytree(result.out, tmp_path / "first")
    moved = shutil.move(tmp_path / "first", tmp_path / "elsewhere" / "study")  # nothing left at the first place
    before = len(optuna_study(result).trials)
    code = main(["tune", str(moved / "config.yaml"), "--out", str(moved), "--resume", "--trials", "1",
                 "--data", str(processed)])
    assert code == 0, capsys.readouterr().err
    moved_study = optuna.load_study(study_name=result.study, storage=f"sqlite:///{moved / 'study.db'}")
    assert len(moved_study.trials) == before + 1
    assert len(optuna_study(result).trials) == before  # the original study is left as it was
    best = optuna_study(result).best_trial  # the same trial in both: its checkpoint found in the moved folder
    assert _best_checkpoint(best, moved) == moved / best.user_attrs["checkpoint_in_folder"]
    assert _best_checkpoint(best, moved).is_file()


def test_a_new_study_in_a_used_folder_or_a_changed_search_is_refused(study, processed, capsys):
    result = study["result"]
    cfg_path = Path(result.out) / "config.yaml"
    assert main(["tune", str(cfg_path), "--out", result.out, "--trials", "1"]) == 2
    assert "already holds a study" in capsys.readouterr().err
    code = main(["tune", str(cfg_path), "--out", result.out, "--resume", "--trials", "1", "--data", str(processed),
                 "--set", "model.head_dim=16"])
    err = capsys.readouterr().err
    assert code == 2 and "model.head_dim: 8 in the study, 16 now" in err and len(err.strip().splitlines()) == 1


# ----------------------------------------------------------------------------- the tune section
@pytest.mark.parametrize(("override", "named"), [
    ("tune.space={model.no_such: {low: 1, high: 2}}", "tune.space.model.no_such: unknown setting"),
    ("tune.space={train.lr: {low: 0.001, high: 0.01, step: 1.0e-300}}", "tune.space.train.lr.step: makes more than "
                                                                        "1e+15 steps"),
    ("tune.space={yes: {low: 1, high: 2}}", "tune.space.True: a setting's name is text such as train.lr, got True"),
    ("tune.space={data.format: {choices: [criteo]}}", "tune.space.data.format: unknown setting"),
    ("tune.space={model.num_layers: {low: 3, high: 1}}", "tune.space.model.num_layers: low must be below high"),
    ("tune.space={model.num_layers: {low: 1.5, high: 3}}", "tune.space.model.num_layers: low and high must each"),
    ("tune.space={model.num_heads: {low: 0, high: 3}}", "tune.space.model.num_heads: 0 is not a valid value"),
    ("tune.space={train.lr: {low: 0, high: 0.1, log: true}}", "tune.space.train.lr.log: needs low > 0"),
    ("tune.space={train.lr: {low: 0.001, high: 0.1, scale: log}}", "tune.space.train.lr.scale: unknown key"),
    ("tune.space={model.residual: {low: 1, high: 2}}", "tune.space.model.residual: is not a number"),
    ("tune.space={model.residual: {choices: [sideways]}}", "tune.space.model.residual: 'sideways' is not a valid"),
    ("tune.space={model.dnn_hidden: {choices: []}}", "tune.space.model.dnn_hidden.choices: must be a non-empty"),
    ("tune.pruner.kind=hyperband", "tune.pruner.kind"),
    ("tune.pruner.warmup_epochs=-1", "tune.pruner.warmup_epochs"),
    ("tune.direction=minimize", "tune.direction"),
    ("tune.trials=-2", "tune.trials"),
    ("tune.enqueue=[{model.residual: none}]", "tune.enqueue[0].model.residual: is not a setting of tune.space"),
    # values outside the space: Optuna ran them all the same (a 7-layer best trial) or failed the study
    ("tune.enqueue=[{model.num_layers: 7}]", "tune.enqueue[0].model.num_layers: 7 is outside the space's range [1, 4]"),
    ("tune.enqueue=[{model.num_layers: abc}]", "tune.enqueue[0].model.num_layers: must be an integer, got 'abc'"),
    ("tune.enqueue=[{model.head_dim: 12}]", "tune.enqueue[0].model.head_dim: 12 is not one of the choices [8, 16"),
    ("tune.enqueue=[{model.first_order: 0}]", "tune.enqueue[0].model.first_order: 0 is not one of the choices"),
    # Optuna moved high to the last whole step, warning on every trial
    ("tune.space={model.num_layers: {low: 1, high: 4, step: 2}}",
     "tune.space.model.num_layers.step: must divide high - low (4 - 1) into whole steps, got 2"),
    ("tune.unknown=1", "unknown setting tune.unknown"),
])
def test_tune_section_errors_name_the_setting(override, named):
    with pytest.raises(ConfigError) as e:
        load_config(None, [override])
    assert named in str(e.value)


def test_the_default_space_is_valid_and_the_tune_section_stays_out_of_runs():
    cfg = load_config(None, ["tune.trials=5"])
    space = cfg.tune.search_space()
    assert {"model.num_layers", "model.num_heads", "model.head_dim", "model.embedding_dim", "model.dnn_hidden",
            "model.first_order", "model.dnn_dropout", "train.lr", "train.embedding_weight_decay",
            "train.batch_size"} <= set(space)
    assert space["train.lr"]["log"] and space["train.embedding_weight_decay"]["log"]
    assert [] in space["model.dnn_hidden"]["choices"]  # AutoInt as well as AutoInt+
    assert not any(k.startswith("tune") for k in cfg.flat())  # a run's MLflow params never carry it
    assert "tune" not in load_config(None).to_dict()  # nor does a plain config


def test_tuning_data_min_count_needs_the_raw_log(tmp_path):
    from autoint.tune import tune

    cfg = load_config(None, ["data.format=criteo", "tune.space={data.min_count: {low: 1, high: 5}}"])
    with pytest.raises(ConfigError, match=r"tune\.space\.data\.min_count: .*--raw"):
        tune(cfg, tmp_path / "study", trials=1, tracking_uri=sqlite_uri(tmp_path))


def test_a_searched_numeric_transform_gets_a_processed_folder_per_value(processed, tmp_path):
    """``data.numeric_transform`` in the space: each value prepared once from the raw log into a folder of its own;
    under ``bucket`` the numeric fields reach the trial's model as categorical ones."""
    from autoint.schema import Schema
    from autoint.tune import tune

    raw = processed.parent / "raw" / "synthetic.parquet"
    assert raw.is_file()
    cfg = load_config(None, [*SMALL, "train.max_epochs=1", "tune.space={data.numeric_transform: {choices: [none, "
                             "bucket]}}", "tune.enqueue=[{data.numeric_transform: none}, "
                             "{data.numeric_transform: bucket}]"])
    result = tune(cfg, tmp_path / "study", raw=raw, trials=2, tracking_uri=sqlite_uri(tmp_path))
    assert result.states == {"complete": 2}
    folders = sorted(p.name for p in (tmp_path / "study" / "data").iterdir())
    assert folders == ["numeric_transform-bucket", "numeric_transform-none"]
    kinds = {name: {f.kind for f in Schema.load(tmp_path / "study" / "data" / name / "schema.json").fields}
             for name in folders}
    assert kinds == {"numeric_transform-bucket": {"categorical"}, "numeric_transform-none": {"categorical", "numeric"}}
    # Resumed on another raw log, a searched-data study compared trials across logs (a review's catch): refused
    import shutil

    from autoint.errors import InputError

    other = tmp_path / "other" / "synthetic.parquet"
    other.parent.mkdir()
    pd.read_parquet(raw).iloc[:500].to_parquet(other)
    for extra in raw.parent.iterdir():
        if extra.name != raw.name:
            shutil.copy(extra, other.parent / extra.name)
    with pytest.raises(InputError, match=r"scored its trials on other data than .*other.*\(its input differ"):
        tune(cfg, tmp_path / "study", raw=other, trials=0, resume=True, tracking_uri=sqlite_uri(tmp_path))


def test_a_numeric_transform_search_that_changes_nothing_is_refused(tmp_path):
    from autoint.tune import tune

    space = "tune.space={data.numeric_transform: {choices: [none, bucket]}}"
    own = "data.columns={label: y, categorical: [a], numeric: {price: log1p}}"  # the field's own transform wins
    for overrides, why in ((["data.format=table", own], "every numeric field names its own transform .*price"),
                           (["data.format=frappe"], "the log has no numeric field")):
        cfg = load_config(None, [*overrides, space])
        with pytest.raises(ConfigError, match=rf"tune\.space\.data\.numeric_transform: .*{why}"):
            tune(cfg, tmp_path / "study", raw=tmp_path / "log.csv", trials=1, tracking_uri=sqlite_uri(tmp_path))


def test_the_tune_keys_are_documented():
    text = (Path(__file__).parents[1] / "configs" / "README.md").read_text()
    part = text.split("<!-- keys: tune -->", 1)[1].split("<!-- end -->", 1)[0]
    import re

    documented = set(re.findall(r"^\| `([^`]+)` \|", part, flags=re.MULTILINE))
    expected = {f"tune.{f}" for f in TuneConfig.__dataclass_fields__ if f != "pruner"}
    assert documented == expected | {"tune.pruner.kind", "tune.pruner.startup_trials", "tune.pruner.warmup_epochs"}


# ----------------------------------------------------------------------------- the registry
@pytest.fixture(scope="module")
def registered(processed, tmp_path_factory):
    from autoint.train import train

    root = tmp_path_factory.mktemp("registry")
    cfg = load_config(None, [*SMALL, "train.max_epochs=1", "train.precision=32-true"])  # fp32 on any CPU
    result = train(cfg, processed, root / "run", tracking_uri=sqlite_uri(root), progress=False, register="tiny")
    return result


CHAMPION = "models:/tiny@champion"


def test_train_registers_its_model_with_the_alias_champion(registered):
    uri = registered.tracking_uri
    assert registered.registered == "models:/tiny/1"
    version = mlflow.MlflowClient(uri).get_model_version_by_alias("tiny", "champion")
    assert str(version.version) == "1" and version.run_id == registered.run_id
    assert tracking.run_id_from_model_uri(CHAMPION, uri) == registered.run_id
    # The same logged model registered again (tune --resume --register with no new best) is the same version.
    assert tracking.register_model(uri, registered.run_id, "tiny") == "models:/tiny/1"
    assert len(mlflow.MlflowClient(uri).search_model_versions("name = 'tiny'")) == 1


def test_predict_and_evaluate_take_the_champion(registered, processed, tmp_path, capsys):
    from autoint.predict import raw_example

    uri = registered.tracking_uri
    rows = tmp_path / "rows.csv"
    raw_example(processed, rows=20).to_csv(rows, index=False)
    assert main(["predict", registered.model_uri, "--input", str(rows), "--output", str(tmp_path / "p.csv"),
                 "--tracking-uri", uri]) == 0
    assert len(pd.read_csv(tmp_path / "p.csv")) == 20
    assert main(["evaluate", CHAMPION, "--data", str(processed), "--tracking-uri", uri, "--quiet"]) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("test_auc"))
    assert float(line.split()[1]) == pytest.approx(registered.test_metrics["test_auc"], abs=1e-4)


def test_inspect_takes_the_champion_and_logs_to_its_run(registered, processed, tmp_path):
    uri = registered.tracking_uri
    assert main(["inspect", CHAMPION, "--data", str(processed), "--out", str(tmp_path / "insp"), "--rows", "64",
                 "--tracking-uri", uri]) == 0
    names = {a.path for a in mlflow.MlflowClient(uri).list_artifacts(registered.run_id)}
    assert "inspections" in names  # each `autoint inspect` under inspections/<UTC time>-<split>


def test_inspect_says_what_to_do_when_its_run_cannot_take_the_inspection(registered, processed, tmp_path,
                                                                       monkeypatch, capsys, caplog):
    """A helper's hunt: a tracking server lost while inspect logged told the user to `--resume`, which inspect has
    not; an inspection logged into a deleted run was shown nowhere, without a word."""
    import autoint.tracking

    real = autoint.tracking.run_info
    monkeypatch.setattr(autoint.tracking, "run_info", lambda uri, run_id: {**real(uri, run_id),
                                                                          "lifecycle_stage": "deleted"})

    def lost(*args, **kwargs):
        raise tracking.ServerLost("MLflow tracking server ... continue the run with --resume", "Max retries exceeded")

    monkeypatch.setattr(autoint.tracking, "log_artifacts", lost)
    code = main(["inspect", CHAMPION, "--data", str(processed), "--out", str(tmp_path / "insp"), "--rows", "64",
                 "--tracking-uri", registered.tracking_uri])
    err = capsys.readouterr().err
    assert code == 2 and "stopped answering while it was logged to run" in err and "(Max retries exceeded)" in err
    assert "run this command again to log it" in err and "--resume" not in err
    assert f"MLflow run {registered.run_id} is deleted in" in caplog.text
    assert (tmp_path / "insp").is_dir()  # written all the same


def test_serve_takes_the_champion(registered, monkeypatch):
    import autoint.serving as serving

    seen = {}

    class FakeServer:
        def __init__(self, cmd, env=None, preexec_fn=None):
            folder = Path(cmd[cmd.index("-m", 3) + 1])
            seen["checkpoints"] = sorted(p.name for p in folder.rglob("*.ckpt"))

        def wait(self):
            return 0

        def poll(self):  # stopped: nothing left to kill
            return 0

    monkeypatch.setattr(serving.subprocess, "Popen", FakeServer)
    assert main(["serve", CHAMPION, "--tracking-uri", registered.tracking_uri, "--port", "0"]) == 0
    assert seen["checkpoints"] == ["best.ckpt"]


def test_a_model_fetched_from_the_store_leaves_nothing_in_the_temporary_folder(registered, tmp_path, monkeypatch):
    """Each `predict`, `evaluate`, `inspect` or `serve` of a runs:/ or models:/ URI left the whole model MLflow
    fetched in a folder of /tmp that nothing removed (its vocabularies too: gigabytes on a large log)."""
    import tempfile

    from autoint.predict import Scorer
    from autoint.serving import serve

    temp = tmp_path / "temp"
    temp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temp))
    for uri in (registered.model_uri, CHAMPION):  # runs:/ is copied; models:/ in a local store is read in place
        Scorer.from_checkpoint(uri, tracking_uri=registered.tracking_uri)
        assert not any(temp.iterdir())  # removed once read
    with monkeypatch.context() as patch:  # (the subprocess module's own Popen: undone before the command below)
        patch.setattr("autoint.serving.subprocess.Popen", lambda *a, **k: SimpleNamespace(wait=lambda: 0,
                                                                                            poll=lambda: 0))
        assert serve(registered.model_uri, port=0, tracking_uri=registered.tracking_uri) == 0
    assert not any(temp.iterdir())
    env = {**os.environ, "TMPDIR": str(temp)}  # the command line: removed when the command ends
    done = subprocess.run([str(Path(sys.executable).parent / "autoint"), "predict", registered.model_uri, "--input",
                           str(tmp_path / "none.csv"), "--output", str(tmp_path / "p.csv"),
                           "--tracking-uri", registered.tracking_uri],
                          env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 2 and "none.csv" in done.stderr  # fetched, then refused the input
    assert not any(temp.iterdir())


def test_registering_again_moves_the_champion_and_a_bad_alias_is_one_line(registered, capsys, tmp_path):
    uri = registered.tracking_uri
    assert tracking.register_model(uri, registered.run_id, "tiny-again") == "models:/tiny-again/1"
    client = mlflow.MlflowClient(uri)
    client.delete_registered_model_alias("tiny-again", "champion")
    # the same logged model again: the version it already is (no copy as version 2), the champion moved to it
    assert tracking.register_model(uri, registered.run_id, "tiny-again") == "models:/tiny-again/1"
    assert str(client.get_model_version_by_alias("tiny-again", "champion").version) == "1"
    code = main(["predict", "models:/tiny@nobody", "--input", "x.csv", "--output", str(tmp_path / "o.csv"),
                 "--tracking-uri", uri])
    err = capsys.readouterr().err
    assert code == 2 and "models:/tiny@nobody" in err and len(err.strip().splitlines()) == 1


def test_the_summary_line_counts_trials_left_running():
    """A trial whose command was killed stays 'running' until the heartbeat fails it: the printed count
    of the study's trials includes it and says why, rather than leaving it out of the sum."""
    from autoint.cli import _running

    assert _running(0) == ""
    assert _running(1) == (", 1 running: elsewhere, or left by a killed command and failed by the heartbeat "
                           "3 minutes after their last beat")


def test_an_unusable_study_storage_is_one_line(tmp_path):
    """SQLAlchemy's errors run to many lines (the SQL, a link); the message keeps the first."""
    from autoint.config import config_from_dict
    from autoint.tune import RunFolderError, _open_study

    cfg = config_from_dict({"data": {"format": "synthetic"}, "tune": {}})
    with pytest.raises(RunFolderError) as e:
        _open_study(cfg, f"sqlite:///{tmp_path}/no/such/folder/study.db", "s", resume=False)
    assert str(e.value).endswith("study.db: OperationalError: (sqlite3.OperationalError) unable to open database file")


def test_set_takes_one_entry_of_the_search_space():
    """--set tune.space.train.lr=... was split at every dot ('tune.space.train: unknown setting'): the space's keys
    are dotted settings themselves (a helper's hunt)."""
    cfg = load_config(None, ["tune.space={model.num_layers: {low: 1, high: 2}}",
                             "tune.space.train.lr={low: 0.001, high: 0.01, log: true}"])
    assert cfg.tune.space == {"model.num_layers": {"low": 1, "high": 2},
                              "train.lr": {"low": 0.001, "high": 0.01, "log": True}}


def test_whole_choices_of_a_float_setting_are_floats():
    """choices [0, 0.1] of a float setting kept 0 an int, so a queued 0.0 was 'not one of the choices'."""
    cfg = load_config(None, ["tune.space={model.attention_dropout: {choices: [0, 0.1]}}",
                             "tune.enqueue=[{model.attention_dropout: 0.0}, {model.attention_dropout: 0}]"])
    assert cfg.tune.space["model.attention_dropout"]["choices"] == [0.0, 0.1]
    assert all(isinstance(c, float) for c in cfg.tune.space["model.attention_dropout"]["choices"])
    assert load_config(None, ["tune.space={model.num_layers: {choices: [1, 2]}}"]).tune.space[
        "model.num_layers"]["choices"] == [1, 2]


def test_fine_steps_are_taken_where_optuna_takes_them():
    """The step cap guards Optuna's decimal arithmetic of float ranges only (a review: it refused ten million
    integer steps, which Optuna draws); a step of 1e-12 divides 0.009 within float64's error."""
    assert load_config(None, ["tune.space={train.seed: {low: 0, high: 10000000, step: 1}}"]).tune.space
    assert load_config(None, ["tune.space={train.lr: {low: 0.001, high: 0.01, step: 1.0e-12}}"]).tune.space
    with pytest.raises(ConfigError, match=r"tune.space.train.lr.step: must divide high - low"):
        load_config(None, ["tune.space={train.lr: {low: 0.001, high: 0.01, step: 0.004}}"])
    # checked in decimal and integers exactly, as Optuna checks: the tolerance once grew with the steps (a review)
    for space in ("{train.weight_decay: {low: 0.0, high: 1.0, step: 3.0e-12}}",
                  "{train.batch_size: {low: 1, high: 1000000000000000001, step: 7}}"):
        with pytest.raises(ConfigError, match=r"step: must divide high - low"):
            load_config(None, [f"tune.space={space}"])
    assert load_config(None, ["tune.space={train.weight_decay: {low: 100000000.0, high: 100000000.3, step: 0.1}}"])
    with pytest.raises(ConfigError, match=r"0.5000000000001 is not on the space's steps"):
        load_config(None, ["tune.space={train.weight_decay: {low: 0.0, high: 1.0, step: 1.0e-9}}",
                           "tune.enqueue=[{train.weight_decay: 0.5000000000001}]"])


def test_a_draw_the_config_refuses_is_one_line_not_a_traceback():
    """A trial whose settings the config refuses fails alone (the reason in the tag autoint.error); Optuna's
    warning kept its ~25-line traceback per such draw (a helper's hunt)."""
    import logging
    import sys

    from autoint.tune import _no_traceback_for_a_stop

    try:
        raise ConfigError("model.residual: 'identity' needs embedding_dim == num_heads * head_dim")
    except ConfigError:
        record = logging.LogRecord("optuna.study._optimize", logging.WARNING, __file__, 1, "Trial 0 failed", None,
                                   sys.exc_info())
    assert _no_traceback_for_a_stop(record) and record.exc_info is None
    try:
        raise ValueError("a bug")
    except ValueError:
        bug = logging.LogRecord("optuna.study._optimize", logging.WARNING, __file__, 1, "Trial 1 failed", None,
                                sys.exc_info())
    assert _no_traceback_for_a_stop(bug) and bug.exc_info is not None  # a bug keeps its traceback


def test_a_tune_whose_data_cannot_be_read_leaves_no_study_behind(tmp_path, capsys):
    """The data is prepared before the study is opened: a bad raw path left OUT/tune.json and a study, so the same
    command, mended, was refused ('already holds a study; pass --resume'). And --data is refused where the space
    varies data settings (each trial's folder is prepared under OUT/data: it went unread, without a word)."""
    cfg_path = tmp_path / "tune.yaml"
    load_config(None, [*SMALL, *TUNE]).save(cfg_path)
    out = tmp_path / "study"
    assert main(["tune", str(cfg_path), "--raw", str(tmp_path / "missing.parquet"), "--out", str(out),
                 "--tracking-uri", sqlite_uri(tmp_path)]) == 2
    assert "missing.parquet" in capsys.readouterr().err
    assert not (out / "tune.json").exists() and not (out / "study.db").exists()
    code = main(["tune", str(cfg_path), "--set", "tune.space={data.min_count: {low: 1, high: 2}}", "--set",
                 "tune.enqueue=[]", "--raw",
                 str(tmp_path / "missing.parquet"), "--data", str(tmp_path / "p"), "--out", str(out)])
    assert code == 2
    assert "--data " + str(tmp_path / "p") + " would not be read; leave it out" in capsys.readouterr().err


def test_a_config_without_a_tune_section_refuses_a_set_of_the_default_space(tmp_path, capsys):
    """The default space searches train.lr: a --set of it was taken, and every trial drew its own (the README's
    own example tunes configs/synthetic.yaml, which has no tune section)."""
    config = tmp_path / "c.yaml"
    load_config(None, SMALL).save(config)
    assert main(["tune", str(config), "--out", str(tmp_path / "s"), "--trials", "0", "--set", "train.lr=0.02"]) == 2
    assert "--set train.lr: tune.space.train.lr searches this setting" in capsys.readouterr().err
    assert not (tmp_path / "s").exists()


def test_a_data_search_on_a_fresh_synthetic_log_and_bad_data_a_trial_finds(tmp_path, capsys, monkeypatch):
    """A helper's hunt: a data search with format synthetic failed where the log was not generated yet (its
    fingerprint was taken first), after opening the study; bad data a trial's prepare finds printed Optuna's
    traceback and left a study the mended command could not start again: one line now, saying what to do.
    best.yaml names the config's relative data.raw absolute (only --raw was), so it trains from anywhere."""
    monkeypatch.chdir(tmp_path)
    cfg_path = tmp_path / "tune.yaml"
    load_config(None, [*SMALL, "train.max_epochs=1", "data.raw=gen/synthetic.parquet",
                       "tune.space={data.min_count: {choices: [1]}}"]).save(cfg_path)
    assert main(["tune", str(cfg_path), "--trials", "1", "--out", str(tmp_path / "a"),
                 "--tracking-uri", sqlite_uri(tmp_path)]) == 0, capsys.readouterr().err
    assert (tmp_path / "gen" / "synthetic.parquet").is_file()
    best = yaml.safe_load((tmp_path / "a" / "best.yaml").read_text())
    assert best["data"]["raw"] == str(tmp_path / "gen" / "synthetic.parquet")
    pd.DataFrame({"a": [1, 2], "b": ["x", "y"]}).to_parquet(tmp_path / "other.parquet")  # no label, no fields
    code = main(["tune", str(cfg_path), "--trials", "1", "--out", str(tmp_path / "b"), "--raw",
                 str(tmp_path / "other.parquet"), "--tracking-uri", sqlite_uri(tmp_path)])
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err, err
    assert f"the study this command started has no completed trial: remove {tmp_path / 'b'} before" in err


def test_a_diverged_trial_fails_and_only_the_best_trials_folder_is_kept(processed, tmp_path, capsys):
    """A trial whose training loss went NaN completed, could be the best, and was tested and logged (autoint train
    stops such a run); it now fails with the reason as its tag, the study goes on, and its folder goes."""
    cfg = load_config(None, [*SMALL, "train.max_epochs=1", "tune.space={train.lr: {choices: [1.0e30, 0.01]}}",
                             "tune.enqueue=[{train.lr: 1.0e30}, {train.lr: 0.01}]"])
    from autoint.tune import tune

    result = tune(cfg, tmp_path / "study", data=processed, trials=2, tracking_uri=sqlite_uri(tmp_path))
    assert result.states == {"fail": 1, "complete": 1} and result.best_params == {"train.lr": 0.01}
    failed = next(r for r in mlflow.MlflowClient(sqlite_uri(tmp_path)).search_runs(
        [mlflow.MlflowClient(sqlite_uri(tmp_path)).get_experiment_by_name("autoint").experiment_id])
        if r.data.tags.get("autoint.trial") == "0")
    assert failed.data.tags["autoint.error"].startswith("training diverged: the train loss of epoch 1 is nan")
    assert sorted(p.name for p in (tmp_path / "study" / "trials").iterdir()) == ["0001"]
    best = yaml.safe_load((tmp_path / "study" / "best.yaml").read_text())  # usable from any folder
    assert Path(best["data"]["processed"]).is_absolute()


def test_workers_started_together_draw_apart(processed, tmp_path):
    """The sampler was seeded by the number of trials a command found, so two study workers started together drew
    the same settings; each trial now draws from a seed of its own number (the same seed and history, the same
    draws)."""
    from autoint.tune import _open_study, suggest, trial_sampler

    cfg = load_config(None, [*SMALL, "tune.space={train.lr: {low: 1.0e-4, high: 1.0e-1, log: true}}"], tune=True)
    storage = f"sqlite:///{tmp_path / 'study.db'}"
    first = _open_study(cfg, storage, "s", resume=False)
    second = _open_study(cfg, storage, "s", resume=True)  # a second worker, which saw as many trials
    a, b = first.ask(), second.ask()
    draws = []
    for study, trial in ((first, a), (second, b)):
        study.sampler = trial_sampler(cfg, trial.number)
        draws.append(suggest(trial, cfg.tune.search_space())["train.lr"])
    assert draws[0] != draws[1]
    again = _open_study(cfg, f"sqlite:///{tmp_path / 'again.db'}", "s", resume=False)
    trial = again.ask()
    again.sampler = trial_sampler(cfg, trial.number)
    assert suggest(trial, cfg.tune.search_space())["train.lr"] == draws[0]


@pytest.mark.parametrize(("argv", "needle"), [
    (["--max-epochs", "1", "--set", "tune.space={train.max_epochs: {low: 2, high: 3}}"],
     "--max-epochs: tune.space.train.max_epochs searches this setting"),
    (["--set", "train.lr=0.5"], "--set train.lr: tune.space.train.lr searches this setting"),
    (["--set", "train={lr: 0.5, max_epochs: 1}"], "--set train: tune.space.train.lr searches this setting"),
    (["--timeout", "nan"], "--timeout nan: must be a finite number of seconds > 0"),
    (["--set", "tune.space={train.precision: {choices: [bogus, 32-true]}}"],  # failed trial 0, not the config
     "tune.space.train.precision: 'bogus' is not a valid value here"),
    (["--register", ""], "argument --register: '': a registered model's name is not empty"),
    (["--set", "train.devices=2", "--set", "train.accelerator=cpu"], "train.devices: a study trains each trial in "
                                                                    "this process on one device"),
])
def test_tune_refuses_settings_it_would_override_or_die_of(processed, tmp_path, capsys, argv, needle):
    """--max-epochs or --set of a searched setting was replaced in every trial without a word; --timeout nan was a
    traceback; --register '' was ignored; train.devices=2 started a copy of the command per device, which refused
    the study folder, and the study was killed with trial 0 left RUNNING."""
    config = tmp_path / "c.yaml"
    load_config(None, [*SMALL, "tune.space={train.lr: {low: 1.0e-4, high: 1.0e-1, log: true}}"],
                tune=True).save(config)
    try:
        status = main(["tune", str(config), "--data", str(processed), "--out", str(tmp_path / "s"),
                       "--tracking-uri", sqlite_uri(tmp_path), "--trials", "1", *argv])
    except SystemExit as e:  # argparse's own refusal of an argument
        status = e.code
    assert status == 2
    err = capsys.readouterr().err
    assert needle in err and "Traceback" not in err
    assert not (tmp_path / "s" / "trials").exists()


def test_a_command_whose_trials_all_failed_is_not_a_success(processed, tmp_path, capsys):
    """Every trial failing (here: diverging) printed 'best trial none completed yet' and exited 0."""
    config = tmp_path / "c.yaml"
    load_config(None, [*SMALL, "train.max_epochs=1", "tune.space={train.lr: {choices: [1.0e30]}}"],
                tune=True).save(config)
    assert main(["tune", str(config), "--data", str(processed), "--out", str(tmp_path / "s"), "--quiet",
                 "--tracking-uri", sqlite_uri(tmp_path), "--trials", "1"]) == 2
    out, err = capsys.readouterr()
    assert "best trial    none completed yet" in out and "all 1 trial run now failed" in err


def test_resume_with_no_trials_fails_a_trial_whose_process_died(processed, tmp_path, monkeypatch):
    """Optuna fails a trial whose heartbeat stopped only inside optimize, which --trials 0 never calls: the trial and
    its MLflow run stayed RUNNING, though the command said the heartbeat would fail them."""
    import time

    import autoint.tune
    from autoint.tune import _open_study, tune

    monkeypatch.setattr(autoint.tune, "HEARTBEAT_S", 1)
    monkeypatch.setattr(autoint.tune, "GRACE_S", 1)
    cfg = load_config(None, [*SMALL, "tune.space={train.lr: {low: 1.0e-4, high: 1.0e-1, log: true}}"])
    tune(cfg, tmp_path / "s", data=processed, trials=0, tracking_uri=sqlite_uri(tmp_path))
    tuned = load_config(None, [*SMALL, "tune.space={train.lr: {low: 1.0e-4, high: 1.0e-1, log: true}}"], tune=True)
    study = _open_study(tuned, f"sqlite:///{tmp_path / 's' / 'study.db'}", "autoint", resume=True)
    trial = study.ask()  # a worker that died mid-trial: RUNNING, its last heartbeat now
    study._storage.record_heartbeat(trial._trial_id)
    time.sleep(2.5)
    result = tune(cfg, tmp_path / "s", data=processed, trials=0, resume=True, tracking_uri=sqlite_uri(tmp_path))
    assert result.states.get("fail") == 1 and not result.states.get("running")


def test_a_server_lost_in_a_trial_is_not_asked_again_to_log_or_end_anything(processed, tmp_path, monkeypatch):
    """The trial's clean-up logged its duration, its state tag and its end through the lost server, then the
    study ended its parent run: four more rounds of MLflow's retries, minutes each, in silence (a reviewer's catch)."""
    import autoint.tune as tune_module

    def lost(*args, **kwargs):
        raise tracking.ServerLost("MLflow tracking server http://x stopped answering")

    monkeypatch.setattr(tune_module, "fit_trial", lost)
    calls: list[str] = []
    for name in ("log_metrics", "set_tags", "end_run"):
        real = getattr(tracking, name)
        monkeypatch.setattr(tracking, name, lambda *a, _n=name, _r=real, **k: (calls.append(_n), _r(*a, **k))[1])
    cfg = load_config(None, [*SMALL, "train.max_epochs=1", "tune.space={train.lr: {choices: [0.01]}}"])
    with pytest.raises(tracking.ServerLost):
        tune_module.tune(cfg, tmp_path / "study", data=processed, trials=1, tracking_uri=sqlite_uri(tmp_path))
    before = calls.index("set_tags")  # the trial's data tag, before its training
    assert "end_run" not in calls and calls[before + 1:] == []


def test_a_study_resumed_on_other_data_a_run_folder_or_a_mistyped_out_is_refused(study, registered, processed,
                                                                                tmp_path, capsys):
    """A helper's hunt: --resume on a smaller log was accepted, and a trial scored on its validation split 'beat'
    those of the first; --out naming a train run replaced its config.yaml and metrics.json; --resume with a
    mistyped --out left that folder behind with an empty study.db; the parent run recorded the config's
    data.processed, not the folder the trials read."""
    import json
    import shutil

    result = study["result"]
    params = tracking.run_info(result.tracking_uri, result.parent_run_id)["params"]
    assert params["data.processed"] == str(processed.resolve())
    other = tmp_path / "other"
    shutil.copytree(processed, other)
    report = json.loads((other / "prepare.json").read_text())
    report["rows"]["valid"] -= 1  # other data, as far as its identity tells
    (other / "prepare.json").write_text(json.dumps(report))
    cfg_path = str(Path(result.out) / "config.yaml")
    code = main(["tune", cfg_path, "--out", result.out, "--resume", "--trials", "0", "--data", str(other)])
    err = capsys.readouterr().err
    assert code == 2 and "scored its trials on other data than" in err and "(its rows differ)" in err, err
    run_dir = Path(registered.run_dir)
    before = (run_dir / "config.yaml").read_bytes()
    assert main(["tune", cfg_path, "--out", str(run_dir), "--trials", "1", "--data", str(processed)]) == 2
    assert "holds a run of `autoint train` (its run.json), not a study" in capsys.readouterr().err
    assert (run_dir / "config.yaml").read_bytes() == before and not (run_dir / "study.db").exists()
    mine = tmp_path / "mine"  # a folder holding a user's own config.yaml: the study would replace it
    mine.mkdir()
    (mine / "config.yaml").write_text("# my notes\nmodel: {num_layers: 2}\n")
    assert main(["tune", cfg_path, "--out", str(mine), "--trials", "1", "--data", str(processed)]) == 2
    assert "holds a config.yaml that is no study's" in capsys.readouterr().err
    assert (mine / "config.yaml").read_text().startswith("# my notes")
    assert main(["tune", cfg_path, "--out", str(tmp_path / "typo"), "--resume", "--trials", "0"]) == 2
    assert "--resume: no study in" in capsys.readouterr().err and not (tmp_path / "typo").exists()


def test_a_study_folder_resumes_its_own_study_only(study, processed, tmp_path, capsys):
    """A helper's hunt: --resume of a folder with another study's --storage or --study repointed its tune.json,
    removed its best trial's checkpoint and wrote the other's best.yaml over its own. Refused now, as are an
    in-memory storage (never resumable), a damaged tune.json and an empty --study; a --resume that names a study
    its storage lacks makes no folder."""
    import shutil

    import autoint.tune

    result = study["result"]
    mine = Path(shutil.copytree(result.out, tmp_path / "mine"))
    other = autoint.tune.tune(load_config(None, [*SMALL, *TUNE]), tmp_path / "other", data=processed, trials=0,
                              study="other", tracking_uri=sqlite_uri(tmp_path))
    cfg_path = str(mine / "config.yaml")
    before = {p: p.read_bytes() for p in mine.rglob("*") if p.is_file() and p.name != "study.db"}
    saved = (mine / "tune.json").read_bytes()
    state = json.loads(saved)
    assert state["parent_run"] == result.parent_run_id
    base = ["tune", cfg_path, "--out", str(mine), "--resume", "--trials", "0", "--data", str(processed)]
    assert main([*base, "--storage", other.storage]) == 2
    err = capsys.readouterr().err
    assert f"holds study 'tiny' in sqlite:///{mine.resolve() / 'study.db'}, not one in --storage" in err, err
    assert main([*base, "--storage", state["storage"]]) == 2  # the study.db it was copied from (a review's catch)
    assert "not one in --storage" in capsys.readouterr().err
    assert main([*base, "--study", "other"]) == 2
    assert "holds study 'tiny', not --study 'other'" in capsys.readouterr().err
    # one study reached by another URL (tune.json edited to point at the other study's database): its parent run
    # tells them apart
    (mine / "tune.json").write_text(json.dumps({"storage": other.storage, "study": "other",
                                                "parent_run": result.parent_run_id}))
    assert main(base) == 2
    assert f"holds the study of MLflow parent run {result.parent_run_id}, but study 'other'" in capsys.readouterr().err
    (mine / "tune.json").write_text(json.dumps({**state, "storage": 123}))
    assert main(base) == 2
    assert "tune.json: storage must be a non-empty string, got 123" in capsys.readouterr().err
    (mine / "tune.json").write_bytes(saved)
    assert {p: p.read_bytes() for p in mine.rglob("*") if p.is_file() and p.name != "study.db"} == before
    fresh = tmp_path / "fresh"
    assert main(["tune", cfg_path, "--out", str(fresh), "--trials", "0", "--storage", "sqlite://"]) == 2
    assert "an in-memory database, which the study would not outlive" in capsys.readouterr().err
    assert main(["tune", cfg_path, "--out", str(fresh), "--trials", "0", "--study", " "]) == 2
    assert "--study: a study needs a name" in capsys.readouterr().err
    assert main(["tune", cfg_path, "--out", str(fresh), "--resume", "--trials", "0", "--storage", other.storage,
                 "--study", "nosuch", "--data", str(processed)]) == 2
    assert "--resume: no study 'nosuch' in" in capsys.readouterr().err and not fresh.exists()
    # a queued trial (tune.enqueue, run by the next command) is counted in the summary line, not left out of it
    assert main([*base, "--set", "tune.enqueue=[{train.lr: 0.03, model.num_layers: 1}]"]) == 0
    assert ", 1 queued (tune.enqueue))" in capsys.readouterr().out


def test_models_fetched_from_two_threads_leave_the_callers_tracking_uri_as_it_was(registered, tmp_path, monkeypatch):
    """MLflow's fluent tracking URI is the process's: two threads loading models put back each other's URI and
    fetched from each other's store, and MLFLOW_TRACKING_URI stayed set after (a helper's hunt)."""
    import shutil
    import threading
    import time

    from mlflow.tracking._tracking_service import utils as mlflow_uri

    from autoint.predict import Scorer

    copy = tmp_path / "copy.db"
    shutil.copy(tracking.sqlite_path(registered.tracking_uri), copy)  # a second store naming the same artifacts
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    before = getattr(mlflow_uri, "_tracking_uri", None)
    errors = []
    real = mlflow.artifacts.download_artifacts

    def slow(*args, **kwargs):  # the fetch takes a while, as from a server: the threads' fetches overlap
        time.sleep(0.2)
        return real(*args, **kwargs)

    monkeypatch.setattr(mlflow.artifacts, "download_artifacts", slow)

    def load(uri: str) -> None:
        try:
            for _ in range(4):
                Scorer.from_checkpoint(registered.model_uri, tracking_uri=uri)
        except Exception as e:
            errors.append(e)

    threads = [threading.Thread(target=load, args=(uri,)) for uri in (registered.tracking_uri, f"sqlite:///{copy}")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert os.environ.get("MLFLOW_TRACKING_URI") is None and getattr(mlflow_uri, "_tracking_uri", None) == before
