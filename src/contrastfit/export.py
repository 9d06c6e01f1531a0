"""Export a trained model to ONNX, verified against PyTorch, and serve it without PyTorch.

:func:`export_onnx` writes a folder with

* ``model.onnx``: the whole classifier (encoder, pooling, the method's head) from token ids and
  attention mask (and token type ids where the tokenizer makes them) to **logits**, batch and
  sequence length dynamic (``torch.onnx.export`` with the ``torch.export`` based exporter); for a
  multi-task pair task whose head reads the two texts encoded apart, the second text's inputs too
  (``input_ids_b``, ``attention_mask_b``, ..., with their own length);
* the tokenizer (Hugging Face files), so the folder is all a server needs;
* ``export.json``: labels, task, maximum length, the temperature of the probabilities
  (``softmax(logits / T)``, 1 unless ``contrastfit calibrate`` fitted one), opset, the source folder,
  library versions, and the **verification**: the exported graph run by ONNX Runtime on texts of
  different lengths, padded in batches of 1, 3 and all of them, against the PyTorch model's logits
  (largest absolute difference, the tolerance, and whether every predicted label agrees). The texts are
  the model's own (:func:`check_texts`: up to :data:`CHECK_ROWS` rows of the test or validation split of
  the data it was trained on, when its ``contrastfit.json`` names a built-in set or a file that is still
  readable), or a file's (``check_data``), else :data:`VERIFY_TEXTS` (said in one line);
  ``verification.check_data`` records where they came from and how many there were.

``quantize="int8"`` (``contrastfit export --quantize int8``) then quantises the verified graph with ONNX
Runtime's dynamic quantisation (int8 weights, per channel and 7-bit by default; activations quantised
at run time) into one ``model.onnx`` about a quarter of the size, and checks it as above against the
same PyTorch logits; as int8 cannot match to ``atol``, the check is the probability difference of 99% of
the texts (``max_prob_diff`` bounds its 99th percentile, ``prob_diff_p99``: one text in a few hundred may
shift further, and the largest difference is recorded as ``max_prob_diff``) and the fraction of texts
whose label agrees (``min_agreement``),
counted over the texts PyTorch does not put within :data:`TIE_BAND` of another decision (the top two
classes' probabilities within ``2 * TIE_BAND`` of each other; for label sets, a label's probability
within ``TIE_BAND`` of its threshold): int8's small shifts flip such near ties, which says nothing
about the export (the verification records ``near_ties`` and the raw ``label_agreement`` too).
``export.json`` then has ``quantization`` (the settings, both sizes, and the float graph's
verification) and ``verification`` is the int8 graph's. :class:`OnnxClassifier` serves either.

An export whose logits differ by more than ``atol`` or whose predictions differ (for int8: whose
labels or probabilities are past the thresholds) is not written
(:class:`~contrastfit.errors.ModelError`, and the folder is left as it was: the export is built in a
temporary folder and renamed into place, :func:`contrastfit.atomic.atomic_folder`).

:class:`~contrastfit.onnx_model.OnnxClassifier` (in :mod:`contrastfit.onnx_model`, re-exported
here) loads such a folder with ONNX Runtime and the tokenizer alone (no PyTorch model code) and
predicts as :class:`~contrastfit.modeling.ContrastiveClassifier` does.
"""

from __future__ import annotations

import os
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from .atomic import atomic_folder, check_output, write_json_atomic
from .errors import ContrastfitError, DataError, ModelError
from .inference import load_for_inference
from .inputs import model_inputs
from .onnx_model import EXPORT_NAME, ONNX_NAME, OnnxClassifier, _require_runtime, _tokenize
from .settings import setting
from .versions import library_versions

__all__ = ["CHECK_ROWS", "EXPORT", "EXPORT_FORMATS", "EXPORT_NAME", "ExportOptions", "ONNX_NAME", "OnnxClassifier",
           "QUANTIZE_TYPES", "check_texts", "export_onnx", "VERIFY_TEXTS"]

