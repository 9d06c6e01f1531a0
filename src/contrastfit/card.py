"""The model card of a saved model: ``README.md`` in its folder, written from its record.

A card is Markdown with the YAML front matter the Hugging Face Hub reads, built with huggingface_hub's
own classes (``ModelCardData``, ``EvalResult``, ``ModelCard``): ``base_model`` as a Hub id (a built-in
model's alias, its folder or a Hub cache folder mapped to its id; left out for another local folder);
``license``; ``language``; ``library_name``; ``pipeline_tag``; ``tags``; ``datasets`` (the Hub data
sets trained on); ``metrics``; ``widget`` (one training text per label, where the record holds them);
``model-index`` with the evaluation results of each evaluated split, named (validation, test). The
licence, languages and data sets can be set (:func:`card_settings`: ``contrastfit card RUN --license L
--language xx --dataset owner/name``, ``contrastfit push``); the settings are kept in the folder's
``contrastfit.json`` (``card``), so a card written again (``calibrate``) keeps them. Then the card
says what the model is (method and paper), the data it was trained on (source, sampling, sizes,
hashes), how it was trained (settings, steps, the validation-selected step), its validation and test
metrics (with the probabilities' NLL and ECE, and the temperature when ``contrastfit calibrate``
fitted one; for a multi-label model micro-F1, macro-F1 and subset accuracy, the headline metrics also
in the front matter, and each label's F1 and threshold), how to use it, what it cannot claim, and the
library versions. No absolute local path is written (a local file appears by its name only).
Everything comes from ``results.json`` and ``contrastfit.json``: the card states nothing the record
does not hold. ``contrastfit train`` writes it with the model; ``contrastfit card RUN`` writes it
again (``calibrate`` does, after fitting a temperature).
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any, Mapping, Sequence

from .atomic import write_json_atomic, write_text_atomic
from .errors import ConfigError, ModelError
from .folder import CONFIG_NAME as CONFIG_FILE
from .record import RESULTS_NAME, Calibration, ModelConfig, MultiTaskModelConfig, Record, RunData, parse_model_config

__all__ = ["CARD_NAME", "HUB_ID", "card_settings", "model_card", "multitask_card", "public_record",
           "set_card_metadata", "write_model_card"]

CARD_NAME = "README.md"
_CLASSIFICATION = ("accuracy", "f1", "macro_f1", "mcc", "nll", "ece")
_REGRESSION = ("pearson", "spearman", "mse")
#: A multi-label model's metrics in the card's table: the headline ones
#: (:data:`contrastfit.evaluation.multilabel.MULTILABEL_HEADLINE`, also the front matter's and the
#: model-index's), then the others of :func:`~contrastfit.evaluation.multilabel.multilabel_metrics`.
_MULTILABEL_HEADLINE = ("micro_f1", "macro_f1", "subset_accuracy")
_MULTILABEL = (*_MULTILABEL_HEADLINE, "samples_f1", "hamming_loss")
_SPLITS = ("validation", "test")

#: A Hugging Face Hub model id, ``owner/name``.
HUB_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*/[A-Za-z0-9][A-Za-z0-9_.-]*$")
#: A Hub data set id: ``owner/name``, or a bare ``name`` (the canonical data sets).
HUB_DATASET_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*(/[A-Za-z0-9][A-Za-z0-9_.-]*)?$")
#: A language code as the Hub takes it (ISO 639-1 or -3, optionally with a region or script: ``pt-BR``).
LANGUAGE = re.compile(r"^[a-z]{2,3}(?:[-_][A-Za-z0-9]{2,8})*$")
#: A Hub licence identifier (``apache-2.0``, ``mit``, ``cc-by-4.0``, ``other``): no white space.
LICENSE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.+-]*$")
#: The folder name of a Hub model in the huggingface_hub cache: ``models--owner--name``.
_CACHE_FOLDER = re.compile(r"^models--([A-Za-z0-9][A-Za-z0-9_.-]*)--([A-Za-z0-9][A-Za-z0-9_.-]*)$")
#: Longest training text used as a widget example (a longer one is used only when a label has no shorter).
_EXAMPLE_CHARS = 500


def public_record(obj: Any) -> Any:
    """``obj`` (a JSON record) with every absolute local path replaced by its file name."""
    if isinstance(obj, dict):
        return {k: public_record(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [public_record(v) for v in obj]
    if isinstance(obj, str) and os.path.isabs(obj) and len(Path(obj).parts) > 2:
        return Path(obj).name
    return obj


def _fmt(value: Any, metric: bool = False) -> str:
    if isinstance(value, float):
        return f"{value:.4f}" if metric else f"{value:.4g}"
    return "-" if value is None else str(value)


def _as_list(value: str | Sequence[str] | None) -> list[str] | None:
    if value is None:
        return None
    return [value] if isinstance(value, str) else list(value)


def card_settings(license: str | None = None, language: str | Sequence[str] | None = None,
                  datasets: str | Sequence[str] | None = None) -> dict[str, Any]:
    """The card metadata a user sets, checked: ``license`` (a Hub licence id, e.g. ``apache-2.0``),
    ``language`` (codes, e.g. ``en``) and ``datasets`` (Hub data set ids, ``owner/name``); only those
    given (not None), a list for the last two. A malformed value is a one-line :class:`ConfigError`."""
    out: dict[str, Any] = {}
    if license is not None:
        if not LICENSE.match(license):
            raise ConfigError(f"--license {license!r} is not a Hub licence id (e.g. apache-2.0, mit, cc-by-4.0, other)")
        out["license"] = license
    languages = _as_list(language)
    if languages is not None:
        bad = next((code for code in languages if not isinstance(code, str) or not LANGUAGE.match(code)), None)
        if bad is not None or not languages:
            raise ConfigError(f"--language {bad!r} is not a language code (e.g. en, de, pt-BR)")
        out["language"] = list(dict.fromkeys(languages))
    names = _as_list(datasets)
    if names is not None:
        bad = next((name for name in names if not isinstance(name, str) or not HUB_DATASET_ID.match(name)), None)
        if bad is not None or not names:
            raise ConfigError(f"--dataset {bad!r} is not a Hub data set id (owner/name)")
        out["datasets"] = list(dict.fromkeys(names))
    return out


def _builtin_folders() -> dict[str, str]:
    """``{resolved folder: alias}`` of the built-in models that are installed."""
    # lazy: encoders imports torch, this module imports without torch (tests also patch encoders.builtin_model_path)
    from .encoders import BUILTIN_MODEL_CARDS, builtin_model_path

    out = {}
    for alias in BUILTIN_MODEL_CARDS:
        try:
            out[str(builtin_model_path(alias).resolve())] = alias
        except ModelError:  # not installed here
            pass
    return out


def _builtin_alias(base: Any) -> str | None:
    """The built-in model ``base`` names: its alias (``minilm-l6``), or its installed folder."""
    # lazy: encoders imports torch, this module imports without torch
    from .encoders import BUILTIN_MODEL_CARDS

    if not isinstance(base, str):
        return None
    if base in BUILTIN_MODEL_CARDS:
        return base
    path = Path(base).expanduser()
    return _builtin_folders().get(str(path.resolve())) if path.is_dir() else None


def hub_base_model(base: Any) -> str | None:
    """``base`` (the record's ``model``) as a Hub model id: a built-in model (by alias or by its
    installed folder) mapped to its id, a folder of the Hub cache (``.../models--owner--name/snapshots/REV``)
    to ``owner/name``, a Hub id as it is; None for another local folder (which is no Hub id)."""
    # lazy: encoders imports torch, this module imports without torch
    from .encoders import BUILTIN_MODEL_CARDS

    if not isinstance(base, str) or not base:
        return None
    alias = _builtin_alias(base)
    if alias is not None:
        return str(BUILTIN_MODEL_CARDS[alias]["hub_id"])
    path = Path(base).expanduser()
    if path.exists():
        cached = next((m for m in map(_CACHE_FOLDER.match, path.parts) if m), None)
        return f"{cached.group(1)}/{cached.group(2)}" if cached else None
    return base if HUB_ID.match(base) else None


def _card_data(base: Any, tags: list[str], datasets: list[str], metrics: list[str], settings: Mapping[str, Any],
               eval_results: list[Any] | None = None, model_name: str | None = None,
               widget: list[dict[str, str]] | None = None):
    """The front matter as ``huggingface_hub.ModelCardData``: the user's ``settings``
    (:func:`card_settings`) over what the record says (the base model's licence and languages where
    contrastfit knows them, the Hub data sets trained on)."""
    from huggingface_hub import ModelCardData

    # lazy: encoders imports torch, this module imports without torch
    from .encoders import BUILTIN_MODEL_CARDS

    alias = _builtin_alias(base)
    known = BUILTIN_MODEL_CARDS[alias] if alias is not None else {}
    language = settings["language"] if "language" in settings else known.get("language")
    return ModelCardData(
        base_model=hub_base_model(base),
        license=settings.get("license", known.get("license", "unknown")),  # the base model's, where contrastfit knows it
        language=list(language) if language else None,
        library_name="contrastfit", pipeline_tag="text-classification", tags=tags,
        datasets=settings.get("datasets", datasets) or None, metrics=metrics or None,
        model_name=model_name if eval_results else None, eval_results=eval_results or None,
        widget=widget or None)


def _render(card_data, body: list[str]) -> str:
    """The card: ``card_data``'s YAML front matter, then the Markdown ``body`` (read back by
    ``huggingface_hub.ModelCard``, which refuses metadata it cannot parse)."""
    from huggingface_hub import ModelCard

    card = ModelCard("---\n" + card_data.to_yaml() + "\n---\n\n" + "\n".join(body))
    return str(card)


def _dataset_of(data: RunData) -> tuple[str, str, str | None, str | None]:
    """``(name, type, config, revision)`` of the data a model-index result is on: the Hub id as the type
    for Hub data, else the data's name."""
    name, source = str(data.name or "?"), data.source
    if source is not None and source.kind == "hub":
        return name, str(source.name or name), source.config, source.revision
    return name, name, None, None


