"""Raw CTR logs → the canonical raw frame, one reader per format.

See :mod:`autoint.datasets.base` for the frame's contract; :func:`make_reader`
picks a reader from a :class:`~autoint.config.DataConfig`. The registry lives
here, at the package's face, so the base module imports no reader and no
reader imports another.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from autoint.datasets.base import RawReader
from autoint.datasets.errors import BadRowLog, DataError
from autoint.schema import FieldSpec

__all__ = ["BadRowLog", "DataError", "RawReader", "make_reader", "reader_fields"]

FORMATS = ("criteo", "movielens", "frappe", "table", "synthetic")


def make_reader(data_cfg: Any, raw: str | Path | Sequence[str | Path] | None) -> RawReader:
    """The reader for ``data_cfg.format`` over ``raw`` (file, folder, glob or list; None: rows via ``from_frame``).

    ``synthetic`` data is a CSV / Parquet file written by
    :mod:`autoint.datasets.synthetic`, read by the table reader with the
    columns that module describes.
    """
    fmt = data_cfg.format
    if fmt == "criteo":
        from autoint.datasets.criteo import CriteoReader

        return CriteoReader(raw)
    if fmt == "movielens":
        from autoint.datasets.movielens import MovieLensReader

        return MovieLensReader(raw, include_ids=bool(data_cfg.include_ids))
    if fmt == "frappe":
        from autoint.datasets.frappe import FrappeReader

        return FrappeReader(raw)
    if fmt in ("table", "synthetic"):
        from autoint.datasets.table import TableReader

        if fmt == "table":
            columns = data_cfg.columns
        else:
            from autoint.datasets.synthetic import synthetic_columns

            columns = data_cfg.columns or synthetic_columns(dict(data_cfg.synthetic or {}))
        split = getattr(data_cfg, "split", None)
        time_column = split.time_column if split is not None and split.method == "time" else None
        reader = TableReader(raw, columns, time_column)
        reader.format = fmt
        return reader
    raise DataError(f"data.format: unknown format {fmt!r} (known: {', '.join(FORMATS)})")


def reader_fields(data_cfg: Any) -> tuple[FieldSpec, ...]:
    """The fields ``data_cfg`` will produce, known from the config alone (no data read)."""
    return make_reader(data_cfg, None).fields
