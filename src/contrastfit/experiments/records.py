"""One typed record per finished run of an experiment folder, read once.

An experiment folder, as the runner writes it::

    FOLDER/experiment.json                  the raw experiment config (the one last run)
    FOLDER/plan.json                        its runs: {run id: run identity}; the summary covers those only
    FOLDER/results.sqlite                   the ResultsStore: one result dict per finished run
    FOLDER/runs/<run_id>/analysis.npz       optional: test embeddings (n, d; L2-normalised),
                                            embeddings_raw (n, d; un-normalised), labels (n,),
                                            predictions (n,), texts (n,), label_embeddings (C, d)
    FOLDER/runs/<run_id>/attributions.json  optional: Shapley values of the words of a few test
                                            examples (first sample and seed of the first setting)

A run's result dict (``results.json``) carries ``method``, ``hparams``, ``seed``, ``metrics``
(``validation`` / ``test``), ``timings``, ``training``, ``log_history``, ``data`` (``task``,
``label_names``, ``test_hash``) and ``tags`` (``variant`` -- the method label with its grid point,
prefixed ``MODEL/`` when the experiment compares encoders --, ``setting``, ``sample``, ``params``,
``run_id``, and ``model``, the encoder's label, when it compares encoders). :meth:`ExperimentRun.from_result` reads it once
into a :class:`ExperimentRun`; everything downstream (summary tables, analyses) uses the record's typed
fields. Conventions: an untagged run is in setting ``"full"``, sample 0, its variant is its method;
the pairing key of two runs of one setting is ``(sample, seed)``; a run's task is ``data.task``,
else ``"regression"`` when its test metrics hold Pearson's or Spearman's r.

:class:`ExperimentRuns` is what analyses receive: the records with their settings (natural order:
``shots=4`` before ``shots=16``), variants (the baseline's first), the baseline variant of each
setting and the summary rows, plus a cache of the ``analysis.npz`` arrays (each file read at most
once).
"""

from __future__ import annotations

import json
import os
import re
import zipfile
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import ConfigError, ContrastfitError
from ..record import Record, metric_of
from ..identity import content_hash, record_identity
from .store import STORE_NAME, ResultsStore

__all__ = [
    "ANALYSIS_FILE", "ATTRIBUTIONS_FILE", "EXPERIMENT_FILE", "PLAN_FILE", "RUNS_DIR", "AnalysisArrays", "ExperimentRuns",
    "ExperimentRun", "as_records", "load_experiment", "load_records", "load_runs", "natural_key",
]

EXPERIMENT_FILE = "experiment.json"
#: The runs of the folder's current config: ``{"experiment_sha256": hash of experiment.json, "runs": {run id:
#: identity}}``, written by the runner with ``experiment.json``; the summary and the report cover those runs only.
PLAN_FILE = "plan.json"
RUNS_DIR = "runs"
ANALYSIS_FILE = "analysis.npz"
ATTRIBUTIONS_FILE = "attributions.json"


def natural_key(text: str) -> list[tuple[int, Any]]:
    """Sort key that orders ``shots=4`` before ``shots=16`` and ``rho=10`` before ``rho=100``."""
    parts = re.split(r"(\d+(?:\.\d+)?)", str(text))
    return [(0, float(p)) if re.fullmatch(r"\d+(?:\.\d+)?", p) else (1, p) for p in parts if p]


def ordered_unique(items: Iterable) -> list:
    return list(dict.fromkeys(items))


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


# --------------------------------------------------------------------------------------------------
# The arrays of analysis.npz
# --------------------------------------------------------------------------------------------------

