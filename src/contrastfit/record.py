"""The run record: what one training job made and everything that made it, written and read by one class.

Every job of the pipeline (:mod:`contrastfit.pipeline`) ends with a :class:`Record`: :func:`contrastfit.train`
and :func:`contrastfit.multitask.train_multitask` write it as ``results.json``,
:func:`contrastfit.pretrain.pretrain` as ``contrastfit_pretrain.json``; everything that reads a run back
(:mod:`contrastfit.experiments.records`, the model card, the experiment runner, the command line) reads it
through :meth:`Record.from_dict` and its attributes. The JSON is the dict of :meth:`Record.to_dict`::

    {"version": 1, "kind": "train" | "multitask" | "pretrain",
     "method", "hparams", "model", "seed",            # what trained (multitask: no method)
     "data",                                         # train: the data description; pretrain: the corpus
     "tasks", "schedule", "select_on",               # multitask only: each task's spec, data and metrics
     "training", "metrics", "timings", "versions",   # settings and steps; validation / test; phases; libraries
     "tags", "identity", "log_history"}              # the user's tags; the run identity; the Trainer's log

``identity`` is the run's identity (:mod:`contrastfit.identity`): ``{"sha256", "spec"}``, the
content hash of everything that made the run; the experiment runner's (``tags.run_identity``) for a run it
made, else the job's own (:func:`contrastfit.identity.run_identity`).

Versions: a record without ``version`` (written before it existed, version 0) reads as version 1 (a
pre-training record's ``base_model``, ``base_model_path``, ``pooling``, ``max_length`` and ``corpus`` move
to ``model``, ``training`` and ``data``); a record of a later version than :data:`RECORD_VERSION` is refused
with one line (:class:`~contrastfit.errors.ContrastfitError`).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from .atomic import write_json_atomic
from .errors import ContrastfitError
from .identity import record_identity

__all__ = ["KINDS", "RECORD_VERSION", "RESULTS_NAME", "Record", "read_record"]

#: The record of a run of ``train`` or ``train_multitask``, in its output folder.
RESULTS_NAME = "results.json"
#: The version :meth:`Record.to_dict` writes.
RECORD_VERSION = 1
KINDS = ("train", "multitask", "pretrain")
#: Version 0 pre-training records kept these at the top level; version 1 keeps them in ``training``.
_PRETRAIN_V0_TRAINING = ("base_model_path", "pooling", "max_length")


@dataclass
class Record:
    """One run's record (see the module docstring). Entries a kind has not (``data`` of a multi-task run,
    ``tasks`` of a single-task one) are None and left out of :meth:`to_dict`."""

    kind: str = "train"
    method: str | None = None
    #: the method's resolved hyper-parameters (multitask: None, each task's objective is in its spec)
    hparams: dict[str, Any] | None = None
    #: the encoder the run started from (a built-in name, a local folder or a Hub name)
    model: str | None = None
    seed: int | None = None
    #: train: the data description (name, source, task, label_names, text_pair, sampling, and the size
    #: and hash of each split's rows); pretrain: the corpus (source, kind, n_texts, rows_hash, ...)
    data: dict[str, Any] | None = None
    #: multitask: ``{task: {"spec", "data", "metrics"}}``
    tasks: dict[str, dict[str, Any]] | None = None
    schedule: dict[str, Any] | None = None
    select_on: str | None = None
    training: dict[str, Any] = field(default_factory=dict)
    #: ``{split: {metric: value}}`` (multitask: ``{split: {"average", task: headline metrics}}``)
    metrics: dict[str, Any] = field(default_factory=dict)
    #: seconds of the run's phases (``setup_s``, ``train_s``, ``eval_s``)
    timings: dict[str, float] = field(default_factory=dict)
    versions: dict[str, str] = field(default_factory=dict)
    tags: dict[str, Any] = field(default_factory=dict)
    #: the run identity, ``{"sha256", "spec"}`` (None: a record written before identities)
    identity: dict[str, Any] | None = None
    log_history: list[dict[str, Any]] = field(default_factory=list)
    version: int = RECORD_VERSION

    # -- reading and writing

    def to_dict(self) -> dict[str, Any]:
        """The JSON form: ``version`` first, then every entry that is not None, in field order."""
        out = {"version": self.version}
        out.update((f.name, getattr(self, f.name)) for f in fields(self)
                   if f.name != "version" and getattr(self, f.name) is not None)
        return out

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any], where: str = "a run record") -> Record:
        """The record of a ``results.json`` (or ``contrastfit_pretrain.json``) dict, of any version up to
        :data:`RECORD_VERSION`; a later version, an unknown kind or an entry of the wrong type is a
        one-line :class:`~contrastfit.errors.ContrastfitError` naming ``where``."""
        if not isinstance(raw, Mapping):
            raise ContrastfitError(f"{where} is not a mapping: {str(raw)[:60]!r}")
        values = dict(raw)
        version = values.pop("version", 0)
        if not isinstance(version, int) or isinstance(version, bool) or version < 0:
            raise ContrastfitError(f"{where}: version is not a whole number >= 0 (got {version!r})")
        if version > RECORD_VERSION:
            raise ContrastfitError(f"{where} is of record version {version}, newer than this contrastfit reads "
                                   f"({RECORD_VERSION}); upgrade contrastfit to read it")
        if version == 0:
            values = _from_v0(values)
        kind = values.setdefault("kind", "train")
        if kind not in KINDS:
            raise ContrastfitError(f"{where}: unknown kind {kind!r} (one of {', '.join(KINDS)})")
        known = {f.name for f in fields(cls)}
        for name in ("hparams", "data", "tasks", "schedule", "training", "metrics", "timings", "versions", "tags",
                     "identity"):
            if values.get(name) is not None and not isinstance(values[name], Mapping):
                raise ContrastfitError(f"{where}: {name} is not a mapping (got {str(values[name])[:60]!r})")
        history = values.get("log_history")
        if history is not None and not isinstance(history, list):
            raise ContrastfitError(f"{where}: log_history is not a list")
        return cls(**{k: v for k, v in values.items() if k in known and v is not None}, version=RECORD_VERSION)

    def write(self, path: str | os.PathLike) -> Path:
        """Write :meth:`to_dict` to ``path`` as JSON, atomically."""
        return write_json_atomic(Path(path), self.to_dict())

    # -- what readers ask of it

    @property
    def identity_sha256(self) -> str | None:
        """The identity hash (``identity.sha256``, else that of ``tags.run_identity``), or None."""
        return record_identity({"identity": self.identity, "tags": self.tags})

    @property
    def task(self) -> str | None:
        """The data's task (``classification`` or ``regression``) of a single-task run."""
        return (self.data or {}).get("task")

    @property
    def label_names(self) -> list[str] | None:
        return (self.data or {}).get("label_names")

    def data_entry(self, key: str) -> Any:
        """``data[key]`` (e.g. ``train_hash``, ``train_size``, ``name``), None when absent."""
        return (self.data or {}).get(key)


def _from_v0(values: dict[str, Any]) -> dict[str, Any]:
    """A version-0 record's entries as version 1 has them."""
    if values.get("kind") == "pretrain":
        training = dict(values.get("training") or {})
        for key in _PRETRAIN_V0_TRAINING:
            if key in values:
                training[key] = values.pop(key)
        values["training"] = training
        values["model"] = values.pop("base_model", None)
        values["data"] = values.pop("corpus", None)
    return values


def read_record(path: str | os.PathLike) -> Record:
    """The :class:`Record` in the JSON file ``path``; a one-line
    :class:`~contrastfit.errors.ContrastfitError` when it is unreadable or not a record."""
    path = Path(path)
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise ContrastfitError(f"{path}: unreadable run record ({type(exc).__name__}: {str(exc)[:80]})") from None
    return Record.from_dict(raw, str(path))
