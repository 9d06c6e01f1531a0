"""The few-shot bench's summary and its goal table (bench/fewshot.py), on hand-made records: the
README's table comes from this code, so its arithmetic and its verdicts are tested here."""

from __future__ import annotations

import numpy as np
import pytest

from conftest import load_bench


@pytest.fixture(scope="module")
def fewshot():
    return load_bench("fewshot")


def _records(data: str, shots: int, accuracies: dict[str, list[float]], seconds: dict[str, float]) -> list[dict]:
    return [{"data": data, "shots": shots, "sample": s, "system": system, "accuracy": a, "macro_f1": a,
             "train_s": seconds[system]}
            for system, accs in accuracies.items() for s, a in enumerate(accs)]


def _row(table: str, data: str, shots: int) -> list[str]:
    (line,) = [ln for ln in table.splitlines() if ln.startswith(f"| {data} | {shots} |")]
    return [c.strip() for c in line.strip("|").split("|")]


def test_a_cell_that_meets_every_goal(fewshot):
    recs = _records("mr", 16, {"zero-shot": [0.6] * 3, "linear-probe": [0.60, 0.62, 0.64],
                               "setfit-lib": [0.64, 0.66, 0.68], "default": [0.70, 0.71, 0.72]},
                    {"zero-shot": 0, "linear-probe": 1, "setfit-lib": 40, "default": 10})
    summary = fewshot.summarise(recs)
    row = {r["system"]: r for r in summary["rows"]}["default"]
    assert row["vs_setfit"]["mean_diff"] == pytest.approx(5.0)
    assert row["vs_probe"]["mean_diff"] == pytest.approx(9.0)
    cells = _row(fewshot.goal_markdown(summary), "mr", 16)
    assert cells[2] == "3" and cells[6] == "**71.0 ± 1.0 (10 s)**"
    assert cells[7].startswith("+5.0") and cells[8].startswith("+9.0")
    assert cells[9] == "0.25x"
    assert cells[10] == "met"


def test_each_missed_goal_is_named_with_its_number(fewshot, monkeypatch):
    monkeypatch.setattr(fewshot, "class_count", lambda data: None)  # a set whose classes the bench cannot read
    recs = _records("mr", 4, {"linear-probe": [0.60, 0.60, 0.60], "setfit-lib": [0.60, 0.61, 0.62],
                              "default": [0.58, 0.62, 0.66]},
                    {"linear-probe": 1, "setfit-lib": 6, "default": 9})
    goal = _row(fewshot.goal_markdown(fewshot.summarise(recs)), "mr", 4)[10]
    assert "floor" not in goal  # 62.0 is above the best rival (SetFit, 61.0)
    assert "std 4.0 > 1.0 + 1 (p=" in goal  # with the paired test of the two stds
    assert "time 1.50x" in goal  # SetFit's step count unknown: the time goal holds
    behind = _records("mr", 4, {"linear-probe": [0.60, 0.60, 0.60], "setfit-lib": [0.70, 0.71, 0.72],
                                "default": [0.68, 0.69, 0.70]},
                      {"linear-probe": 1, "setfit-lib": 6, "default": 1})
    assert _row(fewshot.goal_markdown(fewshot.summarise(behind)), "mr", 4)[10] == "floor: -2.0 vs SetFit"
    near = _records("mr", 4, {"linear-probe": [0.60, 0.60, 0.60], "setfit-lib": [0.70, 0.71, 0.72],
                              "default": [0.695, 0.705, 0.715]}, {"linear-probe": 1, "setfit-lib": 6, "default": 1})
    assert _row(fewshot.goal_markdown(fewshot.summarise(near)), "mr", 4)[10] == "met"  # 0.5 below: within the floor


def test_setfit_records_without_a_step_count_get_their_defaults_steps(fewshot, monkeypatch):
    """Older SetFit records kept no step count: its defaults' count on K examples a class stands in (2 classes:
    3 steps at K = 4, 34 at K = 16; 6 classes at K = 8: 120), so the time goal applies only past 30 of them."""
    monkeypatch.setattr(fewshot, "class_count", {"boolq": 2, "trec": 6}.get)
    assert [fewshot.setfit_default_steps("boolq", k) for k in (4, 8, 16)] == [3, 9, 34]
    assert fewshot.setfit_default_steps("trec", 8) == 120 and fewshot.setfit_default_steps("other", 8) is None
    times = {"linear-probe": 1, "setfit-lib": 10, "default": 9}
    recs = [r for data, k in (("boolq", 8), ("trec", 8)) for r in _records(
        data, k, {"linear-probe": [0.6] * 3, "setfit-lib": [0.6, 0.61, 0.62], "default": [0.7, 0.71, 0.72]}, times)]
    table = fewshot.goal_markdown(fewshot.summarise(recs))
    assert _row(table, "boolq", 8)[10] == "met"  # SetFit's 9 steps: no time goal
    assert _row(table, "trec", 8)[10] == "time 0.90x"  # its 120 steps: at most half its time


