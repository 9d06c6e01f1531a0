"""MkDocs hooks (mkdocs.yml `hooks:`): what the documentation generates instead of repeating.

* ``<!-- options: COMMAND -->`` on a line of its own in a page becomes the Markdown table of
  ``contrastfit COMMAND``'s options (option, default, allowed values, help), read from the parser
  :func:`contrastfit.cli.build_parser` builds; for ``train`` that parser is generated from the
  :class:`contrastfit.TrainConfig` fields declared with :func:`contrastfit.settings.setting`
  (:func:`contrastfit.cli.add_config_options`), for ``pretrain`` from
  :class:`contrastfit.pretrain.PretrainOptions` (for ``serve`` from :class:`contrastfit.serve.ServeOptions`),
  whose bounds the table also gives. An unknown
  command fails the build.
* ``<!-- hparams: METHOD [METHOD ...] -->`` becomes the table of those methods' hyper-parameters
  (name and option, default, allowed values, help), read from each method's ``Hparams`` declaration
  (:func:`contrastfit.methods.base.hparam`); a default or a name that not every listed method shares
  says which methods it is for. An unknown method fails the build.
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
    from contrastfit.serve import ServeOptions
    from contrastfit.training import TrainConfig

    parser = build_parser()
    subparsers = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    if command not in subparsers.choices:
        raise ValueError(f"<!-- options: {command} -->: contrastfit has no command {command!r} "
                         f"(commands: {', '.join(subparsers.choices)})")
    sub = subparsers.choices[command]
    declared = {"train": TrainConfig, "pretrain": PretrainOptions, "distill": DistillOptions,
                "serve": ServeOptions}.get(command)
    fields = declared.__dataclass_fields__ if declared is not None else {}
    rows = []
    for group in sub._action_groups:
        title = "options" if group.title in ("options", "optional arguments") else group.title
        for action in group._group_actions:
            if not action.option_strings or isinstance(action, (argparse._HelpAction, argparse._VersionAction)):
                continue
            flag = max(action.option_strings, key=len)
            field = fields.get(action.dest)
            meta = field.metadata if field is not None else {}
            help_text = (meta.get("flag_help") or meta.get("help")) if field is not None else (action.help or "")
            help_text = help_text or ""
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
                    default = "none"
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


def on_page_markdown(markdown: str, page, config, files) -> str:
    markdown = HPARAMS_MARKER.sub(lambda m: hparams_table(m.group(1).split()), markdown)
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
