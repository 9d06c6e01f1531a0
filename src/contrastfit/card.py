"""The model card of a saved model: ``README.md`` in its folder, written from its record.

A card is Markdown with the YAML front matter the Hugging Face Hub reads (``base_model`` as a Hub id,
the built-in alias mapped to its id; ``license``; ``language``; ``library_name``; ``pipeline_tag``;
``tags``; ``datasets``; ``metrics``; ``model-index`` with the evaluation results), then what the model is (method and paper),
the data it was trained on (source, sampling, sizes, hashes), how it was trained (settings, steps,
the validation-selected step), its validation and test metrics (with the probabilities' NLL and
ECE, and the temperature when ``contrastfit calibrate`` fitted one; for a multi-label model micro-F1,
macro-F1 and subset accuracy, the headline metrics also in the front matter, and each label's F1 and
threshold), how to use it, what it cannot
claim, and the library versions. No absolute local path is written (a local file appears by its
name only). Everything comes from ``results.json`` and ``contrastfit.json``:
the card states nothing the record does not hold. ``contrastfit train`` writes it with the model;
``contrastfit card RUN`` writes it again (``calibrate`` does, after fitting a temperature).
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any, Sequence

from .atomic import write_text_atomic
from .errors import ModelError
from .record import RESULTS_NAME, Record

__all__ = ["CARD_NAME", "HUB_ID", "model_card", "multitask_card", "public_record", "write_model_card"]

CARD_NAME = "README.md"
_CLASSIFICATION = ("accuracy", "f1", "macro_f1", "mcc", "nll", "ece")
_REGRESSION = ("pearson", "spearman", "mse")
#: A multi-label model's metrics in the card's table: the headline ones
#: (:data:`contrastfit.evaluation.multilabel.MULTILABEL_HEADLINE`, also the front matter's and the
#: model-index's), then the others of :func:`~contrastfit.evaluation.multilabel.multilabel_metrics`.
_MULTILABEL_HEADLINE = ("micro_f1", "macro_f1", "subset_accuracy")
_MULTILABEL = (*_MULTILABEL_HEADLINE, "samples_f1", "hamming_loss")

#: A Hugging Face Hub model id, ``owner/name``.
HUB_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*/[A-Za-z0-9][A-Za-z0-9_.-]*$")


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


def hub_base_model(base: Any) -> str | None:
    """``base`` as a Hub model id: a built-in alias mapped to its id, a Hub id as it is; None for a
    local folder (which is no Hub id)."""
    from .encoders import BUILTIN_MODEL_CARDS

    if base in BUILTIN_MODEL_CARDS:
        return str(BUILTIN_MODEL_CARDS[base]["hub_id"])
    if isinstance(base, str) and HUB_ID.match(base) and not Path(base).exists():
        return base
    return None


def _front_matter(base: Any, tags: list[str], datasets: list[str], metrics: list[str],
                  model_index: list[dict[str, Any]] | None = None) -> str:
    import yaml

    from .encoders import BUILTIN_MODEL_CARDS

    known = BUILTIN_MODEL_CARDS.get(base, {})
    front: dict[str, Any] = {}
    hub_id = hub_base_model(base)
    if hub_id:
        front["base_model"] = hub_id
    front["license"] = known.get("license", "unknown")  # the base model's licence, where contrastfit knows it
    if known.get("language"):
        front["language"] = list(known["language"])
    front.update({"library_name": "contrastfit", "pipeline_tag": "text-classification", "tags": tags})
    if datasets:
        front["datasets"] = datasets
    front["metrics"] = metrics
    if model_index:
        front["model-index"] = model_index
    return "---\n" + yaml.safe_dump(front, sort_keys=False, allow_unicode=True) + "---"


def _model_index(name: str, data: dict[str, Any], metrics: dict[str, dict[str, Any]], names: Sequence[str]) -> list:
    """The Hub's ``model-index``: one result per evaluated split, with the metrics in ``names``."""
    hub = _hub_names(data)
    results = []
    for split in ("validation", "test"):
        values = [{"type": m, "value": float(metrics[split][m]), "name": f"{split} {m}"}
                  for m in names if isinstance(metrics.get(split, {}).get(m), (int, float))]
        if values:
            results.append({"task": {"type": "text-classification", "name": "Text Classification"},
                            "dataset": {"name": str(data.get("name", "?")), "type": hub[0] if hub else str(data.get("name", "?")),
                                        "split": split},
                            "metrics": values})
    return [{"name": name, "results": results}] if results else []


