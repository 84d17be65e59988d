"""The MLflow pyfunc model and ``autoint serve``: raw rows (the original columns) in, click probabilities out.

Kept apart from :mod:`autoint.tracking` (which logs training runs and imports
Lightning for its callback) so that loading and serving the model imports
mlflow's pyfunc interface and the scoring path (:mod:`autoint.predict`) only.

The model is stored as code (MLflow's "models from code"), not as a pickled
object: the model folder keeps this file, and loading the model runs it, so
the :func:`mlflow.models.set_model` call at its end names the model to serve.
MLflow runs the file as a module of its own, outside the package, hence the
absolute imports.

Its signature names the columns and accepts any type in each
(:class:`mlflow.types.schema.AnyType`): what ``pd.read_csv`` or
``pd.read_parquet`` make of a log (ints, floats, strings, missing values) or
what a JSON request holds. The model's encoder turns them into the values
training saw, as :meth:`autoint.encoder.Encoder.canonical_rows` does for
``autoint predict``: the int 5, an integral float 5.0 and the string "5" are
one categorical value.
"""

from __future__ import annotations

import errno
import logging
import os
import signal
import socket
import subprocess
import sys
import warnings
from pathlib import Path
from typing import Any

import mlflow.models
import mlflow.pyfunc
import numpy as np
import pandas as pd
from mlflow.exceptions import MlflowException
from mlflow.models import ModelSignature
from mlflow.protos.databricks_pb2 import INVALID_PARAMETER_VALUE
from mlflow.types.schema import AnyType, ColSpec, Schema, TensorSpec

from autoint.checkpoint import CHECKPOINT_KEY, CheckpointError, checkpoint_file, read_checkpoint
from autoint.config import is_int
from autoint.datasets.base import column_array
from autoint.errors import InputError, message_head
from autoint.files import remove_scratch, scratch_folder
from autoint.predict import Scorer
from autoint.schema import Schema as SchemaSpec

log = logging.getLogger(__name__)


class BadRowsError(MlflowException, ValueError):
    """Rows the model cannot score (a missing column, a value that is not a number): autoint's message, which
    MLflow's scoring server passes on in its 400 answer (any other exception it replaces with a generic one)."""

    def __init__(self, message: str) -> None:
        super().__init__(message, error_code=INVALID_PARAMETER_VALUE)


class AutoIntPyfunc(mlflow.pyfunc.PythonModel):
    """Raw rows → click probabilities (fp32, whatever the host).

    The checkpoint artifact carries config, schema, vocabularies and weights;
    rows are encoded exactly as in training, unseen values going to OOV.
    """

    def load_context(self, context: mlflow.pyfunc.PythonModelContext) -> None:
        self.scorer = Scorer.from_checkpoint(context.artifacts["checkpoint"])

    def predict(self, context: Any, model_input: pd.DataFrame, params: dict[str, Any] | None = None) -> np.ndarray:
        frame = pd.DataFrame(model_input)
        twice = _named_twice(frame, self.scorer.columns)
        if twice is not None:
            raise BadRowsError(f"the rows name column {twice!r} twice (MLflow's schema check then reads the column's "
                               "names as its values); name each column once")
        try:
            return self.scorer.score_frame(frame)
        except InputError as e:
            raise BadRowsError(str(e)) from e


def _named_twice(frame: pd.DataFrame, fields: list[str]) -> str | None:
    """The field whose column, in every row, holds the field's own name: what MLflow's schema enforcement
    (``[... for obj in df[name]]``) makes of a column named twice in a request of as many rows as copies; a
    request of other length fails inside MLflow before the model sees it. None if there is none."""
    if len(frame) < 2:
        return None
    for name in fields:
        values = column_array(frame, name)  # no Series per field: a request's few rows stay cheap
        if values is not None and isinstance(values[0], str) and values[0] == name and all(v == name for v in values):
            return name
    return None


