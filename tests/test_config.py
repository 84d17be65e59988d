"""Config loading: YAML mirrors the dataclasses; errors name the setting."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from autoint.config import Config, ConfigError, load_config

CONFIGS = sorted((Path(__file__).parent.parent / "configs").glob("*.yaml"))


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.name)
def test_shipped_configs_load_and_round_trip(path, tmp_path):
    cfg = load_config(path)
    cfg.save(tmp_path / "resolved.yaml")
    assert load_config(tmp_path / "resolved.yaml") == cfg


def test_overrides_use_dotted_paths_and_yaml_values():
    cfg = load_config(None, ["model.num_layers=2", "model.dnn_hidden=[64, 32]", "train.lr=3e-4",
                             "data.split.seed=7"])
    assert cfg.model.num_layers == 2
    assert cfg.model.dnn_hidden == (64, 32)
    assert cfg.train.lr == pytest.approx(3e-4)
    assert cfg.data.split.seed == 7


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("model:\n  num_layer: 3\n", "model.num_layer"),
        ("model:\n  num_heads: 0\n", "model.num_heads"),
        ("train:\n  lr: -1\n", "train.lr"),
        ("data:\n  split:\n    fractions: [0.5, 0.1]\n", "data.split.fractions"),
        ("data:\n  format: csvv\n", "data.format"),
        ("modle:\n  num_heads: 2\n", "modle"),
        ("train:\n  lr: fast\n", "train.lr"),
    ],
)
def test_bad_yaml_names_file_and_setting(tmp_path, text, needle):
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert needle in str(info.value) and "bad.yaml" in str(info.value)


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ('model.first_order="false"', "model.first_order: must be true or false, got 'false'"),
        ("train.deterministic=nope", "train.deterministic: must be true or false, got 'nope'"),
        ('data.include_ids="false"', "data.include_ids: must be true or false, got 'false'"),
        ('train.seed="1"', "train.seed: must be an integer, got '1'"),
        ("train.seed=null", "train.seed: must be an integer, got None"),
        ("data.split.seed=1.5", "data.split.seed: must be an integer, got 1.5"),
        ("tracking.run_name=[a, b]", "tracking.run_name: must be text or null, got ['a', 'b']"),
        ("model.dnn_hidden=64", "model.dnn_hidden: must be a list of integers, got 64"),
        ('data.split.fractions="0.8,0.1,0.1"', "data.split.fractions: must be a list of numbers, got '0.8,0.1,0.1'"),
        ("data.columns=[1]", "data.columns: must be a mapping or null, got [1]"),
        ("tune.pruner.kind=[median]", "tune.pruner.kind: must be text, got ['median']"),
        # the generator's settings were checked only when it ran, so their errors named no --set (a helper's hunt)
        ("data.synthetic.n_rows=-5", "data.synthetic.n_rows: must be an integer >= 1, got -5"),
        ("data.synthetic.colour=3", "unknown setting data.synthetic.colour (known: n_rows,"),
    ],
)
def test_a_setting_of_the_wrong_type_is_named_not_taken_for_something_else(override, message):
    """A flag given as text ("false" is a non-empty string, so true) or a seed given as text was taken as it
    was and turned the option on, or failed deep inside torch, numpy or MLflow; each is now refused, naming
    the setting. The same check holds for the Python API's sections."""
    with pytest.raises(ConfigError, match=re.escape(f"--set {override}: {message}")):
        load_config(None, [override])
    from autoint.config import ModelConfig, TrackingConfig

    with pytest.raises(ConfigError, match=r"model\.layer_norm: must be true or false, got .false."):
        ModelConfig(layer_norm="false")
    with pytest.raises(ConfigError, match=r"tracking\.experiment: must be a name"):
        TrackingConfig(experiment="  ")
    assert load_config(None, ["model.first_order=false", "train.lr=1", "tune.timeout_s=5"]).train.lr == 1.0
    # a text setting given as a number or a date is its text (YAML reads `precision: 32` as a number, as old
    # checkpoints saved it; `run_name: 2024-05-01` as a date), and a Path from Python is its text too
    cfg = load_config(None, ["train.precision=32", "tracking.experiment=2024", "tracking.run_name=2024-05-01"])
    assert (cfg.train.precision, cfg.tracking.experiment, cfg.tracking.run_name) == ("32", "2024", "2024-05-01")
    from autoint.config import DataConfig

    assert DataConfig(processed=Path("/tmp/p")).processed == "/tmp/p"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("model:\n  num_layers: 1\n  num_layers: 3\n",
         "not valid YAML at line 3, column 3: 'num_layers' is given twice in one mapping (lines 2 and 3)"),
        ("model:\n  num_layers: 1\nmodel:\n  head_dim: 8\n",
         "not valid YAML at line 3, column 1: 'model' is given twice in one mapping (lines 1 and 3)"),
        ("model:\n\tnum_layers: 1\n", "not valid YAML at line 2, column 1: found character '\\t' that cannot"),
        ("train: {lr: 0.1, lr: 0.2}\n",
         "not valid YAML at line 1, column 18: 'lr' is given twice in one mapping (lines 1 and 1)"),
    ],
)
def test_a_key_given_twice_or_a_syntax_error_is_one_line_naming_the_line(tmp_path, text, message):
    """YAML keeps the last of two equal keys, silently: a section written twice lost its first half."""
    path = tmp_path / "twice.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=re.escape(f"{path}: {message}")) as info:
        load_config(path)
    assert "\n" not in str(info.value)
    merged = tmp_path / "merged.yaml"  # a merge key is no key given twice
    merged.write_text("base: &b {lr: 0.1}\ntrain:\n  <<: *b\n  max_epochs: 2\n")
    with pytest.raises(ConfigError, match="unknown setting base"):  # read, then refused for its unknown section
        load_config(merged)
    tune = load_config(None, ["tune.space={model.head_dim: {low: 16, high: 64, step: 16}}",
                              "tune.enqueue=[{model.head_dim: 32}]"])
    assert tune.tune.enqueue == [{"model.head_dim": 32}]
    with pytest.raises(ConfigError, match=r"20 is not on the space's steps \(16 \+ a multiple of 16\)"):
        load_config(None, ["tune.space={model.head_dim: {low: 16, high: 64, step: 16}}",
                           "tune.enqueue=[{model.head_dim: 20}]"])


