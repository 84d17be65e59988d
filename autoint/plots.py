"""Heatmaps of attention tables (matplotlib only; no torch).

Takes the pandas tables :mod:`autoint.inspection` produces (query field rows ×
key field columns) and writes one PNG per table, labelled with field names,
like the paper's Figure 7 (Song et al., CIKM 2019, arXiv:1810.11921).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

# Figures are made as Figure objects, not through pyplot: they are only saved to files, never shown, and the
# caller's backend and pyplot state are left as they were (importing this module set the process's backend to
# Agg: a notebook's inline plots stopped showing).

__all__ = ["color_scale", "heatmap", "save_heatmaps", "study_plots", "top_pairs_bar"]


def color_scale(values: np.ndarray, center: float) -> tuple[np.ndarray, float, float, str]:
    """What an attention heatmap draws: ``values - center`` on ``[-reach, reach]``, ``reach >= |center|``,
    and the colour bar's label stating both."""
    shifted = np.asarray(values, dtype=float) - center
    reach = max(float(np.nanmax(np.abs(shifted))) if shifted.size else 0.0, abs(center))
    return shifted, -reach, reach, f"weight - 1/F   (1/F = {center:.3g}; colour range ±{reach:.3g})"


def _figure_path(path: str | Path) -> Path:
    """The file a figure is written to, its folder made: a name without a suffix takes ``.png``, as matplotlib
    writes it (the path returned was the name given, a file that did not exist); a folder is refused."""
    path = Path(path)
    if not path.name or path.is_dir():
        raise ValueError(f"{path} is a folder: name the image file to write (e.g. {path / 'heatmap.png'})")
    if not path.suffix:
        path = path.with_suffix(".png")
    path.parent.mkdir(parents=True, exist_ok=True)
    return path


def heatmap(matrix: pd.DataFrame, path: str | Path, title: str = "", cmap: str = "viridis",
            annotate: bool | None = None, center: float | None = None) -> Path:
    """One query × key heatmap as a PNG; cells are annotated when the matrix is small (≤ 12 fields).

    With ``center`` (for attention maps: ``1/F``, the uniform weight) the cells
    show ``value - center`` on a diverging scale whose range is at least
    ``±center`` and is stated on the colour bar: a map within a hair of uniform
    looks flat instead of being stretched to full contrast.
    """
    path = _figure_path(path)
    n_rows, n_cols = matrix.shape
    size = max(4.0, 0.28 * max(n_rows, n_cols) + 2.0)
    values = matrix.to_numpy(dtype=float)
    scale: dict[str, float] = {}
    label = ""
    if center is not None:
        values, vmin, vmax, label = color_scale(values, center)
        scale = {"vmin": vmin, "vmax": vmax}
        cmap = "RdBu_r"
    fig = Figure(figsize=(size + 1.2, size))
    ax = fig.subplots()
    image = ax.imshow(values, cmap=cmap, aspect="equal", **scale)
    ax.set_xticks(range(n_cols), [str(c) for c in matrix.columns], rotation=90, fontsize=7)
    ax.set_yticks(range(n_rows), [str(i) for i in matrix.index], fontsize=7)
    ax.set_xlabel(matrix.columns.name or "key field (attended to)")
    ax.set_ylabel(matrix.index.name or "query field (attending)")
    if title:
        ax.set_title(title, fontsize=9)
    bar = fig.colorbar(image, ax=ax, fraction=0.046, pad=0.04)
    if label:
        bar.set_label(label, fontsize=7)
    if annotate if annotate is not None else max(n_rows, n_cols) <= 12:
        shown = matrix.to_numpy(dtype=float)  # the weights themselves, whatever the colours show
        for i in range(n_rows):
            for j in range(n_cols):
                ax.text(j, i, f"{shown[i, j]:.2f}", ha="center", va="center", fontsize=6,
                        color="k" if center is not None else "w")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return path


def save_heatmaps(matrices: Mapping[str, pd.DataFrame], out_dir: str | Path, prefix: str = "",
                  center: float | None = None, note: str = "") -> list[Path]:
    """One ``{stem}.png`` per table in ``out_dir``; titles are the stems (plus ``note`` on a second line)."""
    out = Path(out_dir)
    return [heatmap(df, out / f"{stem}.png", title=f"{prefix}{stem.replace('_', ' ')}" + (f"\n{note}" if note else ""),
                    center=center)
            for stem, df in matrices.items()]


def top_pairs_bar(pairs: pd.DataFrame, path: str | Path, k: int = 15, by: str = "score",
                  highlight: set[frozenset[str]] | None = None) -> Path:
    """Horizontal bars of the ``k`` best pairs by ``by``; pairs in ``highlight`` (e.g. planted) in orange."""
    if by not in pairs.columns:
        raise ValueError(f"pairs table has no column {by!r} (columns: {list(pairs.columns)})")
    top = pairs.sort_values(by, ascending=False, kind="stable").head(k).iloc[::-1]
    labels = [f"{a} × {b}" for a, b in zip(top["field_a"], top["field_b"])]
    marked = highlight or set()
    colors = ["tab:orange" if frozenset((a, b)) in marked else "tab:blue"
              for a, b in zip(top["field_a"], top["field_b"])]
    path = _figure_path(path)
    fig = Figure(figsize=(6, 0.3 * len(top) + 1.2))
    ax = fig.subplots()
    ax.barh(labels, top[by].to_numpy(dtype=float), color=colors)
    ax.set_xlabel(by)
    ax.set_title(f"top {len(top)} field pairs by {by}" + (" (orange: planted)" if marked else ""), fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return path


def study_plots(study: object, folder: str | Path, importances: bool) -> tuple[list[Path], dict[str, str]]:
    """An Optuna study's optimisation history and, if asked, parameter importances as PNGs.

    Returns the files written and, per plot not drawn, why (e.g. importances of
    a space where nothing varied).
    """
    import warnings

    import matplotlib.pyplot as plt  # Optuna's plots draw through pyplot
    import optuna
    from optuna.visualization import matplotlib as optuna_plots

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    plots = {"optimization_history.png": optuna_plots.plot_optimization_history}
    if importances:
        plots["param_importances.png"] = optuna_plots.plot_param_importances
    written: list[Path] = []
    skipped: dict[str, str] = {}
    for name, plot in plots.items():
        # rc_context: Optuna sets the ggplot style process-wide (plt.style.use), which stayed on the caller's plots
        with warnings.catch_warnings(), plt.rc_context():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            try:
                ax = plot(study)
            except (ValueError, RuntimeError) as e:
                skipped[name] = str(e)
                continue
            ax.figure.savefig(folder / name, dpi=100, bbox_inches="tight")
            plt.close(ax.figure)
        written.append(folder / name)
    return written, skipped