def model_options(checkpoint: str | Path, input_example: pd.DataFrame | None = None) -> dict[str, Any]:
    """What :func:`mlflow.pyfunc.log_model` (or ``save_model``) takes to store the served model of ``checkpoint``.

    The checkpoint must score raw rows (it carries its encoder): checked here,
    so a bad one fails before anything is stored.
    """
    meta = read_checkpoint(checkpoint)[CHECKPOINT_KEY]
    if meta.get("encoder") is None:
        raise CheckpointError(f"{checkpoint}: carries no encoder state, so it cannot score raw rows")
    columns = SchemaSpec.from_dict(meta["schema"]).names
    time_column, derived = _derived_fields(meta["encoder"])
    inputs = [ColSpec(AnyType(), name, required=name not in derived) for name in columns]
    if derived and time_column not in columns:  # rows may carry the time column instead of its derived fields
        inputs.append(ColSpec(AnyType(), time_column, required=False))
    return {
        "python_model": str(Path(__file__).resolve()),  # this file: see the module docstring
        "artifacts": {"checkpoint": str(checkpoint)},
        "code_paths": [str(Path(__file__).resolve().parent)],  # the model carries the code that encodes its rows
        "signature": ModelSignature(
            inputs=Schema(inputs),
            outputs=Schema([TensorSpec(np.dtype(np.float32), (-1,))]),
        ),
        "input_example": None if input_example is None else input_example.head(5).reset_index(drop=True),
        "pip_requirements": _requirements(),
    }


def _derived_fields(state: dict[str, Any]) -> tuple[str | None, set[str]]:
    """A table log's time column and the fields derived from it (``ts_hour``, ...), from a checkpoint's encoder
    state: the Scorer derives them from the time column when a row carries that instead, so neither is required."""
    from autoint.datasets.table import TableSpec

    reader = state.get("encoder", state).get("reader") or {}  # a version 1 checkpoint holds the encoder dict itself
    if reader.get("format") != "table":
        return None, set()
    spec = TableSpec(reader.get("columns"))
    return spec.time_column, {f"{spec.time_column}_{part}" for part in spec.derive}


# Where pip finds torch's CPU builds: a local version such as 2.13.0+cpu is on no index pip reads by default.
TORCH_CPU_INDEX = "https://download.pytorch.org/whl/cpu"


def _requirements() -> list[str]:
    """The packages scoring imports, pinned to the versions installed. A local version label (torch's ``+cpu``)
    is left out of the pin, which PyPI could not resolve, and torch's CPU index is named instead, so an environment
    MLflow rebuilds for the model (``--env-manager virtualenv``) gets the CPU build, not CUDA's."""
    from importlib.metadata import version

    packages = ("torch", "pandas", "pyarrow", "numpy", "pyyaml", "mlflow")  # what scoring imports (a test holds it)
    pins = {pkg: version(pkg) for pkg in packages}
    extra = [f"--extra-index-url {TORCH_CPU_INDEX}"] if pins["torch"].endswith("+cpu") else []
    return extra + [f"{pkg}=={v.split('+', 1)[0]}" for pkg, v in pins.items()]


def serve(model: str | Path, host: str = "127.0.0.1", port: int = 5000, tracking_uri: str | None = None) -> int:
    """Serve ``model`` over HTTP with MLflow's scoring server until stopped; returns the exit status.

    ``model`` is a checkpoint, a run folder (its best checkpoint) or an MLflow
    model URI (``runs:/ID/model``, ``models:/NAME/VERSION``, whose checkpoint is
    fetched). Its checkpoint becomes the pyfunc model ``autoint train`` logs,
    saved in a temporary folder, so the server scores raw rows exactly as
    ``autoint predict`` does; a bad model fails here, in one line.

    The server is ``mlflow models serve`` run by this interpreter, with its
    ``bin`` folder first on ``PATH``: MLflow starts ``uvicorn`` from ``PATH``,
    which lacks a virtual environment's scripts unless it is activated.
    SIGTERM stops the server (status 0), as does Ctrl-C.
    """
    parent = os.getpid()
    port = check_address(host, port)  # before the model is loaded: the server's own refusal is a page of tracebacks
    if not _loopback_only(host):
        log.warning("autoint serve: %s is reachable from other machines, and MLflow's scoring server has no "
                    "authentication and no limit on a request's size; put it behind a proxy that has both, or "
                    "serve on 127.0.0.1", host)
    tmp = scratch_folder("serve")  # removed below; where this process is killed, by the next autoint command
    try:
        folder = Path(tmp) / "model"
        with checkpoint_file(model, tracking_uri) as checkpoint, warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=".*An input example was not provided")  # the server's own
            mlflow.pyfunc.save_model(str(folder), **model_options(checkpoint))  # copy: the logged one has examples
        env = {**os.environ, "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])}
        shown = f"[{host}]" if ":" in host else host  # an IPv6 address in a URL
        print(f"autoint serve: {model} on http://{shown}:{port} (POST /invocations)", file=sys.stderr, flush=True)
        server = subprocess.Popen([sys.executable, "-m", "mlflow", "models", "serve", "-m", str(folder),
                                   "--env-manager", "local", "--host", host, "--port", str(port)], env=env,
                                  preexec_fn=_dying_with(parent))
        stopping = False

        def stop(signum: int, frame: Any) -> None:
            nonlocal stopping
            stopping = True
            server.terminate()  # MLflow then stops uvicorn (its child dies with it)

        previous = signal.signal(signal.SIGTERM, stop)
        try:
            status = server.wait()
        except KeyboardInterrupt:  # Ctrl-C, or a SIGINT sent to this process alone (kill -INT, a supervisor), which
            stopping = True        # the server never got: stop it as SIGTERM does, whichever it was
            server.terminate()
            status = _stopped(server)
        finally:
            signal.signal(signal.SIGTERM, previous)
            if server.poll() is None:  # a second interrupt while it stopped: never leave it serving a deleted model
                server.kill()
                server.wait()
    finally:
        remove_scratch(tmp)
    return 0 if stopping else (128 - status if status < 0 else status)  # killed by signal N: 128 + N


def _loopback_only(host: str) -> bool:
    """Whether every address ``host`` names is this machine's loopback (127.0.0.0/8, ::1)."""
    import ipaddress

    try:
        infos = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)
        return bool(infos) and all(ipaddress.ip_address(i[4][0].split("%", 1)[0]).is_loopback for i in infos)
    except (OSError, UnicodeError, ValueError):
        return False


