"""MkDocs hooks (mkdocs.yml `hooks:`): what the documentation generates instead of repeating.

* ``<!-- options: COMMAND -->`` on a line of its own in a page becomes the Markdown table of
  ``contrastfit COMMAND``'s arguments and options (option, default, allowed values, help), read from the parser
  :func:`contrastfit.cli.build_parser` builds; for ``train`` that parser is generated from the
  :class:`contrastfit.TrainConfig` fields declared with :func:`contrastfit.settings.setting`
  (:func:`contrastfit.cli.add_config_options`), for ``pretrain`` from
  :class:`contrastfit.pretrain.PretrainOptions` (for ``serve`` from :class:`contrastfit.serve.ServeOptions`,
  ``export`` from :class:`contrastfit.export.ExportOptions`, ``evaluate`` / ``predict`` / ``calibrate`` from
  :class:`contrastfit.inference.InferenceOptions`),
  whose bounds the table also gives. An unknown
  command fails the build.
* ``<!-- hparams: METHOD [METHOD ...] -->`` becomes the table of those methods' hyper-parameters
  (name and option, default, allowed values, help), read from each method's ``Hparams`` declaration
  (:func:`contrastfit.methods.base.hparam`); a default or a name that not every listed method shares
  says which methods it is for. An unknown method fails the build.
* ``<!-- schema: NAME -->`` becomes the table of one mapping of an experiment config (key, type,
  default, constraints, description), read from its pydantic model in
  :mod:`contrastfit.experiments.schema` (:func:`schema_models` names them: ``experiment``, ``methods``,
  ``training``, ``protocol.few-shot``, ..., ``multitask``, ``multitask.tasks``, ...); a key whose value
  is another such mapping links to that mapping's table on the page. An unknown name fails the build.
* ``<!-- datasets: GROUP -->`` becomes the table of the built-in data sets of ``GROUP`` (``core``: the
  sets :mod:`contrastfit.data.builtin` declares; ``more``: those :mod:`contrastfit.data.sets` registers;
  ``multi-label``), read from the registry and the loaded data (sizes, splits, labels); a set whose
  package is not installed where the site is built says so, with its install command. An unknown group
  fails the build.
* The images under ``bench/results/`` are served at the same path in the site, so that a page's
  ``![...](bench/results/x.png)`` works without a copy of the file in ``docs/``.
"""
from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT / "src") not in sys.path:
    sys.path.insert(0, str(ROOT / "src"))  # this checkout's contrastfit, not another installed one

MARKER = re.compile(r"^<!-- options: ([a-z-]+) -->$", re.MULTILINE)
HPARAMS_MARKER = re.compile(r"^<!-- hparams: ([a-z -]+) -->$", re.MULTILINE)
SCHEMA_MARKER = re.compile(r"^<!-- schema: ([a-z0-9_.-]+) -->$", re.MULTILINE)
DATASETS_MARKER = re.compile(r"^<!-- datasets: ([a-z-]+) -->$", re.MULTILINE)
HEADING = re.compile(r"^(#{1,6}) +(.+?) *#*$", re.MULTILINE)
SERVED_IMAGES = ("bench/results",)
IMAGE_SUFFIXES = {".png", ".svg", ".jpg", ".jpeg", ".gif"}


def _cell(text: object) -> str:
    return " ".join(str(text).split()).replace("|", "\\|")


def _code(value: object) -> str:
    return f"`{value}`"


def _bounds(meta: dict) -> list[str]:
    signs = {"ge": ">=", "gt": ">", "le": "<=", "lt": "<"}
    return [f"{signs[k]} {v:g}" if isinstance(v, float) else f"{signs[k]} {v}" for k, v in meta.get("bounds", {}).items()]


def _type_name(action: argparse.Action) -> str:
    kind = getattr(action, "type", None)
    return {int: "integer", float: "number", str: "text"}.get(kind, "text")


