"""How ``autoint train`` scales with the log and the vocabulary: memory, DDP ranks, streaming, sparse updates.

Every measurement runs in a fresh subprocess (peak RSS is the child's own),
on this machine's CPU, fp32, paper widths (D = 16, 3 layers, 2 heads × 32),
batch 1024:

* ``rss``: peak RSS of ``autoint.train.train`` (the ``autoint train`` code
  path: data module, Trainer, checkpoints, MLflow, the logged pyfunc model) on
  processed folders of Criteo-like logs (``criteo_like.py`` + ``prepare`` with
  ``configs/criteo.yaml`` data settings, random split, the paper's numeric transform) of ``--rows`` rows. The
  run is cut to ``--steps`` training steps and ``--eval-batches`` validation /
  test batches (``trainer_options``): the streamed loader's memory does not
  grow with the steps, and a full epoch at 30M rows would take hours here.
* ``ddp``: the same at ``--ddp-rows`` on two CPU processes (``strategy: ddp``);
  each rank's peak RSS, with the default optimizer and with dense Adam.
* ``stream``: training samples/s at ``--stream-rows`` rows, two full epochs,
  streamed (``train.in_memory_mb: 0``) against held in memory (the decoded row
  groups kept after the first read); the second epoch's rate.
* ``loader``: the streamed loader alone (no model) over ``--ddp-rows``' train
  split: rows/s and the time to decode one row group.
* ``vocab``: training samples/s on an encoded split of ``--vocab-rows`` rows whose
  26 categorical fields hold 50k to 5M values in all (Zipf-like ids), with dense
  Adam and with ``sparse_adam``, and with the default ``auto`` at 50k and 5M (the
  rows behind ``autoint.system.AUTO_SPARSE_ROWS``).

    python benchmarks/train_scale.py --workdir /tmp/bench

Results go to ``benchmarks/results/train_scale.json``; a run of some ``--parts``
keeps the others' figures and names the command behind each part.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

import bench_results  # noqa: E402
import criteo_like  # noqa: E402
import quality  # noqa: E402  (the paper's Criteo transform, as measured)

PAPER = ["model.embedding_dim=16", "model.num_layers=3", "model.num_heads=2", "model.head_dim=32",
         "train.batch_size=1024", "train.precision=32-true"]

_COMMON = """
import atexit, json, os, resource, sys, time
from pathlib import Path
import lightning as L

def peak_mb():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024

class Clock(L.Callback):
    '''Samples/s per epoch, from the 20th batch on (warm-up excluded).'''
    def __init__(self):
        self.epochs = []
    def on_train_epoch_start(self, trainer, module):
        self.rows, self.t0 = 0, None
        self.optimizer = module.optimizer_name  # train.optimizer as resolved (auto: by the tables' rows)
    def on_train_batch_end(self, trainer, module, outputs, batch, idx):
        if idx == 19:
            self.t0 = time.perf_counter()
        elif idx > 19:
            self.rows += len(batch["label"])
    def on_train_epoch_end(self, trainer, module):
        if self.t0 is not None:
            self.epochs.append(self.rows / (time.perf_counter() - self.t0))
"""

_TRAIN = _COMMON + """
from autoint.config import load_config
from autoint.train import train
args = json.loads(sys.argv[1])
out = Path(args["out"])
rank = os.environ.get("LOCAL_RANK", "0")
atexit.register(lambda: (out / f"rss_rank{rank}.json").write_text(json.dumps({"peak_rss_mb": peak_mb()})))
cfg = load_config(args["config"], args["overrides"])
clock = Clock()
t0 = time.perf_counter()
result = train(cfg, args["data"], out / "run", tracking_uri=f"sqlite:///{out / 'mlflow.db'}", progress=False,
               callbacks=[clock], trainer_options=args["trainer"])
if rank == "0":
    (out / "result.json").write_text(json.dumps({"wall_s": time.perf_counter() - t0, "samples_per_s": clock.epochs,
                                                 "test_auc": result.test_metrics.get("test_auc"),
                                                 "optimizer": clock.optimizer}))
"""

_LOADER = _COMMON + """
from autoint.data import SplitFile, SplitLoader
from autoint.schema import Schema
args = json.loads(sys.argv[1])
folder = Path(args["data"])
split = SplitFile(folder / "train.parquet", Schema.load(folder / "schema.json"))
t0 = time.perf_counter(); split.read(0); group_s = time.perf_counter() - t0
rows, t0 = 0, time.perf_counter()
for batch in SplitLoader(split, 1024, shuffle=True, seed=1):
    rows += len(batch["label"])
    if rows >= args["rows"]:
        break
