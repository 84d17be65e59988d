"""Criteo display-advertising logs: Kaggle ``train.txt``, ``dac_sample.txt``, 1TB ``day_N``.

One row per line, tab separated, no header: ``label``, 13 integer features
``I1..I13``, 26 hashed categorical features ``C1..C26`` (8 hex digits); any
feature may be empty. ``*.gz`` files are read through gzip.

Lines are vetted in blocks with numpy (field count, UTF-8) and parsed by
Arrow's CSV reader; integers are parsed by an Arrow cast. The slow per-value
paths only run on a block that fails to decode or a column that fails to
parse. Bad rows are counted by kind with their line numbers (see
:class:`~autoint.datasets.base.BadRowLog`), each row once, under its first problem.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from autoint.datasets.base import RawReader, iter_line_blocks, parse_block, parse_numbers_arrow, split_block
from autoint.schema import CATEGORICAL, NUMERIC, FieldSpec

INT_NAMES = tuple(f"I{i}" for i in range(1, 14))
CAT_NAMES = tuple(f"C{i}" for i in range(1, 27))
CRITEO_FIELDS: tuple[FieldSpec, ...] = tuple(FieldSpec(n, NUMERIC) for n in INT_NAMES) + tuple(
    FieldSpec(n, CATEGORICAL) for n in CAT_NAMES
)
_COLUMNS = ["label", *INT_NAMES, *CAT_NAMES]


class CriteoReader(RawReader):
    """Reader for raw Criteo TSV; the paper's numeric transform is the default."""

    format = "criteo"
    default_numeric_transform = "criteo"

    @property
    def fields(self) -> tuple[FieldSpec, ...]:
        return CRITEO_FIELDS

    def arrow_chunks(self, chunk_size: int) -> Iterator[tuple[pa.Table, np.ndarray]]:
        path = self._require_file()
        for first, block in iter_line_blocks(path, chunk_size):
            buf, line_no, n_block = split_block(block, first, b"\t", len(_COLUMNS), self.bad)
            self.rows_seen += n_block
            del block
            if len(line_no) == 0:
                continue
            table = parse_block(buf, _COLUMNS, b"\t")
            del buf
            label = table.column("label")
            is1 = pc.fill_null(pc.equal(label, "1"), False).to_numpy(zero_copy_only=False)
            is0 = pc.fill_null(pc.equal(label, "0"), False).to_numpy(zero_copy_only=False)
            ok = is1 | is0
            self.bad.add("bad_label", line_no[~ok])
            arrays = [pa.array(is1.astype(np.int8))]
            non_numeric = np.zeros(len(line_no), dtype=bool)
            for name in INT_NAMES:
                num, bad = parse_numbers_arrow(table.column(name))
                non_numeric |= bad
                arrays.append(pa.array(num))
            self.bad.add("non_numeric", line_no[non_numeric & ok])
            ok &= ~non_numeric
            arrays.extend(table.column(name).combine_chunks() for name in CAT_NAMES)
            out = pa.Table.from_arrays(arrays, names=_COLUMNS)
            if not ok.all():
                out = out.filter(pa.array(ok))
            if out.num_rows:
                yield out, line_no[ok] - 1