def test_bad_override_and_missing_file():
    with pytest.raises(ConfigError, match="KEY=VALUE"):
        load_config(None, ["model.num_layers"])
    with pytest.raises(ConfigError, match="not found"):
        load_config("no/such/config.yaml")


def test_a_set_into_a_setting_given_as_a_name_turns_it_into_its_mapping(tmp_path):
    """--set data.columns.label.positive=[yes] on `label: clicked` said "label is not a section" (a helper's hunt)."""
    cfg = tmp_path / "c.yaml"
    cfg.write_text("data:\n  format: table\n  columns: {label: clicked, categorical: [site], time: ts}\n")
    c = load_config(cfg, ['data.columns.label.positive=["yes"]', 'data.columns.label.negative=["no"]',
                          "data.columns.time.derive=[hour]"])
    assert c.data.columns["label"] == {"name": "clicked", "positive": ["yes"], "negative": ["no"]}
    assert c.data.columns["time"] == {"column": "ts", "derive": ["hour"]}
    # a value, not a section: set it as a value (it advised making it a mapping; a helper's hunt)
    with pytest.raises(ConfigError, match=r"--set data\.format\.x: data\.format is 'table', a value, not a section "
                                          r"holding 'x'; set it as --set data\.format=VALUE"):
        load_config(cfg, ["data.format.x=1"])