def option_rows(command: str) -> list[tuple[str, str, str, str, str]]:
    """(group, option, default, allowed values, help) for each option of ``contrastfit COMMAND``,
    in ``--help`` order."""
    from contrastfit.cli import build_parser
    from contrastfit.distillation import DistillOptions
    from contrastfit.pretrain import PretrainOptions
    from contrastfit.evaluation.attributions import ExplainOptions
    from contrastfit.export import ExportOptions
    from contrastfit.inference import InferenceOptions
    from contrastfit.serve import ServeOptions
    from contrastfit.training import TrainConfig

    parser = build_parser()
    subparsers = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    if command not in subparsers.choices:
        raise ValueError(f"<!-- options: {command} -->: contrastfit has no command {command!r} "
                         f"(commands: {', '.join(subparsers.choices)})")
    sub = subparsers.choices[command]
    declared = {"train": TrainConfig, "pretrain": PretrainOptions, "distill": DistillOptions,
                "serve": ServeOptions, "explain": ExplainOptions, "export": ExportOptions, "evaluate": InferenceOptions,
                "predict": InferenceOptions, "calibrate": InferenceOptions}.get(command)
    fields = declared.__dataclass_fields__ if declared is not None else {}
    rows = []
    for action in sub._actions:  # the positional arguments first, as the usage line has them
        if action.option_strings or isinstance(action, argparse._SubParsersAction):
            continue
        name = action.metavar or action.dest.upper()
        default = {"*": "none; any number", "?": "none", "+": "required; one or more"}.get(action.nargs, "required")
        rows.append(("arguments", _code(name), default, _type_name(action), (action.help or "").replace("%%", "%")))
    for group in sub._action_groups:
        title = "options" if group.title in ("options", "optional arguments") else group.title
        for action in group._group_actions:
            if not action.option_strings or isinstance(action, (argparse._HelpAction, argparse._VersionAction)):
                continue
            flag = max(action.option_strings, key=len)
            field = fields.get(action.dest)
            meta = field.metadata if field is not None else {}
            help_text = (meta.get("flag_help") or meta.get("help")) if field is not None else (action.help or "")
            help_text = (help_text or "").replace("%%", "%")  # argparse's escape of %
            if isinstance(action, (argparse._StoreTrueAction, argparse._StoreFalseAction)):
                option = _code(flag)
                on = isinstance(action, argparse._StoreTrueAction)
                default = f"`{action.dest}` {'off' if on else 'on'}" if field is not None else "off"
                allowed = f"switch: turns `{action.dest}` {'on' if on else 'off'}" if field is not None else "switch"
            else:
                metavar = action.metavar or (action.dest.upper() if not action.choices else None)
                option = _code(f"{flag} {metavar}" if metavar else flag)
                if action.required:
                    default = "required"
                elif isinstance(action, argparse._AppendAction):
                    default = "none; repeatable"
                elif action.default is None or action.default == []:
                    # a declared default the parser leaves unset, to tell whether it was given (export's int8 checks)
                    default = _code(field.default) if field is not None and field.default is not None else "none"
                else:
                    default = _code(action.default)
                if action.choices:
                    allowed = ", ".join(_code(c) for c in action.choices)
                else:
                    allowed = ", ".join([_type_name(action), *_bounds(meta)])
            rows.append((title, option, default, allowed, help_text))
    return rows


def options_table(command: str) -> str:
    lines = ["| group | option | default | allowed values | help |", "|---|---|---|---|---|"]
    lines += ["| " + " | ".join(_cell(c) for c in row) + " |" for row in option_rows(command)]
    return "\n".join(lines)


def _allowed(info) -> str:
    """A hyper-parameter's allowed values, from its declaration: its type or choices, then its bounds."""
    import typing

    kind = info.annotation
    if typing.get_origin(kind) is typing.Literal:
        return ", ".join(_code(c) for c in typing.get_args(kind))
    if typing.get_origin(kind) is tuple:
        return "comma-separated numbers, each " + ", ".join(_bounds({"bounds": _bounds_of(
            m for f in typing.get_args(typing.get_args(kind)[0])[1:] for m in f.metadata)}))
    words = {int: "integer", float: "number", bool: "true or false", str: "text"}
    extra = ["or `-inf`"] if any(getattr(m, "allow_inf_nan", False) for m in info.metadata) else []
    return ", ".join([words.get(kind, str(kind)), *_bounds({"bounds": _bounds_of(info.metadata)}), *extra])


def _bounds_of(metadata) -> dict:
    return {k: getattr(m, k) for m in metadata for k in ("ge", "gt", "le", "lt") if getattr(m, k, None) is not None}


