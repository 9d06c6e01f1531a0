"""Training methods, one file each. Importing this package registers all of them."""

from . import ce, ce_scl, dml, lacon, linear_probe, setfit, simcse, supcl_seq  # noqa: F401  (registration side effects)
from .base import (HEAD_STAGE_DEFAULTS, LOGISTIC_HEAD_DEFAULTS, LossOutput, Method, MethodSpec, available_methods, get_method, register_method,
                   register_preset)

__all__ = ["HEAD_STAGE_DEFAULTS", "LOGISTIC_HEAD_DEFAULTS", "Method", "MethodSpec", "LossOutput", "available_methods", "get_method", "register_method", "register_preset"]