def test_the_python_api_names_a_dict_given_for_a_config(tmp_path):
    """train(cfg.to_dict(), ...) was "AttributeError: 'dict' object has no attribute 'tracking'" (a helper's hunt)."""
    from autoint.model import AutoInt
    from autoint.preprocess import prepare
    from autoint.schema import FieldSpec, Schema
    from autoint.train import ensure_processed, train
    from autoint.tune import tune

    d = Config().to_dict()
    for call in (lambda: train(d, tmp_path, tmp_path / "out"), lambda: ensure_processed(d, tmp_path, None),
                 lambda: prepare(d, tmp_path, tmp_path / "p"), lambda: tune(d, tmp_path / "t")):
        with pytest.raises(TypeError, match=r"cfg: expected a Config, got dict; autoint\.config\.config_from_dict"):
            call()
    schema = Schema((FieldSpec("a", "categorical", vocab_size=5),))
    with pytest.raises(TypeError, match=r"config: expected a ModelConfig, got Config; pass the section, e\.g\. "
                                        r"cfg\.model"):
        AutoInt(schema, Config())
    with pytest.raises(TypeError, match="schema: expected a Schema"):
        AutoInt([{"name": "a"}])
    assert not (tmp_path / "out").exists() and not (tmp_path / "t").exists()
    with pytest.raises(ValueError, match=r"trials must be an integer >= 0 .*got -3"):
        tune(Config(), tmp_path / "t", trials=-3)
    with pytest.raises(ValueError, match=r"timeout_s must be a number of seconds > 0 .*got 0"):
        tune(Config(), tmp_path / "t", timeout_s=0)
    assert not (tmp_path / "t").exists()  # refused before a folder, a study or an MLflow run existed
    assert load_config(None, "model.num_layers=2").model.num_layers == 2  # one override as a string


def test_flat_params_for_tracking():
    flat = Config().flat()
    assert flat["model.num_heads"] == 2 and flat["data.split.seed"] == 2024


@pytest.mark.parametrize("extra", [["train.devices=2"], ["train.strategy=ddp"], ["train.num_nodes=2"]])
def test_sparse_adam_is_a_setting_across_processes_too(extra) -> None:
    """Sparse gradients are all-reduced by gloo, so several processes may take sparse_adam; only a
    process group that cannot (NCCL) refuses it, when training starts (tests/test_model.py)."""
    assert load_config(None, ["train.optimizer=sparse_adam", *extra]).train.optimizer == "sparse_adam"
    assert load_config(None, extra).train.optimizer == "auto"
    with pytest.raises(ConfigError, match=r"train\.optimizer"):
        load_config(None, ["train.optimizer=lazy_adam"])


def test_only_tune_reads_the_tune_section(tmp_path, capsys):
    """The space's values are checked against the rest of the config, which made `summary` and `train` refuse a
    valid run config (residual identity, a head_dim choice of 16) and blame the file."""
    from autoint.cli import main

    path = tmp_path / "t.yaml"
    path.write_text("model:\n  embedding_dim: 16\n  num_heads: 2\n  head_dim: 8\n"
                    "tune:\n  space:\n    model.head_dim: {choices: [8, 16]}\n")
    assert load_config(path, ["model.residual=identity"], tune=False).tune is None
    with pytest.raises(ConfigError, match=r"tune\.space\.model\.head_dim: 16 is not a valid value here"):
        load_config(path, ["model.residual=identity"])
    assert main(["summary", str(path), "--set", "model.residual=identity"]) == 0
    assert main(["tune", str(path), "--set", "model.residual=identity", "--out", str(tmp_path / "o")]) == 2
    assert "tune.space.model.head_dim: 16 is not a valid value here" in capsys.readouterr().err


@pytest.mark.parametrize("precision", ["16-true", "bf16-true", "64", "64-true", "transformer-engine"])
def test_a_precision_that_casts_the_weights_is_refused_naming_the_setting(precision):
    """16-true trained to NaN every time (Adam's eps is 0 in fp16, and untouched embedding rows took 0/0), with an
    error that blamed train.lr; bf16-true and 64 wrote checkpoints of those types and test figures that were not
    the fp32 ones the README promises (a helper's hunt)."""
    with pytest.raises(ConfigError, match=rf"train\.precision: must be one of .*got '{precision}': autoint trains "
                                          "fp32 weights"):
        load_config(None, [f"train.precision={precision}"])