def _eval_results(data: RunData, metrics: Mapping[str, Any], names: Sequence[str]) -> list[Any]:
    """The Hub's ``model-index`` as ``huggingface_hub.EvalResult`` s: one per evaluated split and metric of
    ``names`` the record holds, with the split named (validation, test); nothing for a split not evaluated."""
    from huggingface_hub import EvalResult

    name, kind, config, revision = _dataset_of(data)
    out = []
    for split in _SPLITS:
        values = metrics[split] if split in metrics else {}
        for metric in names:
            value = values[metric] if metric in values else None
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                out.append(EvalResult(task_type="text-classification", task_name="Text Classification",
                                      dataset_type=kind, dataset_name=name, dataset_config=config,
                                      dataset_revision=revision, dataset_split=split, metric_type=metric,
                                      metric_value=float(value), metric_name=f"{split} {metric}"))
    return out


def _hub_names(*data: RunData) -> list[str]:
    """The Hub data sets among ``data`` records (built-in, local and in-memory data are not on the Hub)."""
    return list(dict.fromkeys(str(d.source.name or d.name) for d in data if d.source is not None and d.source.kind == "hub"))


def _widget(data: RunData) -> list[dict[str, str]]:
    """The Hub widget's examples: the record's training text of each label (``data.examples``)."""
    if not data.examples or data.text_pair:
        return []
    return [{"text": str(e["text"]), "example_title": str(e["label"])} for e in data.examples
            if "text" in e and "label" in e]


