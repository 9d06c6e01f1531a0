"""contrastfit: fine-tune pretrained transformer encoders for text classification with supervised
contrastive objectives (CE, CE+SCL, SupCL-Seq, SimCSE, DiffCSE, SoftTriple, LaCon), behind one API
and one CLI."""

__version__ = "0.1.0"

import importlib

#: Where each public name lives. Imported on first use (PEP 562), so that ``import contrastfit.X``
#: loads only what X needs: the results store and the CLI's argument parsing start without torch.
_EXPORTS = {
    "TextData": "data", "load_data": "data",
    "TextEncoder": "encoders", "load_backbone": "encoders", "set_dropout": "encoders",
    "ConfigError": "errors", "ContrastfitError": "errors", "DataError": "errors", "ModelError": "errors",
    "evaluate_model": "evaluation",
    "SupConLoss": "losses", "supcon": "losses",
    "available_methods": "methods", "get_method": "methods",
    "ContrastiveClassifier": "modeling",
    "MultiTaskConfig": "multitask", "MultiTaskModel": "multitask", "Task": "multitask", "train_multitask": "training",
    "TrainConfig": "training", "train": "training",
    "distill": "distillation",
    "SearchResult": "experiments.search", "hyperparameter_search": "experiments.search",
}


def __getattr__(name: str):
    if name in _EXPORTS:
        value = getattr(importlib.import_module(f".{_EXPORTS[name]}", __name__), name)
    else:  # a submodule, e.g. contrastfit.pretrain (the module: contrastfit.pretrain.pretrain(...))
        try:
            value = importlib.import_module(f".{name}", __name__)
        except ModuleNotFoundError as err:
            if err.name != f"{__name__}.{name}":
                raise
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(_EXPORTS))


__all__ = [
    "ConfigError", "ContrastfitError", "ContrastiveClassifier", "DataError", "ModelError", "MultiTaskConfig",
    "MultiTaskModel", "SearchResult", "SupConLoss", "Task", "TextData", "TextEncoder", "TrainConfig",
    "available_methods", "distill", "evaluate_model", "get_method", "hyperparameter_search", "load_backbone", "load_data",
    "pretrain", "set_dropout", "supcon", "train", "train_multitask",
]