print(json.dumps({"rows": rows, "rows_per_s": rows / (time.perf_counter() - t0),
                  "row_group_rows": int(split.group_rows[0]), "row_group_read_s": group_s, "peak_rss_mb": peak_mb()}))
"""

_FIT = _COMMON + """
import torch
from autoint.config import load_config, resolve_precision
from autoint.system import CTRSystem
from autoint.data import data_module
args = json.loads(sys.argv[1])
cfg = load_config(args["config"], args["overrides"])
torch.manual_seed(cfg.train.seed)
dm = data_module(cfg, args["data"])
system = CTRSystem(cfg.to_dict(), dm.schema.to_dict(), None)
clock = Clock()
trainer = L.Trainer(max_epochs=1, accelerator="cpu", devices=1, precision=resolve_precision(cfg.train.precision, "cpu"),
                    deterministic=cfg.train.deterministic, logger=False, callbacks=[clock], enable_checkpointing=False,
                    enable_progress_bar=False, enable_model_summary=False, num_sanity_val_steps=0,
                    limit_train_batches=args["steps"], limit_val_batches=0, use_distributed_sampler=False)
trainer.fit(system, dm)
print(json.dumps({"samples_per_s": clock.epochs[0], "peak_rss_mb": peak_mb(),
                  "table_rows": system.model.embedding.table.num_embeddings, "resolved": system.optimizer_name}))