def label_examples(train, label_names: Sequence[str] | None) -> list[dict[str, str]]:
    """One training text per label for the card's widget, ``[{"label", "text"}]`` in label order: each
    label's first text of at most :data:`_EXAMPLE_CHARS` characters (else its first); none for a
    regression target or sentence pairs."""
    # lazy: data.types imports datasets and torch, this module imports without torch
    from .data.types import LABEL, TEXT, TEXT_PAIR

    if label_names is None or TEXT_PAIR in train.column_names or LABEL not in train.column_names:
        return []
    chosen: dict[int, str] = {}
    for text, label in zip(train[TEXT], train[LABEL]):
        if label not in chosen or (len(chosen[label]) > _EXAMPLE_CHARS >= len(text)):
            chosen[label] = text
    return [{"label": str(name), "text": chosen[i]} for i, name in enumerate(label_names) if i in chosen]


def _data_rows(data: RunData, prefix: str = "") -> list[str]:
    """The card's rows of the training data table: each split's size and hash, the sampling beside the first."""
    sampling = ", ".join(f"{k.replace('_', ' ')} {v}" for k, v in (data.sampling or {}).items() if v is not None)
    sizes = {split: (getattr(data, f"{split}_size"), getattr(data, f"{split}_hash") or "-")
             for split in ("train", "validation", "test")}
    shown = [(split, size, digest) for split, (size, digest) in sizes.items() if size is not None]
    return [f"| {prefix}{split} | {size} | `{digest}` | {(sampling or '-') if i == 0 else ''} |"
            for i, (split, size, digest) in enumerate(shown)]


