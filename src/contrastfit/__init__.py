"""contrastfit: fine-tune pretrained transformer encoders for text classification with supervised
contrastive objectives (CE, CE+SCL, SupCL-Seq, SimCSE, DiffCSE, SoftTriple, LaCon), behind one API
and one CLI."""

__version__ = "0.1.0"

from .data import TextData, load_data  # noqa: E402
from .encoders import TextEncoder, load_backbone, set_dropout  # noqa: E402
from .errors import ConfigError, ContrastfitError, DataError, ModelError  # noqa: E402
from .evaluation import evaluate_model  # noqa: E402
from .losses import SupConLoss, supcon  # noqa: E402
from .methods import available_methods, get_method  # noqa: E402
from .modeling import ContrastiveClassifier  # noqa: E402
from .multitask import MultiTaskConfig, MultiTaskModel, Task, train_multitask  # noqa: E402
from . import pretrain  # noqa: E402  (the module: contrastfit.pretrain.pretrain(...), stage 1 on its own corpus)
from .training import TrainConfig, train  # noqa: E402

__all__ = [
    "ConfigError", "ContrastfitError", "ContrastiveClassifier", "DataError", "ModelError", "MultiTaskConfig",
    "MultiTaskModel", "SupConLoss", "Task", "TextData", "TextEncoder", "TrainConfig", "available_methods",
    "evaluate_model", "get_method", "load_backbone", "load_data", "pretrain", "set_dropout", "supcon", "train",
    "train_multitask",
]
