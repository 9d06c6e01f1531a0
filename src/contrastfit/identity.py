"""The identity of a run: the content hash of everything that made it.

A run's *identity spec* is a JSON mapping of what decides its result: the method and its resolved
hyper-parameters, the training settings (every ``TrainConfig`` field but the bookkeeping ones in
:data:`NOT_IDENTITY`, those left unset as the run fills them: the method's learning rate and minimum
steps; a label descriptions file as its content), the data (its name, options, the label names and the hashes of the rows of
every split of the loaded data), the run's own rows (setting, sample and the hashes of the training,
validation and test rows it used), the seed and the encoder (its name and, for a local folder, the
hash of its files); a transfer run adds its source model's spec, a multi-task variant its tasks,
schedule and stage-1 entry. Its *identity* is the sha256 of the spec's canonical JSON
(:func:`make_identity`): ``{"sha256": ..., "spec": ...}``, kept in the run's record as
``tags.run_identity``. The first :data:`SUFFIX_LEN` hex digits end the run's id (and folder name,
:func:`with_identity`), so an edited config makes new runs beside the old ones and never reuses them.
Library versions are not part of it (an upgrade does not redo finished runs).

A job run outside an experiment (``train``, ``train_multitask``, ``pretrain`` called directly) records an
identity of its own (:func:`run_identity`): its kind, method and resolved hyper-parameters, seed, encoder,
settings (:data:`NOT_IDENTITY` left out) and the description of the rows it used (their hashes).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .atomic import json_default

__all__ = ["ADDED_SETTINGS", "IDENTITY_TAG", "NOT_IDENTITY", "SUFFIX_LEN", "base_run_id", "canonical_json", "changed_keys",
           "content_hash", "identity_settings", "make_identity", "path_digest", "record_identity", "run_identity", "text_data_digest", "with_identity"]

#: The key of a record's ``tags`` that holds its identity (``{"sha256", "spec"}``).
IDENTITY_TAG = "run_identity"
#: Hex digits of the identity at the end of a run id.
SUFFIX_LEN = 10
#: ``TrainConfig`` fields that do not change a run's result (where it is written, what is shown or kept).
NOT_IDENTITY = frozenset({"output", "progress", "resume", "tags", "report_to", "save_model", "save_checkpoints",
                          "save_steps", "keep_checkpoints", "logging_steps", "trust_remote_code"})

#: ``TrainConfig`` fields added after identities were first written: left out of an identity while
#: unset (None), so the runs made before a field existed keep their identities; set, they are in it.
ADDED_SETTINGS = frozenset({"wise_ft"})


def identity_settings(settings: Mapping[str, Any], leave_out: frozenset[str] | set[str] = frozenset()) -> dict[str, Any]:
    """The training settings an identity holds: all but :data:`NOT_IDENTITY` and ``leave_out``, and
    the :data:`ADDED_SETTINGS` that are unset."""
    return {k: v for k, v in settings.items()
            if k not in NOT_IDENTITY and k not in leave_out and not (k in ADDED_SETTINGS and v is None)}


_SUFFIX = re.compile(rf"-[0-9a-f]{{{SUFFIX_LEN}}}$")


def canonical_json(obj: Any) -> str:
    """``obj`` as JSON with sorted keys and no spaces (numpy values and paths converted)."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=json_default)


def _normalise(obj: Any) -> Any:
    """``obj`` as it reads back from JSON (tuples as lists, keys as strings)."""
    return json.loads(json.dumps(obj, ensure_ascii=False, default=json_default))


def content_hash(obj: Any) -> str:
    """sha256 (hex) of ``obj``'s canonical JSON, after a JSON round trip."""
    return hashlib.sha256(canonical_json(_normalise(obj)).encode("utf-8")).hexdigest()


def make_identity(spec: Mapping[str, Any]) -> dict[str, Any]:
    """``{"sha256": content hash of spec, "spec": spec as JSON reads it back}``."""
    spec = _normalise(dict(spec))
    return {"sha256": content_hash(spec), "spec": spec}