def _hub_names(*data: dict[str, Any]) -> list[str]:
    """The Hub data sets among ``data`` records (built-in and local data are not on the Hub)."""
    return [str(d.get("source", {}).get("name", d.get("name"))) for d in data if d.get("source", {}).get("kind") == "hub"]


def _data_rows(data: dict[str, Any], prefix: str = "") -> list[str]:
    sampling = ", ".join(f"{k.replace('_', ' ')} {v}" for k, v in data.get("sampling", {}).items() if v is not None)
    splits = [split for split in ("train", "validation", "test") if data.get(f"{split}_size") is not None]
    return [f"| {prefix}{split} | {data[f'{split}_size']} | `{data.get(f'{split}_hash', '-')}` | "
            f"{(sampling or '-') if i == 0 else ''} |" for i, split in enumerate(splits)]


def _settings(record: Record, hparams: dict[str, Any]) -> list[str]:
    shown = {k: v for k, v in record.training.items() if k not in ("selection", "train_loss") and not isinstance(v, dict)}
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


def _calibration_sentence(calibration: dict[str, Any], subject: str = "the probabilities") -> str:
    """What a temperature-scaling record (``calibrate``) did, in one sentence."""
    if "temperatures" in calibration:  # a multi-label model: one temperature per label (contrastfit.multilabel.model)
        return (f"Per-label temperature scaling: {subject} are `sigmoid(logit_j / T_j)` with T = "
                f"{', '.join(f'{t:.3f}' for t in calibration['temperatures'])}, fitted on "
                f"{calibration.get('data', 'held-out data')} ({calibration.get('n')} rows): mean binary NLL "
                f"{calibration['nll_before']:.4f} -> {calibration['nll_after']:.4f}; the thresholds moved with them.")
    return (f"Temperature scaling (Guo et al. 2017): {subject} are `softmax(logits / {calibration['temperature']:.4f})`, "
            f"the temperature fitted on {calibration.get('data', 'held-out data')} ({calibration.get('n')} rows): "
            f"NLL {calibration['nll_before']:.4f} -> {calibration['nll_after']:.4f}, "
            f"ECE {calibration['ece_before']:.4f} -> {calibration['ece_after']:.4f} on those rows.")