def hparams_table(names: list[str]) -> str:
    """The hyper-parameters of the methods ``names`` (see the module docstring)."""
    from contrastfit.methods import get_method

    rows: dict[str, dict] = {}
    for method in names:
        spec = get_method(method)
        for name, info in spec.cls.Hparams.model_fields.items():
            name = info.alias or name
            row = rows.setdefault(name, {"info": info, "defaults": {}, "methods": []})
            row["defaults"].setdefault(repr(spec.defaults[name]), []).append(method)
            row["methods"].append(method)
    lines = ["| hyper-parameter | default | allowed values | help |", "|---|---|---|---|"]
    for name, row in rows.items():
        flag = (row["info"].json_schema_extra or {}).get("flag")
        option = _code(name) + (f" (`--{name.replace('_', '-')}`)" if flag else "")
        defaults = row["defaults"]
        default = "; ".join(_code(v) + (f" ({', '.join(m)})" if len(defaults) > 1 else "") for v, m in defaults.items())
        only = f" (only {', '.join(row['methods'])})" if len(row["methods"]) < len(names) else ""
        lines.append("| " + " | ".join(_cell(c) for c in (option, default, _allowed(row["info"]),
                                                           row["info"].description + only)) + " |")
    if not rows:
        return "No hyper-parameters."
    return "\n".join(lines)


# -- the experiment config's schema ---------------------------------------------------------------

def schema_models() -> dict[str, type]:
    """Every mapping of an experiment config by its name on the page: the key path from the top level,
    ``protocol.KIND`` for each registered protocol, ``multitask.KEY`` for a multi-task config's."""
    from contrastfit.experiments import schema

    models = {"experiment": schema.Experiment, "methods": schema.MethodEntry, "training": schema.Training,
              "data_options": schema.DataOptions, "attributions": schema.Attributions, "search": schema.Search,
              "search.space": schema.SearchDimension, "ray": schema.Ray, "slurm": schema.Slurm}
    for kind, options in schema.PROTOCOLS.items():
        models[f"protocol.{kind}"] = options
        for name, info in options.model_fields.items():
            inner = info.annotation
            if isinstance(inner, type) and issubclass(inner, schema.BaseModel):
                models[f"protocol.{kind}.{name}"] = inner
    models.update({"multitask": schema.MultiTaskExperiment, "multitask.tasks": schema.TaskEntry,
                   "multitask.training": schema.MultiTaskTraining, "multitask.variants": schema.MultiTaskVariant,
                   "multitask.pretrain": schema.PretrainEntry})
    return models


def same_keys() -> dict[type, str]:
    """Mappings whose keys are another table's, each value one setting or a list (a method entry's
    ``training:``) or an override (a multi-task variant's ``training:``)."""
    from contrastfit.experiments import schema

    return {schema.TrainingGrid: "training", schema.MultiTaskTrainingOverride: "multitask.training"}


def _yaml(value: object) -> str:
    import yaml

    text = yaml.safe_dump(value, default_flow_style=True, sort_keys=False, width=10_000).strip()
    return text.removesuffix("...").strip()


def _unwrap(hint):
    """(type, metadata) of an ``Annotated`` type; any other type with no metadata."""
    import typing

    if typing.get_origin(hint) is typing.Annotated:
        base, *meta = typing.get_args(hint)
        inner, more = _unwrap(base)
        return inner, [*meta, *more]
    return hint, []


def _one_or_more(meta) -> bool:
    from contrastfit.experiments.fields import as_list

    return any(getattr(m, "func", None) is as_list for m in meta)


def _model_link(model: type, anchors: dict[str, str]) -> str:
    names = {m: n for n, m in schema_models().items()}
    like = same_keys().get(model)
    name = names.get(model) or like
    if name is None:
        return "mapping"
    link = f"[`{name}`](#{anchors[name]})" if name in anchors else f"`{name}`"
    if like is not None:
        return f"mapping: the keys of {link}" + (", each one value or a list (a grid)"
                                                   if model.__name__.endswith("Grid") else "")
    return f"mapping: {link}"


