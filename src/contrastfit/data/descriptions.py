"""Label descriptions: a text per class that the methods using label names encode in place of the name.

A label name says what its class is about only where it is a word (``positive``, ``sport``); a code
(``ABBR``, ``0``) says nothing, and the label-name methods leave codes out
(:func:`~contrastfit.methods.base.label_anchor_problem`). ``--label-descriptions FILE`` gives each
class a text of the user's (``ABBR`` -> ``an abbreviation or what one stands for``) that the default
recipe's label anchors and prior, and ``zero-shot``, encode instead of the name.

The file, one description per label (labels without one keep their name):

* ``.json``: an object ``{"label": "description", ...}``;
* ``.yaml`` / ``.yml``: a mapping, the same;
* ``.csv`` / ``.tsv``: two columns with a header ``label,description`` (``label<TAB>description``).

In Python (and inline in an experiment's YAML) the mapping itself may be given instead of a file.
Labels are matched as the data's labels are read (surrounding white space dropped); a label that is
not one of the data's, an empty description, or a label given twice is a one-line error naming the file.
"""

from __future__ import annotations

import csv
import json
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ..errors import ConfigError
from ..yamlfile import DuplicateKeyError, load_yaml
from .loading import file_problem

__all__ = ["DESCRIPTION_SUFFIXES", "check_label_descriptions", "label_descriptions_for", "read_label_descriptions"]

DESCRIPTION_SUFFIXES = (".json", ".yaml", ".yml", ".csv", ".tsv")


def _pairs_from_file(path: Path) -> list[tuple[Any, Any]]:
    if not path.is_file():
        problem = file_problem(path) or "no such file"
        raise ConfigError(f"label descriptions: no such file {path}" if problem == "no such file"
                          else f"label descriptions {path}: {problem}")
    suffix = path.suffix.lower()
    if suffix not in DESCRIPTION_SUFFIXES:
        raise ConfigError(f"label descriptions {path}: give a {', '.join(DESCRIPTION_SUFFIXES)} file")
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise ConfigError(f"label descriptions {path}: not UTF-8 text") from None
    if suffix in (".csv", ".tsv"):
        rows = list(csv.reader(text.splitlines(), delimiter="\t" if suffix == ".tsv" else ","))
        header = [c.strip().lower() for c in rows[0]] if rows else []
        if header[:2] != ["label", "description"] or len(header) != 2:
            raise ConfigError(f"label descriptions {path}: the first row must be the header label,description "
                              f"(got {','.join(rows[0]) if rows else 'an empty file'})")
        bad = next((i for i, row in enumerate(rows[1:], start=2) if len(row) != 2), None)
        if bad is not None:
            raise ConfigError(f"label descriptions {path}: row {bad} has {len(rows[bad - 1])} cells, not 2 "
                              "(quote a description that holds the separator)")
        return [(row[0], row[1]) for row in rows[1:]]
    try:
        if suffix == ".json":
            data = json.loads(text, object_pairs_hook=_pairs_once)
        else:
            data = load_yaml(text)
    except (_Twice, DuplicateKeyError) as exc:  # json and PyYAML would keep the last silently
        key = exc.key if isinstance(exc, DuplicateKeyError) else exc.args[0]
        lines = f" (lines {exc.first_line} and {exc.second_line})" if isinstance(exc, DuplicateKeyError) else ""
        raise ConfigError(f"label descriptions {path}: label {str(key).strip()!r} is described twice{lines}") from None
    except Exception as exc:  # noqa: BLE001 (the parser's own message, one line)
        raise ConfigError(f"label descriptions {path}: not valid {suffix[1:].upper()} "
                          f"({str(exc).splitlines()[0]})") from None
    if not isinstance(data, Mapping):
        raise ConfigError(f"label descriptions {path}: give a mapping of label to description, "
                          f"not {type(data).__name__}")
    return list(data.items())


class _Twice(Exception):
    """A key given twice in one JSON object (``args[0]``)."""


def _pairs_once(items: list) -> dict:
    seen = set()
    for key, _ in items:
        if key in seen:
            raise _Twice(key)
        seen.add(key)
    return dict(items)


def _where(value: Any) -> str:
    """How an error names the descriptions: with the file, where they come from one."""
    return f"label descriptions {value}" if isinstance(value, (str, Path)) else "label descriptions"


def read_label_descriptions(value: str | Mapping[str, str] | None) -> dict[str, str] | None:
    """The descriptions ``value`` gives (a file path or a mapping), checked; None for None."""
    if value is None:
        return None
    where = _where(value)
    pairs = _pairs_from_file(Path(value)) if isinstance(value, (str, Path)) else list(value.items())
    out: dict[str, str] = {}
    for label, description in pairs:
        if not isinstance(description, str) or not description.strip():
            raise ConfigError(f"{where}: label {label!r} has an empty description or one that is not text "
                              f"({description!r})")
        key = str(label).strip()
        if key in out:
            raise ConfigError(f"{where}: label {key!r} is described twice")
        out[key] = " ".join(description.split())
    if not out:
        raise ConfigError(f"{where}: no label is described")
    return out


def check_label_descriptions(value: str | Mapping[str, str]) -> None:
    """The setting's check: the file reads (its labels are checked against the data's later)."""
    read_label_descriptions(value)


def label_descriptions_for(value: str | Mapping[str, str] | None, label_names: Sequence[str] | None) -> dict[str, str] | None:
    """The descriptions of ``value`` for the data's ``label_names``: each described label must be one of them."""
    descriptions = read_label_descriptions(value)
    if descriptions is None:
        return None
    if not label_names:
        raise ConfigError("label descriptions need class labels; this data has none (a regression target?)")
    names = [str(n) for n in label_names]
    unknown = [k for k in descriptions if k not in names]
    if unknown:
        raise ConfigError(f"{_where(value)}: {', '.join(map(repr, unknown[:3]))} "
                          f"{'is not a label' if len(unknown) == 1 else 'are not labels'} of the data "
                          f"(its labels: {', '.join(names[:10])}{', ...' if len(names) > 10 else ''})")
    return {n: descriptions[n] for n in names if n in descriptions}


def attach_label_descriptions(model, config) -> dict[str, str] | None:
    """``--label-descriptions`` read for ``model``'s labels and kept in ``model.info`` (saved with the
    model): what the label-name methods encode instead of the names (:meth:`Method.prepare`). Warns where
    the method uses no label names. Returns the descriptions (None without them)."""
    descriptions = label_descriptions_for(config.label_descriptions, model.label_names)
    if descriptions:
        model.info.label_descriptions = descriptions
        if not getattr(model.method, "uses_label_names", lambda: False)():
            hint = " (the multi-label forms use them with --param label_anchors=true or label_prior=1)"
            warnings.warn(f"{config.method} does not use label names; the label descriptions are not used"
                          f"{hint if config.multi_label else ''}", stacklevel=2)
    return descriptions or None
