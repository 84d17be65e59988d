"""The command line: output users read, and one-line errors instead of tracebacks."""

from __future__ import annotations

import contextlib
import json
import re
from pathlib import Path

import pytest

from autoint.cli import main
from autoint.errors import InputError

CONFIGS = Path(__file__).resolve().parent.parent / "configs"


def test_summary_prints_the_papers_non_embedding_count(capsys):
    """Without --data the fields are those prepare encodes: the shipped config buckets its 13 integer fields, so
    they are categorical (summary printed the reader's 13 numeric fields, a model train never builds)."""
    assert main(["summary", str(CONFIGS / "criteo.yaml"), "--set", "data.numeric_transform=criteo"]) == 0
    assert "39 (13 numeric, 26 categorical, 0 multi-valued)" in capsys.readouterr().out
    assert main(["summary", str(CONFIGS / "criteo.yaml")]) == 0
    out = capsys.readouterr().out
    assert "39 (0 numeric, 39 categorical, 0 multi-valued)" in out
    line = next(x for x in out.splitlines() if x.startswith("everything else"))
    assert line.split()[-1] == "39,361"
    assert "layers.2.residual.weight" in out


def test_summary_counts_autoint_plus_dnn(capsys):
    assert main(["summary", str(CONFIGS / "criteo.yaml"), "--set", "model.dnn_hidden=[32]"]) == 0
    out = capsys.readouterr().out
    line = next(x for x in out.splitlines() if x.startswith("everything else"))
    # + DNN: (39*16)*32 + 32 weights/biases, then 32 + 1 for its output layer.
    assert int(line.split()[-1].replace(",", "")) == 39_361 + 39 * 16 * 32 + 32 + 32 + 1
    assert out.startswith("AutoInt+")


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["summary", "missing.yaml"], "config file not found: missing.yaml"),
        (["summary", str(CONFIGS / "criteo.yaml"), "--set", "model.num_heads=0"], "model.num_heads"),
        (["summary", str(CONFIGS / "criteo.yaml"), "--set", "model.colour=red"], "model.colour"),
    ],
)
def test_errors_are_one_line_naming_the_culprit(capsys, argv, needle):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert needle in err and "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_a_model_wider_than_memory_is_described_by_summary_and_refused_by_train(capsys, tmp_path, monkeypatch):
    """summary counts a model on the meta device, so widths past memory are counted, not allocated (before: torch's
    allocator traceback); train refuses them in one line naming the widths, before drawing any weight."""
    import autoint.model
    from autoint.schema import FieldSpec, Schema

    assert main(["summary", str(CONFIGS / "criteo.yaml"), "--set", "model.embedding_dim=100000000"]) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("everything else"))
    assert int(line.split()[-1].replace(",", "")) > 10**10  # the attention's weights grow with D squared

    Schema((FieldSpec("site", "categorical", vocab_size=1000), FieldSpec("price", "numeric"))).save(
        tmp_path / "schema.json")
    monkeypatch.setattr(autoint.model, "physical_memory", lambda: 100_000)  # a 100 kB machine
    assert main(["summary", str(CONFIGS / "criteo.yaml"), "--data", str(tmp_path)]) == 0
    assert "more than this machine's 0.0 GB: train refuses it" in capsys.readouterr().out
    # without --data too, where the weights outside the tables alone are too much (nothing was said; a helper's hunt)
    assert main(["summary", str(CONFIGS / "criteo.yaml")]) == 0
    assert "memory:                  at least 0.0 GB of fp32 weights" in (out := capsys.readouterr().out)
    assert "train refuses it (the weights outside the embedding tables alone)" in out
    cfg = tmp_path / "s.yaml"
    cfg.write_text("data:\n  format: synthetic\n  synthetic: {n_rows: 500, n_categorical: 2, n_numeric: 1, "
                   "n_crosses: 1, seed: 3}\nmodel: {embedding_dim: 64}\ntrain: {max_epochs: 1}\n")
    assert main(["train", str(cfg), "--set", f"data.raw={tmp_path / 'raw'}", "--data", str(tmp_path / "p"),
                 "--out", str(tmp_path / "run"), "--quiet", "--tracking-uri", f"sqlite:///{tmp_path / 'm.db'}"]) == 2
    # (MLflow, imported by earlier tests before main() quietened it, says it creates the store)
    err = "\n".join(x for x in capsys.readouterr().err.strip().splitlines() if " INFO mlflow." not in x)
    assert err.startswith("autoint train: error: model: this model's ") and "\n" not in err
    # the total compared with the memory, not the weights alone (a helper's hunt)
    assert re.search(r"GB in fp32, [\d.]+ GB with the weights, gradients and adam's moments and temporaries while "
                     r"training, more than", err)
    assert "model.embedding_dim=64" in err
    assert not (tmp_path / "run" / "checkpoints").exists()