def _settings(record: Record, hparams: dict[str, Any]) -> list[str]:
    shown = {k: v for k, v in record.training.to_dict().items()
             if k not in ("selection", "train_loss") and not isinstance(v, dict)}
    return (["## Training", "", "| setting | value |", "|---|---|", f"| seed | {record.seed} |"]
            + [f"| {k} | {_fmt(v)} |" for k, v in {**hparams, **shown}.items()])


def _metric_table(first: str, rows: list[tuple[str, dict[str, Any]]], names: Sequence[str], splits: list[str]) -> list[str]:
    """``| first | metric | split... |`` for each (row label, {split: metrics}) and metric present."""
    out = [f"| {first} | metric | " + " | ".join(splits) + " |", "|---" * (len(splits) + 2) + "|"]
    for label, by_split in rows:
        for name in names:
            if any(name in by_split.get(s, {}) for s in splits):
                out.append(f"| {label} | {name} | "
                           + " | ".join(_fmt(by_split.get(s, {}).get(name), metric=True) for s in splits) + " |")
    return out


def _closing(record: Record, rows: Any) -> list[str]:
    out = ["## Limitations", "",
           f"One training run (seed {record.seed}) on {rows} training rows: the metrics above are one draw. "
           "Few-shot results vary by several points from one training sample to the next; compare methods with "
           "`contrastfit experiment` (several samples, the same for every method, paired tests). The model knows "
           "only the labels above and the domain of its training data.", ""]
    versions = record.versions
    if versions:
        out += ["## Versions", "", ", ".join(f"{k} {v}" for k, v in versions.items() if k != "platform") + ".", ""]
    return out


def _calibration_sentence(calibration: Calibration, subject: str = "the probabilities") -> str:
    """What a temperature-scaling record (``calibrate``) did, in one sentence."""
    c, on = calibration, calibration.data or "held-out data"
    if c.temperatures is not None:  # a multi-label model: one temperature per label (calibration.calibrate_per_label)
        return (f"Per-label temperature scaling: {subject} are `sigmoid(logit_j / T_j)` with T = "
                f"{', '.join(f'{t:.3f}' for t in c.temperatures)}, fitted on {on} ({c.n} rows): mean binary NLL "
                f"{c.nll_before:.4f} -> {c.nll_after:.4f}; the thresholds moved with them.")
    return (f"Temperature scaling (Guo et al. 2017): {subject} are `softmax(logits / {c.temperature:.4f})`, "
            f"the temperature fitted on {on} ({c.n} rows): NLL {c.nll_before:.4f} -> {c.nll_after:.4f}, "
            f"ECE {c.ece_before:.4f} -> {c.ece_after:.4f} on those rows.")