def test_the_time_goal_holds_only_where_setfit_trains_more_than_30_steps(fewshot):
    recs = _records("mr", 8, {"linear-probe": [0.6] * 3, "setfit-lib": [0.6, 0.61, 0.62], "default": [0.7, 0.71, 0.72]},
                    {"linear-probe": 1, "setfit-lib": 10, "default": 9})
    for r in recs:
        r["steps"] = 20 if r["system"] == "setfit-lib" else 15
    assert _row(fewshot.goal_markdown(fewshot.summarise(recs)), "mr", 8)[10] == "met"
    for r in recs:
        r["steps"] = 40 if r["system"] == "setfit-lib" else 15
    assert _row(fewshot.goal_markdown(fewshot.summarise(recs)), "mr", 8)[10] == "time 0.90x"


def test_the_kinds_table_averages_each_kind_ranks_the_systems_and_checks_the_means(fewshot):
    recs = (_records("mr", 8, {"linear-probe": [0.60, 0.60], "setfit-lib": [0.62, 0.62], "default": [0.70, 0.70]},
                     {"linear-probe": 1, "setfit-lib": 10, "default": 1})
            + _records("trec", 8, {"linear-probe": [0.50, 0.50], "setfit-lib": [0.80, 0.80], "default": [0.70, 0.70]},
                       {"linear-probe": 1, "setfit-lib": 10, "default": 1})
            + _records("mr:codes", 8, {"default": [0.66, 0.66]}, {"default": 1}))
    table = fewshot.goal_markdown(fewshot.summarise(recs))
    kinds = {c[0]: c for c in (_cells(ln) for ln in table.splitlines() if ln.startswith("| ")) if len(c) == 8}
    assert kinds["sentiment"][1:6] == ["1", "70.0", "60.0", "62.0", "+8.0 (1)"]
    assert kinds["question type"][5:8] == ["-10.0 (1)", "+20.0 (1)", "1"]  # 10 below SetFit: the floor missed
    assert kinds["sentiment, label codes"][1:3] == ["1", "66.0"]
    assert kinds["**all**"][1:3] == ["3", "68.7"]
    assert "default 1.50, probe 3.00, SetFit 1.50" in table  # ranks over mr and trec, where all three ran
    assert "the default is -1.0 against SetFit (goal +3: missed by 4.0)" in table
    assert "the default is +15.0 against probe (goal +5: met)" in table


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def test_the_paired_std_test_is_pitman_morgans(fewshot):
    import numpy as np
    from scipy import stats

    rng = np.random.default_rng(0)
    for n in (3, 5, 8):
        b = rng.normal(60, 3, size=n)
        a = 0.8 * b + rng.normal(14, 2, size=n)  # correlated through the shared sample, another spread
        # the textbook form: t = (F - 1) sqrt(n - 2) / (2 sqrt(F (1 - r^2))), F the variance ratio
        F, r = a.var(ddof=1) / b.var(ddof=1), np.corrcoef(a, b)[0, 1]
        t = (F - 1) * np.sqrt(n - 2) / (2 * np.sqrt(F * (1 - r ** 2)))
        assert fewshot.paired_std_test(a, b) == pytest.approx(2 * stats.t.sf(abs(t), n - 2), rel=1e-9)
    b = np.array([60.0, 62.0, 64.0, 66.0])
    assert fewshot.paired_std_test(b + 3, b) is None  # the same spread, shifted: nothing to test
    assert fewshot.paired_std_test(b[:2] * 2, b[:2]) is None  # two samples
    assert fewshot.paired_std_test(2 * b, b) < 0.01  # twice the spread on every sample


def test_a_skipped_setfit_and_the_ceiling_are_stated(fewshot):
    recs = _records("bbc-news", 16, {"linear-probe": [0.94, 0.95, 0.96], "default": [0.96, 0.96, 0.96]},
                    {"linear-probe": 1, "default": 30})
    recs.append({"data": "bbc-news", "shots": 16, "sample": 0, "system": "setfit-lib",
                 "skipped": "SetFit's default would take 320 steps (> --setfit-max-steps 100)"})
    recs.append({"data": "bbc-news", "shots": None, "sample": 0, "system": "ceiling", "accuracy": 0.975,
                 "macro_f1": 0.97, "train_s": 500, "train_size": 1699, "steps": 319})
    summary = fewshot.summarise(recs)
    assert summary["ceilings"]["bbc-news"]["accuracy"] == 0.975
    assert not any(r["system"] == "ceiling" for r in summary["rows"])  # not a few-shot cell
    table = fewshot.goal_markdown(summary)
    cells = _row(table, "bbc-news", 16)
    assert cells[5] == "not run: SetFit's default would take 320 steps (> --setfit-max-steps 100)"
    assert cells[8].startswith("+1.0") and cells[10] == "met"  # the probe's margin is a goal on the mean, not a cell
    # the line says whether the ceiling's run mixed its encoder with the pretrained one (the default since WiSE-FT)
    assert ("Ceiling, bbc-news: the default recipe on the whole training split (1699 examples, 319 steps, "
            "no weight interpolation): 97.5%") in table
    recs[-1]["training"] = {"wise_ft": {"alpha": 0.5, "tensors": 100}}
    assert "(1699 examples, 319 steps, --wise-ft 0.5): 97.5%" in fewshot.goal_markdown(fewshot.summarise(recs))


