"""Speed of autoint against the other AutoInt libraries, measured side by side on one machine.

    bash benchmarks/setup_peers.sh      # once: a venv per peer under benchmarks/.peers/
    .venv/bin/python benchmarks/speed.py --data-dir ../shared/data --peers   # -> benchmarks/results/speed.json

More options::

    --datasets movielens criteo synthetic     # which data sets (default: movielens criteo)
    --synthetic-rows 1000000                  # size of the synthetic Criteo-format log
    --epochs 5 --synthetic-epochs 2           # fixed epochs (no early stopping), same for every library
    --variants fp32 fp32-2x8 bf16             # precision x widths, each run by every library (default:
                                              # fp32 fp32-2x8; see VARIANTS)
    --set model.attention_kernel=sdpa         # overrides to our configs, to compare levers (repeatable)
    --peers fuxictr deepctr                   # only some peers (no names: all three)
    --diagnose                                # also: a bare PyTorch loop over our model and a
                                              # torch.profiler table of our training steps
    --omp-wait-policy passive                 # OMP_WAIT_POLICY for every library; on a busy shared
                                              # machine OpenMP's spin-waiting slows 2-thread runs a lot
    --median-of r1.json r2.json r3.json       # no measuring: the medians of several runs, to --out
    --device cuda                             # train and score on a GPU (of the peers, FuxiCTR only)
    --prepare-only / --reuse-prepared         # prepare the folders here, train on them elsewhere (a GPU
                                              # machine without DuckDB or the raw logs): gpu_speed.sh
    --peer-python PATH                        # one Python for every peer instead of their venvs

Like for like: every *variant* (``VARIANTS``: a precision and the attention
widths) is run by autoint and by every peer in the same run, on the same encoded
split, for the same fixed epochs, and ratios are only taken within a variant:
fp32 against fp32 at the paper's widths (D = 16, 3 interacting layers, 2 heads x
32, batch 1024, Adam lr 1e-3), fp32 at the width the peers that tie a head to the
embedding size use (2 heads x 8), and, as rows apart, bf16 autocast around every
library's forward (``--bf16`` of the peer runners). For each data set and variant
it measures, with ``torch.set_num_threads(--threads)`` (2):

* **preprocessing**: ``autoint.preprocess.prepare`` on the raw log in a fresh
  subprocess: raw rows/s and the subprocess's peak RSS (``ru_maxrss``);
* **training samples/s** through the real training path: ``lightning.Trainer.fit``
  over our ``CTRSystem`` and ``CTRDataModule``, with the Trainer settings of
  ``autoint.train.train`` (validation every epoch; no checkpointing, early stopping
  or MLflow, which run between epochs and are not timed anyway). A callback times
  every step from one batch hand-over to the next, excluding the first epoch
  (start-up) and everything between epochs (see ``benchmarks/peers/common.py``);
* **inference samples/s**: the model's forward on encoded batches of 4096 rows
  under ``torch.inference_mode``; ``Scorer.score_tensors`` (encoded rows in,
  probabilities out: the counterpart of the peers' ``predict``); and
  ``Scorer.score_frame`` on a raw DataFrame (encoding included: the ``autoint
  predict`` path);
* **test AUC and logloss** of the weights after the last epoch (fixed epochs for
  every library, no early stopping), computed by the same numpy code for all.

``--peers`` runs ``benchmarks/peers/run_{deepctr,fuxictr,rechub}.py`` in their own
venvs on the very processed folder ours trained on, one after another in the same
run, and reports ours / peer ratios. Results: one JSON file (``--out``) and a
Markdown table on stdout, with the machine described.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
PEERS_DIR = HERE / "peers"
sys.path[:0] = [str(PEERS_DIR), str(HERE)]

import common  # noqa: E402  (benchmarks/peers/common.py: shared with the peer runners)
import quality  # noqa: E402  (a sibling script)

PEERS = ("deepctr", "fuxictr", "rechub")
INFER_ROWS = 200_000
RAW_SCORE_ROWS = 50_000


@dataclass(frozen=True)
class Variant:
    label: str
    overrides: tuple[str, ...]  # to our config; the peers get the same widths and precision
    bf16: bool


VARIANTS = {
    "fp32": Variant("fp32, paper widths (2 heads x 32)", ("train.precision=32-true",), False),
    "fp32-2x8": Variant("fp32, the peers' widths (2 heads x 8)", ("train.precision=32-true", "model.head_dim=8"),
                        False),
    "bf16": Variant("bf16 autocast, paper widths (2 heads x 32)", ("train.precision=bf16-mixed",), True),
}


@dataclass(frozen=True)
class Dataset:
    name: str
    config: str
    raw: str | None  # path under --data-dir; None: generated
    description: str
    pinned: tuple[str, ...] = ()  # overrides that hold the benchmarked job fixed when the shipped config is tuned


# configs/movielens.yaml was tuned (benchmarks/tune_shipped.py); the speed table keeps the paper's widths and
# the settings it was measured with before, so its rows stay comparable. The paper's unscaled attention, as the
# FuxiCTR runner's (use_scale=False): the tuned config's scale_attention: true was not pinned away until
# 2026-11-27, so speed_movielens.json's rows ran with the scale (README, Speed).
MOVIELENS_PAPER = ("model.embedding_dim=16", "model.num_layers=3", "model.num_heads=2", "model.head_dim=32",
                   "model.first_order=false", "model.attention_dropout=0.0", "model.scale_attention=false",
                   "train.batch_size=1024", "train.lr=0.0005", "train.embedding_weight_decay=0.0003")
CRITEO_PAPER = quality.CRITEO_PAPER_TRANSFORM  # the paper's numeric fields, as the peers take them


DATASETS = {
    "movielens": Dataset("movielens", "configs/movielens.yaml", "movielens_100k",
                         "MovieLens 100K, the paper's task (rating > 3 vs < 3), ids included", MOVIELENS_PAPER),
    "criteo": Dataset("criteo", "configs/criteo.yaml", "criteo_kaggle_head10k/train.txt",
                      "Criteo Kaggle, first 10k rows (13 numeric + 26 categorical fields)", CRITEO_PAPER),
    "synthetic": Dataset("synthetic", "configs/criteo.yaml", None,
                         "synthetic Criteo-format log (benchmarks/prepare_scale.py's generator)", CRITEO_PAPER),
}


# ----------------------------------------------------------------------------- preprocessing
_PREPARE_CHILD = """
import json, resource, sys, time
from autoint.config import load_config
from autoint.preprocess import prepare
cfg = load_config(sys.argv[1], json.loads(sys.argv[4]))
t0 = time.perf_counter()
report = prepare(cfg, sys.argv[2], sys.argv[3], progress=False)
print(json.dumps({"wall_s": time.perf_counter() - t0, "rows_seen": report["rows_seen"], "rows": report["rows"],
                  "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


def run_prepare(config: Path, raw: Path, out: Path, overrides: list[str]) -> dict[str, Any]:
    """``prepare`` in a fresh subprocess: wall time, rows/s and peak RSS."""
    if (out / "schema.json").exists():
        import shutil

        shutil.rmtree(out)
    proc = subprocess.run([sys.executable, "-c", _PREPARE_CHILD, str(config), str(raw), str(out),
                           json.dumps(overrides)], capture_output=True, text=True, check=False, cwd=ROOT)
    if proc.returncode != 0:
        raise SystemExit(f"prepare failed on {raw}:\n{proc.stderr[-3000:]}")
    child = json.loads(proc.stdout.strip().splitlines()[-1])
    return {
        "raw_rows": child["rows_seen"],
        "rows": child["rows"],
        "seconds": round(child["wall_s"], 2),
        "rows_per_s": child["rows_seen"] / child["wall_s"],
        "peak_rss_mb": round(child["peak_rss_mb"], 1),
    }


def synthetic_raw(work: Path, rows: int) -> Path:
    """The synthetic Criteo-format log of ``rows`` rows, generated once into the work folder."""
    from criteo_like import write as write_criteo

    path = work / f"synthetic_criteo_{rows}.txt"
    if not path.is_file():
        tmp = path.with_suffix(".partial")
        print(f"generating {rows:,} synthetic Criteo rows -> {path}", file=sys.stderr, flush=True)
        write_criteo(tmp, rows)
        tmp.rename(path)
    return path


# ----------------------------------------------------------------------------- ours
def _step_clock_callback(clock: common.StepClock) -> Any:
    """A Lightning callback that drives a :class:`common.StepClock` from the fit loop's hooks."""
    from lightning.pytorch.callbacks import Callback

    class StepTimer(Callback):
        def on_train_epoch_start(self, trainer: Any, pl_module: Any) -> None:
            clock.epoch_start()

        def on_train_batch_start(self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int) -> None:
            clock.batch(len(batch["label"]))

        def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
            if batch_idx + 1 == trainer.num_training_batches:
                clock.epoch_end()

    return StepTimer()


def _profiler_callback(start_step: int, steps: int, out: dict[str, Any]) -> Any:
    """Profiles ``steps`` training steps of the fit loop from ``start_step`` with torch.profiler."""
    import torch
    from lightning.pytorch.callbacks import Callback

    class StepProfiler(Callback):
        def __init__(self) -> None:
            self.prof: torch.profiler.profile | None = None
            self.seen = 0

        def on_train_batch_start(self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int) -> None:
            if self.seen == start_step:
                self.prof = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU])
                self.prof.__enter__()
                self.started = time.perf_counter()
            if self.seen == start_step + steps and self.prof is not None:
                self._stop()
            self.seen += 1

        def on_train_epoch_end(self, trainer: Any, pl_module: Any) -> None:
            if self.prof is not None and "table" not in out:
                self._stop()

        def _stop(self) -> None:
            assert self.prof is not None
            elapsed = time.perf_counter() - self.started
            self.prof.__exit__(None, None, None)
            averages = self.prof.key_averages()
            out["steps"] = self.seen - start_step
            out["wall_ms_per_step"] = round(1000 * elapsed / max(out["steps"], 1), 3)
            out["table"] = averages.table(sort_by="self_cpu_time_total", row_limit=30)
            self.prof = None

    return StepProfiler()


def _autocast(precision: str, device: str = "cpu") -> Any:
    import contextlib

    import torch

    if "bf16" in precision:
        return torch.autocast(device, dtype=torch.bfloat16)
    return contextlib.nullcontext()


def _on(model: Any, device: str) -> Any:
    """``model``'s forward on batches held in CPU memory, each copied to ``device`` first (as a peer's forward
    copies its batches): the timed inference counts the copy on a GPU."""
    if device == "cpu":
        return model
    return lambda batch: model({k: v.to(device, non_blocking=True) for k, v in batch.items()})


def run_ours(ds: Dataset, processed: Path, overrides: list[str], epochs: int, threads: int,
             diagnose: bool, device: str = "cpu") -> dict[str, Any]:
    import lightning as L
    import torch

    from autoint.config import load_config, resolve_precision
    from autoint.data import data_module, read_split
    from autoint.datasets.errors import DataError
    from autoint.encoder import Encoder
    from autoint.predict import Scorer, raw_example
    from autoint.system import CTRSystem

    cfg = load_config(ROOT / ds.config, [*overrides, f"train.accelerator={'gpu' if device == 'cuda' else 'cpu'}"])
    precision = resolve_precision(cfg.train.precision, cfg.train.accelerator)
    torch.set_num_threads(threads)
    L.seed_everything(cfg.train.seed, workers=True, verbose=False)
    dm = data_module(cfg, processed)
    encoder = Encoder.folder_state(processed) if (processed / "encoder.json").is_file() else None
    system = CTRSystem(cfg.to_dict(), dm.schema.to_dict(), encoder)

    clock = common.StepClock()
    callbacks = [_step_clock_callback(clock)]
    profile: dict[str, Any] = {}
    if diagnose:
        callbacks.append(_profiler_callback(start_step=max(3, len_batches(processed, cfg.train.batch_size)),
                                            steps=20, out=profile))
    trainer = L.Trainer(
        max_epochs=epochs, accelerator=cfg.train.accelerator, devices=1, precision=precision,
        deterministic=cfg.train.deterministic, logger=False, callbacks=callbacks, enable_checkpointing=False,
        enable_progress_bar=False, enable_model_summary=False, num_sanity_val_steps=0,
        use_distributed_sampler=False, default_root_dir=tempfile.gettempdir(),
    )
    started = time.perf_counter()
    trainer.fit(system, dm)
    fit_seconds = time.perf_counter() - started

    model = system.model.eval().to("cuda" if device == "cuda" else "cpu")  # fit's teardown leaves it on the CPU
    train, test = (read_split(processed / f"{s}.parquet", dm.schema) for s in ("train", "test"))
    n = min(len(train["label"]), INFER_ROWS)
    inputs = {k: v[:n] for k, v in train.items() if k != "label"}
    batches = [({k: v[s] for k, v in inputs.items()}, s.stop - s.start)
               for s in common.batches_of(n, 4096)]
    with _autocast(precision, device):
        forward = common.time_forward(_on(model, device), batches)
        # The scorer's own rows per pass (AutoInt.rows_per_pass on a CPU); the peers' predict
        # calls get the same batch size (run_peer), so the predict rows compare equal batches.
        scorer = Scorer(model, cfg, dm.schema, encoder, precision="bf16" if "bf16" in precision else "32")
        start = time.perf_counter()
        scorer.score_tensors(inputs)
        score_tensors_s = time.perf_counter() - start
        probs = scorer.score_tensors({k: v for k, v in test.items() if k != "label"})
        try:
            raw = raw_example(processed, rows=RAW_SCORE_ROWS)
        except DataError as e:  # the raw log is not on this machine (--reuse-prepared elsewhere)
            raw_rows: dict[str, Any] = {"error": f"not measured: {e}"}
        else:
            scorer.score_frame(raw.head(100))
            start = time.perf_counter()
            scorer.score_frame(raw)
            raw_rows = {"samples_per_s": len(raw) / (time.perf_counter() - start), "rows": len(raw),
                        "api": "Scorer.score_frame (encoding included)"}

    from autoint.model import count_parameters

    result: dict[str, Any] = {
        "library": "autoint",
        "model": "autoint.model.AutoInt via CTRSystem + CTRDataModule + lightning.Trainer.fit",
        "config": ds.config,
        "overrides": overrides,
        "widths": {"embedding_dim": cfg.model.embedding_dim, "num_layers": cfg.model.num_layers,
                   "num_heads": cfg.model.num_heads, "head_dim": cfg.model.head_dim,
                   "attention_out_per_field": cfg.model.num_heads * cfg.model.head_dim,
                   "batch_size": cfg.train.batch_size},
        "precision": precision,
        "device": device,
        "deterministic": cfg.train.deterministic,
        "loop": "lightning.Trainer.fit: BatchLoader index slicing; per step forward, BCE on logits, "
                "self.log(train_loss, on_step and on_epoch), backward, Adam; validation each epoch",
        "epochs": epochs,
        "rows": {s: v.num_rows for s, v in dm.splits.items()},
        "fields": len(dm.schema),
        "parameters": count_parameters(model),
        "train": {**clock.summary(), "fit_seconds": round(fit_seconds, 2)},
        "infer_forward": forward,
        "infer_predict": {"samples_per_s": n / score_tensors_s, "rows": n, "batch_size": scorer.batch_size,
                          "api": "Scorer.score_tensors (its default batch: AutoInt.rows_per_pass on a CPU, 8192 on "
                                 "a GPU; CPU tensors in, numpy out)"},
        "infer_raw_rows": raw_rows,
        "test": common.quality(test["label"].numpy(), probs),
        "load_average_1_5_15": [round(x, 2) for x in os.getloadavg()],
    }
    if diagnose:
        result["bare_loop"] = bare_loop(cfg, dm, epochs=min(epochs, 2))
        result["profile"] = profile
        result["pieces"] = pieces(model, inputs, cfg)
    return result


def pieces(model: Any, inputs: dict[str, Any], cfg: Any, sizes: tuple[int, ...] = (128, 256, 512, 1024, 2048, 4096,
                                                                                   8192)) -> dict[str, Any]:
    """Rows per forward pass against speed: inference samples/s at each size (median of 5 interleaved
    passes over the same rows) and a training step of ``train.batch_size`` rows run in pieces of each
    size up to it; what ``AutoInt.rows_per_pass`` (``train.forward_rows: auto``) is chosen from."""
    import statistics

    import torch
    import torch.nn.functional as F

    from autoint.config import TrainConfig
    from autoint.model import AutoInt
    from autoint.system import make_optimizer

    n = min(len(next(iter(inputs.values()))), 32_768)
    rows = {k: v[:n] for k, v in inputs.items()}
    infer: dict[int, list[float]] = {size: [] for size in sizes}
    with torch.inference_mode():
        for _ in range(5):
            for size in sizes:
                start = time.perf_counter()
                for s in range(0, n, size):
                    model({k: v[s:s + size] for k, v in rows.items()})
                infer[size].append(n / (time.perf_counter() - start))
    batch = cfg.train.batch_size
    step_sizes = [s for s in sizes if s <= batch]
    steps: dict[int, list[float]] = {size: [] for size in step_sizes}
    labels = torch.rand(n) < 0.25
    for _ in range(3):
        for size in step_sizes:
            torch.manual_seed(0)
            trained = AutoInt(model.schema, cfg.model).train()
            opt = make_optimizer(trained, TrainConfig(optimizer="adam"))
            times = []
            for i, s0 in enumerate(range(0, n - batch + 1, batch)):
                part = {k: v[s0:s0 + batch] for k, v in rows.items()}
                y = labels[s0:s0 + batch].float()
                start = time.perf_counter()
                opt.zero_grad()
                logits = torch.cat([trained({k: v[s:s + size] for k, v in part.items()})
                                    for s in range(0, batch, size)])
                F.binary_cross_entropy_with_logits(logits, y).backward()
                opt.step()
                if i >= 2:
                    times.append(time.perf_counter() - start)
            steps[size].append(batch / statistics.median(times))
    return {"rows_per_pass_auto": model.rows_per_pass(),
            "inference_samples_per_s": {str(k): round(statistics.median(v)) for k, v in infer.items()},
            "training_samples_per_s": {str(k): round(statistics.median(v)) for k, v in steps.items()},
            "how": f"{n} rows; inference: 5 interleaved passes per size, median; training: steps of "
                   f"{batch} rows (fp32, Adam) with the batch run in pieces of each size, 3 rounds, median"}


def len_batches(processed: Path, batch_size: int) -> int:
    """Training batches per epoch, from the split's Parquet metadata."""
    import pyarrow.parquet as pq

    rows = pq.ParquetFile(processed / "train.parquet").metadata.num_rows
    return -(-rows // batch_size)


def bare_loop(cfg: Any, dm: Any, epochs: int) -> dict[str, Any]:
    """Our model and optimiser in a plain PyTorch loop over the same batches: what Lightning adds."""
    import torch
    import torch.nn.functional as F

    from autoint.config import resolve_precision
    from autoint.data import SplitLoader
    from autoint.model import AutoInt

    precision = resolve_precision(cfg.train.precision, cfg.train.accelerator)

    torch.manual_seed(cfg.train.seed)
    model = AutoInt(dm.schema, cfg.model).train()
    opt = torch.optim.Adam([
        {"params": model.dense_parameters(), "weight_decay": cfg.train.weight_decay},
        {"params": model.embedding_parameters(), "weight_decay": cfg.train.embedding_weight_decay},
    ], lr=cfg.train.lr)
    epoch = [0]
    loader = SplitLoader(dm.splits["train"], cfg.train.batch_size, shuffle=True, seed=cfg.train.seed,
                         epoch_fn=lambda: epoch[0], shuffle_buffer=cfg.train.shuffle_buffer)
    clock = common.StepClock()
    timed = clock.wrap_loader(loader, size=lambda b: len(b["label"]))
    for e in range(epochs):
        epoch[0] = e
        for batch in timed:
            with _autocast(precision):
                logits = model(batch)
            loss = F.binary_cross_entropy_with_logits(logits.float(), batch["label"])
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
    return clock.summary()


# ----------------------------------------------------------------------------- peers
def run_peer(name: str, processed: Path, out: Path, cfg: Any, epochs: int, threads: int,
             timeout: float, bf16: bool = False, predict_batch: int = 4096, device: str = "cpu",
             python: Path | None = None) -> dict[str, Any]:
    """One peer runner in its own venv (or ``python``); its JSON result, or ``{"error": ...}``."""
    python = python or HERE / ".peers" / name / "bin" / "python"
    if not python.is_file():
        return {"library": name, "error": f"no venv at {python.parent.parent}; run `bash benchmarks/setup_peers.sh`"}
    cmd = [str(python), str(PEERS_DIR / f"run_{name}.py"), "--data", str(processed), "--out", str(out),
           "--epochs", str(epochs), "--batch-size", str(cfg.train.batch_size), "--lr", str(cfg.train.lr),
           "--embedding-dim", str(cfg.model.embedding_dim), "--num-layers", str(cfg.model.num_layers),
           "--num-heads", str(cfg.model.num_heads), "--head-dim", str(cfg.model.head_dim),
           "--threads", str(threads), "--seed", str(cfg.train.seed), "--work", str(out.parent / f"{name}_work"),
           "--predict-batch-size", str(predict_batch), "--device", device, *(["--bf16"] if bf16 else [])]
    log = out.with_suffix(".log")
    started = time.perf_counter()
    try:
        with open(log, "w") as fh:
            proc = subprocess.run(cmd, stdout=fh, stderr=subprocess.STDOUT, timeout=timeout, check=False,
                                  env={**os.environ, "PYTHONUNBUFFERED": "1", "TQDM_DISABLE": "1"})
    except subprocess.TimeoutExpired:
        return {"library": name, "error": f"timed out after {timeout:.0f} s (log: {log})"}
    if proc.returncode != 0 or not out.is_file():
        tail = log.read_text(errors="replace")[-1500:]
        return {"library": name, "error": f"exit {proc.returncode} (log: {log}):\n{tail}"}
    result = json.loads(out.read_text())
    result["wall_seconds"] = round(time.perf_counter() - started, 1)
    return result


def ratios(ours: dict[str, Any], peer: dict[str, Any]) -> dict[str, float]:
    """ours / peer samples/s, only where the two ran at the same widths and precision (like for like)."""
    keys = ("embedding_dim", "num_layers", "num_heads", "head_dim")
    if ([ours["widths"].get(k) for k in keys] != [peer.get("widths", {}).get(k) for k in keys]
            or ours.get("precision") != peer.get("precision", "32-true")
            or ours.get("device", "cpu") != peer.get("device", "cpu")):
        return {}
    out = {}
    for key in ("train", "infer_forward", "infer_predict"):
        a, b = ours.get(key, {}).get("samples_per_s"), peer.get(key, {}).get("samples_per_s")
        if a and b:
            out[key] = round(a / b, 2)
    return out


# ----------------------------------------------------------------------------- report
def _k(x: float | None) -> str:
    if x is None:
        return "–"
    return f"{x / 1000:.1f}k" if x >= 1000 else f"{x:.0f}"


def markdown(report: dict[str, Any]) -> str:
    m = report["machine"]
    gpu = f"; on {m['gpu']}" if report["settings"].get("device", "cpu") == "cuda" else ""
    lines = [
        f"Machine: {m['cpu']}, {m['usable_cores']} usable cores, torch {m['torch']}, "
        f"{report['settings']['threads']} torch threads; Python {m['python']}{gpu}.",
        f"Settings: {report['settings']['summary']}",
        "",
        "| data set | precision, widths | library | train samples/s | forward samples/s (4096) "
        "| predict API samples/s | test AUC | train: ours / peer | predict: ours / peer |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for name, ds in report["datasets"].items():
        for variant in ds["variants"].values():
            for r in [variant["ours"], *variant.get("peers", {}).values()]:
                lib = r.get("library", "?")
                if "error" in r:
                    lines.append(f"| {name} | {variant['label']} | {lib} | error: {r['error'].splitlines()[0]} "
                                 "| | | | | |")
                    continue
                rt = variant.get("ratios", {}).get(lib, {})
                lines.append(
                    f"| {name} | {variant['label']} | {lib} {r.get('version', '')}".rstrip() + " | "
                    f"{_k(r['train']['samples_per_s'])} | {_k(r['infer_forward']['samples_per_s'])} | "
                    f"{_k(r['infer_predict']['samples_per_s'])} | {r['test']['auc']:.4f} | "
                    f"{'×' + str(rt['train']) if 'train' in rt else ''} | "
                    f"{'×' + str(rt['infer_predict']) if 'infer_predict' in rt else ''} |")
    lines += ["", "| data set | raw rows | prepare s | prepare rows/s | prepare peak RSS |", "|---|---|---|---|---|"]
    for name, ds in report["datasets"].items():
        p = ds["prepare"]
        if p is None:
            lines.append(f"| {name} | not measured: the folder prepared by an earlier run was used "
                         "(--reuse-prepared) | | | |")
            continue
        lines.append(f"| {name} | {p['raw_rows']:,} | {p['seconds']} | {_k(p['rows_per_s'])} | "
                     f"{p['peak_rss_mb']:.0f} MB |")
    diag = [(n, v["label"], v["ours"]) for n, ds in report["datasets"].items() for v in ds["variants"].values()
            if "bare_loop" in v["ours"]]
    if diag:
        lines += ["", "| data set | variant | ours via Lightning samples/s | same model, bare PyTorch loop samples/s |",
                  "|---|---|---|---|"]
        for n, label, o in diag:
            lines.append(f"| {n} | {label} | {_k(o['train']['samples_per_s'])} | "
                         f"{_k(o['bare_loop']['samples_per_s'])} |")
    return "\n".join(lines)


def median_report(paths: list[Path], command: str | None = None) -> dict[str, Any]:
    """Several runs' results files → one report of the same shape whose samples/s (and training's median step
    time) are each figure's median over the runs (ratios taken between medians), with every run's figures
    beside them; ``command`` (the ``--median-of`` call) as its command, the runs' own under ``run_commands``."""
    import copy
    import statistics

    runs = [json.loads(Path(p).read_text()) for p in paths]
    out = copy.deepcopy(runs[0])
    out["settings"]["median_of"] = [str(p) for p in paths]
    out["settings"]["run_commands"] = [run["settings"].get("command") for run in runs]
    if command is not None:
        out["settings"]["command"] = command
    out["settings"]["summary"] += f"; medians of {len(runs)} runs"
    for name, ds in out["datasets"].items():
        for vname, variant in ds["variants"].items():
            libs = [("ours", variant["ours"]), *variant.get("peers", {}).items()]
            for key, r in libs:
                if "error" in r:
                    continue
                others = [run["datasets"][name]["variants"][vname] for run in runs]
                got = [o["ours"] if key == "ours" else o["peers"].get(key, {}) for o in others]
                for part in ("train", "infer_forward", "infer_predict"):
                    values = [g[part]["samples_per_s"] for g in got if part in g]
                    r[part]["samples_per_s"] = statistics.median(values)
                    r[part]["runs_samples_per_s"] = [round(v) for v in values]
                for field in ("median_step_ms", "minor_page_faults_per_step"):
                    per_run = [g["train"][field] for g in got if field in g.get("train", {})]
                    if per_run:  # (it was run 1's, beside medians of the rest)
                        r["train"][field] = statistics.median(per_run)
                        r["train"][f"runs_{field}"] = per_run
                if "pieces" in r:  # --diagnose: samples/s at each piece size, over the runs that timed them
                    for kind in ("inference_samples_per_s", "training_samples_per_s"):
                        per_size = {size: [g["pieces"][kind][size] for g in got if size in g.get("pieces", {})
                                           .get(kind, {})] for size in r["pieces"][kind]}
                        r["pieces"][kind] = {size: statistics.median(v) for size, v in per_size.items()}
                        r["pieces"][f"runs_{kind}"] = per_size
            variant["ratios"] = {lib: ratios(variant["ours"], r) for lib, r in variant.get("peers", {}).items()
                                 if "error" not in r}
            variant["ratios_per_run"] = {lib: [run["datasets"][name]["variants"][vname].get("ratios", {}).get(lib)
                                               for run in runs] for lib in variant["ratios"]}
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data-dir", type=Path, default=os.environ.get("AUTOINT_DATA_DIR"),
                   help="folder holding movielens_100k/ and criteo_kaggle_head10k/ (or AUTOINT_DATA_DIR)")
    p.add_argument("--datasets", nargs="+", choices=sorted(DATASETS), default=["movielens", "criteo"])
    p.add_argument("--synthetic-rows", type=int, default=1_000_000)
    p.add_argument("--epochs", type=int, default=5, help="fixed epochs for every library (default 5)")
    p.add_argument("--synthetic-epochs", type=int, default=2, help="fixed epochs on the synthetic set (default 2)")
    p.add_argument("--variants", nargs="+", choices=sorted(VARIANTS), default=["fp32", "fp32-2x8"],
                   help="precision x widths, each run by every library (default: fp32 fp32-2x8)")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="override our config after the variant's settings, e.g. model.attention_kernel=sdpa "
                        "(repeatable)")
    p.add_argument("--peers", nargs="*", choices=PEERS, default=None,
                   help="also run the peers (all three when no name is given)")
    p.add_argument("--threads", type=int, default=2, help="torch.set_num_threads for every library (default 2)")
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu",
                   help="where every library trains and scores (default cpu; of the peers only FuxiCTR runs on cuda)")
    p.add_argument("--peer-python", type=Path, default=None,
                   help="the Python that runs every peer (default: its venv under benchmarks/.peers/)")
    p.add_argument("--prepare-only", action="store_true",
                   help="only prepare each data set's processed folder under --work, then stop")
    p.add_argument("--reuse-prepared", action="store_true",
                   help="train on the processed folders an earlier run (--prepare-only) left under --work, "
                        "without preparing again (for a machine without the preprocessing engine); "
                        "preprocessing is then not measured")
    p.add_argument("--diagnose", action="store_true",
                   help="also time a bare PyTorch loop over our model and profile 20 of our training steps")
    p.add_argument("--omp-wait-policy", choices=["passive", "active"], default=None,
                   help="set OMP_WAIT_POLICY for ours and the peers (default: inherit the environment)")
    p.add_argument("--peer-timeout", type=float, default=3600, help="seconds per peer run (default 3600)")
    p.add_argument("--work", type=Path, default=HERE / ".peers" / "_work",
                   help="scratch folder: processed data, peer logs, the synthetic log "
                        "(default benchmarks/.peers/_work)")
    p.add_argument("--out", type=Path, default=HERE / "results" / "speed.json",
                   help="write the JSON report here (default benchmarks/results/speed.json)")
    p.add_argument("--median-of", nargs="+", type=Path, default=None, metavar="RESULTS",
                   help="measure nothing: write to --out the medians of these runs' results files (same settings)")
    args = p.parse_args(argv)
    if args.median_of:
        report = median_report(args.median_of, " ".join(["python", "benchmarks/speed.py", *sys.argv[1:]]))
        common.write_result(args.out, report)
        print(markdown(report))
        return 0

    needs_real = [d for d in args.datasets if DATASETS[d].raw is not None]
    if needs_real and not args.reuse_prepared and (args.data_dir is None or not Path(args.data_dir).is_dir()):
        p.error(f"--data-dir (or AUTOINT_DATA_DIR) must name the shared data folder for {needs_real}")
    if args.epochs < 1 or args.synthetic_epochs < 1:
        p.error("--epochs and --synthetic-epochs must be >= 1")
    if args.prepare_only and args.reuse_prepared:
        p.error("--prepare-only and --reuse-prepared exclude each other")
    peers = list(PEERS) if args.peers == [] else (args.peers or [])
    if args.omp_wait_policy and os.environ.get("OMP_WAIT_POLICY", "").lower() != args.omp_wait_policy:
        # OpenMP reads it once at start-up: start again with it set (peers inherit it).
        os.environ["OMP_WAIT_POLICY"] = args.omp_wait_policy
        os.execv(sys.executable, [sys.executable, *sys.argv])

    import torch

    from autoint.config import ConfigError, load_config

    if args.device == "cuda" and not torch.cuda.is_available():
        p.error("--device cuda: torch sees no CUDA device here")
    torch.set_num_threads(args.threads)
    args.work.mkdir(parents=True, exist_ok=True)
    settings = (f"fixed epochs ({args.epochs}; synthetic {args.synthetic_epochs}), final weights tested; "
                f"training timed after the first epoch; inference batch 4096 over up to {INFER_ROWS:,} "
                f"training rows; variants: {args.variants}; our overrides: {args.overrides or 'none'}; "
                f"OMP_WAIT_POLICY={os.environ.get('OMP_WAIT_POLICY', '(unset)')}")
    report: dict[str, Any] = {
        "machine": common.machine(),
        "settings": {"threads": args.threads, "epochs": args.epochs, "synthetic_epochs": args.synthetic_epochs,
                     "synthetic_rows": args.synthetic_rows, "overrides": args.overrides, "peers": peers,
                     "variants": {v: {"label": VARIANTS[v].label, "overrides": list(VARIANTS[v].overrides),
                                      "bf16": VARIANTS[v].bf16} for v in args.variants},
                     "command": " ".join(["python", "benchmarks/speed.py", *sys.argv[1:]]),
                     "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY", "(unset)"), "device": args.device,
                     "summary": settings},
        "datasets": {},
    }
    for name in args.datasets:
        ds = DATASETS[name]
        try:  # every variant's config, before any minute is spent
            for vname in args.variants:
                load_config(ROOT / ds.config, [*ds.pinned, *VARIANTS[vname].overrides, *args.overrides])
        except ConfigError as e:
            p.error(str(e))
        epochs = args.synthetic_epochs if name == "synthetic" else args.epochs
        folder = args.work / name
        processed = folder / "processed"
        if args.reuse_prepared:
            if not (processed / "schema.json").is_file():
                p.error(f"--reuse-prepared: no processed folder at {processed}; make one with --prepare-only")
            prepared = None
        else:
            raw = synthetic_raw(args.work, args.synthetic_rows) if ds.raw is None else Path(args.data_dir) / ds.raw
            if not raw.exists():
                raise SystemExit(f"{name}: raw data not found at {raw}")
            folder.mkdir(parents=True, exist_ok=True)
            print(f"[{name}] prepare {raw}", file=sys.stderr, flush=True)
            prepared = run_prepare(ROOT / ds.config, raw, processed, [*ds.pinned, *args.overrides])
            if args.prepare_only:
                print(f"[{name}] prepared in {prepared['seconds']} s: {processed}", file=sys.stderr, flush=True)
                continue
        entry: dict[str, Any] = {"description": ds.description, "epochs": epochs, "prepare": prepared}
        entry["variants"] = {}
        for vname in args.variants:
            variant = VARIANTS[vname]
            overrides = [*ds.pinned, *variant.overrides, *args.overrides]
            vcfg = load_config(ROOT / ds.config, overrides)  # the peers take its widths, batch size, lr, seed
            print(f"[{name}] {vname}: ours, {epochs} epochs", file=sys.stderr, flush=True)
            v: dict[str, Any] = {"label": variant.label,
                                 "ours": run_ours(ds, processed, overrides, epochs, args.threads, args.diagnose,
                                                  args.device),
                                 "peers": {}, "ratios": {}}
            for peer in peers:
                print(f"[{name}] {vname}: {peer}, {epochs} epochs", file=sys.stderr, flush=True)
                result = run_peer(peer, processed, folder / f"{peer}_{vname}.json", vcfg, epochs, args.threads,
                                  args.peer_timeout, bf16=variant.bf16,
                                  predict_batch=v["ours"]["infer_predict"]["batch_size"], device=args.device,
                                  python=args.peer_python)
                lib = result.get("library", peer)
                v["peers"][lib] = result
                if "error" not in result:
                    v["ratios"][lib] = ratios(v["ours"], result)
                else:
                    print(f"[{name}] {peer} failed: {result['error']}", file=sys.stderr, flush=True)
            entry["variants"][vname] = v
        report["datasets"][name] = entry
        if args.out:  # keep what is done so far, in case a later data set fails
            common.write_result(args.out, report)

    if args.prepare_only:
        return 0
    for name, ds_entry in report["datasets"].items():
        for vname, v in ds_entry["variants"].items():
            profile = v["ours"].get("profile")
            if profile and profile.get("table"):
                print(f"\n[{name}, {vname}] torch.profiler over {profile['steps']} of our training steps "
                      f"({profile['wall_ms_per_step']} ms/step under the profiler):\n{profile['table']}",
                      file=sys.stderr)
    if args.out:
        common.write_result(args.out, report)
    print(markdown(report))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
