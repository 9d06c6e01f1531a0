"""The report's analyses as registered units: the registry the config reads, a new analysis added as
one class, the options schemas, skipping with notes, and each run's files read once.

The experiment folders are the synthetic ones of tests/test_report.py (fixed random numbers, the
runner's layout)."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from contrastfit.errors import ConfigError, ContrastfitError
from contrastfit.experiments import analyses as registry
from contrastfit.experiments.analyses import Analysis, AnalysisResult, Skip, available_analyses, register_analysis
from contrastfit.experiments.analyses import base as analyses_base
from contrastfit.experiments.page import Table
from contrastfit.experiments.records import AnalysisArrays, ExperimentRun, load_records
from contrastfit.experiments.report import write_report
from contrastfit.schema import Schema
from test_report import SHOTS, VARIANTS, build_experiment

NAMES = ["tsne", "alignment_uniformity", "distance_groups", "error_analysis", "learning_curves", "confusion",
         "attributions"]


@pytest.fixture()
def scratch_registry():
    """Analyses registered inside a test are removed after it."""
    before = dict(analyses_base._REGISTRY)
    yield
    analyses_base._REGISTRY.clear()
    analyses_base._REGISTRY.update(before)


def _section(text: str, title: str) -> str:
    """The Markdown of one ``## title`` section."""
    start = text.index(f"## {title}\n")
    end = text.find("\n## ", start + 1)
    return text[start:] if end < 0 else text[start:end]


# ---------------------------------------------------------------------------------------------------

def test_available_analyses_are_the_config_names_in_report_order():
    assert available_analyses() == NAMES
    always = [c.name for c in registry.registered_analyses() if not c.configurable]
    assert always == ["selection", "imbalance", "metric_vs_setting"]
    assert registry.get_analysis("tsne").Options().max_points == 2000
    with pytest.raises(ConfigError, match=r"unknown analysis 'tnse' \(available: tsne, alignment_uniformity"):
        registry.get_analysis("tnse")


def test_register_analysis_refuses_bad_classes(scratch_registry):
    def make(**attrs):
        return type("X", (Analysis,), {"title": "X", **attrs})

    with pytest.raises(RuntimeError, match="'tsne' is empty, not snake_case or taken"):
        register_analysis(make(name="tsne"))
    with pytest.raises(RuntimeError, match="empty"):
        register_analysis(make(name=""))
    with pytest.raises(RuntimeError, match="snake_case"):
        register_analysis(make(name="Bad-Name"))
    with pytest.raises(RuntimeError, match="no title"):
        register_analysis(make(name="untitled", title=""))
    with pytest.raises(RuntimeError, match="needs unknown input.*'embeddings.npy'"):
        register_analysis(make(name="needy", needs=("embeddings.npy",)))
    with pytest.raises(RuntimeError, match="Options must be a contrastfit.schema.Schema"):
        register_analysis(make(name="optioned", Options=dict))
    with pytest.raises(TypeError):
        register_analysis(object)
    assert available_analyses() == NAMES


@dataclass
class _Counts(AnalysisResult):
    counts: dict[str, int]
    header: str


def _register_run_counts() -> type[Analysis]:
    """A new analysis written the way the report's own are: runs per variant, a table and a figure."""
    from contrastfit.evaluation.plots import plot_distance_groups

    @register_analysis
    class RunCounts(Analysis):
        name = "run_counts"
        title = "Runs per variant"
        order = 95  # after confusion (90), before attributions (100)
        needs = ("log_history",)

        class Options(Schema):
            header: str = "runs"

        def compute(self, runs, options):
            counts = {v: sum(len(runs.of(s, v)) for s in runs.settings) for v in runs.variants}
            return _Counts(counts, options.header, notes=["counted every setting"])

        def figures(self, result, out):
            fig = out.draw("run_counts", "Runs per variant.", lambda path: plot_distance_groups(
                {v: [{"group": "all", "accuracy": n}] for v, n in result.counts.items()}, path))
            return [fig] if fig else []

        def tables(self, result):
            return [Table(["variant", result.header], [[v, str(n)] for v, n in result.counts.items()])]

    return RunCounts


