"""How close does a training step come to this CPU's matmul rate?

The speed issue measures autoint's training against a bound: the samples per second this CPU would train
if every floating-point operation of a step ran at the rate of a large matrix product. This script
measures both sides of that bound on the machine it runs on, since the rate differs between CPUs (the
issue's figures, ~190 GFLOP/s fp32 and ~840 GFLOP/s bf16, were taken on another one):

* **rate**: ``torch.matmul`` of square matrices, fp32 and bf16, median of several rounds, in GFLOP/s;
* **work**: the matmul FLOPs of one training step of the paper's model (D = 16, 3 layers, 2 heads x 32,
  forward and backward, counted by ``torch.utils.flop_counter.FlopCounterMode``) per sample, at
  MovieLens' 9 fields and the Criteo head's 39 (element-wise work is not counted, as in the issue);
* **bound** = rate / work, and, for each ``--speed`` results file of ``benchmarks/speed.py``, autoint's
  measured training rate as a share of it (fp32 rows against the fp32 bound, bf16 rows against the bf16).

    .venv/bin/python benchmarks/matmul_bound.py --speed benchmarks/results/speed_movielens.json
        # -> benchmarks/results/matmul_bound.json

What it does not show: a bound no real step reaches (a step also pays element-wise operators, the
optimiser and the framework's per-operator overhead), and one taken while the machine was quiet; a
loaded machine gives a lower rate and so a higher share.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch.utils.flop_counter import FlopCounterMode

from autoint.config import ModelConfig
from autoint.model import AutoInt
from autoint.schema import CATEGORICAL, NUMERIC, FieldSpec, Schema

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import bench_results  # noqa: E402

PAPER = {"embedding_dim": 16, "num_layers": 3, "num_heads": 2, "head_dim": 32}
SHAPES = {"movielens": (8, 1), "criteo": (39, 0)}  # (categorical, numeric) fields as the speed runs prepare them
VARIANT_DTYPE = {"fp32": "fp32", "bf16": "bf16"}  # speed.py's paper-width variants and the rate each is held to


def matmul_rate(dtype: torch.dtype, n: int, rounds: int = 7, reps: int = 5) -> dict[str, Any]:
    """GFLOP/s of an (n, n) @ (n, n) product: the median round of ``reps`` products after a warm-up."""
    a, b = torch.randn(n, n).to(dtype), torch.randn(n, n).to(dtype)
    for _ in range(2):
        torch.matmul(a, b)
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        for _ in range(reps):
            torch.matmul(a, b)
        times.append((time.perf_counter() - start) / reps)
    t = statistics.median(times)
    return {"n": n, "median_s": round(t, 5), "gflops": round(2 * n**3 / t / 1e9, 1)}


def step_flops(categorical: int, numeric: int, batch: int = 1024) -> int:
    """Matmul FLOPs of one training step (forward and backward, whole batch) of the paper's model."""
    schema = Schema(tuple([FieldSpec(f"c{i}", CATEGORICAL, 1000) for i in range(categorical)]
                          + [FieldSpec(f"n{i}", NUMERIC) for i in range(numeric)]))
    torch.manual_seed(0)
    net = AutoInt(schema, ModelConfig(**PAPER))
    batch_ = {"categorical": torch.randint(3, 1000, (batch, categorical)), "numeric": torch.randn(batch, numeric)}
    label = torch.randint(0, 2, (batch,)).float()
    with FlopCounterMode(display=False) as counter:
        F.binary_cross_entropy_with_logits(net(batch_), label).backward()
    return int(counter.get_total_flops())


def measured_rates(path: Path) -> list[dict[str, Any]]:
    """autoint's training samples/s per data set and paper-width variant of a ``speed.py`` results file."""
    doc = json.loads(path.read_text())
    out = []
    for name, data in doc.get("datasets", {}).items():
        for variant, row in data.get("variants", {}).items():
            if variant in VARIANT_DTYPE and "ours" in row:
                out.append({"file": str(path), "dataset": name, "variant": variant,
                            "cpu": doc.get("machine", {}).get("cpu"),
                            "train_samples_per_s": row["ours"]["train"]["samples_per_s"]})
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--n", type=int, default=2048, help="the square matrices' side (default 2048)")
    p.add_argument("--speed", type=Path, nargs="*", default=[], help="speed.py results files to hold to the bound")
    p.add_argument("--out", type=Path, default=HERE / "results" / "matmul_bound.json")
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), platform.processor()) if Path("/proc/cpuinfo").is_file() else ""
    rates = {"fp32": matmul_rate(torch.float32, args.n), "bf16": matmul_rate(torch.bfloat16, args.n)}
    print(f"matmul ({args.n} x {args.n}): fp32 {rates['fp32']['gflops']} GFLOP/s, "
          f"bf16 {rates['bf16']['gflops']} GFLOP/s", flush=True)
    work = {name: step_flops(*shape) / 1024 for name, shape in SHAPES.items()}
    bounds = {name: {dtype: round(rates[dtype]["gflops"] * 1e9 / flops) for dtype in rates}
              for name, flops in work.items()}
    shares = []
    for path in args.speed:
        for row in measured_rates(path):
            bound = bounds.get(row["dataset"], {}).get(VARIANT_DTYPE[row["variant"]])
            if bound:
                shares.append({**row, "bound_samples_per_s": bound,
                               "share_of_bound": round(row["train_samples_per_s"] / bound, 3)})
    doc: dict[str, Any] = {
        "machine": {"cpu": cpu, "cores": os.cpu_count(), "torch": torch.__version__, "threads": args.threads,
                    "load_average_1_5_15": [round(x, 2) for x in os.getloadavg()]},
        "command": " ".join(["python benchmarks/matmul_bound.py", *(sys.argv[1:] if argv is None else argv)]),
        "model": PAPER, "matmul": rates,
        "train_step_mflop_per_sample": {name: round(flops / 1e6, 3) for name, flops in work.items()},
        "bound_samples_per_s": bounds, "measured": shares,
    }
    for name in work:
        print(f"{name}: {work[name] / 1e6:.2f} MFLOP per sample; bound fp32 {bounds[name]['fp32']:,}/s, "
              f"bf16 {bounds[name]['bf16']:,}/s", flush=True)
    for s in shares:
        print(f"{s['dataset']} {s['variant']}: {s['train_samples_per_s']:,.0f}/s = "
              f"{100 * s['share_of_bound']:.1f} % of {s['bound_samples_per_s']:,}/s", flush=True)
    bench_results.write(args.out, doc)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