def model_card(record: Record | dict[str, Any], config: dict[str, Any]) -> str:
    """The card of a model from its run record (``results.json``, a :class:`~contrastfit.record.Record` or
    its dict) and its ``contrastfit.json`` (which holds the calibration, if any); a multi-task record gets
    :func:`multitask_card`."""
    from .methods import available_methods

    record = record if isinstance(record, Record) else Record.from_dict(record)
    if record.kind == "multitask":
        return multitask_card(record, config)
    method = record.method or config.get("method")
    spec = available_methods().get(method)
    data = record.data or {}
    metrics = record.metrics
    task = data.get("task") or config.get("task", "classification")
    labels = data.get("label_names") or config.get("label_names")
    multi_label = bool(data.get("multi_label") or config.get("multi_label"))
    names = _REGRESSION if task == "regression" else _MULTILABEL if multi_label else _CLASSIFICATION
    base = record.model or config.get("base_model")
    shown_base = hub_base_model(base) or (Path(str(base)).name if base else "?")

    tags = ["contrastfit", str(method), task, *(["multi-label"] if multi_label else [])]
    indexed = _MULTILABEL_HEADLINE if multi_label else names  # the model-index's metrics; the front matter's less nll, ece
    out = [_front_matter(base, tags, _hub_names(data), [m for m in indexed if m not in ("nll", "ece")],
                         _model_index(f"{method} on {data.get('name', '?')}", data, metrics, indexed)),
           "", f"# {method} on {data.get('name', '?')}", ""]
    what = f"`{shown_base}` fine-tuned with contrastfit's `{method}` method"
    if spec is not None:
        what += f": {spec.description}. Paper: {spec.reference}"
    if task == "regression":
        what += ". It predicts one score per text."
    elif multi_label:
        what += f". It gives each {'text pair' if data.get('text_pair') else 'text'} a set of labels (none, one or " \
                f"several) of {len(labels or [])}: " + ", ".join(f"`{n}`" for n in labels or []) + \
                ". Each label has its own sigmoid probability and threshold."
    else:
        what += f". It classifies {'text pairs' if data.get('text_pair') else 'texts'} into {len(labels or [])} labels: " \
                + ", ".join(f"`{n}`" for n in labels or []) + "."
    out += [what, "", "## Training data", "", "| split | rows | hash | sampling |", "|---|---|---|---|",
            *_data_rows(data), "", f"Source: `{json.dumps(public_record(data.get('source', {})), sort_keys=True)}`.", ""]
    out += _settings(record, record.hparams or {})
    selection = record.training.get("selection")
    if selection:
        out += ["", f"The kept step is {selection.get('best_step')}, the best validation {selection.get('metric')} "
                    f"({_fmt(selection.get('best_value'), metric=True)}) of {len(selection.get('evaluations', []))} evaluations."]
    out.append("")

    splits = [s for s in ("validation", "test") if s in metrics]
    if splits:
        out += ["## Evaluation", "", *_metric_table("model", [(str(method), metrics)], names, splits), ""]
        if any("ece" in metrics[s] for s in splits):
            out += ["`nll` is the mean cross-entropy of the predicted probabilities and `ece` their expected "
                    "calibration error (15 bins), both before any temperature scaling.", ""]
        if multi_label:
            out += _multilabel_results(metrics, splits, record.training.get("thresholds") or {})
    calibration = config.get("calibration")
    if calibration:
        out += ["## Calibration", "", _calibration_sentence(calibration), ""]

    example = "a fine film" + ("\\tgreat acting" if data.get("text_pair") else "")
    out += ["## Usage", "", "```python", "from contrastfit import ContrastiveClassifier", "",
            'model = ContrastiveClassifier.from_pretrained("path/to/this/folder")',
            f'model.{"predict" if task == "regression" or multi_label else "predict_proba"}(["a fine film"]'
            + (', ["great acting"]' if data.get("text_pair") else "") + ")", "```", "",
            f"or `echo -e \"{example}\" | contrastfit predict path/to/this/folder`.", ""]
    out += _loading(config)
    return "\n".join(out + _closing(record, data.get("train_size", "?")))


def _multilabel_results(metrics: dict[str, Any], splits: list[str], thresholds: dict[str, Any]) -> list[str]:
    """What the metric table of a multi-label model means, and each label's F1 and threshold."""
    out = ["`micro_f1` pools every (text, label) decision, `macro_f1` is the mean of the labels' F1, "
           "`subset_accuracy` the fraction of texts whose whole label set is right; `samples_f1` is F1 per text, "
           "averaged, and `hamming_loss` the fraction of wrong (text, label) decisions (lower is better). Each label "
           "is decided at its own threshold (the training table's `threshold_rule`).", ""]
    per_label = {s: metrics[s].get("per_label") or {} for s in splits}
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


def _loading(config: dict[str, Any]) -> list[str]:
    """How (and how not) to load the folder with other libraries."""
    st = config.get("sentence_transformers")
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


