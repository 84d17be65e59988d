"""Raw CTR logs → the canonical raw frame, one reader per format.

See :mod:`autoint.datasets.base` for the frame's contract; :func:`make_reader`
picks a reader from a :class:`~autoint.config.DataConfig`.
"""

from autoint.datasets.base import BadRowLog, DataError, RawReader, make_reader, reader_fields

__all__ = ["BadRowLog", "DataError", "RawReader", "make_reader", "reader_fields"]
