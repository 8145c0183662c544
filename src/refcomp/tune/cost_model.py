"""Cost models that predict a candidate's throughput from its features, trained online.

The model predicts a score (higher is faster): log of the workload's best measured time divided
by the candidate's time, so scores of different workloads share a scale.  `default_cost_model()`
is gradient boosting from xgboost when it is installed (an optional dependency), else
`RidgeModel`, a ridge regression on the features and their squares (numpy only).  Both are
refitted on every measured candidate after each search round.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

import numpy as np


class CostModel(Protocol):
    """Trained on (features, score) pairs; predicts scores for new feature rows."""

    def update(self, features: np.ndarray, scores: np.ndarray) -> None: ...

    def predict(self, features: np.ndarray) -> np.ndarray: ...


def scores_from_times(times: np.ndarray) -> np.ndarray:
    """log(best / t) for each time: 0 for the fastest, negative for slower ones."""
    times = np.asarray(times, dtype=np.float64)
    return np.log(np.min(times) / times)


@dataclass
class RidgeModel:
    """Ridge regression on [1, x, x^2]; predicts zeros before its first update."""

    alpha: float = 1.0
    weights: np.ndarray | None = None
    mean: np.ndarray | None = None
    scale: np.ndarray | None = None

    def _design(self, features: np.ndarray) -> np.ndarray:
        x = (np.asarray(features, dtype=np.float64) - self.mean) / self.scale
        return np.hstack([np.ones((x.shape[0], 1)), x, x * x])

    def update(self, features: np.ndarray, scores: np.ndarray) -> None:
        features = np.asarray(features, dtype=np.float64)
        self.mean = features.mean(axis=0)
        self.scale = features.std(axis=0) + 1e-9
        design = self._design(features)
        gram = design.T @ design + self.alpha * np.eye(design.shape[1])
        self.weights = np.linalg.solve(gram, design.T @ np.asarray(scores, dtype=np.float64))

    def predict(self, features: np.ndarray) -> np.ndarray:
        features = np.asarray(features, dtype=np.float64)
        if self.weights is None:
            return np.zeros(features.shape[0])
        return self._design(features) @ self.weights


@dataclass
class XGBModel:
    """Gradient-boosted trees (xgboost); predicts zeros before its first update."""

    rounds: int = 60
    params: dict = field(default_factory=lambda: {"max_depth": 6, "eta": 0.2, "subsample": 1.0,
                                                  "objective": "reg:squarederror", "nthread": 1,
                                                  "verbosity": 0})
    booster: object = None

    def update(self, features: np.ndarray, scores: np.ndarray) -> None:
        import xgboost

        data = xgboost.DMatrix(np.asarray(features, dtype=np.float64), label=np.asarray(scores, dtype=np.float64),
                               nthread=1)
        self.booster = xgboost.train(self.params, data, num_boost_round=self.rounds)

    def predict(self, features: np.ndarray) -> np.ndarray:
        features = np.asarray(features, dtype=np.float64)
        if self.booster is None:
            return np.zeros(features.shape[0])
        import xgboost

        return self.booster.predict(xgboost.DMatrix(features, nthread=1))


def xgboost_available() -> bool:
    """Whether the optional xgboost dependency can be imported."""
    try:
        import xgboost  # noqa: F401
    except Exception:
        return False
    return True


def default_cost_model() -> CostModel:
    """XGBModel when xgboost is installed, else RidgeModel."""
    return XGBModel() if xgboost_available() else RidgeModel()
