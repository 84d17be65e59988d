"""Test AUC / logloss of the shipped configs through the real training path, beside fair baselines.

    python benchmarks/quality.py --data-dir ../shared/data [--only movielens criteo frappe synthetic]
                                 [--baselines-only] [--set KEY=VALUE ...] [--output FILE]

For each data set: prepare the raw files with the shipped config (its split:
80/10/10 permutation, seed 2024, for the real sets; the synthetic demo's
hash split), then, on that same processed split:

* **autoint**: train with `autoint.train.train` (early stopping on validation
  AUC, best checkpoint tested);
* **logistic regression** on a one-hot of every encoded id (categorical
  fields, and a multi-hot of multi-valued ones) plus the numeric columns as
  prepared (standardised on train so the penalty treats them alike), the L2
  strength ``C`` chosen on the validation split from :data:`LR_C`;
* **histogram gradient boosting** (scikit-learn) with the categorical fields
  declared categorical; a field with more than 255 ids keeps its
  :data:`HGB_TOP` most frequent train ids and maps the rest to one rare
  bucket; multi-valued fields become 0/1 columns of their most frequent ids.
  Early stopping on the validation split itself (``fit(X_val=, y_val=)``),
  the learning rate chosen from :data:`HGB_LEARNING_RATES` by validation AUC;
* **oracle** (synthetic data only): the generator's noise-free logit on the
  test rows (:func:`autoint.datasets.synthetic.oracle_metrics`), the best
  any model can do there.

``--baselines-only`` trains no autoint model: the autoint figures of a data
set are kept from ``--output`` when they were measured on the same config,
overrides and split sizes, and dropped otherwise. Each part of an entry names
the command that measured it; data sets not run now are kept as they were.
MLflow runs go to a throw-away store in the work folder.
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

import numpy as np

ROOT = Path(__file__).resolve().parent.parent

DATASETS = {
    # name: (config, raw path under the data folder; None: generated from the config's data.synthetic)
    "movielens": ("configs/movielens.yaml", "movielens_100k"),
    "criteo": ("configs/criteo.yaml", "criteo_kaggle_head10k/train.txt"),
    "frappe": ("configs/frappe.yaml", "frappe_partial"),
    "synthetic": ("configs/synthetic.yaml", None),
}
# configs/criteo.yaml buckets its integer fields into categorical ones now (data.numeric_transform: bucket).
# The benchmarks measured on the paper's numeric fields before that pin them with this override, so their
# figures stand: the speed table (like for like with the peers), the recovery cases, train_scale.py and the
# Criteo variants that set no transform of their own.
CRITEO_PAPER_TRANSFORM = ("data.numeric_transform=criteo",)
SPLITS = ("train", "valid", "test")
LR_C = (0.01, 0.03, 0.1, 0.3, 1.0, 3.0)
HGB_LEARNING_RATES = (0.05, 0.1)
HGB_MAX_ITER = 500  # early stopping on the validation split usually ends sooner
HGB_TOP = 254  # HGB's categories are codes below max_bins = 255: 254 kept ids + one rare bucket
HGB_MULTI_TOP = 64  # 0/1 columns per multi-valued field


# --------------------------------------------------------------------------- data
def prepare_split(name: str, data_dir: Path, work: Path, overrides: list[str]) -> tuple[Any, Path, dict, Path]:
    """The config, processed folder, prepare report and raw input of one data set."""
    from autoint.config import load_config
    from autoint.preprocess import prepare

    config, raw = DATASETS[name]
    cfg = load_config(ROOT / config, overrides)
    if raw is None:
        from autoint.datasets.synthetic import SyntheticConfig, generate

        raw_path = generate(SyntheticConfig.from_dict(cfg.data.synthetic or {}), work / name / "raw")
    else:
        raw_path = data_dir / raw
    processed = work / name / "processed"
    started = time.perf_counter()
    report = prepare(cfg, raw_path, processed, progress=False)
    report["prepare_s"] = round(time.perf_counter() - started, 1)
    return cfg, processed, report, raw_path


def load_split(processed: Path) -> dict[str, Any]:
    """Every split of a processed folder as numpy arrays by kind, with the schema."""
    import pyarrow.parquet as pq

    from autoint.preprocess import load_processed

    schema, _ = load_processed(processed)
    out: dict[str, Any] = {"schema": schema}
    for split in SPLITS:
        table = pq.read_table(processed / f"{split}.parquet")
        out[split] = {
            "y": table.column(schema.label).to_numpy().astype(np.int8),
            "cat": {f.name: table.column(f.name).to_numpy() for f in schema.categorical},
            "multi": {f.name: np.stack(table.column(f.name).to_numpy(zero_copy_only=False))
                      for f in schema.multi},
            "num": {f.name: table.column(f.name).to_numpy().astype(np.float64) for f in schema.numeric},
        }
    return out


# --------------------------------------------------------------------------- baselines
def _metrics(y: np.ndarray, p: np.ndarray) -> dict[str, float]:
    from sklearn.metrics import log_loss, roc_auc_score

    return {"auc": float(roc_auc_score(y, p)), "logloss": float(log_loss(y, np.clip(p, 1e-7, 1 - 1e-7)))}


def _one_hot(data: dict[str, Any], split: str, mean: np.ndarray, std: np.ndarray) -> Any:
    """Sparse design: one column per id of every categorical and multi-valued field, then the numerics."""
    from scipy.sparse import csr_matrix, hstack

    schema, part = data["schema"], data[split]
    n = len(part["y"])
    blocks = []
    for f in schema.categorical:
        ids = part["cat"][f.name].astype(np.int64)
        blocks.append(csr_matrix((np.ones(n), (np.arange(n), ids)), shape=(n, f.vocab_size)))
    for f in schema.multi:
        ids = part["multi"][f.name].astype(np.int64)  # (n, max_len), 0 = padding
        rows, cols = np.nonzero(ids)
        m = csr_matrix((np.ones(len(rows)), (rows, ids[rows, cols])), shape=(n, f.vocab_size))
        m.data[:] = 1.0  # a value listed twice counts once
        blocks.append(m)
    if schema.numeric:
        num = np.column_stack([part["num"][f.name] for f in schema.numeric])
        blocks.append(csr_matrix((num - mean) / std))
    return hstack(blocks).tocsr()


def logistic_regression(data: dict[str, Any]) -> dict[str, Any]:
    from sklearn.linear_model import LogisticRegression

    schema = data["schema"]
    if schema.numeric:
        num = np.column_stack([data["train"]["num"][f.name] for f in schema.numeric])
        mean, std = num.mean(0), num.std(0)
        std[std == 0] = 1.0
    else:
        mean = std = np.zeros(0)
    x = {s: _one_hot(data, s, mean, std) for s in SPLITS}
    started = time.perf_counter()
    valid_auc, best = {}, None
    for c in LR_C:
        model = LogisticRegression(C=c, max_iter=2000).fit(x["train"], data["train"]["y"])
        valid_auc[c] = _metrics(data["valid"]["y"], model.predict_proba(x["valid"])[:, 1])["auc"]
        if best is None or valid_auc[c] > valid_auc[best[0]]:
            best = (c, model)
    c, model = best
    test = _metrics(data["test"]["y"], model.predict_proba(x["test"])[:, 1])
    return {
        "model": "sklearn LogisticRegression (lbfgs, L2)",
        "features": (f"one-hot of {len(schema.categorical)} categorical and {len(schema.multi)} multi-valued "
                     f"fields' encoded ids ({x['train'].shape[1] - len(schema.numeric)} columns), "
                     f"{len(schema.numeric)} numeric columns as prepared, standardised on train"),
        "C_grid": list(LR_C), "C": c,
        "valid_auc": {str(k): round(v, 4) for k, v in valid_auc.items()},
        "test_auc": round(test["auc"], 4), "test_logloss": round(test["logloss"], 4),
        "fit_s": round(time.perf_counter() - started, 1),
    }


def _hgb_design(data: dict[str, Any]) -> tuple[dict[str, np.ndarray], list[bool], list[str]]:
    """Dense HGB inputs per split, which columns are categorical, and how each wide field was treated."""
    schema = data["schema"]
    columns: dict[str, list[np.ndarray]] = {s: [] for s in SPLITS}
    categorical: list[bool] = []
    notes: list[str] = []
    for f in schema.categorical:
        train_ids = data["train"]["cat"][f.name]
        values, counts = np.unique(train_ids, return_counts=True)
        if len(values) <= HGB_TOP:
            kept = values
        else:
            kept = values[np.argsort(-counts, kind="stable")[:HGB_TOP]]
            share = counts[np.isin(values, kept)].sum() / counts.sum()
            notes.append(f"{f.name}: {len(values)} train ids, the {HGB_TOP} most frequent kept "
                         f"({share:.0%} of train rows), the rest one rare bucket")
        code = np.full(f.vocab_size, len(kept), dtype=np.float64)  # unseen or rare: one bucket
        code[kept] = np.arange(len(kept))
        for s in SPLITS:
            columns[s].append(code[data[s]["cat"][f.name]])
        categorical.append(True)
    for f in schema.multi:
        ids = data["train"]["multi"][f.name]
        values, counts = np.unique(ids[ids > 0], return_counts=True)
        kept = values[np.argsort(-counts, kind="stable")[:HGB_MULTI_TOP]]
        if len(values) > HGB_MULTI_TOP:
            notes.append(f"{f.name}: 0/1 columns of its {HGB_MULTI_TOP} most frequent of {len(values)} ids")
        for v in kept:
            for s in SPLITS:
                columns[s].append((data[s]["multi"][f.name] == v).any(axis=1).astype(np.float64))
            categorical.append(False)
    for f in schema.numeric:
        for s in SPLITS:
            columns[s].append(data[s]["num"][f.name])
        categorical.append(False)
    return {s: np.column_stack(columns[s]) for s in SPLITS}, categorical, notes


def gradient_boosting(data: dict[str, Any]) -> dict[str, Any]:
    from sklearn.ensemble import HistGradientBoostingClassifier

    x, categorical, notes = _hgb_design(data)
    y = {s: data[s]["y"] for s in SPLITS}
    started = time.perf_counter()
    valid_auc, iters, best = {}, {}, None
    for lr in HGB_LEARNING_RATES:
        model = HistGradientBoostingClassifier(
            learning_rate=lr, max_iter=HGB_MAX_ITER, categorical_features=np.array(categorical),
            early_stopping=True, scoring="loss", n_iter_no_change=20, random_state=0,
        ).fit(x["train"], y["train"], X_val=x["valid"], y_val=y["valid"])
        valid_auc[lr] = _metrics(y["valid"], model.predict_proba(x["valid"])[:, 1])["auc"]
        iters[lr] = int(model.n_iter_)
        if best is None or valid_auc[lr] > valid_auc[best[0]]:
            best = (lr, model)
    lr, model = best
    test = _metrics(y["test"], model.predict_proba(x["test"])[:, 1])
    return {
        "model": (f"sklearn HistGradientBoostingClassifier (max_leaf_nodes 31, at most {HGB_MAX_ITER} rounds, "
                  "early stopping on the validation split's logloss, 20 rounds' patience)"),
        "features": (f"{sum(categorical)} categorical fields declared categorical, "
                     f"{len(categorical) - sum(categorical)} numeric or 0/1 columns"),
        "wide_fields": notes or "none: every categorical field has at most 255 train ids",
        "learning_rate_grid": list(HGB_LEARNING_RATES), "learning_rate": lr, "iterations": iters[lr],
        "valid_auc": {str(k): round(v, 4) for k, v in valid_auc.items()},
        "test_auc": round(test["auc"], 4), "test_logloss": round(test["logloss"], 4),
        "fit_s": round(time.perf_counter() - started, 1),
    }


def oracle(cfg: Any, raw: Path) -> dict[str, Any]:
    from autoint.datasets.synthetic import oracle_metrics

    test = oracle_metrics(raw, cfg.data.split)["test"]
    return {"model": "the generator's noise-free logit (AUC); its true click probability (logloss)",
            "test_auc": round(test["auc"], 4), "test_logloss": round(test["logloss"], 4), "test_rows": test["rows"]}


# --------------------------------------------------------------------------- autoint
def autoint(cfg: Any, processed: Path, work: Path, name: str) -> dict[str, Any]:
    from autoint.train import train

    result = train(cfg, processed, work / name / "run", tracking_uri=f"sqlite:///{work / 'mlflow.db'}",
                   progress=False)
    metrics = json.loads((Path(result.run_dir) / "metrics.json").read_text())
    return {
        "test_auc": round(result.test_metrics["test_auc"], 4),
        "test_logloss": round(result.test_metrics["test_logloss"], 4),
        **({"calibration": {"a": round(metrics["calibration_a"], 4), "b": round(metrics["calibration_b"], 4)},
            "test_logloss_uncalibrated": round(_uncalibrated_logloss(result.best_checkpoint, processed), 4)}
           if "calibration_a" in metrics else {}),
        "epochs": result.epochs,
        "train_s": round(result.fit_seconds, 1),
    }


def _uncalibrated_logloss(checkpoint: str, processed: Path) -> float:
    """The test logloss of the model's own probability, before the Platt scaling that train fitted on validation."""
    import torch.nn.functional as F

    from autoint.calibration import raw_logits
    from autoint.checkpoint import load_checkpoint
    from autoint.data import data_module

    model, cfg, *_ = load_checkpoint(checkpoint)
    dm = data_module(cfg, processed)
    dm.setup("test")
    z, y = raw_logits(model, dm.whole_split("test"), model.rows_per_pass())
    return float(F.binary_cross_entropy_with_logits(z.double(), y.double()))


