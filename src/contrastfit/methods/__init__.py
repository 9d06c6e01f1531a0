"""Training methods, one file each (shared parts of the SimCSE family in ``_sentences.py``). Importing
this package registers all of them."""

from . import (ce, ce_scl, diffcse, dml, lacon, linear_probe, setfit, simcse_sup, simcse_unsup,  # noqa: F401
               supcl_seq)  # (registration side effects)
from .base import (HEAD_STAGE_DEFAULTS, LOGISTIC_HEAD_DEFAULTS, LossOutput, Method, MethodSpec, ParamGroup,
                   available_methods, get_method, register_method, register_preset)

__all__ = ["HEAD_STAGE_DEFAULTS", "LOGISTIC_HEAD_DEFAULTS", "Method", "MethodSpec", "LossOutput", "ParamGroup",
           "available_methods", "get_method", "register_method", "register_preset"]
