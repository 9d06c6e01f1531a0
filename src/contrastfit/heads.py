"""Prediction heads on top of the pooled sentence embedding."""

from __future__ import annotations

import torch
from torch import nn


class LinearHead(nn.Module):
    """BERT-style classification head: dropout, then one linear layer (Devlin et al., 2019)."""

    def __init__(self, hidden_size: int, num_outputs: int, dropout: float = 0.1):
        super().__init__()
        self.dropout = nn.Dropout(dropout)
        self.linear = nn.Linear(hidden_size, num_outputs)

    def forward(self, embeddings: torch.Tensor) -> torch.Tensor:
        return self.linear(self.dropout(embeddings))


class MLPHead(nn.Module):
    """``depth`` linear layers with a non-linearity between them (RoBERTa's head has depth 2)."""

    def __init__(self, hidden_size: int, num_outputs: int, depth: int = 2, inner_size: int | None = None,
                 dropout: float = 0.1, activation: str = "tanh"):
        super().__init__()
        if depth < 1:
            raise ValueError("an MLP head needs depth >= 1")
        inner = inner_size or hidden_size
        act = {"tanh": nn.Tanh, "relu": nn.ReLU, "gelu": nn.GELU}[activation]
        layers: list[nn.Module] = []
        width = hidden_size
        for _ in range(depth - 1):
            layers += [nn.Dropout(dropout), nn.Linear(width, inner), act()]
            width = inner
        layers += [nn.Dropout(dropout), nn.Linear(width, num_outputs)]
        self.layers = nn.Sequential(*layers)

    def forward(self, embeddings: torch.Tensor) -> torch.Tensor:
        return self.layers(embeddings)


HEADS = {"linear": LinearHead, "mlp": MLPHead}


def build_head(kind: str, hidden_size: int, num_outputs: int, **kwargs) -> nn.Module:
    try:
        cls = HEADS[kind]
    except KeyError:
        raise ValueError(f"unknown head '{kind}' (choose from {', '.join(HEADS)})") from None
    return cls(hidden_size, num_outputs, **kwargs)