def test_a_new_analysis_is_one_registered_class(tmp_path, scratch_registry):
    _register_run_counts()
    assert available_analyses() == [*NAMES[:-1], "run_counts", NAMES[-1]]  # by its order, 95
    folder = tmp_path / "exp"
    build_experiment(folder, seed=1, with_npz=False, extra_config={"analyses": ["confusion", "run_counts"]})
    paths = write_report(folder, {"run_counts": {"header": "finished runs"}})
    text = paths["markdown"].read_text(encoding="utf-8")
    section = _section(text, "Runs per variant")
    assert "> **Note:** counted every setting" in section
    for _, variant, *_ in VARIANTS:  # 2 settings x 3 seeds of every variant
        assert re.search(rf"^\| {re.escape(variant)} +\| 6 +\|$", section, re.M), variant
    assert "| variant" in section and "finished runs" in section
    assert paths["figures"]["run_counts"] == folder / "figures" / "run_counts.png"
    assert "](figures/run_counts.png)" in section
    assert paths["html"].read_text(encoding="utf-8").count("data:image/png;base64,") == len(paths["figures"])
    # sections in report order: confusion (90) before the new one (95)
    assert text.index("## Confusion matrices") < text.index("## Runs per variant")
    # left out when the experiment does not list it
    (folder / "experiment.json").write_text(json.dumps({**json.loads((folder / "experiment.json").read_text()),
                                                        "analyses": ["confusion"]}))
    assert "Runs per variant" not in write_report(folder)["markdown"].read_text(encoding="utf-8")


def test_a_broken_or_skipping_analysis_becomes_a_note(tmp_path, scratch_registry):
    def fail(exc):
        def compute(self, runs, options):
            raise exc
        return compute

    register_analysis(type("Broken", (Analysis,), {"name": "broken", "title": "Broken analysis",
                                                    "compute": fail(RuntimeError("boom"))}))
    register_analysis(type("Skipping", (Analysis,), {"name": "skipping", "title": "Skipping analysis",
                                                      "compute": fail(Skip("nothing to see for these runs"))}))

    @register_analysis
    class BadFigure(Analysis):
        name = "bad_figure"
        title = "Bad figure"

        def compute(self, runs, options):
            return AnalysisResult()

        def figures(self, result, out):
            fig = out.draw("bad", "never drawn", lambda path: (_ for _ in ()).throw(ValueError("no data")))
            return [fig] if fig else []

        def tables(self, result):
            return [Table(["a"], [["1"]])]

    folder = tmp_path / "exp"
    build_experiment(folder, seed=2, settings=SHOTS[:1], with_npz=False,
                     extra_config={"analyses": ["broken", "skipping", "bad_figure", "confusion"]})
    paths = write_report(folder)
    text = paths["markdown"].read_text(encoding="utf-8")
    assert "> **Note:** Broken analysis skipped: RuntimeError: boom" in _section(text, "Broken analysis")
    assert "> **Note:** nothing to see for these runs" in _section(text, "Skipping analysis")
    bad = _section(text, "Bad figure")
    assert "figure bad skipped: ValueError: no data" in bad and "| a " in bad  # the table is still there
    assert "bad" not in paths["figures"] and "confusion_ce" in paths["figures"]


