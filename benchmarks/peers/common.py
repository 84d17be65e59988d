"""What every speed runner shares: reading a processed folder, timing steps, metrics, results.

This file is imported by ``benchmarks/speed.py`` (in the project's venv) and by
the peer runners ``run_*.py`` (each in its own venv under ``benchmarks/.peers``),
so it needs nothing beyond the standard library, numpy, pyarrow and torch, and it
never imports ``autoint``.

Definitions, the same for every library:

* **training samples/s**: the samples of the timed training steps divided by
  their wall time. A step's time runs from the moment its batch is handed to
  the training loop to the moment the next batch is (or the epoch's last step
  ends), so it covers data loading, the library's per-step bookkeeping, forward,
  backward and the optimiser; validation, checkpointing and anything between
  epochs are excluded. Start-up is excluded by not timing the first epoch (or,
  in a one-epoch run, the first 10 % of its steps, at least 5).
* **inference samples/s (forward)**: rows of the training split, pre-cut into
  batches of 4096 in the library's own input format, through the model's
  forward under ``torch.inference_mode`` after one warm-up batch.
* **test AUC / logloss**: of the weights at the end of the last epoch (fixed
  epochs, no early stopping), computed here from the test predictions with the
  same numpy code for every library.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.parquet as pq

SPLITS = ("train", "valid", "test")
CATEGORICAL, NUMERIC, MULTI = "categorical", "numeric", "multi"
PAD = 0


# ----------------------------------------------------------------------------- data
@dataclass
class Field:
    """One field of a processed folder's ``schema.json``."""

    name: str
    kind: str
    vocab_size: int | None
    max_len: int = 1


@dataclass
class Split:
    """One encoded split: a numpy array per field plus the labels.

    Categorical fields are ``(N,)`` int64, numeric ``(N,)`` float32 and
    multi-valued ``(N, L)`` int64 with PAD = 0; labels are ``(N,)`` float32.
    """

    columns: dict[str, np.ndarray]
    label: np.ndarray

    def __len__(self) -> int:
        return len(self.label)


@dataclass
class Processed:
    """A processed folder as written by ``autoint prepare``."""

    folder: Path
    fields: list[Field]
    label: str
    splits: dict[str, Split] = field(default_factory=dict)

    def of_kind(self, kind: str) -> list[Field]:
        return [f for f in self.fields if f.kind == kind]


def load_processed(folder: str | Path, splits: Iterable[str] = SPLITS) -> Processed:
    """Read ``schema.json`` and the encoded Parquet splits of a processed folder."""
    folder = Path(folder)
    schema_path = folder / "schema.json"
    if not schema_path.is_file():
        raise SystemExit(f"{folder}: no schema.json; make the folder with `autoint prepare` first")
    raw = json.loads(schema_path.read_text())
    fields = [Field(f["name"], f["kind"], f.get("vocab_size"), int(f.get("max_len", 1))) for f in raw["fields"]]
    bad = [f.name for f in fields if f.kind not in (CATEGORICAL, NUMERIC, MULTI)]
    if bad:
        raise SystemExit(f"{schema_path}: unknown field kinds for {bad}")
    out = Processed(folder, fields, raw.get("label", "label"))
    for split in splits:
        path = folder / f"{split}.parquet"
        if not path.is_file():
            raise SystemExit(f"{folder}: no {split}.parquet")
        table = pq.read_table(path)
        columns: dict[str, np.ndarray] = {}
        for f in fields:
            col = table.column(f.name).combine_chunks()
            if f.kind == MULTI:
                values = col.flatten().to_numpy(zero_copy_only=False).astype(np.int64)
                columns[f.name] = values.reshape(len(col), -1)
            elif f.kind == NUMERIC:
                columns[f.name] = col.to_numpy(zero_copy_only=False).astype(np.float32)
            else:
                columns[f.name] = col.to_numpy(zero_copy_only=False).astype(np.int64)
        label = table.column(out.label).to_numpy().astype(np.float32)
        out.splits[split] = Split(columns, label)
    return out


def batches_of(n: int, batch_size: int) -> list[slice]:
    return [slice(i, min(i + batch_size, n)) for i in range(0, n, batch_size)]