@dataclass(frozen=True, eq=False)
class AnalysisArrays:
    """The contents of one run's ``analysis.npz`` (see the module docstring), checked: ``embeddings``
    is (n, d) and ``labels`` / ``predictions`` (and ``texts`` when present) have n rows."""

    embeddings: np.ndarray
    labels: np.ndarray
    predictions: np.ndarray
    embeddings_raw: np.ndarray | None = None
    texts: np.ndarray | None = None
    label_embeddings: np.ndarray | None = None

    @classmethod
    def load(cls, path: Path) -> AnalysisArrays | None:
        """The arrays of ``path``; None when the file is unreadable or its arrays do not fit together."""
        try:
            with np.load(path, allow_pickle=False) as z:
                arrays = {k: z[k] for k in z.files}
        except (OSError, ValueError, zipfile.BadZipFile, EOFError):
            return None
        if not {"embeddings", "labels", "predictions"} <= set(arrays):
            return None
        n = len(arrays["labels"])
        if arrays["embeddings"].ndim != 2 or len(arrays["embeddings"]) != n or len(arrays["predictions"]) != n:
            return None
        if "texts" in arrays and len(arrays["texts"]) != n:
            return None
        known = {"embeddings", "labels", "predictions", "embeddings_raw", "texts", "label_embeddings"}
        return cls(**{k: v for k, v in arrays.items() if k in known})

    def __len__(self) -> int:
        return len(self.labels)

    @property
    def correct(self) -> np.ndarray:
        """Per test item: whether the run's prediction is its label."""
        return np.asarray(self.predictions) == np.asarray(self.labels)

    def distance_reference(self) -> tuple[np.ndarray, bool]:
        """The embeddings to measure distances to the mean in (Sosnowski et al., Fig. 2), by
        :func:`contrastfit.evaluation.embedding.distance_reference`: ``(embeddings, is_raw)``."""
        # lazy: evaluation.embedding imports torch, this module imports without torch
        from ..evaluation.embedding import distance_reference

        present = {"embeddings": self.embeddings}
        if self.embeddings_raw is not None:
            present["embeddings_raw"] = self.embeddings_raw
        return distance_reference(present)


# --------------------------------------------------------------------------------------------------
# One run
# --------------------------------------------------------------------------------------------------

