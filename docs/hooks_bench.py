"""MkDocs hook (mkdocs.yml `hooks:`): the benchmark tables, rendered from the committed raw records in
``bench/results/`` at build time, so that no page copies a number by hand.

A line ``<!-- bench: RECORD [VIEW] -->`` on its own in a page becomes what the bench script that wrote
RECORD renders from it (the same function that writes the bench's own ``.md``):

* a few-shot record (``bench/fewshot.py``: ``RECORD_runs.jsonl``, e.g. ``fewshot``, ``heldout_kinds``,
  ``fewshot_gpu_h200``; every name :data:`FEWSHOT` matches), summarised by ``fewshot.summarise``. Views:
  ``goal`` (the default: the goal table, one row per data set and K, with the ceiling line;
  ``fewshot.goal_markdown``), ``kinds`` (per kind of task, mean ranks and the averages against the goal;
  ``fewshot.kinds_markdown``), ``misses`` (the goal in words and each cell that misses part of it, by how
  much; ``fewshot.misses_markdown``), ``systems`` (every system's row with macro-F1 and paired tests;
  ``fewshot.markdown``);
* ``datasets``: every built-in single-label set, its kind of task, its part in the bench and the committed
  records that score it (``fewshot.datasets_markdown`` over every ``*_runs.jsonl``);
* a JSON record ``RECORD.json`` of another bench (:data:`JSON_RECORDS`: step time, head stage, shipping,
  int8 export, serving, executors, gradient caching, multi-label, distillation, head C, leave one set out)
  or the runs of ``bench/validation_holdout.py``, through that script's ``markdown``;
* view ``md`` of any record: the committed ``bench/results/RECORD.md`` as it is, for a record today's
  script can no longer render (one written by an earlier version of its bench).

Headings inside a rendered block become bold lines, so that the page's own sections stay its table of
contents. An unknown record or view, a malformed marker or a missing record fails the build with one line
(:class:`mkdocs.exceptions.PluginError`).
"""
from __future__ import annotations

import importlib.util
import json
import re
import sys
from pathlib import Path
from typing import Callable

from mkdocs.exceptions import PluginError

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT / "src") not in sys.path:
    sys.path.insert(0, str(ROOT / "src"))  # this checkout's contrastfit, not another installed one
RESULTS = ROOT / "bench" / "results"

MARKER = re.compile(r"^<!-- bench: ([A-Za-z0-9_.-]+)(?: ([a-z-]+))? -->$", re.MULTILINE)
ANY_MARKER = re.compile(r"^[ \t]*<!-- bench:.*$", re.MULTILINE)  # a line that starts as a marker
#: the records bench/fewshot.py writes (NAME_runs.jsonl)
FEWSHOT = re.compile(r"^(fewshot[\w-]*|heldout|heldout_kinds|crossfit_builtin|codes_k8|fastfit_smoke|labelnames_[\w-]+|"
                     r"prior_sweep|recheck_[\w-]+|steps_sweep[\w-]*|study[\w-]*|wise_ft[\w-]*)$")
FEWSHOT_VIEWS = ("goal", "kinds", "misses", "systems")
#: RECORD.json of the other benches -> (the bench script, how its renderer takes the record)
JSON_RECORDS: list[tuple[re.Pattern, str, Callable]] = [
    (re.compile(r"^step_time[\w-]*$"), "step_time", lambda m, r: m.markdown(r)),
    (re.compile(r"^head_stage$"), "head_stage", lambda m, r: m.markdown(r)),
    (re.compile(r"^shipping$"), "shipping", lambda m, r: m.markdown(r)),
    (re.compile(r"^quantize[\w-]*$"), "quantize", lambda m, r: m.markdown(r)),
    (re.compile(r"^serve_load_fastapi$"), "serve_load", lambda m, r: m.markdown(r)),
    (re.compile(r"^executors$"), "executors", lambda m, r: m.markdown(r)),
    (re.compile(r"^gradient_cache$"), "gradient_cache", lambda m, r: m.markdown(r)),
    (re.compile(r"^multilabel[\w-]*$"), "multilabel", lambda m, r: m.markdown(r)),
    (re.compile(r"^distill$"), "distill", lambda m, r: m.markdown(r)),
    (re.compile(r"^head_c$"), "head_c", lambda m, r: m.markdown(r)),
    (re.compile(r"^loso[\w-]*$"), "loso", lambda m, r: m.markdown(r["rows"], r["config"]["baseline"]) + "\n"),
]