def model_card(record: Record | dict[str, Any], config: ModelConfig | MultiTaskModelConfig | Mapping[str, Any]) -> str:
    """The card of a model from its run record (``results.json``, a :class:`~contrastfit.record.Record` or
    its dict) and its ``contrastfit.json`` (which holds the calibration, if any, and the card settings
    ``card``: :func:`card_settings`); a multi-task record gets :func:`multitask_card`."""
    # lazy: methods imports torch, this module imports without torch
    from .methods import available_methods

    record = record if isinstance(record, Record) else Record.from_dict(record)
    config = _typed(config)
    if record.kind == "multitask":
        return multitask_card(record, config)
    method = record.method or config.method
    spec = available_methods().get(method)
    data = record.data if isinstance(record.data, RunData) else RunData()
    metrics = record.metrics
    task = record.task or config.task or "classification"
    labels = record.label_names if record.label_names is not None else config.label_names
    labels = list(labels) if labels else []
    multi_label = bool(data.multi_label if data.multi_label is not None else config.multi_label)
    pairs = bool(data.text_pair)
    names = _REGRESSION if task == "regression" else _MULTILABEL if multi_label else _CLASSIFICATION
    base = record.base_model or config.base_model
    shown_base = hub_base_model(base) or (Path(str(base)).name if base else "?")
    title = f"{method} on {data.name or '?'}"

    tags = ["contrastfit", str(method), task, *(["multi-label"] if multi_label else [])]
    indexed = _MULTILABEL_HEADLINE if multi_label else names  # the model-index's metrics; the front matter's less nll, ece
    front = _card_data(base, tags, _hub_names(data), [m for m in indexed if m not in ("nll", "ece")],
                       config.card, _eval_results(data, metrics, indexed), title, _widget(data))
    out = [f"# {title}", ""]
    what = f"`{shown_base}` fine-tuned with contrastfit's `{method}` method"
    if spec is not None:
        what += f": {spec.description}. Paper: {spec.reference}"
    if task == "regression":
        what += ". It predicts one score per text."
    elif multi_label:
        what += f". It gives each {'text pair' if pairs else 'text'} a set of labels (none, one or " \
                f"several) of {len(labels)}: " + ", ".join(f"`{n}`" for n in labels) + \
                ". Each label has its own sigmoid probability and threshold."
    else:
        what += f". It classifies {'text pairs' if pairs else 'texts'} into {len(labels)} labels: " \
                + ", ".join(f"`{n}`" for n in labels) + "."
    out += [what, "", "## Training data", "", "| split | rows | hash | sampling |", "|---|---|---|---|",
            *_data_rows(data), "", f"Source: `{json.dumps(public_record(data.source.to_dict() if data.source is not None else {}), sort_keys=True)}`.", ""]
    out += _settings(record, record.hparams or {})
    selection = record.training.selection
    if selection:
        out += ["", f"The kept step is {selection.best_step}, the best validation {selection.metric} "
                    f"({_fmt(selection.best_value, metric=True)}) of {len(selection.evaluations or [])} evaluations."]
    out.append("")

    splits = [s for s in _SPLITS if s in metrics]
    if splits:
        out += ["## Evaluation", "", *_metric_table("model", [(str(method), metrics)], names, splits), ""]
        if any("ece" in metrics[s] for s in splits):
            out += ["`nll` is the mean cross-entropy of the predicted probabilities and `ece` their expected "
                    "calibration error (15 bins), both before any temperature scaling.", ""]
        if multi_label:
            out += _multilabel_results(metrics, splits, record.training.thresholds or {})
    if config.calibration:
        out += ["## Calibration", "", _calibration_sentence(config.calibration), ""]

    example = "a fine film" + ("\\tgreat acting" if pairs else "")
    out += ["## Usage", "", "```python", "from contrastfit import ContrastiveClassifier", "",
            'model = ContrastiveClassifier.from_pretrained("path/to/this/folder")',
            f'model.{"predict" if task == "regression" or multi_label else "predict_proba"}(["a fine film"]'
            + (', ["great acting"]' if pairs else "") + ")", "```", "",
            f"or `echo -e \"{example}\" | contrastfit predict path/to/this/folder`.", ""]
    out += _loading(config)
    return _render(front, out + _closing(record, "?" if data.train_size is None else data.train_size))


def _multilabel_results(metrics: dict[str, Any], splits: list[str], thresholds: dict[str, Any]) -> list[str]:
    """What the metric table of a multi-label model means, and each label's F1 and threshold."""
    out = ["`micro_f1` pools every (text, label) decision, `macro_f1` is the mean of the labels' F1, "
           "`subset_accuracy` the fraction of texts whose whole label set is right; `samples_f1` is F1 per text, "
           "averaged, and `hamming_loss` the fraction of wrong (text, label) decisions (lower is better). Each label "
           "is decided at its own threshold (the training table's `threshold_rule`).", ""]
    per_label = {s: metrics[s].get("per_label", {}) for s in splits}
    labels = list(thresholds) or list(next((p for p in per_label.values() if p), {}))
    if labels:
        out += ["| label | threshold | " + " | ".join(f"{s} F1 (support)" for s in splits) + " |",
                "|---" * (len(splits) + 2) + "|"]
        for label in labels:
            cells = [f"{_fmt(per_label[s][label].get('f1'), metric=True)} ({per_label[s][label].get('support')})"
                     if label in per_label[s] else "-" for s in splits]
            out.append(f"| {label} | {_fmt(thresholds.get(label))} | " + " | ".join(cells) + " |")
        out.append("")
    return out


