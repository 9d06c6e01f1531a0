"""MkDocs hooks (mkdocs.yml `hooks:`): what the documentation generates instead of repeating.

* ``<!-- options: COMMAND -->`` on a line of its own in a page becomes the Markdown table of
  ``contrastfit COMMAND``'s options (option, default, allowed values, help), read from the parser
  :func:`contrastfit.cli.build_parser` builds; for ``train`` that parser is generated from the
  :class:`contrastfit.TrainConfig` fields declared with :func:`contrastfit.settings.setting`
  (:func:`contrastfit.cli.add_config_options`), whose bounds the table also gives. An unknown
  command fails the build.
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
    from contrastfit.training import TrainConfig

    parser = build_parser()
    subparsers = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    if command not in subparsers.choices:
        raise ValueError(f"<!-- options: {command} -->: contrastfit has no command {command!r} "
                         f"(commands: {', '.join(subparsers.choices)})")
    sub = subparsers.choices[command]
    fields = TrainConfig.__dataclass_fields__ if command == "train" else {}
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


def on_page_markdown(markdown: str, page, config, files) -> str:
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
