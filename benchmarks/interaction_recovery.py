"""Do the attention maps recover planted crosses? Recovery over seeds, against a non-attention baseline.

For each seed: generate a synthetic log with K planted crosses among 40 fields
(:mod:`autoint.datasets.synthetic`), prepare it, train a small AutoInt, run
:func:`autoint.inspection.inspect_model` on the test split, and check whether
the top-K pairs by each score column contain every planted pair.

The baseline needs no neural model: a main-effects logistic regression
(one-hot categoricals, numeric fields in 10 quantile bins) is fitted on the
train split, then every pair (a, b) gets the score (Lagrange-multiplier) test
statistic for adding the a×b one-hot cross to it, standardised by its degrees
of freedom: ``z = (T - df) / sqrt(2 df)``, ``T = Σ_cells (Σ (y - p))² / Σ p (1 - p)``.
That is what a logistic regression would gain from each cross feature, to first
order, at the cost of one pass per pair.

    .venv/bin/python benchmarks/interaction_recovery.py --seeds 10 --out outputs/interaction_recovery.json

Writes a JSON report (settings, per-seed ranks of the planted pairs, recovery
rates per method, timings) and prints a table.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from autoint.config import ModelConfig, load_config
from autoint.data import SplitFile, SplitLoader, read_split
from autoint.datasets.synthetic import load_planted
from autoint.inspection import SCORE_COLUMNS, inspect_model
from autoint.model import AutoInt
from autoint.schema import Schema
from autoint.train import ensure_processed

# The settings the ground-truth test uses (tests/test_inspection.py), at more rows.
DATA = {"n_rows": 50_000, "n_categorical": 30, "n_numeric": 10, "n_crosses": 4, "cross_strength": 2.0,
        "cardinality": [5, 20]}
MODEL = {"embedding_dim": 16, "num_layers": 1, "num_heads": 2, "head_dim": 16, "embedding_init_std": 1.0}
TRAIN = {"epochs": 10, "lr": 0.01, "batch_size": 512}


def prepare_synthetic(root: Path, seed: int, data: dict[str, Any]) -> tuple[Path, list[tuple[str, ...]]]:
    """Generate and encode one synthetic log; returns (processed folder, planted crosses)."""
    settings = ", ".join(f"{k}: {json.dumps(v)}" for k, v in {**data, "seed": seed}.items())
    cfg = load_config(None, ["data.format=synthetic", f"data.synthetic={{{settings}}}",
                             f"data.raw={root / 'raw' / 'synthetic.parquet'}"])
    processed = ensure_processed(cfg, root / "processed", None, progress=False)
    return processed, load_planted(root / "raw")


def fit_autoint(processed: Path, model: dict[str, Any], epochs: int, lr: float, batch_size: int,
                seed: int) -> AutoInt:
    """A plain Adam loop (no Lightning, no MLflow): the fastest way to a trained model on CPU."""
    schema = Schema.load(processed / "schema.json")
    train = SplitFile(processed / "train.parquet", schema, in_memory_bytes=2**62)
    torch.manual_seed(seed)
    net = AutoInt(schema, ModelConfig(**model))
    opt = torch.optim.Adam(net.parameters(), lr=lr)
    net.train()
    for epoch in range(epochs):
        for batch in SplitLoader(train, batch_size, shuffle=True, seed=seed * 1000 + epoch):
            loss = F.binary_cross_entropy_with_logits(net(batch), batch["label"])
            opt.zero_grad()
            loss.backward()
            opt.step()
    return net.eval()


def _codes(split: dict[str, torch.Tensor], edges: list[np.ndarray]) -> np.ndarray:
    """(N, F) integer codes: categorical ids, numeric values in quantile bins (schema order of kinds)."""
    parts = []
    if "categorical" in split:
        parts.append(split["categorical"].numpy())
    if "numeric" in split:
        num = split["numeric"].numpy()
        parts.append(np.column_stack([np.searchsorted(e, num[:, j]) for j, e in enumerate(edges)]))
    return np.hstack(parts).astype(np.int64)


def baseline_pair_scores(processed: Path, bins: int = 10) -> dict[tuple[str, str], float]:
    """Score-test z of each a×b cross against a main-effects logistic regression (see module docstring)."""
    import scipy.sparse as sp
    from sklearn.linear_model import LogisticRegression

    schema = Schema.load(processed / "schema.json")
    train = read_split(processed / "train.parquet", schema)
    names = [f.name for f in schema.categorical] + [f.name for f in schema.numeric]
    edges = [np.quantile(train["numeric"][:, j].numpy(), np.linspace(0, 1, bins + 1)[1:-1])
             for j in range(len(schema.numeric))]
    codes = _codes(train, edges)  # (N, F)
    y = train["label"].numpy().astype(np.float64)
    n, f = codes.shape
    cards = codes.max(0) + 1
    offsets = np.concatenate([[0], np.cumsum(cards)[:-1]])
    x = sp.csr_matrix((np.ones(n * f), (np.repeat(np.arange(n), f), (codes + offsets).ravel())),
                      shape=(n, int(cards.sum())))
    p = LogisticRegression(C=1.0, max_iter=1000).fit(x, y).predict_proba(x)[:, 1]
    r, w = y - p, p * (1 - p)
    out = {}
    for a in range(f):
        for b in range(a + 1, f):
            cell = codes[:, a] * cards[b] + codes[:, b]
            size = int(cards[a] * cards[b])
            num = np.bincount(cell, r, size) ** 2
            den = np.bincount(cell, w, size)
            used = den > 1e-9
            stat = float((num[used] / den[used]).sum())
            df = max(int(used.sum()) - int(cards[a]) - int(cards[b]) + 1, 1)  # cells beyond the main effects
            out[(names[a], names[b])] = (stat - df) / np.sqrt(2 * df)
    return out


def planted_ranks(ranking: list[tuple[str, str]], planted: list[tuple[str, ...]]) -> list[int]:
    """1-based rank of each planted pair in ``ranking`` (pairs compared unordered)."""
    where = {frozenset(p): i + 1 for i, p in enumerate(ranking)}
    return sorted(where.get(frozenset(p), len(ranking) + 1) for p in planted)


def run_seed(seed: int, root: Path, data: dict[str, Any], model: dict[str, Any], train: dict[str, Any],
             test_rows: int | None) -> dict[str, Any]:
    started = time.perf_counter()
    processed, planted = prepare_synthetic(root / f"seed{seed}", seed, data)
    t_prep = time.perf_counter()
    net = fit_autoint(processed, model, train["epochs"], train["lr"], train["batch_size"], seed)
    t_fit = time.perf_counter()
    result = inspect_model(net, processed, "test", rows=test_rows)
    t_inspect = time.perf_counter()
    base = baseline_pair_scores(processed)
    t_base = time.perf_counter()
    k = len(planted)
    methods: dict[str, Any] = {}
    for column in SCORE_COLUMNS:
        top = result.top_pairs(len(result.pairs), by=column)
        ranks = planted_ranks(list(zip(top["field_a"], top["field_b"])), planted)
        methods[f"attention:{column}"] = {"ranks": ranks, "recovered": ranks[-1] <= k}
    ranking = sorted(base, key=base.get, reverse=True)
    ranks = planted_ranks(ranking, planted)
    methods["baseline:lr_score_test"] = {"ranks": ranks, "recovered": ranks[-1] <= k}
    return {"seed": seed, "planted": [list(p) for p in planted], "methods": methods,
            "test_rows_inspected": result.rows,
            "seconds": {"prepare": t_prep - started, "train": t_fit - t_prep, "inspect": t_inspect - t_fit,
                        "baseline": t_base - t_inspect}}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=10, help="number of seeds (1..N)")
    parser.add_argument("--first-seed", type=int, default=1)
    parser.add_argument("--rows", type=int, default=DATA["n_rows"], help="rows per synthetic log")
    parser.add_argument("--epochs", type=int, default=TRAIN["epochs"])
    parser.add_argument("--lr", type=float, default=TRAIN["lr"])
    parser.add_argument("--model", type=json.loads, default={},
                        help='model overrides as JSON, e.g. {"num_heads": 1}')
    parser.add_argument("--test-rows", type=int, default=None, help="cap on test rows inspected")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    parser.add_argument("--out", type=Path, default=Path("outputs/interaction_recovery.json"))
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    data = {**DATA, "n_rows": args.rows}
    train = {**TRAIN, "epochs": args.epochs, "lr": args.lr}
    model = {**MODEL, **args.model}
    seeds = list(range(args.first_seed, args.first_seed + args.seeds))
    results = []
    with tempfile.TemporaryDirectory(prefix="autoint-recovery-") as tmp:
        for seed in seeds:
            res = run_seed(seed, Path(tmp), data, model, train, args.test_rows)
            results.append(res)
            line = "  ".join(f"{m.split(':')[1]}={v['ranks']}" for m, v in res["methods"].items())
            print(f"seed {seed}: {line}  ({res['seconds']['train']:.0f} s train)", flush=True)
    names = list(results[0]["methods"]) if results else []
    summary = {m: {"recovered": sum(r["methods"][m]["recovered"] for r in results), "seeds": len(results),
                   "mean_worst_rank": float(np.mean([r["methods"][m]["ranks"][-1] for r in results]))}
               for m in names}
    report = {"data": data, "model": model, "train": train, "seeds": seeds, "summary": summary,
              "per_seed": results, "torch_threads": args.threads}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    k = data["n_crosses"]
    print(f"\nall {k} planted pairs in the top {k}, over {len(results)} seeds:")
    for m, s in summary.items():
        print(f"  {m:<32} {s['recovered']:>2}/{s['seeds']}   mean rank of the worst planted pair "
              f"{s['mean_worst_rank']:.1f}")
    print(f"report: {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
