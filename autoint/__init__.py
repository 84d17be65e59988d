"""autoint: AutoInt click-through-rate models (Song et al., CIKM 2019, arXiv:1810.11921)."""

from .config import Config, ConfigError, ModelConfig, load_config
from .model import AutoInt, count_parameters
from .schema import FieldSpec, Schema

__version__ = "0.1.0"

__all__ = ["AutoInt", "Config", "ConfigError", "FieldSpec", "ModelConfig", "Schema", "count_parameters",
           "load_config"]