#: what ``export_onnx(..., quantize=...)`` accepts
QUANTIZE_TYPES = ("int8",)
#: a text whose PyTorch probabilities are this close to another decision is a near tie, whose label
#: an int8 graph may flip without counting against its label agreement
TIE_BAND = 0.05
#: texts the export is checked on by default: short and long, so padding and truncation take part
VERIFY_TEXTS = (
    "good", "a fine film", "the plot was dull and the actors were weak", "not bad at all",
    "it is a very long story about a family that moves to the city and the film follows every one of them "
    "through the years, with great music, superb acting and a plot that never gets boring", "awful",
    "was it fun? yes, very", "the movie is not good but not bad either",
)
#: how many texts of the model's own data (or of ``check_data``) the export is checked on by default
CHECK_ROWS = 256
#: what ``contrastfit export --format`` writes: an ONNX graph (:func:`export_onnx`) or a SetFit model
#: (:func:`contrastfit.setfit_format.export_setfit`)
EXPORT_FORMATS = ("onnx", "setfit")


@dataclass(frozen=True)
class ExportOptions:
    """The settings of an export, declared once (:func:`contrastfit.settings.setting`): ``contrastfit
    export``'s options are generated from the fields with a group (:func:`contrastfit.cli.add_config_options`),
    and :func:`export_onnx` takes its keywords' defaults from them (``format`` and ``verify_file`` are the
    command line's: :func:`export_onnx` is the ONNX format, and takes a file of texts as ``check_data``)."""

    format: str = setting("onnx", "onnx: an ONNX graph and the tokenizer; setfit: a folder that "
                          "setfit.SetFitModel.from_pretrained loads, with the same probabilities (a model whose head "
                          "is a logistic regression: the default recipe, linear-probe, setfit)", group="options",
                          choices=EXPORT_FORMATS)
    verify_file: str | None = setting(None, "texts to verify on, all of them: one per line (a tab separates a pair) "
                                      "or a table (default: the model's own data)", group="options")
    check_data: str | None = setting(None, "check on texts of this file instead of the model's own data: one per "
                                     "line (a tab separates a pair) or a table (.csv/.tsv/.jsonl/.parquet; "
                                     "--text-column); at most --check-rows of them", group="options", metavar="FILE")
    check_rows: int | None = setting(CHECK_ROWS, "how many texts (rows) to check on at most, a seeded sample",
                                     group="options")
    text_column: str | None = setting(None, "text column of a --check-data (or --verify-file) table", group="options")
    text_pair_column: str | None = setting(None, "second-text column of a --check-data (or --verify-file) table",
                                           group="options")
    atol: float = setting(1e-4, "largest allowed difference of a logit", group="options")
    opset: int | None = setting(None, "ONNX opset (default: the exporter's)", group="options")
    quantize: str | None = setting(None, "write an int8 model (ONNX Runtime dynamic quantisation, about 4x smaller), "
                                   "checked against PyTorch's labels and probabilities on the same texts after the "
                                   "float graph passed", group="options", choices=QUANTIZE_TYPES)
    min_agreement: float = setting(0.99, "with --quantize: refuse (write nothing) when fewer of the texts get "
                                   f"PyTorch's label, near ties (PyTorch within {TIE_BAND:g} of another label) left "
                                   "out", group="options")
    max_prob_diff: float = setting(0.05, "with --quantize: refuse when the probabilities of more than 1% of the "
                                   "texts differ from PyTorch's by more (the largest difference is recorded too)",
                                   group="options")
    per_channel: bool = setting(True, "quantise the weights per channel (onnxruntime's quantize_dynamic)")
    reduce_range: bool = setting(True, "quantise the weights to 7 bits (onnxruntime's quantize_dynamic)")
    op_types: tuple[str, ...] | None = setting(None, "the operator types to quantise (default: all)")


#: the defaults, as :func:`export_onnx` reads them
EXPORT = ExportOptions()


class _NoCheckData(Exception):
    """The model's own data cannot be read again (the reason, a phrase)."""