@dataclass(eq=False)
class ExperimentRun:
    """One finished run of an experiment as the summary and the analyses see it: its
    :class:`~contrastfit.record.Record` (read once from its result dict, :meth:`from_result`) with the
    experiment's labels (variant, setting, sample) and the files of its run folder.

    ``metrics[split][metric]`` holds the numeric metrics of each split (``validation``, ``test``);
    ``per_class[split][class]`` the per-class precision / recall / F1 / support and
    ``confusion[split]`` the confusion matrix (rows: true labels) where the run recorded them.
    ``analysis_path`` / ``attributions_path`` are the run's ``analysis.npz`` / ``attributions.json``
    when they exist; :meth:`arrays` reads the former (once). ``seed``, ``hparams``, ``training``,
    ``model`` and ``log_history`` are the record's.
    """

    record: Record = field(repr=False)
    run_id: str | None
    method: str
    variant: str
    setting: str
    sample: int
    task: str
    params: dict[str, Any] = field(default_factory=dict)
    metrics: dict[str, dict[str, float]] = field(default_factory=dict)
    per_class: dict[str, dict[str, dict[str, Any]]] = field(default_factory=dict)
    confusion: dict[str, np.ndarray] = field(default_factory=dict)
    label_names: tuple[str, ...] | None = None
    test_hash: str | None = None
    train_s: float = 0.0
    #: the run's identity: the content hash of everything that made it (:attr:`Record.identity_sha256
    #: <contrastfit.record.Record.identity_sha256>`); None for a run recorded without one
    identity: str | None = None
    #: the encoder's name in the tables when the experiment compares several (``models:``), else None
    model_label: str | None = None
    data_name: str | None = None
    analysis_path: Path | None = None
    attributions_path: Path | None = None
    _arrays: Any = field(default=None, init=False, repr=False)
    _arrays_read: bool = field(default=False, init=False, repr=False)

    @classmethod
    def from_result(cls, result: Mapping[str, Any], folder: str | os.PathLike | None = None) -> ExperimentRun:
        """Read a result dict; ``folder`` is the experiment folder (for the run's files).

        Raises :class:`~contrastfit.errors.ContrastfitError` naming the run when a field has the
        wrong type (e.g. ``metrics`` that is not a mapping)."""
        if not isinstance(result, Mapping):
            raise ContrastfitError(f"a finished run's record is not a mapping: {str(result)[:60]!r}")
        tags = result.get("tags")
        rid = tags.get("run_id") if isinstance(tags, Mapping) else None
        rid = rid if rid is not None else result.get("run_id")
        rid = None if rid is None else str(rid)
        where = f"run {rid or '?'}"
        record = Record.from_dict(result, where)
        tags = record.tags
        metrics: dict[str, dict[str, float]] = {}
        per_class: dict[str, dict[str, dict[str, Any]]] = {}
        confusion: dict[str, np.ndarray] = {}
        for split, values in record.metrics.items():
            metrics[str(split)] = {str(k): float(v) for k, v in values.items() if _number(v)}
            if isinstance(values.get("per_class"), Mapping):
                per_class[str(split)] = {str(c): dict(v) for c, v in values["per_class"].items()
                                         if isinstance(v, Mapping)}
            if values.get("confusion_matrix") is not None:
                try:
                    confusion[str(split)] = np.asarray(values["confusion_matrix"], dtype=np.int64)
                except (TypeError, ValueError):
                    raise ContrastfitError(f"{where}: metrics.{split}.confusion_matrix is not a matrix of "
                                           "counts") from None
        sample = tags.get("sample", 0)
        try:
            sample = 0 if sample is None else int(sample)
        except (TypeError, ValueError):
            raise ContrastfitError(f"{where}: tags.sample is not an integer (got {sample!r})") from None
        params = tags.get("params") or {}
        if not isinstance(params, Mapping):
            raise ContrastfitError(f"{where}: tags.params is not a mapping (got {str(params)[:60]!r})")
        variant = str(tags.get("variant") or record.method or "?")
        method = str(record.method or variant.split("[", 1)[0])
        test = metrics.get("test", {})
        task = record.task
        if task not in ("classification", "regression"):
            task = "regression" if ("pearson" in test or "spearman" in test) and "accuracy" not in test \
                else "classification"
        names = record.label_names
        train_s = record.timings.get("train_s")
        run_folder = None
        if folder is not None and rid and Path(rid).name == rid and rid not in (".", ".."):
            run_folder = Path(folder) / RUNS_DIR / rid
        analysis = run_folder / ANALYSIS_FILE if run_folder is not None else None
        attributions = run_folder / ATTRIBUTIONS_FILE if run_folder is not None else None
        return cls(
            record=record, run_id=rid, method=method, variant=variant, setting=str(tags.get("setting") or "full"),
            sample=sample, task=str(task), params=dict(params), metrics=metrics, per_class=per_class,
            confusion=confusion, label_names=tuple(str(n) for n in names) if names else None,
            test_hash=None if record.run_data.test_hash is None else str(record.run_data.test_hash),
            train_s=float(train_s) if _number(train_s) else 0.0, identity=record.identity_sha256,
            model_label=None if tags.get("model") is None else str(tags["model"]),
            data_name=None if record.run_data.name is None else str(record.run_data.name),
            analysis_path=analysis if analysis is not None and analysis.is_file() else None,
            attributions_path=attributions if attributions is not None and attributions.is_file() else None,
        )

    @property
    def seed(self) -> Any:
        return self.record.seed

    @property
    def multi_label(self) -> bool:
        """Whether the run is of label sets (``data.multi_label``: a multi-label run's record)."""
        return bool(self.record.run_data.multi_label)

    @property
    def hparams(self) -> dict[str, Any]:
        return self.record.hparams or {}

    @property
    def training(self) -> dict[str, Any]:
        return self.record.training.to_dict()

    @property
    def model(self) -> str | None:
        return None if self.record.base_model is None else str(self.record.base_model)

    @property
    def log_history(self) -> tuple[dict[str, Any], ...]:
        return tuple(e for e in self.record.log_history if isinstance(e, Mapping))

    @property
    def key(self) -> tuple[int, Any]:
        """The pairing key of the run: ``(sample, seed)``."""
        return (self.sample, self.seed)

    @property
    def sort_key(self) -> tuple:
        seed = self.seed
        return (self.sample, seed is None, type(seed).__name__, seed if seed is not None else 0, self.run_id or "")

    def score(self, split: str, metric: str) -> float | None:
        """``metrics[split][metric]``; None when the run has no such (finite or NaN) number."""
        return metric_of(self.metrics, split, metric)

    @property
    def has_losses(self) -> bool:
        """Whether the training log holds a training or evaluation loss."""
        return any("loss" in e or "eval_loss" in e for e in self.log_history)

    def arrays(self) -> AnalysisArrays | None:
        """The run's ``analysis.npz`` (read on first use, then kept); None when absent or unreadable."""
        if not self._arrays_read:
            self._arrays = AnalysisArrays.load(self.analysis_path) if self.analysis_path is not None else None
            self._arrays_read = True
        return self._arrays

    def attributions(self) -> list[dict[str, Any]]:
        """The examples of the run's ``attributions.json`` (each with ``index``, ``words``,
        ``values``, ...); ``[]`` when the file is absent or unreadable."""
        if self.attributions_path is None:
            return []
        try:
            examples = json.loads(self.attributions_path.read_text(encoding="utf-8"))["examples"]
        except (OSError, ValueError, KeyError, TypeError):
            return []
        return [dict(e) for e in examples if isinstance(e, Mapping) and {"index", "words", "values"} <= set(e)]


