"""Loss functions, one file per loss: pure functions in ``torch.nn.functional`` style plus thin
``nn.Module`` wrappers. Each file cites the paper and equation it implements."""

from .cosine_pairs import CosinePairsLoss, cosine_pairs
from .diffcse import DEFAULT_LAMBDA, ReplacedTokenDetectionLoss, diffcse_loss, replaced_token_detection
from .multilabel_supcon import JaccardSupConLoss, jaccard_supcon
from .lacon import LaConLoss, LaConLossParts, lacon, lacon_predict
from .similarity_distill import SimilarityDistillationLoss, similarity_distillation
from .simcse import SimCSELoss, SupervisedSimCSELoss, simcse_sup, simcse_unsup
from .soft_targets import SoftTargetKLLoss, soft_target_kl
from .soft_triple import SOSNOWSKI_TABLE1, SoftTripleLoss, flatten_tokens, soft_triple
from .supcon import SupConLoss, supcon

__all__ = [
    "supcon", "SupConLoss",
    "jaccard_supcon", "JaccardSupConLoss",
    "cosine_pairs", "CosinePairsLoss",
    "soft_triple", "flatten_tokens", "SoftTripleLoss", "SOSNOWSKI_TABLE1",
    "lacon", "lacon_predict", "LaConLoss", "LaConLossParts",
    "simcse_unsup", "simcse_sup", "SimCSELoss", "SupervisedSimCSELoss",
    "replaced_token_detection", "diffcse_loss", "ReplacedTokenDetectionLoss", "DEFAULT_LAMBDA",
    "soft_target_kl", "SoftTargetKLLoss",
    "similarity_distillation", "SimilarityDistillationLoss",
]
