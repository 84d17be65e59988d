"""The MLflow stores users give: what is refused before training, and what a store lost during a run says
(a helper's hunt of tracking setups)."""

from __future__ import annotations

import http.server
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import pytest

from autoint import tracking
from autoint.tracking import ServerLost, TrackingError


@pytest.fixture()
def login_server() -> Iterator[str]:
    """A server that answers /health and refuses every API call as unauthenticated, as MLflow's basic-auth app
    does (its /health is left open)."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def _answer(self) -> None:
            code = 200 if self.path.rstrip("/") == "/health" else 401
            body = b"OK" if code == 200 else b"You are not authenticated. Please see the documentation."
            self.send_response(code)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        do_GET = do_POST = _answer

        def log_message(self, *args: object) -> None:
            pass

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()


def test_a_server_that_needs_a_login_is_one_line_before_training(login_server, monkeypatch):
    """/health answered 200, so the check passed, and the first API call was a 401 traceback."""
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    with pytest.raises(TrackingError, match=r"refused a request \(.*401.*\); set MLFLOW_TRACKING_USERNAME and "
                                            r"MLFLOW_TRACKING_PASSWORD"):
        tracking.check_tracking_uri(login_server)


def test_a_store_in_memory_is_refused_and_relative_file_stores_are_made_absolute(tmp_path, monkeypatch):
    """sqlite:///:memory: 'logged' a run that vanished with the process; a file store given by a relative path
    was recorded relative in run.json, so a --resume from another folder made an empty store there."""
    with pytest.raises(TrackingError, match=r"a database in memory ends with the command"):
        tracking.check_tracking_uri("sqlite:///:memory:")
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    assert tracking.resolve_tracking_uri("./fs1") == str(tmp_path / "fs1")
    assert tracking.resolve_tracking_uri("fs1") == str(tmp_path / "fs1")
    assert tracking.resolve_tracking_uri("file:./fs2") == (tmp_path / "fs2").as_uri()
    for kept in ("file:///abs/fs", "/abs/fs", "http://127.0.0.1:5000", "databricks", "postgresql://u@h/db"):
        assert tracking.resolve_tracking_uri(kept) == kept


def test_a_deleted_experiment_is_one_line_naming_how_to_restore_it(tmp_path):
    """MLflow refused a run in it with a traceback ('must be in the active state')."""
    from mlflow.tracking import MlflowClient

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    tracking.start_run(uri, "delme")
    client = MlflowClient(uri)
    experiment = client.get_experiment_by_name("delme").experiment_id
    client.delete_experiment(experiment)
    with pytest.raises(TrackingError, match=rf"experiment 'delme' .* was deleted; restore it \(.*mlflow experiments "
                                            rf"restore --experiment-id {experiment}\) or choose another name"):
        tracking.start_run(uri, "delme")


def test_a_model_name_with_a_quote_is_refused_before_training():
    """It broke MLflow's search of the model's versions after the whole training, leaving an empty model; '?' broke
    models:/NAME/1, and names MLflow refuses ('.', '..x') were refused only after training (a helper's hunt)."""
    with pytest.raises(TrackingError, match=r"register: \"bob's model\" is no registered model's name"):
        tracking.check_model_name("bob's model")
    for name in ("ctr?v2", "ctr@v2", " ", "a/b", "a:b", ".", "..ctr", "tab\tname", "line\nfeed"):
        with pytest.raises(TrackingError, match=r"is no registered model's name \(text, not empty, without '/'"):
            tracking.check_model_name(name)
    for name in ("ctr(v2)", "CTR, eu", "ctr+v2", "a#b", "modèle_1", "v1.2"):  # MLflow takes them, tune took them
        tracking.check_model_name(name)


def test_a_server_lost_while_the_run_is_logged_is_one_line(monkeypatch):
    """Artifacts, tags, the model and the run's record: MLflow's chained tracebacks and status 1 (only per-epoch
    metrics said it in one line)."""
    from mlflow.exceptions import MlflowException
    from mlflow.tracking import MlflowClient

    def gone(*args, **kwargs):
        raise MlflowException("API request to http://127.0.0.1:1/api/2.0/mlflow/runs/get failed with exception "
                              "ConnectionError")

    for method in ("log_artifact", "set_tag", "get_run", "log_metric"):
        monkeypatch.setattr(MlflowClient, method, gone)
    uri = "http://127.0.0.1:1"
    for call in (lambda: tracking.log_artifacts(uri, "r1", [Path(__file__)]),
                 lambda: tracking.set_tags(uri, "r1", {"a": 1}),
                 lambda: tracking.run_info(uri, "r1"),
                 lambda: tracking.log_metrics(uri, "r1", {"val_auc": 0.5}, step=0)):
        with pytest.raises(ServerLost, match=r"stopped answering while run r1 was logged .* continue the run with "
                                             "--resume"):
            call()


def test_a_run_whose_server_is_lost_is_not_ended_through_it_again(tmp_path, monkeypatch):
    """Ending the run went through MLflow's retries a second time: minutes more of silence after the first."""
    import autoint.train as train_module
    from autoint.config import load_config

    ended = []
    monkeypatch.setattr(tracking, "end_run", lambda *a, **k: ended.append(a))

    def lost(*args, **kwargs):
        raise ServerLost("MLflow tracking server http://x stopped answering")

    monkeypatch.setattr(train_module, "_fit_test_log", lost)
    cfg = load_config(None, ["data.format=synthetic", f"data.raw={tmp_path / 'raw'}", "model.num_layers=1",
                             "data.synthetic={n_rows: 2000, n_categorical: 3, n_numeric: 1, n_crosses: 1}",
                             "train.max_epochs=1"])
    data = train_module.ensure_processed(cfg, tmp_path / "data", None, progress=False)
    with pytest.raises(ServerLost):
        train_module.train(cfg, data, tmp_path / "run", tracking_uri=f"sqlite:///{tmp_path / 'm.db'}", progress=False)
    assert ended == []


def test_two_commands_creating_one_store_at_once_both_succeed(tmp_path):
    """The second crashed inside MLflow's schema migration ('table latest_metrics already exists', or alembic's
    'Online migration expected to match one row'), 2 tries in 2."""
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    code = ("import sys; from autoint import tracking; tracking.check_tracking_uri(sys.argv[1]); "
            "tracking.start_run(sys.argv[1], 'autoint')")
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    procs = [subprocess.Popen([sys.executable, "-c", code, uri], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True, env=env) for _ in range(3)]
    results = [(p.wait(timeout=300), p.stderr.read()) for p in procs]
    for p in procs:
        p.stdout.close()
        p.stderr.close()
    assert [rc for rc, _ in results] == [0, 0, 0], [err[-1500:] for _, err in results]


def test_moving_the_champion_to_a_model_of_other_columns_is_said(monkeypatch, caplog):
    """--register moved @champion to a model of another schema without a word; whatever scored @champion with the
    old columns was then refused."""
    import mlflow

    columns = {"models:/m-1": ["a", "b", "c"], "models:/m-2": ["a", "b", "d"], "models:/m-3": ["c", "b", "a"]}

    def info(source):
        names = columns[source]
        return SimpleNamespace(signature=SimpleNamespace(inputs=SimpleNamespace(input_names=lambda: names)))

    monkeypatch.setattr(mlflow.models, "get_model_info", info)
    with caplog.at_level("WARNING", logger="autoint.tracking"):
        tracking._warn_of_other_columns("champ", "champion", SimpleNamespace(version="1", source="models:/m-1"),
                                        SimpleNamespace(version="3", source="models:/m-3"))  # same columns
        assert caplog.text == ""
        tracking._warn_of_other_columns("champ", "champion", SimpleNamespace(version="1", source="models:/m-1"),
                                        SimpleNamespace(version="2", source="models:/m-2"))
    assert ("models:/champ@champion moves from version 1 to version 2, which takes other input columns (no longer "
            "c; new d)") in caplog.text


def test_a_server_lost_while_the_model_is_logged_is_not_asked_to_end_the_run(tmp_path, monkeypatch):
    """`with mlflow.start_run()` ended the run FAILED through the lost server on the way out: minutes of MLflow's
    retries more, and a run that --resume should continue marked FAILED (a reviewer's catch)."""
    import mlflow
    from mlflow.exceptions import MlflowException
    from mlflow.tracking import MlflowClient

    import autoint.serving

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    run_id = tracking.start_run(uri, "autoint")

    def lost(**kwargs):
        raise MlflowException("API request to http://127.0.0.1:1/api/2.0/mlflow/logged-models failed")

    monkeypatch.setattr(autoint.serving, "model_options", lambda checkpoint, example: {})
    monkeypatch.setattr(mlflow.pyfunc, "log_model", lost)
    monkeypatch.setattr(tracking, "server_lost", lambda uri, e: isinstance(e, MlflowException))
    with pytest.raises(ServerLost):
        tracking.log_pyfunc_model(uri, run_id, tmp_path / "best.ckpt", None)
    assert MlflowClient(uri).get_run(run_id).info.status == "RUNNING"
    assert mlflow.active_run() is None


def test_a_password_in_a_tracking_uri_is_shown_as_stars_where_printed_or_logged(tmp_path, caplog):
    """A tracking URI's password went into MLflow's parameters, every TrackingError, and the lines the commands
    print (a security review)."""
    import logging

    import mlflow

    from autoint.config import load_config

    with pytest.raises(tracking.TrackingError) as refused:
        tracking.check_tracking_uri("http://user:s3cret@127.0.0.1:9", timeout=2)
    assert "user:***@127.0.0.1:9" in str(refused.value) and "s3cret" not in str(refused.value)
    uri = f"sqlite:///{tmp_path / 'm.db'}"
    run_id = tracking.start_run(uri, "e")
    tracking.log_params(uri, run_id, {"tracking.tracking_uri": "postgresql://mlflow:s3cret@db/mlflow", "n": 3})
    params = mlflow.MlflowClient(uri).get_run(run_id).data.params
    assert params == {"tracking.tracking_uri": "postgresql://mlflow:***@db/mlflow", "n": "3"}
    with caplog.at_level(logging.WARNING, logger="autoint.config"):
        load_config(None, ["tracking.tracking_uri=http://user:s3cret@mlflow:5000"])
    assert "tracking.tracking_uri holds a password" in caplog.text and "s3cret" not in caplog.text


@pytest.mark.parametrize(("url", "shown"), [
    ("postgresql://user:secret@db/optuna", "postgresql://user:***@db/optuna"),
    ("postgresql://u:pa#ss@h/db", "postgresql://u:***@h/db"),  # unescaped, as SQLAlchemy takes it
    ("postgresql://u:p/w@h/db", "postgresql://u:***@h/db"),
    ("postgresql://u:p@db/x?sslcert=/a@b", "postgresql://u:***@db/x?sslcert=/a@b"),
    # no password: left whole (a review caught an interim version cutting these at their last @)
    ("http://host:5000/p?e=a@b.com", "http://host:5000/p?e=a@b.com"),
    ("http://[::1]:5000/a@b", "http://[::1]:5000/a@b"),
    ("http://u@host:5000/a@b", "http://u@host:5000/a@b"),
    ("sqlite:////tmp/x.db", "sqlite:////tmp/x.db"),
])
def test_a_urls_password_is_hidden_and_a_url_without_one_left_whole(url, shown):
    from autoint.errors import hide_password, hide_passwords

    assert hide_password(url) == shown and hide_passwords(f"see '{url}' now") == f"see '{shown}' now"


def test_fetching_a_model_from_a_file_that_is_no_database_is_one_line(tmp_path):
    """SQLAlchemy's error came whole: its SQL and a link, three lines (a helper's hunt of evaluate)."""
    (tmp_path / "config.yaml").write_text("data: {format: synthetic}\n")
    with pytest.raises(TrackingError) as e:
        tracking.checkpoint_from_uri("runs:/0123abcd/model", f"sqlite:///{tmp_path / 'config.yaml'}")
    assert str(e.value).startswith("cannot fetch runs:/0123abcd/model from sqlite:///") and "\n" not in str(e.value)