"""


def _run(code: str, args: dict, timeout: float = 3600) -> subprocess.CompletedProcess:
    # A script file, not `python -c`: Lightning's DDP launcher starts the other ranks by re-running it.
    script = Path(args.get("out") or args["data"]) / "_child.py"
    script.parent.mkdir(parents=True, exist_ok=True)
    script.write_text(code)
    proc = subprocess.run([sys.executable, str(script), json.dumps(args)], capture_output=True, text=True,
                          timeout=timeout, check=False, cwd=ROOT)
    if proc.returncode != 0:
        raise SystemExit(f"child failed ({args.get('out') or args.get('data')}):\n{proc.stderr[-4000:]}")
    return proc


# The data settings of the processed folders, which training names too (train refuses a folder prepared otherwise).
DATA = ["data.split.method=random", *quality.CRITEO_PAPER_TRANSFORM]


def _processed(work: Path, rows: int) -> Path:
    """A processed folder of a Criteo-like log of ``rows`` rows (made once, kept in the work folder)."""
    folder = work / f"processed_{rows}_random"
    if (folder / "schema.json").is_file():
        return folder
    raw = work / f"criteo_like_{rows}.txt"
    if not raw.exists():
        criteo_like.write(raw, rows)
    subprocess.run([sys.executable, "-m", "autoint.cli", "prepare", str(ROOT / "configs" / "criteo.yaml"),
                    "--raw", str(raw), "--out", str(folder), *(x for o in DATA for x in ("--set", o)), "--quiet"],
                   check=True, cwd=ROOT)
    return folder


def _train_run(data: Path, out: Path, overrides: list[str], trainer: dict) -> dict:
    shutil.rmtree(out, ignore_errors=True)  # the benchmark's own run folder: a fresh run each time
    out.mkdir(parents=True)
    args = {"config": str(ROOT / "configs" / "criteo.yaml"), "data": str(data), "out": str(out),
            "overrides": [*PAPER, *DATA, *overrides], "trainer": trainer}
    _run(_TRAIN, args)
    result = json.loads((out / "result.json").read_text())
    ranks = sorted(out.glob("rss_rank*.json"))
    result["peak_rss_mb_per_rank"] = [round(json.loads(r.read_text())["peak_rss_mb"], 1) for r in ranks]
    result["samples_per_s"] = [round(x) for x in result["samples_per_s"]]
    return result


def _train_rows(folder: Path) -> int:
    import pyarrow.parquet as pq

    return pq.ParquetFile(folder / "train.parquet").metadata.num_rows


def _vocab_split(folder: Path, rows: int, total_vocab: int, seed: int = 0) -> Path:
    """An encoded split (train/valid/test + schema.json) with 26 categorical fields of total_vocab values."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    from autoint.schema import FIRST_VALUE, FieldSpec, Schema

    if (folder / "schema.json").is_file():
        return folder
    folder.mkdir(parents=True, exist_ok=True)
    per_field = total_vocab // 26
    rng = np.random.default_rng(seed)
    fields = [FieldSpec(f"C{i}", "categorical", vocab_size=per_field + FIRST_VALUE) for i in range(1, 27)]
    fields += [FieldSpec(f"I{i}", "numeric") for i in range(1, 14)]
    Schema(tuple(fields)).save(folder / "schema.json")
    for split, n in (("train", rows), ("valid", rows // 10), ("test", rows // 10)):
        cols = {"label": pa.array((rng.random(n) < 0.25).astype(np.float32))}
        for f in fields[:26]:  # Zipf-like ids: a few values are most of the rows, as in click logs
            cols[f.name] = pa.array((np.minimum(rng.zipf(1.2, n), per_field) - 1 + FIRST_VALUE).astype(np.int32))
        for f in fields[26:]:
            cols[f.name] = pa.array(rng.random(n).astype(np.float32))
        pq.write_table(pa.table(cols), folder / f"{split}.parquet", row_group_size=200_000, compression="zstd")
    return folder


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--workdir", type=Path, required=True, help="where logs and processed folders are made and kept")
    p.add_argument("--rows", type=int, nargs="+", default=[1_000_000, 10_000_000, 30_000_000])
    p.add_argument("--steps", type=int, default=300, help="training steps of the rss and ddp runs")
    p.add_argument("--eval-batches", type=int, default=20)
    p.add_argument("--ddp-rows", type=int, default=10_000_000)
    p.add_argument("--ddp-optimizers", nargs="+", default=["auto", "adam"],
                   help="train.optimizer of the ddp runs (auto: the default; the single-process rss runs use it)")
    p.add_argument("--stream-rows", type=int, default=1_000_000)
    p.add_argument("--vocab-rows", type=int, default=400_000)
    p.add_argument("--vocab-steps", type=int, default=250)
    p.add_argument("--vocab-sizes", type=int, nargs="*", default=[250_000, 500_000, 1_000_000, 2_000_000],
                   help="table rows in all, besides 50k and 5M (the ends the target compares)")
    p.add_argument("--out", type=Path, default=HERE / "results" / "train_scale.json")
    p.add_argument("--parts", nargs="+", choices=("rss", "ddp", "stream", "loader", "vocab"),
                   default=["rss", "ddp", "stream", "loader", "vocab"])
    args = p.parse_args(argv)
    for name in ("steps", "vocab_steps"):  # the clock starts at the 20th batch (warm-up excluded)
        if getattr(args, name) < 21:
            p.error(f"--{name.replace('_', '-')} must be at least 21: samples/s are timed from the 20th step on")
    if "stream" in args.parts and args.stream_rows * 0.8 < 21 * 1024:  # the train split, in batches of 1024
        p.error("--stream-rows must give at least 21 batches of 1024 train rows (27,000 rows or more): samples/s "
                "are timed from the 20th step of each epoch on")
    results = bench_results.start(args.out, argv, "train_scale.py", args.parts,
                                  {"rss": ["rss", "rss_ratio_largest_vs_smallest"], "ddp": ["ddp"],
                                   "stream": ["stream"], "loader": ["loader"], "vocab": ["vocab"]})
    work = args.workdir
    work.mkdir(parents=True, exist_ok=True)
    short = {"limit_train_batches": args.steps, "limit_val_batches": args.eval_batches,
             "limit_test_batches": args.eval_batches}

    if "rss" in args.parts:
        results["rss"] = []
        for n in args.rows:
            data = _processed(work, n)
            r = _train_run(data, work / f"train_rss_{n}", ["train.max_epochs=1"], short)
            results["rss"].append({"log_rows": n, "train_rows": _train_rows(data), "steps": args.steps,
                                   "optimizer": r["optimizer"], "peak_rss_mb": r["peak_rss_mb_per_rank"][0],
                                   "wall_s": round(r["wall_s"], 1)})
            print(json.dumps(results["rss"][-1]), file=sys.stderr, flush=True)
        first, last = results["rss"][0]["peak_rss_mb"], results["rss"][-1]["peak_rss_mb"]
        results["rss_ratio_largest_vs_smallest"] = round(last / first, 3)

    if "ddp" in args.parts:
        data = _processed(work, args.ddp_rows)
        single = next((r for r in results.get("rss") or [] if r["log_rows"] == args.ddp_rows), None)
        results["ddp"] = {"log_rows": args.ddp_rows, "train_rows": _train_rows(data), "processes": 2,
                          "steps": args.steps, "single_process_peak_rss_mb": single and single["peak_rss_mb"],
                          "runs": []}
        for optimizer in args.ddp_optimizers:
            r = _train_run(data, work / "train_ddp", ["train.max_epochs=1", "train.devices=2", "train.strategy=ddp",
                                                       "train.accelerator=cpu", f"train.optimizer={optimizer}"],
                           short)
            results["ddp"]["runs"].append({"optimizer": optimizer, "resolved": r["optimizer"],
                                           "peak_rss_mb_per_rank": r["peak_rss_mb_per_rank"]})
            print(json.dumps(results["ddp"]["runs"][-1]), file=sys.stderr, flush=True)

    if "stream" in args.parts:
        data = _processed(work, args.stream_rows)
        rows = {}
        for name, mb in (("streamed", 0), ("in_memory", 1_000_000)):
            r = _train_run(data, work / f"train_stream_{name}", ["train.max_epochs=2", "train.patience=5",
                                                                  f"train.in_memory_mb={mb}"],
                           {"limit_val_batches": args.eval_batches, "limit_test_batches": args.eval_batches})
            rows[name] = {"samples_per_s_by_epoch": r["samples_per_s"], "peak_rss_mb": r["peak_rss_mb_per_rank"][0]}
            print(json.dumps({name: rows[name]}), file=sys.stderr, flush=True)
        results["stream"] = {"log_rows": args.stream_rows, "train_rows": _train_rows(data), "epochs": 2, **rows,
                             "ratio_epoch2_streamed_vs_in_memory": round(
                                 rows["streamed"]["samples_per_s_by_epoch"][1]
                                 / rows["in_memory"]["samples_per_s_by_epoch"][1], 3)}

    if "loader" in args.parts:  # the data path alone: what DataLoader workers could take off a step
        data = _processed(work, args.ddp_rows)
        child = _run(_LOADER, {"data": str(data), "out": str(work / "loader"), "rows": 2_000_000})
        out = json.loads(child.stdout.strip().splitlines()[-1])
        results["loader"] = {"log_rows": args.ddp_rows, **{k: round(v, 3) if isinstance(v, float) else v
                                                           for k, v in out.items()}}
        print(json.dumps(results["loader"]), file=sys.stderr, flush=True)

    if "vocab" in args.parts:
        results["vocab"] = {"rows": args.vocab_rows, "steps": args.vocab_steps, "runs": []}
        sizes = sorted({50_000, *args.vocab_sizes, 5_000_000})
        for total in sizes:
            data = _vocab_split(work / f"vocab_{total}_{args.vocab_rows}", args.vocab_rows, total)
            # "auto" (the default) only at the ends: elsewhere it is one of the other two rows.
            for optimizer in ("adam", "sparse_adam", *(("auto",) if total in (50_000, 5_000_000) else ())):
                args_ = {"config": str(ROOT / "configs" / "criteo.yaml"), "data": str(data), "steps": args.vocab_steps,
                         "overrides": [*PAPER, f"train.optimizer={optimizer}"]}
                out = json.loads(_run(_FIT, args_).stdout.strip().splitlines()[-1])
                results["vocab"]["runs"].append({"total_vocab": total, "optimizer": optimizer,
                                                 "resolved": out["resolved"],
                                                 "samples_per_s": round(out["samples_per_s"]),
                                                 "peak_rss_mb": round(out["peak_rss_mb"], 1),
                                                 "table_rows": out["table_rows"]})
                print(json.dumps(results["vocab"]["runs"][-1]), file=sys.stderr, flush=True)
        rate = {(r["total_vocab"], r["optimizer"]): r["samples_per_s"] for r in results["vocab"]["runs"]}
        results["vocab"]["ratio_5m_vs_50k"] = {o: round(rate[(5_000_000, o)] / rate[(50_000, o)], 3)
                                               for o in ("adam", "sparse_adam", "auto")}
        results["vocab"]["dense_over_sparse_step_time"] = {
            str(t): round(rate[(t, "sparse_adam")] / rate[(t, "adam")], 3) for t in sizes}

    bench_results.write(args.out, results)
    return 0


if __name__ == "__main__":
    bench_results.run(main)
