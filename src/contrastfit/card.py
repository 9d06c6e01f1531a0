"""The model card of a saved model: ``README.md`` in its folder, written from its record.

A card is Markdown with the YAML front matter the Hugging Face Hub reads (``base_model``,
``pipeline_tag``, ``tags``, ``datasets``, ``metrics``), then what the model is (method and paper),
the data it was trained on (source, sampling, sizes, hashes), how it was trained (settings, steps,
the validation-selected step), its validation and test metrics (with the probabilities' NLL and
ECE, and the temperature when ``contrastfit calibrate`` fitted one), how to use it, what it cannot
claim, and the library versions. Everything comes from ``results.json`` and ``contrastfit.json``:
the card states nothing the record does not hold. ``contrastfit train`` writes it with the model;
``contrastfit card RUN`` writes it again (``calibrate`` does, after fitting a temperature).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from .atomic import write_text_atomic
from .errors import ModelError

__all__ = ["CARD_NAME", "model_card", "write_model_card"]

CARD_NAME = "README.md"
_CLASSIFICATION = ("accuracy", "f1", "macro_f1", "mcc", "nll", "ece")
_REGRESSION = ("pearson", "spearman", "mse")


def _yaml_list(values: list[str]) -> str:
    return "".join(f"\n- {json.dumps(v)}" for v in values)


def _fmt(value: Any, metric: bool = False) -> str:
    if isinstance(value, float):
        return f"{value:.4f}" if metric else f"{value:.4g}"
    return "-" if value is None else str(value)


def model_card(record: dict[str, Any], config: dict[str, Any]) -> str:
    """The card of a single-task model from its run record (``results.json``) and its
    ``contrastfit.json`` (which holds the calibration, if any)."""
    from .methods import available_methods

    method = record.get("method") or config.get("method")
    spec = available_methods().get(method)
    data = record.get("data", {})
    training = record.get("training", {})
    metrics = record.get("metrics", {})
    task = data.get("task") or config.get("task", "classification")
    labels = data.get("label_names") or config.get("label_names")
    names = _REGRESSION if task == "regression" else _CLASSIFICATION
    base = record.get("model") or config.get("base_model")
    source = data.get("source", {})
    data_name = data.get("name", "?")
    hub_data = source.get("kind") == "hub"

    front = ["---", f"base_model: {json.dumps(str(base))}", "library_name: contrastfit",
             f"pipeline_tag: {'text-classification'}", f"tags:{_yaml_list(['contrastfit', str(method), task])}"]
    if hub_data:
        front.append(f"datasets:{_yaml_list([str(source.get('name', data_name))])}")
    front.append(f"metrics:{_yaml_list([m for m in names if m not in ('nll', 'ece')])}")
    front.append("---")

    out = ["\n".join(front), "", f"# {method} on {data_name}", ""]
    what = f"`{base}` fine-tuned with contrastfit's `{method}` method"
    if spec is not None:
        what += f": {spec.description}. Paper: {spec.reference}"
    if task == "regression":
        what += ". It predicts one score per text."
    else:
        what += f". It classifies {'text pairs' if data.get('text_pair') else 'texts'} into {len(labels or [])} labels: " \
                + ", ".join(f"`{n}`" for n in labels or []) + "."
    out += [what, ""]

    sampling = data.get("sampling", {})
    drawn = [f"{k.replace('_', ' ')} {v}" for k, v in sampling.items() if v is not None]
    out += ["## Training data", "",
            "| split | rows | hash |", "|---|---|---|"]
    for split in ("train", "validation", "test"):
        if data.get(f"{split}_size") is not None:
            out.append(f"| {split} | {data[f'{split}_size']} | `{data.get(f'{split}_hash', '-')}` |")
    out += ["", f"Source: `{json.dumps(source, sort_keys=True)}`.", f"Sampling: {', '.join(drawn) or 'none'}.", ""]

    shown = {k: v for k, v in training.items() if k not in ("selection", "train_loss") and not isinstance(v, dict)}
    out += ["## Training", "", "| setting | value |", "|---|---|"]
    out += [f"| seed | {record.get('seed')} |"]
    out += [f"| {k} | {_fmt(v)} |" for k, v in (record.get("hparams") or {}).items()]
    out += [f"| {k} | {_fmt(v)} |" for k, v in shown.items()]
    selection = training.get("selection")
    if selection:
        out += ["", f"The kept step is {selection.get('best_step')}, the best validation {selection.get('metric')} "
                    f"({_fmt(selection.get('best_value'), metric=True)}) of {len(selection.get('evaluations', []))} evaluations."]
    out.append("")

    splits = [s for s in ("validation", "test") if s in metrics]
    if splits:
        out += ["## Evaluation", "", "| metric | " + " | ".join(splits) + " |", "|---" * (len(splits) + 1) + "|"]
        for name in names:
            if any(name in metrics[s] for s in splits):
                out.append(f"| {name} | " + " | ".join(_fmt(metrics[s].get(name), metric=True) for s in splits) + " |")
        out.append("")
        if any("ece" in metrics[s] for s in splits):
            out += ["`nll` is the mean cross-entropy of the predicted probabilities and `ece` their expected "
                    "calibration error (15 bins), both before any temperature scaling.", ""]
    calibration = config.get("calibration")
    if calibration:
        out += ["## Calibration", "",
                f"Temperature scaling (Guo et al. 2017): the probabilities are `softmax(logits / {calibration['temperature']:.4f})`, "
                f"the temperature fitted on {calibration.get('data', 'held-out data')} ({calibration.get('n')} rows): "
                f"NLL {calibration['nll_before']:.4f} -> {calibration['nll_after']:.4f}, "
                f"ECE {calibration['ece_before']:.4f} -> {calibration['ece_after']:.4f} on those rows.", ""]

    example = "a fine film" + ("\\tgreat acting" if data.get("text_pair") else "")
    out += ["## Usage", "", "```python", "from contrastfit import ContrastiveClassifier", "",
            'model = ContrastiveClassifier.from_pretrained("path/to/this/folder")',
            f'model.{"predict" if task == "regression" else "predict_proba"}(["a fine film"]'
            + (', ["great acting"]' if data.get("text_pair") else "") + ")", "```", "",
            f"or `echo -e \"{example}\" | contrastfit predict path/to/this/folder`.", ""]
    out += ["## Limitations", "",
            f"One training run (seed {record.get('seed')}) on {data.get('train_size', '?')} training rows: the metrics "
            "above are one draw. Few-shot results vary by several points from one training sample to the next; "
            "compare methods with `contrastfit experiment` (several samples, the same for every method, paired "
            "tests). The model knows only the labels above and the domain of its training data.", ""]
    versions = record.get("versions", {})
    if versions:
        out += ["## Versions", "", ", ".join(f"{k} {v}" for k, v in versions.items() if k != "platform") + ".", ""]
    return "\n".join(out)


def write_model_card(folder: str | os.PathLike) -> Path:
    """Write ``README.md`` (:func:`model_card`) in a single-task model's output folder, atomically."""
    folder = Path(folder)
    try:
        record = json.loads((folder / "results.json").read_text(encoding="utf-8"))
        config = json.loads((folder / "contrastfit.json").read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise ModelError(f"{folder}: no {Path(exc.filename).name}; a model card is written from a finished run's "
                         "results.json and contrastfit.json") from None
    except json.JSONDecodeError as exc:
        raise ModelError(f"{folder}: a record is not valid JSON ({exc.msg} at line {exc.lineno})") from None
    if config.get("kind") == "multitask":
        raise ModelError(f"{folder} holds a multi-task model; model cards are written for single-task models")
    return write_text_atomic(folder / CARD_NAME, model_card(record, config))
