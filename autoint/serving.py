"""The MLflow pyfunc model: raw rows (the original columns) in, click probabilities out.

Kept apart from :mod:`autoint.tracking` (which logs training runs and imports
Lightning for its callback) so that loading and serving the model imports
mlflow's pyfunc interface and the scoring path (:mod:`autoint.predict`) only.
"""

from __future__ import annotations

from typing import Any

import mlflow.pyfunc
import numpy as np
import pandas as pd

from .predict import Scorer


class AutoIntPyfunc(mlflow.pyfunc.PythonModel):
    """Raw rows → click probabilities.

    The checkpoint artifact carries config, schema, vocabularies and weights;
    rows are encoded exactly as in training, unseen values going to OOV.
    """

    def load_context(self, context: mlflow.pyfunc.PythonModelContext) -> None:
        self.scorer = Scorer.from_checkpoint(context.artifacts["checkpoint"])

    def predict(self, context: Any, model_input: pd.DataFrame, params: dict[str, Any] | None = None) -> np.ndarray:
        return self.scorer.score_frame(pd.DataFrame(model_input))