_modules: dict[str, object] = {}


def bench(script: str):
    """bench/SCRIPT.py (not a package) as a module, loaded once per build."""
    if script not in _modules:
        spec = importlib.util.spec_from_file_location(f"contrastfit_bench_{script}", ROOT / "bench" / f"{script}.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        _modules[script] = module
    return _modules[script]


def _record(file: str) -> Path:
    path = RESULTS / file
    if not path.is_file():
        raise LookupError(f"the record bench/results/{file} does not exist")
    return path


def _fewshot(name: str, view: str) -> str:
    fs = bench("fewshot")
    summary = fs.summarise(fs.read_records(_record(f"{name}_runs.jsonl")))
    if not summary["rows"]:
        raise LookupError(f"bench/results/{name}_runs.jsonl holds no finished run")
    if view == "goal":
        return fs.goal_markdown(summary, kinds=False)
    if view == "kinds":
        return fs.kinds_markdown(summary)
    if view == "misses":
        return fs.goal_statement() + "\n\nThe cells that miss part of it, each part with its number:\n\n" \
            + fs.misses_markdown(summary)
    return fs.markdown(summary, list(dict.fromkeys(r["system"] for r in summary["rows"])))


def _demote_headings(text: str) -> str:
    return re.sub(r"^#{1,6} +(.+?) *#*$", r"**\1**", text, flags=re.MULTILINE)


def render(name: str, view: str | None = None) -> str:
    """The Markdown of ``<!-- bench: NAME VIEW -->`` (see the module docstring). Raises LookupError for a
    missing record and ValueError for an unknown record or view."""
    if view == "md":
        text = _record(f"{name}.md").read_text(encoding="utf-8")
    elif name == "datasets":
        if view is not None:
            raise ValueError("`datasets` has no views")
        runs = sorted(RESULTS.glob("*_runs.jsonl"))
        if not runs:
            raise LookupError("bench/results holds no *_runs.jsonl record")
        fs = bench("fewshot")
        text = fs.datasets_markdown({p.name[: -len("_runs.jsonl")]: fs.read_records(p) for p in runs})
    elif FEWSHOT.match(name):
        if (view or "goal") not in FEWSHOT_VIEWS:
            raise ValueError(f"a few-shot record's views are {', '.join(FEWSHOT_VIEWS)} and md, not {view!r}")
        text = _fewshot(name, view or "goal")
    elif name == "validation_holdout":
        if view is not None:
            raise ValueError(f"{name} has one view (none given) and md, not {view!r}")
        module = bench("validation_holdout")
        text = module.markdown(bench("fewshot").read_records(_record(f"{name}_runs.jsonl")))
    else:
        found = next(((script, how) for pattern, script, how in JSON_RECORDS if pattern.match(name)), None)
        if found is None:
            raise ValueError(f"no bench renders a record named {name!r} (a few-shot record, datasets, "
                             f"validation_holdout, one of {', '.join(p.pattern for p, _, _ in JSON_RECORDS)}, "
                             "or view md of a committed .md)")
        if view is not None:
            raise ValueError(f"{name} has one view (none given) and md, not {view!r}")
        script, how = found
        record = json.loads(_record(f"{name}.json").read_text(encoding="utf-8"))
        text = how(bench(script), record)
    return "\n" + _demote_headings(text.strip()) + "\n"


def replace_markers(markdown: str, where: str = "page") -> str:
    """Every ``<!-- bench: ... -->`` line of a page replaced by its rendering; PluginError (one line) for a
    malformed marker, an unknown record or view, or a missing record."""
    for line in ANY_MARKER.findall(markdown):
        if not MARKER.fullmatch(line):
            raise PluginError(f"{where}: {line.strip()!r} is not a bench marker: <!-- bench: RECORD [VIEW] -->")

    def one(m: re.Match) -> str:
        try:
            return render(m.group(1), m.group(2))
        except (LookupError, ValueError) as exc:
            raise PluginError(f"{where}: {m.group(0)}: {' '.join(str(exc).split())}") from None

    return MARKER.sub(one, markdown)


def on_page_markdown(markdown: str, page, config, files) -> str:
    if "<!-- bench:" not in markdown:
        return markdown
    return replace_markers(markdown, page.file.src_uri if page is not None else "page")
