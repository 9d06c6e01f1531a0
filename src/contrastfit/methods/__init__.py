"""Training methods, one file each. Importing this package registers all of them."""

from . import ce, ce_scl  # noqa: F401  (registration side effects)
from .base import LossOutput, Method, MethodSpec, available_methods, get_method, register_method, register_preset

__all__ = ["Method", "MethodSpec", "LossOutput", "available_methods", "get_method", "register_method", "register_preset"]