def test_no_verdict_before_two_paired_samples(fewshot):
    recs = _records("mr", 8, {"linear-probe": [0.6, 0.6], "setfit-lib": [0.6], "default": [0.7, 0.7]},
                    {"linear-probe": 1, "setfit-lib": 20, "default": 5})
    cells = _row(fewshot.goal_markdown(fewshot.summarise(recs)), "mr", 8)
    assert cells[5] == "60.0 ± 0.0 (20 s, n=1)"  # fewer samples than the default's: said
    assert cells[7] == "+10.0" and cells[8].startswith("+10.0")  # on the one shared sample: no test
    assert cells[10] == "–"  # one sample against SetFit: no verdict yet


def test_a_setfit_method_run_skipped_for_a_smaller_step_cap_is_redone(fewshot):
    # contrastfit's own `setfit` has no step cap: it is still skipped over the cap, and redone under a larger one
    base = {"data": "bbc-news", "shots": 8, "system": "setfit"}
    old = {**base, "sample": 0, "skipped": "SetFit's default would take 80 steps (> --setfit-max-steps 40)"}
    new = {**base, "sample": 1, "skipped": "SetFit's default would take 80 steps (> --setfit-max-steps 40)",
           "setfit_steps": 80}
    big = {**base, "sample": 2, "skipped": "SetFit's default would take 320 steps (> --setfit-max-steps 40)"}
    other = {**base, "sample": 3, "skipped": "setfit is not installed"}
    records = [old, new, big, other]
    assert [fewshot.capped_steps(r) for r in records] == [80, 80, 320, None]
    assert fewshot.redone(records, 100) == [big, other]  # 80 steps fit under 100: those two are redone
    assert fewshot.redone(records, 40) == records
    # once a sample has a result, the cell's skip note is no longer stated
    ran = {**base, "sample": 0, "accuracy": 0.9, "macro_f1": 0.9, "train_s": 300}
    assert "bbc-news|8|setfit" in fewshot.summarise(records)["skipped"]
    assert "bbc-news|8|setfit" not in fewshot.summarise(records + [ran])["skipped"]


class _FakeSetFit:
    """The `setfit` module as run_setfit_lib uses it, training nothing: it keeps the TrainingArguments it
    is given, counts the steps they imply (the cap, else SetFit's default pair steps) and predicts label 0."""

    def __init__(self, fewshot):
        import types

        self.calls: list[dict] = []
        fake = self

        class TrainingArguments:
            def __init__(self, **kwargs):
                fake.calls.append(kwargs)
                self.kwargs = kwargs

        class SetFitModel:
            model_body = types.SimpleNamespace(tokenizer=types.SimpleNamespace(sep_token="[SEP]"))

            @classmethod
            def from_pretrained(cls, path, **kwargs):
                return cls()

            def predict(self, texts, batch_size=64):
                return [0] * len(texts)

        class Trainer:
            def __init__(self, model, args, train_dataset):
                steps = args.kwargs.get("max_steps") or fewshot.setfit_steps(train_dataset["label"])
                self.st_trainer = types.SimpleNamespace(state=types.SimpleNamespace(global_step=steps))

            def train(self):
                pass

        self.module = types.SimpleNamespace(SetFitModel=SetFitModel, Trainer=Trainer,
                                            TrainingArguments=TrainingArguments)


def _toy(classes: int = 4, per_class: int = 8):
    import datasets

    from contrastfit.data.loading import TextData

    n = classes * per_class
    split = datasets.Dataset.from_dict({"text": [f"text {i}" for i in range(n)], "label": [i % classes for i in range(n)]})
    return TextData("toy", split, split, split, [f"c{i}" for i in range(classes)])


@pytest.fixture
def fake_setfit(fewshot, monkeypatch):
    import sys

    fake = _FakeSetFit(fewshot)
    monkeypatch.setitem(sys.modules, "setfit", fake.module)
    monkeypatch.setattr(fewshot, "resolve_model", lambda model: (model,))
    return fake