def run(name: str, data_dir: Path, work: Path, overrides: list[str], command: str, baselines_only: bool,
        old: dict[str, Any] | None) -> dict[str, Any]:
    cfg, processed, report, raw = prepare_split(name, data_dir, work, overrides)
    entry: dict[str, Any] = {
        "dataset": name,
        "config": DATASETS[name][0],
        "overrides": overrides,
        "split": {"method": cfg.data.split.method, "fractions": list(cfg.data.split.fractions),
                  "seed": cfg.data.split.seed},
        "rows": report["rows"],
        "prepare_s": report["prepare_s"],
    }
    if not baselines_only:
        entry["autoint"] = {**autoint(cfg, processed, work, name), "command": command}
    elif old and old.get("autoint") and all(old.get(k) == entry[k] for k in ("config", "overrides", "rows")):
        entry["autoint"] = old["autoint"]  # same config, overrides and split: kept, with its own command
    data = load_split(processed)
    entry["logistic_regression"] = {**logistic_regression(data), "command": command}
    entry["hist_gradient_boosting"] = {**gradient_boosting(data), "command": command}
    if cfg.data.format == "synthetic":
        entry["oracle"] = {**oracle(cfg, raw), "command": command}
    return entry


def _old_entries(path: Path | None) -> dict[str, dict[str, Any]]:
    """The entries of an existing results file by data set; the first layout (autoint figures at the top of
    each entry, one command for the file) is read as an ``autoint`` part."""
    if path is None or not path.is_file():
        return {}
    doc = json.loads(path.read_text())
    out = {}
    for e in doc.get("results", []):
        if "autoint" not in e and "test_auc" in e:
            e = {**{k: v for k, v in e.items() if k not in ("test_auc", "test_logloss", "epochs", "train_s")},
                 "autoint": {k: e[k] for k in ("test_auc", "test_logloss", "epochs", "train_s") if k in e}
                 | {"command": doc.get("command")}}
        out[e["dataset"]] = e
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data-dir", type=Path, default=os.environ.get("AUTOINT_DATA_DIR"),
                        help="folder holding criteo_kaggle_head10k/, movielens_100k/, frappe_partial/")
    parser.add_argument("--only", nargs="*", choices=sorted(DATASETS), default=["movielens", "criteo"])
    parser.add_argument("--baselines-only", action="store_true",
                        help="no autoint training: keep its figures from --output where the split is the same")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--work", type=Path, help="work folder (default: a temporary one)")
    parser.add_argument("--output", type=Path, help="write the JSON here too (entries of other data sets kept)")
    args = parser.parse_args()
    needs_data = any(DATASETS[name][1] is not None for name in args.only)
    if needs_data and (args.data_dir is None or not Path(args.data_dir).is_dir()):
        parser.error("--data-dir (or AUTOINT_DATA_DIR) must name the real data folder")
    torch_threads = os.environ.get("AUTOINT_THREADS")
    if torch_threads:
        import torch

        torch.set_num_threads(int(torch_threads))
    command = "python benchmarks/quality.py " + " ".join(sys.argv[1:])
    old = _old_entries(args.output)
    with tempfile.TemporaryDirectory() as tmp:
        work = args.work or Path(tmp)
        done = {name: run(name, Path(args.data_dir or "."), work, args.set, command, args.baselines_only,
                          old.get(name)) for name in args.only}
    results = [done.get(name) or old[name] for name in [*old, *(n for n in done if n not in old)]]
    text = json.dumps({"note": "each part of an entry (autoint, each baseline) names the command that measured it",
                       "results": results}, indent=2)
    print(text)
    if args.output:
        args.output.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