def test_short_precision_names_are_written_whole_and_fp16_off_a_gpu_is_said(caplog):
    """'16' on a CPU became bf16-mixed in Lightning with a warning of its own, and the checkpoint recorded a
    precision the config did not."""
    from autoint.config import resolve_precision

    assert [resolve_precision(p, "cpu") for p in ("32", "32-true", "bf16", "bf16-mixed")] == [
        "32-true", "32-true", "bf16-mixed", "bf16-mixed"]
    with caplog.at_level("WARNING", logger="autoint.config"):
        assert resolve_precision("16", "cpu") == resolve_precision("16-mixed", "cpu") == "bf16-mixed"
    assert "fp16 autocast needs a GPU; on a CPU this trains in bf16-mixed" in caplog.text
    assert resolve_precision("16", "gpu") == resolve_precision("16", "mps") == "16-mixed"  # Lightning keeps fp16
    caplog.clear()  # train's check before the run leaves the warning to the run: it was said twice (a helper's hunt)
    with caplog.at_level("WARNING", logger="autoint.config"):
        assert resolve_precision("16-mixed", "cpu", say=False) == "bf16-mixed"
    assert "fp16 autocast" not in caplog.text


def test_settings_checked_when_read_not_minutes_later(tmp_path, monkeypatch):
    """A helper's hunt: a seed outside 0..2**32-1 passed, then ended the run (or a study after its first trial) in
    numpy's traceback; data.memory_limit=0MB passed and its error advised 0MB again; a key twice in a --set mapping
    kept the last silently (a file refuses it); num_nodes=2 with nothing starting the other machines waited at the
    rendezvous forever, deaf to SIGTERM; a 0 valid or test share was refused only after the whole log was prepared."""
    from autoint.train import check_trainer_settings, ensure_processed

    for key in ("train.seed", "data.split.seed", "tune.seed"):
        for bad in (-1, 2**32):
            with pytest.raises(ConfigError, match=rf"{key}: must be an integer from 0 to 4294967295, got {bad}"):
                load_config(None, [f"{key}={bad}"])
        assert load_config(None, [f"{key}={2**32 - 1}"]) is not None
    with pytest.raises(ConfigError, match=r"tune\.space\.train\.seed: must be an integer from 0"):
        load_config(None, ["tune.space={train.seed: {low: -5, high: 5}}"])
    with pytest.raises(ConfigError, match=r"data\.memory_limit: must be above zero"):
        load_config(None, ["data.memory_limit=0MB"])
    with pytest.raises(ConfigError, match=r"'train\.lr' is given twice in one mapping"):
        load_config(None, ["tune.enqueue=[{train.lr: 0.005, train.lr: 0.006}]"])

    from autoint.train import CLUSTER_VARIABLES

    for name in CLUSTER_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(ConfigError, match=r"train\.num_nodes = 2, but nothing starts the other machines"):
        check_trainer_settings(load_config(None, ["train.num_nodes=2"]), tmp_path / "run")
    cfg = load_config(None, ["data.format=synthetic", "data.synthetic={n_rows: 500}",
                             "data.split.fractions=[0.9, 0.1, 0]", f"data.raw={tmp_path / 'raw'}"])
    with pytest.raises(ConfigError, match=r"leaves the test split empty"):
        ensure_processed(cfg, tmp_path / "processed", None, progress=False)
    assert not (tmp_path / "processed").exists()