def as_records(runs: Iterable[ExperimentRun | Mapping[str, Any]], folder: str | os.PathLike | None = None) -> list[ExperimentRun]:
    """``runs`` as records: result dicts are read with :meth:`ExperimentRun.from_result`, records kept."""
    return [r if isinstance(r, ExperimentRun) else ExperimentRun.from_result(r, folder) for r in runs]


# --------------------------------------------------------------------------------------------------
# Folders
# --------------------------------------------------------------------------------------------------

def load_plan(folder: str | os.PathLike) -> dict[str, str] | None:
    """``{run id: identity}`` of the runs of ``FOLDER``'s current config (``plan.json``), or None for a
    folder written before plans were recorded. Raises a one-line :class:`~contrastfit.errors.ContrastfitError`
    when the plan is unreadable or was not written with the folder's ``experiment.json``."""
    folder = Path(folder)
    path = folder / PLAN_FILE
    if not path.is_file():
        return None
    try:
        plan = json.loads(path.read_text(encoding="utf-8"))
        runs, sha = plan["runs"], plan["experiment_sha256"]
        if not isinstance(runs, dict):
            raise TypeError("runs is not a mapping")
    except (OSError, UnicodeDecodeError, ValueError, KeyError, TypeError) as exc:
        raise ContrastfitError(f"{path}: unreadable ({type(exc).__name__}: {str(exc)[:80]}); run the experiment "
                               "again to rewrite it") from None
    if content_hash(load_experiment(folder)) != sha:
        raise ContrastfitError(f"{path} was not written with {folder / EXPERIMENT_FILE} (edited by hand, or a runner "
                               "stopped between writing them?); run the experiment again to rewrite both")
    return {str(k): str(v) for k, v in runs.items()}


def load_runs(folder: str | os.PathLike) -> list[dict[str, Any]]:
    """The result dicts of every finished run in ``FOLDER/results.sqlite``: those of the folder's current
    config (its ``plan.json``: run id and identity) in the plan's order (the config's order, whichever
    finished first), every one in a folder without a plan, in the order they finished.

    Raises :class:`~contrastfit.errors.ContrastfitError` when the folder, its store, or any finished
    run is missing.
    """
    folder = Path(folder)
    if not folder.is_dir():
        raise ContrastfitError(f"experiment folder {folder}: no such folder")
    path = folder / STORE_NAME
    if not path.is_file():
        raise ContrastfitError(f"experiment folder {folder}: no {STORE_NAME} (has the experiment been run?)")
    plan = load_plan(folder)
    try:
        with ResultsStore(path) as store:
            runs = [r for r in store.done() if isinstance(r, dict)]
    except ContrastfitError:
        raise
    except Exception as exc:  # sqlite3.DatabaseError and friends: not a readable store
        raise ContrastfitError(f"experiment folder {folder}: cannot read {STORE_NAME} ({exc})") from None
    if plan is not None:
        runs = [r for r in runs if (sha := plan.get(str(_run_id(r)))) is not None and sha == record_identity(r)]
        order = {run_id: i for i, run_id in enumerate(plan)}  # a run trained again later keeps its place
        runs.sort(key=lambda r: order[str(r["tags"]["run_id"])])
    if not runs:
        raise ContrastfitError(f"experiment folder {folder}: no finished runs in {STORE_NAME}"
                               + (" of its current config" if plan is not None else ""))
    return runs


def _run_id(raw: dict[str, Any]) -> Any:
    """The experiment's id of a stored run (``tags.run_id``), None where its tags do not say."""
    tags = raw.get("tags")
    return tags.get("run_id") if isinstance(tags, Mapping) else None


def load_records(folder: str | os.PathLike) -> list[ExperimentRun]:
    """The finished runs of ``folder`` as :class:`ExperimentRun` objects (see :func:`load_runs`)."""
    return as_records(load_runs(folder), folder)


def load_experiment(folder: str | os.PathLike) -> dict[str, Any]:
    """The raw config in ``FOLDER/experiment.json``; ``{}`` when the file is absent."""
    path = Path(folder) / EXPERIMENT_FILE
    if not path.is_file():
        return {}
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: not valid JSON ({exc})") from None
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: expected a JSON object at the top level")
    return raw


# --------------------------------------------------------------------------------------------------
# The runs of one experiment, as analyses see them
# --------------------------------------------------------------------------------------------------

def settings_of(records: Sequence[ExperimentRun]) -> list[str]:
    """The settings of ``records`` in natural order."""
    return sorted(ordered_unique(r.setting for r in records), key=natural_key)


