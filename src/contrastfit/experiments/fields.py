"""The value types of experiment configs, shared by :mod:`.schema` and the protocol files
(:mod:`.protocols`): one value or a list, numbers kept as written, one-line messages, and the names
other modules check (methods, their hyper-parameters)."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BeforeValidator, Field, PositiveInt, ValidationError, WrapValidator
from pydantic_core import PydanticCustomError

from ..errors import ConfigError
from ..methods import get_method
from ..methods.base import resolve_hparams

__all__ = ["Counts", "Number", "PositiveNumber", "Rate", "as_list", "as_written", "asked", "explained",
           "hparams_of", "invalid", "method_name", "one_or_more"]


def as_list(value: Any) -> list:
    """``value`` if it is a list, else ``[value]`` (a list value in a config is a list of settings)."""
    return value if isinstance(value, list) else [value]


def one_or_more(item: Any) -> Any:
    """A list of ``item`` (at least one); a single value is read as a one-element list."""
    return Annotated[list[item], BeforeValidator(as_list), Field(min_length=1)]


def as_written(value: Any, handler: Any) -> Any:
    """Validate as a float, but keep an int as the int it was (``3``, not ``3.0``)."""
    out = handler(value)
    return value if type(value) is int else out


Number = Annotated[float, WrapValidator(as_written)]
PositiveNumber = Annotated[float, Field(gt=0), WrapValidator(as_written)]
Rate = Annotated[float, Field(ge=0, le=1), WrapValidator(as_written)]
Counts = one_or_more(PositiveInt)


def explained(message: str) -> WrapValidator:
    """A validator that reports any problem of the value it wraps as ``message`` (one line, instead of
    one error per member of a union)."""
    def validate(value: Any, handler: Any) -> Any:
        try:
            return handler(value)
        except ValidationError:
            raise invalid(message) from None

    return WrapValidator(validate)


def invalid(message: str) -> PydanticCustomError:
    """A schema error with ``message`` as it is (no template fields)."""
    return PydanticCustomError("invalid", message)


def asked(check: Any, *args: Any) -> Any:
    """``check(*args)``, another module's own validation; its ConfigError becomes a schema error."""
    try:
        return check(*args)
    except ConfigError as exc:
        raise invalid(str(exc)) from None


def method_name(name: str) -> str:
    asked(get_method, name)
    return name


def hparams_of(method: str, given: dict[str, Any]) -> None:
    """Names and values of ``given`` checked by the method's own schema (its ``Hparams``, ``resolve_hparams``)."""
    asked(resolve_hparams, method, given)