def test_a_setfit_run_over_the_cap_passes_max_steps_and_records_the_three_numbers(fewshot, fake_setfit, tmp_path):
    data = _toy()  # 4 classes x 8: 768 pairs, 48 steps of 16
    assert fewshot.setfit_steps(data.train["label"]) == 48
    record = fewshot.run_setfit_lib(data, 0, "m", tmp_path, max_steps=20)
    assert fake_setfit.calls[-1]["max_steps"] == 20
    assert (record["setfit_steps"], record["setfit_max_steps"], record["steps"]) == (48, 20, 20)
    # under the cap: SetFit's defaults, no max_steps passed, the record as before
    record = fewshot.run_setfit_lib(data, 0, "m", tmp_path, max_steps=48)
    assert "max_steps" not in fake_setfit.calls[-1]
    assert record["steps"] == 48 and "setfit_steps" not in record and "setfit_max_steps" not in record
    fewshot.run_setfit_lib(data, 0, "m", tmp_path)  # no cap given: the defaults
    assert "max_steps" not in fake_setfit.calls[-1]


def test_a_setfit_lib_run_skipped_for_its_steps_is_redone_whatever_the_cap(fewshot):
    base = {"data": "mcid", "shots": 8, "system": "setfit-lib"}
    old = {**base, "sample": 0, "skipped": "SetFit's default would take 960 steps (> --setfit-max-steps 200)"}
    new = {**old, "sample": 1, "setfit_steps": 960}
    capped = {**base, "sample": 2, "accuracy": 0.7, "macro_f1": 0.7, "train_s": 55, "steps": 200,
              "setfit_steps": 960, "setfit_max_steps": 200}
    other = {**base, "sample": 3, "skipped": "setfit is not installed"}
    records = [old, new, capped, other]
    assert [fewshot.capped_steps(r) for r in records] == [960, 960, None, None]  # a capped run was not skipped
    for max_steps in (100, 200, 2000):  # SetFit is capped now, never skipped: a skipped run is trained
        assert fewshot.redone(records, max_steps) == [capped, other]


def test_a_setfit_lib_record_made_under_another_cap_is_redone(fewshot):
    capped = {"system": "setfit-lib", "accuracy": 0.7, "steps": 200, "setfit_steps": 960, "setfit_max_steps": 200}
    assert fewshot.setfit_cap_changed(capped, 960, 200) == []
    assert fewshot.setfit_cap_changed(capped, 960, 100) == ["setfit_max_steps: 200 -> 100 (of 960 steps)"]
    assert fewshot.setfit_cap_changed(capped, 960, 400) == ["setfit_max_steps: 200 -> 400 (of 960 steps)"]
    # a cap at the default's steps or over it: SetFit's defaults, uncapped, so the capped run is redone
    assert fewshot.setfit_cap_changed(capped, 960, 960) == ["setfit_max_steps: 200 -> none (of 960 steps)"]
    # an uncapped run (a record as before the cap, without `steps` too) stands under any cap: SetFit's own
    # default is the reference, a capped run never replaces it
    full = {"system": "setfit-lib", "accuracy": 0.8, "steps": 480}
    for record in (full, {"system": "setfit-lib", "accuracy": 0.8}):
        for cap in (480, 1000, 240):
            assert fewshot.setfit_cap_changed(record, 480, cap) == []
    assert fewshot.setfit_cap_changed({"system": "setfit-lib", "skipped": "x"}, 480, 240) == []  # no result


def test_the_bench_redoes_setfit_records_made_another_way_and_keeps_the_rest(fewshot, fake_setfit, monkeypatch,
                                                                             tmp_path):
    """main() on a toy set, SetFit faked: what it trains again under each --setfit-max-steps."""
    monkeypatch.setattr(fewshot, "RESULTS", tmp_path)
    monkeypatch.setattr(fewshot, "load_bench_data", lambda spec: _toy(per_class=12))
    monkeypatch.setattr(fewshot, "plot", lambda summary, path: None)
    monkeypatch.setattr(fewshot, "_version", lambda dist: "1.2.0")
    runs = tmp_path / "t_runs.jsonl"
    base = {"data": "toy", "shots": 8, "system": "setfit-lib"}  # K = 8 of 4 classes: 48 steps by default
    fewshot.append_record(runs, {**base, "sample": 0,
                                 "skipped": "SetFit's default would take 48 steps (> --setfit-max-steps 20)"})
    fewshot.append_record(runs, {**base, "sample": 1, "accuracy": 0.5, "macro_f1": 0.5, "train_s": 9, "steps": 30,
                                 "setfit_steps": 48, "setfit_max_steps": 30})
    fewshot.append_record(runs, {**base, "sample": 2, "accuracy": 0.5, "macro_f1": 0.5, "train_s": 9, "steps": 20,
                                 "setfit_steps": 48, "setfit_max_steps": 20})
    argv = ["--data", "toy", "--shots", "8", "--samples", "3", "--systems", "setfit-lib", "--test-size", "48",
            "--validation-size", "4", "--name", "t", "--setfit-max-steps"]

    def trained(max_steps: int) -> list:
        before = len(fake_setfit.calls)
        fewshot.main(argv + [str(max_steps)])
        return [c.get("max_steps") for c in fake_setfit.calls[before:]]

    assert trained(20) == [20, 20]  # the skipped sample 0 and sample 1 (capped at 30) again; sample 2 stands
    last = {r["sample"]: r for r in fewshot.read_records(runs)}
    assert all((last[s]["setfit_steps"], last[s]["setfit_max_steps"], last[s]["steps"]) == (48, 20, 20)
               for s in range(3))
    assert trained(20) == []  # each made under this cap: nothing to do
    assert trained(48) == [None] * 3  # the default fits: every capped run is redone with SetFit's defaults
    assert "setfit_max_steps" not in fewshot.read_records(runs)[-1]
    assert trained(100) == [] and trained(20) == []  # an uncapped run stands under any cap
    summary = fewshot.summarise(fewshot.read_records(runs))
    assert "capped" not in summary["rows"][0] and summary["skipped"] == {}


