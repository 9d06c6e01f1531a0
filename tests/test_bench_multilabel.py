"""The multi-label bench's record reuse (bench/multilabel.py): a contrastfit record is read back only
while its system would train the same recipe today, on hand-made records."""

from __future__ import annotations

import pytest

from conftest import load_bench


@pytest.fixture(scope="module")
def multilabel():
    return load_bench("multilabel")


def test_systems_name_a_method_its_label_names_and_settings(multilabel):
    assert multilabel.parse_system("probe-ovr") is None and multilabel.parse_system("setfit-ovr") is None
    assert multilabel.parse_system("contrastfit") == (None, {}, {})
    assert multilabel.parse_system("contrastfit-ce-scl+wise_ft=0.5+min_steps=30") == ("ce-scl", {}, {"wise_ft": 0.5, "min_steps": 30})
    assert multilabel.parse_system("contrastfit-names") == (None, {"label_anchors": True, "label_prior": 1.0}, {})


def test_a_record_is_reused_only_while_its_system_trains_the_same_recipe(multilabel):
    today = multilabel.recipe("contrastfit", "minilm-l6", 16)
    # the multi-label default: 60 steps at 5e-5, the label names off, no weight interpolation
    assert today["method"] == "ce-scl-lr"
    assert today["training"]["min_steps"] == 60 and today["training"]["learning_rate"] == 5e-5
    assert today["training"]["wise_ft"] is None
    assert today["hparams"]["label_anchors"] is False and today["hparams"]["label_prior"] == 0.0
    record = {"system": "contrastfit", "recipe": {**today, "training": dict(today["training"])}}
    assert multilabel.stale(record, today) == []
    assert multilabel.stale({"system": "contrastfit"}, today) == ["recipe (not recorded)"]  # made before the check
    mixed = multilabel.recipe("contrastfit+wise_ft=0.5", "minilm-l6", 16)
    assert multilabel.stale(record, mixed) == ["training.wise_ft"]
    names = multilabel.recipe("contrastfit-names", "minilm-l6", 16)
    assert multilabel.stale(record, names) == ["hparams.label_anchors", "hparams.label_prior"]
    assert multilabel.stale({"system": "probe-ovr"}, multilabel.recipe("probe-ovr", "minilm-l6", 16)) == []


def test_a_redone_run_replaces_its_record_in_the_summary(multilabel):
    def rec(value):
        scores = {"micro_f1": value, "macro_f1": value, "subset_accuracy": value}
        return {"shots": 8, "sample": 0, "system": "contrastfit", "train_s": 1.0, "at_0.5": scores, "tuned": scores}

    summary = multilabel.summarise([rec(0.5), rec(0.7)])
    row = summary["K=8"]["contrastfit"]
    assert row["samples"] == 1 and row["tuned.micro_f1"]["mean"] == pytest.approx(0.7)