def multitask_card(record: Record | dict[str, Any], config: dict[str, Any] | None = None) -> str:
    """The card of a multi-task model (one encoder, a head per task) from its ``results.json`` and its
    ``contrastfit.json`` (which holds each calibrated task's temperature)."""
    record = record if isinstance(record, Record) else Record.from_dict(record)
    tasks = record.tasks or {}
    specs = {name: t.get("spec", {}) for name, t in tasks.items()}
    base = record.model
    shown_base = hub_base_model(base) or (Path(str(base)).name if base else "?")
    kinds = sorted({s.get("type", "?") for s in specs.values()})
    metric_names = sorted({s.get("metric") for s in specs.values() if s.get("metric")})
    out = [_front_matter(base, ["contrastfit", "multi-task", *kinds], _hub_names(*(t.get("data", {}) for t in tasks.values())),
                         metric_names),
           "", f"# Multi-task model: {', '.join(tasks)}", "",
           f"`{shown_base}` fine-tuned by contrastfit on {len(tasks)} tasks at once: one shared encoder, one head per task "
           "(the CS224N report's multi-task setup, Behrman & Christoglou). Each batch holds one task; the "
           f"schedule was `{(record.schedule or {}).get('name')}`.", "",
           "| task | type | head | objective | weight | labels | selection metric |", "|---|---|---|---|---|---|---|"]
    for name, s in specs.items():
        labels = ", ".join(f"`{n}`" for n in s.get("label_names") or []) or "(a score)"
        pairs = " (pairs)" if s.get("pairs") and s.get("type") != "pair-classification" else ""
        out.append(f"| {name} | {s.get('type')}{pairs} | {s.get('head')} | "
                   f"{s.get('objective')} | {_fmt(s.get('weight'))} | {labels} | {s.get('metric')} |")
    out += ["", "## Training data", "", "| task: split | rows | hash | sampling |", "|---|---|---|---|"]
    for name, t in tasks.items():
        out += _data_rows(t.get("data", {}), prefix=f"{name}: ")
    out.append("")
    out += _settings(record, {})
    selection = record.training.get("selection") or {}
    if selection.get("best_step") is not None:
        out += ["", f"The kept step is {selection.get('best_step')}, the best validation "
                    + ("average of the tasks' selection metrics." if record.select_on == "average"
                       else f"selection metric of task {record.select_on}.")]
    out.append("")
    metrics = record.metrics
    splits = [s for s in ("validation", "test") if s in metrics]
    if splits:
        rows = [(name, {s: metrics[s].get(name, {}) for s in splits}) for name in tasks]
        out += ["## Evaluation", "", *_metric_table("task", rows, (*_CLASSIFICATION, *_REGRESSION), splits), "",
                "Average of the tasks' selection metrics: "
                + ", ".join(f"{s} {_fmt(metrics[s].get('average'), metric=True)}" for s in splits) + ".", ""]
    calibration = (config or {}).get("calibration") or {}
    if calibration:
        out += ["## Calibration", ""]
        out += [f"- {_calibration_sentence(c, f'the probabilities of task {name}')}" for name, c in calibration.items()]
        out.append("")
    first = next(iter(tasks), "TASK")
    out += ["## Usage", "", "```python", "from contrastfit.multitask import MultiTaskModel", "",
            'model = MultiTaskModel.from_pretrained("path/to/this/folder")',
            f'model.predict(["a fine film"], task="{first}")', "```", "",
            f"or `contrastfit predict path/to/this/folder --task {first} \"a fine film\"`.", ""]
    rows = ", ".join(f"{t.get('data', {}).get('train_size', '?')} ({name})" for name, t in tasks.items())
    return "\n".join(out + _closing(record, rows))


def write_model_card(folder: str | os.PathLike) -> Path:
    """Write ``README.md`` (:func:`model_card`) in a model's output folder (single- or multi-task), atomically."""
    folder = Path(folder)
    try:
        record = Record.from_dict(json.loads((folder / RESULTS_NAME).read_text(encoding="utf-8")),
                                  str(folder / RESULTS_NAME))
        config = json.loads((folder / "contrastfit.json").read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise ModelError(f"{folder}: no {Path(exc.filename).name}; a model card is written from a finished run's "
                         "results.json and contrastfit.json") from None
    except json.JSONDecodeError as exc:
        raise ModelError(f"{folder}: a record is not valid JSON ({exc.msg} at line {exc.lineno})") from None
    return write_text_atomic(folder / CARD_NAME, model_card(record, config))
