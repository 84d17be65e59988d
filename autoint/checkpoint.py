"""A trained model read back from its checkpoint with torch alone.

A checkpoint (written by Lightning during training, see :mod:`autoint.system`)
carries what is needed to rebuild and use the model with nothing else: the
resolved config, the schema, the encoder state (vocabularies and numeric
transforms) and the precision it was trained in under ``checkpoint["autoint"]``,
beside the weights. Reading it needs neither Lightning nor MLflow, so scoring
(``autoint predict``, the MLflow pyfunc model) imports neither.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch

from .config import Config, config_from_dict, saved_config
from .errors import InputError, message_head
from .model import AutoInt
from .schema import Schema

log = logging.getLogger(__name__)

CHECKPOINT_KEY = "autoint"
PRECISION_KEY = "precision"  # in the ``autoint`` section: the training precision Lightning resolved, e.g. "bf16-mixed"


class CheckpointError(InputError, ValueError):
    """A file given as a model is not a readable autoint checkpoint; the message names it."""


def read_checkpoint(path: str | Path, mmap: bool = False) -> dict[str, Any]:
    """The checkpoint's contents (``weights_only``: tensors and plain data, no pickled code). ``mmap``: its tensors
    mapped from the file, read only where used (a training checkpoint's optimizer moments, twice the weights, then
    take no memory)."""
    path = Path(path)
    if path.is_dir():
        raise CheckpointError(f"{path} is a folder, not a checkpoint; name its checkpoint (a run folder's is "
                              "checkpoints/best.ckpt), or resolve it with autoint.checkpoint.resolve_checkpoint")
    if not path.is_file():
        raise CheckpointError(f"checkpoint not found: {path}")
    try:
        ckpt = torch.load(path, map_location="cpu", weights_only=True, mmap=mmap)
    except Exception as e:  # a truncated or foreign file: say which, in one line
        # torch's own text for a foreign pickle runs to several lines and advises weights_only=False (unsafe)
        # a whole file holding a type the safe load refuses (torch: "Unsupported global: GLOBAL x.Y", or for a
        # blocked module, os.system's, "Trying to load unsupported GLOBAL posix.system whose module ... is blocked")
        unsupported = re.search(r"(?i)unsupported global[: ][^\n]*", str(e))
        why = (message_head(e) if isinstance(e, OSError) else      # say which, not that it is damaged
               f"it holds a type a safe load refuses: {unsupported.group(0)}" if unsupported else
               f"not a whole torch.save file: {type(e).__name__}")
        raise CheckpointError(f"{path}: not a readable autoint checkpoint ({why}); "
                              "a model is a checkpoint (.ckpt), a run folder or an MLflow model URI") from None
    if not isinstance(ckpt, dict) or CHECKPOINT_KEY not in ckpt:
        raise CheckpointError(f"{path}: not an autoint checkpoint (no '{CHECKPOINT_KEY}' section)")
    return ckpt


SERVING_KEYS = (CHECKPOINT_KEY, "state_dict", "epoch", "global_step")


def serving_checkpoint(path: str | Path, out: str | Path) -> Path:
    """A copy of checkpoint ``path`` at ``out`` holding what scoring reads (autoint's section, the weights, the
    epoch): a training checkpoint's optimizer moments, twice the weights, and Lightning's loop and callback states
    stay out of the served model, which every predict, serve and evaluate of it loaded whole."""
    ckpt = read_checkpoint(path, mmap=True)
    write_checkpoint({k: v for k, v in ckpt.items() if k in SERVING_KEYS}, out)
    return Path(out)


def write_checkpoint(checkpoint: dict[str, Any], path: str | Path) -> None:
    """Write a checkpoint whole or not at all: to a temporary file beside ``path``, synced, then renamed over it,
    so a process killed while saving leaves the previous file whole (and at most a ``*.tmp`` file)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(6)}.tmp")
    try:  # a new file of its own (O_EXCL): never one a link planted under a name known in advance points at
        with os.fdopen(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666), "wb") as f:
            torch.save(checkpoint, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def load_checkpoint(path: str | Path) -> tuple[AutoInt, Config, Schema, dict[str, Any] | None]:
    """Rebuild the model from a checkpoint alone: ``(model in eval mode, config, schema, encoder state)``."""
    return model_from_checkpoint(read_checkpoint(path), path)


def model_from_checkpoint(ckpt: dict[str, Any], source: str | Path = "checkpoint"
                          ) -> tuple[AutoInt, Config, Schema, dict[str, Any] | None]:
    """:func:`load_checkpoint` for contents already read by :func:`read_checkpoint` (from ``source``).

    Contents this version cannot rebuild (settings it does not know, a schema or weights that do not fit
    the model the settings describe: a checkpoint of another autoint version) raise
    :class:`CheckpointError` naming ``source``.
    """
    meta = ckpt[CHECKPOINT_KEY]
    try:
        cfg = config_from_dict(saved_config(meta["config"]))
        schema = Schema.from_dict(meta["schema"])
    except (KeyError, ValueError) as e:  # ValueError: a ConfigError too
        raise _foreign(source, e) from e
    with torch.random.fork_rng(devices=[]), float32_default():  # the weights drawn here are replaced: the caller's
        model = AutoInt(schema, cfg.model)  # random stream stays; our own code: a bug here keeps its traceback
    state = {k.removeprefix("model."): v for k, v in ckpt["state_dict"].items() if k.startswith("model.")}
    try:
        model.load_state_dict(state)
    except RuntimeError as e:  # missing, unexpected or misshapen weights
        raise _foreign(source, e) from e
    return model.eval(), cfg, schema, meta.get("encoder")


@contextlib.contextmanager
def float32_default() -> Iterator[None]:
    """Modules built inside hold float32 weights and buffers whatever the caller's default dtype: under a notebook's
    ``torch.set_default_dtype(torch.float64)`` a loaded model scored in float64, so other probabilities (by ~1e-7)
    than the same model gives everywhere else."""
    dtype = torch.get_default_dtype()
    torch.set_default_dtype(torch.float32)
    try:
        yield
    finally:
        torch.set_default_dtype(dtype)


def _foreign(source: str | Path, e: Exception) -> CheckpointError:
    return CheckpointError(f"{source}: this version of autoint cannot rebuild the model this checkpoint "
                           f"holds ({type(e).__name__}: {message_head(e)}); was it written by another version?")


@contextlib.contextmanager
def checkpoint_file(model: str | Path, tracking_uri: str | None = None) -> Iterator[Path]:
    """:func:`resolve_checkpoint`'s path while inside; a model fetched from a tracking store is removed after."""
    path = resolve_checkpoint(model, tracking_uri)
    try:
        yield path
    finally:
        if fetched(model):
            from .files import remove_scratch

            remove_scratch(path)


def fetched(model: str | Path) -> bool:
    """Whether :func:`resolve_checkpoint` fetches ``model`` from a tracking store (into a scratch folder of this
    process, removed when it exits: :func:`autoint.files.scratch_folder`)."""
    text = str(model)
    if text.startswith("file:"):
        from urllib.parse import unquote, urlparse

        if Path(unquote(urlparse(text).path)).exists():
            return False
    return "://" in text or text.startswith(("runs:/", "models:/"))


def resolve_checkpoint(model: str | Path, tracking_uri: str | None = None) -> Path:
    """A checkpoint path from a checkpoint file, a run folder, or an MLflow model/run URI.

    Only an MLflow URI imports the tracking module (and so mlflow). A model it names is fetched into a scratch
    folder of this process, removed when the process exits (:func:`checkpoint_file` removes it sooner).
    """
    text = str(model)
    if text.startswith("file:"):  # a local MLflow model (or run) folder: no tracking store is needed to read it
        from urllib.parse import unquote, urlparse

        local = Path(unquote(urlparse(text).path))
        if local.exists():
            return resolve_checkpoint(local)
    if fetched(text):
        from . import tracking

        return tracking.checkpoint_from_uri(text, tracking.resolve_tracking_uri(tracking_uri))
    path = Path(model)
    if path.is_file():
        return path
    if path.is_dir():
        for candidate in (path / "checkpoints" / "best.ckpt", path / "best.ckpt", path / "checkpoints" / "last.ckpt"):
            if candidate.is_file():
                if candidate.name == "last.ckpt":  # silent before: other figures than the run reported
                    log.warning("%s: no best.ckpt; using %s, the last epoch's weights, without the calibration "
                                "fitted on the best epoch", path, candidate)
                return candidate
        if (path / "MLmodel").is_file():  # an MLflow model saved or downloaded: its checkpoint is an artifact
            found = sorted((path / "artifacts").glob("*.ckpt"))
            if len(found) == 1:
                return found[0]
            raise CheckpointError(f"{path}: an MLflow model folder, but its artifacts/ holds "
                                  f"{len(found) or 'no'} checkpoints (.ckpt) where autoint's model holds one")
        if (path / "schema.json").is_file():
            raise CheckpointError(f"{path} is a processed data folder, not a model: name a run folder, a checkpoint "
                                  "or an MLflow model")
        raise CheckpointError(f"{path}: no checkpoints/best.ckpt in this run folder")
    raise CheckpointError(f"model not found: {model} (expected a checkpoint, a run folder or an MLflow URI)")