def check_texts(model: Any, run: str | os.PathLike, *, check_data: str | os.PathLike | None = None,
                rows: int | None = CHECK_ROWS, text_column: str | None = None,
                text_pair_column: str | None = None) -> tuple[list[str], list[str] | None, dict[str, Any]]:
    """The texts (and second texts) the export of ``model`` (loaded from ``run``) is checked on, and what
    ``export.json`` records of them (``kind``, ``source``, ``split``, ``rows``, ``texts``, ``description``,
    ``note``): at most ``rows`` of them (None: all), a seeded sample in their order, from

    * ``check_data``: a file of the user's (a ``.txt`` file, one text per line, or a table whose text
      columns are ``text_column`` / ``text_pair_column`` or guessed as training does);
    * else the data the model was trained on, as its ``contrastfit.json`` records it (a built-in data set,
      or a local file that is still there and readable, with the options it was read with): its test
      split, else its validation split;
    * else :data:`VERIFY_TEXTS`, with one line on stderr saying why (also in ``note``)."""
    import sys

    if rows is not None and (isinstance(rows, bool) or not isinstance(rows, int) or rows < 1):
        raise ModelError(f"export: the number of texts to check on is a whole number >= 1 (got {rows!r})")
    if check_data is not None:
        texts, pairs = _read_check_file(Path(check_data).expanduser(), text_column, text_pair_column)
        info: dict[str, Any] = {"kind": "file", "source": str(Path(check_data).expanduser())}
    else:
        try:
            texts, pairs, info = _model_data(model, str(run))
        except (_NoCheckData, ContrastfitError, OSError) as exc:
            reason = str(exc).rstrip(".") or type(exc).__name__
            note = (f"{reason}; checking on the {len(VERIFY_TEXTS)} built-in sentences instead "
                    "(--check-data FILE checks on texts of yours)")
            print(f"contrastfit: export: {note}", file=sys.stderr, flush=True)
            return list(VERIFY_TEXTS), None, {"kind": "built-in sentences", "source": None, "rows": len(VERIFY_TEXTS),
                                              "texts": len(VERIFY_TEXTS), "description":
                                              f"the {len(VERIFY_TEXTS)} built-in sentences", "note": note}
    info["rows"] = len(texts)
    if rows is not None and len(texts) > rows:
        keep = np.sort(np.random.default_rng(0).choice(len(texts), rows, replace=False))
        texts = [texts[i] for i in keep]
        pairs = None if pairs is None else [pairs[i] for i in keep]
    info["texts"] = len(texts)
    where = info["source"] if info["kind"] == "file" else f"the {info['split']} split of {info['source']}"
    info["description"] = (f"all {len(texts)} rows of {where}" if len(texts) == info["rows"]
                           else f"{len(texts)} of the {info['rows']} rows of {where}")
    return list(texts), None if pairs is None else list(pairs), info


def _read_check_file(path: Path, text_column: str | None, text_pair_column: str | None) -> tuple[list[str], list[str] | None]:
    """The texts of a ``--check-data`` file: a table's text (and pair) column, or a text file's non-blank lines."""
    # lazy: data.loading imports datasets and torch, this module imports without torch
    from .data.loading import SUFFIX_BUILDERS, check_utf8, normalise_columns, read_table

    if path.suffix.lower() in SUFFIX_BUILDERS:
        ds, _ = normalise_columns(read_table(path), str(path), text_column, text_pair_column, None, require_labels=False)
        return list(ds["text"]), list(ds["text_pair"]) if "text_pair" in ds.column_names else None
    if not path.is_file():
        raise DataError(f"{path}: no such file")
    check_utf8(path)
    text = path.read_text(encoding="utf-8")
    lines = [line for line in text.replace("\r\n", "\n").replace("\r", "\n").split("\n") if line.strip()]
    if not lines:
        raise DataError(f"{path}: no texts to check the export on")
    return lines, None