def test_report_options_are_checked(tmp_path):
    folder = tmp_path / "exp"
    build_experiment(folder, seed=3, settings=SHOTS[:1], with_npz=False, extra_config={"analyses": ["confusion"]})
    config = json.loads((folder / "experiment.json").read_text())

    def with_config(**changes):
        (folder / "experiment.json").write_text(json.dumps({**config, **changes}))

    where = re.escape(str(folder / "experiment.json"))
    with_config(top_k=0)
    with pytest.raises(ConfigError, match=rf"^{where}: top_k must be > 0, got 0$"):
        write_report(folder)
    with_config(top_k=True)
    with pytest.raises(ConfigError, match=rf"^{where}: top_k"):
        write_report(folder)
    with_config(analyses=["tsne", "nope"])
    with pytest.raises(ConfigError, match=rf"^{where}: analyses: .*unknown analyses nope \(available: tsne, "):
        write_report(folder)
    with_config(metrics="accuracy")
    with pytest.raises(ConfigError, match=rf"^{where}: metrics"):
        write_report(folder)
    with_config(analyses="confusion")  # a single name is a list of one
    assert set(write_report(folder)["figures"]) == {f"confusion_{v}" for v in ("ce", "ce-scl_temperature=0.1",
                                                                               "ce-scl_temperature=0.3")}
    with_config()
    with pytest.raises(ConfigError, match=r"^report options: tsne: unknown key 'max_point' \(allowed: max_points, "
                                          r"seed\)$"):
        write_report(folder, {"tsne": {"max_point": 5}})
    with pytest.raises(ConfigError, match=r"^report options: distance_groups: groups must be > 0, got 0$"):
        write_report(folder, {"distance_groups": {"groups": 0}})
    with pytest.raises(ConfigError, match=r"^report options: error_analysis: feature_rows must be int, got '5'$"):
        write_report(folder, {"error_analysis": {"feature_rows": "5"}})
    with pytest.raises(ConfigError, match=r"unknown analysis 'nope'"):
        write_report(folder, {"nope": {}})
    (folder / "experiment.json").write_text("{not json")
    with pytest.raises(ContrastfitError, match="not valid JSON"):
        write_report(folder)


def test_analysis_options_change_what_is_computed(tmp_path):
    folder = tmp_path / "exp"
    build_experiment(folder, seed=4, settings=SHOTS[:1], extra_config={"analyses": ["tsne", "distance_groups"]})
    paths = write_report(folder, {"tsne": {"max_points": 30}, "distance_groups": {"groups": 4}})
    text = paths["markdown"].read_text(encoding="utf-8")
    assert text.count("a random 30 of 40 points") == 2 * len(VARIANTS)  # alt text and caption of each t-SNE
    section = _section(text, "Accuracy by distance to the mean embedding")
    rows = [line for line in section.splitlines() if re.match(r"\| \d", line)]
    assert [r.split("|")[1].strip() for r in rows] == ["1 (near)", "2", "3", "4 (far)"]
    assert all(r.split("|")[2].strip() == "10" for r in rows)  # 40 test items in 4 groups


def test_each_analysis_file_is_read_once(tmp_path, monkeypatch):
    folder = tmp_path / "exp"
    build_experiment(folder, seed=5, settings=SHOTS[:1],
                     extra_config={"analyses": ["alignment_uniformity", "distance_groups", "error_analysis"]})
    reads: dict[Path, int] = {}
    load = AnalysisArrays.load.__func__

    def counting(cls, path):
        reads[path] = reads.get(path, 0) + 1
        return load(cls, path)

    monkeypatch.setattr(AnalysisArrays, "load", classmethod(counting))
    text = write_report(folder)["markdown"].read_text(encoding="utf-8")
    assert "Error analysis by word groups" in text and "| 1 (near)" in text and "| shots=16 " in text
    assert len(reads) == len(VARIANTS) * 3 and set(reads.values()) == {1}


def test_a_need_no_run_meets_skips_the_analysis_with_a_note(tmp_path):
    folder = tmp_path / "exp"
    build_experiment(folder, seed=6, settings=SHOTS[:1], with_npz=False,
                     extra_config={"analyses": ["attributions", "tsne"]})
    text = write_report(folder)["markdown"].read_text(encoding="utf-8")
    assert ("> **Note:** Token attributions: no run has attributions.json (written for the first sample and seed of "
            "the first setting when `attributions` is among the analyses): skipped.") in text
    assert "> **Note:** t-SNE of test embeddings: no run has runs/<run_id>/analysis.npz: skipped." in text


# ---------------------------------------------------------------------------------------------------
# The run record

def _result(**changes) -> dict:
    result = {
        "method": "ce-scl", "hparams": {"temperature": 0.1}, "model": "tiny", "seed": 2,
        "metrics": {"validation": {"accuracy": 0.75, "loss": 0.5},
                    "test": {"accuracy": 0.8, "f1": 0.7, "per_class": {"neg": {"f1": 0.6, "support": 3}},
                             "confusion_matrix": [[3, 1], [0, 4]]}},
        "timings": {"train_s": 12.5}, "training": {"steps": 60},
        "log_history": [{"loss": 1.0, "step": 5}, "not an entry"],
        "data": {"name": "toy", "task": "classification", "label_names": ["neg", "pos"], "test_hash": "abc"},
        "tags": {"variant": "ce-scl[temperature=0.1]", "setting": "shots=4", "sample": 3, "params": {"shots": 4},
                 "run_id": "r1"},
    }
    result.update(changes)
    return result