def test_a_capped_setfit_cell_says_so_and_its_time_still_counts(fewshot):
    recs = _records("mcid", 8, {"linear-probe": [0.60, 0.62, 0.64], "setfit-lib": [0.75, 0.755, 0.76],
                                "default": [0.70, 0.71, 0.72]},
                    {"linear-probe": 1, "setfit-lib": 55, "default": 11})
    plain = fewshot.goal_markdown(fewshot.summarise(recs))
    assert _row(plain, "mcid", 8)[5] == "75.5 ± 0.5 (55 s)" and "Capped SetFit" not in plain
    assert "(capped)" not in fewshot.readme_markdown([fewshot.summarise(recs)])
    for r in recs:
        if r["system"] == "setfit-lib":
            r.update(steps=200, setfit_steps=960, setfit_max_steps=200)
    summary = fewshot.summarise(recs)
    row = {r["system"]: r for r in summary["rows"]}["setfit-lib"]
    assert row["capped"] == {"runs": 3, "max_steps": [200], "setfit_steps": [960], "note": "capped: 200 of 960 steps"}
    table = fewshot.goal_markdown(summary)
    cells = _row(table, "mcid", 8)
    assert cells[5] == "75.5 ± 0.5 (55 s, capped: 200 of 960 steps)"
    assert cells[9] == "0.20x" and cells[10] == "floor: -4.5 vs SetFit"  # the time and the goal still count
    assert "the time against it compares with fewer steps than its default takes" in table
    assert "| mcid | 8 | setfit-lib (capped: 200 of 960 steps) | 3 |" in fewshot.markdown(summary, ["setfit-lib"])
    assert "| mcid | question type | 3 |" not in fewshot.readme_markdown([summary])  # not README_SHOTS' K
    assert "| **75.5** (capped) |" in fewshot.readme_markdown([summary], shots=8)
    # one run of three capped: said
    recs = [r for r in recs if not (r["system"] == "setfit-lib" and r["sample"] > 0)]
    recs += _records("mcid", 8, {"setfit-lib": [0.75, 0.755, 0.76]}, {"setfit-lib": 55})[1:]
    assert _row(fewshot.goal_markdown(fewshot.summarise(recs)), "mcid", 8)[5] == \
        "75.5 ± 0.5 (55 s, capped in 1 of 3 runs: 200 of 960 steps)"


def test_a_record_is_reused_only_while_its_system_trains_the_same_recipe(fewshot):
    today = fewshot.recipe("default", 16, "minilm-l6", 128)
    assert today["method"] == "ce-scl-lr" and today["training"]["pooling"] == "mean"
    assert today["training"]["wise_ft"] == 0.5  # the default recipe's WiSE-FT weight
    # a record keeps the interpolation as a dict (weight, tensors, rule); the weight is what counts
    record = {"system": "default", "accuracy": 0.7, "method": today["method"], "hparams": dict(today["hparams"]),
              "training": {**today["training"], "wise_ft": {"alpha": 0.5, "tensors": 100}, "epochs": 3.0, "steps": 15}}
    assert fewshot.stale(record, today) == []
    old = {**record, "training": {**record["training"], "learning_rate": 5e-5, "min_steps": 60}}
    assert fewshot.stale(old, today) == ["training.learning_rate", "training.min_steps"]
    other = {**record, "hparams": {**record["hparams"], "temperature": 0.1}}
    assert fewshot.stale(other, today) == ["hparams.temperature"]
    # the default before WiSE-FT: its records predate the setting, and today's default sets it
    before = {**record, "training": {k: v for k, v in record["training"].items() if k != "wise_ft"}}
    assert fewshot.stale(before, today) == ["training.wise_ft"]
    # a variant's own settings are part of its recipe
    off = fewshot.recipe("w=:wise_ft=1", 16, "minilm-l6", 128)
    assert fewshot.stale(record, off) == ["training.wise_ft"]
    # a setting a record predates is unchanged while it is unset today (ce declares no WiSE-FT weight)
    ce = fewshot.recipe("ce", 16, "minilm-l6", 128)
    assert "wise_ft" not in ce["training"]
    assert fewshot.stale({"system": "ce", "accuracy": 0.7, "method": "ce", "hparams": dict(ce["hparams"]),
                          "training": dict(ce["training"])}, ce) == []
    assert fewshot.recipe("setfit-lib", 16, "minilm-l6", 128) is None  # its record names its library version