def _model_data(model: Any, run: str) -> tuple[list[str], list[str] | None, dict[str, Any]]:
    """The test (else validation) split of the data ``model`` records it was trained on, read again."""
    data = model.info.data
    source = data.source
    if source is None or not source.kind:
        raise _NoCheckData(f"{run} records no data it was trained on")
    # lazy: data imports datasets and torch, this module imports without torch
    from .data import load_data
    from .data.loading import LabelReader
    from .data.multilabel import LabelSetReader

    kind = source.kind
    multi_label = bool(source.multi_label or getattr(model, "multi_label", False))
    labels = LabelSetReader(source.label_separator) if multi_label else LabelReader(data.task)
    if kind == "builtin":
        name = str(source.name)
        loaded, origin = labels.builtin(name), name
        if loaded is None:
            raise _NoCheckData(f"{run} was trained on the built-in data set '{name}', which this version does not have")
    elif kind == "local":
        path = Path(source.path or "")
        if not source.path or not path.is_file():
            raise _NoCheckData(f"{path}, the data {run} was trained on, is no longer there")
        given = {"validation": source.validation_data, "test": source.test_data}
        files = {split: f if isinstance(f, str) and Path(f).expanduser().is_file() else None for split, f in given.items()}
        if files["test"] is None and given["validation"] is not None and files["validation"] is None:
            raise _NoCheckData(f"the validation data {run} was trained with ({given['validation']}) is no longer "
                               "there" if isinstance(given["validation"], str) else
                               f"{run} was validated on in-memory data, which cannot be read again")
        options = {"text_column": source.text_column, "text_pair_column": source.text_pair_column,
                   "label_column": source.label_column, "validation_data": files["validation"],
                   "test_data": files["test"]}
        loaded = load_data(path, validation_split=source.validation_split, labels=labels, **options)
        origin = str(path)
    elif kind == "memory":
        raise _NoCheckData(f"{run} was trained on in-memory data, which cannot be read again")
    elif kind == "hub":
        raise _NoCheckData(f"{run} was trained on the Hub data set '{source.name}', which the export does not "
                           "download")
    else:
        raise _NoCheckData(f"{run} records its data as {kind!r}, which the export cannot read")
    split = next((s for s in ("test", "validation") if getattr(loaded, s, None) is not None and len(getattr(loaded, s))),
                 None)
    if split is None:
        raise _NoCheckData(f"{origin}, the data {run} was trained on, has no validation or test split")
    ds = getattr(loaded, split)
    pairs = list(ds["text_pair"]) if "text_pair" in ds.column_names else None
    return list(ds["text"]), pairs, {"kind": "model data", "source": origin, "split": split}


def _inputs_of(tokenizer) -> list[str]:
    """The model inputs the tokenizer makes (``input_ids``, ``attention_mask`` and maybe ``token_type_ids``)."""
    made = set(tokenizer("a"))
    return [k for k in ("input_ids", "attention_mask", "token_type_ids") if k in made]


def _graph_inputs(tokenizer, separate: bool) -> list[str]:
    """The graph's input names: the tokenizer's, then (``separate``) the second text's, suffixed ``_b``."""
    names = _inputs_of(tokenizer)
    if separate:
        names += [f"{k}_b" for k in names]
    return names


def _check_export_options(run: str | os.PathLike, output: str | os.PathLike, quantize: str | None,
                          max_prob_diff: float, min_agreement: float,
                          check_data: str | os.PathLike | None) -> None:
    """None, once the options that need no model are valid (else :class:`ModelError`)."""
    if quantize is not None and quantize not in QUANTIZE_TYPES:
        raise ModelError(f"export: unknown quantisation {quantize!r} (available: {', '.join(QUANTIZE_TYPES)})")
    if not 0 <= max_prob_diff <= 1 or not 0 <= min_agreement <= 1:
        raise ModelError(f"export: max_prob_diff ({max_prob_diff:g}) and min_agreement ({min_agreement:g}) are "
                         "fractions between 0 and 1")
    if (Path(run) / EXPORT_NAME).is_file():
        raise ModelError(f"{run} is already an ONNX export; export the folder `contrastfit train` wrote")
    check_output(output, inputs=(run, check_data))


def _check_model_options(model: Any, texts: Sequence[str] | None, quantize: str | None,
                         check_data: str | os.PathLike | None) -> None:
    """None, once the options fit each other and the loaded ``model`` (else :class:`ModelError`)."""
    if texts is not None and check_data is not None:
        raise ModelError("export: give the texts to check on or a file of them (check_data), not both")
    if quantize is not None and model.task != "classification":
        raise ModelError(f"export --quantize: a {model.task} model is not quantised (its check compares labels and "
                         "probabilities); export it without --quantize")