# ----------------------------------------------------------------------------- timing
class StepClock:
    """Collects per-step wall times and sample counts, and the time to leave out.

    A library's loop is timed from outside: :meth:`wrap_loader` wraps its
    training loader so that every hand-over of a batch stamps the clock, and
    :meth:`exclude` wraps any function the loop calls mid-epoch (validation,
    checkpointing) so that its time is taken off the step it fell into.
    """

    def __init__(self) -> None:
        self.steps: list[tuple[int, float, int, int]] = []  # (epoch, seconds, samples, minor page faults)
        self.epoch = -1
        self._last: float | None = None
        self._faults = 0
        self._pending = 0
        self._excluded = 0.0

    # -- driven by a loader wrapper or by callbacks ------------------------------------
    def epoch_start(self) -> None:
        self.epoch += 1
        self._last = None
        self._pending = 0
        self._excluded = 0.0

    def batch(self, samples: int) -> None:
        """A new batch reaches the loop: the previous step, if any, is over."""
        now, faults = time.perf_counter(), minor_page_faults()
        if self._last is not None:
            self.steps.append((self.epoch, now - self._last - self._excluded, self._pending, faults - self._faults))
        self._last, self._pending, self._excluded, self._faults = now, samples, 0.0, faults

    def epoch_end(self) -> None:
        """The epoch's last step is over."""
        sync()  # on a GPU, the epoch's queued steps are done before the clock is read
        if self._last is not None:
            self.steps.append((self.epoch, time.perf_counter() - self._last - self._excluded, self._pending,
                               minor_page_faults() - self._faults))
        self._last = None

    def exclude(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        def timed(*args: Any, **kwargs: Any) -> Any:
            sync()  # the training steps queued before it are not counted as excluded time
            start = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                self._excluded += time.perf_counter() - start

        return timed

    def wrap_loader(self, loader: Any, size: Callable[[Any], int]) -> TimedLoader:
        return TimedLoader(loader, self, size)

    # -- the result --------------------------------------------------------------
    def summary(self) -> dict[str, Any]:
        """Samples/s over the timed steps (see the module docstring for which)."""
        if not self.steps:
            raise RuntimeError("no training step was timed")
        epochs = self.epoch + 1
        if epochs >= 2:
            timed = [s for s in self.steps if s[0] >= 1]
            rule = "epochs 2.." + str(epochs)
        else:
            skip = max(5, len(self.steps) // 10)
            timed = self.steps[skip:] or self.steps[-1:]
            rule = f"epoch 1 after {skip} warm-up steps"
        seconds = sum(s[1] for s in timed)
        samples = sum(s[2] for s in timed)
        per_step = sorted(s[1] for s in timed)
        return {
            "samples_per_s": samples / seconds if seconds > 0 else float("nan"),
            "timed_samples": samples,
            "timed_steps": len(timed),
            "timed_seconds": round(seconds, 3),
            "median_step_ms": round(1000 * per_step[len(per_step) // 2], 3),
            # the process's minor page faults in a timed step (validation's and checkpointing's among them): memory
            # the allocator handed back and the next step faulted in again
            "minor_page_faults_per_step": round(sum(s[3] for s in timed) / len(timed), 1),
            "timed": rule,
        }


def minor_page_faults() -> int:
    """This process's minor page faults so far (0 where the platform does not count them)."""
    try:
        import resource
    except ImportError:  # Windows
        return 0
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def sync() -> None:
    """Wait for queued GPU work: a clock read after it counts the work, not only its launch."""
    import torch

    if torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.synchronize()


class TimedLoader:
    """A training loader that stamps a :class:`StepClock` as the loop takes each batch."""

    def __init__(self, loader: Any, clock: StepClock, size: Callable[[Any], int]) -> None:
        self.loader, self.clock, self.size = loader, clock, size

    def __len__(self) -> int:
        return len(self.loader)

    def __getattr__(self, name: str) -> Any:  # num_samples, batch_size, dataset, ...
        return getattr(self.loader, name)

    def __iter__(self) -> Iterator[Any]:
        self.clock.epoch_start()
        for batch in self.loader:
            self.clock.batch(self.size(batch))
            yield batch
        self.clock.epoch_end()


def time_forward(forward: Callable[[Any], Any], batches: list[tuple[Any, int]], min_seconds: float = 2.0,
                 max_passes: int = 20) -> dict[str, Any]:
    """Inference samples/s of ``forward`` over pre-built ``(input, rows)`` batches.

    One warm-up batch first; then whole passes over the batches until at least
    ``min_seconds`` have gone by (or ``max_passes``).
    """
    import torch

    if not batches:
        raise ValueError("no batches to time")
    with torch.inference_mode():
        forward(batches[0][0])
        sync()  # the warm-up's queued GPU work is not counted in the first timed pass
        rows, seconds, passes = 0, 0.0, 0
        while passes < max_passes and (seconds < min_seconds or passes == 0):
            start = time.perf_counter()
            for inputs, n in batches:
                forward(inputs)
                rows += n
            sync()
            seconds += time.perf_counter() - start
            passes += 1
    return {"samples_per_s": rows / seconds, "rows": rows, "seconds": round(seconds, 3), "passes": passes,
            "batch_size": max(n for _, n in batches)}


# ----------------------------------------------------------------------------- metrics
def auc(labels: np.ndarray, scores: np.ndarray) -> float:
    """ROC AUC by the rank-sum formula, ties given their mean rank."""
    labels = np.asarray(labels, dtype=np.float64).ravel()
    scores = np.asarray(scores, dtype=np.float64).ravel()
    order = np.argsort(scores, kind="mergesort")
    sorted_scores = scores[order]
    ranks = np.empty(len(scores), dtype=np.float64)
    # Mean rank over each run of equal scores.
    boundaries = np.flatnonzero(np.diff(sorted_scores)) + 1
    starts = np.concatenate([[0], boundaries])
    ends = np.concatenate([boundaries, [len(scores)]])
    mean_ranks = (starts + ends + 1) / 2.0
    ranks[order] = np.repeat(mean_ranks, ends - starts)
    positives = labels > 0.5
    n_pos, n_neg = int(positives.sum()), int((~positives).sum())
    if n_pos == 0 or n_neg == 0:
        return float("nan")
    return float((ranks[positives].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg))


def logloss(labels: np.ndarray, probs: np.ndarray, eps: float = 1e-7) -> float:
    labels = np.asarray(labels, dtype=np.float64).ravel()
    p = np.clip(np.asarray(probs, dtype=np.float64).ravel(), eps, 1 - eps)
    return float(-np.mean(labels * np.log(p) + (1 - labels) * np.log(1 - p)))


def quality(labels: np.ndarray, probs: np.ndarray) -> dict[str, float]:
    return {"auc": round(auc(labels, probs), 5), "logloss": round(logloss(labels, probs), 5)}


# ----------------------------------------------------------------------------- run plumbing
def machine() -> dict[str, Any]:
    """The CPU, cores and library versions the numbers were taken on."""
    import torch

    cpu = platform.processor() or "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {
        "cpu": cpu,
        "logical_cores": os.cpu_count(),
        "usable_cores": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
        "torch": torch.__version__,
        "torch_threads": torch.get_num_threads(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        # Other work on the machine slows multi-threaded runs a lot: keep the load with the numbers.
        "load_average_1_5_15": [round(x, 2) for x in os.getloadavg()] if hasattr(os, "getloadavg") else None,
        "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
    }


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def runner_args(description: str) -> argparse.Namespace:
    """The command line every peer runner takes (speed.py passes the same values to all)."""
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--data", type=Path, required=True, help="processed folder (train/valid/test.parquet, schema.json)")
    p.add_argument("--out", type=Path, required=True, help="where to write the JSON result")
    p.add_argument("--epochs", type=int, default=5, help="fixed number of epochs (no early stopping)")
    p.add_argument("--batch-size", type=int, default=1024)
    p.add_argument("--infer-batch-size", type=int, default=4096, help="rows per batch of the timed forward")
    p.add_argument("--predict-batch-size", type=int, default=None,
                   help="batch size of the library's predict call (default: --infer-batch-size); speed.py passes "
                        "the rows per pass autoint's scorer uses, so the predict rows compare equal batches")
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--embedding-dim", type=int, default=16)
    p.add_argument("--num-layers", type=int, default=3)
    p.add_argument("--num-heads", type=int, default=2)
    p.add_argument("--head-dim", type=int, default=32)
    p.add_argument("--threads", type=int, default=2, help="torch.set_num_threads")
    p.add_argument("--seed", type=int, default=2024)
    p.add_argument("--work", type=Path, default=None, help="scratch folder for the library's own files")
    p.add_argument("--bf16", action="store_true", help="run the model's forward under bf16 autocast (default fp32)")
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu", help="where the model trains and scores")
    args = p.parse_args()
    if args.epochs < 1:
        p.error("--epochs must be >= 1")
    if args.device == "cuda":
        import torch

        if not torch.cuda.is_available():
            p.error("--device cuda: torch sees no CUDA device here")
    return args


def setup_torch(threads: int, seed: int) -> None:
    import torch

    torch.set_num_threads(threads)
    torch.manual_seed(seed)
    np.random.seed(seed)  # noqa: NPY002  (the libraries draw from numpy's global RNG)


def autocast_forward(model: Any, bf16: bool, device: str = "cpu") -> str:
    """Run ``model``'s forward under bf16 autocast when asked, whatever loop calls it; returns the precision's name.

    The library's own fit and predict loops stay as they are: only the forward
    they call is wrapped (its output cast back to fp32 for the library's loss),
    which is what Lightning's ``bf16-mixed`` does for autoint.
    """
    if not bf16:
        return "32-true"
    import functools

    import torch

    forward = model.forward

    @functools.wraps(forward)
    def bf16_forward(*args: Any, **kwargs: Any) -> Any:
        with torch.autocast(device, dtype=torch.bfloat16):
            out = forward(*args, **kwargs)
        if isinstance(out, dict):  # FuxiCTR returns {"y_pred": ...}
            return {k: v.float() if torch.is_tensor(v) else v for k, v in out.items()}
        return out.float() if torch.is_tensor(out) else out

    model.forward = bf16_forward
    return "bf16-mixed"


def write_result(path: Path, result: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=2, default=float) + "\n")


def count_parameters(model: Any, embedding_names: Callable[[str], bool]) -> dict[str, int]:
    """Trainable parameters, split into embedding tables and everything else by parameter name."""
    emb = dense = 0
    for name, p in model.named_parameters():
        if not p.requires_grad:
            continue
        if embedding_names(name):
            emb += p.numel()
        else:
            dense += p.numel()
    return {"embedding": emb, "non_embedding": dense, "total": emb + dense}
