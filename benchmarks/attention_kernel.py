"""Which attention kernel belongs on a CPU: PyTorch's fused ``scaled_dot_product_attention`` or batched matmuls?

``model.attention_kernel: auto`` runs ``explicit`` (batched matmuls and a softmax) on a CPU and ``sdpa`` on an
accelerator. This script measures that choice on this machine: the paper's model (D = 16, 3 layers, 2 heads
x 32, fp32) at MovieLens' 9 fields and the Criteo head's 39, each kernel timed on

* **forward**: a scoring pass of ``rows`` rows under ``torch.inference_mode``;
* **step**: forward, BCE, backward and an Adam step on a batch of ``rows`` rows,

as the median of interleaved rounds (kernels alternate within each round, so a slow spell of the shared
machine falls on both). Random ids and numbers: the kernels' cost does not depend on the values.

    .venv/bin/python benchmarks/attention_kernel.py    # -> benchmarks/results/attention_kernel.json
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
from softmax_layout import _schema  # the same random-field schema (benchmarks/ is on sys.path when run)

from autoint.config import ModelConfig, TrainConfig
from autoint.model import AutoInt
from autoint.schema import Schema
from autoint.system import make_optimizer

HERE = Path(__file__).resolve().parent
KERNELS = ("explicit", "sdpa")
SHAPES = {"movielens-like (8 categorical + 1 numeric)": (8, 1), "criteo-like (26 categorical + 13 numeric)": (26, 13)}


def _batch(schema: Schema, rows: int, seed: int) -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    return {"categorical": torch.randint(3, 1000, (rows, len(schema.categorical)), generator=gen),
            "numeric": torch.randn(rows, len(schema.numeric), generator=gen),
            "label": torch.randint(0, 2, (rows,), generator=gen).float()}


def measure(schema: Schema, rows: int, rounds: int, reps: int) -> dict[str, Any]:
    nets, opts = {}, {}
    for kernel in KERNELS:
        torch.manual_seed(0)
        nets[kernel] = AutoInt(schema, ModelConfig(embedding_dim=16, num_layers=3, num_heads=2, head_dim=32,
                                                   attention_kernel=kernel))
        opts[kernel] = make_optimizer(nets[kernel], TrainConfig(lr=1e-3), "adam")
    batch = _batch(schema, rows, 0)
    with torch.inference_mode():
        agree = float((nets["explicit"](batch) - nets["sdpa"](batch)).abs().max())

    def forward(kernel: str) -> None:
        with torch.inference_mode():
            nets[kernel](batch)

    def step(kernel: str) -> None:
        loss = F.binary_cross_entropy_with_logits(nets[kernel](batch), batch["label"])
        opts[kernel].zero_grad(set_to_none=True)
        loss.backward()
        opts[kernel].step()

    out: dict[str, Any] = {"rows": rows, "max_abs_logit_diff": agree}
    for what, fn in (("forward", forward), ("step", step)):
        times: dict[str, list[float]] = {k: [] for k in KERNELS}
        for kernel in KERNELS:  # warm-up
            for _ in range(3):
                fn(kernel)
        for _ in range(rounds):
            for kernel in KERNELS:
                start = time.perf_counter()
                for _ in range(reps):
                    fn(kernel)
                times[kernel].append((time.perf_counter() - start) / reps * 1e3)
        medians = {k: statistics.median(v) for k, v in times.items()}
        out[what] = {"median_ms": {k: round(v, 3) for k, v in medians.items()},
                     "sdpa_over_explicit": round(medians["sdpa"] / medians["explicit"], 2),
                     "rounds_ms": {k: [round(t, 3) for t in v] for k, v in times.items()}}
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--rows", type=int, nargs="+", default=[256, 1024], help="rows per pass (default 256 1024)")
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--reps", type=int, default=10)
    p.add_argument("--out", type=Path, default=HERE / "results" / "attention_kernel.json")
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    doc: dict[str, Any] = {
        "machine": {"cpu": platform.processor() or platform.machine(), "cores": os.cpu_count(),
                    "torch": torch.__version__, "threads": args.threads,
                    "load_average_1_5_15": list(os.getloadavg())},
        "command": " ".join(["python benchmarks/attention_kernel.py", *(sys.argv[1:] if argv is None else argv)]),
        "model": "D = 16, 3 layers, 2 heads x 32, fp32, no DNN",
        "shapes": {},
    }
    for name, (nc, nn_) in SHAPES.items():
        doc["shapes"][name] = [measure(_schema(nc, nn_), rows, args.rounds, args.reps) for rows in args.rows]
        for r in doc["shapes"][name]:
            print(f"{name}, {r['rows']} rows: forward sdpa/explicit x{r['forward']['sdpa_over_explicit']}, "
                  f"step x{r['step']['sdpa_over_explicit']}", flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=1) + "\n")
    print(f"results: {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