def _texts_to_check(model: Any, run: str | os.PathLike, texts: Sequence[str] | None, pairs: Sequence[str] | None,
                    pair_model: bool, *, check_data: str | os.PathLike | None, check_rows: int | None,
                    text_column: str | None, text_pair_column: str | None) -> tuple[Any, Any, dict[str, Any]]:
    """The texts and pairs to check on (None for the built-in sentences) and ``verification.check_data``."""
    if texts is not None:
        texts = list(texts)
        checked_on = {"kind": "texts", "source": None, "rows": len(texts), "texts": len(texts),
                      "description": f"the {len(texts)} texts given"}
    else:
        texts, pairs, checked_on = check_texts(model, run, check_data=check_data, rows=check_rows,
                                               text_column=text_column, text_pair_column=text_pair_column)
        if checked_on["kind"] == "built-in sentences":
            texts = None  # a pair model's built-in pairs are made below
    if texts is not None:  # the rule predict and serve follow: a pair model's text splits at its first tab
        texts, pairs = model_inputs(texts, pairs, pair_model, str(run), "pairs")
    return texts, pairs, checked_on


def _texts_or_defaults(texts: Sequence[str] | None, pairs: Sequence[str] | None,
                       pair_model: bool) -> tuple[list[str], Any]:
    """The texts (:data:`VERIFY_TEXTS` when None) and pairs (a pair model's made up when None) to check on."""
    texts = list(texts) if texts is not None else list(VERIFY_TEXTS)
    if pair_model and pairs is None:
        pairs = list(reversed(texts))
    if not texts:
        raise ModelError("export: no texts to verify the export on")
    return texts, pairs


def _float_verification(served: OnnxClassifier, reference: np.ndarray, texts: list[str], pairs: list[str] | None,
                        task: str, *, atol: float, output: str | os.PathLike, checked_on: dict[str, Any]) -> dict[str, Any]:
    """The float graph's verification, once its logits match PyTorch's (else :class:`ModelError`)."""
    check = _parity(served, reference, texts, pairs, task)
    worst, same = check["max_abs_diff"], check["same_predictions"]
    if worst > atol or (task == "classification" and not same):
        raise ModelError(f"export: ONNX Runtime's logits differ from PyTorch's by {worst:.2e} (tolerance {atol:g})"
                         f"{'' if same else ' and change predictions'}; nothing written to {output} "
                         f"(checked on {checked_on['description']})")
    check.update(atol=atol, runtime="onnxruntime", check_data=checked_on)
    return check


def _quantized_verification(served: OnnxClassifier, reference: np.ndarray, texts: list[str],
                            pairs: list[str] | None, task: str, *, quantize: str,
                            max_prob_diff: float, min_agreement: float, output: str | os.PathLike,
                            checked_on: dict[str, Any]) -> dict[str, Any]:
    """The quantised graph's verification, once it is within the thresholds (else :class:`ModelError`)."""
    check = _parity(served, reference, texts, pairs, task)
    check.update(max_prob_diff_allowed=max_prob_diff, min_label_agreement=min_agreement, runtime="onnxruntime",
                 check_data=checked_on)
    if check["prob_diff_p99"] > max_prob_diff or check["decisive_agreement"] < min_agreement:
        decisive = len(texts) - check["near_ties"]
        raise ModelError(
            f"export --quantize {quantize}: the {quantize} model's labels agree with PyTorch's on "
            f"{check['decisive_agreement']:.1%} of the {decisive} texts PyTorch does not call within "
            f"{TIE_BAND:g} of a tie (at least {min_agreement:.1%} required) and its probabilities differ by up "
            f"to {check['prob_diff_p99']:.3f} on 99% of the texts (at most {max_prob_diff:g} allowed; largest "
            f"{check['max_prob_diff']:.3f}); nothing written to {output} "
            f"(checked on {checked_on['description']})")
    return check