def test_numbers_are_read_as_yaml_1_2_writes_them_and_text_that_looks_like_one_stays_text(tmp_path):
    """PyYAML's YAML 1.1 read `run_name: 12:30` as the number 750 (base 60), so the run was named '750', and
    `1e-3` as text, which tune.enqueue refused as no number (a helper's hunt)."""
    import yaml

    path = tmp_path / "c.yaml"
    path.write_text("tracking: {run_name: 12:30}\ntrain: {lr: 1e-3, batch_size: 1_024, seed: 0x10}\n")
    cfg = load_config(path)
    assert (cfg.tracking.run_name, cfg.train.lr, cfg.train.batch_size, cfg.train.seed) == ("12:30", 1e-3, 1024, 16)
    assert load_config(None, ["tracking.run_name=12:30"]).tracking.run_name == "12:30"
    assert load_config(None, ["tracking.run_name=1_000"]).tracking.run_name == "1_000"  # not 1000
    # A number given to a text setting is its text as written (a review: '1e5' became '100000.0', '.inf' 'inf')
    for written in ("1e5", ".inf", "1.50", "0x1F"):
        assert load_config(None, [f"tracking.run_name={written}"]).tracking.run_name == written
    path.write_text("tracking: {run_name: 1e5}\n")
    assert load_config(path).tracking.run_name == "1e5"
    assert load_config(path, ["tracking.run_name=x"]).tracking.run_name == "x"
    # Underscored integers in lists and a space's bounds, as in an integer setting
    assert load_config(None, ["model.dnn_hidden=[1_000, 500]"]).model.dnn_hidden == (1000, 500)
    space = load_config(None, ["tune.space={train.batch_size: {low: 1_024, high: 4_096}}"]).tune.search_space()
    assert space["train.batch_size"] == {"low": 1024, "high": 4096}
    # ... and in its step and choices, and a text setting's number as written in a section given whole or with a
    # comment after it (a second review's catches)
    space = load_config(None, ["tune.space={train.batch_size: {low: 1_024, high: 4_096, step: 1_024}, "
                               "model.head_dim: {choices: [1_6, 32]}}"]).tune.search_space()
    assert space == {"train.batch_size": {"low": 1024, "high": 4096, "step": 1024},
                     "model.head_dim": {"choices": [16, 32]}}
    for given in ("tracking={run_name: 1e5}", "tracking.run_name=1e5 # the fifth"):
        assert load_config(None, [given]).tracking.run_name == "1e5"
    with pytest.raises(ConfigError, match=r"train\.batch_size: must be an integer, got '12:30'"):
        load_config(None, ["train.batch_size=12:30"])
    # Saved, text that either YAML reads as a number is quoted: it reads back as text here and in any YAML library.
    for name in ("12:30", "1e-3", "1_000", "0x1F", "yes", "7"):
        cfg = load_config(None, [f"tracking.run_name='{name}'"])
        cfg.save(tmp_path / "saved.yaml")
        assert load_config(tmp_path / "saved.yaml") == cfg
        assert yaml.safe_load((tmp_path / "saved.yaml").read_text())["tracking"]["run_name"] == name
    space = ("tune.space={train.lr: {low: 1e-4, high: 1e-1, log: true}}", "tune.enqueue=[{train.lr: 1e-3}]")
    assert load_config(None, list(space)).tune.enqueue == [{"train.lr": 1e-3}]