def test_fastfit_gets_its_columns_and_a_default_below_it_is_a_miss(fewshot):
    accs = {"linear-probe": [0.40, 0.42, 0.44], "setfit-lib": [0.40, 0.42, 0.44], "default": [0.50, 0.52, 0.54]}
    secs = {"linear-probe": 1, "setfit-lib": 60, "default": 10, "fastfit": 100}
    # without a FastFit record the table keeps its columns (the other tests' indices)
    assert "FastFit" not in fewshot.goal_markdown(fewshot.summarise(_records("medmcqa-subject", 4, accs, secs)))
    ahead = _records("medmcqa-subject", 4, {**accs, "fastfit": [0.48, 0.50]}, secs)  # 2 of the 3 samples
    table = fewshot.goal_markdown(fewshot.summarise(ahead))
    assert table.splitlines()[0] == ("| data | K | n | zero-shot | probe | SetFit library | FastFit | default | vs SetFit "
                                     "| vs probe | vs FastFit | time vs SetFit | goal |")
    cells = _row(table, "medmcqa-subject", 4)
    assert cells[6] == "49.0 ± 1.4 (100 s, n=2)"
    assert cells[10].startswith("+2.0")  # paired on samples 0 and 1: (50 - 48 + 52 - 50) / 2
    assert cells[12] == "met"
    behind = _records("medmcqa-subject", 4, {**accs, "fastfit": [0.55, 0.56, 0.57]}, secs)
    cells = _row(fewshot.goal_markdown(fewshot.summarise(behind)), "medmcqa-subject", 4)
    assert cells[10].startswith("-4.0") and cells[12] == "floor: -4.0 vs FastFit"


def test_crossfit_scores_each_candidate_on_the_held_out_half_and_trains_the_better_on_everything(fewshot, monkeypatch):
    import datasets

    from contrastfit.data.loading import TextData

    train = datasets.Dataset.from_dict({"text": [f"t{i}" for i in range(16)], "label": [i % 2 for i in range(16)]})
    data = TextData("toy", train, None, train, ["a", "b"])
    folds = fewshot.crossfit_folds(train["label"], seed=0)
    assert len(folds) == 2 and sorted(np.concatenate([b for _, b in folds]).tolist()) == list(range(16))
    assert all(np.bincount(np.asarray(train["label"])[b]).tolist() == [4, 4] for _, b in folds)  # stratified
    calls = []

    def fake(spec, fold, seed, model, max_length, workdir, device="auto"):
        calls.append((spec, len(fold.train), len(fold.test)))
        accuracy = {fewshot.CROSSFIT_CANDIDATES[0]: 0.6, fewshot.CROSSFIT_CANDIDATES[1]: 0.7}[spec]
        return {"accuracy": accuracy, "macro_f1": accuracy, "train_s": 1.0}

    monkeypatch.setattr(fewshot, "run_contrastfit", fake)
    record = fewshot.run_crossfit(data, 0, "m", 32, None)
    long = fewshot.CROSSFIT_CANDIDATES[1]
    assert calls == [(fewshot.CROSSFIT_CANDIDATES[0], 8, 8)] * 2 + [(long, 8, 8)] * 2 + [(long, 16, 16)]
    assert record["crossfit"]["chosen"] == long and record["crossfit"]["scores"][long] == pytest.approx(0.7)
    assert record["train_s"] >= 1.0
    # a tie goes to the default
    monkeypatch.setattr(fewshot, "run_contrastfit", lambda *a, **k: {"accuracy": 0.5, "macro_f1": 0.5, "train_s": 1.0})
    assert fewshot.run_crossfit(data, 0, "m", 32, None)["crossfit"]["chosen"] == "default"