def _loading(config: ModelConfig) -> list[str]:
    """How (and how not) to load the folder with other libraries."""
    st = config.sentence_transformers
    out = ["## Loading", "",
           "`ContrastiveClassifier.from_pretrained` takes this folder or its Hub id (`owner/name`). The classifier "
           "is the encoder in `encoder/` plus `head.safetensors`; only contrastfit combines them.", ""]
    if st:
        how = (" (CLS pooling, then the encoder's dense+tanh pooler as a `Dense` module)"
               if st["pooling"] == "pooler" else "")
        pooled = (f"the encoder's pooled output (pooling `{st['pooling']}`{how}, maximum length "
                  f"{st['max_seq_length']}), L2-normalised")
        if st.get("folder"):
            out += [f"`SentenceTransformer(\"path/to/this/folder\")` (or `.../encoder`) gives {pooled}: "
                    "`model.embed(texts)`.", ""]
        else:
            out += ["This model's `model.embed(texts)` is not the encoder's pooled output, so "
                    "`SentenceTransformer(\"path/to/this/folder\")` refuses the folder (no `modules.json` at its root); "
                    f"`SentenceTransformer(\".../encoder\")` gives {pooled}, the encoder's embedding only.", ""]
    elif "sentence_transformers" in config:
        out += ["The encoder's pooler cannot be written as sentence-transformers modules: the folder has no "
                "sentence-transformers files (`SentenceTransformer(\"path/to/this/folder\")` refuses it; on `.../encoder` "
                "it would fall back to its default mean pooling); use `model.embed(texts)`.", ""]
    out += ["`encoder/` alone is the encoder without the classifier: `AutoModel.from_pretrained` loads it, but "
            "`pipeline(\"text-classification\", model=\".../encoder\")` does not classify (its config declares no "
            "labels, so it gets a head with no outputs).", ""]
    return out


def multitask_card(record: Record | dict[str, Any],
                   config: MultiTaskModelConfig | Mapping[str, Any] | None = None) -> str:
    """The card of a multi-task model (one encoder, a head per task) from its ``results.json`` and its
    ``contrastfit.json`` (which holds each calibrated task's temperature)."""
    record = record if isinstance(record, Record) else Record.from_dict(record)
    config = _typed(config if config is not None else {"kind": MultiTaskModelConfig.KIND})
    tasks = record.tasks or {}
    specs = {name: t.spec or {} for name, t in tasks.items()}
    task_data = {name: t.data or RunData() for name, t in tasks.items()}
    base = record.base_model
    shown_base = hub_base_model(base) or (Path(str(base)).name if base else "?")
    kinds = sorted({s.get("type", "?") for s in specs.values()})
    metric_names = sorted({s["metric"] for s in specs.values() if s.get("metric")})
    schedule = record.schedule.name if record.schedule else None
    front = _card_data(base, ["contrastfit", "multi-task", *kinds], _hub_names(*task_data.values()), metric_names,
                       config.card)
    out = [f"# Multi-task model: {', '.join(tasks)}", "",
           f"`{shown_base}` fine-tuned by contrastfit on {len(tasks)} tasks at once: one shared encoder, one head per task "
           "(the CS224N report's multi-task setup, Behrman & Christoglou). Each batch holds one task; the "
           f"schedule was `{schedule}`.", "",
           "| task | type | head | objective | weight | labels | selection metric |", "|---|---|---|---|---|---|---|"]
    for name, s in specs.items():
        labels = ", ".join(f"`{n}`" for n in s.get("label_names", None) or ()) or "(a score)"
        pairs = " (pairs)" if s.get("pairs") and s.get("type") != "pair-classification" else ""
        out.append(f"| {name} | {s.get('type')}{pairs} | {s.get('head')} | "
                   f"{s.get('objective')} | {_fmt(s.get('weight'))} | {labels} | {s.get('metric')} |")
    out += ["", "## Training data", "", "| task: split | rows | hash | sampling |", "|---|---|---|---|"]
    for name, data in task_data.items():
        out += _data_rows(data, prefix=f"{name}: ")
    out.append("")
    out += _settings(record, {})
    selection = record.training.selection
    if selection and selection.best_step is not None:
        out += ["", f"The kept step is {selection.best_step}, the best validation "
                    + ("average of the tasks' selection metrics." if record.select_on == "average"
                       else f"selection metric of task {record.select_on}.")]
    out.append("")
    metrics = record.metrics
    splits = [s for s in _SPLITS if s in metrics]
    if splits:
        rows = [(name, {s: metrics[s].get(name, {}) for s in splits}) for name in tasks]
        out += ["## Evaluation", "", *_metric_table("task", rows, (*_CLASSIFICATION, *_REGRESSION), splits), "",
                "Average of the tasks' selection metrics: "
                + ", ".join(f"{s} {_fmt(metrics[s].average, metric=True)}" for s in splits) + ".", ""]
    if config.calibration:
        out += ["## Calibration", ""]
        out += [f"- {_calibration_sentence(c, f'the probabilities of task {name}')}" for name, c in config.calibration.items()]
        out.append("")
    first = next(iter(tasks), "TASK")
    out += ["## Usage", "", "```python", "from contrastfit.multitask import MultiTaskModel", "",
            'model = MultiTaskModel.from_pretrained("path/to/this/folder")',
            f'model.predict(["a fine film"], task="{first}")', "```", "",
            f"or `contrastfit predict path/to/this/folder --task {first} \"a fine film\"`.", ""]
    rows = ", ".join(f"{'?' if data.train_size is None else data.train_size} ({name})" for name, data in task_data.items())
    return _render(front, out + _closing(record, rows))


