"""Where does the attention softmax belong on a CPU: along the last dimension, or along dim 1?

``MultiHeadSelfAttention.attend`` lays scores out key-major (softmax along dim 1)
below ``autoint.model.KEY_MAJOR_BELOW`` fields. This script measures what that
threshold is chosen from, and what it buys in a training step:

* **softmax**: forward + backward of a (B, F, F) softmax along the last
  dimension and along dim 1, for several F (median of interleaved rounds);
* **step**: ``torch.profiler`` self CPU time per training step of the paper's
  model (D = 16, 3 layers, 2 heads x 32, batch 1024, fp32, Adam) at MovieLens'
  9 fields and the Criteo head's 39, with ``KEY_MAJOR_BELOW`` forced to 0 (every
  softmax along the last dimension) and at its shipped value. Profiler self
  times are summed over the ops, so they are steadier than wall time on a
  shared machine; they still include the profiler's own overhead.

    .venv/bin/python benchmarks/softmax_layout.py    # -> benchmarks/results/softmax_layout.json
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

import autoint.model as model_module
from autoint.config import ModelConfig, TrainConfig, load_config
from autoint.model import AutoInt
from autoint.schema import CATEGORICAL, NUMERIC, FieldSpec, Schema
from autoint.system import make_optimizer, rows_per_pass

HERE = Path(__file__).resolve().parent
FIELDS = (8, 9, 12, 14, 16, 18, 24, 32, 39)


def softmax_times(fields: tuple[int, ...], batch: int = 1024, rounds: int = 7, reps: int = 50) -> list[dict]:
    out = []
    for f in fields:
        x = torch.randn(batch, f, f)
        g = torch.randn(batch, f, f)
        times: dict[str, list[float]] = {"last": [], "dim1": []}
        for _ in range(rounds):
            for name, dim in (("last", -1), ("dim1", 1)):
                leaf = x.clone().requires_grad_()
                for _ in range(3):
                    leaf.softmax(dim).backward(g)
                start = time.perf_counter()
                for _ in range(reps):
                    leaf.softmax(dim).backward(g)
                times[name].append((time.perf_counter() - start) / reps * 1e6)
        last, dim1 = statistics.median(times["last"]), statistics.median(times["dim1"])
        out.append({"fields": f, "batch": batch, "last_us": round(last, 1), "dim1_us": round(dim1, 1),
                    "last_over_dim1": round(last / dim1, 2)})
        print(f"F = {f:2d}: last {last:7.0f} us, dim 1 {dim1:7.0f} us (x{last / dim1:.2f})", flush=True)
    return out


def _schema(categorical: int, numeric: int) -> Schema:
    return Schema(tuple([FieldSpec(f"c{i}", CATEGORICAL, 1000) for i in range(categorical)]
                        + [FieldSpec(f"n{i}", NUMERIC) for i in range(numeric)]))


def step_profile(schema: Schema, key_major_below: int, steps: int = 20, batch: int = 1024) -> dict[str, Any]:
    from torch.profiler import ProfilerActivity, profile

    saved = model_module.KEY_MAJOR_BELOW
    model_module.KEY_MAJOR_BELOW = key_major_below
    try:
        gen = torch.Generator().manual_seed(0)
        nc, nn_ = len(schema.categorical), len(schema.numeric)
        batches = [{"categorical": torch.randint(3, 1000, (batch, nc), generator=gen),
                    "numeric": torch.randn(batch, nn_, generator=gen),
                    "label": torch.randint(0, 2, (batch,), generator=gen).float()} for _ in range(4)]
        torch.manual_seed(0)
        net = AutoInt(schema, ModelConfig(embedding_dim=16, num_layers=3, num_heads=2, head_dim=32))
        opt = make_optimizer(net, TrainConfig(lr=1e-3), "adam")
        cfg = load_config(None, [f"train.batch_size={batch}"])
        rows = rows_per_pass(cfg, net, "cpu", training=True) or batch  # as training runs it

        def step(b: dict[str, torch.Tensor]) -> None:
            logits = torch.cat([net({k: v[s:s + rows] for k, v in b.items()}) for s in range(0, batch, rows)])
            loss = F.binary_cross_entropy_with_logits(logits, b["label"])
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()

        for i in range(5):
            step(batches[i % 4])
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            for i in range(steps):
                step(batches[i % 4])
        ops = {e.key: e.self_cpu_time_total for e in prof.key_averages()}
        total = sum(ops.values())
        softmax = sum(v for k, v in ops.items() if "softmax" in k)
        top = sorted(ops.items(), key=lambda kv: -kv[1])[:8]
        return {"key_major_below": key_major_below, "rows_per_pass": rows,
                "self_cpu_ms_per_step": round(total / steps / 1e3, 2),
                "softmax_ms_per_step": round(softmax / steps / 1e3, 2),
                "top_ops_share_of_self_cpu": {k: round(v / total, 3) for k, v in top}}
    finally:
        model_module.KEY_MAJOR_BELOW = saved


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--out", type=Path, default=HERE / "results" / "softmax_layout.json")
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    doc: dict[str, Any] = {
        "machine": {"cpu": platform.processor() or platform.machine(), "cores": os.cpu_count(),
                    "torch": torch.__version__, "threads": args.threads},
        "command": " ".join(["python benchmarks/softmax_layout.py", *(sys.argv[1:] if argv is None else argv)]),
        "shipped_key_major_below": model_module.KEY_MAJOR_BELOW,
        "softmax_forward_backward": softmax_times(FIELDS),
        "training_step": {},
    }
    for name, schema in (("movielens-like (8 categorical + 1 numeric)", _schema(8, 1)),
                         ("criteo-like (26 categorical + 13 numeric)", _schema(26, 13))):
        rows = [step_profile(schema, 0), step_profile(schema, model_module.KEY_MAJOR_BELOW)]
        doc["training_step"][name] = rows
        print(name, rows, flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=1) + "\n")
    print(f"results: {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
