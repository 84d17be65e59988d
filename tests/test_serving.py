"""Scoring raw rows as users bring them: ``Scorer``, the MLflow pyfunc model and ``autoint serve``.

One small click log written as a user's CSV (a categorical column of ints, one
of ints with blanks, strings with blanks, numbers, a "|"-joined list) is
prepared and trained on once per session, for one epoch.
"""

from __future__ import annotations

import datetime
import decimal
import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest
import torch
from test_train import free_port, stop, wait_http

from autoint.checkpoint import CHECKPOINT_KEY, PRECISION_KEY
from autoint.cli import main
from autoint.errors import InputError
from autoint.predict import Scorer

COLUMNS = "{label: clicked, categorical: [hour, site, device], numeric: [price], multi: {tags: '|'}}"


@pytest.fixture(scope="session")
def log_csv(tmp_path_factory) -> Path:
    """A user's click log as text: ints in ``hour``, ints with blanks in ``device``, blanks in ``site``."""
    rng = np.random.default_rng(3)
    n = 400
    site = rng.choice(["news", "shop", "mail", "x y"], n).astype(object)
    site[::13] = ""
    device = rng.integers(1, 9, n).astype(str).astype(object)
    device[::7] = ""
    price = np.round(rng.normal(10, 3, n), 2).astype(str).astype(object)
    price[::11] = ""
    hour = rng.integers(0, 24, n)
    frame = pd.DataFrame({
        "clicked": (rng.random(n) < 0.2 + 0.5 * (hour > 12)).astype(int),
        "hour": hour, "site": site, "device": device, "price": price,
        "tags": rng.choice(["sport|tech", "tech", "", "art|sport|tech"], n),
    })
    path = tmp_path_factory.mktemp("log") / "clicks.csv"
    frame.to_csv(path, index=False)
    return path


@pytest.fixture(scope="session")
def run(log_csv):
    from autoint.config import load_config
    from autoint.train import ensure_processed, train

    root = log_csv.parent
    cfg = load_config(None, ["data.format=table", f"data.raw={log_csv}", f"data.columns={COLUMNS}",
                             "model.num_layers=1", "model.embedding_dim=8", "model.head_dim=4",
                             "train.batch_size=64", "train.max_epochs=1", "train.seed=5",
                             "train.precision=32-true"])  # fp32 on any CPU (auto is bf16 where it is native)
    data = ensure_processed(cfg, root / "processed", None, progress=False)
    return train(cfg, data, root / "run", tracking_uri=f"sqlite:///{root / 'mlflow.db'}", progress=False)


def read_text(path: Path) -> pd.DataFrame:
    """The log as ``autoint predict`` reads it: every value as text, blanks missing."""
    return pd.read_csv(path, dtype=str, keep_default_na=False, na_values=[""]).drop(columns="clicked")


def read_inferred(path: Path) -> pd.DataFrame:
    """The log as ``pd.read_csv`` reads it by default: ints, floats (ints with blanks), strings, NaN."""
    return pd.read_csv(path).drop(columns="clicked")


# ----------------------------------------------------------------------------- one value, whatever its type
def test_a_log_read_as_text_or_with_inferred_types_encodes_as_training_did(run, log_csv, tmp_path):
    scorer = Scorer.from_checkpoint(run.best_checkpoint)
    inferred = read_inferred(log_csv)
    assert [str(t) for t in inferred.dtypes[["hour", "device", "price"]]] == ["int64", "float64", "float64"]
    inferred.to_parquet(tmp_path / "clicks.parquet", index=False)
    text = scorer.encode(read_text(log_csv))
    for frame in (inferred, pd.read_parquet(tmp_path / "clicks.parquet")):
        batch = scorer.encode(frame)
        for key in text:
            torch.testing.assert_close(batch[key], text[key], rtol=0, atol=0)
    np.testing.assert_array_equal(scorer.score_frame(inferred), scorer.score_frame(read_text(log_csv)))

    # The ids are those training wrote: each row's categorical and list ids, compared as a multiset.
    splits = [pq.read_table(Path(run.data_dir) / f"{s}.parquet") for s in ("train", "valid", "test")]
    width = text["multi"].shape[-1]
    written = np.concatenate([np.column_stack(
        [t[c].to_numpy() for c in ("hour", "site", "device")]
        + [t["tags"].combine_chunks().flatten().to_numpy().reshape(-1, width)]) for t in splits])
    scored = torch.cat([text["categorical"], text["multi"].flatten(1)], dim=1).numpy()
    assert sorted(map(tuple, scored.tolist())) == sorted(map(tuple, written.tolist()))


def test_one_column_may_mix_strings_and_numbers(run, log_csv):
    scorer = Scorer.from_checkpoint(run.best_checkpoint)
    text = read_text(log_csv).iloc[1:4].reset_index(drop=True)  # devices given (row 0 has none)
    mixed = text.astype(object)
    mixed["device"] = pd.Series([text.loc[0, "device"], float(text.loc[1, "device"]), int(text.loc[2, "device"])],
                                dtype=object)  # e.g. a JSON request: "4", 4.0, 4
    np.testing.assert_array_equal(scorer.score_frame(mixed), scorer.score_frame(text))