def _typed(config: ModelConfig | MultiTaskModelConfig | Mapping[str, Any]) -> ModelConfig | MultiTaskModelConfig:
    """A ``contrastfit.json`` as its typed config (:func:`~contrastfit.record.parse_model_config`)."""
    return config if isinstance(config, (ModelConfig, MultiTaskModelConfig)) else parse_model_config(config, CONFIG_FILE)


def _read_records(folder: Path) -> tuple[Record, ModelConfig | MultiTaskModelConfig]:
    try:
        record = Record.from_dict(json.loads((folder / RESULTS_NAME).read_text(encoding="utf-8")),
                                  str(folder / RESULTS_NAME))
        config = parse_model_config(json.loads((folder / CONFIG_FILE).read_text(encoding="utf-8")),
                                    str(folder / CONFIG_FILE))
    except FileNotFoundError as exc:
        raise ModelError(f"{folder}: no {Path(exc.filename).name}; a model card is written from a finished run's "
                         "results.json and contrastfit.json") from None
    except json.JSONDecodeError as exc:
        raise ModelError(f"{folder}: a record is not valid JSON ({exc.msg} at line {exc.lineno})") from None
    return record, config


def write_model_card(folder: str | os.PathLike, *, license: str | None = None,
                     language: str | Sequence[str] | None = None,
                     datasets: str | Sequence[str] | None = None) -> Path:
    """Write ``README.md`` (:func:`model_card`) in a model's output folder (single- or multi-task),
    atomically. ``license``, ``language`` and ``datasets`` (:func:`card_settings`), where given, set
    those metadata fields and are kept in the folder's ``contrastfit.json`` (``card``) for the next
    card written there; those not given stay as a previous call set them."""
    folder = Path(folder)
    settings = card_settings(license, language, datasets)  # checked before anything is read or written
    record, config = _read_records(folder)
    if settings:
        config.card = {**config.card, **settings}
        write_json_atomic(folder / CONFIG_FILE, config.to_dict())
    return write_text_atomic(folder / CARD_NAME, model_card(record, config))


def set_card_metadata(path: str | os.PathLike, settings: Mapping[str, Any]) -> Path:
    """Set the metadata ``settings`` (:func:`card_settings`) in the model card ``path`` (a README.md
    kept as it is otherwise, e.g. one the user edited), atomically, through ``huggingface_hub.ModelCard``."""
    from huggingface_hub import ModelCard

    path = Path(path)
    try:
        card = ModelCard.load(path)
    except ValueError as exc:  # metadata that is not a mapping
        raise ModelError(f"{path}: the model card's metadata cannot be read ({exc})") from None
    for key, value in settings.items():
        setattr(card.data, key, value)
    return write_text_atomic(path, str(card))