def test_a_run_of_the_same_recipe_on_the_same_sample_stands_for_a_system_instead_of_training_again(
        fewshot, monkeypatch, tmp_path):
    """A variant that becomes the default is not trained again for the default: its record (same recipe,
    same sample, test set, seed, encoder and device) is copied under the default's name, saying whence;
    a variant of another recipe, another sample or a system with no recipe of its own stands for nothing."""
    monkeypatch.setattr(fewshot, "RESULTS", tmp_path)
    monkeypatch.setattr(fewshot, "load_bench_data", lambda spec: _toy(per_class=12))
    monkeypatch.setattr(fewshot, "plot", lambda summary, path: None)
    trained = []

    def fake_run(spec, data, seed, model, max_length, workdir, device="auto"):
        trained.append(spec)
        recipe = fewshot.recipe(spec, len(data.train), model, max_length)
        return {"accuracy": 0.5 + len(trained) / 100, "macro_f1": 0.5, "train_s": 7.0, "steps": 30,
                "method": recipe["method"], "hparams": recipe["hparams"],
                "training": {**recipe["training"], "wise_ft": {"alpha": recipe["training"]["wise_ft"], "tensors": 3}}}

    monkeypatch.setattr(fewshot, "run_contrastfit", fake_run)
    today = fewshot.recipe("default", 48, "minilm-l6", 128)["training"]
    same = f"same=ce-scl-lr:min_steps={today['min_steps']},learning_rate={today['learning_rate']}"
    argv = ["--data", "toy", "--shots", "8", "--samples", "2", "--test-size", "48", "--validation-size", "4"]
    fewshot.main(argv + ["--systems", same, "long=ce-scl-lr:min_steps=90", "--name", "variants"])
    assert trained == [same, "long=ce-scl-lr:min_steps=90"] * 2
    variants = fewshot.read_records(tmp_path / "variants_runs.jsonl")

    fewshot.main(argv + ["--systems", "default", "--name", "grid", "--reuse", "variants_runs.jsonl"])
    assert len(trained) == 4  # nothing trained: the same recipe's runs stand for the default's
    grid = fewshot.read_records(tmp_path / "grid_runs.jsonl")
    assert [r["system"] for r in grid] == ["default"] * 2
    for record, variant in zip(grid, [v for v in variants if v["system"] == same]):
        assert record["reused"] == {"file": "variants_runs.jsonl", "system": same}
        assert {k: record[k] for k in variant if k != "system"} == {k: v for k, v in variant.items() if k != "system"}
    assert fewshot.summarise(grid)["rows"][0]["accuracy_mean"] == pytest.approx(100 * (0.51 + 0.53) / 2)

    # another sample (its train hash), another seed or device: trained
    assert fewshot.stand_in([("f", {**variants[0], "train_hash": "x"})], {**grid[0], "system": "default"},
                            fewshot.recipe("default", 48, "minilm-l6", 128)) is None
    fewshot.main(argv + ["--systems", "default", "--name", "other", "--seed", "1", "--reuse", "variants_runs.jsonl"])
    assert trained[4:] == ["default"] * 2
    # without --reuse, a variant in the runs file itself stands in; a crossfit or SetFit record never does
    fewshot.main(argv + ["--systems", "default", "--name", "variants"])
    assert len(trained) == 6 and fewshot.read_records(tmp_path / "variants_runs.jsonl")[-1]["reused"]["file"] == \
        "variants_runs.jsonl"
    crossfit = {**variants[0], "system": "crossfit"}
    assert fewshot.stand_in([("f", crossfit)], {**crossfit, "system": "default"},
                            fewshot.recipe("default", 48, "minilm-l6", 128)) is None
    with pytest.raises(SystemExit):
        fewshot.main(argv + ["--systems", "default", "--name", "grid", "--reuse", "nothing_runs.jsonl"])
    # --retime trains the stood-in runs again (to time them alike), once: the new records stand
    fewshot.main(argv + ["--systems", "default", "--name", "grid", "--retime"])
    assert trained[6:] == ["default"] * 2
    fewshot.main(argv + ["--systems", "default", "--name", "grid", "--retime"])
    assert len(trained) == 8 and not any("reused" in r for r in fewshot.read_records(tmp_path / "grid_runs.jsonl")[-2:])


