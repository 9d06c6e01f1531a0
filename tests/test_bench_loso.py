"""bench/loso.py: the leave-one-set-out table of a recipe choice, on hand-made records."""

from __future__ import annotations

import pytest

from conftest import load_bench


@pytest.fixture(scope="module")
def loso():
    return load_bench("loso")


def _records(accuracies: dict[str, dict[str, list[float]]]) -> list[dict]:
    return [{"data": data, "shots": 8, "sample": s, "system": system, "accuracy": a}
            for data, systems in accuracies.items() for system, accs in systems.items() for s, a in enumerate(accs)]


def test_each_set_is_scored_with_the_choice_made_on_the_others(loso):
    records = _records({
        "a": {"short": [0.80, 0.82], "long": [0.70, 0.72]},
        "b": {"short": [0.60, 0.62], "long": [0.58, 0.60]},
        "c": {"short": [0.50, 0.52], "long": [0.70, 0.74]},  # only here does long win
    })
    records.append({"data": "c", "shots": 8, "sample": 2, "system": "long", "accuracy": 0.9})  # unpaired: left out
    table = loso.cells(records, ["short", "long"])
    assert sorted(table["c"]) == [(8, 0), (8, 1)]
    rows = {r["held_out"]: r for r in loso.leave_one_set_out(table, ["short", "long"], "short")}
    # a left out: on b and c long wins on the mean (0.655 vs 0.56), and loses 10 points on a
    assert rows["a"]["chosen"] == "long" and rows["a"]["best"] == "short"
    assert rows["a"]["gap_to_best"] == pytest.approx(-0.10) and rows["a"]["vs_baseline"] == pytest.approx(-0.10)
    # c left out: short wins on a and b; on c that costs 21 points against long
    assert rows["c"]["chosen"] == "short" and rows["c"]["gap_to_best"] == pytest.approx(-0.21)
    assert rows["c"]["vs_baseline"] == 0 and rows["c"]["p_vs_baseline"] is None
    table_md = loso.markdown(list(rows.values()), "short")
    assert "| a | 2 | long | 71.0 | short (81.0) | -10.0 | 81.0 | -10.0" in table_md
    assert table_md.splitlines()[-1].startswith("| mean |")


def test_the_latest_record_of_a_cell_wins_and_other_k_can_be_left_out(loso):
    records = _records({"a": {"x": [0.5], "y": [0.6]}, "b": {"x": [0.7], "y": [0.4]}})
    records.append({"data": "a", "shots": 8, "sample": 0, "system": "x", "accuracy": 0.9})  # redone later
    records.append({"data": "a", "shots": 16, "sample": 0, "system": "x", "accuracy": 0.1})
    records.append({"data": "a", "shots": 16, "sample": 0, "system": "y", "accuracy": 0.1})
    assert loso.cells(records, ["x", "y"], shots=[8])["a"] == {(8, 0): {"x": 0.9, "y": 0.6}}
    assert set(loso.cells(records, ["x", "y"])["a"]) == {(8, 0), (16, 0)}