def test_a_setting_that_changes_nothing_is_said_and_the_shipped_configs_have_none(caplog):
    """`--set model.dnn_dropout=0.2` with no DNN trained the same model, logged as a setting of the run, and a
    study searching it ran trials that differed in nothing (a left-out of an earlier note)."""
    import logging

    with caplog.at_level(logging.WARNING, logger="autoint.config"):
        load_config(None, ["model.dnn_dropout=0.2", "model.dnn_hidden=[]"])
        load_config(None, ["model.num_layers=0", "model.first_order=true", "model.num_heads=4"])
        load_config(None, ["tune.space={model.dnn_dropout: {low: 0.0, high: 0.5}, train.lr: {low: 1e-4, high: 0.01}}"])
        load_config(None, ["model.dnn_dropout=0.2", "model.dnn_hidden=[8]"])  # a DNN: used
        load_config(None, ["tune.space={model.dnn_dropout: {low: 0.0, high: 0.5}, "
                           "model.dnn_hidden: {choices: [[], [8]]}}"])  # some trials have a DNN
    assert [r.getMessage() for r in caplog.records] == [
        "--set model.dnn_dropout=0.2: model.dnn_dropout does nothing: no DNN (model.dnn_hidden is empty)",
        "--set model.num_heads=4: model.num_heads does nothing: no interacting layer (model.num_layers is 0)",
        "tune.space searches model.dnn_dropout, which does nothing here: no DNN (model.dnn_hidden is empty); its "
        "trials differ in nothing it changes"]
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="autoint.config"):  # row groups of one row each: said
        load_config(None, ["data.chunk_size=1"])
    assert caplog.records[0].getMessage().startswith("--set data.chunk_size=1: data.chunk_size 1 makes row groups "
                                                     "of 1 rows: prepare, training and scoring read them one at")
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="autoint.config"):  # read by some formats only (a README audit)
        load_config(None, ["data.format=criteo", "data.columns.foo=1", "data.include_ids=true",
                           "data.synthetic={n_rows: 10}"])
        load_config(None, ["data.format=movielens", "data.include_ids=true"])
        load_config(None, ["data.format=table", "data.columns={label: y, categorical: [a]}"])
    assert [r.getMessage() for r in caplog.records] == [
        "--set data.columns.foo=1: data.columns does nothing with data.format 'criteo' (only 'table' and "
        "'synthetic' read it)",
        "--set data.synthetic={n_rows: 10}: data.synthetic does nothing with data.format 'criteo' (only 'synthetic' "
        "read it)",
        "--set data.include_ids=true: data.include_ids does nothing with data.format 'criteo' (only 'movielens' "
        "read it)"]
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="autoint.config"):
        for path in CONFIGS:
            load_config(path)
    assert not caplog.records


