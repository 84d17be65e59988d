"""Typed description of the fields a model sees, in the order it sees them.

A :class:`Schema` is produced by preprocessing (``schema.json`` in a processed
folder) and consumed by the model, the data module and the inspection tools.
Field order is fixed here and nowhere else.

Index conventions shared by every categorical and multi-valued field
(see :mod:`autoint.preprocess`): ``0`` is padding (only ever produced inside a
multi-valued list), ``1`` is out-of-vocabulary, ``2`` is "missing", and the
fitted values start at ``3``.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

from .errors import MissingInput
from .files import write_json

PAD, OOV, MISSING = 0, 1, 2
FIRST_VALUE = 3

CATEGORICAL, NUMERIC, MULTI = "categorical", "numeric", "multi"
KINDS = (CATEGORICAL, NUMERIC, MULTI)


@dataclass(frozen=True)
class FieldSpec:
    """One input field.

    ``vocab_size`` counts every index the field can take (reserved ones
    included) and is ``None`` until a vocabulary has been fitted.
    ``max_len`` is the padded list length of a multi-valued field (1 otherwise).
    """

    name: str
    kind: str
    vocab_size: int | None = None
    max_len: int = 1

    def __post_init__(self) -> None:
        if not self.name or not isinstance(self.name, str):
            raise ValueError(f"field name must be a non-empty string, got {self.name!r}")
        if self.kind not in KINDS:
            raise ValueError(f"field {self.name!r}: kind must be one of {KINDS}, got {self.kind!r}")
        if self.vocab_size is not None and self.kind != NUMERIC and self.vocab_size < FIRST_VALUE:
            raise ValueError(
                f"field {self.name!r}: vocab_size must be >= {FIRST_VALUE} (reserved indices), "
                f"got {self.vocab_size}"
            )
        if self.max_len < 1:
            raise ValueError(f"field {self.name!r}: max_len must be >= 1, got {self.max_len}")


@dataclass(frozen=True)
class Schema:
    """Ordered fields plus the label column name."""

    fields: tuple[FieldSpec, ...]
    label: str = "label"

    def __post_init__(self) -> None:
        object.__setattr__(self, "fields", tuple(self.fields))
        if not self.fields:
            raise ValueError("schema has no fields")
        names = [f.name for f in self.fields]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"schema has duplicate field names: {dupes}")
        if self.label in names:
            raise ValueError(f"label column {self.label!r} is also a field")

    # --- views by kind, each in schema order ---------------------------------
    def of_kind(self, kind: str) -> tuple[FieldSpec, ...]:
        return tuple(f for f in self.fields if f.kind == kind)

    @property
    def categorical(self) -> tuple[FieldSpec, ...]:
        return self.of_kind(CATEGORICAL)

    @property
    def numeric(self) -> tuple[FieldSpec, ...]:
        return self.of_kind(NUMERIC)

    @property
    def multi(self) -> tuple[FieldSpec, ...]:
        return self.of_kind(MULTI)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(f.name for f in self.fields)

    def __len__(self) -> int:
        return len(self.fields)

    def __getitem__(self, name: str) -> FieldSpec:
        for f in self.fields:
            if f.name == name:
                return f
        raise KeyError(f"no field named {name!r} in schema")

    @property
    def is_fitted(self) -> bool:
        return all(f.kind == NUMERIC or f.vocab_size is not None for f in self.fields)

    # --- JSON round trip -------------------------------------------------------
    def to_dict(self) -> dict:
        return {"label": self.label, "fields": [asdict(f) for f in self.fields]}

    @classmethod
    def from_dict(cls, d: dict) -> Schema:
        try:
            return cls(fields=tuple(FieldSpec(**f) for f in d["fields"]), label=d.get("label", "label"))
        except (KeyError, TypeError) as e:
            raise ValueError(f"malformed schema: {e}") from e

    def save(self, path: str | Path) -> None:
        write_json(path, self.to_dict())

    @classmethod
    def load(cls, path: str | Path) -> Schema:
        path = Path(path)
        if not path.is_file():
            raise MissingInput(f"schema file not found: {path}")
        try:
            return cls.from_dict(json.loads(path.read_text()))
        except (json.JSONDecodeError, ValueError) as e:
            from .datasets.errors import DataError  # the file is bad input, not a bug

            raise DataError(f"{path}: {e}") from None
