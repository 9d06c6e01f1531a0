"""One way to declare and validate a configuration schema.

Every mapping a user writes (an experiment config, its ``protocol:``, ``training:``, report and search
options) is declared once as a :class:`Schema` (a pydantic model that refuses unknown keys and does not
coerce across types) and parsed with :func:`parse`, which turns pydantic's multi-line report into the
one-line :class:`~contrastfit.errors.ConfigError` the CLI prints::

    class Protocol(Schema):
        kind: Literal["few-shot", "full"]
        samples: PositiveInt = 5

    protocol = parse(Protocol, raw, where="exp.yaml: protocol")
"""

from __future__ import annotations

from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, ValidationError

from .errors import ConfigError

__all__ = ["Schema", "parse", "describe_error"]


class Schema(BaseModel):
    """Base of every configuration schema: unknown keys are errors, values are not silently coerced
    (``"3"`` is not an int), and parsed objects are immutable."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True, populate_by_name=True)


S = TypeVar("S", bound=BaseModel)


def describe_error(exc: ValidationError, where: str, model: type[BaseModel] | None = None) -> str:
    """The first problem of ``exc`` as one line: ``where: key.path: what is wrong (got VALUE)``; an
    unknown top-level key of ``model`` is listed with the allowed ones."""
    err = exc.errors(include_url=False)[0]
    loc = err.get("loc", ())
    path = ".".join(str(p) for p in loc)
    if err.get("type") == "extra_forbidden":
        msg = f"unknown key '{path}'"
        if model is not None and len(loc) == 1:
            msg += f" (allowed: {', '.join(sorted(model.model_fields))})"
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