def test_run_record_reads_a_result_once_into_typed_fields(tmp_path):
    (tmp_path / "runs" / "r1").mkdir(parents=True)
    np.savez(tmp_path / "runs" / "r1" / "analysis.npz", embeddings=np.eye(4, 3), labels=np.array([0, 1, 0, 1]),
             predictions=np.array([0, 1, 1, 1]))
    r = ExperimentRun.from_result(_result(), tmp_path)
    assert (r.run_id, r.method, r.variant, r.setting, r.sample, r.seed, r.task) == (
        "r1", "ce-scl", "ce-scl[temperature=0.1]", "shots=4", 3, 2, "classification")
    assert r.key == (3, 2) and r.params == {"shots": 4} and r.hparams == {"temperature": 0.1}
    assert r.metrics == {"validation": {"accuracy": 0.75, "loss": 0.5}, "test": {"accuracy": 0.8, "f1": 0.7}}
    assert r.score("test", "f1") == 0.7 and r.score("test", "mcc") is None and r.score("train", "accuracy") is None
    assert r.per_class == {"test": {"neg": {"f1": 0.6, "support": 3}}}
    assert r.confusion["test"].tolist() == [[3, 1], [0, 4]]
    assert r.label_names == ("neg", "pos") and r.test_hash == "abc" and r.train_s == 12.5
    assert r.log_history == ({"loss": 1.0, "step": 5},) and r.has_losses and r.training == {"steps": 60}
    assert r.analysis_path == tmp_path / "runs" / "r1" / "analysis.npz" and r.attributions_path is None
    arrays = r.arrays()
    assert arrays.correct.tolist() == [True, True, False, True] and r.arrays() is arrays
    assert arrays.distance_reference()[1] is False  # no embeddings_raw: the normalised ones, and it says so


def test_run_record_defaults_and_errors(tmp_path):
    bare = ExperimentRun.from_result({"method": "ce", "seed": 0, "metrics": {"test": {"pearson": 0.8, "mse": 0.2}}})
    assert (bare.variant, bare.setting, bare.sample, bare.run_id, bare.task) == ("ce", "full", 0, None, "regression")
    assert bare.label_names is None and bare.analysis_path is None and not bare.has_losses and bare.arrays() is None
    # a run id that is not a plain folder name never points outside runs/
    assert ExperimentRun.from_result(_result(tags={"run_id": "../r1"}), tmp_path).analysis_path is None
    with pytest.raises(ContrastfitError, match=r"^run r1: metrics is not a mapping"):
        ExperimentRun.from_result(_result(metrics=[0.8]))
    with pytest.raises(ContrastfitError, match=r"^run r1: metrics.test is not a mapping"):
        ExperimentRun.from_result(_result(metrics={"test": 0.8}))
    with pytest.raises(ContrastfitError, match=r"^run r1: tags.sample is not an integer \(got 'x'\)"):
        ExperimentRun.from_result(_result(tags={"run_id": "r1", "sample": "x"}))
    with pytest.raises(ContrastfitError, match=r"^run r1: log_history is not a list"):
        ExperimentRun.from_result(_result(log_history="loss=1"))
    # an unreadable analysis.npz is no arrays, not an error
    (tmp_path / "runs" / "r1").mkdir(parents=True)
    (tmp_path / "runs" / "r1" / "analysis.npz").write_bytes(b"not a zip")
    assert ExperimentRun.from_result(_result(), tmp_path).arrays() is None


def test_load_records_reads_the_store(tmp_path):
    folder = tmp_path / "exp"
    results = build_experiment(folder, seed=8, settings=SHOTS[:1], with_npz=False)
    records = load_records(folder)
    assert [r.run_id for r in records] == [r["tags"]["run_id"] for r in results]
    assert {r.variant for r in records} == {v for _, v, *_ in VARIANTS}
