"""Criteo display-advertising logs: Kaggle ``train.txt``, ``dac_sample.txt``, 1TB ``day_N``.

One row per line, tab separated, no header: ``label``, 13 integer features
``I1..I13``, 26 hashed categorical features ``C1..C26`` (8 hex digits); any
feature may be empty. The raw input may be one file or many (a folder, a glob
such as ``day_*.gz``, a list); ``*.gz`` and ``*.zst`` files are decompressed as read.

Lines are vetted in blocks with numpy (field count, UTF-8) and parsed by
Arrow's CSV reader; integers are parsed by an Arrow cast. The slow per-value
paths only run on a block that fails to decode or a column that fails to
parse. Bad rows are counted by kind with their line numbers (see
:class:`~autoint.datasets.base.BadRowLog`), each row once, under its first problem.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from autoint.datasets.base import RawReader, first_offender, parse_numbers_arrow
from autoint.datasets.errors import DataError
from autoint.datasets.text import (
    TextLayout,
    fast_parse,
    file_labels,
    first_line,
    iter_line_blocks,
    parse_block,
    split_block,
)
from autoint.schema import CATEGORICAL, NUMERIC, FieldSpec

INT_NAMES = tuple(f"I{i}" for i in range(1, 14))
CAT_NAMES = tuple(f"C{i}" for i in range(1, 27))
CRITEO_FIELDS: tuple[FieldSpec, ...] = tuple(FieldSpec(n, NUMERIC) for n in INT_NAMES) + tuple(
    FieldSpec(n, CATEGORICAL) for n in CAT_NAMES
)
_COLUMNS = ["label", *INT_NAMES, *CAT_NAMES]
# The label read as text: Arrow's int8 conversion also takes "01", " 1", "-0" and "0x1", which the line-by-line
# path (a block with a malformed line) refuses, so a label's fate hung on the other lines of its block.
_TYPES = {"label": pa.string(), **dict.fromkeys(INT_NAMES, pa.float64()), **dict.fromkeys(CAT_NAMES, pa.string())}


def _labels(table: pa.Table) -> pa.Table | None:
    """The table with its label as int8, when every label is the text 0 or 1; else None."""
    label = table.column("label")
    is1 = pc.equal(label, "1")
    if label.null_count or not pc.all(pc.or_(is1, pc.equal(label, "0"))).as_py():
        return None
    return table.set_column(0, "label", pc.cast(is1, pa.int8()))


class CriteoReader(RawReader):
    """Reader for raw Criteo TSV; the paper's numeric transform is the default."""

    format = "criteo"
    text_only = True
    default_numeric_transform = "criteo"

    @property
    def fields(self) -> tuple[FieldSpec, ...]:
        return CRITEO_FIELDS

    def text_layout(self, path: Path) -> TextLayout | None:
        """Criteo's own lines: tab-separated, no header, with the label (40 fields) or without it (39,
        as in Kaggle's ``test.txt``); None for a file whose first line names columns, or another layout."""
        try:
            first = first_line(path).split("\t")
        except UnicodeDecodeError:
            return None
        if set(first) & set(_COLUMNS):  # a header line
            return None
        names = {len(_COLUMNS): _COLUMNS, len(_COLUMNS) - 1: _COLUMNS[1:]}.get(len(first))
        if names is None and len(first) > len(_COLUMNS) // 2:  # Criteo's lines, one cut or run over: read as a
            # table it was told "the rows lack column 'I1'", which hid what is wrong
            raise DataError(f"{path}, line 1: {len(first)} tab-separated fields; Criteo's lines have "
                            f"{len(_COLUMNS)} (the label, 13 integers, 26 categories), or {len(_COLUMNS) - 1} without "
                            "the label: mend or remove it (a table to score names its columns in a header line)")
        return None if names is None else TextLayout(sep="\t", names=list(names), header=False, quoting=False)

    def arrow_chunks(self, chunk_size: int) -> Iterator[tuple[pa.Table, np.ndarray]]:
        files = self.files()
        offset = 0  # row ordinals keep counting across files
        labels = file_labels(files)
        for path in files:
            fname = labels[path]
            n_lines = 0
            for first, block in iter_line_blocks(path, chunk_size):
                fast = fast_parse(block, _COLUMNS, _TYPES, b"\t")
                fast = None if fast is None else _labels(fast)
                if fast is not None:
                    self.rows_seen += fast.num_rows
                    n_lines += fast.num_rows
                    self._count_file_rows(path, fast.num_rows)
                    yield fast, offset + first - 1 + np.arange(fast.num_rows, dtype=np.int64)
                    continue
                # Something in this block is malformed: vet it line by line to say where and why.
                buf, line_no, n_block = split_block(block, first, b"\t", len(_COLUMNS), self.bad, file=fname)
                self.rows_seen += n_block
                n_lines += n_block
                del block
                if len(line_no) == 0:
                    continue
                out, ok = self._parse(buf, line_no, fname)
                if out.num_rows:
                    self._count_file_rows(path, out.num_rows)
                    yield out, offset + line_no[ok] - 1
            offset += n_lines

    def _parse(self, buf: bytes, line_no: np.ndarray, fname: str | None) -> tuple[pa.Table, np.ndarray]:
        """Vetted lines → the raw Arrow table of the good rows, and the mask of good rows."""
        table = parse_block(buf, _COLUMNS, b"\t")
        label = table.column("label")
        is1 = pc.fill_null(pc.equal(label, "1"), False).to_numpy(zero_copy_only=False)
        is0 = pc.fill_null(pc.equal(label, "0"), False).to_numpy(zero_copy_only=False)
        ok = is1 | is0
        if not ok.all():
            self.bad.add("bad_label", line_no[~ok], fname, column="label", expected="0 or 1",
                         got=label[int(np.flatnonzero(~ok)[0])].as_py())
        arrays = [pa.array(is1.astype(np.int8))]
        non_numeric = np.zeros(len(line_no), dtype=bool)
        masks: dict[str, np.ndarray] = {}
        for name in INT_NAMES:
            num, masks[name] = parse_numbers_arrow(table.column(name))
            non_numeric |= masks[name]
            arrays.append(pa.array(num))
        column, i = first_offender(masks, non_numeric & ok)
        if column is not None:
            self.bad.add("non_numeric", line_no[non_numeric & ok], fname, column=column, expected="a number",
                         got=table.column(column)[i].as_py())
        ok &= ~non_numeric
        arrays.extend(table.column(name).combine_chunks() for name in CAT_NAMES)
        out = pa.Table.from_arrays(arrays, names=_COLUMNS)
        return (out if ok.all() else out.filter(pa.array(ok))), ok