def _schema_type(hint, anchors: dict[str, str]) -> str:
    import types
    import typing

    from pydantic import BaseModel

    hint, meta = _unwrap(hint)
    origin = typing.get_origin(hint)
    if origin is list and _one_or_more(meta):
        return f"{_schema_type(typing.get_args(hint)[0], anchors)}, or a list of them"
    if origin in (typing.Union, types.UnionType):
        arms = [a for a in typing.get_args(hint) if a is not type(None)]
        return " or ".join(_schema_type(a, anchors) for a in arms)
    if origin is typing.Literal:
        return ", ".join(_code(v) for v in typing.get_args(hint))
    if origin is list:
        return f"list of {_schema_type(typing.get_args(hint)[0], anchors)}"
    if origin is dict:
        value = typing.get_args(hint)[1] if typing.get_args(hint) else typing.Any
        return "mapping" if value is typing.Any else f"mapping of names to {_schema_type(value, anchors)}"
    if isinstance(hint, type) and issubclass(hint, BaseModel):
        return _model_link(hint, anchors)
    return {str: "text", int: "integer", float: "number", bool: "true or false", typing.Any: "any value"}.get(
        hint, getattr(hint, "__name__", str(hint)))


def _schema_constraints(hint, metadata) -> list[str]:
    """The bounds and lengths a field declares, ``each ...`` for those of its items."""
    import types
    import typing

    signs = {"ge": ">=", "gt": ">", "le": "<=", "lt": "<"}
    out: list[str] = []

    def visit(h, meta, each: str) -> None:
        h, inner = _unwrap(h)
        meta = [*meta, *inner]
        for m in meta:
            for m in getattr(m, "metadata", None) or [m]:  # a FieldInfo holds its constraints
                for key, sign in signs.items():
                    if getattr(m, key, None) is not None:
                        out.append(f"{each}{sign} {getattr(m, key)}")
                if getattr(m, "min_length", None) and not (_one_or_more(meta) and m.min_length == 1):
                    out.append(each + ("not empty" if h is str and m.min_length == 1 else f"at least {m.min_length} "
                               f"{'character' if h is str else 'value'}{'s' if m.min_length > 1 else ''}"))
        origin = typing.get_origin(h)
        if origin in (typing.Union, types.UnionType):
            for arm in typing.get_args(h):
                visit(arm, [], each)
        elif origin in (list, dict) and typing.get_args(h):
            visit(typing.get_args(h)[-1], [], "each ")

    visit(hint, list(metadata), "")
    return list(dict.fromkeys(out))


def _schema_default(info) -> str:
    from pydantic import BaseModel

    if info.is_required():
        return "required"
    value = info.default_factory() if info.default_factory is not None else info.default
    if value is None:
        return "none"
    if isinstance(value, BaseModel):
        given = value.model_dump(exclude_unset=True)
        return _code(_yaml(given)) if given else "each key's default"
    return _code(_yaml(value))


def schema_rows(name: str, anchors: dict[str, str] | None = None) -> list[tuple[str, str, str, str, str]]:
    """(key, type, default, constraints, description) for each key of the mapping ``name``."""
    import typing

    models = schema_models()
    if name not in models:
        raise ValueError(f"<!-- schema: {name} -->: no such mapping of an experiment config "
                         f"(known: {', '.join(models)})")
    rows = []
    for field_name, info in models[name].model_fields.items():
        hint = typing.Annotated[(info.annotation, *info.metadata)] if info.metadata else info.annotation
        rows.append((_code(info.alias or field_name), _schema_type(hint, anchors or {}),
                     _schema_default(info), ", ".join(_schema_constraints(info.annotation, info.metadata)),
                     info.description or ""))
    return rows


def schema_table(name: str, anchors: dict[str, str] | None = None) -> str:
    lines = ["| key | type | default | constraints | description |", "|---|---|---|---|---|"]
    lines += ["| " + " | ".join(_cell(c) for c in row) + " |" for row in schema_rows(name, anchors)]
    return "\n".join(lines)


def _slug(heading: str) -> str:
    from markdown.extensions.toc import slugify

    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading).replace("`", "")
    return slugify(text, "-")


def schema_anchors(markdown: str) -> dict[str, str]:
    """The anchor of the heading above each ``<!-- schema: NAME -->`` marker of the page, by NAME."""
    anchors = {}
    for marker in SCHEMA_MARKER.finditer(markdown):
        headings = list(HEADING.finditer(markdown, 0, marker.start()))
        if headings:
            anchors[marker.group(1)] = _slug(headings[-1].group(2))
    return anchors


