"""Loss functions, one file per loss: pure functions in ``torch.nn.functional`` style plus thin
``nn.Module`` wrappers. Each file cites the paper and equation it implements."""

from .supcon import SupConLoss, supcon

__all__ = ["supcon", "SupConLoss"]
