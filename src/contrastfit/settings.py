"""Settings declared once: a dataclass field with its help, command-line option and allowed values.

:class:`~contrastfit.config.TrainConfig` and :class:`~contrastfit.multitask.MultiTaskConfig` declare
their fields with :func:`setting` (as do :class:`~contrastfit.multitask.Task` and
:class:`~contrastfit.pretrain.PretrainOptions`); :func:`check_fields` checks an instance against the declarations
(types from the annotations, strictly; choices; bounds; a field's own ``check``) and raises the first
problem as a one-line :class:`~contrastfit.errors.ConfigError` naming the field and the value, e.g.
``batch_size must be >= 1, got 0`` (:func:`contrastfit.schema.field_error`, the one formatter of a
declared value). ``contrastfit train``'s and ``contrastfit pretrain``'s options are generated from the same
declarations (:func:`contrastfit.cli.add_config_options`).

The configurations stay dataclasses (the training code reads and replaces their fields as plain
attributes); what :func:`check_fields` validates with is a pydantic model built from the declarations
(:func:`declared_model`, which also gives an experiment config its ``training:``, ``tasks:`` and
``pretrain:`` models), so a bad value is worded by the same :func:`contrastfit.schema.field_error` as a
method's hyper-parameter (:mod:`contrastfit.methods.base`) and an experiment config's value.
"""

from __future__ import annotations

import typing
from dataclasses import MISSING, field, fields
from functools import lru_cache
from typing import Any

from .errors import ConfigError
from pydantic import ConfigDict

from .schema import Schema, field_error

__all__ = ["setting", "same_as", "check_fields", "declared_type", "declared_model", "values_model"]


def setting(default: Any = None, help: str = "", *, factory: Any = None, group: str | None = None,
            flag: str | None = None, flag_help: str | None = None, metavar: str | None = None,
            choices: tuple[str, ...] | None = None, ge: float | None = None, gt: float | None = None,
            le: float | None = None, lt: float | None = None, check: Any = None) -> Any:
    """A dataclass field with everything about it in one place (``dataclasses.field`` metadata), read by
    :func:`check_fields` and, for :class:`~contrastfit.config.TrainConfig`, by the CLI:

    * ``help``: what the setting does (the ``--help`` text; the CLI appends a non-None default);
    * ``group``: its group of command-line options (``config.OPTION_GROUPS``; None: no option) and
      ``flag`` when the option is not ``--name-with-dashes``; a boolean is a switch that turns it on,
      or, for one that is on by default, off (``flag``, default ``--no-name``; ``flag_help`` says what
      that switch does); ``metavar`` names the value in ``--help``;
    * the values it takes, besides the annotation's type: ``choices``, bounds ``ge``/``gt``/``le``/
      ``lt`` (>=, >, <=, <), and ``check``, a function that raises :class:`ConfigError` for a
      value the others cannot describe (called on values that are not None).
    """
    meta = {"help": help, "group": group, "flag": flag, "flag_help": flag_help, "metavar": metavar,
            "choices": tuple(choices) if choices else None, "check": check,
            "bounds": {k: v for k, v in (("ge", ge), ("gt", gt), ("le", le), ("lt", lt)) if v is not None}}
    if factory is not None:
        return field(default_factory=factory, metadata=meta)
    return field(default=default, metadata=meta)


def same_as(cls: type, name: str, group: str | None = None) -> Any:
    """The field ``name`` of the dataclass ``cls`` declared again (default, help, allowed values), its
    command-line option (flag, metavar) in ``group`` (None: none): a setting that means the same in two
    configurations is declared once."""
    f = cls.__dataclass_fields__[name]
    return field(default=f.default, default_factory=f.default_factory, metadata={**f.metadata, "group": group})


def check_fields(config: Any) -> None:
    """Every field of the dataclass instance ``config``: its type from the annotation (strict: ``"3"``
    is not an int, ``1`` is not true, NaN is not a number; an int is a float), then its choices and
    bounds, then its ``check``. The first problem is a one-line :class:`ConfigError`."""
    from pydantic import ValidationError

    cls = type(config)
    values = {f.name: getattr(config, f.name) for f in fields(cls)}
    try:
        values_model(cls).model_validate(values)
    except ValidationError as exc:
        error = exc.errors(include_url=False)[0]
        raise ConfigError(field_error(values_model(cls), error, values[str(error["loc"][0])])) from None
    for f in fields(cls):
        if f.metadata.get("check") is not None and values[f.name] is not None:
            f.metadata["check"](values[f.name])


def declared_type(hint: Any, metadata: Any, number: Any = float) -> Any:
    """The pydantic type of a field declared with :func:`setting` (``metadata``) and annotated ``hint``:
    its ``choices`` as a ``Literal``, its bounds as constraints, ``float`` as ``number`` (an experiment
    config keeps an int as written), ``X | None`` kept optional. A field declared without
    :func:`setting` gets its annotation (with ``number`` for a float)."""
    from pydantic import Field

    arms = [a for a in typing.get_args(hint) if a is not type(None)]
    optional = len(arms) == 1 and len(typing.get_args(hint)) == 2
    kind = arms[0] if optional else hint
    if metadata.get("choices"):
        kind = typing.Literal[metadata["choices"]]
    elif kind is float:
        kind = number
    if metadata.get("bounds"):
        kind = typing.Annotated[kind, Field(**metadata["bounds"])]
    return typing.Optional[kind] if optional else kind


def declared_model(source: type, *, exclude: Any = (), defaults: Any = None, number: Any = float,
                   each: Any = None, base: Any = None, name: str | None = None, doc: str | None = None) -> Any:
    """A pydantic model (on ``base``, default: a strict schema that refuses NaN) of the dataclass
    ``source``'s fields but ``exclude``: each field's :func:`declared_type` and default (``defaults``
    over the dataclass's; a field with none is required), its ``help`` as the field's description (what
    docs/hooks.py shows in the experiment config's tables). With ``each``, every key is optional and
    its type ``each(type)`` (a grid of values, an override). :func:`check_fields` validates with it,
    and the experiment schema's ``training:``, ``tasks:`` and ``pretrain:`` models are it."""
    from pydantic import Field, create_model

    hints = typing.get_type_hints(source)
    spec: dict[str, Any] = {}
    for f in fields(source):
        if f.name in exclude:
            continue
        kind = declared_type(hints[f.name], f.metadata, number)
        described = {"description": f.metadata["help"]} if f.metadata.get("help") else {}  # docs text only
        if each is not None:
            spec[f.name] = (each(kind), Field(None, **described))
        elif defaults and f.name in defaults:
            spec[f.name] = (kind, Field(defaults[f.name], **described))
        elif f.default_factory is not MISSING:
            spec[f.name] = (kind, Field(default_factory=f.default_factory, **described))
        else:
            spec[f.name] = (kind, Field(... if f.default is MISSING else f.default, **described))
    base = base or _Values
    return create_model(name or f"{source.__name__}Values", __base__=base, __module__=base.__module__,
                        __doc__=doc, **spec)


class _Values(Schema):
    model_config = ConfigDict(allow_inf_nan=False)


#: ``declared_model(cls)``, built once per class: what :func:`check_fields` validates an instance with.
values_model = lru_cache(maxsize=None)(declared_model)
