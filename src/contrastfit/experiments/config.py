"""Experiment configuration: a YAML file naming data, model, methods, a protocol, seeds and an
output folder. Unknown keys are refused with a message that names them; the README documents
the whole schema.

.. code-block:: yaml

    name: mr-fewshot
    data: mr                       # built-in name, local file or Hub name
    model: minilm-l6
    methods: [ce, {name: ce-scl, lambda: 0.9, temperature: [0.1, 0.3]}]   # lists are grids
    # a method entry's own `training:` overrides the top-level one for that entry's variants
    # (lists are grids here too: Gunel's batch-size ablation)
    #   methods: [{name: ce-scl, training: {batch_size: [16, 64, 256]}}]
    protocol: {kind: few-shot, shots: [8, 32], samples: 5}                # see experiments/protocols.py
    seeds: [0, 1, 2]
    validation_size: 256           # stratified validation subset (Gunel: ~500)
    training: {batch_size: 16, learning_rate: 5.0e-5}                     # any `contrastfit train` option
    baseline: ce                   # p-values of every other method against this one
    top_k: 3                       # also report the mean of the top 3 runs by validation (Gunel)
    analyses: [tsne, alignment_uniformity, distance_groups, error_analysis, learning_curves, confusion,
               attributions]
    attributions: {examples: 3, samples: 25}   # Shapley values of the words of 3 test examples
    output: runs/mr-fewshot
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import yaml

from ..errors import ConfigError
from ..methods import get_method

TOP_LEVEL = {"name", "data", "model", "methods", "protocol", "seeds", "validation_size", "training", "output",
             "data_options", "save_models", "metrics", "baseline", "top_k", "analyses", "attributions", "report",
             "search"}
ANALYSES = ("tsne", "alignment_uniformity", "distance_groups", "error_analysis", "learning_curves", "confusion",
            "attributions")
#: Options of the token-attribution analysis (``attributions:`` in the config) and their defaults.
#: ``max_words``: with ``examples: N``, the first N test examples of at most that many words are
#: taken (then the shortest others): the cost grows with words x sequence length.
ATTRIBUTION_DEFAULTS = {"examples": 3, "samples": 25, "baseline": "remove", "max_words": 50}
DATA_OPTION_KEYS = {"text_column", "text_pair_column", "label_column", "validation_data", "test_data", "validation_split", "task"}
# TrainConfig fields an experiment may set under `training:` (the rest are set by the runner).
TRAINING_KEYS = {"pooling", "max_length", "epochs", "min_steps", "batch_size", "learning_rate", "weight_decay",
                 "warmup_ratio", "gradient_accumulation_steps", "fp16", "bf16", "use_cpu", "save_checkpoints", "head_init", "refit_head", "sampler", "select_best", "metric_for_best", "eval_steps",
                 "early_stopping_patience",
                 "save_steps"}


@dataclass(frozen=True)
class MethodVariant:
    """One method with one set of hyper-parameters (one point of its grid) and, optionally, its own
    training settings (``training:`` in its method entry), which override the experiment's
    ``training:`` for this variant only."""

    method: str
    hparams: tuple[tuple[str, Any], ...] = ()
    training: tuple[tuple[str, Any], ...] = ()

    @property
    def label(self) -> str:
        """``method``, or ``method[h=v,...,t=v,...]``: hyper-parameters, then training settings,
        each sorted by name (e.g. ``ce-scl[temperature=0.1,batch_size=64]``)."""
        items = (*self.hparams, *self.training)
        if not items:
            return self.method
        return f"{self.method}[" + ",".join(f"{k}={v}" for k, v in items) + "]"


@dataclass
class ExperimentConfig:
    data: str
    methods: list[MethodVariant]
    protocol: dict[str, Any]
    seeds: list[int]
    output: str
    model: str = "minilm-l6"
    name: str = "experiment"
    validation_size: int | None = None
    training: dict[str, Any] = field(default_factory=dict)
    data_options: dict[str, Any] = field(default_factory=dict)
    save_models: bool = False
    metrics: list[str] = field(default_factory=lambda: ["accuracy", "f1", "macro_f1", "mcc"])
    baseline: str | None = None
    top_k: int | None = None
    analyses: list[str] = field(default_factory=lambda: list(ANALYSES))
    attributions: dict[str, Any] = field(default_factory=lambda: dict(ATTRIBUTION_DEFAULTS))
    report: bool = True
    search: dict[str, Any] | None = None
    raw: dict[str, Any] = field(default_factory=dict)

    @property
    def protocol_kind(self) -> str:
        return self.protocol["kind"]


def _as_list(value: Any) -> list:
    return list(value) if isinstance(value, (list, tuple)) else [value]


def _check_training(training: Any, where: str, what: str = "training") -> dict[str, Any]:
    """``training`` as a dict with keys from :data:`TRAINING_KEYS` only, or a ConfigError."""
    if training is None:
        return {}
    if not isinstance(training, dict):
        raise ConfigError(f"{where}: {what} must be a mapping of training settings, got {training!r}")
    bad = sorted(set(training) - TRAINING_KEYS)
    if bad:
        raise ConfigError(f"{where}: {what} has unknown key(s) {', '.join(bad)} (allowed: {', '.join(sorted(TRAINING_KEYS))})")
    return dict(training)


def _check_training_values(method: str, training: dict[str, Any], where: str) -> None:
    """The values as :class:`~contrastfit.training.TrainConfig` would check them at run time, now."""
    from ..training import TrainConfig

    try:
        TrainConfig(method=method, **training).validate()
    except ConfigError as exc:
        raise ConfigError(f"{where}: {exc}") from None
    except TypeError:
        raise ConfigError(f"{where}: training settings of the wrong type: {training!r}") from None


def _expand_method(entry: Any, where: str) -> list[MethodVariant]:
    """Variants of one ``methods`` entry: every combination of its list-valued hyper-parameters and
    (from its ``training:`` mapping) list-valued training settings."""
    if isinstance(entry, str):
        get_method(entry)
        return [MethodVariant(entry)]
    if not isinstance(entry, dict) or "name" not in entry:
        raise ConfigError(f"{where}: each method is a name or a mapping with 'name', got {entry!r}")
    name = entry["name"]
    spec = get_method(name)
    grid = {k: _as_list(v) for k, v in entry.items() if k not in ("name", "training")}
    unknown = sorted(set(grid) - set(spec.defaults))
    if unknown:
        raise ConfigError(f"{where}: method '{name}' has no hyper-parameter {', '.join(unknown)} "
                          f"(it has: {', '.join(spec.defaults) or 'none'}; training settings go under 'training:')")
    training = {k: _as_list(v) for k, v in _check_training(entry.get("training"), where, f"method '{name}' training").items()}
    keys = sorted(grid)
    tkeys = sorted(training)
    return [MethodVariant(name, tuple(zip(keys, combo)), tuple(zip(tkeys, tcombo)))
            for combo in itertools.product(*(grid[k] for k in keys))
            for tcombo in itertools.product(*(training[k] for k in tkeys))]


def _attribution_options(raw: Any, where: str) -> dict[str, Any]:
    """``attributions: {examples: N | [test indices], samples: S, baseline: remove | mask, max_words: W}``."""
    from ..evaluation.attributions import BASELINES

    if raw is None:
        return dict(ATTRIBUTION_DEFAULTS)
    if not isinstance(raw, dict):
        raise ConfigError(f"{where}: attributions must be a mapping with {', '.join(ATTRIBUTION_DEFAULTS)}, got {raw!r}")
    bad = sorted(set(raw) - set(ATTRIBUTION_DEFAULTS))
    if bad:
        raise ConfigError(f"{where}: attributions has unknown key(s) {', '.join(bad)} "
                          f"(allowed: {', '.join(ATTRIBUTION_DEFAULTS)})")
    opts = {**ATTRIBUTION_DEFAULTS, **raw}
    ex = opts["examples"]
    ok = (isinstance(ex, int) and not isinstance(ex, bool) and ex >= 0) or (
        isinstance(ex, list) and all(isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in ex))
    if not ok:
        raise ConfigError(f"{where}: attributions.examples must be a count or a list of test-set indices, got {ex!r}")
    for key in ("samples", "max_words"):
        if not isinstance(opts[key], int) or isinstance(opts[key], bool) or opts[key] < 1:
            raise ConfigError(f"{where}: attributions.{key} must be a positive integer, got {opts[key]!r}")
    if opts["baseline"] not in BASELINES:
        raise ConfigError(f"{where}: attributions.baseline must be one of {', '.join(BASELINES)}, "
                          f"got {opts['baseline']!r}")
    return opts


def parse_config(raw: dict[str, Any], where: str = "config") -> ExperimentConfig:
    if not isinstance(raw, dict):
        raise ConfigError(f"{where}: expected a mapping at the top level")
    unknown = sorted(set(raw) - TOP_LEVEL)
    if unknown:
        raise ConfigError(f"{where}: unknown key(s) {', '.join(unknown)} (allowed: {', '.join(sorted(TOP_LEVEL))})")
    for key in ("data", "methods", "output"):
        if key not in raw:
            raise ConfigError(f"{where}: missing required key '{key}'")
    methods = [v for i, m in enumerate(_as_list(raw["methods"])) for v in _expand_method(m, f"{where}: methods[{i}]")]
    protocol = dict(raw.get("protocol") or {"kind": "full"})
    if "kind" not in protocol:
        protocol["kind"] = "few-shot"
    from .plan import check_protocol  # the protocol functions define the allowed options

    check_protocol(protocol, where)
    training = _check_training(raw.get("training") or {}, where)
    for v in methods:  # the merged settings of each variant, checked as a run would check them
        _check_training_values(v.method, {**training, **dict(v.training)}, f"{where}: {v.label}")
    labels = [v.label for v in methods]
    if len(set(labels)) != len(labels):
        dup = sorted({x for x in labels if labels.count(x) > 1})
        raise ConfigError(f"{where}: method variant(s) {', '.join(dup)} listed twice")
    data_options = dict(raw.get("data_options") or {})
    bad = sorted(set(data_options) - DATA_OPTION_KEYS)
    if bad:
        raise ConfigError(f"{where}: data_options has unknown key(s) {', '.join(bad)} (allowed: {', '.join(sorted(DATA_OPTION_KEYS))})")
    seeds = [int(s) for s in _as_list(raw.get("seeds", [0]))]
    if not seeds:
        raise ConfigError(f"{where}: seeds is empty")
    variants = {v.label for v in methods} | {v.method for v in methods}
    baseline = raw.get("baseline")
    if baseline is not None and baseline not in variants:
        raise ConfigError(f"{where}: baseline '{baseline}' is not one of the methods ({', '.join(sorted(variants))})")
    analyses = _as_list(raw.get("analyses", list(ANALYSES)))
    bad = sorted(set(analyses) - set(ANALYSES))
    if bad:
        raise ConfigError(f"{where}: unknown analyses {', '.join(bad)} (available: {', '.join(ANALYSES)})")
    attributions = _attribution_options(raw.get("attributions"), where)
    top_k = raw.get("top_k")
    if top_k is not None and (not isinstance(top_k, int) or top_k < 1):
        raise ConfigError(f"{where}: top_k must be a positive integer, got {top_k!r}")
    search = raw.get("search")
    if search is not None:
        from .search import check_search

        check_search(search, where)
    return ExperimentConfig(
        data=str(raw["data"]), methods=methods, protocol=protocol, seeds=seeds, output=str(raw["output"]),
        model=str(raw.get("model", "minilm-l6")), name=str(raw.get("name", "experiment")),
        validation_size=raw.get("validation_size"), training=training, data_options=data_options,
        save_models=bool(raw.get("save_models", False)),
        metrics=list(raw.get("metrics", ["accuracy", "f1", "macro_f1", "mcc"])), baseline=baseline, top_k=top_k,
        analyses=list(analyses), attributions=attributions, report=bool(raw.get("report", True)), search=search, raw=raw,
    )


def apply_overrides(raw: dict[str, Any], overrides: Sequence[str], where: str = "config") -> dict[str, Any]:
    """``raw`` with each ``"dotted.key=value"`` set (the value read as YAML: ``3``, ``[20, 100]``,
    ``{kind: full}``); intermediate mappings are created when missing. Returns a new dict."""
    import copy

    out = copy.deepcopy(raw)
    for item in overrides:
        key, sep, text = item.partition("=")
        if not sep or not key.strip() or any(not part for part in key.strip().split(".")):
            raise ConfigError(f"{where}: override {item!r} is not KEY=VALUE (e.g. protocol.samples=3)")
        try:
            value = yaml.safe_load(text) if text.strip() else None
        except yaml.YAMLError:
            raise ConfigError(f"{where}: override {item!r}: the value is not valid YAML") from None
        parts = key.strip().split(".")
        node = out
        for depth, part in enumerate(parts[:-1]):
            child = node.get(part)
            if child is None:
                child = node[part] = {}
            elif isinstance(child, str) and depth == 0 and part == "protocol":
                child = node[part] = {"kind": child}
            if not isinstance(child, dict):
                raise ConfigError(f"{where}: override {item!r}: {'.'.join(parts[:depth + 1])} is not a mapping")
            node = child
        node[parts[-1]] = value
    return out


def load_config(path: str | Path, overrides: Sequence[str] = ()) -> ExperimentConfig:
    """Read and check the YAML config at ``path``, after ``overrides`` (``KEY=VALUE`` strings,
    dotted keys, see :func:`apply_overrides`)."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"experiment config {path}: no such file")
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        at = f" at line {mark.line + 1}" if mark is not None else ""
        raise ConfigError(f"experiment config {path}: not valid YAML{at}") from None
    except UnicodeDecodeError:
        raise ConfigError(f"experiment config {path}: not valid UTF-8") from None
    if overrides:
        if not isinstance(raw, dict):
            raise ConfigError(f"{path}: expected a mapping at the top level")
        raw = apply_overrides(raw, overrides, str(path))
    return parse_config(raw, str(path))
