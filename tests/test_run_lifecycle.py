"""What a user meets around a training run: its end, its failures, resuming it, and the command line.

Each test here pins a defect a new user hit (issue 12): early stopping that
went unreported, library chatter, runs left ``RUNNING`` after a late failure,
truncated checkpoints, resumes of a finished or different run, every rank
preparing the same folder, bugs hidden as usage errors, errors blamed on the
wrong source, and MLflow files left in the working folder.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from lightning.pytorch.callbacks import Callback

from autoint.cli import main
from autoint.config import load_config
from autoint.errors import Terminated

AUTOINT = [sys.executable, "-m", "autoint.cli"]
FIXTURES = Path(__file__).parent / "fixtures"
CONFIGS = Path(__file__).resolve().parent.parent / "configs"

SMALL = [
    "data.format=synthetic",
    "data.synthetic={n_rows: 4000, n_categorical: 5, n_numeric: 2, n_crosses: 1, seed: 3}",
    "model.num_layers=1",
    "model.head_dim=8",
    "model.embedding_dim=8",
    "train.batch_size=256",
    "train.seed=5",
]
# A learning rate this high makes validation AUC fall after its first peak, so patience 1 stops the run.
STOPS_EARLY = ["train.lr=0.3", "train.patience=1", "train.max_epochs=8"]


def small_config(*extra: str):
    return load_config(None, [*SMALL, *extra])


def sqlite_uri(folder: Path) -> str:
    return f"sqlite:///{folder / 'mlflow.db'}"


def flip_a_bit_inside_a_page(path: Path) -> None:
    """One bit flipped in the file's largest column chunk where Arrow, not verifying checksums, still reads the
    file without an error (and so with a wrong value): the damage only a page checksum finds."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    meta = pq.ParquetFile(path).metadata
    chunk = max((meta.row_group(0).column(i) for i in range(meta.num_columns)), key=lambda c: c.total_compressed_size)
    start = chunk.dictionary_page_offset if chunk.has_dictionary_page else chunk.data_page_offset
    whole = path.read_bytes()
    for at in range(start + chunk.total_compressed_size // 2, start + chunk.total_compressed_size):
        data = bytearray(whole)
        data[at] ^= 0x10
        path.write_bytes(bytes(data))
        try:
            if not pq.read_table(path).equals(pq.read_table(pa.BufferReader(whole))):
                return
        except (OSError, pa.ArrowException):
            continue
    raise AssertionError(f"{path}: no bit flip in its pages goes unnoticed without checksums")


@pytest.fixture(scope="module")
def processed(tmp_path_factory) -> Path:
    from autoint.train import ensure_processed

    root = tmp_path_factory.mktemp("lifecycle-data")
    cfg = small_config(f"data.raw={root / 'raw' / 'synthetic.parquet'}")
    return ensure_processed(cfg, root / "processed", None, progress=False)


@pytest.fixture(scope="module")
def finished(processed, tmp_path_factory) -> dict:
    """One run through the real command line, output captured as a log file would (not a terminal)."""
    root = tmp_path_factory.mktemp("lifecycle-run")
    config = root / "config.yaml"
    small_config(*STOPS_EARLY).save(config)
    proc = subprocess.run([*AUTOINT, "train", str(config), "--data", str(processed), "--out", str(root / "run"),
                           "--tracking-uri", sqlite_uri(root)], capture_output=True, text=True, timeout=400,
                          check=False, cwd=root)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return {"root": root, "config": config, "run": root / "run", "uri": sqlite_uri(root), "stdout": proc.stdout,
            "stderr": proc.stderr}


# ----------------------------------------------------------------------------- the end of a run
def test_train_says_how_many_epochs_ran_which_was_best_and_that_early_stopping_fired(finished):
    from autoint import tracking

    summary = json.loads((finished["run"] / "metrics.json").read_text())
    assert summary["early_stopped"] is True
    assert 1 <= summary["best_epoch"] < summary["epochs"] < 8
    line = next(x for x in finished["stdout"].splitlines() if x.startswith("epochs"))
    assert f"{summary['epochs']} run, best {summary['best_epoch']}" in line and "early stopping" in line
    run_id = json.loads((finished["run"] / "run.json").read_text())["run_id"]
    tags = tracking.MlflowClient(finished["uri"]).get_run(run_id).data.tags
    assert tags["autoint.early_stopped"] == "true"
    assert tags["autoint.epochs"] == str(summary["epochs"]) and tags["autoint.best_epoch"] == str(summary["best_epoch"])


def test_early_stopping_on_the_last_epoch_is_said_as_early_stopping(finished, processed, tmp_path):
    """A helper's hunt: a run whose early stopping fired on its last epoch was recorded as having reached
    train.max_epochs, and --resume with a larger --max-epochs then trained nothing."""
    from autoint.train import RunFolderError, train

    epochs = json.loads((finished["run"] / "metrics.json").read_text())["epochs"]  # where the same recipe stopped
    cfg = small_config(*STOPS_EARLY, f"train.max_epochs={epochs}")
    result = train(cfg, processed, tmp_path / "run", tracking_uri=sqlite_uri(tmp_path), progress=False)
    assert result.epochs == epochs and result.early_stopped
    assert json.loads((tmp_path / "run" / "metrics.json").read_text())["early_stopped"] is True
    with pytest.raises(RunFolderError, match="the run is complete \\(early stopping ended it"):
        train(small_config(*STOPS_EARLY, f"train.max_epochs={epochs + 3}"), processed, tmp_path / "run", resume=True,
              tracking_uri=sqlite_uri(tmp_path), progress=False)


def test_train_and_tune_name_an_argument_of_the_wrong_type_before_anything_starts(processed, tmp_path):
    """From Python: callbacks that were not Lightning callbacks failed mid-fit ("'str' object has no attribute
    'on_exception'", the MLflow run open), a number as tracking_uri inside the store's code ("'int' object has no
    attribute 'startswith'"), trainer_options given as text inside dict()."""
    from autoint.train import train
    from autoint.tune import tune

    for bad, named in (({"callbacks": ["x"]}, r"callbacks: expected a list of lightning\.pytorch\.callbacks\.Callback"),
                       ({"callbacks": "x"}, "callbacks: expected"),
                       ({"tracking_uri": 5}, r"tracking_uri: expected an MLflow tracking URI as text .* got int 5"),
                       ({"tracking_uri": tmp_path}, r"tracking_uri: expected .* got \w*Path"),
                       ({"trainer_options": "limit_train_batches=2"}, "trainer_options: expected a dict")):
        with pytest.raises(TypeError, match=named):
            train(small_config(), processed, tmp_path / "run", progress=False,
                  **{"tracking_uri": sqlite_uri(tmp_path), **bad})
        assert not (tmp_path / "run").exists() and not (tmp_path / "mlflow.db").exists(), bad
    with pytest.raises(TypeError, match=r"tracking_uri: expected .* got int 5"):
        tune(small_config(), tmp_path / "study", data=processed, trials=1, tracking_uri=5)
    assert not (tmp_path / "study").exists()


def test_lightnings_line_per_gpu_process_is_chatter_too():
    """On a GPU every training and test pass printed "LOCAL_RANK: 0 - CUDA_VISIBLE_DEVICES: [0]" (seen on a lent
    H200), from a Lightning logger the commands did not quiet; its warnings still come through."""
    import logging

    from autoint.cli import _quiet_third_party_noise

    _quiet_third_party_noise()
    logger = logging.getLogger("lightning.pytorch.accelerators.cuda")

    def record(level: int) -> logging.LogRecord:
        return logger.makeRecord(logger.name, level, __file__, 1, "LOCAL_RANK: 0 - CUDA_VISIBLE_DEVICES: [0]", (), None)

    assert not logger.filter(record(logging.INFO)) and logger.filter(record(logging.WARNING))


def test_evaluate_says_nothing_of_a_gpu_it_leaves_unused(finished, processed, monkeypatch, recwarn):
    """evaluate scores on the CPU by design (one model, the same figures everywhere). On a machine with a GPU
    (seen on a lent H200) Lightning then warned "GPU available but not used" on stderr: chatter about a choice the
    user did not make and cannot change."""
    from lightning.pytorch.accelerators import CUDAAccelerator

    from autoint.train import evaluate

    monkeypatch.setattr(CUDAAccelerator, "is_available", staticmethod(lambda: True))
    assert set(evaluate(finished["run"], processed, progress=False)) == {"test_auc", "test_logloss"}
    assert not [w for w in recwarn if "GPU available" in str(w.message)], [str(w.message) for w in recwarn]


def test_a_trainer_on_the_cpu_by_choice_says_nothing_of_an_unused_gpu(tmp_path, monkeypatch, recwarn):
    """`autoint train --accelerator cpu` (sparse Adam's runs, on a lent H200) printed Lightning's "GPU available but
    not used. You can set it by doing Trainer(accelerator='gpu')": the user chose the CPU, and the advice names no
    setting of ours. Left to Lightning where the accelerator is Lightning's to choose."""
    from lightning.pytorch.accelerators import CUDAAccelerator

    from autoint.train import make_trainer, process_state

    monkeypatch.setattr(CUDAAccelerator, "is_available", staticmethod(lambda: True))
    monkeypatch.setattr(CUDAAccelerator, "auto_device_count", staticmethod(lambda: 1))
    with process_state():  # as train() builds it: the Trainer's deterministic flags are not left to later tests
        make_trainer(small_config("train.accelerator=cpu"), tmp_path, [], progress=False)
    assert not [w for w in recwarn if "GPU available" in str(w.message)], [str(w.message) for w in recwarn]


def test_output_that_is_not_a_terminal_carries_no_bars_and_no_library_chatter(finished, processed):
    evaluate = subprocess.run([*AUTOINT, "evaluate", str(finished["run"]), "--data", str(processed)],
                              capture_output=True, text=True, timeout=300, check=True, cwd=finished["root"])
    assert evaluate.stdout.startswith("test_auc") and evaluate.stderr == "", evaluate.stderr
    text = finished["stdout"] + finished["stderr"] + evaluate.stdout
    for noise in ("it/s]", "GPU available", "TPU available", "LOCAL_RANK", "Restoring states", "litmodels", "LitLogger",
                  "Creating initial MLflow database", "Downloading artifacts", "CloudPickle"):
        assert noise not in text, noise
    assert "test AUC" in finished["stdout"]


def test_the_printed_browse_command_works_from_a_fresh_shell(finished, monkeypatch):
    from autoint.cli import _venv_command

    line = next(x for x in finished["stdout"].splitlines() if x.startswith("browse"))
    monkeypatch.setenv("PATH", "/usr/bin:/bin")  # the venv not activated
    command = _venv_command("mlflow")
    assert Path(command).is_absolute() and line.split()[1] in (command, "mlflow")
    version = subprocess.run([command, "--version"], capture_output=True, text=True, check=False,
                             env={**os.environ, "PATH": "/usr/bin:/bin"})
    assert version.returncode == 0, version.stderr


def test_mlflow_files_stay_beside_the_store_not_in_the_working_folder(finished):
    assert not (finished["root"] / "mlruns").exists()
    assert any((finished["root"] / "mlartifacts").rglob("*.ckpt"))


# ----------------------------------------------------------------------------- resuming
def test_resume_of_a_finished_run_says_it_is_complete(finished, processed, capsys):
    argv = ["train", str(finished["config"]), "--data", str(processed), "--out", str(finished["run"]),
            "--tracking-uri", finished["uri"], "--resume"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "the run is complete" in err and "early stopping" in err and len(err.strip().splitlines()) == 1


def test_resume_refuses_a_config_other_than_the_runs(finished, processed, capsys):
    argv = ["train", str(finished["config"]), "--data", str(processed), "--out", str(finished["run"]),
            "--tracking-uri", finished["uri"], "--resume", "--set", "model.num_heads=1", "--max-epochs", "9"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "model.num_heads: 2 in the run, 1 now" in err and "max_epochs" not in err.split("differs in")[1]


def test_last_ckpt_holds_the_last_epoch_not_the_best(finished):
    """Lightning 2.6's save_last wrote last.ckpt only when best.ckpt was written, so it held the best epoch: a run
    killed later resumed from there and trained the epochs after it again (a helper's hunt)."""
    from autoint.checkpoint import read_checkpoint

    summary = json.loads((finished["run"] / "metrics.json").read_text())
    assert summary["best_epoch"] < summary["epochs"]
    last = read_checkpoint(finished["run"] / "checkpoints" / "last.ckpt")
    best = read_checkpoint(finished["run"] / "checkpoints" / "best.ckpt")
    assert last["epoch"] == summary["epochs"] - 1 and best["epoch"] == summary["best_epoch"] - 1
    assert sorted(p.name for p in (finished["run"] / "checkpoints").iterdir()) == ["best.ckpt", "last.ckpt"]


def test_resume_falls_back_to_the_newest_readable_checkpoint(finished, tmp_path, caplog):
    from autoint.train import RunFolderError, resume_checkpoint

    folder = shutil.copytree(finished["run"] / "checkpoints", tmp_path / "checkpoints")
    last = folder / "last.ckpt"
    last.write_bytes(last.read_bytes()[:1000])  # what a kill mid-write would leave with in-place saving
    with caplog.at_level("WARNING"):
        assert resume_checkpoint(folder) == folder / "best.ckpt"
    assert "last.ckpt" in caplog.text and "best.ckpt" in caplog.text
    (folder / "best.ckpt").write_bytes(b"")
    with pytest.raises(RunFolderError, match="no readable checkpoint"):
        resume_checkpoint(folder)


def test_a_checkpoint_save_that_fails_leaves_the_previous_one_whole(tmp_path):
    import torch

    from autoint.train import AtomicCheckpointIO

    target = tmp_path / "last.ckpt"
    io = AtomicCheckpointIO()
    io.save_checkpoint({"epoch": 1, "w": torch.ones(3)}, target)

    class Unsaveable:
        def __reduce__(self):
            raise RuntimeError("killed mid-save")

    with pytest.raises(RuntimeError, match="mid-save"):
        io.save_checkpoint({"epoch": 2, "w": torch.zeros(3), "x": Unsaveable()}, target)
    assert torch.load(target, weights_only=True)["epoch"] == 1
    assert [p.name for p in tmp_path.iterdir()] == ["last.ckpt"]  # no temporary left behind


# ----------------------------------------------------------------------------- failures
def test_a_failure_after_training_ends_the_mlflow_run_failed(processed, tmp_path, monkeypatch):
    from autoint import tracking
    from autoint.train import train

    marker_then = []

    def broken(*args, **kwargs):
        marker_then.append((tmp_path / "run" / "metrics.json").exists())
        raise OSError("disk full while logging the model")

    monkeypatch.setattr(tracking, "log_pyfunc_model", broken)
    with pytest.raises(OSError, match="disk full"):
        train(small_config("train.max_epochs=1"), processed, tmp_path / "run", tracking_uri=sqlite_uri(tmp_path),
              progress=False)
    # metrics.json (what --resume reads as 'complete') does not exist yet while the model is logged, so a
    # process killed there (SIGKILL leaves no chance to clean up) is finished by --resume too.
    assert marker_then == [False]
    run_id = json.loads((tmp_path / "run" / "run.json").read_text())["run_id"]
    assert tracking.run_info(sqlite_uri(tmp_path), run_id)["status"] == "FAILED"
    # Not complete without its model: no metrics.json, and --resume finishes the run.
    assert not (tmp_path / "run" / "metrics.json").exists()
    monkeypatch.undo()
    result = train(small_config("train.max_epochs=1"), processed, tmp_path / "run", resume=True,
                   tracking_uri=sqlite_uri(tmp_path), progress=False)
    assert result.run_id == run_id and result.model_uri
    assert (tmp_path / "run" / "metrics.json").is_file()
    assert tracking.run_info(sqlite_uri(tmp_path), run_id)["status"] == "FINISHED"


def test_a_bug_keeps_its_traceback_and_bad_input_gets_one_line(monkeypatch, capsys):
    import autoint.cli as cli

    def buggy(args):
        raise RuntimeError("shape mismatch in our own code")

    monkeypatch.setattr(cli, "cmd_summary", buggy)
    with pytest.raises(RuntimeError, match="shape mismatch"):  # not swallowed into "error: ..." with exit 2
        main(["summary", str(CONFIGS / "criteo.yaml")])
    monkeypatch.undo()
    assert main(["summary", str(CONFIGS / "criteo.yaml"), "--set", "model.num_heads=0"]) == 2


def test_an_unreadable_checkpoint_is_one_line_for_evaluate(processed, tmp_path, capsys):
    broken = tmp_path / "model.ckpt"
    broken.write_bytes(b"PK\x03\x04 truncated")
    assert main(["evaluate", str(broken), "--data", str(processed)]) == 2
    err = capsys.readouterr().err
    assert str(broken) in err and "Traceback" not in err and len(err.strip().splitlines()) == 1


# ----------------------------------------------------------------------------- data-parallel preparation
def test_only_rank_zero_prepares_the_others_wait_for_it(processed, tmp_path, monkeypatch):
    import autoint.preprocess
    import autoint.train as train_module

    def must_not_prepare(*args, **kwargs):
        raise AssertionError("a non-zero rank prepared the folder")

    monkeypatch.setattr(autoint.preprocess, "prepare", must_not_prepare)
    monkeypatch.setattr(train_module, "_global_rank", lambda: 1)
    cfg = small_config(f"data.raw={tmp_path / 'raw.parquet'}")
    with pytest.raises(train_module.RunFolderError, match="rank zero"):
        train_module.ensure_processed(cfg, tmp_path / "not-yet", None, progress=False, wait_s=0.3)
    assert not (tmp_path / "not-yet").exists()
    assert train_module.ensure_processed(cfg, processed, None, progress=False, wait_s=0.3) == processed


def test_resume_finds_its_store_from_any_folder_and_takes_a_moved_one_by_tracking_uri(processed, tmp_path,
                                                                                     monkeypatch, capsys):
    """A relative SQLite URI is recorded absolute, so --resume from another working folder reopens the run in the
    same store (it used to create an empty store there and end in MLflow's 'Run not found' traceback); a store
    that is gone is one line and is not created; --tracking-uri names where it went, and run.json follows."""
    from autoint import tracking
    from autoint.train import train

    first, elsewhere, moved = tmp_path / "first", tmp_path / "elsewhere", tmp_path / "moved"
    for folder in (first, elsewhere, moved):
        folder.mkdir()
    monkeypatch.chdir(first)
    assert tracking.resolve_tracking_uri("sqlite:///mlflow.db") == sqlite_uri(first)
    assert tracking.resolve_tracking_uri("sqlite:///../x/m.db") == sqlite_uri(tmp_path / "x").replace("mlflow", "m")
    assert tracking.resolve_tracking_uri(sqlite_uri(moved)) == sqlite_uri(moved)  # absolute: as given
    # As SQLAlchemy opens them: a query kept, '~' a folder name (MLflow writes sqlite:///~/x.db to ./~/x.db).
    assert tracking.resolve_tracking_uri("sqlite:///q.db?timeout=30") == sqlite_uri(first).replace(
        "mlflow.db", "q.db?timeout=30")
    assert tracking.sqlite_path("sqlite:///q.db?timeout=30") == Path("q.db")
    assert tracking.resolve_tracking_uri("sqlite:///~/x.db") == f"sqlite:///{first / '~' / 'x.db'}"
    assert tracking.resolve_tracking_uri("sqlite:///:memory:") == "sqlite:///:memory:"
    with monkeypatch.context() as m:  # a first run that stops after its checkpoint: resumable
        m.setattr(tracking, "log_pyfunc_model", lambda *a, **k: (_ for _ in ()).throw(OSError("stopped")))
        with pytest.raises(OSError, match="stopped"):
            train(small_config("train.max_epochs=1"), processed, tmp_path / "run", tracking_uri="sqlite:///mlflow.db",
                  progress=False)
    state = json.loads((tmp_path / "run" / "run.json").read_text())
    assert state["tracking_uri"] == sqlite_uri(first)

    monkeypatch.chdir(elsewhere)
    (first / "mlflow.db").rename(moved / "mlflow.db")
    argv = ["train", str(tmp_path / "run" / "config.yaml"), "--data", str(processed), "--out", str(tmp_path / "run"),
            "--resume"]
    capsys.readouterr()  # the first run's MLflow lines
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert f"MLflow store {sqlite_uri(first)} does not exist" in err and "--tracking-uri" in err
    assert len(err.strip().splitlines()) == 1
    assert not (first / "mlflow.db").exists() and not (elsewhere / "mlflow.db").exists()  # no empty store made

    with monkeypatch.context() as m:  # run.json cannot take the new store: the run is not left RUNNING
        m.setattr("autoint.train.write_run_state", lambda *a, **k: (_ for _ in ()).throw(OSError(28, "disk full")))
        assert main([*argv, "--tracking-uri", "sqlite:///../moved/mlflow.db"]) == 2
    assert tracking.run_info(sqlite_uri(moved), state["run_id"])["status"] == "FAILED"
    assert main([*argv, "--tracking-uri", "sqlite:///../moved/mlflow.db"]) == 0, capsys.readouterr().err
    assert json.loads((tmp_path / "run" / "run.json").read_text()) == {"tracking_uri": sqlite_uri(moved),
                                                                     "run_id": state["run_id"]}
    assert tracking.run_info(sqlite_uri(moved), state["run_id"])["status"] == "FINISHED"
    assert not (elsewhere / "mlflow.db").exists()


# ----------------------------------------------------------------------------- the command line
def test_a_missing_raw_file_is_not_ignored_when_a_processed_folder_exists(finished, processed, capsys):
    argv = ["train", str(finished["config"]), "--data", str(processed), "--raw", "no-such-log.csv",
            "--out", str(finished["root"] / "other")]
    assert main(argv) == 2
    assert "no-such-log.csv" in capsys.readouterr().err


def test_train_stops_when_the_processed_folder_was_prepared_otherwise(finished, processed, capsys):
    argv = ["train", str(finished["config"]), "--data", str(processed), "--out", str(finished["root"] / "other"),
            "--set", "data.min_count=3"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "data.min_count: 1 in the folder, 3 now" in err and "--overwrite" in err
    assert len(err.strip().splitlines()) == 1 and not (finished["root"] / "other").exists()
    # --resume: not "prepare this one again --overwrite" (another run's folder, perhaps), but the run's own data
    # and settings (a helper's hunt; a reviewer's catch: with the run's own folder, the settings changed)
    assert main(["train", str(finished["config"]), "--data", str(processed), "--out", str(finished["run"]),
                 "--resume", "--set", "data.min_count=3"]) == 2
    err = capsys.readouterr().err
    assert "--resume needs the run's own settings, with which this folder was prepared" in err
    assert "--overwrite" not in err
    other = finished["root"] / "other-data"
    shutil.copytree(processed, other)
    assert main(["train", str(finished["config"]), "--data", str(other), "--out", str(finished["run"]),
                 "--resume", "--set", "data.min_count=3"]) == 2
    err = capsys.readouterr().err
    assert f"--resume continues on the data the run in {finished['run']} started with ({processed}, as its " \
           "config.yaml records): name that folder with --data" in err and "--overwrite" not in err
    shutil.rmtree(other)


def test_an_unknown_flag_prints_the_commands_own_usage(capsys):
    with pytest.raises(SystemExit) as e:
        main(["train", str(CONFIGS / "criteo.yaml"), "--no-such-flag"])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: autoint train") and "--no-such-flag" in err


def test_set_errors_name_the_set_and_file_errors_name_the_file(tmp_path, capsys):
    assert main(["summary", str(CONFIGS / "criteo.yaml"), "--set", "model.num_heads=0"]) == 2
    err = capsys.readouterr().err
    assert "--set model.num_heads=0: model.num_heads" in err and "criteo.yaml" not in err
    bad = tmp_path / "bad.yaml"
    bad.write_text("model:\n  num_heads: 0\n")
    assert main(["summary", str(bad), "--set", "model.num_layers=2"]) == 2
    assert f"{bad}: model.num_heads" in capsys.readouterr().err


def test_max_bad_fraction_is_a_flag_of_prepare_and_train(tmp_path, capsys):
    config = tmp_path / "criteo.yaml"
    config.write_text("data:\n  format: criteo\n")
    bad_log = str(FIXTURES / "criteo_bad" / "train.txt")  # 5 bad rows of 20
    assert main(["prepare", str(config), "--raw", bad_log, "--out", str(tmp_path / "a"), "--quiet"]) == 2
    assert "data.max_bad_fraction" in capsys.readouterr().err
    assert main(["prepare", str(config), "--raw", bad_log, "--out", str(tmp_path / "b"), "--quiet",
                 "--max-bad-fraction", "0.5"]) == 0
    assert "--max-bad-fraction" in subprocess.run([*AUTOINT, "train", "--help"], capture_output=True, text=True,
                                                  check=True).stdout


def test_small_pair_scores_print_with_significant_figures_and_counts_agree_in_number():
    from autoint.cli import _plural, format_pairs

    table = pd.DataFrame({"rank": [1, 2], "field_a": ["a", "b"], "field_b": ["c", "d"],
                          "score": [0.000123456, 0.0000456]})
    text = format_pairs(table)
    assert "0.0001235" in text and "4.56e-05" in text and "0.0000" not in text
    assert _plural(1, "layer") == "1 layer" and _plural(3, "head") == "3 heads"


def test_evaluate_computes_in_fp32_whatever_precision_the_model_was_trained_in(finished, processed, tmp_path,
                                                                              monkeypatch):
    import lightning
    import torch

    import autoint.train as train_module

    ckpt = torch.load(finished["run"] / "checkpoints" / "best.ckpt", weights_only=True)
    ckpt["autoint"]["config"]["train"]["precision"] = "bf16-mixed"  # as trained on a bf16 host
    torch.save(ckpt, tmp_path / "bf16.ckpt")
    used, real_trainer = [], lightning.Trainer

    def recording_trainer(*args, **kwargs):
        used.append(kwargs["precision"])
        return real_trainer(*args, **kwargs)

    monkeypatch.setattr(train_module.L, "Trainer", recording_trainer)
    train_module.evaluate(tmp_path / "bf16.ckpt", processed, progress=False)
    train_module.evaluate(tmp_path / "bf16.ckpt", processed, progress=False, precision="bf16")
    assert used == ["32-true", "bf16-mixed"]
    with pytest.raises(SystemExit):
        main(["evaluate", str(tmp_path / "bf16.ckpt"), "--data", str(processed), "--precision", "fp16"])


def test_a_bad_value_to_score_is_named_by_file_row_and_column(finished, processed, tmp_path, capsys):
    from autoint.predict import raw_example

    rows = raw_example(processed).astype({"n00": object})
    rows.loc[2, "n00"] = "abc"
    rows.to_csv(tmp_path / "rows.csv", index=False)
    assert main(["predict", str(finished["run"]), "--input", str(tmp_path / "rows.csv"),
                 "--output", str(tmp_path / "scores.csv")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.endswith(f"{tmp_path / 'rows.csv'}, row 3: column 'n00': expected a number, got 'abc'"), err
    assert not (tmp_path / "scores.csv").exists()


def test_rows_to_score_may_carry_a_blank_label_column(finished, processed, tmp_path, capsys):
    """The usual shape of a file still to be scored: the log's columns, the label left blank (or holding
    anything). Scoring reads no label, so the scores are those of the rows without the column."""
    from autoint.predict import raw_example

    rows = raw_example(processed)
    rows.to_csv(tmp_path / "plain.csv", index=False)
    rows.assign(label="").to_csv(tmp_path / "blank.csv", index=False)
    for name in ("plain", "blank"):
        assert main(["predict", str(finished["run"]), "--input", str(tmp_path / f"{name}.csv"),
                     "--output", str(tmp_path / f"{name}-scores.csv")]) == 0, capsys.readouterr().err
    assert (tmp_path / "blank-scores.csv").read_text() == (tmp_path / "plain-scores.csv").read_text()


def test_predict_reads_chunk_rows_at_a_time_and_its_memory_advice_names_that_option(finished, processed, tmp_path,
                                                                                   capsys):
    """Out of memory, predict advised a smaller --batch-size, an option it did not have (a helper's hunt): it
    has --chunk-rows now, which gives the same scores in smaller pieces, and its advice names it."""
    from autoint.cli import _one_line
    from autoint.predict import raw_example

    rows = raw_example(processed)
    rows.to_csv(tmp_path / "rows.csv", index=False)
    for chunk in ("100000", "2"):
        assert main(["predict", str(finished["run"]), "--input", str(tmp_path / "rows.csv"), "--chunk-rows", chunk,
                     "--output", str(tmp_path / f"{chunk}.csv")]) == 0, capsys.readouterr().err
    assert (tmp_path / "2.csv").read_text() == (tmp_path / "100000.csv").read_text()
    assert main(["predict", str(finished["run"]), "--input", str(tmp_path / "rows.csv"), "--chunk-rows", "0",
                 "--output", str(tmp_path / "0.csv")]) == 2
    assert "--chunk-rows 0: must be a positive number of rows" in capsys.readouterr().err
    memory = RuntimeError("[enforce fail at alloc_cpu.cpp:127] err == 0. DefaultCPUAllocator: can't allocate memory")
    assert _one_line(memory, "predict").endswith("a smaller --chunk-rows needs less")
    # inspect's permutation test holds rows x (permutations + 1) labels: its advice names those first
    assert _one_line(memory, "inspect").endswith("fewer --rows or --permutations, or a smaller --batch-size, need less")


# ----------------------------------------------------------------------------- failure modes found in review
def test_settings_lightning_refuses_are_one_line_and_leave_the_folder_free(processed, tmp_path, capsys):
    """An accelerator this machine lacks (or a strategy Lightning does not know) is a one-line error naming
    the settings, and a run that failed before its first checkpoint leaves no run.json behind, so the same
    command (with the setting mended) runs in that folder; a mistyped tracking URI fails before any folder."""
    config = tmp_path / "config.yaml"
    small_config("train.max_epochs=1").save(config)
    common = ["train", str(config), "--data", str(processed), "--out", str(tmp_path / "run"),
              "--tracking-uri", sqlite_uri(tmp_path), "--quiet"]
    for bad in (["--accelerator", "tpu"], ["--set", "train.strategy=bogus"]):
        assert main([*common, *bad]) == 2
        err = capsys.readouterr().err.strip().splitlines()[-1]  # after MLflow's own lines creating its store
        assert err.startswith("autoint train: error: Lightning refuses these settings (train.accelerator="), err
        assert not (tmp_path / "run" / "run.json").exists()
    assert main(common) == 0
    capsys.readouterr()
    assert main(["train", str(config), "--data", str(processed), "--out", str(tmp_path / "run2"),
                 "--tracking-uri", "sqlite://mlflow.db"]) == 2
    assert "MLflow tracking URI 'sqlite://mlflow.db' cannot be used" in capsys.readouterr().err
    assert not (tmp_path / "run2").exists()


def test_a_file_store_that_mlflow_refuses_is_one_line(tmp_path, monkeypatch):
    """MLflow 3 refuses its file store (file:... or a bare path) unless MLFLOW_ALLOW_FILE_STORE=true: that was a
    bare MlflowException traceback after the run folder was made; now one line before, naming the way out."""
    from mlflow import environment_variables

    from autoint.tracking import TrackingError, check_tracking_uri

    if not hasattr(environment_variables, "MLFLOW_ALLOW_FILE_STORE"):
        pytest.skip("this MLflow takes file stores")
    monkeypatch.delenv("MLFLOW_ALLOW_FILE_STORE", raising=False)
    for uri in (f"file:{tmp_path / 'mlruns'}", str(tmp_path / "mlruns")):
        with pytest.raises(TrackingError, match="MLFLOW_ALLOW_FILE_STORE=true"):
            check_tracking_uri(uri)
    probed = []
    monkeypatch.setattr("autoint.tracking.MlflowClient", lambda uri: probed.append(uri) or type(
        "Client", (), {"search_experiments": lambda self, max_results: []})())
    check_tracking_uri("databricks")  # MLflow's own bare scheme: probed as a store, not refused as a path
    assert probed == ["databricks"]
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    check_tracking_uri(f"file:{tmp_path / 'mlruns'}")
    assert not (tmp_path / "mlruns").exists()


def test_corrupt_files_wrong_outputs_and_foreign_checkpoints_are_one_line(finished, processed, tmp_path, capsys):
    import pyarrow as pa
    import pyarrow.parquet as pq
    import torch

    from autoint.checkpoint import CHECKPOINT_KEY, CheckpointError, load_checkpoint
    from autoint.predict import raw_example

    raw_example(processed).to_csv(tmp_path / "rows.csv", index=False)
    (tmp_path / "corrupt.parquet").write_bytes((processed / "train.parquet").read_bytes()[:3000])
    rows = pd.concat([raw_example(processed)] * 400, ignore_index=True)
    pq.write_table(pa.Table.from_pandas(rows), tmp_path / "damaged.parquet", write_page_checksum=True,
                   use_dictionary=False, compression="none")  # plain values: a flipped bit reads as another value
    flip_a_bit_inside_a_page(tmp_path / "damaged.parquet")
    run = str(finished["run"])
    cases = [
        (["predict", run, "--input", str(tmp_path / "corrupt.parquet"), "--output", str(tmp_path / "o.csv")],
         "corrupt.parquet: not a readable Parquet file"),
        (["predict", run, "--input", str(tmp_path / "damaged.parquet"), "--output", str(tmp_path / "o.csv")],
         "damaged.parquet: not a readable Parquet file"),
        (["predict", run, "--input", str(tmp_path / "rows.csv"), "--output", str(tmp_path)], "is a folder"),
        (["predict", run, "--input", str(tmp_path / "rows.csv"), "--output", str(tmp_path / "o.json")],
         "name a .csv or .parquet file"),
        (["inspect", run, "--data", str(processed), "--out", str(tmp_path / "rows.csv")], "is a file"),
        (["inspect", run, "--data", str(processed), "--out", str(tmp_path / "i"), "--batch-size", "0"],
         "--batch-size 0: must be a positive number of rows"),
        # a file that is no checkpoint: torch's several lines advised weights_only=False; one line now
        (["evaluate", str(finished["run"] / "config.yaml"), "--data", str(processed)],
         "config.yaml: not a readable autoint checkpoint (not a whole torch.save file: "),
    ]
    broken = tmp_path / "broken"
    shutil.copytree(processed, broken)
    (broken / "test.parquet").write_bytes((processed / "test.parquet").read_bytes()[:3000])
    cases.append((["evaluate", run, "--data", str(broken)], "test.parquet: not a readable Parquet file"))
    for argv, message in cases:
        assert main(argv) == 2, argv
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and message in err[0], (argv, err)
    assert not (tmp_path / "o.csv").exists() and not (tmp_path / "o.json").exists()

    ckpt = torch.load(finished["run"] / "checkpoints" / "best.ckpt", weights_only=False)
    ckpt[CHECKPOINT_KEY]["config"]["model"]["num_layers"] = 2  # weights for one layer, settings for two
    torch.save(ckpt, tmp_path / "other.ckpt")
    with pytest.raises(CheckpointError, match=r"other\.ckpt: this version of autoint cannot rebuild"):
        load_checkpoint(tmp_path / "other.ckpt")


def test_a_byte_changed_inside_a_prepared_split_is_caught_and_named(finished, processed, tmp_path, capsys):
    """prepare writes page checksums and every reader verifies them: a flipped bit inside a split's data (which
    Arrow would otherwise decode into wrong ids without a word) is an error naming the file and row group."""
    from autoint.data import SplitFile
    from autoint.datasets.errors import DataError
    from autoint.schema import Schema

    damaged = tmp_path / "damaged"
    shutil.copytree(processed, damaged)
    for name in ("train.parquet", "test.parquet"):
        data = bytearray((processed / name).read_bytes())
        data[len(data) // 3] ^= 0x10  # inside the first row group's pages, far from the footer
        (damaged / name).write_bytes(bytes(data))
    split = SplitFile(damaged / "train.parquet", Schema.load(damaged / "schema.json"))
    with pytest.raises(DataError, match=r"train\.parquet: not a readable Parquet file \(.*\), row group 0; "
                                        r"prepare the data again"):
        split.read(0)
    for argv in (["evaluate", str(finished["run"]), "--data", str(damaged)],
                 ["inspect", str(finished["run"]), "--data", str(damaged), "--out", str(tmp_path / "i"),
                  "--permutations", "0"]):
        assert main(argv) == 2, argv
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "test.parquet: not a readable Parquet file" in err[0], (argv, err)


def test_inspecting_into_the_same_folder_again_leaves_no_stale_files(finished, processed, tmp_path):
    out = tmp_path / "inspection"
    argv = ["inspect", str(finished["run"]), "--data", str(processed), "--out", str(out), "--permutations", "0"]
    assert main([*argv, "--explain", "0,1"]) == 0
    assert (out / "explanations" / "row1.csv").is_file()
    assert main([*argv, "--rows", "100"]) == 0
    assert not (out / "explanations").exists()
    assert not list((out / "heatmaps").glob("row*"))
    assert json.loads((out / "summary.json").read_text())["rows"] == 100


def test_a_synthetic_log_named_by_its_folder_is_found_prepared_the_second_time(tmp_path):
    """data.raw may name the generator's folder: the files it writes beside the log (planted.json,
    true_logit.npy) are not taken for new input the next time; a file name it does not write is refused."""
    from autoint.config import ConfigError
    from autoint.train import ensure_processed

    cfg = small_config(f"data.raw={tmp_path / 'raw'}")
    first = ensure_processed(cfg, tmp_path / "processed", None, progress=False)
    report = (first / "prepare.json").read_bytes()
    assert ensure_processed(cfg, tmp_path / "processed", None, progress=False) == first
    assert ensure_processed(cfg, tmp_path / "processed", tmp_path / "raw", progress=False) == first
    assert (first / "prepare.json").read_bytes() == report
    with pytest.raises(ConfigError, match=r"the synthetic generator writes FOLDER/synthetic\.parquet"):
        ensure_processed(small_config(f"data.raw={tmp_path / 'other' / 'log.parquet'}"), tmp_path / "p2", None,
                         progress=False)


def test_changed_synthetic_settings_generate_the_log_again_in_train_and_prepare(tmp_path, caplog, monkeypatch):
    """Once data/synthetic/synthetic.parquet was there, data.synthetic.* was ignored: a run of other settings
    trained on the old rows while prepare.json recorded the new settings, and `prepare --overwrite`, the advice,
    encoded the old file again (`prepare` alone never generated one: 'raw file not found') (a helper's hunt)."""
    import pyarrow.parquet as pq

    from autoint.preprocess import prepare
    from autoint.train import ensure_processed

    raw = tmp_path / "raw"
    log_file = raw / "synthetic.parquet"
    report = prepare(small_config(f"data.raw={raw}", "data.synthetic.n_rows=3000"), None, tmp_path / "p",
                     progress=False)  # prepare alone generates the log
    assert report["rows_seen"] == 3000
    with caplog.at_level("WARNING", logger="autoint.datasets.synthetic"):
        report = prepare(small_config(f"data.raw={raw}", "data.synthetic.n_rows=4000", "data.synthetic.seed=5"),
                         None, tmp_path / "p", progress=False, overwrite=True)
    assert report["rows_seen"] == pq.ParquetFile(log_file).metadata.num_rows == 4000
    assert "generated with other data.synthetic settings (n_rows=4000, seed=5): generating it again" in caplog.text
    stamp = log_file.stat().st_mtime_ns
    cfg = small_config(f"data.raw={raw}", "data.synthetic.n_rows=5000")
    ensure_processed(cfg, tmp_path / "p2", None, progress=False)  # train's way in
    assert pq.ParquetFile(log_file).metadata.num_rows == 5000 and log_file.stat().st_mtime_ns != stamp
    stamp = log_file.stat().st_mtime_ns
    ensure_processed(cfg, tmp_path / "p3", None, progress=False)  # the same settings: the same file
    assert log_file.stat().st_mtime_ns == stamp
    # A prepared folder is trained on as it is: its log is not generated again (a reviewer's catch)
    monkeypatch.chdir(tmp_path)  # data.raw unset: the log is data/synthetic, here
    default = small_config()
    ensure_processed(default, tmp_path / "p5", None, progress=False)
    (tmp_path / "data" / "synthetic" / "synthetic.parquet").unlink()
    assert ensure_processed(default, tmp_path / "p5", None, progress=False) == tmp_path / "p5"
    assert not (tmp_path / "data" / "synthetic" / "synthetic.parquet").exists()
    # data.raw naming the log, as configs/synthetic.yaml does, and the log removed: the folder prepared from these
    # settings is trained on and summarised as it is ("raw file not found" before; a helper's hunt)
    from autoint.cli import schema_for

    named = small_config(f"data.raw={raw / 'synthetic.parquet'}", "data.synthetic.n_rows=5000")
    shutil.copy(log_file, tmp_path / "log.bak")
    log_file.unlink()
    assert ensure_processed(named, tmp_path / "p3", None, progress=False) == tmp_path / "p3"
    assert schema_for(named, tmp_path / "p3").fields and not log_file.exists()
    shutil.move(tmp_path / "log.bak", log_file)
    (raw / "planted.json").unlink()  # no longer the generator's record: a log of the user's, read as it is
    assert prepare(small_config(f"data.raw={raw}", "data.synthetic.n_rows=3000"), None, tmp_path / "p4",
                   progress=False)["rows_seen"] == 5000


def test_a_failed_start_keeps_the_users_config_and_tune_stops_at_refused_settings(processed, tmp_path, monkeypatch):
    """A run that fails before its first checkpoint removes its run.json and the config.yaml it wrote, never
    a config.yaml that was there before; settings Lightning refuses stop `tune` before any trial."""
    import autoint.train as train_module
    from autoint.config import ConfigError
    from autoint.tune import tune

    def boom(*args, **kwargs):
        raise RuntimeError("boom")

    monkeypatch.setattr(train_module, "_fit_test_log", boom)
    cfg = small_config("train.max_epochs=1")
    for folder, users in (("own", False), ("users", True)):
        out = tmp_path / folder
        if users:  # refused before it starts (it wrote the resolved config over the user's, and then kept that)
            out.mkdir()
            (out / "config.yaml").write_text("# the user's\n")
        with pytest.raises(train_module.RunFolderError if users else RuntimeError,
                           match="is not a run's" if users else "boom"):
            train_module.train(cfg, processed, out, tracking_uri=sqlite_uri(tmp_path), progress=False)
        assert not (out / "run.json").exists()
        assert (out / "config.yaml").exists() == users
        assert not users or (out / "config.yaml").read_text() == "# the user's\n"
    with pytest.raises(ConfigError, match="Lightning refuses these settings"):
        tune(small_config("train.accelerator=tpu"), tmp_path / "study", data=processed, trials=3,
             tracking_uri=sqlite_uri(tmp_path))
    assert not (tmp_path / "study").exists()


def test_run_folder_files_cut_short_are_one_line(finished, processed, tmp_path, capsys):
    """A run.json or metrics.json cut short (as by a disk that filled up) stops --resume in one line naming
    it; autoint itself writes them whole (autoint.files)."""
    run = tmp_path / "run"
    shutil.copytree(finished["run"], run)
    argv = ["train", str(finished["config"]), "--data", str(processed), "--out", str(run), "--resume",
            "--tracking-uri", finished["uri"], "--quiet"]
    for name in ("metrics.json", "run.json"):
        whole = (run / name).read_bytes()
        (run / name).write_bytes(whole[:12])
        assert main(argv) == 2, name
        err = capsys.readouterr().err.strip().splitlines()
        assert err and f"{name}: not valid JSON" in err[-1], (name, err)
        (run / name).write_bytes(whole)
        (run / "metrics.json").unlink(missing_ok=True)  # run.json is read when the run is not complete
    (run / "metrics.json").write_text("[1]")
    assert main(argv) == 2
    assert "metrics.json: expected a JSON object, found list" in capsys.readouterr().err
    (run / "metrics.json").unlink()
    whole = (run / "config.yaml").read_bytes()
    for damaged in (b"model:\n  dnn_hidden: [", b"model: \x00\x00\x00"):  # cut short; zeros from a lost write
        (run / "config.yaml").write_bytes(damaged)
        assert main(argv) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert "config.yaml: the run's saved config cannot be read" in err[-1], err
    (run / "config.yaml").write_bytes(whole)


class _Signal(Callback):
    """Sends this process ``signum`` (or raises Ctrl-C's KeyboardInterrupt) after the first batch of epoch
    ``epoch``, as a scheduler's or a user's stop would arrive in the middle of training."""

    def __init__(self, signum: int | None, epoch: int) -> None:
        self.signum, self.epoch = signum, epoch

    def on_train_batch_end(self, trainer, *args) -> None:
        if trainer.current_epoch == self.epoch and args[-1] == 0:
            if self.signum is None:
                raise KeyboardInterrupt
            os.kill(os.getpid(), self.signum)


def test_a_moved_run_folder_resumes_with_its_best_checkpoint_and_score(processed, tmp_path):
    """Resumed after its folder moved, a run's checkpoint callback kept only the old folder's best path and forgot its
    score, so the next epoch, however worse, replaced best.ckpt (and the run reported another best epoch than an
    uninterrupted one); the callbacks' paths are now moved into the folder the checkpoint was read from."""
    from autoint.train import train

    # On the CPU: the early peak is these numerics' (on a lent H200 the same recipe peaked at its last epoch)
    cfg = small_config("train.lr=0.3", "train.patience=5", "train.max_epochs=4", "train.calibration=none",
                       "train.accelerator=cpu")
    whole = train(cfg, processed, tmp_path / "whole", tracking_uri=sqlite_uri(tmp_path), progress=False)
    assert whole.best_epoch < 3  # validation AUC falls after an early peak
    with pytest.raises(KeyboardInterrupt):
        train(cfg, processed, tmp_path / "run", tracking_uri=sqlite_uri(tmp_path), progress=False,
              callbacks=[_Signal(None, 3)])
    shutil.move(tmp_path / "run", tmp_path / "moved")
    resumed = train(cfg, processed, tmp_path / "moved", resume=True, tracking_uri=sqlite_uri(tmp_path), progress=False)
    assert (resumed.best_epoch, resumed.epochs) == (whole.best_epoch, whole.epochs)
    assert resumed.test_metrics["test_auc"] == pytest.approx(whole.test_metrics["test_auc"], abs=1e-6)


def test_resume_checks_the_checkpoints_own_settings_and_data(processed, tmp_path):
    """With config.yaml removed, --resume took any changed setting (and wrote it into config.yaml, though training
    went on with the checkpoint's); a last.ckpt of another model ended in torch's size-mismatch traceback; --data
    naming other data trained the rest of the run on it. Each is refused by the checkpoint's own record."""
    from autoint.train import RunFolderError, ensure_processed, train

    cfg = small_config("train.max_epochs=3", "train.calibration=none")
    uri = sqlite_uri(tmp_path)
    with pytest.raises(KeyboardInterrupt):
        train(cfg, processed, tmp_path / "run", tracking_uri=uri, progress=False, callbacks=[_Signal(None, 1)])
    (tmp_path / "run" / "config.yaml").unlink()
    with pytest.raises(RunFolderError, match=r"last\.ckpt: this checkpoint was written with other settings than "
                                             r"these \(train\.lr: 0\.001 in the run, 0\.05 now\)"):
        train(small_config("train.max_epochs=3", "train.calibration=none", "train.lr=0.05"), processed,
              tmp_path / "run", resume=True, tracking_uri=uri, progress=False)

    raw = pd.read_parquet(processed.parent / "raw" / "synthetic.parquet")  # the same log, its labels shuffled
    raw["label"] = raw["label"].sample(frac=1.0, random_state=0).to_numpy()
    (tmp_path / "raw").mkdir()
    raw.to_parquet(tmp_path / "raw" / "synthetic.parquet")
    other = ensure_processed(load_config(None, [*SMALL, f"data.raw={tmp_path / 'raw' / 'synthetic.parquet'}"]),
                             tmp_path / "other", None, progress=False)
    with pytest.raises(RunFolderError, match=r"the run trained on other data than .*other holds \(its input, "):
        train(cfg, other, tmp_path / "run", resume=True, tracking_uri=uri, progress=False)

    train(small_config("train.max_epochs=1", "model.embedding_dim=4"), processed, tmp_path / "narrow",
          tracking_uri=uri, progress=False)
    mine = (tmp_path / "run" / "checkpoints" / "last.ckpt").read_bytes()
    shutil.copy(tmp_path / "narrow" / "checkpoints" / "last.ckpt", tmp_path / "run" / "checkpoints" / "last.ckpt")
    with pytest.raises(RunFolderError, match=r"model\.embedding_dim: 4 in the run, 8 now"):
        train(cfg, processed, tmp_path / "run", resume=True, tracking_uri=uri, progress=False)
    (tmp_path / "run" / "checkpoints" / "last.ckpt").write_bytes(mine)
    assert train(cfg, processed, tmp_path / "run", resume=True, tracking_uri=uri, progress=False).epochs == 3


class _SigtermInTest(Callback):
    def on_test_batch_start(self, trainer, pl_module, batch, batch_idx, dataloader_idx=0) -> None:
        if batch_idx == 0:
            os.kill(os.getpid(), signal.SIGTERM)


@pytest.mark.parametrize("cli", [False, True])
def test_a_sigterm_during_the_test_pass_stops_the_run(processed, tmp_path, cli):
    """Lightning only notes a SIGTERM in a test pass: the run tested, logged its model and exited 0 (FINISHED). It now
    ends Terminated (KILLED), under the command line's handler at once, and --resume finishes it."""
    from autoint import tracking
    from autoint.errors import Terminated, stop_on_sigterm
    from autoint.train import train

    cfg = small_config("train.max_epochs=1", "train.calibration=none")
    uri = sqlite_uri(tmp_path)
    with pytest.raises(Terminated), stop_on_sigterm() if cli else contextlib.nullcontext():
        train(cfg, processed, tmp_path / "run", tracking_uri=uri, progress=False, callbacks=[_SigtermInTest()])
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
    run_id = json.loads((tmp_path / "run" / "run.json").read_text())["run_id"]
    assert tracking.run_info(uri, run_id)["status"] == "KILLED" and not (tmp_path / "run" / "metrics.json").exists()
    result = train(cfg, processed, tmp_path / "run", resume=True, tracking_uri=uri, progress=False)
    assert result.epochs == 1 and tracking.run_info(uri, run_id)["status"] == "FINISHED"


@pytest.mark.parametrize("stop", ["sigterm", "ctrl-c"])
def test_a_stop_signal_during_training_is_neither_success_nor_a_bug(processed, tmp_path, stop, capsys, monkeypatch):
    """SIGTERM ends the command with status 143 and Ctrl-C with 130 (Lightning would give 0 and 1: success and
    'a bug'), one line each; the MLflow run is ended KILLED, and --resume continues from the checkpoint."""
    import signal

    from autoint import cli, tracking
    from autoint.errors import Terminated
    from autoint.train import train

    cfg = small_config("train.max_epochs=2")
    uri = sqlite_uri(tmp_path)
    signum = signal.SIGTERM if stop == "sigterm" else None
    with pytest.raises(Terminated if stop == "sigterm" else KeyboardInterrupt):
        train(cfg, processed, tmp_path / "run", tracking_uri=uri, progress=False, callbacks=[_Signal(signum, 1)])
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # Lightning leaves it ignored
    run_id = json.loads((tmp_path / "run" / "run.json").read_text())["run_id"]
    assert tracking.run_info(uri, run_id)["status"] == "KILLED"
    result = train(cfg, processed, tmp_path / "run", resume=True, tracking_uri=uri, progress=False)
    assert result.run_id == run_id and result.epochs == 2
    assert tracking.run_info(uri, run_id)["status"] == "FINISHED"

    def stopped(args):
        raise Terminated("terminated (SIGTERM)") if signum else KeyboardInterrupt

    parser = cli.build_parser()
    monkeypatch.setattr(cli, "build_parser", lambda: parser)
    parser.commands["train"].set_defaults(func=stopped)
    assert cli.main(["train", "config.yaml"]) == (143 if signum else 130)
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1] == ("autoint train: terminated (SIGTERM)" if signum
                       else "autoint train: interrupted")


def test_a_sigterm_outside_lightnings_loops_is_terminated_not_a_vanished_process(capsys, monkeypatch, tmp_path):
    """SIGTERM outside a trainer (prepare's engine, predict's scoring, train's MLflow logging) killed the process
    silently (status -15), leaving the work folder or a partial output; every command now ends as Terminated
    (status 143, one line, finally blocks run), and while Lightning runs its own handler is alone, as before."""
    import os
    import signal
    import time

    from autoint import cli
    from autoint.errors import raise_terminated
    from autoint.train import run_trainer

    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
    cleaned = []

    def work(args):
        try:
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(5)
        finally:
            cleaned.append(True)

    parser = cli.build_parser()
    monkeypatch.setattr(cli, "build_parser", lambda: parser)
    parser.commands["predict"].set_defaults(func=work)
    assert cli.main(["predict", "m", "--input", "a.csv", "--output", "b.csv"]) == 143
    assert capsys.readouterr().err.strip() == "autoint predict: terminated (SIGTERM)" and cleaned
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL

    def twice(args):  # a second SIGTERM while cleaning up does not cut the cleanup short
        try:
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(5)
        finally:
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(0.2)
            cleaned.append("whole")

    parser.commands["predict"].set_defaults(func=twice)
    assert cli.main(["predict", "m", "--input", "a.csv", "--output", "b.csv"]) == 143 and cleaned[-1] == "whole"
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL

    seen = []

    class Trainer:  # what run_trainer hands to Lightning: a handler that stands aside once Lightning noted a SIGTERM
        received_sigterm = False

        def fit(self):
            handler = signal.getsignal(signal.SIGTERM)
            self.received_sigterm = True  # Lightning's notifier ran first: its loop stops at the next step
            handler(signal.SIGTERM, None)
            self.received_sigterm = False
            with pytest.raises(Terminated):  # outside Lightning's loop (its setup, its teardown): at once
                handler(signal.SIGTERM, None)
            seen.append(handler)

    def train(args):
        run_trainer(Trainer(), "fit")
        seen.append(signal.getsignal(signal.SIGTERM))
        return 0

    parser.commands["train"].set_defaults(func=train)
    assert cli.main(["train", "config.yaml"]) == 0
    assert seen[0] is not signal.SIG_DFL and seen[1] is raise_terminated


def test_a_sigterm_is_not_taken_for_an_error_by_a_broad_except(tmp_path, monkeypatch):
    """Terminated was an Exception: read_checkpoint turned a SIGTERM during torch.load into 'not a whole torch.save
    file', and --resume went on from another checkpoint. It is a KeyboardInterrupt now, which no except Exception
    takes."""
    import torch

    from autoint.checkpoint import read_checkpoint

    assert issubclass(Terminated, KeyboardInterrupt) and not issubclass(Terminated, Exception)
    (tmp_path / "last.ckpt").write_bytes(b"x")

    def stopped(*args, **kwargs):
        raise Terminated("terminated (SIGTERM)")

    monkeypatch.setattr(torch, "load", stopped)
    with pytest.raises(Terminated):
        read_checkpoint(tmp_path / "last.ckpt")


def test_a_run_killed_before_its_first_checkpoint_frees_its_folder(processed, tmp_path, capsys, caplog):
    """A run killed by SIGKILL before its first checkpoint leaves run.json and config.yaml only: the same
    command starts afresh there (ending the dead MLflow run KILLED), and --resume says there is nothing to
    resume and what to run instead."""
    from autoint import tracking

    run, uri, dead, argv = a_run_with_no_checkpoint(processed, tmp_path)
    assert main([*argv, "--resume"]) == 2
    assert "nothing to resume (the run stopped before its first checkpoint); run the same command without " \
           "--resume" in capsys.readouterr().err
    assert main(argv) == 0
    assert "stopped before its first checkpoint; starting a new one" in caplog.text
    assert tracking.run_info(uri, dead)["status"] == "KILLED"
    assert json.loads((run / "run.json").read_text())["run_id"] != dead
    assert (run / "metrics.json").is_file()


def test_a_byte_changed_in_the_vocabulary_is_caught_not_decoded(processed, tmp_path):
    """The vocabulary is read with its page checksums verified, as the splits are: a flipped bit is an error
    naming the file, not values that map rows to other ids."""
    from autoint.datasets.errors import DataError
    from autoint.encoder import Encoder

    damaged = tmp_path / "damaged"
    shutil.copytree(processed, damaged)
    flip_a_bit_inside_a_page(damaged / "vocabulary.parquet")
    with pytest.raises(DataError, match=r"vocabulary\.parquet: not a readable Parquet file \(.*\); prepare the data"):
        Encoder.load(damaged)


def test_a_second_command_on_a_folder_in_use_is_refused_and_leaves_the_first_run_alone(processed, tmp_path,
                                                                                       capsys):
    """A run still in its first epoch looks, on disk, like one killed before its first checkpoint; the folder
    lock tells them apart, so the second command is refused instead of ending the live run."""
    from autoint import tracking
    from autoint.train import FolderLock

    run, uri, live, argv = a_run_with_no_checkpoint(processed, tmp_path)
    first = FolderLock(run)
    first.take()  # the live command's lock (flock: per open file, so this process can hold it twice)
    try:
        for extra in ([], ["--resume"]):
            assert main([*argv, *extra]) == 2
            assert "another command is training into this folder now" in capsys.readouterr().err
        assert tracking.run_info(uri, live)["status"] == "RUNNING"
        assert json.loads((run / "run.json").read_text())["run_id"] == live
    finally:
        first.release()
    assert main(argv) == 0  # once the first command is gone (a killed one drops its lock), the folder is free


def test_a_run_resumed_after_it_stopped_early_neither_trains_on_nor_logs_twice(processed, tmp_path, monkeypatch):
    """Killed after early stopping fired and its model was logged (here: registering fails), the run resumed
    trains no further, keeps its best checkpoint, and logs and registers its model once in all."""
    from mlflow import MlflowClient

    from autoint import tracking
    from autoint.train import train

    cfg = small_config(*STOPS_EARLY)
    uri, run = sqlite_uri(tmp_path), tmp_path / "run"

    NAME = "ctr (eu, v2)"  # MLflow takes it as a model's name, not in a tag's key (the run failed after training)

    def broken(*args, **kwargs):
        raise OSError("the registry is down")

    monkeypatch.setattr(tracking, "register_model", broken)
    with pytest.raises(OSError, match="registry is down"):
        train(cfg, processed, run, tracking_uri=uri, progress=False, register=NAME)
    monkeypatch.undo()
    run_id = json.loads((run / "run.json").read_text())["run_id"]
    stopped = int(tracking.run_info(uri, run_id)["tags"]["autoint.epochs"])
    best = (run / "checkpoints" / "best.ckpt").read_bytes()
    assert stopped < 8  # early stopping fired before train.max_epochs

    result = train(cfg, processed, run, resume=True, tracking_uri=uri, progress=False, register=NAME)
    assert result.early_stopped and result.epochs == stopped
    assert (run / "checkpoints" / "best.ckpt").read_bytes() == best
    client = MlflowClient(uri)
    experiment = client.get_run(result.run_id).info.experiment_id
    logged = [m for m in client.search_logged_models(experiment_ids=[experiment]) if m.source_run_id == result.run_id]
    assert len(logged) == 1
    assert [int(v.version) for v in client.search_model_versions(f"name = '{NAME}'")] == [1]
    assert result.registered == f"models:/{NAME}/1"


def a_run_with_no_checkpoint(processed: Path, tmp_path: Path) -> tuple[Path, str, str, list[str]]:
    """A run folder as a run leaves it before its first checkpoint (run.json, config.yaml, its MLflow run
    RUNNING): (folder, tracking URI, run id, the train command that made it)."""
    from autoint import tracking

    config = tmp_path / "config.yaml"
    small_config("train.max_epochs=1").save(config)
    uri = sqlite_uri(tmp_path)
    run = tmp_path / "run"
    run.mkdir()
    run_id = tracking.start_run(uri, "autoint", None)
    (run / "run.json").write_text(json.dumps({"tracking_uri": uri, "run_id": run_id}))
    shutil.copy(config, run / "config.yaml")
    argv = ["train", str(config), "--data", str(processed), "--out", str(run), "--tracking-uri", uri, "--quiet"]
    return run, uri, run_id, argv


def test_predict_warns_when_most_values_are_unseen_as_when_a_processed_split_is_given(finished, processed, tmp_path,
                                                                                      caplog):
    """A processed split given to predict scored without a word (its ids read as raw values, each unseen: AUC 0.63
    against 0.92 from the raw rows, a helper's hunt); raw rows laid out as the log score without the warning."""
    from autoint.predict import Scorer, raw_example

    scorer = Scorer.from_checkpoint(finished["run"])
    raw_example(processed).to_csv(tmp_path / "rows.csv", index=False)
    scorer.score_file(tmp_path / "rows.csv", tmp_path / "a.csv")
    assert "training never saw" not in caplog.text
    scorer.score_file(processed / "test.parquet", tmp_path / "b.csv")
    assert re.search(r"test\.parquet: \d+ of \d+ categorical fields hold mostly values training never saw "
                     r"\(\w+ 100%.*are these raw rows as the training log has them\?", caplog.text), caplog.text


def test_reopening_a_deleted_mlflow_run_says_how_to_restore_it(tmp_path):
    """--resume of a run whose MLflow run was deleted ended in MLflow's traceback ('must be in the active state')."""
    from mlflow import MlflowClient

    from autoint import tracking

    uri = sqlite_uri(tmp_path)
    run_id = tracking.start_run(uri, "autoint", "x")
    MlflowClient(uri).delete_run(run_id)
    with pytest.raises(tracking.TrackingError, match=rf"MLflow run {run_id} in .* was deleted; restore it to resume "
                                                     rf"it \(MLFLOW_TRACKING_URI=.* mlflow runs restore --run-id "):
        tracking.start_run(uri, "autoint", run_id=run_id)
    MlflowClient(uri).restore_run(run_id)
    assert tracking.start_run(uri, "autoint", run_id=run_id) == run_id


def test_a_new_run_leaves_a_users_config_yaml_in_its_folder_alone(finished, processed, tmp_path, capsys):
    """`train runs/x/config.yaml --out runs/x` replaced the user's own config (comments and all) with the resolved
    one; a finished run's folder said 'pass --resume to continue it', which then refused it as complete; an early-
    stopped run was told to raise --max-epochs, which changes nothing."""
    folder = tmp_path / "mine"
    folder.mkdir()
    text = "# my settings\n" + (finished["config"]).read_text()
    (folder / "config.yaml").write_text(text)
    argv = ["train", str(folder / "config.yaml"), "--data", str(processed), "--out", str(folder), "--quiet",
            "--tracking-uri", finished["uri"]]
    assert main(argv) == 2
    assert "config.yaml is not a run's (no run.json beside it)" in capsys.readouterr().err
    assert (folder / "config.yaml").read_text() == text and not (folder / "run.json").exists()

    again = ["train", str(finished["config"]), "--data", str(processed), "--out", str(finished["run"]), "--quiet",
             "--tracking-uri", finished["uri"]]
    assert main(again) == 2
    assert "holds a finished run; choose another --out" in capsys.readouterr().err
    assert main([*again, "--resume"]) == 2
    err = capsys.readouterr().err
    assert "early stopping ended it" in err and "a larger train.patience" in err and "--max-epochs" not in err


def test_a_config_that_cannot_be_written_ends_the_run_failed_and_numpy_settings_are_plain(processed, tmp_path,
                                                                                          monkeypatch):
    """A helper's hunt: a notebook's np.logspace grid gave train.lr a numpy.float64, which YAML cannot write; the
    config was written after the MLflow run started and outside the code that ends a failed run, so the run was
    left RUNNING, with a YAML traceback. numpy numbers are now the Python ones they hold, and a config that cannot
    be written ends its run FAILED."""
    import mlflow
    import numpy as np

    from autoint.config import Config
    from autoint.train import train

    cfg = small_config("train.max_epochs=1").with_settings(
        {"train.lr": np.logspace(-3, -2, 2)[0], "train.batch_size": np.int64(64), "model.dnn_hidden": [np.int32(4)]})
    assert (type(cfg.train.lr), type(cfg.train.batch_size), cfg.model.dnn_hidden) == (float, int, (4,))
    cfg.save(tmp_path / "c.yaml")  # YAML writes them
    uri = sqlite_uri(tmp_path)

    def broken(self, path):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(Config, "save", broken)
    with pytest.raises(OSError, match="No space left"):
        train(cfg, processed, tmp_path / "run", tracking_uri=uri, progress=False)
    client = mlflow.MlflowClient(uri)
    runs = client.search_runs([e.experiment_id for e in client.search_experiments()])
    assert [r.info.status for r in runs] == ["FAILED"]
    assert not (tmp_path / "run" / "run.json").exists()  # nothing to resume: the folder is free again


def test_batch_fractions_are_counted_per_process_and_after_batch_norm_lets_a_short_epoch_end(processed, tmp_path):
    """A review of the check that a fraction of the batches leaves some: it counted one process's batches (under DDP
    each has fewer, and Lightning refused the run once started), and it ran before an epoch cut short by
    limit_train_batches let batch norm take a one-row tail, so such runs, which trained before, were refused."""
    import pyarrow.parquet as pq

    from autoint.config import ConfigError
    from autoint.data import CTRDataModule, SplitLoader
    from autoint.train import _check_batch_limits, train

    dm = CTRDataModule(processed, batch_size=64, eval_batch_size=10)
    dm.setup("fit")
    one = len(SplitLoader(dm.splits["valid"], 10, pad=False))
    fraction = 1.5 / one  # a batch and a half on one process, less than one on each of two
    _check_batch_limits(dm, {"limit_val_batches": fraction}, 1)
    with pytest.raises(ConfigError, match=r"limit_val_batches=.*: that share of the valid split's \d+ batches per "
                                          r"process is none"):
        _check_batch_limits(dm, {"limit_val_batches": fraction}, 2)

    rows = pq.ParquetFile(processed / "train.parquet").metadata.num_rows
    size = next(b for b in range(16, rows) if rows % b == 1)  # the full epoch's last batch is one row
    cfg = small_config("train.max_epochs=1", "train.calibration=none", "model.dnn_hidden=[8]",
                       "model.dnn_batch_norm=true", f"train.batch_size={size}")
    result = train(cfg, processed, tmp_path / "bn", tracking_uri=sqlite_uri(tmp_path), progress=False,
                   trainer_options={"limit_train_batches": 0.5})
    assert result.epochs == 1


def test_a_model_loads_in_fp32_whatever_the_callers_default_dtype(finished, processed):
    """A helper's hunt: under a notebook's torch.set_default_dtype(torch.float64) a loaded model (Scorer, evaluate)
    was built, and scored, in float64: probabilities ~1e-7 from the same model's everywhere else."""
    import torch

    from autoint.predict import Scorer
    from autoint.train import evaluate

    run = finished["run"]
    expected = evaluate(run, processed, progress=False)
    torch.set_default_dtype(torch.float64)
    try:
        scorer = Scorer.from_checkpoint(run)
        got = evaluate(run, processed, progress=False)
        assert torch.get_default_dtype() == torch.float64  # the caller's, kept
    finally:
        torch.set_default_dtype(torch.float32)
    assert {p.dtype for p in scorer.model.state_dict().values() if p.is_floating_point()} == {torch.float32}
    assert got == expected


def test_the_python_api_checks_up_front_and_leaves_the_process_as_it_found_it(processed, tmp_path):
    """From Python (a helper's hunt): register='a/b' failed once trained and '' was ignored; trainer_options without
    a validation pass failed once trained; evaluate of a missing folder raised a bare FileNotFoundError; train left
    gradients on, built part of the model in a notebook's float64 default, and put a deleted folder on sys.path;
    loading a model drew from the caller's random stream."""
    import sys

    import torch

    from autoint.config import ConfigError
    from autoint.errors import InputError
    from autoint.predict import Scorer
    from autoint.tracking import TrackingError
    from autoint.train import evaluate, train

    cfg = small_config("train.max_epochs=1", "train.calibration=none")
    uri = sqlite_uri(tmp_path)
    for name in ("a/b", "", 5):
        with pytest.raises(TrackingError, match="is no registered model's name"):
            train(cfg, processed, tmp_path / "r", tracking_uri=uri, progress=False, register=name)
    for options in ({"limit_val_batches": 0}, {"max_steps": 3}, {"check_val_every_n_epoch": 3}):
        with pytest.raises(ConfigError, match=r"trainer_options may not set .*: each epoch ends with a validation"):
            train(cfg, processed, tmp_path / "r", tracking_uri=uri, progress=False, trainer_options=options)
    # ... and those that write no checkpoint, train nothing, or leave no batch (a later hunt: each failed once
    # trained, naming a last.ckpt, or in Lightning's words, with a FAILED MLflow run)
    for options, said in (({"fast_dev_run": True}, "fast_dev_run=True: it writes no checkpoint"),
                          ({"limit_train_batches": 0}, "limit_train_batches=0: it trains nothing"),
                          ({"limit_val_batches": 0.001},
                           r"limit_val_batches=0\.001: that share of the valid split's \d+ batches is none")):
        with pytest.raises(ConfigError, match=said):
            train(cfg, processed, tmp_path / "r", tracking_uri=uri, progress=False, trainer_options=options)
    assert not (tmp_path / "r").exists()
    import mlflow

    assert not mlflow.MlflowClient(uri).search_runs([e.experiment_id for e in
                                                     mlflow.MlflowClient(uri).search_experiments()])

    path = list(sys.path)
    torch.set_default_dtype(torch.float64)
    try:
        with torch.no_grad():
            result = train(cfg, processed, tmp_path / "run", tracking_uri=uri, progress=False)
            assert not torch.is_grad_enabled()
        assert torch.get_default_dtype() == torch.float64 and sys.path == path
    finally:
        torch.set_default_dtype(torch.float32)
    weights = torch.load(result.best_checkpoint, weights_only=True)["state_dict"]
    assert {v.dtype for v in weights.values() if v.is_floating_point()} == {torch.float32}

    with pytest.raises(InputError, match=r"no schema\.json"):
        evaluate(result.run_dir, tmp_path / "nowhere", progress=False)
    torch.manual_seed(0)
    expected = torch.rand(1)
    torch.manual_seed(0)
    Scorer.from_checkpoint(result.run_dir)
    evaluate(result.run_dir, processed, progress=False)
    assert torch.rand(1) == expected


def test_evaluate_reads_only_the_split_it_scores(finished, processed, tmp_path):
    """A helper's hunt: evaluate --split test refused a folder holding only the test split ("no train.parquet"),
    and a damaged train.parquet blocked evaluating the test split. The split scored is the only one opened."""
    import shutil

    from autoint.datasets.errors import DataError
    from autoint.errors import MissingInput
    from autoint.train import evaluate

    whole = evaluate(finished["run"], processed, progress=False)
    only = tmp_path / "only-test"
    shutil.copytree(processed, only)
    (only / "valid.parquet").unlink()
    (only / "train.parquet").write_bytes(b"PAR1 damaged")
    assert evaluate(finished["run"], only, progress=False) == whole
    with pytest.raises(MissingInput, match=r"only-test: no valid\.parquet"):
        evaluate(finished["run"], only, split="valid", progress=False)
    (only / "vocabulary.parquet").unlink()  # a bare "[Errno 2] No such file or directory" (a helper's hunt)
    with pytest.raises(DataError, match=r"only-test/vocabulary\.parquet: vocabulary file not found \(encoder\.json "
                                        r"names it\)"):
        evaluate(finished["run"], only, progress=False)


def test_a_split_of_one_class_or_with_bad_labels_is_not_scored_as_if_fine(finished, processed, tmp_path):
    """A split of non-clicks only scored AUC 0.0 (torchmetrics' value, with a warning) and train kept its first epoch
    on that tie; labels NaN or -1/1 in a processed split gave AUC 0 or a wrong logloss, and no label column a
    KeyError traceback (a helper's hunt)."""
    import math

    import pyarrow as pa
    import pyarrow.parquet as pq

    from autoint.datasets.errors import DataError
    from autoint.schema import Schema
    from autoint.train import _check_valid_has_both_classes, evaluate

    def altered(name, change):
        folder = tmp_path / name
        shutil.copytree(processed, folder)
        table = pq.read_table(folder / "test.parquet")
        pq.write_table(change(table), folder / "test.parquet")
        return folder

    def labels(values):
        return lambda t: t.set_column(t.schema.get_field_index("label"), "label",
                                      pa.array(values(t.num_rows), t.schema.field("label").type))

    no_clicks = altered("zeros", labels(lambda n: [0] * n))
    metrics = evaluate(finished["run"], no_clicks, progress=False)
    assert math.isnan(metrics["test_auc"]) and math.isfinite(metrics["test_logloss"])
    for name, values, said in (("nan", lambda n: [float("nan")] * n, "label nan"),
                               ("pm1", lambda n: [-1, 1] * (n // 2) + [1] * (n % 2), "label -1.0")):
        with pytest.raises(DataError, match=rf"test\.parquet, row group 0: row 0 has {said}; labels are 0 or 1"):
            evaluate(finished["run"], altered(name, labels(values)), progress=False)
    with pytest.raises(DataError, match=r"test\.parquet, row group 0: no column for \['label'\]"):
        evaluate(finished["run"], altered("nolabel", lambda t: t.drop_columns(["label"])), progress=False)
    # an id outside its vocabulary: the model named its row within a forward piece ("row 20" of row 4500) and no
    # file (a helper's hunt); the split's reader names file, row group and row, as for a label
    field = next(f for f in Schema.load(processed / "schema.json").fields if f.kind == "categorical")

    def id_past_the_vocabulary(t):
        ids = t.column(field.name).to_numpy().copy()
        ids[-1] = 10**6
        return t.set_column(t.schema.get_field_index(field.name), field.name,
                            pa.array(ids, t.schema.field(field.name).type))

    def null_id(t):  # the row group's statistics leave nulls out (the review's catch): the ids are checked then
        ids = pa.array([None, *t.column(field.name).to_pylist()[1:]], t.schema.field(field.name).type)
        return t.set_column(t.schema.get_field_index(field.name), field.name, ids)

    with pytest.raises(DataError, match=rf"test\.parquet, row group 0: row 0 holds categorical id -2147483648 of "
                                        rf"field '{field.name}'"):
        evaluate(finished["run"], altered("null-id", null_id), progress=False)
    rows = pq.read_metadata(processed / "test.parquet").num_rows
    size = field.vocab_size
    with pytest.raises(DataError, match=rf"test\.parquet, row group 0: row {rows - 1} holds categorical id 1000000 "
                                        rf"of field '{field.name}', outside its vocabulary 0\.\.{size - 1}"):
        evaluate(finished["run"], altered("id", id_past_the_vocabulary), progress=False)

    report = json.loads((processed / "prepare.json").read_text())
    report["positives"]["valid"] = 0
    (tmp_path / "p").mkdir()
    (tmp_path / "p" / "prepare.json").write_text(json.dumps(report))
    with pytest.raises(DataError, match=r"the valid split's [\d,]+ rows are all non-clicks, so the validation AUC"):
        _check_valid_has_both_classes(tmp_path / "p")
    _check_valid_has_both_classes(processed)


def test_a_run_folder_without_best_ckpt_says_what_it_scores_and_mlflow_has_the_tested_auc(finished, tmp_path,
                                                                                          caplog):
    """A run folder without best.ckpt scored last.ckpt (other weights, uncalibrated) without a word; the MLflow run
    showed the last epoch's val_auc, not the tested epoch's."""
    from autoint import tracking
    from autoint.checkpoint import resolve_checkpoint

    run = tmp_path / "run"
    (run / "checkpoints").mkdir(parents=True)
    shutil.copy(finished["run"] / "checkpoints" / "last.ckpt", run / "checkpoints" / "last.ckpt")
    assert resolve_checkpoint(run) == run / "checkpoints" / "last.ckpt"
    assert "no best.ckpt; using" in caplog.text and "without the calibration" in caplog.text
    run_id = json.loads((finished["run"] / "run.json").read_text())["run_id"]
    summary = json.loads((finished["run"] / "metrics.json").read_text())
    logged = tracking.run_info(finished["uri"], run_id)["metrics"]
    assert logged["best_epoch_val_auc"] == pytest.approx(summary["best_epoch_val_auc"])


def test_ddp_sigterm_and_batch_settings_that_broke_several_processes(tmp_path, monkeypatch):
    """Under DDP (a helper's hunt): Lightning's SIGTERM handler broadcast from inside the signal handler, which could
    meet another collective and hang both ranks; train.batch_size=2 over 2 processes with an odd row count crashed
    both ranks in tracebacks."""
    import types

    import torch

    from autoint.config import ConfigError
    from autoint.data import SplitLoader
    from autoint.train import make_trainer, process_state

    with process_state():  # a Trainer turns on deterministic algorithms for the whole process
        trainer = make_trainer(small_config("train.max_epochs=1"), tmp_path, [], progress=False)
    connector = trainer._signal_connector
    monkeypatch.setattr(torch.distributed, "broadcast", lambda *a, **k: pytest.fail("a collective in the handler"))
    monkeypatch.setattr(torch.distributed, "is_initialized", lambda: True)
    monkeypatch.setattr(type(trainer), "world_size", property(lambda self: 2))  # Lightning's broadcast: with ranks
    connector._sigterm_notifier_fn(15, None)
    assert trainer.received_sigterm

    split = types.SimpleNamespace(num_rows=3159, path=tmp_path / "train.parquet")
    with pytest.raises(ConfigError, match=r"train\.batch_size: 2 over 2 processes is one row per process and step, "
                                          r"and 3,159 rows do not share evenly.*use train\.batch_size >= 4"):
        SplitLoader(split, batch_size=2, world_size=2)
    SplitLoader(split, batch_size=4, world_size=2)
    SplitLoader(types.SimpleNamespace(num_rows=3158, path=split.path), batch_size=2, world_size=2)


def test_resume_with_fewer_epochs_than_the_run_trained_is_one_line(finished, processed, tmp_path):
    """Lightning's MisconfigurationException traceback ('You restored a checkpoint with current_epoch=14, but you
    have set Trainer(max_epochs=2)'), and the killed run relabelled FAILED (a helper's hunt)."""
    from autoint.config import load_config
    from autoint.train import RunFolderError, train

    run = tmp_path / "run"
    shutil.copytree(finished["run"], run)
    (run / "metrics.json").unlink()  # killed after its last epoch, before the end of the run
    epochs = json.loads((finished["run"] / "metrics.json").read_text())["epochs"]
    cfg = load_config(run / "config.yaml", ["train.max_epochs=1"])
    with pytest.raises(RunFolderError, match=rf"the run has trained {epochs} epochs \(last\.ckpt\), more than "
                                             rf"train\.max_epochs = 1; pass --max-epochs {epochs} or more"):
        train(cfg, processed, run, resume=True, tracking_uri=finished["uri"], progress=False)


def test_a_model_trained_in_a_precision_now_refused_is_still_scored(finished, processed, tmp_path):
    """Refusing 16-true, bf16-true and 64 for training made every model trained so before unreadable: evaluate,
    predict, serve and inspect said 'written by another version?' (a reviewer's catch)."""
    import torch

    from autoint.checkpoint import model_from_checkpoint, read_checkpoint
    from autoint.train import evaluate

    ckpt = read_checkpoint(finished["run"] / "checkpoints" / "best.ckpt")
    ckpt["autoint"]["config"]["train"]["precision"] = "bf16-true"
    old = tmp_path / "old.ckpt"
    torch.save(ckpt, old)
    _, cfg, _, _ = model_from_checkpoint(read_checkpoint(old), old)
    assert cfg.train.precision == "32-true"
    assert evaluate(old, processed, progress=False) == evaluate(finished["run"], processed, progress=False)


def test_two_commands_started_at_once_on_a_fresh_checkout_generate_and_prepare_once(tmp_path, monkeypatch):
    """Seen on a lent GPU machine: four `autoint train configs/synthetic.yaml` started at once in a fresh checkout
    each generated the synthetic log, and the later files (other mtimes) made the folder prepared from the first
    look stale: two runs stopped, "raw input ... changed since it was prepared". The log is now generated once, and
    a folder another command prepared while this one waited is taken as it is, not prepared again."""
    import threading
    import time

    import autoint.preprocess
    from autoint.datasets import synthetic
    from autoint.preprocess import prepare, prepared_differences

    calls = {"generate": 0, "move_in": 0}

    def counted(name, real, pause):
        def wrapper(*args, **kwargs):
            calls[name] += 1
            time.sleep(pause)  # long enough for the other command to find nothing there yet
            return real(*args, **kwargs)
        return wrapper

    monkeypatch.setattr(synthetic, "generate", counted("generate", synthetic.generate, 0.5))
    monkeypatch.setattr(autoint.preprocess, "_move_in", counted("move_in", autoint.preprocess._move_in, 0.5))
    cfg = small_config(f"data.raw={tmp_path / 'raw'}")
    folder = tmp_path / "p"
    reports, errors = [], []

    def command():
        try:
            reports.append(prepare(cfg, None, folder, progress=False))
        except Exception as e:  # reported below
            errors.append(e)

    threads = [threading.Thread(target=command) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    assert errors == [] and len(reports) == 2
    assert calls == {"generate": 1, "move_in": 1}
    assert reports[0]["rows"] == reports[1]["rows"]
    assert prepared_differences(folder, cfg, tmp_path / "raw" / synthetic.DATA_FILE) == []


def test_prepare_waits_for_a_run_training_on_the_folder_and_two_prepares_take_turns(tmp_path, caplog):
    """A folder prepared again under a training run gave it other rows, and the run was logged FINISHED with their
    test figures; two prepares into one folder at once deleted each other's work folder, one with a DuckDB
    traceback (a helper's hunt)."""
    import os
    import subprocess
    import sys
    import threading
    import time

    from autoint.files import folder_lock
    from autoint.preprocess import prepare

    cfg = small_config(f"data.raw={tmp_path / 'raw'}")
    folder = tmp_path / "p"
    prepare(cfg, None, folder, progress=False)
    before = {p.name: p.read_bytes() for p in folder.iterdir() if p.suffix == ".parquet"}
    done = threading.Event()
    with caplog.at_level("WARNING", logger="autoint.files"), folder_lock(folder, shared=True):  # a run trains on it
        worker = threading.Thread(target=lambda: (prepare(cfg, None, folder, progress=False, overwrite=True),
                                                  done.set()))
        worker.start()
        time.sleep(1.5)
        assert not done.is_set()  # waiting, not preparing under the run
        assert "another command is preparing this folder or training on it; waiting for it to end" in caplog.text
    worker.join(timeout=120)
    assert done.is_set()
    assert {p.name: p.read_bytes() for p in folder.iterdir() if p.suffix == ".parquet"} == before

    code = ("import sys; from autoint.config import load_config; from autoint.preprocess import prepare; "
            "prepare(load_config(None, sys.argv[2:]), None, sys.argv[1], progress=False)")
    args = [*SMALL, f"data.raw={tmp_path / 'raw'}"]
    procs = [subprocess.Popen([sys.executable, "-c", code, str(tmp_path / "both"), *args], stderr=subprocess.PIPE,
                              text=True, env={**os.environ, "OMP_NUM_THREADS": "1"}) for _ in range(2)]
    errors = [p.communicate(timeout=300)[1] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [e[-1500:] for e in errors]
    assert {p.name: p.read_bytes() for p in (tmp_path / "both").iterdir() if p.suffix == ".parquet"} == before


def test_a_prepare_killed_while_moving_its_files_in_is_finished_by_the_next_command(tmp_path, caplog):
    """A prepare killed (SIGKILL) after it had moved some of its files in left a folder without prepare.json, which
    every later command refused as a user's files until prepared again with --overwrite; one stopped there by a
    SIGTERM or Ctrl-C deleted the files it had not moved yet. The staged folder is whole once its prepare.json is
    written: the next prepare or train moves the rest in, and an interrupted one finishes the move itself."""
    import os
    import subprocess
    import sys

    import autoint.preprocess as pp
    from autoint.train import ensure_processed

    cfg = small_config(f"data.raw={tmp_path / 'raw'}")
    whole = tmp_path / "whole"
    pp.prepare(cfg, None, whole, progress=False)
    expected = {p.name: p.read_bytes() for p in whole.iterdir() if p.is_file()}

    # SIGKILL after two files were moved in (the process ends inside the third move).
    code = ("import os, sys; import autoint.preprocess as pp; from autoint.config import load_config\n"
            "real, n = os.replace, [0]\n"
            "def replace(a, b):\n"
            "    n[0] += '/.prepare/out/' in str(a) and '/.prepare/' not in str(b)\n"
            "    if n[0] == 3: os._exit(9)\n"
            "    real(a, b)\n"
            "pp.os.replace = replace\n"
            "pp.prepare(load_config(None, sys.argv[2:]), None, sys.argv[1], progress=False)")
    folder = tmp_path / "killed"
    proc = subprocess.run([sys.executable, "-c", code, str(folder), *SMALL, f"data.raw={tmp_path / 'raw'}"],
                          capture_output=True, text=True, timeout=300, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert proc.returncode == 9, proc.stderr[-1500:]
    assert not (folder / "prepare.json").exists() and (folder / pp.STAGE_FOLDER / "out" / "prepare.json").is_file()
    with caplog.at_level("WARNING", logger="autoint.preprocess"):
        assert ensure_processed(cfg, folder, None, progress=False) == folder  # train's way in: no --overwrite
    assert "a prepare was stopped while moving its files in; finishing it" in caplog.text
    assert {p.name: p.read_bytes() for p in folder.iterdir() if p.is_file()} == expected
    assert not (folder / pp.STAGE_FOLDER).exists()

    # Ctrl-C (or a SIGTERM, which autoint raises as an exception) on the third file: the move is finished.
    calls, real = [0], os.replace

    def interrupted(a, b):
        # os.replace is the os module's, which everything uses: count the moves out of the staged folder only
        calls[0] += f"/{pp.STAGE_FOLDER}/out/" in str(a) and f"/{pp.STAGE_FOLDER}/" not in str(b)
        if calls[0] == 3:
            raise KeyboardInterrupt
        real(a, b)

    other = tmp_path / "interrupted"
    pp.os.replace = interrupted
    try:
        with pytest.raises(KeyboardInterrupt):
            pp.prepare(cfg, None, other, progress=False)
    finally:
        pp.os.replace = real
    assert {p.name: p.read_bytes() for p in other.iterdir() if p.is_file()} == expected
    assert not (other / pp.STAGE_FOLDER).exists()


def test_settings_that_failed_mid_run_are_refused_before_it(processed, tmp_path, capsys):
    """A helper's hunt, each refused in one line before any epoch, where it ended in a traceback mid-run or failed
    once trained: a 1-row training batch under batch norm (torch's ValueError); clipping sparse gradients
    (NotImplementedError at the first step); a spawned strategy (an unpicklable hook); a folder without
    encoder.json (refused after training and testing, for the served model); an experiment name past MLflow's
    500 characters. And a tracking store that is no database or a folder."""
    from autoint.config import ConfigError
    from autoint.errors import MissingInput
    from autoint.tracking import TrackingError, check_tracking_uri
    from autoint.train import check_trainer_settings, train

    rows = json.loads((processed / "prepare.json").read_text())["rows"]["train"]
    config = tmp_path / "bn.yaml"
    small_config("model.dnn_hidden=[8]", "model.dnn_batch_norm=true", f"train.batch_size={rows - 1}",
                 "train.max_epochs=1").save(config)
    assert main(["train", str(config), "--data", str(processed), "--out", str(tmp_path / "bn"),
                 "--tracking-uri", sqlite_uri(tmp_path), "--quiet"]) == 2
    # (MLflow, imported by earlier tests before main() quietened it, says it creates the store)
    err = "\n".join(x for x in capsys.readouterr().err.strip().splitlines() if " INFO mlflow." not in x)
    assert f"train.batch_size: {rows - 1} leaves a batch of one row" in err and "\n" not in err, err
    assert "choose another, e.g. " in err and not (tmp_path / "bn" / "run.json").exists()  # before any run
    near = int(err.rsplit("e.g. ", 1)[1])
    assert (rows % near) != 1 and near > 1
    # over 4 processes (shares of 789 and 790 rows): 16 is 4 a step each, leaving 789 = 197 x 4 + 1; the advice
    # is a multiple of 4 (a process takes ceil(batch / 4) rows), and the loader's own refusal comes through
    from autoint.data import data_module

    def module(batch_size):
        dm = data_module(small_config("model.dnn_hidden=[8]", "model.dnn_batch_norm=true",
                                      f"train.batch_size={batch_size}"), processed)
        dm.setup("fit")
        return dm

    assert rows == 3159
    with pytest.raises(ConfigError, match=r"train\.batch_size: 16 leaves a batch of one row \(3,159 train rows over "
                                          r"4 processes\).* e\.g\. (\d+)") as said:
        module(16).check_batch_norm(4)
    near = int(str(said.value).rsplit("e.g. ", 1)[1])
    assert near % 4 == 0
    module(near).check_batch_norm(4)
    with pytest.raises(ConfigError, match=r"is one row per process and step"):
        module(4).check_batch_norm(4)

    with pytest.raises(ConfigError, match=r"gradient_clip_val: .*sparse gradients .* set train\.optimizer: adam"):
        train(small_config("train.optimizer=sparse_adam"), processed, tmp_path / "clip", progress=False,
              tracking_uri=sqlite_uri(tmp_path), trainer_options={"gradient_clip_val": 1.0})
    with pytest.raises(ConfigError, match=r"train\.strategy = 'ddp_spawn': spawned processes are not supported"):
        check_trainer_settings(small_config("train.strategy=ddp_spawn", "train.devices=2"), tmp_path / "spawn")
    bare = tmp_path / "no-encoder"
    shutil.copytree(processed, bare)
    (bare / "encoder.json").unlink()
    with pytest.raises(MissingInput, match=r"no-encoder: no encoder\.json, which the run's served model encodes"):
        train(small_config(), bare, tmp_path / "enc", progress=False, tracking_uri=sqlite_uri(tmp_path))
    assert not (tmp_path / "enc" / "run.json").exists() and not (tmp_path / "clip" / "run.json").exists()
    with pytest.raises(ConfigError, match=r"tracking\.experiment: must be at most 500 characters .* got 600"):
        small_config(f"tracking.experiment={'x' * 600}")

    # a run saved with the engine cap's old default (1GB) resumes under the new one; other settings still count
    from autoint.train import config_differences

    assert config_differences(small_config("data.memory_limit=1GB").to_dict(), small_config()) == []
    # how the process holds freed memory changes no figure: a run may resume without it (or with it)
    assert config_differences(small_config("train.keep_freed_memory=false").to_dict(), small_config()) == []
    assert config_differences(small_config("train.lr=0.01").to_dict(), small_config())

    (tmp_path / "text.db").write_text("not a database")
    with pytest.raises(TrackingError, match=r"text\.db cannot be used \(.*file is not a database\)"):
        check_tracking_uri(f"sqlite:///{tmp_path / 'text.db'}")
    import sqlite3

    # made in another process: this one would keep its store of the file, checked once, in MLflow's cache
    subprocess.run([sys.executable, "-c", "import mlflow, sys; mlflow.MlflowClient(sys.argv[1]).search_experiments()",
                    f"sqlite:///{tmp_path / 'old.db'}"], check=True, capture_output=True, timeout=120)
    with contextlib.closing(sqlite3.connect(tmp_path / "old.db")) as db, db:
        db.execute("update alembic_version set version_num='bf29a5ff90ea'")
    with pytest.raises(TrackingError, match=r"old\.db: its schema is not this MLflow's \(version bf29a5ff90ea, .*; "
                                            r"made by an older MLflow, back it up, then `mlflow db upgrade"):
        check_tracking_uri(f"sqlite:///{tmp_path / 'old.db'}")
    (tmp_path / "folder.db").mkdir()
    with pytest.raises(TrackingError, match=r"folder\.db is a folder; name a database file in it"):
        check_tracking_uri(f"sqlite:///{tmp_path / 'folder.db'}")
