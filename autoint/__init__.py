"""autoint: AutoInt click-through-rate models (Song et al., CIKM 2019, arXiv:1810.11921)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .config import Config, ConfigError, ModelConfig, load_config
from .schema import FieldSpec, Schema

if TYPE_CHECKING:
    from .model import AutoInt, count_parameters

__version__ = "0.1.0"

__all__ = ["AutoInt", "Config", "ConfigError", "FieldSpec", "ModelConfig", "Schema", "count_parameters",
           "load_config"]

_MODEL = ("AutoInt", "count_parameters")


def __getattr__(name: str) -> Any:
    """The model is imported on first use, so ``autoint prepare`` and the data modules do not load torch."""
    if name in _MODEL:
        from . import model

        return getattr(model, name)
    raise AttributeError(f"module 'autoint' has no attribute {name!r}")
