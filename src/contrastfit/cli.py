"""Command line: ``contrastfit train | evaluate | predict | explain | calibrate | export | serve | card |
pretrain | distill | datasets | methods | experiment | report | compare``.

Every user error (:class:`~contrastfit.errors.ContrastfitError`) is printed as one line,
``contrastfit: error: ...``, with exit status 2 and no traceback.

``train``'s options are generated from the :class:`~contrastfit.config.TrainConfig` dataclass
(:func:`add_config_options`): each field declares its help text, default, option group, flag and
allowed values once, with :func:`~contrastfit.settings.setting`. ``transformers.HfArgumentParser``
reads dataclasses too, but it cannot keep this CLI's flag names (it adds an underscore spelling of
every option and names a negated switch ``--no_x``/``--no-x`` only, so no ``--quiet`` or ``--cpu``),
puts every field in one group, offers no way to leave a field (``hparams``, ``tags``) off the
command line, and rewrites the dataclass's ``Field.type`` in place; hence this small generator. The
``method`` group's hyper-parameter options come from the methods' declarations (:func:`hparam_options`).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import signal
import sys
import typing
import warnings
from dataclasses import fields
from pathlib import Path
from typing import Any, Sequence

import datasets
from tqdm.auto import tqdm

from . import __version__
from .atomic import atomic_open, check_output, write_json_atomic, write_text_atomic
from .card import write_model_card
from .config import OPTION_GROUPS, TrainConfig
from .data import describe_builtin, load_data
from .data.loading import (LABEL, SUFFIX_BUILDERS, TEXT, TEXT_PAIR, check_utf8, decode_utf8, file_problem,
                           normalise_columns, read_table)
from .data.multilabel import DEFAULT_SEPARATOR, LabelSetReader, describe_multilabel_builtin, multilabel_table
from .data.overlap import MAX_CALIBRATION_OVERLAP, train_overlap
from .distillation import DistillOptions, distill
from .distributed import world
from .errors import ContrastfitError, DataError
from .evaluation import evaluate_model, headline
from .evaluation.attributions import ExplainOptions, token_attributions
from .evaluation.calibration import DegenerateFitError
from .evaluation.plots import plot_attributions
from .experiments import load_config, run_experiment
from .experiments.config import MultiTaskExperimentConfig
from .experiments.executors import EXECUTOR_SECTIONS, executor_overrides
from .experiments.report import compare, main_table_text, write_report
from .experiments.search import run_search
from .export import EXPORT_NAME, ExportOptions, export_onnx
from .hub import push_to_hub
from .inference import SPLITS, InferenceOptions, load_for_inference, prediction_rows, takes_pairs
from .inputs import check_utf8_texts, model_inputs
from .methods import available_methods
from .modeling import CONFIG_NAME
from .pretrain import PretrainOptions, pretrain
from .record import DataSource
from .serve import ServeOptions, check_settings, make_server, require_serving
from .setfit_format import SETFIT_CONFIG, export_setfit
from .settings import check_fields
from .trainer import method_schedule
from .training import train

#: The ``TrainConfig`` settings that ``evaluate`` shares with ``train``.
_DATA_OPTIONS = ("data", "text_column", "text_pair_column", "label_column")
#: The ``ExportOptions`` settings that check an int8 export only: None on the command line unless given
#: (``cmd_export`` refuses them without ``--quantize``; :func:`~contrastfit.export.export_onnx` has their defaults).
_INT8_OPTIONS = ("min_agreement", "max_prob_diff")


def config_option_fields(names: Sequence[str] | None = None, source: type | None = None) -> list:
    """The fields of ``source`` (default :class:`~contrastfit.config.TrainConfig`; a dataclass declared
    with :func:`~contrastfit.settings.setting`) that are command-line options (those with a ``group``), in
    declaration order; only ``names`` if given."""

    return [f for f in fields(source or TrainConfig) if f.metadata.get("group") and (names is None or f.name in names)]


def hparam_options() -> dict[str, dict[str, Any]]:
    """The ``contrastfit train`` options of method hyper-parameters, ``--name-with-dashes`` for each one
    a method declares with ``flag`` (:func:`contrastfit.methods.base.hparam`): its ``add_argument``
    keywords (type and choices from the first declaration), the help of each declaration followed by
    the methods that declare it so. The value is passed on as given (text for a tuple) and checked by
    the method."""
    options: dict[str, dict[str, Any]] = {}
    for method, spec in available_methods().items():
        for name, info in spec.cls.Hparams.model_fields.items():
            flag = (info.json_schema_extra or {}).get("flag")
            if not flag:
                continue
            name = info.alias or name
            if name not in options:
                kind = info.annotation
                choices = typing.get_args(kind) if typing.get_origin(kind) is typing.Literal else None
                options[name] = {"type": kind if kind in (int, float) else str, "choices": choices,
                                 "metavar": flag if isinstance(flag, str) else None, "help": {}}
            options[name]["help"].setdefault(info.description, []).append(method)
    for o in options.values():
        o["help"] = "; ".join(f"{text} ({', '.join(methods)})" for text, methods in o["help"].items())
    return options


def _option_type(annotation: Any, name: str) -> type:
    """``int``, ``float``, ``str`` or ``bool`` from a field's annotation (``X | None`` -> ``X``; a
    ``str | dict`` field, a file or the mapping it holds, takes the file on the command line)."""
    kinds = [k for k in (typing.get_args(annotation) or (annotation,)) if k is not type(None)]
    if str in kinds and all(k is str or typing.get_origin(k) is dict for k in kinds):
        kinds = [str]
    if len(kinds) != 1 or kinds[0] not in (int, float, str, bool):
        raise TypeError(f"{name}: a command-line option needs an int, float, str or bool field, "
                        f"not {annotation}")
    return kinds[0]


def add_config_options(parser: argparse.ArgumentParser, names: Sequence[str] | None = None,
                       required: Sequence[str] = (), source: type | None = None) -> dict[str, Any]:
    """Add the options of the fields of ``source`` (default :class:`~contrastfit.config.TrainConfig`;
    :class:`~contrastfit.pretrain.PretrainOptions` for ``pretrain``), every field with a ``group`` or
    ``names``, to ``parser``, in argument groups ordered as
    :data:`~contrastfit.config.OPTION_GROUPS`; returns the groups by name.

    An option is ``--name-with-dashes`` (or the field's ``flag``), stores into ``dest=name`` and has
    the field's default, type and choices; a boolean is a switch (``store_true``, or ``store_false``
    for one that is on by default). ``required`` options get no default. Each help text is the
    field's, with its default appended when it has one that is not None.
    """
    source = source or TrainConfig
    hints = typing.get_type_hints(source)
    chosen = config_option_fields(names, source)
    present = {f.metadata["group"] for f in chosen}
    groups: dict[str, Any] = {}
    for name in [*OPTION_GROUPS, *sorted(present - set(OPTION_GROUPS))]:
        if name in present:
            groups[name] = parser if name == "options" else parser.add_argument_group(name)
    for f in chosen:
        meta, kind = f.metadata, _option_type(hints[f.name], f"{source.__name__}.{f.name}")
        help_text = (meta.get("flag_help") or meta["help"]).replace("%", "%%")
        kwargs: dict[str, Any] = {"dest": f.name, "default": f.default}
        if kind is bool:
            on_by_default = f.default is True
            flag = meta.get("flag") or ("--no-" if on_by_default else "--") + f.name.replace("_", "-")
            kwargs["action"] = "store_false" if on_by_default else "store_true"
        else:
            flag = meta.get("flag") or "--" + f.name.replace("_", "-")
            kwargs.update(type=kind, choices=meta.get("choices"), metavar=meta.get("metavar"))
            if f.name in required:
                kwargs.update(required=True, default=None)
            elif f.default is not None:
                help_text += f" (default: {f.default})"
        groups[meta["group"]].add_argument(flag, help=help_text, **kwargs)
    return groups


#: What ``contrastfit train`` without ``--data`` says (there is no default data set).
NO_DATA = ("--data is needed: a built-in name (see `contrastfit datasets`), a local .csv/.tsv/.jsonl/.json/.parquet "
           "file or a Hugging Face data set name; there is no default data set")


def _missing_data_in_one_line(parser: argparse.ArgumentParser) -> None:
    """``parser`` (``train``) refuses a command line without ``--data`` in one line on standard error,
    :data:`NO_DATA`, exit code 2, instead of argparse's usage block; its other errors are argparse's."""
    usual = parser.error

    def error(message: str):
        missing = message.partition("the following arguments are required: ")[2]
        if "--data" in [m.strip() for m in missing.split(",")]:
            others = [m.strip() for m in missing.split(",") if m.strip() != "--data"]
            also = f" ({', '.join(others)} {'is' if len(others) == 1 else 'are'} needed too)" if others else ""
            parser.exit(2, f"contrastfit: error: {NO_DATA}{also}\n")
        usual(message)

    parser.error = error


def _add_card_args(p: argparse.ArgumentParser) -> None:
    """The model card's metadata a user sets (``card`` and ``push``): :func:`contrastfit.card.card_settings`."""
    p.add_argument("--license", default=None, metavar="ID",
                   help="the card's licence, a Hub licence id (e.g. apache-2.0, mit; default: the base model's "
                        "where contrastfit knows it, else unknown)")
    p.add_argument("--language", action="append", default=None, metavar="CODE",
                   help="a language of the model (repeatable, e.g. --language en --language de; default: the base "
                        "model's where contrastfit knows it)")
    p.add_argument("--dataset", action="append", default=None, metavar="OWNER/NAME",
                   help="a Hub data set the model was trained on (repeatable; default: the Hub data set of the run, "
                        "if it trained on one)")


