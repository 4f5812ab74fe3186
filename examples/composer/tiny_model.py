"""A tiny Composer model for the example and the tests: a linear regression on the ``x`` column."""

from __future__ import annotations

from typing import Any

import torch
from composer.models import ComposerModel


class TinyRegression(ComposerModel):
    """Predicts ``x.sum()`` from ``x``: enough for a real optimizer step on every batch."""

    def __init__(self, in_features: int = 4) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(in_features, 1)

    def forward(self, batch: dict[str, Any]) -> torch.Tensor:
        return self.linear(batch["x"])

    def loss(self, outputs: torch.Tensor, batch: dict[str, Any], *args: Any, **kwargs: Any) -> torch.Tensor:
        target = batch["x"].sum(dim=1, keepdim=True)
        return torch.nn.functional.mse_loss(outputs, target)


def build_model(in_features: int = 4) -> TinyRegression:
    """The ``model: {name: tiny_model:build_model}`` factory of ``tiny.yaml``."""
    return TinyRegression(in_features)
