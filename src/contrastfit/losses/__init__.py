"""Loss functions, one file per loss: pure functions in ``torch.nn.functional`` style plus thin
``nn.Module`` wrappers. Each file cites the paper and equation it implements."""

from .lacon import LaConLoss, LaConLossParts, lacon, lacon_predict
from .soft_triple import SOSNOWSKI_TABLE1, SoftTripleLoss, flatten_tokens, soft_triple
from .supcon import SupConLoss, supcon

__all__ = [
    "supcon",
    "SupConLoss",
    "soft_triple",
    "flatten_tokens",
    "SoftTripleLoss",
    "SOSNOWSKI_TABLE1",
    "lacon",
    "lacon_predict",
    "LaConLoss",
    "LaConLossParts",
]