def test_running_out_of_memory_is_one_line_naming_what_to_make_smaller(capsys, monkeypatch):
    """torch's CPU allocator failing (a batch or model too large) is one line, also where a library wrapped it; a
    RuntimeError of other words is still a bug with its traceback."""
    import autoint.cli

    def allocate(args):
        try:
            raise RuntimeError("[enforce fail at alloc_cpu.cpp:127] err == 0. DefaultCPUAllocator: can't allocate "
                               "memory: you tried to allocate 61440000000 bytes. Error code 12")
        except RuntimeError as e:
            raise ValueError("the batch is not what this model takes") from e

    monkeypatch.setattr(autoint.cli, "cmd_summary", allocate)
    assert main(["summary", str(CONFIGS / "criteo.yaml")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("autoint summary: error: out of memory ([enforce fail") and "train.batch_size" in err
    assert "\n" not in err

    def bug(args):
        raise RuntimeError("mat1 and mat2 shapes cannot be multiplied")

    monkeypatch.setattr(autoint.cli, "cmd_summary", bug)
    with pytest.raises(RuntimeError, match="shapes"):
        main(["summary", str(CONFIGS / "criteo.yaml")])


@pytest.mark.parametrize(("rows", "expected"), [(20_000, "auto -> adam"), (600_000, "auto -> sparse_adam")])
def test_summary_of_a_prepared_folder_says_which_optimizer_auto_takes(capsys, tmp_path, rows, expected):
    from autoint.schema import FieldSpec, Schema
    from autoint.system import AUTO_SPARSE_ROWS

    assert (rows >= AUTO_SPARSE_ROWS) == expected.endswith("sparse_adam")
    Schema((FieldSpec("site", "categorical", vocab_size=rows), FieldSpec("price", "numeric"))).save(
        tmp_path / "schema.json")
    assert main(["summary", str(CONFIGS / "criteo.yaml"), "--data", str(tmp_path)]) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("optimizer"))
    assert expected in line and f"{rows:,} table rows" in line


def test_summary_refuses_a_folder_prepared_with_other_settings(capsys, tmp_path, criteo_head):
    """summary counted the embedding rows of whatever folder data.processed named, prepared with other settings
    (a study's best.yaml with min_count 3 read the base folder of min_count 2), silently; train refuses it."""
    cfg = str(CONFIGS / "criteo.yaml")
    assert main(["prepare", cfg, "--raw", str(criteo_head), "--out", str(tmp_path / "p"), "--quiet"]) == 0
    assert main(["summary", cfg, "--data", str(tmp_path / "p")]) == 0
    capsys.readouterr()
    assert main(["summary", cfg, "--data", str(tmp_path / "p"), "--set", "data.min_count=3"]) == 2
    err = capsys.readouterr().err
    assert "was prepared from other data or settings than this config (data.min_count: 10 in the folder, 3 now)" \
        in err and len(err.strip().splitlines()) == 1
    # --data was given: the advice is the config's settings (it said "name the folder ... with --data"; a hunt)
    assert "give the config it was prepared with (a run's config.yaml, or the same --set settings)" in err


def test_summary_reads_the_folder_prepare_writes_for_a_config_without_data_processed(capsys, tmp_path, criteo_head,
                                                                                    monkeypatch):
    """data.processed null: prepare and train use data/processed/CONFIG_NAME, summary read none ('vocabularies not
    fitted: pass --data DIR'; a helper's audit of the README)."""
    import yaml

    monkeypatch.chdir(tmp_path)
    cfg = yaml.safe_load((CONFIGS / "criteo.yaml").read_text())
    cfg["data"]["processed"] = None
    (tmp_path / "mylog.yaml").write_text(yaml.safe_dump(cfg))
    assert main(["summary", "mylog.yaml"]) == 0
    assert "vocabularies not fitted" in capsys.readouterr().out
    assert main(["prepare", "mylog.yaml", "--raw", str(criteo_head), "--quiet"]) == 0
    assert (tmp_path / "data" / "processed" / "mylog" / "schema.json").is_file()
    capsys.readouterr()
    assert main(["summary", "mylog.yaml"]) == 0
    assert "vocabularies not fitted" not in capsys.readouterr().out


def test_a_stale_folders_advice_repeats_the_config_and_data_settings_of_the_command(capsys, tmp_path, caplog):
    """train --set data.min_count=2 on a folder of min_count 5 advised `autoint prepare CONFIG ... --overwrite`,
    which prepared min_count 5 again: the retried train failed the same way (a helper's hunt)."""
    import shlex

    raw = tmp_path / "log.csv"
    raw.write_text("y,site\n" + "".join(f"{i % 2},s{i % 4}\n" for i in range(40)))
    cfg = tmp_path / "my config.yaml"
    cfg.write_text("data:\n  format: table\n  min_count: 5\n  columns: {label: y, categorical: [site]}\n")
    folder = tmp_path / "p"
    assert main(["prepare", str(cfg), "--raw", str(raw), "--out", str(folder), "--quiet"]) == 0
    capsys.readouterr()
    assert main(["train", str(cfg), "--data", str(folder), "--set", "data.min_count=2", "--set", "train.lr=0.01",
                 "--quiet"]) == 2
    err = capsys.readouterr().err
    advised = err[err.index("`autoint prepare") + 1: err.rindex("`")]
    # the train.* setting is not prepare's; the raw input, named neither in the config nor now, is the folder's
    assert advised == (f"autoint prepare {shlex.quote(str(cfg))} --set data.min_count=2 --raw {raw} --out {folder} "
                       "--overwrite")
    assert main([*shlex.split(advised)[1:], "--quiet"]) == 0
    from autoint.config import load_config
    from autoint.preprocess import prepared_differences
    assert prepared_differences(folder, load_config(cfg, ["data.min_count=2"]), str(raw)) == []
    # data.raw removed once prepared (a large log, its disk wanted back): compared by the settings, and said
    raw.unlink()
    with caplog.at_level("WARNING", logger="autoint.preprocess"):
        assert prepared_differences(folder, load_config(cfg, ["data.min_count=2", f"data.raw={raw}"])) == []
    assert f"data.raw: {raw} is not there (removed once prepared?): {folder} is compared with the settings " \
           "only" in caplog.text
    assert prepared_differences(folder, load_config(cfg, [f"data.raw={raw}"])) == [
        "data.min_count: 2 in the folder, 5 now"]
    # but not a path never read (a typo, a day not there yet), nor an input partly there (a reviewer's catch)
    other = tmp_path / "day2.csv"
    other.write_text("y,site\n1,s1\n")
    for given in (f"data.raw={tmp_path / 'log.cvs'}", f"data.raw=[{raw}, {tmp_path / 'day3.csv'}]",
                  f"data.raw=[{raw}, {other}]"):
        with pytest.raises(InputError, match=r"raw file not found"):
            prepared_differences(folder, load_config(cfg, ["data.min_count=2", given]))


def _tiny_table_log(tmp_path, train: str):
    """A 60-row CSV of one categorical field and a config of a tiny model for it, with ``train`` settings."""
    raw = tmp_path / "log.csv"
    raw.write_text("y,site\n" + "".join(f"{i % 2},s{i % 4}\n" for i in range(60)))
    cfg = tmp_path / "c.yaml"
    cfg.write_text("data:\n  format: table\n  columns: {label: y, categorical: [site]}\n"
                   f"model: {{embedding_dim: 4, num_layers: 1, num_heads: 1, head_dim: 4}}\ntrain: {train}\n")
    return raw, cfg


def test_folders_a_user_names_by_mistake_are_refused_not_written_into(capsys, tmp_path, monkeypatch):
    """A helper's hunt: --data naming a folder of the user's own files (a raw data folder, a train.parquet of their
    own) had the splits written over them; --out naming a file was a FileExistsError traceback; a quoted
    --out "~/x" put the checkpoints in ~/x and the rest in ./~/x; --max-epochs 0 was blamed on a --set."""
    raw, cfg = _tiny_table_log(tmp_path, "{max_epochs: 1, batch_size: 16}")
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "train.parquet").write_text("my own file")
    (mine / "notes.txt").write_text("notes")
    monkeypatch.chdir(tmp_path)
    capsys.readouterr()
    assert main(["train", str(cfg), "--raw", str(raw), "--data", str(mine), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "mine is not a processed folder (it has no prepare.json) and holds other files (notes.txt, " \
           "train.parquet)" in err and len(err.strip().splitlines()) == 1
    assert (mine / "train.parquet").read_text() == "my own file" and sorted(p.name for p in mine.iterdir()) == [
        "notes.txt", "train.parquet"]
    (tmp_path / "afile").write_text("x")
    assert main(["train", str(cfg), "--raw", str(raw), "--data", str(tmp_path / "p"), "--out",
                 str(tmp_path / "afile"), "--quiet"]) == 2
    assert "afile is a file, not a run folder" in capsys.readouterr().err
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert main(["train", str(cfg), "--data", "p", "--raw", "log.csv", "--out", "~/runs/x", "--quiet",
                 "--tracking-uri", f"sqlite:///{tmp_path / 'm.db'}"]) == 0
    assert (tmp_path / "home" / "runs" / "x" / "run.json").is_file() and not (tmp_path / "~").exists()
    # The run's saved config and params name the data it trained on, not the config file's (a helper's hunt)
    import mlflow

    from autoint.config import load_config

    saved = load_config(tmp_path / "home" / "runs" / "x" / "config.yaml")
    assert (saved.data.processed, saved.data.raw) == (str(tmp_path / "p"), str(raw))
    run_id = json.loads((tmp_path / "home" / "runs" / "x" / "run.json").read_text())["run_id"]
    params = mlflow.MlflowClient(f"sqlite:///{tmp_path / 'm.db'}").get_run(run_id).data.params
    assert (params["data.processed"], params["data.raw"]) == (str(tmp_path / "p"), str(raw))
    assert (tmp_path / "home" / "runs" / "x" / "checkpoints" / "best.ckpt").is_file()
    assert main(["train", str(cfg), "--data", str(tmp_path / "p"), "--max-epochs", "0"]) == 2
    assert "--max-epochs 0: train.max_epochs: must be a positive integer" in capsys.readouterr().err


def test_a_full_disk_or_a_read_only_path_is_one_line_not_a_traceback(capsys, monkeypatch):
    """Any command: a write that fills the disk (ENOSPC from Python or Arrow), or a path this user may not write,
    is one line and status 2; any other OSError is a bug and keeps its traceback."""
    import errno

    import autoint.cli

    def fill(args):
        raise OSError(errno.ENOSPC, "No space left on device", "/data/runs/x/checkpoints/last.ckpt")

    monkeypatch.setattr(autoint.cli, "cmd_summary", fill)
    assert main(["summary", str(CONFIGS / "criteo.yaml")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("autoint summary: error: the disk is full ([Errno 28] No space left on device: "
                          "'/data/runs/x/checkpoints/last.ckpt'); free some space") and "\n" not in err

    def checkpoint(args):  # wrapped by a library (torch.save raises while handling the OSError)
        try:
            raise OSError(errno.ENOSPC, "No space left on device", "/data/runs/x/checkpoints/best.ckpt")
        except OSError:
            raise RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 152960") from None

    monkeypatch.setattr(autoint.cli, "cmd_summary", checkpoint)
    assert main(["summary", str(CONFIGS / "criteo.yaml")]) == 2
    assert capsys.readouterr().err.startswith("autoint summary: error: the disk is full ([Errno 28] No space left "
                                              "on device: '/data/runs/x/checkpoints/best.ckpt')")

    def tracking_store(args):  # MLflow's SQLite store, through SQLAlchemy
        import sqlite3
        raise RuntimeError("(sqlite3.OperationalError) database or disk is full") from sqlite3.OperationalError(
            "database or disk is full")

    monkeypatch.setattr(autoint.cli, "cmd_summary", tracking_store)
    assert main(["summary", str(CONFIGS / "criteo.yaml")]) == 2
    assert "the disk is full (database or disk is full)" in capsys.readouterr().err

    for code, word in ((errno.EEXIST, "File exists"), (errno.EISDIR, "Is a directory")):  # a path in the way
        def in_the_way(args, code=code, word=word):  # (download extracting over a file: a traceback before)
            raise OSError(code, word, "/data/raw/ml-100k")

        monkeypatch.setattr(autoint.cli, "cmd_summary", in_the_way)
        assert main(["summary", str(CONFIGS / "criteo.yaml")]) == 2
        assert capsys.readouterr().err.strip() == (f"autoint summary: error: /data/raw/ml-100k: {word}: a file or "
                                                   "folder of that name is in the way; move it, or choose another path")

    def words_only(args):  # the words in a value or a file name are no full disk: a bug keeps its traceback
        raise ValueError("cannot parse 'No space left on device'")

    monkeypatch.setattr(autoint.cli, "cmd_summary", words_only)
    with pytest.raises(ValueError):
        main(["summary", str(CONFIGS / "criteo.yaml")])

    def read_only(args):
        raise OSError(errno.EROFS, "Read-only file system", "/mnt/ro/run")

    monkeypatch.setattr(autoint.cli, "cmd_summary", read_only)
    assert main(["summary", str(CONFIGS / "criteo.yaml")]) == 2
    assert capsys.readouterr().err.strip() == ("autoint summary: error: /mnt/ro/run: Read-only file system; choose "
                                               "another path (e.g. --out) or change its permissions")

    def other(args):
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(autoint.cli, "cmd_summary", other)
    with pytest.raises(OSError, match="Input/output error"):
        main(["summary", str(CONFIGS / "criteo.yaml")])


def test_a_dnn_only_model_of_a_synthetic_log_trains_without_the_planted_comparison(tmp_path, capsys):
    """num_layers 0 with a DNN (AutoInt+ without attention) trained, tested and logged, then failed the command
    (status 2) on the planted-crosses comparison, which needs attention maps."""
    cfg = tmp_path / "s.yaml"
    cfg.write_text("data:\n  format: synthetic\n  synthetic: {n_rows: 3000, n_categorical: 4, n_numeric: 1, "
                   "n_crosses: 1, seed: 3}\n"
                   "model: {embedding_dim: 4, num_layers: 0, dnn_hidden: [8]}\ntrain: {max_epochs: 1}\n")
    assert main(["train", str(cfg), "--set", f"data.raw={tmp_path / 'raw'}", "--data", str(tmp_path / "p"),
                 "--out", str(tmp_path / "run"), "--quiet", "--tracking-uri", f"sqlite:///{tmp_path / 'm.db'}"]) == 0
    assert "no interacting layers, hence no attention maps: skipping the planted-crosses comparison" in \
        capsys.readouterr().out


def test_a_bare_resume_keeps_the_runs_own_max_epochs(tmp_path, capsys):
    """A run started with --max-epochs and resumed without it trained on to the config file's limit, and a finished
    one was extended, though only --max-epochs may change on --resume (a helper's hunt)."""
    raw, cfg = _tiny_table_log(tmp_path, "{max_epochs: 3, batch_size: 16, patience: 5, calibration: none}")
    common = ["--raw", str(raw), "--data", str(tmp_path / "p"), "--out", str(tmp_path / "run"), "--quiet",
              "--tracking-uri", f"sqlite:///{tmp_path / 'm.db'}"]
    assert main(["train", str(cfg), *common, "--max-epochs", "1"]) == 0
    capsys.readouterr()
    assert main(["train", str(cfg), *common, "--resume"]) == 2
    assert "complete" in capsys.readouterr().err
    # Without --quiet and with no terminal to draw a bar on, a line per epoch (a piped run said nothing until it
    # ended), numbered as the run counts its epochs.
    assert main(["train", str(cfg), *[a for a in common if a != "--quiet"], "--resume", "--max-epochs", "2"]) == 0
    said = capsys.readouterr()
    assert "epochs        2 run" in said.out
    assert re.search(r"^epoch 2/2  train loss \d\.\d{4}  val AUC \d\.\d{4}  val logloss \d\.\d{4}  \(\d+\.\d s\)$",
                     said.err, re.M) and "epoch 1/2" not in said.err


def test_prepare_names_the_columns_no_setting_reads(tmp_path, capsys):
    """A helper's hunt: a column left out of the settings by mistake was listed only in prepare.json."""
    raw, cfg = _tiny_table_log(tmp_path, "{max_epochs: 1}")
    raw.write_text("y,site,city,note\n" + "".join(f"{i % 2},s{i % 4},c{i % 3},n\n" for i in range(60)))
    assert main(["prepare", str(cfg), "--raw", str(raw), "--out", str(tmp_path / "p"), "--quiet"]) == 0
    assert "ignored 2 column(s) no setting names: city, note (data.columns.drop: on purpose)" in capsys.readouterr().out


def test_cli_mistakes_are_one_line_not_tracebacks_or_silent(tmp_path, capsys, monkeypatch):
    """A helper's hunt: a config saved in cp1252, --devices foo on a CPU and a folder named as the config were
    tracebacks or misleading; train.lr=.inf was accepted; --out '' trained into the current folder, and --out
    naming the processed folder mixed the run with the splits; a quoted '~' was not expanded by summary."""
    raw, cfg = _tiny_table_log(tmp_path, "{max_epochs: 1, batch_size: 16, calibration: none}")
    data = tmp_path / "p"
    assert main(["prepare", str(cfg), "--raw", str(raw), "--out", str(data), "--quiet"]) == 0
    capsys.readouterr()
    latin = tmp_path / "latin.yaml"
    latin.write_bytes(cfg.read_bytes() + b"# caf\xe9\n")
    (tmp_path / "folder.yaml").mkdir()
    train = ["train", str(cfg), "--data", str(data), "--quiet", "--tracking-uri", f"sqlite:///{tmp_path / 'm.db'}"]
    for argv, said in (
        (["summary", str(latin)], r"latin\.yaml: not UTF-8 text .*save it as UTF-8"),
        (["summary", str(tmp_path / "folder.yaml")], r"folder\.yaml: a folder, not a config file"),
        ([*train, "--out", str(tmp_path / "r1"), "--devices", "foo"], r"Lightning refuses these settings .*devices"),
        ([*train, "--out", str(tmp_path / "r2"), "--set", "train.lr=.inf"], r"train\.lr: must be a finite number"),
        ([*train, "--out", ""], r"argument --out: an empty path"),
        ([*train, "--out", str(data)], r"is a processed data folder \(it holds schema\.json\), not a run folder"),
        ([*train, "--out", str(tmp_path / "r3"), "--set", "train.lr=1e30"],
         r"training diverged: the train loss of epoch 1 is nan; lower train\.lr"),
    ):
        with pytest.raises(SystemExit) if "--out" in argv and argv[argv.index("--out") + 1] == "" else \
                contextlib.nullcontext():
            assert main(argv) == 2
        assert re.search(said, capsys.readouterr().err), argv
    monkeypatch.setenv("HOME", str(tmp_path))
    assert main(["summary", str(cfg), "--data", "~/p"]) == 0
    assert "+ 4 per vocabulary row" not in capsys.readouterr().out  # the fitted folder's counts, not unfitted ones


def test_configs_without_data_processed_prepare_into_a_folder_named_after_them(tmp_path, monkeypatch, capsys):
    """Two table configs without data.processed trained into one data/processed/run, and the second was refused as
    prepared from other data; `autoint prepare` on such a config refused ("no output folder"). Each config now has
    data/processed/CONFIG_NAME, as its run has runs/CONFIG_NAME (a helper's walk through the README)."""
    import numpy as np
    import pandas as pd

    monkeypatch.chdir(tmp_path)
    rng = np.random.default_rng(0)
    for name, n in (("a", 300), ("b", 400)):
        pd.DataFrame({"y": rng.integers(0, 2, n), "site": rng.choice(["x", "y", "z"], n),
                      "price": rng.normal(size=n)}).to_csv(f"{name}.csv", index=False)
        Path(f"{name}.yaml").write_text(
            f"data: {{format: table, raw: {name}.csv, columns: {{label: y, categorical: [site], numeric: [price]}}}}\n"
            "model: {num_layers: 1, embedding_dim: 4, head_dim: 2}\n"
            "train: {max_epochs: 1, batch_size: 64, precision: 32-true}\n")
    assert main(["prepare", "a.yaml", "--quiet"]) == 0
    assert "into data/processed/a" in capsys.readouterr().out
    assert main(["train", "b.yaml", "--quiet", "--tracking-uri", f"sqlite:///{tmp_path / 'mlflow.db'}"]) == 0
    assert (tmp_path / "data" / "processed" / "b" / "prepare.json").is_file()
    assert not (tmp_path / "data" / "processed" / "run").exists()
    # A folder prepared before into the shared data/processed/run from the same settings and input is used, with
    # a note: a run started there resumes on its data, and nothing is prepared again (a reviewer's catch).
    from autoint.config import load_config
    from autoint.preprocess import prepare

    Path("c.yaml").write_text(Path("b.yaml").read_text())
    prepare(load_config("c.yaml"), None, "data/processed/run", progress=False)
    capsys.readouterr()
    assert main(["train", "c.yaml", "--quiet", "--tracking-uri", f"sqlite:///{tmp_path / 'mlflow.db'}"]) == 0
    assert "note: using data/processed/run, prepared from these settings" in capsys.readouterr().err
    assert not (tmp_path / "data" / "processed" / "c").exists()


def test_a_registered_model_name_with_a_quote_is_refused_by_the_rule_it_breaks(capsys):
    with pytest.raises(SystemExit):
        main(["train", str(CONFIGS / "synthetic.yaml"), "--register", "it's"])
    assert """holds no '/', ':' or "'\"""" in capsys.readouterr().err


def test_mlflows_view_run_lines_stay_out_of_the_output(monkeypatch, capsys):
    """With an HTTP tracking server MLflow wrote 'View run … at: http://…' to stdout itself (not through its
    logger, which the commands quiet), twice per train (a helper's hunt)."""
    from mlflow.tracking._tracking_service.client import TrackingServiceClient

    from autoint.cli import _quiet_third_party_noise

    monkeypatch.setenv("MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT", "")  # as in a fresh process (main sets it)
    monkeypatch.delenv("MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT")
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")  # (unsuppressed, it would ask this dead port)
    _quiet_third_party_noise()
    TrackingServiceClient("http://127.0.0.1:9")._log_url("0" * 32)
    assert "View run" not in capsys.readouterr().out


def test_a_password_in_a_url_is_hidden_in_the_commands_warnings_and_error_lines(tmp_path, capsys):
    """Warnings (inspect's, naming a run's store) and error lines printed URLs whole, password and all (a review
    of this session's diff): they go through the same hiding as the printed lines."""
    import logging

    from autoint.cli import _hide_passwords_in_record

    record = logging.LogRecord("autoint.cli", logging.WARNING, __file__, 1, "run in %s", ("http://u:s3cret@h:5000",),
                               None)
    assert _hide_passwords_in_record(record) and record.getMessage() == "run in http://u:***@h:5000"
    code = main(["evaluate", "runs:/0123/model", "--data", str(tmp_path), "--tracking-uri",
                 "postgresql://u:s3cret@127.0.0.1:9/mlflow"])
    err = capsys.readouterr().err
    assert code == 2 and "s3cret" not in err and "u:***@127.0.0.1:9" in err, err
