"""What an analysis of an experiment is, and the registry that the report and the config read.

An analysis is a class that registers itself with :func:`register_analysis`, like a method does::

    @register_analysis
    class Calibration(Analysis):
        name = "calibration"                  # the name a config lists under `analyses:`
        title = "Calibration"                 # its section heading in the report
        order = 75                            # where its section goes (smaller first)
        needs = ("classification", ANALYSIS_FILE)

        class Options(Schema):                # its own options, with defaults (contrastfit.schema)
            bins: PositiveInt = 10

        def compute(self, runs, options):     # the numbers: any object; raise Skip("why") to skip
            ...
        def figures(self, result, out):       # PNGs, through out.draw(stem, caption, plot)
            ...
        def tables(self, result):             # page.Table objects
            ...

One file per analysis in this package; importing the package imports every module in it, so a new
file is all it takes (no list to extend). The report runs each registered analysis that the
experiment asks for (``configurable`` ones, named in ``analyses:``; the others always run), in
``order``; a section is left out when :meth:`Analysis.compute` returns None.

``needs`` names what the analysis reads from the runs; when no run has it the report skips the
analysis with a note saying so, without calling it: ``"classification"`` (one class per text: not a
regression target, not label sets),
``analysis.npz`` (test embeddings and predictions), ``attributions.json`` (word attributions),
``"log_history"`` (logged losses), ``"confusion_matrix"`` (a test confusion matrix).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from ...errors import ConfigError
from ...schema import Schema, parse
from ..page import Figure, Table
from ..records import ANALYSIS_FILE, ATTRIBUTIONS_FILE, RUNS_DIR, ExperimentRuns

__all__ = [
    "Analysis", "AnalysisResult", "FigureWriter", "NEEDS", "Skip", "available_analyses", "get_analysis",
    "parse_options", "register_analysis", "registered_analyses", "unmet_need",
]


class Skip(Exception):
    """Raised by :meth:`Analysis.compute` when the runs do not allow the analysis; the message is
    the note the report shows instead."""


@dataclass(kw_only=True)
class AnalysisResult:
    """Base of the objects :meth:`Analysis.compute` returns: ``notes`` are shown at the top of the
    analysis' section (what was left out and why)."""

    notes: list[str] = field(default_factory=list)


class NoOptions(Schema):
    """An analysis without options."""


class Analysis:
    """One analysis of an experiment's runs; see the module docstring."""

    name: ClassVar[str] = ""
    title: ClassVar[str] = ""
    order: ClassVar[int] = 1000
    configurable: ClassVar[bool] = True
    needs: ClassVar[tuple[str, ...]] = ()
    Options: ClassVar[type[Schema]] = NoOptions

    def compute(self, runs: ExperimentRuns, options: Any) -> Any:
        """The analysis' numbers for ``runs`` (None: nothing to show, no section)."""
        raise NotImplementedError

    def figures(self, result: Any, out: FigureWriter) -> list[Figure]:
        """Draw the figures of ``result`` with ``out.draw`` and return them."""
        return []

    def tables(self, result: Any) -> list[Table]:
        """The tables of ``result``."""
        return []


#: What an analysis may need from the runs: ``{need: (is it there?, what the note says otherwise)}``.
NEEDS: dict[str, tuple[Callable[[ExperimentRuns], bool], str]] = {
    "classification": (lambda runs: not (runs.regression or runs.multi_label),
                       "needs a classification task with one class per text"),
    ANALYSIS_FILE: (lambda runs: any(r.analysis_path is not None for r in runs.records),
                    f"no run has {RUNS_DIR}/<run_id>/{ANALYSIS_FILE}"),
    ATTRIBUTIONS_FILE: (lambda runs: any(r.attributions_path is not None for r in runs.records),
                        f"no run has {ATTRIBUTIONS_FILE} (written for the first sample and seed of the first "
                        "setting when `attributions` is among the analyses)"),
    "log_history": (lambda runs: any(r.has_losses for r in runs.records), "no run logged a loss"),
    "confusion_matrix": (lambda runs: any("test" in r.confusion for r in runs.records),
                         "no run recorded a test confusion matrix"),
}

