"""MLflow tracking of training runs (with :mod:`autoint.serving`, the only modules that import mlflow).

* :func:`resolve_tracking_uri` — ``--tracking-uri`` > ``MLFLOW_TRACKING_URI`` >
  ``tracking.tracking_uri`` in the config > MLflow's own default (a local SQLite
  file, ``mlflow.db`` in the working folder); a relative SQLite path made absolute.
* :func:`check_tracking_uri` — called before training starts; an unreachable
  server is reported in one line, not after an hour of training.
* :class:`MLflowCallback` — a Lightning callback that logs per-epoch metrics
  from global rank zero into one run, which a resumed run reopens.
* :func:`log_pyfunc_model` — logs the served model
  (:class:`autoint.serving.AutoIntPyfunc`): raw rows in (a DataFrame with the
  original columns), click probabilities out; it carries its checkpoint, so it
  needs nothing else, and serving it imports no Lightning.
* :func:`register_model` — a logged model as a new version of a registered
  model, with the alias ``champion`` pointed at it, so ``models:/NAME@champion``
  names the latest one registered wherever a model is taken.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import lightning as L
import mlflow
import pandas as pd
from mlflow import environment_variables as mlflow_env
from mlflow.tracking import MlflowClient

from .errors import InputError, few, hide_passwords, message_head
from .files import folder_lock, remove_scratch, scratch_folder

log = logging.getLogger(__name__)


class TrackingError(InputError, RuntimeError):
    """The tracking store cannot be used; the message names the URI (any password in it as ``***``)."""

    def __init__(self, message: str, *args: Any) -> None:
        super().__init__(hide_passwords(message), *args)


class ServerLost(TrackingError):
    """The tracking server stopped answering during a run (after MLflow's own retries); ``cause``: the error's
    first line."""

    def __init__(self, message: str, cause: str = "") -> None:
        super().__init__(message)
        self.cause = cause


# ----------------------------------------------------------------------------- the store
def check_uri_argument(uri: Any) -> None:
    """A ``tracking_uri`` argument is None or text: a number failed deep in the store's code, and a ``Path`` names no
    kind of store (a SQLite file, or a folder?)."""
    if uri is not None and not isinstance(uri, str):
        raise TypeError(f"tracking_uri: expected an MLflow tracking URI as text (e.g. 'sqlite:///mlflow.db', "
                        f"'file:./mlruns', 'http://host:5000'), got {type(uri).__name__} {uri!r}")


def resolve_tracking_uri(cli_uri: str | None = None, config_uri: str | None = None) -> str:
    """The store a command logs to. A SQLite store given by a relative path is made absolute here, against the
    working folder the command runs in: run.json and a study keep it, and a ``--resume`` started from another
    folder must reach the same store, not create an empty one there."""
    check_uri_argument(cli_uri)
    uri = cli_uri or os.environ.get("MLFLOW_TRACKING_URI") or config_uri
    if not uri:
        return mlflow.get_tracking_uri()  # MLflow's default local store (an absolute path)
    return _absolute_file_store(absolute_sqlite_url(uri))


def _absolute_file_store(uri: str) -> str:
    """A file store given by a relative path (``./mlruns``, ``file:./mlruns``) made absolute, as a SQLite one is."""
    if uri.startswith("file:") and not uri.startswith("file:/"):
        return Path(os.path.abspath(uri.removeprefix("file:"))).as_uri()
    if "://" not in uri and ":" not in uri and uri not in _BARE_SCHEMES and not os.path.isabs(uri):
        return os.path.abspath(uri)
    return uri


def sqlite_path(url: str) -> Path | None:
    """The database file of a ``sqlite:///PATH[?QUERY]`` URL as SQLAlchemy opens it: relative to the working
    folder, ``~`` not expanded (``sqlite:///~/x.db`` is the file ``./~/x.db``); None for another kind of URL or
    an in-memory database."""
    if not url.startswith("sqlite:///"):
        return None
    path = url.removeprefix("sqlite:///").partition("?")[0]
    return Path(path) if path and path != ":memory:" else None


def absolute_sqlite_url(url: str) -> str:
    """``url`` with a relative SQLite path made absolute against the working folder, its query kept; any other
    URL as given."""
    path = sqlite_path(url)
    if path is None or path.is_absolute():
        return url
    _, mark, query = url.partition("?")
    return f"sqlite:///{os.path.abspath(path)}{mark}{query}"


_BARE_SCHEMES = ("databricks", "databricks-uc", "uc")  # tracking URIs MLflow takes without "://", no paths


def check_tracking_uri(uri: str, timeout: float = 5.0) -> None:
    """Fail fast, in one line, when the tracking store cannot be reached."""
    if uri.startswith(("http://", "https://")):
        url = uri.rstrip("/") + "/health"
        try:
            with urllib.request.urlopen(url, timeout=timeout) as response:
                if response.status != 200:
                    raise TrackingError(f"MLflow tracking server {uri} answered {response.status} on /health")
        except urllib.error.HTTPError as e:
            raise TrackingError(f"MLflow tracking server {uri} answered {e.code} on /health") from None
        except (urllib.error.URLError, OSError) as e:
            reason = getattr(e, "reason", e)
            raise TrackingError(f"MLflow tracking server {uri} is unreachable: {reason}") from None
        try:  # /health answers without a login (MLflow's basic-auth app leaves it open): one call of the API
            MlflowClient(uri).search_experiments(max_results=1)
        except Exception as e:  # MLflow raises many kinds
            said = message_head(e)
            refused = (getattr(e, "error_code", "") in ("UNAUTHENTICATED", "PERMISSION_DENIED")
                       or any(f"code {c}" in said for c in (401, 403)))
            login = ("; set MLFLOW_TRACKING_USERNAME and MLFLOW_TRACKING_PASSWORD (or MLFLOW_TRACKING_TOKEN)"
                     if refused else "")
            raise TrackingError(f"MLflow tracking server {uri} refused a request ({said}){login}") from None
    elif uri.startswith("sqlite:///"):
        db = sqlite_path(uri)
        if db is None:
            raise TrackingError(f"MLflow store {uri}: a database in memory ends with the command, and with it the "
                                "run, its model and its figures; name a file, e.g. sqlite:///mlflow.db")
        folder = db.resolve().parent
        if not folder.is_dir() or not os.access(folder, os.W_OK):
            raise TrackingError(f"MLflow store {uri}: folder {folder} does not exist or is not writable")
        if db.is_dir():
            raise TrackingError(f"MLflow store {uri}: {db} is a folder; name a database file in it, e.g. "
                                f"sqlite:///{db / 'mlflow.db'}")
        if db.exists():  # opened once now: an out-of-date schema or another kind of file ended in MLflow's traceback
            try:
                MlflowClient(uri).search_experiments(max_results=1)
            except Exception as e:  # MLflow and SQLAlchemy raise many kinds
                said = message_head(e)
                if "out-of-date" in said:  # MLflow upgraded since the store was made
                    found = re.search(r"found version ([^,\s]+), but expected ([^)\s]+)", said)
                    versions = f" (version {found.group(1)}, this MLflow's {found.group(2)})" if found else ""
                    # MLflow says "out-of-date" of a store a newer MLflow made too, which no upgrade mends
                    raise TrackingError(f"MLflow store {uri}: its schema is not this MLflow's{versions}; made by an "
                                        f"older MLflow, back it up, then `mlflow db upgrade {uri}` brings it up to "
                                        "date; by a newer one, use that MLflow") from None
                raise TrackingError(f"MLflow store {uri} cannot be used ({said}); name an MLflow SQLite database, "
                                    "or a new file") from None
    elif uri.startswith("file:") or ("://" not in uri and uri not in _BARE_SCHEMES):  # MLflow's file store
        if uri.endswith(".db") and not uri.startswith("file:"):
            raise TrackingError(f"MLflow tracking URI {uri!r} is a bare path; a SQLite store is "
                                f"sqlite:///{uri}")
        allowed = getattr(mlflow_env, "MLFLOW_ALLOW_FILE_STORE", None)  # MLflow >= 3.7 or so
        if allowed is not None and not allowed.get():  # MLflow itself refuses it, with a traceback, at first use
            raise TrackingError(f"MLflow tracking URI {uri!r} is a file store, which this MLflow refuses (it is in "
                                "maintenance mode) unless MLFLOW_ALLOW_FILE_STORE=true is set; use e.g. "
                                "sqlite:///mlflow.db (`mlflow migrate-filestore` moves an existing store there)")
    else:  # a database or another store: one call, so that a typo fails here
        try:
            MlflowClient(uri).search_experiments(max_results=1)
        except Exception as e:  # MLflow and its database drivers raise many kinds
            raise TrackingError(f"MLflow tracking URI {uri!r} cannot be used ({message_head(e)}); use e.g. "
                                "sqlite:///mlflow.db or http://HOST:PORT") from None


@contextlib.contextmanager
def _lost_is_one_line(uri: str, run_id: str) -> Iterator[None]:
    """A tracking server that stops answering inside: :class:`ServerLost`, one line, not MLflow's tracebacks."""
    try:
        yield
    except Exception as e:
        if server_lost(uri, e):
            raise ServerLost(f"MLflow tracking server {uri} stopped answering while run {run_id} was logged "
                             f"({message_head(e)}); the run folder keeps its checkpoints: once the server answers, "
                             "continue the run with --resume", message_head(e)) from None
        raise


PARENT_TAG = "mlflow.parentRunId"  # what MLflow's nested runs carry; the UI shows such runs under their parent
CHAMPION = "champion"  # the alias --register points at the newly registered version


def start_run(uri: str, experiment: str, run_name: str | None = None, run_id: str | None = None,
              tags: dict[str, str] | None = None, parent_run_id: str | None = None) -> str:
    """Create a run (or reopen ``run_id``) and return its id; ``parent_run_id`` makes it a child (nested) run."""
    tags = {**(tags or {}), **({PARENT_TAG: parent_run_id} if parent_run_id else {})}
    db = sqlite_path(uri)
    if run_id is not None and db is not None and not db.is_file():  # MLflow would create it, empty
        raise TrackingError(f"MLflow store {uri} does not exist, so it holds no run {run_id} to reopen; pass "
                            "--tracking-uri with the store the run was logged to")
    # A SQLite store is opened (created, where missing), and an experiment created in it, by one command at a
    # time: two commands creating one store at once collided in MLflow's schema migration, and one crashed.
    with folder_lock(db.resolve().parent) if db is not None else contextlib.nullcontext():
        client = MlflowClient(uri)
        exp_id = _experiment_id(client, uri, experiment) if run_id is None else None
    if run_id is not None:
        from mlflow.exceptions import MlflowException

        try:
            run = client.get_run(run_id)
        except MlflowException as e:
            if e.error_code != "RESOURCE_DOES_NOT_EXIST":
                raise
            raise TrackingError(f"MLflow store {uri} holds no run {run_id} to reopen (it was logged to another "
                                "store, or deleted and garbage-collected); pass --tracking-uri with the store the run "
                                "was logged to, or start a new run with another --out") from None
        if run.info.lifecycle_stage == "deleted":  # MLflow refuses to reopen it, in a traceback
            raise TrackingError(f"MLflow run {run_id} in {uri} was deleted; restore it to resume it "
                                f"(MLFLOW_TRACKING_URI={uri} mlflow runs restore --run-id {run_id}), or start a "
                                "new run with another --out")
        client.update_run(run_id, status="RUNNING")
        return run.info.run_id
    run = client.create_run(exp_id, run_name=run_name, tags=tags)
    return run.info.run_id


def _experiment_id(client: MlflowClient, uri: str, experiment: str) -> str:
    """The id of ``experiment`` in ``uri``, created where missing; one that was deleted is refused in one line."""
    exp = client.get_experiment_by_name(experiment)
    if exp is not None and exp.lifecycle_stage == "deleted":  # MLflow refused a run in it, in a traceback
        raise TrackingError(f"MLflow experiment {experiment!r} in {uri} was deleted; restore it "
                            f"(MLFLOW_TRACKING_URI={uri} mlflow experiments restore --experiment-id "
                            f"{exp.experiment_id}) or choose another name (tracking.experiment)")
    return exp.experiment_id if exp is not None else client.create_experiment(
        experiment, artifact_location=_artifact_location(uri))


def _artifact_location(uri: str) -> str | None:
    """Artifacts of a SQLite store's new experiments go beside the database file, not into ``./mlruns``.

    MLflow's default puts them under the *working folder* of whichever process
    created the experiment, so one store's files end up scattered wherever it
    was used from. Beside the database, the store is one self-contained folder.
    """
    db = sqlite_path(uri)
    if db is None:
        return None  # a server, another store or a database in memory decides for itself
    return (db.resolve().parent / "mlartifacts").as_uri()


def set_tags(uri: str, run_id: str, tags: dict[str, Any]) -> None:
    client = MlflowClient(uri)
    with _lost_is_one_line(uri, run_id):
        for k, v in tags.items():
            client.set_tag(run_id, k, str(v))


def end_run(uri: str, run_id: str, status: str = "FINISHED") -> None:
    MlflowClient(uri).set_terminated(run_id, status=status)


def log_params(uri: str, run_id: str, params: dict[str, Any]) -> None:
    """Log a flat parameter mapping; values become strings as MLflow requires."""
    from mlflow.entities import Param

    # a password in a URL (tracking.tracking_uri) is not a parameter anyone reading the run should see
    items = [Param(k, hide_passwords(json.dumps(v) if isinstance(v, (dict, list)) else str(v)))
             for k, v in params.items()]
    client = MlflowClient(uri)
    for i in range(0, len(items), 100):  # MLflow's batch limit
        client.log_batch(run_id, params=items[i : i + 100])


def server_lost(uri: str, e: BaseException) -> bool:
    """Whether ``e`` is a tracking server that stopped answering (MLflow's "API request to ... failed")."""
    from mlflow.exceptions import MlflowException

    return (uri.startswith(("http://", "https://")) and isinstance(e, MlflowException)
            and "API request to" in str(e) and "failed" in str(e))


def log_metrics(uri: str, run_id: str, metrics: dict[str, float], step: int | None = None) -> None:
    client = MlflowClient(uri)
    with _lost_is_one_line(uri, run_id):  # mid-training: one line, not MLflow's retries' tracebacks
        for k, v in metrics.items():
            client.log_metric(run_id, k, float(v), step=step)


def log_artifacts(uri: str, run_id: str, paths: list[Path], artifact_path: str | None = None) -> None:
    client = MlflowClient(uri)
    with _lost_is_one_line(uri, run_id):
        for p in paths:
            if p.is_dir():
                client.log_artifacts(run_id, str(p), artifact_path)
            elif p.is_file():
                client.log_artifact(run_id, str(p), artifact_path)


def run_info(uri: str, run_id: str) -> dict[str, Any]:
    with _lost_is_one_line(uri, run_id):
        run = MlflowClient(uri).get_run(run_id)
    return {"run_id": run_id, "experiment_id": run.info.experiment_id, "status": run.info.status,
            "lifecycle_stage": run.info.lifecycle_stage, "artifact_uri": run.info.artifact_uri,
            "metrics": dict(run.data.metrics), "params": dict(run.data.params),
            "tags": dict(run.data.tags)}


def metric_history(uri: str, run_id: str, key: str) -> list[tuple[int, float]]:
    return [(m.step, m.value) for m in MlflowClient(uri).get_metric_history(run_id, key)]


class MLflowCallback(L.Callback):
    """Per-epoch metrics (train loss, validation AUC and logloss) into one MLflow run, from rank zero."""

    KEYS = ("train_loss_epoch", "val_auc", "val_logloss")

    def __init__(self, uri: str, run_id: str) -> None:
        self.uri, self.run_id = uri, run_id

    def _log(self, trainer: L.Trainer, keys: tuple[str, ...]) -> None:
        if trainer.global_rank != 0 or trainer.sanity_checking:
            return
        metrics = {k.removesuffix("_epoch"): float(v) for k, v in trainer.callback_metrics.items() if k in keys}
        if metrics:
            log_metrics(self.uri, self.run_id, metrics, step=trainer.current_epoch)

    def on_train_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._log(trainer, self.KEYS)


# ----------------------------------------------------------------------------- the served model
def log_pyfunc_model(uri: str, run_id: str, checkpoint: Path, input_example: pd.DataFrame,
                     name: str = "model") -> str:
    """Log the served model (:func:`autoint.serving.model_options`) into ``run_id``; returns its ``runs:/`` URI."""
    from .serving import model_options

    # nested: a run the caller has open (a notebook's `with mlflow.start_run():`) stays theirs, and active; without
    # it MLflow refused to open this one, after the whole training
    with _lost_is_one_line(uri, run_id), _fluent_uri(uri):
        run = mlflow.start_run(run_id=run_id, nested=True)
        try:
            mlflow.pyfunc.log_model(name=name, **model_options(checkpoint, input_example))
        except BaseException as e:
            # A lost server is not asked to end the run (MLflow's retries, minutes more); otherwise as the
            # `with mlflow.start_run()` this replaces: FAILED, which the caller then sets as it decides.
            if not (server_lost(uri, e) and _forget_active_run(run.info.run_id)):
                mlflow.end_run("FAILED")
            raise
        mlflow.end_run()
    return f"runs:/{run_id}/{name}"


def _forget_active_run(run_id: str) -> bool:
    """Take ``run_id`` off MLflow's stack of active runs without a call to the store; False where this MLflow keeps
    that stack otherwise (then the run is ended through the store, as before)."""
    from mlflow.tracking import fluent

    stack = getattr(fluent, "_active_run_stack", None)
    runs = stack.get() if hasattr(stack, "get") else None
    if isinstance(runs, list) and runs and runs[-1].info.run_id == run_id:
        runs.pop()
        return True
    return False


@contextlib.contextmanager
def _fluent_uri(uri: str) -> Iterator[None]:
    """Inside: MLflow's fluent API (``mlflow.start_run``, ``download_artifacts``) on ``uri``. After: the caller's
    tracking URI and ``MLFLOW_TRACKING_URI`` as they were. ``mlflow.set_tracking_uri`` also sets that variable
    (MLflow 3), which ranks above a config's ``tracking.tracking_uri``: the next run of the process went to the
    store of the one before, and a caller's own ``mlflow.set_tracking_uri`` was undone.

    The fluent URI is the process's: two threads inside at once (two models loaded from two stores) fetched from
    each other's store and put back each other's URI, so one thread at a time is inside."""
    with _FLUENT:
        yield from _fluent_inside(uri)


_FLUENT = threading.RLock()


def _fluent_inside(uri: str) -> Iterator[None]:
    from mlflow.tracking import fluent
    from mlflow.tracking._tracking_service import utils as mlflow_uri

    before, env = getattr(mlflow_uri, "_tracking_uri", None), os.environ.get("MLFLOW_TRACKING_URI")
    # A caller's mlflow.set_experiment names an experiment of their store: start_run(run_id=...) refused our run
    # as not of the active experiment. Cleared inside, the caller's again after.
    experiment = getattr(fluent, "_active_experiment_id", None)
    mlflow.set_tracking_uri(uri)
    fluent._active_experiment_id = None
    try:
        yield
    finally:
        fluent._active_experiment_id = experiment
        mlflow.set_tracking_uri(before)
        if env is None:
            os.environ.pop("MLFLOW_TRACKING_URI", None)
        else:
            os.environ["MLFLOW_TRACKING_URI"] = env


def check_model_name(name: Any) -> None:
    """A registered model's name (``register=``, ``--register``), checked before any run: MLflow refused a name with
    '/' or ':' (or '.', or one starting '..') only once the model was trained, and '' was taken as no name. A quote
    broke MLflow's search of the model's versions; '?' and '@' the ``models:/NAME/VERSION`` URI that scores it."""
    if name is None:
        return
    if (not isinstance(name, str) or not name.strip() or any(c in name for c in "/:'?@") or name == "."
            or name.startswith("..") or any(ord(c) < 32 or ord(c) == 127 for c in name)):
        # (a tab, CR or LF: the URI's parser drops them, and models:/a<TAB>b/1 named another model)
        raise TrackingError(f"register: {name!r} is no registered model's name (text, not empty, without '/', ':', "
                            "\"'\", '?', '@' or control characters, and not '.' or starting '..')")


def register_model(uri: str, run_id: str, name: str, alias: str = CHAMPION, artifact: str = "model") -> str:
    """The model logged as ``artifact`` in ``run_id`` as a new version of registered model ``name`` (or the version
    it already is, registered before).

    The registered model is created on first use; ``alias`` is moved to the
    version, so ``models:/NAME@champion`` follows the latest one registered.
    Returns ``models:/NAME/VERSION``.
    """
    from mlflow.exceptions import MlflowException

    client = MlflowClient(uri)
    # MLflow resolves a version's source (models:/m-...) through the global tracking URI, not the client's
    with _fluent_uri(uri):
        try:
            run = client.get_run(run_id)
            logged = [m for m in client.search_logged_models(experiment_ids=[run.info.experiment_id],
                                                             filter_string=f"name = '{artifact}'")
                      if m.source_run_id == run_id]
            if not logged:
                raise TrackingError(f"run {run_id} in {uri} has no logged model '{artifact}' to register")
            model = max(logged, key=lambda m: m.creation_timestamp)
            try:
                client.get_registered_model(name)
            except MlflowException:
                client.create_registered_model(name)
            source = f"models:/{model.model_id}"
            # The same logged model registered again (a resumed study with no new best) is the version it already is.
            same = [v for v in client.search_model_versions(f"name = '{name}'") if v.source == source]
            version = max(same, key=lambda v: int(v.version)) if same else client.create_model_version(
                name, source=source, run_id=run_id, model_id=model.model_id)
            try:
                before = client.get_model_version_by_alias(name, alias)
            except MlflowException:
                before = None
            if before is not None and before.version != version.version:
                _warn_of_other_columns(name, alias, before, version)
            client.set_registered_model_alias(name, alias, version.version)
        except MlflowException as e:
            raise TrackingError(f"cannot register the model of run {run_id} as {name!r} in {uri}: "
                                f"{e.message}") from None
    return f"models:/{name}/{version.version}"


def _warn_of_other_columns(name: str, alias: str, before: Any, now: Any) -> None:
    """Warn where the version an alias moves to takes other input columns than the one it leaves: whatever scores
    ``models:/NAME@champion`` with the old columns is refused from now on (it moved without a word)."""
    def columns(source: str) -> list[str] | None:
        try:
            signature = mlflow.models.get_model_info(source).signature
            return None if signature is None else list(signature.inputs.input_names())
        except Exception:  # a version logged otherwise, or unreadable: nothing to compare
            return None

    old, new = columns(before.source), columns(now.source)
    if old is None or new is None or set(old) == set(new):  # rows are DataFrames: columns are taken by name
        return
    gone, added = [c for c in old if c not in new], [c for c in new if c not in old]
    log.warning("models:/%s@%s moves from version %s to version %s, which takes other input columns (%s): callers "
                "that score @%s with the columns of version %s are refused from now on", name, alias, before.version,
                now.version, "; ".join(p for p in (f"no longer {few(gone)}" if gone else "",
                                                   f"new {few(added)}" if added else "") if p),
                alias, before.version)


def checkpoint_from_uri(model_uri: str, tracking_uri: str) -> Path:
    """Download a logged autoint model (``runs:/ID/model``, ``models:/NAME/1``, ``models:/NAME@champion``)
    into a scratch folder of this process (:func:`autoint.files.scratch_folder`) and return its checkpoint."""
    db = sqlite_path(tracking_uri)
    if db is not None and not db.is_file():  # MLflow would create it, empty, and then not find the model
        raise TrackingError(f"cannot fetch {model_uri}: MLflow store {tracking_uri} does not exist; pass "
                            "--tracking-uri (tracking_uri= from Python) with the store the model was logged to (or set "
                            "MLFLOW_TRACKING_URI)")
    scratch = None
    try:
        with _fluent_uri(tracking_uri):
            # A copy goes to a scratch folder of this process, not to MLflow's own temporary folder, which nothing
            # removed (every runs:/ URI, and any store not on this machine, is copied)
            scratch = None if _read_in_place(model_uri) else scratch_folder("model")
            local = Path(mlflow.artifacts.download_artifacts(artifact_uri=model_uri,
                                                             dst_path=None if scratch is None else str(scratch)))
    except Exception as e:
        if scratch is not None:
            remove_scratch(scratch)
        # the first line: SQLAlchemy adds the SQL and a link (a file that is no database was three lines)
        raise TrackingError(f"cannot fetch {model_uri} from {tracking_uri}: {message_head(e)}") from None
    found = sorted(local.rglob("*.ckpt"))
    if not found:
        if scratch is not None:
            remove_scratch(scratch)
        raise TrackingError(f"{model_uri}: no checkpoint inside (is it an autoint model?)")
    return found[0]


def _read_in_place(model_uri: str) -> bool:
    """Whether MLflow reads ``model_uri`` where it lies, uncopied: a ``models:/`` URI whose model is in an artifact
    store on this machine's file system. (The tracking store is the fluent one: inside :func:`_fluent_uri`.)"""
    from mlflow.store.artifact.artifact_repository_registry import get_artifact_repository
    from mlflow.store.artifact.local_artifact_repo import LocalArtifactRepository
    from mlflow.store.artifact.models_artifact_repo import ModelsArtifactRepository

    if not ModelsArtifactRepository.is_models_uri(model_uri):
        return False
    root, _ = ModelsArtifactRepository.split_models_uri(model_uri)
    return isinstance(getattr(get_artifact_repository(root), "repo", None), LocalArtifactRepository)


def run_id_from_model_uri(model_uri: str, tracking_uri: str) -> str | None:
    """The run a ``runs:/ID/...``, ``models:/NAME/VERSION``, ``models:/NAME@ALIAS`` or ``models:/m-ID`` URI
    belongs to; None if unknown."""
    if model_uri.startswith("runs:/"):
        run_id = model_uri.removeprefix("runs:/").strip("/").split("/")[0]
        return run_id or None
    if not model_uri.startswith("models:/"):
        return None
    parts = model_uri.removeprefix("models:/").strip("/").split("/")
    client = MlflowClient(tracking_uri)
    try:
        if len(parts) == 1 and "@" in parts[0]:
            name, alias = parts[0].rsplit("@", 1)
            return client.get_model_version_by_alias(name, alias).run_id
        if len(parts) >= 2 and parts[1].isdigit():
            return client.get_model_version(parts[0], parts[1]).run_id
        if len(parts) == 1 and parts[0].startswith("m-"):
            return client.get_logged_model(parts[0]).source_run_id
    except Exception as e:
        raise TrackingError(f"cannot find the run of {model_uri} in {tracking_uri}: {e}") from None
    return None