def _verify_export(staging: Path, serving: dict[str, Any], reference: np.ndarray, texts: list[str],
                   pairs: list[str] | None, task: str, *, atol: float, output: str | os.PathLike,
                   checked_on: dict[str, Any], quantize: str | None, per_channel: bool, reduce_range: bool,
                   op_types: Sequence[str] | None, max_prob_diff: float,
                   min_agreement: float) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """``export.json``'s ``verification`` and ``quantization`` (None unless ``quantize``) of ``staging``'s graph."""
    check = _float_verification(OnnxClassifier(staging, _meta=serving), reference, texts, pairs, task,
                                atol=atol, output=output, checked_on=checked_on)
    quantization = None
    if quantize is not None:  # the float graph matched; now the int8 one, against the same PyTorch logits
        quantization = _quantize(staging, quantize, per_channel, reduce_range, op_types)
        check, float_check = _quantized_verification(
            OnnxClassifier(staging, _meta=serving), reference, texts, pairs, task, quantize=quantize,
            max_prob_diff=max_prob_diff, min_agreement=min_agreement, output=output, checked_on=checked_on), check
        quantization["float_verification"] = float_check
    return check, quantization


def _export_json(program: Any, opset: int | None, model: Any, names: list[str], pair_model: bool, separate: bool,
                 temperature: float, method: str, run: str | os.PathLike, outputs: dict[str, Any],
                 check: dict[str, Any], quantization: dict[str, Any] | None) -> dict[str, Any]:
    """What ``export.json`` records of the export (graph, serving settings, verification, versions)."""
    return {"format": "onnx", "onnx": ONNX_NAME, "inputs": names, "output": "logits",
            "opset": int(program.model.opset_imports.get("", 0)) if hasattr(program, "model") else opset,
            "task": model.task, "label_names": model.label_names, "text_pair": pair_model, "separate_pairs": separate,
            "max_length": model.max_length, "temperature": temperature, "method": method,
            "source": str(Path(run).absolute()), **outputs,
            "verification": check, "quantization": quantization, "versions": library_versions()}


