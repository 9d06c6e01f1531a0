"""Data: loading (built-in, local files, Hub, in memory), few-shot sampling and contrastive batch samplers."""

from .builtin import BUILTIN_DATASETS, describe_builtin, load_builtin
from . import sets  # noqa: F401 - registers the sets read from other packages
from .loading import (LABEL, TEXT, TEXT_PAIR, TextData, data_hash, load_data, load_hub, load_local, load_memory,
                      read_table)
from .samplers import ClassBalancedBatchSampler
from .sampling import sample_per_class, sample_stratified

__all__ = [
    "BUILTIN_DATASETS", "ClassBalancedBatchSampler", "LABEL", "TEXT", "TEXT_PAIR", "TextData", "data_hash",
    "describe_builtin", "load_builtin", "load_data", "load_hub", "load_local", "load_memory", "read_table",
    "sample_per_class", "sample_stratified",
]