def test_a_config_hunts_settings(tmp_path, caplog):
    """A helper's hunt of the settings: cross_order 2.0 failed in the generator with a traceback; a text setting
    given a time was rewritten (run_name '2024-05-01 10:00:00+00:00'); data.raw refused a folder named like a
    day or a number; 1_000 was refused where a setting is not declared an int; a learning rate past ~3e37
    overflowed in Adam; an unknown data.split.files key was never read; a files split of its own paths still
    asked for data.raw; --set tune.* in train said nothing; one part of a space entry was an unknown setting."""
    from autoint.preprocess import prepare

    with pytest.raises(ConfigError, match=r"cross_order: must be 2 \(pairs\) or 3 \(triples\), got 2\.0"):
        load_config(None, ["data.synthetic.cross_order=2.0"])
    c = load_config(None, ["tracking.run_name=2024-05-01T10:00:00Z", "data.processed=2024-05-01t10:00:00+02:00",
                           "data.raw=[2024-05-01, 1e5, x.csv]"])
    assert (c.tracking.run_name, c.data.processed) == ("2024-05-01T10:00:00Z", "2024-05-01t10:00:00+02:00")
    assert c.data.raw == ["2024-05-01", "1e5", "x.csv"]
    assert load_config(None, ["data.raw=2024-05-01"]).data.raw == "2024-05-01"
    (tmp_path / "c.yaml").write_text("data:\n  raw: 2024-05-01\n  synthetic: {n_rows: 2_000, cardinality: [5, 1_000]}"
                                     "\ntrain: {forward_rows: 1_024}\ntracking: {run_name: 2024-05-01T10:00:00Z}\n")
    c = load_config(tmp_path / "c.yaml")
    assert (c.data.raw, c.tracking.run_name, c.train.forward_rows) == ("2024-05-01", "2024-05-01T10:00:00Z", 1024)
    assert (c.data.synthetic["n_rows"], c.data.synthetic["cardinality"]) == (2000, [5, 1000])
    for setting in ("train.lr=5e37", "train.weight_decay=1e300"):
        with pytest.raises(ConfigError, match=r"at most 1e\+30\), got "):
            load_config(None, [setting])
    split = ["data.format=table", "data.columns={label: y, categorical: [site]}", "data.split.method=files"]
    with pytest.raises(ConfigError, match=r"data\.split\.files\.tests: is no split \(train, valid, test\)"):
        load_config(None, [*split, "data.split.files={train: a, valid: b, test: c, tests: d}"])
    for name in ("a", "b", "c"):
        (tmp_path / f"{name}.csv").write_text("y,site\n" + "".join(f"{i % 2},s{i % 3}\n" for i in range(30)))
    own = load_config(None, [*split, "data.split.files={" + ", ".join(
        f"{s}: {tmp_path / n}.csv" for s, n in zip(("train", "valid", "test"), "abc")) + "}"])
    assert own.data.raw is None and prepare(own, None, tmp_path / "p", progress=False)["rows"]["test"] == 30
    from autoint.preprocess import prepared_differences
    from autoint.train import ensure_processed

    assert prepared_differences(tmp_path / "p", own) == []
    with (tmp_path / "a.csv").open("a") as f:  # its own files are compared too (a reviewer's catch)
        f.write("1,s9\n")
    assert "changed since it was prepared" in " ".join(prepared_differences(tmp_path / "p", own))
    # a resumed run's folder is compared with the settings alone: its checkpoint checks the data
    assert ensure_processed(own, tmp_path / "p", None, progress=False, settings_only=True) == tmp_path / "p"
    with caplog.at_level("WARNING", logger="autoint.config"):
        load_config(None, ["tune.trials=5"], tune=False)
    assert "--set tune.trials=5: only `autoint tune` reads the tune section; ignored here" in caplog.text
    (tmp_path / "t.yaml").write_text("data:\n  format: table\n  columns: {label: y, categorical: [a], sep: ab}\n")
    with pytest.raises(ConfigError, match=rf"^{re.escape(str(tmp_path / 't.yaml'))}: data\.columns\.sep: must be one "
                                          "character"):  # named where the config is read, not once the log was
        load_config(tmp_path / "t.yaml")
    with pytest.raises(ConfigError, match=r"^--set data\.columns\.sep=ab: data\.columns\.sep: must be one"):
        load_config(None, ["data.format=table", "data.columns={label: y, categorical: [a]}", "data.columns.sep=ab"])
    for columns, message in [("{label: y, categorical: [[a, b]]}", r"categorical: column names must be strings, got "
                                                                    r"\['a', 'b'\]"),
                             ("{label: y, categorical: [a], time: {column: t, unit: [1]}}", r"time\.unit: must be one "
                                                                                           r"of .*got \[1\]")]:
        with pytest.raises(ConfigError, match=message):  # a TypeError traceback before
            load_config(None, ["data.format=table", f"data.columns={columns}"])
    from autoint.config import config_from_dict

    # a saved config is rebuilt as it is (a checkpoint's): a model prepared before a later rule still loads
    config_from_dict({"data": {"format": "table", "columns": {"label": "y", "categorical": ["s", "S"]}}})
    with pytest.raises(ConfigError, match=r"one part of an entry \(low\); give train\.lr's entry whole"):
        load_config(Path(__file__).parent.parent / "configs" / "tune_synthetic.yaml", ["tune.space.train.lr.low=0.002"])


def test_load_config_names_what_it_reads_when_given_something_else():
    """A helper's hunt: load_config({...}) or load_config(123) was pathlib's TypeError, naming no function."""
    with pytest.raises(ConfigError, match="load_config reads a YAML file; for a dict of settings use config_from_dict"):
        load_config({"train": {"lr": 1e-3}})
    with pytest.raises(ConfigError, match="load_config: expected the path of a YAML config file, got 123"):
        load_config(123)