def variants_of(records: Sequence[ExperimentRun], baseline: str | None = None) -> list[str]:
    """Variants in order of first appearance, the baseline's (label or method) first; when the runs
    compare encoders (``model_label``), the variants of one encoder together, the baseline's encoder
    first."""
    variants = ordered_unique(r.variant for r in records)
    if baseline is not None:
        method_of = {r.variant: r.method for r in records}
        first = [v for v in variants if v == baseline or method_of.get(v) == baseline]
        variants = first + [v for v in variants if v not in first]
    model_of = {r.variant: r.model_label for r in records}
    encoders = ordered_unique(model_of[v] for v in variants)
    return sorted(variants, key=lambda v: encoders.index(model_of[v]))  # stable: the order above within each


def group_records(records: Sequence[ExperimentRun]) -> dict[tuple[str, str], list[ExperimentRun]]:
    """``{(setting, variant): runs}``, each list in (sample, seed) order."""
    out: dict[tuple[str, str], list[ExperimentRun]] = {}
    for r in records:
        out.setdefault((r.setting, r.variant), []).append(r)
    return {k: sorted(v, key=lambda r: r.sort_key) for k, v in out.items()}


@dataclass(eq=False)
class ExperimentRuns:
    """The finished runs of one experiment with what every analysis needs to know about them.

    ``rows`` are the summary rows (:func:`contrastfit.experiments.summary.summary_table`) that fix
    the variant order and the baseline variant of each setting; ``metrics`` the table metrics (the
    headline first); ``top_k`` the experiment's top-k (or None).
    """

    records: list[ExperimentRun]
    rows: list[dict[str, Any]]
    metrics: list[str]
    top_k: int | None = None
    settings: list[str] = field(init=False)
    variants: list[str] = field(init=False)
    baselines: dict[str, str | None] = field(init=False)
    missing_arrays: set[str] = field(init=False, default_factory=set)

    def __post_init__(self) -> None:
        self.settings = settings_of(self.records)
        self.variants = ordered_unique([r["variant"] for r in self.rows] + [r.variant for r in self.records])
        self.baselines = {r["setting"]: r["baseline"] for r in self.rows}
        self._groups = group_records(self.records)

    @property
    def task(self) -> str:
        return self.records[0].task if self.records else "classification"

    @property
    def regression(self) -> bool:
        return self.task == "regression"

    @property
    def multi_label(self) -> bool:
        """Whether the runs are of label sets (``data.multi_label`` of their records)."""
        return bool(self.records) and self.records[0].multi_label

    def of(self, setting: str, variant: str) -> list[ExperimentRun]:
        """The runs of one cell, in (sample, seed) order."""
        return list(self._groups.get((setting, variant), []))

    def arrays(self, record: ExperimentRun) -> AnalysisArrays | None:
        """``record``'s ``analysis.npz``; a run without a readable one is remembered in ``missing_arrays``."""
        arrays = record.arrays()
        if arrays is None:
            self.missing_arrays.add(record.run_id or "?")
        return arrays

    def paired_arrays(self, setting: str, with_texts: bool = False) -> dict[str, dict[tuple, tuple[ExperimentRun, AnalysisArrays]]]:
        """``{variant: {(sample, seed): (run, arrays)}}`` of the runs of ``setting`` that have an
        ``analysis.npz`` (with ``texts`` when ``with_texts``); the first run of each key is kept."""
        out: dict[str, dict[tuple, tuple[ExperimentRun, AnalysisArrays]]] = {}
        for v in self.variants:
            per: dict[tuple, tuple[ExperimentRun, AnalysisArrays]] = {}
            for r in self.of(setting, v):
                a = self.arrays(r)
                if a is not None:
                    per.setdefault(r.key, (r, a))
            if per and (not with_texts or all(a.texts is not None for _, a in per.values())):
                out[v] = per
        return out

    @staticmethod
    def same_test_set(pairs: Sequence[tuple[ExperimentRun, AnalysisArrays]]) -> bool:
        """Whether the runs were scored on one test set: equal ``test_hash`` (or, for runs recorded
        without one, equal labels and texts) and equal sizes."""
        hashes = {r.test_hash for r, _ in pairs}
        if len(hashes) > 1:
            return False
        if None in hashes:
            ref = pairs[0][1]
            for _, a in pairs[1:]:
                if len(a) != len(ref) or not np.array_equal(a.labels, ref.labels):
                    return False
                if a.texts is not None and ref.texts is not None and not np.array_equal(a.texts, ref.texts):
                    return False
        return len({len(a) for _, a in pairs}) == 1