def check_address(host: str, port: int) -> int:
    """The port the server will listen on, or an :class:`InputError` naming the host or port when it could
    not listen there: a port out of range, one another process holds, an address this machine does not have.
    Port 0 is a free port the system picks (uvicorn itself takes 0 for its default, 8000), free on every
    address of ``host``. (The probe binds as uvicorn does, with SO_REUSEADDR, and lets go at once.)"""
    if not (is_int(port) and 0 <= port <= 65535):
        raise InputError(f"port {port!r}: must be a number from 0 to 65535 (0: a free port)")
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError) as e:
        raise InputError(f"host {host!r}: not an address of this machine ({message_head(e)})") from None
    addresses = list(dict.fromkeys((i[0], i[4]) for i in infos))  # each address the server binds
    if not port:
        for _ in range(8):  # one the system gave on the first address may be taken on another (IPv4 and IPv6)
            try:
                return check_address(host, _probe(host, port, *addresses[0]))
            except InputError as e:
                if "already in use" not in str(e):
                    raise
        raise InputError(f"no port was free on every address of {host!r}; choose a --port")
    for family, address in addresses:
        _probe(host, port, family, address)
    return int(port)


def _probe(host: str, port: int, family: int, address: tuple) -> int:
    """Bind ``address`` at ``port`` (0: any) and let go: the port bound, or an :class:`InputError`."""
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((address[0], port, *address[2:]))
        except OSError as e:
            if e.errno == errno.EADDRINUSE:
                raise InputError(f"port {port}: already in use on {host} (another server?); choose another "
                                 "--port") from None
            raise InputError(f"cannot listen on {host}:{port} ({message_head(e)})") from None
        return probe.getsockname()[1]


def _dying_with(parent: int) -> Any:
    """What the server's process runs before MLflow (Linux only, else None): SIGTERM it when ``autoint serve``
    dies, even by SIGKILL (an OOM kill, a supervisor's hard stop), which left it serving a deleted model on the
    port. ``prctl`` is looked up here, in the parent: after a fork only the call itself is safe."""
    if not sys.platform.startswith("linux"):
        return None
    import ctypes

    prctl = ctypes.CDLL(None, use_errno=True).prctl

    def die_with_parent() -> None:
        prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
        if os.getppid() != parent:  # it died before the line above
            os._exit(1)

    return die_with_parent


def _stopped(server: subprocess.Popen, grace_s: float = 30.0) -> int:
    """The server's exit status once it has stopped; killed if it has not within ``grace_s``."""
    try:
        return server.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        server.kill()
        return server.wait()


# Loading the logged model runs this file (see the module docstring): this names the model it serves.
mlflow.models.set_model(AutoIntPyfunc())
