"""A small MLP classifier: enough parameters to make checkpoints real, small enough for one CPU core."""

from __future__ import annotations

import torch
from torch import nn

from .config import ModelConfig


def build_model(config: ModelConfig, seed: int) -> nn.Module:
    """The model with weights drawn from a generator of its own, so the global RNG stays untouched."""
    layers: list[nn.Module] = []
    width = config.input_dim
    for _index in range(config.depth):
        layers += [nn.Linear(width, config.hidden_dim), nn.GELU(), nn.Dropout(config.dropout)]
        width = config.hidden_dim
    layers.append(nn.Linear(width, config.classes))
    model = nn.Sequential(*layers)
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for parameter in model.parameters():
            bound = 1.0 / max(1, parameter.shape[-1]) ** 0.5
            parameter.copy_(torch.rand(parameter.shape, generator=generator) * 2 * bound - bound)
    return model