def _add_text_input_args(p: argparse.ArgumentParser, verb: str) -> None:
    """A trained run and texts from arguments or --file (read by :func:`_read_predict_inputs`)."""
    p.add_argument("run", help="output folder of `contrastfit train`")
    p.add_argument("texts", nargs="*", help=f"texts to {verb}")
    p.add_argument("--file", help="a .txt file (one text per line) or a table (.csv/.tsv/.jsonl/.parquet)")
    p.add_argument("--text-column", help="text column of --file (table)")
    p.add_argument("--text-pair-column", help="second-text column of --file (table)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="contrastfit", description="Fine-tune text classifiers with supervised contrastive objectives; `contrastfit COMMAND --help` for each.")
    parser.add_argument("--version", action="version", version=f"contrastfit {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    _add_train_parser(sub)
    _add_evaluate_parser(sub)
    _add_predict_parser(sub)
    _add_explain_parser(sub)
    _add_calibrate_parser(sub)
    _add_export_parser(sub)
    _add_serve_parser(sub)
    _add_card_parser(sub)
    _add_push_parser(sub)
    _add_pretrain_parser(sub)
    _add_distill_parser(sub)
    _add_listings_parsers(sub)
    _add_experiment_parser(sub)
    _add_reports_parsers(sub)
    return parser


def _add_train_parser(sub) -> None:
    """`contrastfit train`: every option is a TrainConfig field (add_config_options) but the method's own."""
    p = sub.add_parser("train", help="fine-tune an encoder with one method",
                       description="Fine-tune an encoder with one method; writes the model and results.json to --output.")
    groups = add_config_options(p, required=("data", "output"))
    _missing_data_in_one_line(p)
    for name, spec in hparam_options().items():
        groups["method"].add_argument("--" + name.replace("_", "-"), dest=f"hp_{name}", **spec)
    groups["method"].add_argument("--param", action="append", default=[], metavar="NAME=VALUE",
                                  help="any other method hyper-parameter")


def _add_evaluate_parser(sub) -> None:
    """`contrastfit evaluate`."""
    p = sub.add_parser("evaluate", help="evaluate a trained model",
                       description="Evaluate a trained model: a built-in data set on its test split (or --split), a local file whole.")
    p.add_argument("run", help="output folder of `contrastfit train`")
    add_config_options(p, names=_DATA_OPTIONS, required=("data",))
    _add_split_arg(p, "test")
    p.add_argument("--json", dest="json_out", help="also write all metrics (per class, confusion matrix) to this JSON file")
    add_config_options(p, names=("overwrite", "batch_size"), source=InferenceOptions)
    _add_task_arg(p, "evaluate")


def _add_predict_parser(sub) -> None:
    """`contrastfit predict`."""
    p = sub.add_parser("predict", help="predict labels for texts (JSONL out)",
                       description="Predict labels. Texts come from arguments, --file, or standard input (one per line; "
                                   "a tab separates the two texts of a pair). Writes one JSON object per line.")
    _add_text_input_args(p, "classify")
    _add_task_arg(p, "predict")
    add_config_options(p, names=("output", "overwrite", "batch_size"), source=InferenceOptions)


def _add_explain_parser(sub) -> None:
    """`contrastfit explain`."""
    p = sub.add_parser("explain", help="Shapley values of the words of texts (JSONL out, optional PNG)",
                       description="Word attributions by Shapley value sampling (captum): how much each word moves the "
                                   "probability of the target label. Texts come as for `predict`. Writes one JSON "
                                   "object per text (words, values, probability with all words removed).")
    _add_text_input_args(p, "explain")
    p.add_argument("--target", help="label to explain (default: the predicted label of each text; "
                                    "multi-label: the most probable one)")
    add_config_options(p, source=ExplainOptions)
    p.add_argument("--plot", help="also draw the texts with their words coloured by value to this PNG")
    _add_task_arg(p, "explain")
    add_config_options(p, names=("output", "overwrite"), source=InferenceOptions)


def _add_calibrate_parser(sub) -> None:
    """`contrastfit calibrate`."""
    p = sub.add_parser("calibrate", help="fit the temperature of a model's probabilities on held-out data",
                       description="Temperature scaling (Guo et al. 2017): fit one temperature that divides the logits, "
                                   "on a built-in or Hub data set's validation split (or --split) or a local file whole, "
                                   "and save it with the model; `predict` and `evaluate` then use it. Predicted labels "
                                   "do not change. Prints the NLL and expected calibration error before and after. "
                                   "A multi-task model gets one temperature per task (--task).")
    p.add_argument("run", help="output folder of a trained model (of a multi-task model: with --task)")
    add_config_options(p, names=_DATA_OPTIONS, required=("data",))
    _add_split_arg(p, "validation", "; not the split you report")
    add_config_options(p, names=("batch_size",), source=InferenceOptions)
    _add_task_arg(p, "calibrate")


def _add_export_parser(sub) -> None:
    """`contrastfit export`."""
    p = sub.add_parser("export", help="export a trained model to ONNX, verified against PyTorch",
                       description="Write OUTPUT/model.onnx (token ids to logits, batch and length dynamic), the tokenizer "
                                   "and export.json (labels, temperature, the verification), after checking ONNX Runtime's "
                                   "logits against the PyTorch model's in batches of several sizes on texts of the model's "
                                   "own data (up to --check-rows rows of the test or validation split of the data it was "
                                   "trained on, when that can be read again; else --check-data FILE, else built-in "
                                   "sentences, said in a line). --quantize int8 then writes the int8 model instead, checked on the same texts by label "
                                   "agreement and probability difference. A failed check writes nothing. Serve it with "
                                   "contrastfit.export.OnnxClassifier.")
    p.add_argument("run", help="output folder of `contrastfit train`")
    p.add_argument("--output", required=True, help="folder to write the export to")
    add_config_options(p, source=ExportOptions)
    p.set_defaults(**dict.fromkeys(_INT8_OPTIONS))  # given or not (cmd_export); their defaults are export_onnx's
    _add_task_arg(p, "export")


def _add_serve_parser(sub) -> None:
    """`contrastfit serve`."""
    p = sub.add_parser("serve", help="serve a model over HTTP (POST /predict, GET /health, /metrics, /docs)",
                       description="An HTTP server (FastAPI on uvicorn: the `serve` extra) for a trained model, a "
                                   "multi-task folder's --task, or an ONNX export: POST /predict with {\"texts\": [...]} "
                                   "(and \"pairs\") answers {\"predictions\": [{\"label\", \"probabilities\"}, ...]}, "
                                   "and the Hugging Face payload {\"inputs\": ...} as Hugging Face inference does; "
                                   "GET /health answers the labels, /metrics Prometheus metrics, /docs and "
                                   "/openapi.json the schema.")
    p.add_argument("run", help="output folder of `contrastfit train`, or of `contrastfit export`")
    _add_task_arg(p, "serve")
    add_config_options(p, source=ServeOptions)


def _add_card_parser(sub) -> None:
    """`contrastfit card`."""
    p = sub.add_parser("card", help="write a trained model's model card (README.md) again",
                       description="Write README.md, the model card (Hugging Face front matter, method and paper, data, "
                                   "training settings, metrics, calibration, usage, limitations, versions), from the "
                                   "folder's results.json and contrastfit.json. `train` writes it with the model.")
    p.add_argument("run", help="output folder of `contrastfit train`")
    _add_card_args(p)


def _add_push_parser(sub) -> None:
    """`contrastfit push`."""
    p = sub.add_parser("push", help="upload a trained model folder with its model card to the Hugging Face Hub",
                       description="Create the Hub repository REPO if needed and upload FOLDER to it (encoder/, "
                                   "weights, contrastfit.json, results.json, the sentence-transformers files and README.md; "
                                   "not checkpoints/). Uses the token of `hf auth login` or HF_TOKEN.")
    p.add_argument("folder", help="output folder of `contrastfit train`")
    p.add_argument("--repo", required=True, help="Hub repository id, owner/name")
    p.add_argument("--private", action="store_true", help="create the repository as private")
    p.add_argument("--message", default=None, help="commit message")
    _add_card_args(p)


def _add_pretrain_parser(sub) -> None:
    """`contrastfit pretrain`."""
    p = sub.add_parser("pretrain", help="train the encoder alone on a corpus (SimCSE / DiffCSE stage 1), save an encoder folder",
                       description="Stage 1 on its own corpus: the encoder stage of simcse-unsup, simcse-sup or diffcse on "
                                   "DATA (a text file with one text per line, a table, or a data set name; simcse-sup needs "
                                   "labels), saved as a plain Hugging Face encoder folder that `train --model` and an "
                                   "experiment's `model:` load.")
    add_config_options(p, required=("data", "output"), source=PretrainOptions)
    p.add_argument("--param", action="append", default=[], metavar="NAME=VALUE",
                   help="a hyper-parameter of the method (repeatable), e.g. --param temperature=0.05")


def _add_distill_parser(sub) -> None:
    """`contrastfit distill`."""
    p = sub.add_parser("distill", help="train a small student on unlabelled texts against a trained teacher",
                       description="Distillation: the teacher (a trained model folder) predicts once for every text of "
                                   "--data (unlabelled: a .txt file with one text per line, a table or a data set "
                                   "name), and the student encoder (--model) trains against those predictions "
                                   "(--method distill-cosine, the default: SetFit's, its pair similarities; "
                                   "distill-kl: its probabilities). Writes a model folder with the teacher's labels and results.json "
                                   "to --output, as `train` does.")
    p.add_argument("teacher", help=DistillOptions.__dataclass_fields__["teacher"].metadata["help"])
    add_config_options(p, required=("data", "output"), source=DistillOptions)
    p.add_argument("--param", action="append", default=[], metavar="NAME=VALUE",
                   help="a hyper-parameter of the method (repeatable), e.g. --param temperature=2")


def _add_listings_parsers(sub) -> None:
    """`contrastfit datasets` and `contrastfit methods`."""
    p = sub.add_parser("datasets", help="list the built-in data sets (single- and multi-label) with sizes and labels")
    p.add_argument("--json", action="store_true", help="print JSON")
    p = sub.add_parser("methods", help="list the training methods and their default hyper-parameters")
    p.add_argument("--json", action="store_true", help="print JSON")


def _add_experiment_parser(sub) -> None:
    """`contrastfit experiment`."""
    p = sub.add_parser("experiment", help="run an experiment config (methods x settings x seeds) and print its table",
                       description="Run every (method, setting, seed) of a YAML config -- or, for a multi-task config "
                                   "(tasks:), every (variant, seed) -- skipping runs already finished, then print and "
                                   "write the summary table and the report.")
    p.add_argument("config", help="experiment YAML file")
    p.add_argument("--output", help="override the config's output folder")
    p.add_argument("--set", action="append", metavar="KEY=VALUE",
                   help="override a config value, dotted keys, YAML values (repeatable), e.g. "
                        "--set protocol.samples=3 --set 'protocol.train_size=[20, 100]' --set seeds=[0]")
    p.add_argument("--quiet", action="store_true", help="no per-step progress bars")
    p.add_argument("--search", choices=["optuna"], help="run the config's `search:` block as an Optuna study instead of the grid")
    p.add_argument("--rebuild-store", action="store_true",
                   help="move OUTPUT/results.sqlite aside (e.g. an unreadable one) and rebuild it from the runs' "
                        "results.json files: finished runs are imported, not trained again")

    for source in EXECUTOR_SECTIONS.values():  # the config's executor keys (declared once there); not given: the config's
        add_config_options(p, source=source)
        p.set_defaults(**{f.name: None for f in config_option_fields(source=source)})


def _add_reports_parsers(sub) -> None:
    """`contrastfit report` and `contrastfit compare`."""
    p = sub.add_parser("report", help="write report.md and report.html of an experiment folder",
                       description="Tables (mean ± std, top-k, p-values against the baseline) and figures (t-SNE, "
                                   "alignment/uniformity, distance to the mean, error analysis, learning curves, "
                                   "confusion matrices, token attributions) of an experiment output folder.")
    p.add_argument("folder", help="output folder of `contrastfit experiment`")
    p = sub.add_parser("compare", help="line up the tables of two experiment folders",
                       description="Mean ± std of each (setting, method) of two experiment folders side by side, "
                                   "with Welch and Mann-Whitney p-values between them.")
    p.add_argument("folder_a")
    p.add_argument("folder_b")
    p.add_argument("--metric", action="append", help="metric(s) to compare (default: accuracy, macro_f1)")


# ---------------------------------------------------------------------------------------------

def _parse_params(items: Sequence[str]) -> dict[str, str]:
    out = {}
    for item in items:
        if "=" not in item:
            raise ContrastfitError(f"--param expects NAME=VALUE, got '{item}'")
        key, value = item.split("=", 1)
        out[key.strip().replace("-", "_")] = value.strip()
    return out


def cmd_train(args: argparse.Namespace) -> int:
    hparams = _parse_params(args.param)
    hparams.update({k[3:]: v for k, v in vars(args).items() if k.startswith("hp_") and v is not None})
    config = TrainConfig(hparams=hparams, **{f.name: getattr(args, f.name) for f in config_option_fields()})

    result = train(config)
    if world()[0] == 0:  # under torchrun only the first process wrote the model
        print(f"saved to {args.output}")
    return 0 if result else 1


def _load_eval_split(args: argparse.Namespace, model) -> tuple[object, str]:
    """A built-in or Hub data set's split, or a local file whole, labelled with the model's labels: one class a
    text, or label sets (a multi-label model's; split by the separator it was trained with). A local file's
    columns default to the ones the model was trained on."""
    source = model.info.data.source or DataSource()
    label_sets, separator = getattr(model, "multi_label", False), source.label_separator or DEFAULT_SEPARATOR
    path = Path(args.data).expanduser()
    if path.suffix.lower() in SUFFIX_BUILDERS or path.is_file():
        columns = (args.text_column or source.text_column, args.text_pair_column or source.text_pair_column,
                   args.label_column or source.label_column)
        if label_sets:
            ds, _ = multilabel_table(read_table(path), str(path), text_column=columns[0], text_pair_column=columns[1],
                                     label_column=columns[2], separator=separator, label_names=model.label_names)
        else:
            ds, _ = normalise_columns(read_table(path), str(path), *columns, model.label_names)
        return ds, f"{path} (all {len(ds)} rows)"
    columns = {"text_column": args.text_column, "text_pair_column": args.text_pair_column,
               "label_column": args.label_column}
    data = load_data(args.data, labels=LabelSetReader(separator) if label_sets else None, **columns)
    ds = data.split(args.split)
    if data.label_names is not None and model.label_names is not None and data.label_names != model.label_names:
        raise DataError(f"data set '{args.data}' has labels {data.label_names}, the model {model.label_names}")
    return ds, f"{args.data} ({args.split} split, {len(ds)} rows)"


def _add_task_arg(p: argparse.ArgumentParser, verb: str) -> None:
    p.add_argument("--task", help=f"the task to {verb}, for a multi-task model's folder (its tasks are listed "
                                  "when this is missing)")


def _add_split_arg(p: argparse.ArgumentParser, default: str, note: str = "") -> None:
    """``--split``: which split of a built-in or Hub data set ``evaluate`` and ``calibrate`` read (:data:`SPLITS`;
    a local file is read whole), ``default`` for each command."""
    p.add_argument("--split", default=default, choices=SPLITS,
                   help=f"split of a built-in or Hub data set (default: {default}{note})")


def _load_model(args: argparse.Namespace):
    """The model in ``args.run`` (:func:`contrastfit.inference.load_for_inference`): a single-task model, the
    task ``--task`` of a multi-task folder, or an ONNX export."""
    return load_for_inference(args.run, getattr(args, "task", None))


def _model_inputs(args: argparse.Namespace, model, texts, pairs) -> tuple[list[str], list[str] | None]:
    """The texts as ``model`` reads them (:func:`contrastfit.inputs.model_inputs`, the rule ``serve``
    follows too): whole lines for a single-text model, two tab-separated texts per line (or a table's
    pair column) for a pair model."""
    what = f"task '{args.task}' of {args.run}" if args.task is not None else args.run
    return model_inputs(texts, pairs, takes_pairs(model), what, "a second-text column (--text-pair-column)")


def cmd_evaluate(args: argparse.Namespace) -> int:
    model = _load_model(args)
    ds, what = _load_eval_split(args, model)
    overlap = _train_overlap(args, model, ds)
    if overlap is not None and overlap.rows:  # scored all the same (training accuracy is a number too), but said
        print(f"contrastfit: warning: {what}: {overlap.describe(_model_name(args))}; these metrics are not "
              "held-out", file=sys.stderr)
    metrics = evaluate_model(model, ds, batch_size=args.batch_size, progress=True)
    print(f"{args.run} on {what}")
    width = max(len(k) for k in headline(metrics))
    for key, value in headline(metrics).items():
        print(f"  {key:<{width}}  {value:.4f}")
    if "per_class" in metrics:
        print("  per class:  " + "  ".join(f"{n}: F1 {m['f1']:.3f}" for n, m in metrics["per_class"].items()))
    if "per_label" in metrics:  # multi-label
        print("  per label:  " + "  ".join(f"{n}: F1 {m['f1']:.3f}" for n, m in metrics["per_label"].items()))
    if args.json_out:
        write_json_atomic(args.json_out, {"run": args.run, "data": what, "metrics": metrics,
                                          "train_overlap": None if overlap is None else overlap.to_dict()})
    return 0


def _model_name(args: argparse.Namespace) -> str:
    return f"{args.run}{f' (task {args.task})' if getattr(args, 'task', None) else ''}"


def _train_overlap(args: argparse.Namespace, model, ds):
    """How many rows of ``ds`` the model in ``args.run`` was trained on
    (:func:`contrastfit.data.overlap.train_overlap` of its record), None if its folder does not say."""
    return train_overlap(model.info.data.train_hash, model.info.data.train_rows, ds)


def cmd_card(args: argparse.Namespace) -> int:
    print(f"wrote {write_model_card(args.run, license=args.license, language=args.language, datasets=args.dataset)}")
    return 0


def cmd_push(args: argparse.Namespace) -> int:
    url = push_to_hub(args.folder, args.repo, private=args.private, commit_message=args.message, license=args.license,
                      language=args.language, datasets=args.dataset)
    print(f"pushed {args.folder} to {url}")
    return 0


def cmd_serve(args: argparse.Namespace) -> int:
    options = {f.name: getattr(args, f.name) for f in config_option_fields(source=ServeOptions)}
    check_settings(cli=True, **options)  # before the model loads
    require_serving()
    model = _load_model(args)
    server = make_server(model, ServeOptions(**options), name=str(args.run), log=True)

    def stop(signum, frame):
        raise KeyboardInterrupt

    # Ctrl-C and a service manager's SIGTERM stop the server: uvicorn takes them while it serves (it answers
    # the requests in progress, then stops) and raises them again after, here (a shell's background job starts
    # with SIGINT ignored)
    signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGTERM, stop)
    print(f"serving {args.run} on {server.url} (POST /predict, GET /health, /metrics, /docs); Ctrl-C stops",
          file=sys.stderr, flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    if args.verify_file and args.check_data:
        raise ContrastfitError("--verify-file and --check-data both name the texts to check the export on: give one")
    if args.check_rows < 1:
        raise ContrastfitError(f"--check-rows {args.check_rows}: give a number of texts >= 1")
    if args.format == "setfit":
        onnx_only = [o for o, v in (("--quantize", args.quantize), ("--opset", args.opset), ("--task", args.task),
                                    ("--min-agreement", args.min_agreement), ("--max-prob-diff", args.max_prob_diff),
                                    ("--verify-file", args.verify_file)) if v is not None]
        if onnx_only:
            raise ContrastfitError(f"{onnx_only[0]} is an option of the ONNX export; --format setfit takes --check-data")

        record = export_setfit(args.run, args.output, check_data=args.check_data, text_column=args.text_column)
        check = record["verification"]
        print(f"wrote {args.output} ({SETFIT_CONFIG}, labels {', '.join(record['labels'])}): SetFit's probabilities "
              f"match contrastfit's to {check['max_prob_diff']:.1e} on {check['texts']} texts; texts: "
              f"{check['check_data']['description']}; load it with setfit.SetFitModel.from_pretrained")
        return 0
    given = {k: getattr(args, k) for k in _INT8_OPTIONS if getattr(args, k) is not None}
    if given and args.quantize is None:
        raise ContrastfitError(f"--{next(iter(given)).replace('_', '-')} checks an int8 export: add --quantize int8 "
                               "(a float export is checked with --atol)")
    meta = export_onnx(args.run, args.output, task=args.task, atol=args.atol, opset=args.opset, quantize=args.quantize,
                       check_data=args.check_data or args.verify_file, check_rows=None if args.verify_file else args.check_rows,
                       text_column=args.text_column, text_pair_column=args.text_pair_column, **given)
    check = meta["verification"]
    if meta.get("quantization"):
        q = meta["quantization"]
        print(f"wrote {args.output} (opset {meta['opset']}, {q['type']}, {q['bytes'] / 1e6:.1f} MB from "
              f"{q['float_bytes'] / 1e6:.1f} MB): ONNX Runtime's labels agree with PyTorch's on "
              f"{check['label_agreement']:.1%} of {check['texts']} texts in batches of "
              f"{', '.join(map(str, check['batch_sizes']))}, probability difference {check['prob_diff_p99']:.3f} on 99% "
              f"of them (largest {check['max_prob_diff']:.3f})"
              + (f" ({check['near_ties']} near ties: {check['decisive_agreement']:.1%} of the others)"
                 if check.get("near_ties") else "") + f"; texts: {check['check_data']['description']}")
        return 0
    print(f"wrote {args.output} (opset {meta['opset']}): ONNX Runtime matches PyTorch on {check['texts']} texts in "
          f"batches of {', '.join(map(str, check['batch_sizes']))}, largest logit difference {check['max_abs_diff']:.1e}"
          f"; texts: {check['check_data']['description']}")
    return 0


def cmd_calibrate(args: argparse.Namespace) -> int:
    if os.path.isfile(os.path.join(args.run, EXPORT_NAME)):
        raise ContrastfitError(f"{args.run} is an ONNX export; calibrate the model folder it was exported from, "
                               "then export again")
    model = load_for_inference(args.run, args.task)  # a multi-task folder: the task's TaskModel
    if model.task != "classification":
        raise ContrastfitError(f"{args.run}{f' (task {args.task})' if args.task else ''} is a regression model; "
                               "calibrate fits the temperature of class probabilities")
    ds, what = _load_eval_split(args, model)
    if len(ds) == 0:
        raise ContrastfitError(f"{what}: no rows to calibrate on")
    overlap = _train_overlap(args, model, ds)
    if overlap is not None and (overlap.same_rows or overlap.fraction > MAX_CALIBRATION_OVERLAP):
        raise ContrastfitError(f"{what}: {overlap.describe(_model_name(args))}; a temperature fitted on training "
                               "rows makes the probabilities over-confident: calibrate on held-out rows (a "
                               "validation file or split); nothing was saved")
    if overlap is not None and overlap.rows:
        print(f"contrastfit: warning: {what}: {overlap.describe(_model_name(args))} (more than "
              f"{MAX_CALIBRATION_OVERLAP:.0%} is refused)", file=sys.stderr)
    try:
        record = model.calibrate(ds[TEXT], ds[LABEL], ds[TEXT_PAIR] if TEXT_PAIR in ds.column_names else None,
                                 batch_size=args.batch_size, progress=True)
    except DegenerateFitError as exc:
        raise DegenerateFitError(f"{what}: {exc}") from None
    record["data"] = model.info.calibration.data = what  # (a task's calibration is its model's entry)
    saved = getattr(model, "model", model)  # a task's model saves the whole multi-task configuration
    write_json_atomic(os.path.join(args.run, CONFIG_NAME), saved.config_dict())  # the weights are unchanged
    if os.path.isfile(os.path.join(args.run, "results.json")):
        write_model_card(args.run)  # the card states the temperature
    if "temperatures" in record:  # multi-label: one temperature per label (evaluation.calibration.calibrate_per_label)
        print(f"{args.run}: per-label temperature scaling fitted on {what} (predictions unchanged)")
        print("  per-label temperatures " + ", ".join(f"{t:.3f}" for t in record["temperatures"]))
        print(f"  mean binary NLL {record['nll_before']:.4f} -> {record['nll_after']:.4f}")
        if record["not_fitted"]:
            print(f"  kept at 1 (separated, one-sided or out of range): {', '.join(record['not_fitted'])}")
        return 0
    print(f"{args.run}{f' task {args.task}' if args.task else ''}: temperature {record['temperature']:.3f}, fitted on {what}")
    print(f"  NLL {record['nll_before']:.4f} -> {record['nll_after']:.4f}   "
          f"ECE {record['ece_before']:.4f} -> {record['ece_after']:.4f}")
    return 0


def _read_predict_inputs(args: argparse.Namespace) -> tuple[list[str], list[str] | None]:
    """Texts from the arguments, ``--file`` or standard input (lines as they are: a tab splits a line
    into a pair only for a pair model, :func:`_model_inputs`), and a table's pair column."""

    if args.texts:
        check_utf8_texts(args.texts)  # an argument's bytes that are not UTF-8: lone surrogates, no tokenizer takes them
        return list(args.texts), None
    if args.file:
        path = Path(args.file).expanduser()
        if path.suffix.lower() in SUFFIX_BUILDERS:
            ds, _ = normalise_columns(read_table(path), str(path), args.text_column, args.text_pair_column, None,
                                      require_labels=False)
            return ds["text"], ds["text_pair"] if "text_pair" in ds.column_names else None
        problem = file_problem(path)
        if problem is not None:
            raise DataError(f"{path}: {problem}")
        check_utf8(path)
        text = path.read_text(encoding="utf-8")
    else:
        if sys.stdin.isatty():
            raise ContrastfitError("no texts: give them as arguments, with --file, or on standard input")
        stdin = getattr(sys.stdin, "buffer", None)  # bytes, decoded here: not the locale's replacement characters
        text = decode_utf8(stdin.read(), "standard input") if stdin is not None else sys.stdin.read()
    # lines end at a newline (\n, \r\n or \r) only: str.splitlines would also cut a text at a form feed or U+2028
    lines = [line for line in text.replace("\r\n", "\n").replace("\r", "\n").split("\n") if line.strip()]
    if not lines:
        raise ContrastfitError(f"no texts in {args.file or 'standard input'}")
    check_utf8_texts(lines, f"{args.file or 'standard input'}: line")  # (a stdin without bytes: surrogates kept)
    return lines, None


def cmd_predict(args: argparse.Namespace) -> int:
    model = _load_model(args)
    texts, pairs = _model_inputs(args, model, *_read_predict_inputs(args))

    rows = prediction_rows(model, texts, pairs, batch_size=args.batch_size)
    with atomic_open(args.output) if args.output else contextlib.nullcontext(sys.stdout) as out:
        for i, (text, predicted) in enumerate(zip(texts, rows)):
            row = {"text": text, **({"text_pair": pairs[i]} if pairs is not None else {}), **predicted}
            out.write(json.dumps(row, ensure_ascii=False) + "\n")
    return 0


def cmd_explain(args: argparse.Namespace) -> int:

    options = ExplainOptions(**{f.name: getattr(args, f.name) for f in config_option_fields(source=ExplainOptions)})
    check_fields(options)  # before the model loads
    model = _load_model(args)
    texts, pairs = _model_inputs(args, model, *_read_predict_inputs(args))
    if getattr(model, "session", None) is not None:
        raise ContrastfitError(f"{args.run} is an ONNX export; explain needs the PyTorch model: give the folder "
                               "`contrastfit train` wrote")
    if args.target is not None and model.task == "classification" and args.target not in model.label_names:
        raise ContrastfitError(f"--target {args.target!r} is not a label of {args.run} "
                               f"({', '.join(map(str, model.label_names))})")
    results = []
    for i, text in enumerate(tqdm(texts, desc="explain", disable=len(texts) < 2)):
        results.append(token_attributions(model, text, pairs[i] if pairs is not None else None, target=args.target,
                                          n_samples=options.samples, baseline=options.baseline, seed=options.seed))
    lines = "".join(json.dumps(r.to_dict(), ensure_ascii=False) + "\n" for r in results)
    if args.output:
        write_text_atomic(args.output, lines)
    else:
        sys.stdout.write(lines)
    if args.plot:
        plot_attributions([(f"text {i + 1}", r) for i, r in enumerate(results)], args.plot,
                          title=f"{_model_title(model)}: Shapley values of words")
        print(f"wrote {args.plot}", file=sys.stderr)
    return 0


def _model_title(model) -> str:
    spec = getattr(model, "spec", None)
    return f"task {spec.name} ({spec.objective})" if spec is not None else model.method.name


def cmd_datasets(args: argparse.Namespace) -> int:
    rows = describe_builtin() + describe_multilabel_builtin()
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    w = max(len("name"), *(len(r["name"]) for r in rows))
    print(f"{'name':<{w}} {'size':>6}  {'train/validation/test':<22} labels")
    for r in rows:
        if r.get("unavailable"):  # its data is not there (not in the data cache): listed, with how to fetch it
            print(f"{r['name']:<{w}} {'-':>6}  {'-':<22} not available: {r['unavailable']}")
            print(f"{'':<{w}} {'':>6}  {r['description']} (package {r['package']})")
            if r.get("fetch") and r["fetch"] not in r["unavailable"]:
                print(f"{'':<{w}} {'':>6}  fetch it with: {r['fetch']}")
            continue
        split = "/".join(str(r["splits"][s]) for s in SPLITS)
        labels = ("multi-label (texts per label): " if r["multi_label"] else "") + \
            ", ".join(f"{k} {v}" for k, v in r["labels"].items())
        print(f"{r['name']:<{w}} {r['size']:>6}  {split:<22} {labels}")
        print(f"{'':<{w}} {'':>6}  {r['description']} (package {r['package']})")
    return 0


def cmd_methods(args: argparse.Namespace) -> int:
    specs = available_methods()
    schedule = {n: method_schedule(s.cls) for n, s in specs.items()}  # with --learning-rate / --min-steps left out
    if args.json:
        print(json.dumps({n: {"description": s.description, "reference": s.reference, "defaults": s.defaults,
                              "training_defaults": schedule[n]} for n, s in specs.items()}, indent=2))
        return 0
    width = max(map(len, specs)) + 2
    for name, spec in specs.items():
        defaults = ", ".join(f"{k}={v}" for k, v in spec.defaults.items()) or "-"
        training = ", ".join(f"{k}={v:g}" for k, v in schedule[name].items())
        if "min_steps" not in schedule[name]:
            training += ", steps: the method's own rule"
        print(f"{name:<{width}}{spec.description}\n{'':<{width}}{spec.reference}\n{'':<{width}}defaults: {defaults}"
              f"\n{'':<{width}}training: {training}")
    return 0


def cmd_experiment(args: argparse.Namespace) -> int:
    overrides = list(args.set or [])
    if args.output:
        overrides.append(f"output={json.dumps(args.output)}")
    executor = executor_overrides({f.name: getattr(args, f.name) for source in EXECUTOR_SECTIONS.values()
                                   for f in config_option_fields(source=source)})
    config = load_config(args.config, overrides)
    if executor:
        if isinstance(config, MultiTaskExperimentConfig):
            raise ContrastfitError(f"{args.config} is a multi-task experiment, which runs in this process; "
                                   "--executor, --ray-address and --slurm-cluster run a single-task grid")
        if args.search and args.executor == "slurm":
            raise ContrastfitError("--search runs its trials in this process or, with --executor ray, as Ray tasks; "
                                   "on Slurm, start `--search optuna` jobs that share one search.storage")
        config = load_config(args.config, overrides + executor)
    if args.search:
        if isinstance(config, MultiTaskExperimentConfig):
            raise ContrastfitError(f"{args.config} is a multi-task experiment; --search runs a single-task "
                                   "config's search: block")
        if args.rebuild_store:
            raise ContrastfitError("--rebuild-store rebuilds an experiment's results store; a --search keeps its "
                                   "trials in Optuna's storage: give one of them")

        run_search(config, progress=not args.quiet)
        return 0
    run_experiment(config, progress=not args.quiet, rebuild_store=args.rebuild_store)
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    paths = write_report(args.folder)
    print(main_table_text(args.folder))
    print(f"\nwritten: {paths['markdown']}, {paths['html']}")
    return 0


def cmd_compare(args: argparse.Namespace) -> int:
    print(compare(args.folder_a, args.folder_b, args.metric or ["accuracy", "macro_f1"]))
    return 0


def cmd_pretrain(args: argparse.Namespace) -> int:
    options = {f.name: getattr(args, f.name) for f in config_option_fields(source=PretrainOptions)}
    result = pretrain(**options, hparams=_parse_params(args.param))
    print(f"encoder saved to {result.output}")
    return 0


def cmd_distill(args: argparse.Namespace) -> int:
    options = {f.name: getattr(args, f.name) for f in config_option_fields(source=DistillOptions)}
    result = distill(args.teacher, **options, hparams=_parse_params(args.param) or None)
    print(f"saved to {args.output}")
    return 0 if result else 1


#: What each command writes, checked before it starts: (attribute, option, a folder?).
_OUTPUTS: dict[str, list[tuple[str, str, bool]]] = {
    "train": [("output", "--output", True)], "pretrain": [("output", "--output", True)],
    "distill": [("output", "--output", True)],
    "export": [("output", "--output", True)], "experiment": [("output", "--output", True)],
    "predict": [("output", "--output", False)], "evaluate": [("json_out", "--json", False)],
    "explain": [("output", "--output", False), ("plot", "--plot", False)],
}


#: What a command reads (attributes of its arguments), which no output may be or hold.
_INPUTS = ("data", "validation_data", "test_data", "run", "model", "folder", "file", "verify_file", "check_data",
           "config", "label_descriptions", "teacher")


def _check_arguments(args: argparse.Namespace) -> None:
    """What argparse cannot check in one line: outputs (:func:`contrastfit.atomic.check_output`) and batch sizes."""
    batch_size = getattr(args, "batch_size", None)
    if args.command != "train" and isinstance(batch_size, int) and batch_size < 1:  # (train: TrainConfig's check)
        raise ContrastfitError(f"--batch-size must be at least 1, got {batch_size}")
    inputs = [getattr(args, name, None) for name in _INPUTS]
    for attr, option, folder in _OUTPUTS.get(args.command, []):
        if getattr(args, attr, None) is not None:
            # the user's own files first: the current or home folder, an input, a folder or file of theirs
            check_output(getattr(args, attr), inputs=inputs, option=option, folder=folder,
                         overwrite=getattr(args, "overwrite", False))


COMMANDS = {"train": cmd_train, "evaluate": cmd_evaluate, "calibrate": cmd_calibrate, "card": cmd_card, "push": cmd_push, "export": cmd_export, "serve": cmd_serve, "predict": cmd_predict, "datasets": cmd_datasets,
            "pretrain": cmd_pretrain, "distill": cmd_distill,
            "methods": cmd_methods, "explain": cmd_explain, "experiment": cmd_experiment, "report": cmd_report, "compare": cmd_compare}


def main(argv: Sequence[str] | None = None) -> int:
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if extra and hasattr(args, "texts") and not any(e.startswith("-") for e in extra):
        # texts after an option (`predict RUN --task mr "a fine film"`): argparse reads the positionals
        # before the first option only
        args.texts = [*args.texts, *extra]
    elif extra:
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    _quiet_libraries()
    try:
        _check_arguments(args)
        return COMMANDS[args.command](args)
    except ContrastfitError as exc:
        print(f"contrastfit: error: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:  # the file system refused (permission, full disk, ...): what and where, in one line
        where = " -> ".join(str(f) for f in (exc.filename, exc.filename2) if f is not None)
        print(f"contrastfit: error: {where + ': ' if where else ''}{exc.strerror or exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("contrastfit: interrupted", file=sys.stderr)
        return 130


def _quiet_libraries() -> None:
    """Keep library chatter (weight-loading bars, advisory warnings) out of the user's terminal."""
    warnings.filterwarnings("ignore", category=FutureWarning)
    warnings.filterwarnings("ignore", category=UserWarning, module="transformers")
    for name in ("transformers", "datasets", "accelerate"):
        logging.getLogger(name).setLevel(logging.ERROR)
    try:
        from transformers.utils import logging as hf_logging

        hf_logging.set_verbosity_error()
        hf_logging.disable_progress_bar()
    except Exception:  # pragma: no cover - logging is cosmetic
        pass
    try:
        datasets.disable_progress_bars()
    except Exception:  # pragma: no cover
        pass


if __name__ == "__main__":
    sys.exit(main())
