"""Frappe app-usage log in libFM form (the Frappe_x1 split used by CTR benchmarks).

Each line: ``label index:1 index:1 ...``: a label of ``1`` (or ``+1``) / ``-1`` (→ 1 / 0)
and ten one-hot tokens, one per field, in the fixed order user, item, daytime,
weekday, isweekend, homework, cost, weather, country, city. A field's
categorical value is its token's global feature index, as a string.

The raw path may be one ``.libfm`` file or a folder, whose ``*.libfm`` files are
read in sorted order (row ordinals keep counting across files).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from autoint.datasets.base import RawReader, first_offender
from autoint.datasets.errors import BadRowLog, DataError
from autoint.datasets.text import (
    TextLayout,
    file_labels,
    first_line,
    iter_line_blocks,
    parse_block,
    split_block,
)
from autoint.schema import CATEGORICAL, FieldSpec

FRAPPE_NAMES = ("user", "item", "daytime", "weekday", "isweekend", "homework", "cost", "weather", "country", "city")
FRAPPE_FIELDS: tuple[FieldSpec, ...] = tuple(FieldSpec(n, CATEGORICAL) for n in FRAPPE_NAMES)
_COLUMNS = ["label", *FRAPPE_NAMES]
_TOKEN = r"^(?P<index>[^:]+):[0-9.eE+-]+$"
_NEGATIVE = pa.array(["-1", "0"], type=pa.string())
_POSITIVE = pa.array(["1", "+1"], type=pa.string())  # libFM writers print +1 as often as 1


class FrappeReader(RawReader):
    """Reader for Frappe libFM files (a file or a folder of ``*.libfm``)."""

    format = "frappe"
    text_only = True
    default_numeric_transform = "none"  # no numeric fields
    file_pattern = "*.libfm"

    @property
    def fields(self) -> tuple[FieldSpec, ...]:
        return FRAPPE_FIELDS

    def text_layout(self, path: Path) -> TextLayout | None:
        """Frappe's own libFM lines, with the label (11 fields) or without it (10): space-separated tokens, read
        as training reads them (a token's index is the field's value); None for another layout."""
        try:
            first = first_line(path).split()
        except UnicodeDecodeError:
            return None
        names = {len(_COLUMNS): _COLUMNS, len(FRAPPE_NAMES): list(FRAPPE_NAMES)}.get(len(first))
        # Any token of index:value makes it libFM: a bad one among them is refused by its line (see libfm_frames),
        # not read as a header that names none of the fields
        if names is None or not any(re.match(_TOKEN, t) for t in first[-len(FRAPPE_NAMES):]):
            return None
        return TextLayout(sep=" ", names=list(names), header=False, quoting=False, tokens=True)

    def labels_from_frame(self, values: pd.Series) -> np.ndarray:
        num = pd.to_numeric(values, errors="coerce").to_numpy(dtype=np.float64, na_value=np.nan)
        num = np.where(num == -1, 0.0, num)  # accept libFM's -1 as well as 0
        return super().labels_from_frame(pd.Series(num))

    def arrow_chunks(self, chunk_size: int) -> Iterator[tuple[pa.Table, np.ndarray]]:
        files = self.files()
        offset = 0
        labels = file_labels(files)
        for path in files:
            fname = labels[path]
            n_lines = 0
            for first, block in iter_line_blocks(path, chunk_size):
                buf, line_no, n_block = split_block(
                    block, first, b" ", len(_COLUMNS), self.bad, file=fname, strip_trailing_sep=True
                )
                self.rows_seen += n_block
                n_lines += n_block
                if len(line_no) == 0:
                    continue
                table = parse_block(buf, _COLUMNS, b" ")
                label = table.column("label")
                is1, ok = _labels(label)
                if not ok.all():
                    self.bad.add("bad_label", line_no[~ok], file=fname, column="label", expected="1, +1, -1 or 0",
                                 got=label[int(np.flatnonzero(~ok)[0])].as_py())
                arrays = [pa.array(is1.astype(np.int8))]
                indexes, masks = _token_indexes(table)
                arrays.extend(indexes)
                bad_token = np.logical_or.reduce(list(masks.values()))
                column, i = first_offender(masks, bad_token & ok)
                if column is not None:
                    self.bad.add("bad_token", line_no[bad_token & ok], file=fname, column=column,
                                 expected="a libFM token index:value", got=table.column(column)[i].as_py())
                ok &= ~bad_token
                out = pa.Table.from_arrays(arrays, names=_COLUMNS)
                if not ok.all():
                    out = out.filter(pa.array(ok))
                if out.num_rows:
                    self._count_file_rows(path, out.num_rows)
                    yield out, offset + line_no[ok] - 1
            offset += n_lines


def _labels(label: pa.ChunkedArray) -> tuple[np.ndarray, np.ndarray]:
    """Per row: whether the label is a click (1, +1), and whether it is one of the labels libFM writes (and 0)."""
    is1 = pc.fill_null(pc.is_in(label, value_set=_POSITIVE), False).to_numpy(zero_copy_only=False)
    is0 = pc.fill_null(pc.is_in(label, value_set=_NEGATIVE), False).to_numpy(zero_copy_only=False)
    return is1, is1 | is0


def _token_indexes(table: pa.Table) -> tuple[list[pa.Array], dict[str, np.ndarray]]:
    """Each field's token index (its value; null where the token is no libFM ``index:value``), and per field the
    rows whose token is not."""
    indexes, masks = [], {}
    for name in FRAPPE_NAMES:
        m = pc.extract_regex(table.column(name), _TOKEN)
        masks[name] = m.is_null().to_numpy(zero_copy_only=False)
        indexes.append(pc.struct_field(m, "index").combine_chunks())
    return indexes, masks


def libfm_frames(path: Path, rows: int, names: list[str]) -> Iterator[pd.DataFrame]:
    """libFM lines to score (``names``: with the label or without it), vetted as :class:`FrappeReader` vets them
    for ``prepare``: a line it counts as a bad row (another number of fields, a run of spaces or a tab between
    tokens, a token that is no ``index:value``, bytes that are not UTF-8) cannot be scored and is refused by its
    line; a blank line is no row. Each field holds its token's index (its value) as text, the label as written."""
    for first, block in iter_line_blocks(path, rows):
        bad = BadRowLog()
        buf, line_no, _ = split_block(block, first, b" ", len(names), bad, strip_trailing_sep=True)
        kinds = sorted((k for k in bad.counts if k != "blank_line"), key=lambda k: bad.samples[k]["line"])
        if kinds:
            raise DataError(f"{path}, {bad.describe(kinds[0])}; prepare counts such a line as a bad row "
                            f"({kinds[0]}), and it cannot be scored: mend or remove it")
        if not len(line_no):
            continue
        table = parse_block(buf, names, b" ")
        if "label" in names:  # as prepare reads it: another label is a bad row there (bad_label)
            label = table.column("label")
            wrong = np.flatnonzero(~_labels(label)[1])
            if len(wrong):
                raise DataError(f"{path}, line {line_no[wrong[0]]}, column 'label': expected 1, +1, -1 or 0, got "
                                f"{label[int(wrong[0])].as_py()!r}; prepare counts such a line as a bad row "
                                "(bad_label), and it cannot be scored: mend or remove it")
        indexes, masks = _token_indexes(table)
        column, i = first_offender(masks, np.logical_or.reduce(list(masks.values())))
        if column is not None:
            raise DataError(f"{path}, line {line_no[i]}, column {column!r}: expected a libFM token index:value, got "
                            f"{table.column(column)[i].as_py()!r}; prepare counts such a line as a bad row "
                            "(bad_token), and it cannot be scored: mend or remove it")
        columns = {"label": table.column("label")} if "label" in names else {}
        columns.update(zip(FRAPPE_NAMES, indexes, strict=True))
        yield pd.DataFrame({k: pd.Series(v.to_pylist(), dtype=object) for k, v in columns.items()})