def test_the_pyfunc_model_takes_the_frames_pandas_reads(run, log_csv, tmp_path):
    import mlflow

    mlflow.set_tracking_uri(run.tracking_uri)
    model = mlflow.pyfunc.load_model(run.model_uri)
    expected = Scorer.from_checkpoint(run.best_checkpoint).score_frame(read_text(log_csv))
    inferred = read_inferred(log_csv)
    inferred.to_parquet(tmp_path / "clicks.parquet", index=False)
    for frame in (inferred, pd.read_parquet(tmp_path / "clicks.parquet"), read_text(log_csv)):
        np.testing.assert_array_equal(np.asarray(model.predict(frame)).ravel(), expected)


def test_the_pyfunc_model_refuses_a_column_named_twice_instead_of_scoring_its_name(run, log_csv):
    """A helper's hunt: MLflow's schema check reads a column named twice (``df[name]``, a frame) by its names, so a
    request of two rows naming 'site' twice was scored with 'site' as each row's site (OOV), without a word."""
    import mlflow

    mlflow.set_tracking_uri(run.tracking_uri)
    model = mlflow.pyfunc.load_model(run.model_uri)
    rows = read_text(log_csv).head(2)
    twice = pd.concat([rows, rows[["site"]]], axis=1)
    assert list(twice.columns).count("site") == 2
    with pytest.raises(Exception, match=r"the rows name column 'site' twice .* name each column once"):
        model.predict(twice)
    np.testing.assert_array_equal(np.asarray(model.predict(rows)).ravel(),
                                  Scorer.from_checkpoint(run.best_checkpoint).score_frame(rows))


def test_the_model_is_logged_as_code_not_pickled(run):
    import mlflow
    import yaml

    mlflow.set_tracking_uri(run.tracking_uri)
    folder = Path(mlflow.artifacts.download_artifacts(artifact_uri=run.model_uri))
    flavor = yaml.safe_load((folder / "MLmodel").read_text())["flavors"]["python_function"]
    assert flavor.get("model_code_path") and not list(folder.rglob("*.pkl"))
    # The served checkpoint holds the weights, not the optimizer's moments (twice the weights, loaded whole by every
    # predict and serve: a helper's hunt), and scores as the run's own best.ckpt does
    (served,) = folder.rglob("*.ckpt")
    ckpt = torch.load(served, map_location="cpu", weights_only=True)
    assert set(ckpt) == {"autoint", "state_dict", "epoch", "global_step"}
    own = torch.load(run.best_checkpoint, map_location="cpu", weights_only=True)
    assert "optimizer_states" in own and own["state_dict"].keys() == ckpt["state_dict"].keys()
    assert all(torch.equal(own["state_dict"][k], v) for k, v in ckpt["state_dict"].items())


# ----------------------------------------------------------------------------- precision
def test_scoring_is_fp32_whatever_the_model_was_trained_in(run, log_csv, tmp_path):
    ckpt = torch.load(run.best_checkpoint, map_location="cpu", weights_only=True)
    assert ckpt[CHECKPOINT_KEY][PRECISION_KEY] == "32-true"  # what Lightning trained in (the fixture pins it)
    ckpt[CHECKPOINT_KEY]["config"]["train"]["precision"] = "bf16-mixed"
    torch.save(ckpt, tmp_path / "bf16.ckpt")
    rows = read_text(log_csv)
    fp32 = Scorer.from_checkpoint(run.best_checkpoint).score_frame(rows)
    np.testing.assert_array_equal(Scorer.from_checkpoint(tmp_path / "bf16.ckpt").score_frame(rows), fp32)
    bf16 = Scorer.from_checkpoint(run.best_checkpoint, precision="bf16")
    assert bf16.trained_precision == "32-true" and not np.array_equal(bf16.score_frame(rows), fp32)
    with pytest.raises(InputError, match=r"precision '16'"):
        Scorer.from_checkpoint(run.best_checkpoint, precision="16")


# ----------------------------------------------------------------------------- autoint predict's output file
def test_a_failed_predict_leaves_no_file_and_an_old_one_untouched(run, log_csv, tmp_path):
    scorer = Scorer.from_checkpoint(run.best_checkpoint)
    rows = read_text(log_csv).head(30)
    rows.loc[25, "price"] = "not a number"  # the third chunk of ten fails, after two were written
    rows.to_csv(tmp_path / "bad.csv", index=False)
    out = tmp_path / "out"
    out.mkdir()
    for name in ("scores.csv", "scores.parquet"):
        with pytest.raises(InputError, match=r"bad\.csv, row 26: column .price.: expected a number"):
            scorer.score_file(tmp_path / "bad.csv", out / name, chunk_rows=10)
    assert list(out.iterdir()) == []

    (out / "scores.csv").write_text("probability\n0.5\n")
    rows.drop(columns="site").to_csv(tmp_path / "short.csv", index=False)
    with pytest.raises(InputError, match="'site'"):
        scorer.score_file(tmp_path / "short.csv", out / "scores.csv")
    assert [p.name for p in out.iterdir()] == ["scores.csv"]
    assert (out / "scores.csv").read_text() == "probability\n0.5\n"

    assert scorer.score_file(log_csv, out / "scores.csv", chunk_rows=100) == 400
    assert [p.name for p in out.iterdir()] == ["scores.csv"] and len(pd.read_csv(out / "scores.csv")) == 400