_REGISTRY: dict[str, type[Analysis]] = {}


def register_analysis(cls: type[Analysis]) -> type[Analysis]:
    """Class decorator: make ``cls`` available under ``cls.name``."""
    if not (isinstance(cls, type) and issubclass(cls, Analysis)):
        raise TypeError(f"register_analysis needs an Analysis subclass, got {cls!r}")
    if not cls.name or not re.fullmatch(r"[a-z][a-z0-9_]*", cls.name) or cls.name in _REGISTRY:
        raise RuntimeError(f"analysis name {cls.name!r} is empty, not snake_case or taken")
    if not cls.title:
        raise RuntimeError(f"analysis {cls.name!r} has no title")
    unknown = [n for n in cls.needs if n not in NEEDS]
    if unknown:
        raise RuntimeError(f"analysis {cls.name!r} needs unknown input(s) {unknown} (known: {', '.join(NEEDS)})")
    if not (isinstance(cls.Options, type) and issubclass(cls.Options, Schema)):
        raise RuntimeError(f"analysis {cls.name!r}: Options must be a contrastfit.schema.Schema subclass")
    _REGISTRY[cls.name] = cls
    return cls


def registered_analyses() -> list[type[Analysis]]:
    """Every registered analysis class, in report order."""
    return sorted(_REGISTRY.values(), key=lambda c: (c.order, c.name))


def available_analyses() -> list[str]:
    """The analysis names a config may list under ``analyses:`` (the configurable ones), in report order."""
    return [c.name for c in registered_analyses() if c.configurable]


def get_analysis(name: str) -> type[Analysis]:
    try:
        return _REGISTRY[name]
    except KeyError:
        raise ConfigError(f"unknown analysis '{name}' (available: {', '.join(available_analyses())})") from None


def parse_options(name: str, raw: Mapping[str, Any] | None, where: str = "report options") -> Any:
    """The options of analysis ``name`` from ``raw`` (defaults for what it leaves out), checked
    against its ``Options`` schema; a one-line :class:`ConfigError` naming ``where`` otherwise."""
    cls = get_analysis(name)
    return parse(cls.Options, dict(raw or {}), where=f"{where}: {name}")


def unmet_need(cls: type[Analysis], runs: ExperimentRuns) -> str | None:
    """Why ``cls`` cannot run on ``runs`` (the first of its needs that no run meets), or None."""
    for need in cls.needs:
        present, reason = NEEDS[need]
        if not present(runs):
            return reason
    return None


class FigureWriter:
    """Writes the figures of a report under one folder, each PNG name unique (a slug of its stem;
    ``_2``, ``_3`` ... on a clash). A figure that fails to draw becomes a note, not an error."""

    def __init__(self, folder: Path) -> None:
        self.folder = Path(folder)
        self.notes: list[str] = []
        self._names: set[str] = set()

    def path(self, stem: str) -> Path:
        slug = re.sub(r"[^A-Za-z0-9_.=-]+", "_", stem).strip("_.") or "figure"
        name, i = slug, 2
        while name in self._names:
            name, i = f"{slug}_{i}", i + 1
        self._names.add(name)
        return self.folder / f"{name}.png"

    def draw(self, stem: str, caption: str, plot: Callable[[Path], Any], group: str | None = None) -> Figure | None:
        """Call ``plot(path)`` (a :mod:`contrastfit.evaluation.plots` function writing ``path``);
        the :class:`~contrastfit.experiments.page.Figure`, or None (and a note) when it fails."""
        path = self.path(stem)
        try:
            plot(path)
        except Exception as exc:  # one broken figure must not cost the report
            self.notes.append(f"figure {path.stem} skipped: {type(exc).__name__}: {exc}")
            return None
        return Figure(path, caption, group=group)