# -- the built-in data sets ----------------------------------------------------------------------------

DATASET_GROUPS = ("core", "more", "multi-label")


def _count(n: int) -> str:
    return f"{n:,}"


def _labels_text(row: dict) -> str:
    labels = row["labels"]
    if row.get("task") == "regression":
        return (f"regression: {labels['min']}..{labels['max']}, mean {labels['mean']} (sd {labels['std']})")
    counts = sorted(labels.values())
    prefix = "label sets, texts per label: " if row.get("multi_label") else ""
    if len(labels) <= 8:
        return prefix + ", ".join(f"{label} {_count(n)}" for label, n in labels.items())
    median = counts[len(counts) // 2] if len(counts) % 2 else (counts[len(counts) // 2 - 1] + counts[len(counts) // 2]) / 2
    return (f"{prefix}{len(labels)} classes, {_count(counts[0])}-{_count(counts[-1])} each "
            f"(median {_count(int(median)) if float(median).is_integer() else median})")


def dataset_rows(group: str) -> list[tuple[str, ...]]:
    """(name, kind, package, size, train / validation / test, labels, what it is) for each built-in data
    set of ``group`` (see :data:`DATASET_GROUPS`)."""
    import contrastfit.data.sets  # noqa: F401 - registers the sets read from other packages
    from contrastfit.data.builtin import BUILTIN_DATASETS, describe_builtin
    from contrastfit.data.multilabel import describe_multilabel_builtin

    if group not in DATASET_GROUPS:
        raise ValueError(f"<!-- datasets: {group} -->: no such group of built-in data sets "
                         f"(groups: {', '.join(DATASET_GROUPS)})")
    if group == "multi-label":
        described = describe_multilabel_builtin()
    else:
        def more(spec) -> bool:
            reader = getattr(spec.reader, "func", spec.reader)
            return reader.__module__.startswith("contrastfit.data.sets")

        described = [r for r in _described_builtin(describe_builtin)
                     if more(BUILTIN_DATASETS[r["name"]]) == (group == "more")]
    rows = []
    for r in described:
        spec = BUILTIN_DATASETS.get(r["name"])
        version = (spec.pin or spec.version) if spec is not None else None
        package = f"{r['package']} {version}" if version else r["package"]
        if r.get("size") is None:
            size, splits = "", ""
            labels = f"not installed where this site was built: `{r.get('fetch', '')}`"
        else:
            size = _count(r["size"])
            splits = " / ".join(_count(r["splits"][s]) for s in ("train", "validation", "test"))
            labels = _labels_text(r)
        rows.append((_code(r["name"]), r.get("kind") or (spec.kind if spec else ""), package, size, splits, labels,
                     r["description"]))
    return rows


_DESCRIBED: list = []


def _described_builtin(describe) -> list[dict]:
    """``describe_builtin()`` once per build (it loads every set)."""
    if not _DESCRIBED:
        _DESCRIBED.extend(describe())
    return _DESCRIBED


def datasets_table(group: str) -> str:
    lines = ["| name | kind | package | size | train / validation / test | labels | what it is |",
             "|---|---|---|--:|---|---|---|"]
    lines += ["| " + " | ".join(_cell(c) for c in row) + " |" for row in dataset_rows(group)]
    return "\n".join(lines)


def on_page_markdown(markdown: str, page, config, files) -> str:
    markdown = HPARAMS_MARKER.sub(lambda m: hparams_table(m.group(1).split()), markdown)
    anchors = schema_anchors(markdown)
    markdown = SCHEMA_MARKER.sub(lambda m: schema_table(m.group(1), anchors), markdown)
    markdown = DATASETS_MARKER.sub(lambda m: datasets_table(m.group(1)), markdown)
    return MARKER.sub(lambda m: options_table(m.group(1)), markdown)


def on_files(files, config):
    from mkdocs.structure.files import File

    for folder in SERVED_IMAGES:
        for path in sorted((ROOT / folder).glob("*")):
            if path.suffix.lower() in IMAGE_SUFFIXES:
                rel = path.relative_to(ROOT).as_posix()
                if files.get_file_from_path(rel) is None:
                    files.append(File.generated(config, rel, abs_src_path=str(path)))
    return files