def test_the_readme_results_say_each_sets_part_the_margins_by_kind_the_ranks_and_the_misses(fewshot):
    times = {"linear-probe": 1, "setfit-lib": 40, "fastfit": 90, "default": 10}
    recs = _records("mr", 8, {"linear-probe": [0.60, 0.62, 0.64], "setfit-lib": [0.64, 0.66, 0.68],
                              "fastfit": [0.69], "default": [0.70, 0.71, 0.72]}, times)
    recs += _records("trec", 8, {"linear-probe": [0.50, 0.52], "setfit-lib": [0.80, 0.82], "fastfit": [0.70],
                                 "default": [0.75, 0.77]}, times)
    recs += _records("hwu64", 8, {"linear-probe": [0.80, 0.80], "default": [0.85, 0.87]}, times)
    text = fewshot.readme_markdown([fewshot.summarise(recs)])
    assert "| mr | sentiment | chose | 3 | 62.0 | 66.0 | 69.0 (n=1) | **71.0** |" in text
    assert "| trec | question type | chose | 2 | 51.0 | **81.0** | 70.0 (n=1) | 76.0 |" in text
    assert "| hwu64 | intent | held out | 2 | 80.0 | not run | not run | **86.0** |" in text
    # the default's margins over each system on the sets both ran, per kind and over all
    assert "Default minus probe by kind of task (sets): intent +6.0 (1), question type +25.0 (1), sentiment +9.0 (1), " \
           "**all** +13.3 (3).  " in text
    assert "Default minus SetFit by kind of task (sets): question type -5.0 (1), sentiment +5.0 (1), **all** +0.0 (2)." \
           in text
    assert "Mean rank over the 2 sets where all four ran (1 = best): probe 4.00, SetFit 2.00, FastFit 2.50, " \
           "default 1.50." in text
    # FastFit ran sample 0 only: the default is compared with it on that sample (70 vs 69, 75 vs 70)
    assert "Default minus FastFit by kind of task (sets): question type +5.0 (1), sentiment +1.0 (1), " \
           "**all** +3.0 (2)." in text
    assert "Missing the goal: trec (floor: -5.0 vs SetFit)." in text


def test_the_floor_compares_a_rival_run_on_fewer_samples_on_those_samples(fewshot):
    """FastFit on the first sample only: the default's mean over five samples is below FastFit's one score
    (a hard set's samples pull it down), but on that sample the default is ahead: no floor miss."""
    recs = _records("imdb", 8, {"linear-probe": [0.58] * 5, "setfit-lib": [0.64, 0.56, 0.63, 0.61, 0.61],
                                "fastfit": [0.659], "default": [0.678, 0.574, 0.625, 0.641, 0.661]},
                    {"linear-probe": 1, "setfit-lib": 200, "fastfit": 460, "default": 30})
    summary = fewshot.summarise(recs)
    row = {r["system"]: r for r in summary["rows"]}["default"]
    assert row["accuracy_mean"] < 65.9  # the unpaired gap would be a floor miss of -2.1
    assert row["vs_fastfit"] == {"samples": 1, "mean_diff": pytest.approx(1.9), "p_ttest": None, "p_wilcoxon": None,
                                 "p_std": None}
    assert _row(fewshot.goal_markdown(summary), "imdb", 8)[-1] == "met"
    behind = _records("imdb", 8, {"linear-probe": [0.58] * 3, "setfit-lib": [0.60] * 3, "fastfit": [0.70],
                                  "default": [0.65, 0.65, 0.65]}, {"linear-probe": 1, "setfit-lib": 200,
                                                                   "fastfit": 460, "default": 30})
    assert _row(fewshot.goal_markdown(fewshot.summarise(behind)), "imdb", 8)[-1] == "floor: -5.0 vs FastFit"


def test_every_built_in_set_is_in_one_records_file_or_the_reserve(fewshot):
    """``make bench-fewshot`` runs each README records file on its own sets (``--data``'s default for that
    ``--name``); a set is in one of them or in the reserve, never two, and the held-out ones only in theirs."""
    parts = [*fewshot.RECORD_SETS.values(), fewshot.RESERVE]
    named = [d for part in parts for d in part]
    assert len(named) == len(set(named)) and sorted(named) == sorted(fewshot.bench_sets())
    assert fewshot.RECORD_SETS["heldout"] == fewshot.HELD_OUT and fewshot.README_RECORDS == tuple(fewshot.RECORD_SETS)
    assert set(fewshot.CHOSE_DEFAULTS) <= set(fewshot.RECORD_SETS["fewshot"]) | set(fewshot.RECORD_SETS["heldout_kinds"])


def test_the_held_out_sets_go_to_their_own_records_and_score_the_default_only(fewshot, tmp_path, monkeypatch,
                                                                              capsys):
    monkeypatch.setattr(fewshot, "RESULTS", tmp_path)
    assert not set(fewshot.bench_sets(held_out=False)) & set(fewshot.HELD_OUT)
    assert set(fewshot.HELD_OUT) <= set(fewshot.bench_sets())
    for argv, message in ((["--data", "hwu64"], "scored in heldout_runs.jsonl (--name heldout) only"),
                          (["--data", "mr", "--name", "heldout"], "--data mr: the held-out sets"),
                          (["--name", "heldout", "--systems", "default", "mid=ce-scl-lr:min_steps=30"],
                           "--systems mid=ce-scl-lr:min_steps=30: the held-out sets score the default")):
        with pytest.raises(SystemExit):
            fewshot.main(argv)
        assert message in capsys.readouterr().err
        assert not list(tmp_path.glob("*_runs.jsonl"))  # refused before anything ran
