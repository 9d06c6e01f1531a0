"""One way to declare and validate a configuration schema.

Every mapping a user writes (an experiment config, its ``protocol:``, ``training:``, report and search
options) is declared once as a :class:`Schema` (a pydantic model that refuses unknown keys and does not
coerce across types) and parsed with :func:`parse`, which turns pydantic's multi-line report into the
one-line :class:`~contrastfit.errors.ConfigError` the CLI prints::

    class Protocol(Schema):
        kind: Literal["few-shot", "full"]
        samples: PositiveInt = 5

    protocol = parse(Protocol, raw, where="exp.yaml: protocol")

A value of a declared setting (a :class:`~contrastfit.config.TrainConfig` field, a method's
hyper-parameter) that its declaration refuses is described by :func:`field_error`, from that
declaration: ``batch_size must be >= 1, got 0``.
"""

from __future__ import annotations

import types
import typing
from typing import Any, Mapping, TypeVar

from pydantic import BaseModel, ConfigDict, ValidationError

from .errors import ConfigError

__all__ = ["Schema", "parse", "describe_error", "field_error"]


class Schema(BaseModel):
    """Base of every configuration schema: unknown keys are errors, values are not silently coerced
    (``"3"`` is not an int), and parsed objects are immutable."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True, populate_by_name=True)


S = TypeVar("S", bound=BaseModel)


def describe_error(exc: ValidationError, where: str, model: type[BaseModel] | None = None) -> str:
    """The first problem of ``exc`` as one line: ``where: NAME must be EXPECTED, got VALUE`` for a value
    that a field of ``model`` declares otherwise (:func:`field_error`), else ``where: key.path: what is
    wrong (got VALUE)``; an unknown top-level key of ``model`` is listed with the allowed ones."""
    err = exc.errors(include_url=False)[0]
    loc = err.get("loc", ())
    path = ".".join(str(p) for p in loc)
    if err.get("type") == "extra_forbidden":
        msg = f"unknown key '{path}'"
        if model is not None and len(loc) == 1:
            msg += f" (allowed: {', '.join(sorted(model.model_fields))})"
    elif model is not None and _declared_value(model, err):
        msg = field_error(model, err)
    else:
        msg = f"{path + ': ' if path else ''}{err.get('msg', 'invalid value')}"
        if "input" in err and err.get("type") != "missing":
            shown = repr(err["input"])
            msg += f" (got {shown if len(shown) <= 60 else shown[:57] + '...'})"
    more = len(exc.errors()) - 1
    return f"{where}: {msg}" + (f" (and {more} more problem{'s' if more > 1 else ''})" if more > 0 else "")


def parse(model: type[S], data: Any, where: str) -> S:
    """Validate ``data`` (a mapping) against ``model``; a one-line :class:`ConfigError` naming ``where``
    and the offending key otherwise."""
    if not isinstance(data, dict):
        raise ConfigError(f"{where}: expected a mapping, got {data!r}")
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(describe_error(exc, where, model)) from None


_WORDS = {bool: "true or false", int: "int", float: "float", str: "a string", dict: "a mapping with text keys",
          list: "a list", tuple: "a comma-separated list"}
_BOUND_ERRORS = ("greater_than", "greater_than_equal", "less_than", "less_than_equal")
#: pydantic's errors that :func:`field_error` words from the field's declaration
_VALUE_ERRORS = frozenset({"literal_error", "finite_number", *_BOUND_ERRORS, "int_type", "int_parsing",
                           "int_from_float", "float_type", "float_parsing", "bool_type", "bool_parsing",
                           "string_type"})


def _declared_value(model: type[BaseModel], error: Mapping[str, Any]) -> bool:
    """Whether ``error`` is one of :data:`_VALUE_ERRORS` on a field of ``model`` or on an item of a
    list field (what :func:`field_error` describes)."""
    loc = error.get("loc", ())
    fields = {f.alias or n: f for n, f in model.model_fields.items()} | dict(model.model_fields)
    if error.get("type") not in _VALUE_ERRORS or not loc or loc[0] not in fields:
        return False
    return len(loc) == 1 or (len(loc) == 2 and isinstance(loc[1], int)
                             and typing.get_origin(_optional_arm(fields[loc[0]].annotation)) in (list, tuple))


def _required(annotation: Any) -> Any:
    """``X`` of ``X | None`` (a value that may be left out); any other annotation as it is."""
    arms = [a for a in typing.get_args(annotation) if a is not type(None)]
    return arms[0] if typing.get_origin(annotation) in (typing.Union, types.UnionType) and len(arms) == 1 else annotation


def _constraints(annotation: Any) -> list:
    """The constraints (``Gt(0)``, ...) of an ``Annotated`` type, or of the ``X`` of ``X | None``."""
    annotation = _required(annotation)
    if typing.get_origin(annotation) is not typing.Annotated:
        return []
    return [m for f in typing.get_args(annotation)[1:] for m in getattr(f, "metadata", [f])]


def _optional_arm(annotation: Any) -> Any:
    """``X`` of ``X | None`` without its ``Annotated`` constraints (a list that may be left out)."""
    annotation = _required(annotation)
    return typing.get_args(annotation)[0] if typing.get_origin(annotation) is typing.Annotated else annotation


def field_error(model: type[BaseModel], error: Mapping[str, Any], value: Any = None) -> str:
    """The one-line message for pydantic's ``error`` (an item of ``ValidationError.errors()``) on a field
    of ``model``: ``NAME must be EXPECTED, got VALUE``, what is expected read from the field's declaration
    (its type, its ``Literal`` choices, its bounds); ``value`` (default: the input pydantic names) is
    what the message shows. An error inside the value (an item of a list) is described by the item's
    type and bounds: ``each of view_dropouts must be in [0, 1), got 1.5``."""
    name, kind = str(error["loc"][0]), error["type"]
    value = error.get("input") if value is None else value
    info = next(f for n, f in model.model_fields.items() if name in (n, f.alias))
    annotation, constraints = info.annotation, [*info.metadata, *_constraints(info.annotation)]
    if len(error["loc"]) > 1 and typing.get_origin(_optional_arm(annotation)) in (list, tuple):
        annotation, name = typing.get_args(_optional_arm(annotation))[0], f"each of {name}"
        constraints = _constraints(annotation)
    literal = [a for a in (annotation, *typing.get_args(annotation)) if typing.get_origin(a) is typing.Literal]
    if kind == "literal_error" and literal:
        return f"{name} must be one of {', '.join(map(str, typing.get_args(literal[0])))}, got {value!r}"
    if kind == "finite_number":
        return f"{name} must be a finite number, got {value!r}"
    if kind in _BOUND_ERRORS:
        bounds = {k: getattr(m, k) for m in constraints for k in ("ge", "gt", "le", "lt")
                  if getattr(m, k, None) is not None} or dict(error.get("ctx") or {})  # ctx: one bound, in a union
        return f"{name} must be {_bounds_text(bounds)}, got {value!r}"
    if kind == "value_error":  # a validator's own ValueError: its text says what is expected
        return f"{name} {str(error['msg']).removeprefix('Value error, ')}, got {value!r}"
    plain = lambda k: plain(typing.get_args(k)[0]) if typing.get_origin(k) is typing.Annotated else k  # noqa: E731
    annotation = plain(annotation)
    kinds = [plain(k) for k in (typing.get_args(annotation) if typing.get_origin(annotation) not in (dict, list, tuple)
                                else ()) or (annotation,) if k is not type(None)]
    expected = " or ".join(_WORDS.get(typing.get_origin(k) or k, str(k)) for k in kinds)
    hint = ""
    if float in kinds and isinstance(value, str) and "e" in value.lower():  # PyYAML wants a dot in a float
        try:
            float(value)
            hint = " (YAML reads 2e-5 as text: write 2.0e-5)"
        except ValueError:
            pass
    return f"{name} must be {expected}, got {value!r}{hint}"


def _bounds_text(bounds: Mapping[str, float]) -> str:
    """``{"ge": 0, "lt": 1}`` -> ``in [0, 1)``; ``{"ge": 1}`` -> ``>= 1``."""
    low = ("[", bounds["ge"]) if "ge" in bounds else ("(", bounds["gt"]) if "gt" in bounds else None
    high = (bounds["le"], "]") if "le" in bounds else (bounds["lt"], ")") if "lt" in bounds else None
    if low and high:
        return f"in {low[0]}{low[1]}, {high[0]}{high[1]}"
    if low:
        return f"{'>=' if low[0] == '[' else '>'} {low[1]}"
    return f"{'<=' if high[1] == ']' else '<'} {high[0]}"
