"""The whole training split, one run (no sampling); the data's validation split (or a fixed subset of
``validation_size``) and its test split."""

from __future__ import annotations

from typing import Literal

from .base import ProtocolOptions, register_protocol
from .few_shot import few_shot


class Full(ProtocolOptions):
    kind: Literal["full"]
    order = 20
    no_multi_label = None


@register_protocol(Full)
def full(data, seed: int = 0, validation_size: int | None = None):
    """The whole training split (no sampling)."""
    return few_shot(data, shots=None, train_size=None, samples=1, validation_size=validation_size, seed=seed)