def export_onnx(run: str | os.PathLike, output: str | os.PathLike, *, task: str | None = None,
                texts: Sequence[str] | None = None, pairs: Sequence[str] | None = None, atol: float = EXPORT.atol,
                opset: int | None = EXPORT.opset, quantize: str | None = EXPORT.quantize,
                max_prob_diff: float = EXPORT.max_prob_diff, min_agreement: float = EXPORT.min_agreement,
                per_channel: bool = EXPORT.per_channel, reduce_range: bool = EXPORT.reduce_range,
                op_types: Sequence[str] | None = EXPORT.op_types,
                check_data: str | os.PathLike | None = EXPORT.check_data, check_rows: int | None = EXPORT.check_rows,
                text_column: str | None = EXPORT.text_column,
                text_pair_column: str | None = EXPORT.text_pair_column) -> dict[str, Any]:
    """Export the model in ``run`` (a ``contrastfit train`` folder, or the task ``task`` of a multi-task
    folder) to the folder ``output``; verify it on ``texts`` (and ``pairs`` for a pair model), else on
    :func:`check_texts`: at most ``check_rows`` texts of ``check_data`` (a file; its columns
    ``text_column`` / ``text_pair_column``), else of the model's own data (the test or validation split of
    the data it was trained on, when it can be read again), else :data:`VERIFY_TEXTS` with a line saying
    so; return ``export.json`` (its ``verification.check_data`` says where the texts came from).

    ``quantize="int8"``: after the float graph passed the check, quantise it (ONNX Runtime's dynamic
    quantisation, :func:`onnxruntime.quantization.quantize_dynamic`: int8 weights, activations quantised
    on the fly; ``per_channel``, ``reduce_range`` (7-bit weights) and ``op_types`` are passed on; the defaults
    are what agreed best with PyTorch in ``bench/quantize.py``) and check the int8 graph
    against the same PyTorch outputs: refused (nothing written) when its labels agree on less than
    ``min_agreement`` of the texts or a probability differs by more than ``max_prob_diff``."""
    import torch

    _require_runtime()
    _check_export_options(run, output, quantize, max_prob_diff, min_agreement, check_data)
    model = load_for_inference(str(run), task).to("cpu").eval()
    spec = getattr(model, "spec", None)
    separate = bool(getattr(model, "separate_pairs", False))  # a head reading the pair's texts encoded apart
    method = f"multitask:{spec.name}:{spec.objective}" if spec is not None else model.config_dict()["method"]
    pair_model = bool(model.info.data.text_pair)
    _check_model_options(model, texts, quantize, check_data)
    texts, pairs, checked_on = _texts_to_check(model, run, texts, pairs, pair_model, check_data=check_data,
                                               check_rows=check_rows, text_column=text_column,
                                               text_pair_column=text_pair_column)
    temperature = float(getattr(model, "temperature", 1.0))
    outputs = model.outputs.serving(model)  # the form of the outputs and what it reads (contrastfit.outputs)
    texts, pairs = _texts_or_defaults(texts, pairs, pair_model)
    names = _graph_inputs(model.tokenizer, separate)

    class Logits(torch.nn.Module):
        def __init__(self, inner):
            super().__init__()
            self.inner = inner

        def forward(self, input_ids, attention_mask, token_type_ids=None, input_ids_b=None, attention_mask_b=None,
                    token_type_ids_b=None):
            second = {} if input_ids_b is None else {"input_ids_b": input_ids_b, "attention_mask_b": attention_mask_b,
                                                     "token_type_ids_b": token_type_ids_b}
            return self.inner(input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids,
                              **second).logits.float()

    example = _tokenize(model.tokenizer, texts[:2], pairs[:2] if pairs is not None else None, model.max_length, "pt",
                        separate)
    batch = torch.export.Dim("batch")
    sequence = {"": torch.export.Dim("sequence"), "_b": torch.export.Dim("sequence_b")}  # the two texts' lengths
    with atomic_folder(output) as staging, torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the exporter's deprecation and tracing notes
        program = torch.onnx.export(Logits(model), (), str(staging / ONNX_NAME), kwargs={k: example[k] for k in names},
                                    input_names=names, output_names=["logits"], opset_version=opset,
                                    dynamic_shapes={k: {0: batch, 1: sequence["_b" if k.endswith("_b") else ""]}
                                                    for k in names}, dynamo=True, verbose=False)
        if program is None or not (staging / ONNX_NAME).is_file():
            raise ModelError(f"export: torch.onnx.export wrote no {ONNX_NAME}")
        model.tokenizer.save_pretrained(staging)
        reference = model.predict_logits(texts, pairs)
        serving = {"inputs": names, "max_length": model.max_length, "temperature": temperature,
                   "label_names": model.label_names, "task": model.task, "separate_pairs": separate, **outputs}
        check, quantization = _verify_export(
            staging, serving, reference, texts, pairs, model.task, atol=atol, output=output,
            checked_on=checked_on, quantize=quantize, per_channel=per_channel, reduce_range=reduce_range,
            op_types=op_types, max_prob_diff=max_prob_diff, min_agreement=min_agreement)
        meta = _export_json(program, opset, model, names, pair_model, separate, temperature, method, run, outputs,
                            check, quantization)
        write_json_atomic(staging / EXPORT_NAME, meta)
    return meta