def run_identity(kind: str, *, method: str | None, hparams: Mapping[str, Any], seed: Any, model: str | None,
                 settings: Mapping[str, Any], data: Any, tags: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The identity of one job (``kind``: ``train``, ``multitask``, ``pretrain``): the experiment runner's
    when ``tags`` carry one (:data:`IDENTITY_TAG`), else one made from what made the job: the method and
    its resolved ``hparams``, the ``seed``, the encoder ``model`` (its name and, for a local folder, the
    hash of its files: :func:`path_digest`), the job's ``settings`` but those in :data:`NOT_IDENTITY` (and
    the entries above), and ``data``, the description of its rows (with their hashes)."""
    if tags and isinstance(tags.get(IDENTITY_TAG), Mapping):
        return dict(tags[IDENTITY_TAG])
    return make_identity({"kind": kind, "method": method, "hparams": dict(hparams), "seed": seed,
                          "model": {"name": model, "sha256": path_digest(model)},
                          "settings": identity_settings(settings, {"method", "hparams", "seed", "model"}), "data": data})


def with_identity(run_id: str, sha256: str) -> str:
    """``RUN_ID-HHHHHHHHHH``: the run id ended by the first :data:`SUFFIX_LEN` digits of its identity."""
    return f"{run_id}-{sha256[:SUFFIX_LEN]}"


def base_run_id(run_id: str) -> str:
    """``run_id`` without its identity suffix (unchanged when it has none: a store made before identities)."""
    return _SUFFIX.sub("", run_id)


def record_identity(record: Any) -> str | None:
    """The identity hash a result dict carries (``identity.sha256``, else ``tags.run_identity.sha256``:
    what :attr:`contrastfit.record.Record.identity_sha256` reads), or None."""
    if not isinstance(record, Mapping):
        return None
    tags = record.get("tags")
    for ident in (record.get("identity"), tags.get(IDENTITY_TAG) if isinstance(tags, Mapping) else None):
        sha = ident.get("sha256") if isinstance(ident, Mapping) else None
        if isinstance(sha, str):
            return sha
    return None


def changed_keys(old: Any, new: Any, prefix: str = "") -> list[str]:
    """The dotted keys whose values differ between two specs (a key present in one only counts)."""
    if isinstance(old, Mapping) and isinstance(new, Mapping):
        out = []
        for key in sorted(set(old) | set(new), key=str):
            path = f"{prefix}.{key}" if prefix else str(key)
            if key not in old or key not in new:
                out.append(path)
            else:
                out += changed_keys(old[key], new[key], path)
        return out
    return [] if old == new else [prefix or "(all)"]


def text_data_digest(data: Any, cache: dict[int, tuple[Any, str]] | None = None) -> dict[str, Any]:
    """The row hashes (:func:`contrastfit.data.data_hash`) of a ``TextData``'s splits, with its task and
    label names: ``{"train_hash", "validation_hash", "test_hash", "task", "label_names"}``. ``cache``
    (by object) keeps a split shared by several runs (the test split) from being hashed again."""
    # lazy: data imports datasets and torch, this module imports without torch
    from .data import data_hash

    out: dict[str, Any] = {"task": getattr(data, "task", None), "label_names": getattr(data, "label_names", None)}
    for split in ("train", "validation", "test"):
        ds = getattr(data, split, None)
        if ds is None:
            out[f"{split}_hash"] = None
            continue
        if cache is not None and id(ds) in cache and cache[id(ds)][0] is ds:
            out[f"{split}_hash"] = cache[id(ds)][1]
            continue
        digest = data_hash(ds)
        if cache is not None:
            cache[id(ds)] = (ds, digest)  # the object is kept, so its id is not reused
        out[f"{split}_hash"] = digest
    return out


def path_digest(name: str | os.PathLike | None) -> str | None:
    """sha256 of a local file's bytes, or of a local folder's files (relative names and bytes, in
    name order; the Hugging Face cache folders excluded); None for a name that is not a local path (a
    built-in or Hub name, pinned by its name)."""
    if name is None:
        return None
    path = Path(name)
    if path.is_file():
        files = [(path.name, path)]
    elif path.is_dir():
        files = sorted((p.relative_to(path).as_posix(), p) for p in path.rglob("*")
                       if p.is_file() and not any(part.startswith(".") for part in p.relative_to(path).parts))
    else:
        return None
    h = hashlib.sha256()
    for rel, p in files:
        h.update(rel.encode("utf-8") + b"\0")
        with open(p, "rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                h.update(block)
        h.update(b"\0")
    return h.hexdigest()
