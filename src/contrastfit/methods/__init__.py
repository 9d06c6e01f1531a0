"""Training methods, one file each (shared parts of the SimCSE family in ``simcse_base.py``); importing
this package registers all of them (every module of the package is imported, so a new file that
registers its method is all it takes). See :mod:`.base` for how to write one."""

import importlib
import pkgutil

from .base import (HeadStage, Hparams, LogisticHead, LossOutput, Method, MethodSpec, ParamGroup, available_methods,
                   get_method, hparam, multilabel_methods, register_label_sets, register_method, register_preset)

__all__ = ["HeadStage", "Hparams", "LogisticHead", "Method", "MethodSpec", "LossOutput", "ParamGroup",
           "available_methods", "get_method", "hparam", "multilabel_methods", "register_label_sets", "register_method",
           "register_preset"]

for _module in pkgutil.iter_modules(__path__):
    if _module.name != "base":
        importlib.import_module(f"{__name__}.{_module.name}")