def _parity(served: "OnnxClassifier", reference: np.ndarray, texts: list[str], pairs: list[str] | None,
            task: str) -> dict[str, Any]:
    """``served``'s outputs on ``texts`` (padded in batches of 1, 3 and all of them) against the PyTorch
    model's logits ``reference``: the largest logit difference, the largest probability difference
    (the served outputs' probabilities, :mod:`contrastfit.outputs`; not for regression) and its 99th percentile over the texts (each
    text's largest, over its classes and the batch sizes), the fraction of texts whose label agrees (the
    worst batch size) and whether all do."""
    form = served.outputs  # what the logits mean (contrastfit.outputs), as served
    sizes = sorted({1, min(3, len(texts)), len(texts)})
    # where PyTorch itself is within TIE_BAND of another decision
    tie = form.near_ties(served, reference, TIE_BAND)
    worst, agreement, decisive = 0.0, 1.0, 1.0
    text_p = np.zeros(len(texts))  # each text's largest probability difference
    for size in sizes:
        agree = np.zeros(len(texts), dtype=bool)
        for start in range(0, len(texts), size):
            got = served.predict_logits(texts[start:start + size], pairs[start:start + size] if pairs is not None else None)
            want = reference[start:start + size]
            worst = max(worst, float(np.abs(got - want).max()))
            if task == "regression":  # a value: max_abs_diff is its check
                agree[start:start + size] = True
                continue
            same = form.decisions(served, got) == form.decisions(served, want)
            agree[start:start + size] = same.all(axis=1) if same.ndim == 2 else same
            prob = np.abs(form.probabilities(served, got) - form.probabilities(served, want)).max(axis=1)
            text_p[start:start + size] = np.maximum(text_p[start:start + size], prob)
        agreement = min(agreement, float(agree.mean()))
        decisive = min(decisive, float(agree[~tie].mean()) if (~tie).any() else 1.0)
    check: dict[str, Any] = {"texts": len(texts), "batch_sizes": sizes, "max_abs_diff": worst}
    if task != "regression":
        check["max_prob_diff"] = float(text_p.max()) if len(texts) else 0.0
        check["prob_diff_p99"] = float(np.quantile(text_p, 0.99)) if len(texts) else 0.0
        check["label_agreement"] = agreement
        check["near_ties"] = int(tie.sum())
        check["decisive_agreement"] = decisive
    check["same_predictions"] = agreement == 1.0
    return check


def _without_shape_annotations(graph: Path, target: Path) -> None:
    """``graph`` saved as ``target`` (same folder, so that its external weights file still resolves)
    without the intermediate values' shape annotations (``value_info``)."""
    import onnx

    proto = onnx.load(str(graph), load_external_data=False)
    del proto.graph.value_info[:]
    onnx.save(proto, str(target))


def _quantize(folder: Path, kind: str, per_channel: bool, reduce_range: bool,
              op_types: Sequence[str] | None) -> dict[str, Any]:
    """Replace ``folder``'s float ``model.onnx`` (and its external weights file) by its dynamically
    quantised int8 version; return what ``export.json`` records of it."""
    import logging

    from onnxruntime.quantization import QuantType, quantize_dynamic

    graph = folder / ONNX_NAME
    floats = [p for p in folder.iterdir() if p.name.startswith(ONNX_NAME)]  # model.onnx and model.onnx.data
    float_bytes = sum(p.stat().st_size for p in floats)
    target = folder / f"{ONNX_NAME}.{kind}"
    root = logging.getLogger()
    level = root.level
    root.setLevel(logging.ERROR)  # quantize_dynamic's advice to pre-process, on the root logger
    options = dict(per_channel=per_channel, reduce_range=reduce_range,
                   op_types_to_quantize=list(op_types) if op_types else None, weight_type=QuantType.QInt8)
    bare = folder / f"{ONNX_NAME}.noshapes"
    try:
        try:
            quantize_dynamic(graph, target, **options)
        except Exception as exc:  # noqa: BLE001
            if "ShapeInferenceError" not in str(exc):
                raise
            # Some exporter versions (torch 2.11's, seen on a GPU machine) annotate intermediate values with
            # the example batch's shapes, which onnx's shape inference then contradicts. The annotations
            # are optional: quantise a copy of the graph without them (same weights file).
            _without_shape_annotations(graph, bare)
            quantize_dynamic(bare, target, **options)
    except Exception as exc:  # onnxruntime's own errors, one line
        raise ModelError(f"export --quantize {kind}: onnxruntime.quantization failed: "
                         f"{str(exc).splitlines()[0] if str(exc) else type(exc).__name__}") from None
    finally:
        root.setLevel(level)
        bare.unlink(missing_ok=True)
    for p in floats:
        p.unlink()
    target.replace(graph)
    return {"type": kind, "method": "onnxruntime.quantization.quantize_dynamic", "weight_type": "QInt8",
            "per_channel": per_channel, "reduce_range": reduce_range, "op_types": list(op_types) if op_types else "all",
            "float_bytes": float_bytes, "bytes": graph.stat().st_size}
