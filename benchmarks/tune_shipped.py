"""Search the shipped configs with ``autoint tune``: does any setting beat them on the validation split?

For each data set this prepares the shipped config's split (as ``quality.py``
does), then runs one Optuna study through :func:`autoint.tune.tune`, the code
behind ``autoint tune``: the shipped settings are the first trial (enqueued), the
rest drawn by TPE from :data:`SPACE`, the median pruner on, every trial an
MLflow child run. Only validation AUC chooses; the study's best trial is scored
on the test split once, at the end, by ``tune`` itself.

    python benchmarks/tune_shipped.py --data-dir ../shared/data --only movielens --trials 20 --timeout 1200

Results (trials by state, wall time, the shipped trial's and the best trial's
validation AUC and settings, the best trial's test AUC) are merged by data set
into ``benchmarks/results/tune.json``. A shipped config is changed only by
hand, from these figures, and ``quality.py`` is re-run on it.

``--reselect K`` guards against the winner's curse of a small validation split
(the best of 40 trials on 1,000 rows leads partly by luck): the shipped trial
and the study's K best complete trials are each trained again with the
``--reselect-seeds`` (new seeds, the same split), and the one with the highest
mean validation AUC over those runs is the pick. Every run's test AUC is
recorded beside it, to be read, never to choose by.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import quality  # noqa: E402

# A space that a 2-core CPU searches in minutes per trial on these data sets: the default space
# (configs/README.md, section `tune`) without its widest settings (head width 64, 4 layers, 3 DNN layers).
SPACE: dict[str, dict[str, Any]] = {
    "model.num_layers": {"low": 1, "high": 3},
    "model.num_heads": {"low": 1, "high": 4},
    "model.head_dim": {"choices": [8, 16, 32]},
    "model.embedding_dim": {"choices": [8, 16, 32]},
    "model.dnn_hidden": {"choices": [[], [256, 256]]},
    "model.first_order": {"choices": [False, True]},
    "model.attention_dropout": {"low": 0.0, "high": 0.3},
    "train.lr": {"low": 1e-4, "high": 3e-2, "log": True},
    "train.embedding_weight_decay": {"low": 1e-9, "high": 1e-3, "log": True},
    "train.batch_size": {"choices": [256, 512, 1024]},
}


def shipped_settings(cfg: Any) -> dict[str, Any]:
    """The shipped config's values of every searched setting (the study's first trial).

    A value of 0 on a log-scale range (no embedding L2) is enqueued as the range's low end (1e-9).
    """
    d = cfg.to_dict()
    out = {}
    for key, entry in SPACE.items():
        section, name = key.split(".")
        value = d[section][name]
        out[key] = entry["low"] if entry.get("log") and value == 0 else value
    return out


def study(name: str, data_dir: Path, work: Path, trials: int, timeout: float | None, seed: int,
          reselect_k: int = 0, reselect_seeds: list[int] | None = None) -> dict[str, Any]:
    from autoint.config import config_from_dict
    from autoint.tune import tune

    cfg, processed, report, raw = quality.prepare_split(name, data_dir, work, [])
    shipped = shipped_settings(cfg)
    tuned = config_from_dict({**cfg.to_dict(), "tune": {
        "trials": trials, "seed": seed, "space": SPACE, "enqueue": [shipped],
        "pruner": {"kind": "median", "startup_trials": 3, "warmup_epochs": 2}}})
    started = time.perf_counter()
    result = tune(tuned, work / name / "study", data=processed, raw=raw, timeout_s=timeout,
                  tracking_uri=f"sqlite:///{work / 'mlflow.db'}", default_study=f"shipped-{name}")
    wall = time.perf_counter() - started

    import optuna

    s = optuna.load_study(study_name=result.study, storage=result.storage)
    complete = [t for t in s.trials if t.state == optuna.trial.TrialState.COMPLETE]
    first = s.trials[0]
    picked = reselect(cfg, processed, work / name / "reselect", s, complete, reselect_k, reselect_seeds) \
        if reselect_k else None
    return {
        "dataset": name,
        "config": quality.DATASETS[name][0],
        "rows": report["rows"],
        "space": SPACE,
        "trials_requested": trials,
        "timeout_s": timeout,
        "trials": result.states,
        "wall_s": round(wall, 1),
        "mean_trial_s": round(wall / max(1, len(s.trials)), 1),
        "shipped": {"settings": shipped, "state": first.state.name.lower(),
                    "val_auc": None if first.value is None else round(first.value, 4)},
        "best": {"trial": result.best_trial, "settings": result.best_params,
                 "val_auc": None if result.best_value is None else round(result.best_value, 4),
                 **{k: round(v, 4) for k, v in result.test_metrics.items()}},
        "val_auc_of_complete_trials": sorted(round(t.value, 4) for t in complete),
        **({"reselect": picked} if picked else {}),
    }


def reselect(cfg: Any, processed: Path, work: Path, s: Any, complete: list[Any], k: int,
             seeds: list[int]) -> dict[str, Any]:
    """The shipped trial and the ``k`` best complete trials, each trained again with ``seeds``; the pick is the
    highest mean validation AUC over those runs (the study's own run not counted)."""
    from autoint.config import config_from_dict
    from autoint.train import train
    from autoint.tune import _settings

    work.mkdir(parents=True, exist_ok=True)
    ranked = sorted(complete, key=lambda t: t.value, reverse=True)
    candidates = [s.trials[0], *(t for t in ranked if t.number != 0)][: k + 1]
    rows = []
    for t in candidates:
        settings = _settings(SPACE, t.params)
        runs = []
        for seed in seeds:
            d = cfg.to_dict()
            d.pop("tune", None)
            for key, value in {**settings, "train.seed": seed}.items():
                section, option = key.split(".")
                d[section][option] = value
            folder = work / f"trial-{t.number}-seed-{seed}"
            result = train(config_from_dict(d), processed, folder, tracking_uri=f"sqlite:///{work / 'mlflow.db'}",
                           progress=False)
            metrics = json.loads((Path(result.run_dir) / "metrics.json").read_text())
            runs.append({"seed": seed, "val_auc": round(metrics["best_epoch_val_auc"], 4),
                         "test_auc": round(result.test_metrics["test_auc"], 4)})
        rows.append({"trial": t.number, "study_val_auc": round(t.value, 4), "settings": settings, "runs": runs,
                     "mean_val_auc": round(sum(r["val_auc"] for r in runs) / len(runs), 4),
                     "mean_test_auc": round(sum(r["test_auc"] for r in runs) / len(runs), 4)})
        print(json.dumps(rows[-1]), flush=True)
    best = max(rows, key=lambda r: r["mean_val_auc"])
    return {"k": k, "seeds": seeds, "rule": "highest mean validation AUC over the new seeds",
            "picked_trial": best["trial"], "candidates": rows}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data-dir", type=Path, default=os.environ.get("AUTOINT_DATA_DIR"))
    p.add_argument("--only", nargs="+", choices=sorted(quality.DATASETS), default=sorted(quality.DATASETS))
    p.add_argument("--trials", type=int, default=20)
    p.add_argument("--timeout", type=float, default=None, help="start no trial after S seconds, per study")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--reselect", type=int, default=0, metavar="K",
                   help="train the shipped trial and the K best again with --reselect-seeds; pick by mean valid AUC")
    p.add_argument("--reselect-seeds", type=int, nargs="+", default=[1, 2, 3])
    p.add_argument("--work", type=Path)
    p.add_argument("--output", type=Path, default=HERE / "results" / "tune.json")
    args = p.parse_args()
    if any(quality.DATASETS[n][1] is not None for n in args.only) and not (args.data_dir and args.data_dir.is_dir()):
        p.error("--data-dir (or AUTOINT_DATA_DIR) must name the real data folder")
    command = "python benchmarks/tune_shipped.py " + " ".join(sys.argv[1:])
    old = json.loads(args.output.read_text()) if args.output.is_file() else {"results": []}
    entries = {e["dataset"]: e for e in old["results"]}
    with tempfile.TemporaryDirectory() as tmp:
        work = args.work or Path(tmp)
        for name in args.only:
            entry = {**study(name, args.data_dir or Path("."), work, args.trials, args.timeout, args.seed,
                             args.reselect, args.reselect_seeds),
                     "command": command}
            entries[name] = entry
            print(json.dumps(entry, indent=2), flush=True)
            args.output.write_text(json.dumps({"machine": {"cpus": os.cpu_count()},
                                               "results": list(entries.values())}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