def test_two_threads_scoring_into_one_output_leave_one_whole_file(run, log_csv, tmp_path):
    """Both threads wrote one '.NAME.PID.partial' file: one raised a bare FileNotFoundError and the output could
    mix their rows (a helper's hunt). Each call has its own partial file; the last to finish wins, whole."""
    import threading

    scorer = Scorer.from_checkpoint(run.best_checkpoint)
    short = tmp_path / "short.csv"
    read_text(log_csv).head(150).to_csv(short, index=False)
    errors = []

    def score(source: Path) -> None:
        try:
            for _ in range(3):
                scorer.score_file(source, tmp_path / "same.csv", chunk_rows=50)
        except Exception as e:
            errors.append(e)

    threads = [threading.Thread(target=score, args=(source,)) for source in (log_csv, short)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert len(pd.read_csv(tmp_path / "same.csv")) in (400, 150)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["same.csv", "short.csv"]  # no partial file left


def test_predict_keeps_named_input_columns_beside_the_scores(run, log_csv, tmp_path, capsys):
    """A submission file needs the row id beside its probability (a helper's hunt: predict wrote probability only)."""
    from autoint.cli import main

    rows = read_text(log_csv).head(50)
    rows.insert(0, "id", [f"{i:020d}" for i in range(50)])  # ids with leading zeros stay text
    rows.to_csv(tmp_path / "rows.csv", index=False)
    scorer = Scorer.from_checkpoint(run.best_checkpoint)
    plain = scorer.score_frame(rows)
    for name in ("scores.csv", "scores.parquet"):
        assert main(["predict", str(run.best_checkpoint), "--input", str(tmp_path / "rows.csv"),
                     "--output", str(tmp_path / name), "--keep", "id", "site"]) == 0
        out = (pd.read_parquet(tmp_path / name) if name.endswith("parquet")
               else pd.read_csv(tmp_path / name, dtype={"id": str, "site": str}))
        assert list(out.columns) == ["id", "site", "probability"]
        def texts(column):  # missing as one value: pandas 2 reads a Parquet null as None, a CSV's as NaN
            return [None if pd.isna(v) else v for v in column]

        assert texts(out["id"]) == texts(rows["id"]) and texts(out["site"]) == texts(rows["site"])
        np.testing.assert_allclose(out["probability"], plain, atol=1e-6)
    capsys.readouterr()
    assert main(["predict", str(run.best_checkpoint), "--input", str(tmp_path / "rows.csv"),
                 "--output", str(tmp_path / "x.csv"), "--keep", "row_id"]) == 2
    assert "--keep: " in capsys.readouterr().err and not (tmp_path / "x.csv").exists()


def test_the_scorer_api_checks_its_arguments_and_takes_a_run_folder(run, log_csv, tmp_path):
    """A helper's hunt from Python: batch_size=-1 returned uninitialised memory as scores; score_file onto its own
    input replaced the rows with scores; a run folder was "checkpoint not found"; keep="id" was read letter by
    letter; chunk_rows=0 failed inside pandas."""
    rows = read_text(log_csv).head(20)
    expected = Scorer.from_checkpoint(run.best_checkpoint).score_frame(rows)
    np.testing.assert_array_equal(Scorer.from_checkpoint(run.run_dir).score_frame(rows), expected)
    for bad in (-1, 0, 2.5, True):
        with pytest.raises(InputError, match=rf"batch_size must be a positive integer.*got {bad!r}"):
            Scorer.from_checkpoint(run.best_checkpoint, batch_size=bad)
    scorer = Scorer.from_checkpoint(run.best_checkpoint)
    rows.to_csv(tmp_path / "rows.csv", index=False)
    before = (tmp_path / "rows.csv").read_bytes()
    with pytest.raises(InputError, match="is the input file"):
        scorer.score_file(tmp_path / "rows.csv", tmp_path / "rows.csv")
    assert (tmp_path / "rows.csv").read_bytes() == before
    with pytest.raises(InputError, match="chunk_rows must be a positive integer, got 0"):
        scorer.score_file(tmp_path / "rows.csv", tmp_path / "s.csv", chunk_rows=0)
    assert scorer.score_file(tmp_path / "rows.csv", tmp_path / "s.csv", keep="site") == 20
    assert list(pd.read_csv(tmp_path / "s.csv").columns) == ["site", "probability"]
    from autoint.checkpoint import read_checkpoint
    with pytest.raises(InputError, match="is a folder, not a checkpoint"):
        read_checkpoint(run.run_dir)


def test_a_file_of_a_header_and_no_rows_scores_as_none(run, log_csv, tmp_path, caplog):
    """It was refused ("no rows to score", exit 2) where a served empty frame gives no scores (a helper's hunt): a
    day with no traffic in a scoring job is an empty output, with a warning."""
    scorer = Scorer.from_checkpoint(run.best_checkpoint)
    read_text(log_csv).head(0).to_csv(tmp_path / "none.csv", index=False)
    for name in ("scores.csv", "scores.parquet"):
        assert scorer.score_file(tmp_path / "none.csv", tmp_path / name) == 0
        read = pd.read_parquet if name.endswith("parquet") else pd.read_csv
        assert list(read(tmp_path / name).columns) == ["probability"] and len(read(tmp_path / name)) == 0
    assert "none.csv: no rows to score" in caplog.text
    # Its columns are checked as any file's: a header of the wrong layout "scored 0 rows" (a helper's hunt)
    pd.DataFrame({"foo": [], "bar": []}).to_csv(tmp_path / "wrong.csv", index=False)
    pd.DataFrame({"foo": pd.Series([], dtype=object)}).to_parquet(tmp_path / "wrong.parquet")
    (tmp_path / "lone.csv").write_text("foo,bar")  # a header without its newline
    for name in ("wrong.csv", "wrong.parquet", "lone.csv"):
        with pytest.raises(InputError, match=rf"{name}: the rows lack column "):
            scorer.score_file(tmp_path / name, tmp_path / "scores.csv")
    header = ",".join(read_text(log_csv).columns)
    (tmp_path / "lone.csv").write_text("\ufeff" + header, encoding="utf-8")  # a byte-order mark, as Arrow drops it
    assert scorer.score_file(tmp_path / "lone.csv", tmp_path / "scores.csv") == 0
    for text in ("\ufeff", " "):
        (tmp_path / "lone.csv").write_text(text, encoding="utf-8")
        with pytest.raises(InputError, match=r"input file is empty \(no header and no rows\)"):
            scorer.score_file(tmp_path / "lone.csv", tmp_path / "scores.csv")
    with pytest.raises(InputError, match=r"--keep: .*none\.csv has no column 'nosuch'"):
        scorer.score_file(tmp_path / "none.csv", tmp_path / "scores.csv", keep="nosuch")
    with pytest.raises(InputError, match=r"the rows lack column"):
        scorer.score_frame(pd.DataFrame({"foo": []}))
    with pytest.raises(InputError, match=r"expected a pandas DataFrame of raw rows, got NoneType"):
        scorer.score_frame(None)
    assert len(scorer.score_frame(read_text(log_csv).head(0))) == 0


# ----------------------------------------------------------------------------- autoint serve
def test_autoint_serve_answers_json_rows_with_ints_strings_and_nulls(run, log_csv):
    port = free_port()
    venv_bin = str(Path(sys.executable).parent)
    # As from a fresh install, the environment not activated: its bin folder is not on PATH.
    path = os.pathsep.join(p for p in os.environ.get("PATH", "").split(os.pathsep) if p != venv_bin)
    server = subprocess.Popen([str(Path(venv_bin) / "autoint"), "serve", run.run_dir, "--port", str(port)],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              env={**os.environ, "PATH": path}, start_new_session=True)
    try:
        wait_http(f"http://127.0.0.1:{port}/ping", 120, server)
        rows = read_inferred(log_csv).head(8)
        records = json.loads(rows.to_json(orient="records"))  # ints, floats, strings and nulls
        records[1]["hour"] = None
        body = json.dumps({"dataframe_records": records}).encode()
        request = urllib.request.Request(f"http://127.0.0.1:{port}/invocations", data=body,
                                         headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=60) as response:
            answer = np.asarray(json.loads(response.read())["predictions"], dtype=np.float32).ravel()
        # A bad value is a 400 that says which row and column (MLflow replaced other errors with a generic one).
        records[2]["price"] = "abc"
        request = urllib.request.Request(f"http://127.0.0.1:{port}/invocations", headers={"Content-Type":
                                         "application/json"}, data=json.dumps({"dataframe_records": records}).encode())
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(request, timeout=60)
        assert refused.value.code == 400
        assert "row 3: column 'price': expected a number, got 'abc'" in json.loads(refused.value.read())["message"]
        server.send_signal(signal.SIGTERM)  # to `autoint serve` alone: it stops the server it started
        assert server.wait(timeout=30) == 0
        with pytest.raises(OSError):
            urllib.request.urlopen(f"http://127.0.0.1:{port}/ping", timeout=2)
        # SIGINT to `autoint serve` alone (kill -INT, a supervisor) was ignored, and a second one left MLflow's
        # server answering with the model's folder deleted (a helper's hunt): it stops the server too. And
        # --port 0 was passed on to uvicorn, which took it for its default, 8000: now a free port, printed.
        for signum in (signal.SIGINT, signal.SIGKILL):
            server = subprocess.Popen([str(Path(venv_bin) / "autoint"), "serve", run.run_dir, "--port", "0"],
                                      stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                      env={**os.environ, "PATH": path}, start_new_session=True)
            lines = [server.stdout.readline()]
            while not re.search(r"on http://127\.0\.0\.1:\d+ ", lines[-1]) and lines[-1] and len(lines) < 100:
                lines.append(server.stdout.readline())  # the model's load may warn first
            port = int(re.search(r"on http://127\.0\.0\.1:(\d+) ", lines[-1]).group(1))
            assert port not in (0, 8000), lines
            wait_http(f"http://127.0.0.1:{port}/ping", 120, server)
            server.send_signal(signum)  # SIGKILL: no handler runs, yet the server goes with it (it stayed)
            assert server.wait(timeout=60) == (0 if signum == signal.SIGINT else -signal.SIGKILL)
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                try:
                    urllib.request.urlopen(f"http://127.0.0.1:{port}/ping", timeout=2)
                except OSError:
                    break
                time.sleep(0.5)
            else:
                raise AssertionError(f"the server on port {port} still answers after {signum!r}")
    finally:
        stop(server)
    expected = read_text(log_csv).head(8)
    expected.loc[1, "hour"] = None
    np.testing.assert_allclose(answer, Scorer.from_checkpoint(run.best_checkpoint).score_frame(expected), rtol=1e-6)


def test_the_logged_requirements_resolve_on_pypi_and_keep_the_cpu_build(monkeypatch):
    """torch==2.13.0+cpu was pinned as installed: a local version no index pip reads by default holds, so an
    environment rebuilt for the model would not resolve (a helper's hunt)."""
    import importlib.metadata

    from autoint import serving

    real = importlib.metadata.version
    monkeypatch.setattr(importlib.metadata, "version", lambda pkg: "2.13.0+cpu" if pkg == "torch" else real(pkg))
    reqs = serving._requirements()
    assert reqs[0] == f"--extra-index-url {serving.TORCH_CPU_INDEX}" and "torch==2.13.0" in reqs
    assert not any("+" in r for r in reqs[1:])
    monkeypatch.setattr(importlib.metadata, "version", lambda pkg: "2.13.0" if pkg == "torch" else real(pkg))
    assert not serving._requirements()[0].startswith("--")  # a plain build: no index named


def test_a_tracking_server_lost_while_logging_is_one_line(tmp_path, monkeypatch):
    """A server killed mid-training ended in ~250 lines of chained tracebacks (a helper's hunt)."""
    from unittest import mock

    monkeypatch.chdir(tmp_path)  # the store below is made where the tests run (an x.db was once committed)

    from mlflow.exceptions import MlflowException

    from autoint import tracking

    lost = MlflowException("API request to http://127.0.0.1:9/api/2.0/mlflow/runs/log-metric failed with exception "
                           "HTTPConnectionPool(host='127.0.0.1', port=9): Max retries exceeded")
    with mock.patch.object(tracking.MlflowClient, "log_metric", side_effect=lost):
        with pytest.raises(tracking.TrackingError, match=r"MLflow tracking server http://127\.0\.0\.1:9 stopped "
                                                         r"answering while run r1 was logged .*continue the run with "
                                                         r"--resume"):
            tracking.log_metrics("http://127.0.0.1:9", "r1", {"val_auc": 0.5}, step=0)
        with pytest.raises(MlflowException):  # another store's error is not called a lost server
            tracking.log_metrics("sqlite:///x.db", "r1", {"val_auc": 0.5}, step=0)


def test_a_model_uri_against_a_store_that_does_not_exist_leaves_no_empty_store(tmp_path, capsys, monkeypatch):
    """predict models:/tiny@champion without --tracking-uri made an empty mlflow.db here, then failed (a helper's
    hunt): a mistyped store left stray stores behind."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    uri = f"sqlite:///{tmp_path / 'nothing.db'}"
    assert main(["predict", "models:/tiny@champion", "--input", "x.csv", "--output", "y.csv",
                 "--tracking-uri", uri]) == 2
    assert f"MLflow store {uri} does not exist" in capsys.readouterr().err
    assert not (tmp_path / "nothing.db").exists()


def test_autoint_serve_refuses_a_bad_model_in_one_line(tmp_path, capsys):
    assert main(["serve", str(tmp_path / "nothing-here"), "--port", "0"]) == 2  # any free port: the model is judged
    err = capsys.readouterr().err.strip()
    assert "nothing-here" in err and len(err.splitlines()) == 1


def test_a_column_named_with_a_space_or_another_case_is_pointed_out(run, log_csv):
    """'user_id, movie_id' (a space after each comma) got 'the rows lack column movie_id' and no more (a helper's
    hunt); the separator mix-ups already got a hint."""
    from autoint.datasets.errors import DataError

    rows = read_text(log_csv).head(3).rename(columns={"site": " site"})
    with pytest.raises(DataError, match=r"the rows name ' site', which differs from 'site' only in spaces or letter "
                                        r"case"):
        Scorer.from_checkpoint(run.best_checkpoint).score_frame(rows)


def test_a_list_column_read_as_numbers_is_a_column_of_one_value_lists():
    from autoint.datasets.base import as_lists

    got = as_lists(pd.Series([5, 7]), "|").tolist() + as_lists(pd.Series([5.0, np.nan, 3.5]), "|").tolist()
    assert got == [["5"], ["7"], ["5"], [], ["3.5"]]  # as pd.read_csv gives a list column of single ids
    assert as_lists(pd.Series(["4|x", None, ["x", 4.0]], dtype=object), "|").tolist() == [["4", "x"], [], ["x", "4"]]


@pytest.mark.parametrize("values", [[decimal.Decimal("3"), decimal.Decimal("0.5")],
                                    [datetime.date(2020, 1, 2), datetime.date(2021, 3, 4)],
                                    [pd.Timestamp("2020-01-02 05:00"), pd.Timestamp("2020-01-02 05:00", tz="UTC")],
                                    [np.True_, np.False_]])
def test_a_lone_decimal_date_time_or_bool_in_a_list_column_is_a_one_value_list(values):
    """A helper's hunt: a multi-valued field held in a Parquet column of single decimals, dates or times (or a
    frame's numpy bools) crashed predict and prepare with "TypeError: 'decimal.Decimal' object is not iterable".
    Such a value is a one-value list, printed as the same value is printed in a categorical field."""
    from autoint.datasets.base import as_category, as_lists

    column = pd.Series(values, dtype=object)
    assert as_lists(column, "|", "tags").tolist() == [[text] for text in as_category(column, "tags")]


def test_the_served_model_takes_the_time_column_or_its_derived_fields(tmp_path):
    """configs/README: rows to score may carry the time column instead of the fields derived from it. The Scorer
    and predict took such rows, but the MLflow model's signature required the derived fields ("Model is missing
    inputs ['ts_hour']"); now neither is required and both kinds of rows score alike."""
    import mlflow

    from autoint.config import load_config
    from autoint.serving import model_options
    from autoint.train import ensure_processed, train

    rng = np.random.default_rng(0)
    n = 300
    ts = pd.Timestamp("2024-01-01") + pd.to_timedelta(rng.integers(0, 7 * 86400, n), unit="s")
    frame = pd.DataFrame({"y": rng.integers(0, 2, n), "site": rng.choice(["a", "b", "c"], n),
                          "ts": ts.strftime("%Y-%m-%d %H:%M:%S")})
    frame.to_csv(tmp_path / "log.csv", index=False)
    cfg = load_config(None, ["data.format=table", f"data.raw={tmp_path / 'log.csv'}",
                             "data.columns={label: y, categorical: [site], time: {column: ts, derive: [hour]}}",
                             "model.num_layers=1", "model.embedding_dim=4", "model.head_dim=2", "train.max_epochs=1",
                             "train.batch_size=64", "train.precision=32-true"])
    data = ensure_processed(cfg, tmp_path / "processed", None, progress=False)
    result = train(cfg, data, tmp_path / "run", tracking_uri=f"sqlite:///{tmp_path / 'mlflow.db'}", progress=False)
    mlflow.pyfunc.save_model(tmp_path / "model", **model_options(result.best_checkpoint))
    model = mlflow.pyfunc.load_model(str(tmp_path / "model"))
    rows = frame.drop(columns="y").head(5)
    with_hour = rows.assign(ts_hour=pd.to_datetime(rows["ts"]).dt.hour.astype(str)).drop(columns="ts")
    np.testing.assert_array_equal(np.asarray(model.predict(rows)), np.asarray(model.predict(with_hour)))

    # A helper's hunt: an hour in another form (25, "10 am") scored as an unseen value without a word; an MLflow
    # model folder (saved, or downloaded from a run) was refused as MODEL ("no checkpoints/best.ckpt in this run
    # folder"), and its file:// URI needed some tracking store; a processed folder was called a run folder.
    from autoint.checkpoint import CheckpointError
    from autoint.datasets.errors import RowError
    from autoint.predict import Scorer

    scorer = Scorer.from_checkpoint(tmp_path / "model")
    np.testing.assert_array_equal(scorer.score_frame(rows), np.asarray(model.predict(rows)))
    np.testing.assert_array_equal(Scorer.from_checkpoint((tmp_path / "model").as_uri()).score_frame(rows),
                                  scorer.score_frame(rows))
    for bad in ("25", "10 am"):
        with pytest.raises(RowError, match=rf"row 2: column 'ts_hour': expected an hour of day, 0 to 23 .*got "
                                           rf"'{bad}'"):
            scorer.score_frame(with_hour.assign(ts_hour=["1", bad, "2", "3", "4"]))
    with pytest.raises(CheckpointError, match="is a processed data folder, not a model"):
        Scorer.from_checkpoint(data)


def test_serve_refuses_a_busy_or_impossible_port_before_loading_the_model(tmp_path, caplog):
    """The server's own refusal came after the model had loaded, as a page of MLflow and uvicorn tracebacks
    (exit 1); now one line naming the port or host, before anything is loaded (the model named here does not
    exist: the address is judged first)."""
    import socket

    from autoint.checkpoint import CheckpointError
    from autoint.errors import InputError
    from autoint.serving import serve

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        with pytest.raises(InputError, match=rf"port {port}: already in use on 127\.0\.0\.1"):
            serve(tmp_path / "no.ckpt", port=port)
    with pytest.raises(InputError, match=r"port 99999: must be a number from 0 to 65535"):
        serve(tmp_path / "no.ckpt", port=99999)
    with pytest.raises(InputError, match=r"host 'no-such-host\.invalid': not an address of this machine"):
        serve(tmp_path / "no.ckpt", host="no-such-host.invalid")
    # Every address of the machine: said, since MLflow's server has no authentication (a security review); the
    # model is then judged (and here refused) as ever. Loopback is not warned of.
    for host, warned in (("0.0.0.0", True), ("127.0.0.1", False)):
        caplog.clear()
        with pytest.raises(CheckpointError):
            serve(tmp_path / "no.ckpt", host=host, port=0)
        assert ("reachable from other machines" in caplog.text) is warned


def test_evaluate_and_inspect_take_an_mlflow_uri_with_its_store_from_python(run, monkeypatch):
    """Scorer.from_checkpoint and train took tracking_uri=; evaluate and inspect_model took an MLflow URI but no
    store, so from Python they worked only where MLFLOW_TRACKING_URI happened to name it."""
    from autoint.inspection import inspect_model
    from autoint.train import evaluate

    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.chdir(Path(run.run_dir).parent.parent)  # no ./mlflow.db here to fall back on
    by_uri = evaluate(run.model_uri, run.data_dir, progress=False, tracking_uri=run.tracking_uri)
    assert by_uri == evaluate(run.best_checkpoint, run.data_dir, progress=False)
    result = inspect_model(run.model_uri, run.data_dir, rows=20, permutations=0, tracking_uri=run.tracking_uri)
    assert result.rows == 20


def test_the_unseen_values_warning_needs_many_values_of_most_fields(caplog):
    """A few cold-start rows (a new user and a new item) are no alarm; a file of rows whose values training never
    saw, in most fields, is (the review of the warning: one row of two new ids warned)."""
    import torch

    from autoint.predict import UnseenValues
    from autoint.schema import CATEGORICAL, OOV, FieldSpec, Schema

    schema = Schema(tuple(FieldSpec(n, CATEGORICAL) for n in ("user", "item", "hour", "device")))
    few = UnseenValues(schema)
    few.add({"categorical": torch.full((5, 4), OOV)})
    few.warn("few.csv")
    pairs = UnseenValues(Schema(tuple(FieldSpec(n, CATEGORICAL) for n in ("user", "item"))))
    pairs.add({"categorical": torch.full((500, 2), OOV)})
    pairs.warn("pairs.csv")
    assert "training never saw" not in caplog.text
    many = UnseenValues(schema)
    ids = torch.full((500, 4), OOV)
    ids[:, 2:] = 5  # hour and device seen
    ids[:10, 0] = 7  # a few users seen
    many.add({"categorical": ids})
    many.warn("many.csv")
    assert "training never saw" not in caplog.text  # two fields of four: not most
    ids[:, 2] = OOV
    most = UnseenValues(schema)
    most.add({"categorical": ids})
    most.warn("most.csv")
    assert "most.csv: 3 of 4 categorical fields hold mostly values training never saw (item 100%, hour 100%, " \
           "user 98%)" in caplog.text


def test_a_mapping_or_nested_lists_in_a_multi_valued_field_are_refused_by_row_and_column():
    """A helper's hunt: a JSON object in a multi-valued field was read as the list of its keys, and a nested list
    as one value printed '["a"]'; both scored without a word. A list, a tuple and a joined string still score."""
    from autoint.datasets.base import as_lists
    from autoint.datasets.errors import RowError

    assert list(as_lists(pd.Series([["a", "b"], ("c",), "d|e", None], dtype=object), "|", "genres")) == \
        [["a", "b"], ["c"], ["d", "e"], []]
    for bad in ({"Comedy": 0}, [["Comedy"]], {"Comedy"}):
        with pytest.raises(RowError, match=r"row 2: column 'genres': expected a list of values or a '\|'-joined "
                                           r"string, got"):
            as_lists(pd.Series([["a"], bad], dtype=object), "|", "genres")


def test_an_id_past_2_53_held_as_a_float_is_refused_not_scored_as_another_id(run, log_csv, tmp_path):
    """A helper's hunt: a served request whose integer id column held one null arrived as floats (MLflow's JSON
    parsing, as pandas does), and every id past 2**53 in the other rows was scored as a neighbouring id: one
    row's answer depended on the others. Such a value is now refused, naming its row and column; the same ids as
    integers (or text) score as before."""
    from autoint.datasets.errors import DataError

    scorer = Scorer.from_checkpoint(run.best_checkpoint)
    rows = read_text(log_csv).head(3).reset_index(drop=True)
    big = 2**53 + 1
    for many in (1, 40):  # the few-rows path of a request and the vectorised one
        ints = pd.concat([rows] * many, ignore_index=True).assign(site=[big, 5, big + 2] * many)
        assert np.isfinite(scorer.score_frame(ints)).all()  # int64 ids: exact, scored
        floats = ints.astype({"site": np.float64})
        floats.loc[1, "site"] = np.nan
        with pytest.raises(DataError, match=r"row 1: column 'site': expected an id held exactly: a whole number "
                                            r"past 2\*\*53 held as a float .* send ids as strings"):
            scorer.score_frame(floats)
        mixed = ints.astype({"site": object})
        mixed.loc[2, "site"] = float(big)
        with pytest.raises(DataError, match=r"row 3: column 'site': expected an id held exactly"):
            scorer.score_frame(mixed)
        # a file's float column is read as prepare reads the same file (its own types): scored, not refused
        floats.to_parquet(tmp_path / "floats.parquet")
        assert scorer.score_file(tmp_path / "floats.parquet", tmp_path / "floats.csv") == len(floats)
        below = floats.assign(site=[2.0**53 - 1, np.nan, 7.0] * many)  # exact floats print as their ids
        np.testing.assert_array_equal(scorer.score_frame(below), scorer.score_frame(
            below.assign(site=pd.array([2**53 - 1, None, 7] * many, dtype="Int64"))))


def test_scoring_reads_huge_numbers_as_missing_and_keeps_columns_as_written(run, log_csv, tmp_path):
    """A helper's hunt: an int beyond float range raised OverflowError (the same digits in a file are missing);
    epoch nanoseconds past 2**53 in a time column raised Arrow's 'not in range'; --keep wrote an id column with
    holes as 1.0, float32 as 0.10000000149011612 and lists as numpy's repr; --output out/../rows.csv replaced the
    input with the scores where out/ did not exist yet, and a failed predict left the folders it made."""
    import pyarrow as pa

    from autoint.datasets.errors import DataError
    from autoint.datasets.times import parse_times

    scorer = Scorer.from_checkpoint(run.best_checkpoint)
    rows = read_text(log_csv).head(3).reset_index(drop=True)
    for many in (False, True):  # the few-rows path of a request and the vectorised one
        frame = pd.concat([rows] * (40 if many else 1), ignore_index=True)
        flags = frame.assign(price=[True, False, True] * (40 if many else 1))  # 1 and 0, as a Parquet log's
        np.testing.assert_array_equal(scorer.score_frame(flags), scorer.score_frame(flags.assign(
            price=[1.0, 0.0, 1.0] * (40 if many else 1))))
        huge = frame.assign(price=frame["price"].astype(object))
        huge.loc[1, "price"] = 10**400
        missing = frame.assign(price=frame["price"].astype(object))
        missing.loc[1, "price"] = None
        np.testing.assert_array_equal(scorer.score_frame(huge), scorer.score_frame(missing))
    seconds, bad = parse_times(pa.array([10**18, None], pa.int64()), unit="ns")
    assert seconds[0] == pytest.approx(1e9) and np.isnan(seconds[1]) and not bad.any()
    seconds, bad = parse_times(np.array([10**400, 2**63 + 5, 5], dtype=object))  # past int64: no OverflowError
    assert not np.isfinite(seconds[0]) and seconds[1] == pytest.approx(2.0**63) and seconds[2] == 5 and not bad.any()

    keep = rows.assign(rid=[1.0, None, 3.0], f32=np.array([0.1, 0.2, 0.3], dtype=np.float32),
                       glist=[["a", "b"], [], ["c"]])
    keep.to_parquet(tmp_path / "rows.parquet")
    scorer.score_file(tmp_path / "rows.parquet", tmp_path / "kept.csv", keep=["rid", "f32", "glist"])
    text = (tmp_path / "kept.csv").read_text().splitlines()
    assert [line.rsplit(",", 1)[0] for line in text] == ["rid,f32,glist", "1,0.1,a|b", ",0.2,", "3,0.3,c"]

    rows.to_csv(tmp_path / "rows.csv", index=False)
    before = (tmp_path / "rows.csv").read_bytes()
    with pytest.raises(InputError, match="is the input file"):
        scorer.score_file(tmp_path / "rows.csv", tmp_path / "out" / ".." / "rows.csv")
    assert (tmp_path / "rows.csv").read_bytes() == before and not (tmp_path / "out").exists()
    rows.assign(price=["abc", "1", "2"]).to_csv(tmp_path / "bad.csv", index=False)
    with pytest.raises(DataError, match="row 1: column 'price': expected a number, got 'abc'"):
        scorer.score_file(tmp_path / "bad.csv", tmp_path / "new" / "deep" / "o.csv")
    assert not (tmp_path / "new").exists()


def test_a_scorer_and_its_encoder_say_what_they_are(run):
    """In a notebook a Scorer, its Encoder and their vocabularies printed as <... object at 0x...>."""
    from autoint.encoder import Vocabulary

    scorer = Scorer.from_checkpoint(run.best_checkpoint)
    fields = len(scorer.schema)
    assert repr(scorer) == (f"Scorer(AutoInt over {fields} fields, 1 interacting layer of 2 heads x 4; scores in "
                            f"fp32, trained in 32-true; {scorer.batch_size} rows a pass on cpu)")
    assert "scores in bf16" in repr(Scorer.from_checkpoint(run.best_checkpoint, precision="bf16"))
    encoder = scorer.encoder
    values = sum(v.vocab_size_ - 3 for v in encoder.vocabularies_.values())
    assert re.fullmatch(rf"Encoder\('table': \d+ categorical(, \d+ numeric)?(, \d+ multi)?; {values:,} vocabulary "
                        rf"values \(min_count {encoder.min_count}\)\)", repr(encoder)), repr(encoder)
    vocabulary = next(iter(encoder.vocabularies_.values()))
    assert repr(vocabulary) == (f"Vocabulary({vocabulary.vocab_size_ - 3:,} values of {vocabulary.n_distinct_:,} seen, "
                                f"min_count={vocabulary.min_count})")
    assert repr(Vocabulary(5)) == "Vocabulary(min_count=5, not fitted)"
    from autoint.encoder import Encoder

    assert repr(Encoder([], {}, {})) == "Encoder('unknown format': no fields; not fitted)"
    scorer.model = torch.nn.Sequential()  # a model swapped in: no interacting layers, no parameters
    assert repr(scorer).startswith("Scorer(Sequential over ") and repr(scorer).endswith(" rows a pass)")
