"""Multi-task training on the tiny encoder: the batch schedule, gradient isolation between the tasks'
heads, what the Trainer really feeds, model selection on the tasks' average, save / reload, errors."""

from __future__ import annotations

import csv
import json
import math
import random

import numpy as np
import pytest
import torch
from transformers import TrainerCallback

from contrastfit import ContrastiveClassifier
from contrastfit.errors import ConfigError, ContrastfitError, DataError, ModelError
from contrastfit.losses import supcon
from contrastfit import train_multitask
from contrastfit.multitask import MultiTaskModel, Task, TaskBatchSampler
from contrastfit.multitask.schedule import largest_remainder, task_probabilities
from contrastfit.multitask.tasks import resolve_task
from contrastfit.multitask.shape import MultiTaskCollator
from contrastfit.trainer import ContrastfitTrainer
from test_training import StopAt, _poison  # the single-task resume tests' stopping callback and poisoned pickle

WORDS = "good great fine film movie bad awful boring plot actor story dull superb weak fun".split()


# ---------------------------------------------------------------------------------------------
# Data files
# ---------------------------------------------------------------------------------------------

def _write(path, fieldnames, rows):
    with open(path, "w", newline="", encoding="utf-8") as fh:
        writer = csv.DictWriter(fh, fieldnames=fieldnames)
        writer.writeheader()
        writer.writerows(rows)
    return path


@pytest.fixture()
def pair_class_csv(tmp_path):
    rng = random.Random(3)
    rows = []
    for i in range(40):
        a = rng.sample(WORDS, 3)
        same = i % 2 == 0
        b = a[:2] + rng.sample(WORDS, 1) if same else rng.sample(WORDS, 3)
        rows.append({"sentence1": " ".join(a), "sentence2": " ".join(b), "label": "yes" if same else "no"})
    return _write(tmp_path / "pairs.csv", ["sentence1", "sentence2", "label"], rows)


@pytest.fixture()
def pair_score_csv(tmp_path):
    rng = random.Random(4)
    rows = [{"sentence1": " ".join(rng.sample(WORDS, 3)), "sentence2": " ".join(rng.sample(WORDS, 3)),
             "score": round(rng.uniform(0, 5), 3)} for _ in range(40)]
    return _write(tmp_path / "sts.csv", ["sentence1", "sentence2", "score"], rows)


# ---------------------------------------------------------------------------------------------
# The schedule
# ---------------------------------------------------------------------------------------------

def test_round_robin_is_exact_and_never_restarts():
    sampler = TaskBatchSampler([10, 30, 5], 4, "round-robin", seed=0)
    assert len(sampler) == 3 + 8 + 2  # an epoch: sum of ceil(n_t / b_t)
    seen = []
    for epoch in range(3):
        sampler.set_epoch(epoch)
        for batch in sampler:
            tasks = {sampler.task_of(i) for i in batch}
            assert len(tasks) == 1  # one task per batch
            seen.append(tasks.pop())
    assert seen == [s % 3 for s in range(3 * 13)]  # the rotation continues across epochs (13 % 3 != 0)


def test_round_robin_epochs_is_the_reports_rotation():
    sampler = TaskBatchSampler([10, 30, 5], 4, "round-robin-epochs", seed=1)
    batches = list(sampler)
    order = [sampler.task_of(b[0]) for b in batches]
    assert order == [0] * 3 + [1] * 8 + [2] * 2  # one epoch of each task, in turn
    for t, (lo, n) in enumerate(zip(sampler.offsets, sampler.sizes)):
        rows = sorted(i for b in batches if sampler.task_of(b[0]) == t for i in b)
        assert rows == list(range(lo, lo + n))  # every row of the task exactly once


@pytest.mark.parametrize("schedule, temperature", [("proportional", 2.0), ("temperature", 2.0), ("temperature", 5.0)])
def test_sampled_schedules_give_each_task_its_share(schedule, temperature):
    sizes = [100, 400, 1500]
    sampler = TaskBatchSampler(sizes, 10, schedule, temperature=temperature, seed=7)
    steps = len(sampler)
    assert steps == 200
    n = np.asarray(sizes, float)
    expected = n / n.sum() if schedule == "proportional" else n ** (1 / temperature) / (n ** (1 / temperature)).sum()
    np.testing.assert_allclose(sampler.probabilities, expected)
    orders = []
    for epoch in range(4):
        sampler.set_epoch(epoch)
        order = [sampler.task_of(b[0]) for b in sampler]
        counts = np.bincount(order, minlength=3)
        assert np.all(np.abs(counts - steps * expected) <= 1)  # every epoch: its share to within one batch
        orders.append(order)
        # the order is shuffled, not blocks of one task
        assert order != sorted(order)
    assert orders[0] != orders[1]
    sampler.set_epoch(0)
    assert [sampler.task_of(b[0]) for b in sampler] == orders[0]  # deterministic given seed and epoch
    if schedule == "proportional":  # proportional: the big task gets most steps, the small one fewest
        assert list(np.bincount(orders[0], minlength=3)) == [10, 40, 150]


def test_temperature_flattens_the_shares():
    sizes = [10, 1000]
    p1, p2, p_inf = (task_probabilities(sizes, "temperature", t) for t in (1.0, 2.0, 1e9))
    np.testing.assert_allclose(p1, task_probabilities(sizes, "proportional"))
    np.testing.assert_allclose(p2, [1 / 11, 10 / 11])  # sqrt(10) : sqrt(1000) = 1 : 10
    np.testing.assert_allclose(p_inf, [0.5, 0.5], atol=1e-6)
    assert list(largest_remainder(7, np.array([0.5, 0.25, 0.25]))) in ([4, 2, 1], [3, 2, 2], [4, 1, 2])
    assert largest_remainder(7, np.array([0.5, 0.25, 0.25])).sum() == 7


def test_a_ce_scl_task_gets_class_balanced_batches():
    labels = [0] * 30 + [1] * 10
    sampler = TaskBatchSampler([12, 40], 8, "round-robin", labels=[None, labels], balanced=[False, True], seed=0)
    checked = 0
    for epoch in range(3):
        sampler.set_epoch(epoch)
        for batch in sampler:
            if sampler.task_of(batch[0]) == 1:
                ys = [labels[i - sampler.offsets[1]] for i in batch]
                assert len(batch) == 8
                assert all(ys.count(c) >= 2 for c in set(ys))  # every class present has a positive
                assert len(set(ys)) == 2  # and there are negatives
                checked += 1
    assert checked > 0  # the balanced task was scheduled


def test_schedule_errors_are_one_line():
    with pytest.raises(ConfigError, match="unknown schedule 'sequential'"):
        TaskBatchSampler([10], 4, "sequential")
    with pytest.raises(ConfigError, match="at least one training row"):
        TaskBatchSampler([10, 0], 4)


# ---------------------------------------------------------------------------------------------
# The model: heads, objectives and gradient isolation
# ---------------------------------------------------------------------------------------------

def _specs():
    return [
        resolve_task(Task("sent", "x", objective="ce-scl"), label_names=["neg", "pos"], pairs=False, data_name="x"),
        resolve_task(Task("para", "x"), label_names=["no", "yes"], pairs=True, data_name="x"),
        resolve_task(Task("sts", "x", weight=0.5), label_names=None, pairs=True, data_name="x", label_range=[0.0, 5.0]),
        resolve_task(Task("cos", "x", head="cosine"), label_names=None, pairs=True, data_name="x",
                     label_range=[1.0, 3.0]),
    ]


def _batch(model, task, n=6, seed=0):
    rng = random.Random(seed)
    spec = model.task(task)
    texts = [" ".join(rng.sample(WORDS, 4)) for _ in range(n)]
    pairs = [" ".join(rng.sample(WORDS, 3)) for _ in range(n)] if spec.pairs else None
    labels = [i % 2 for i in range(n)] if spec.type != "regression" else [rng.uniform(1, 3) for _ in range(n)]
    enc = model.encode_inputs(spec, texts, pairs)
    rows = [{**{k: v[i] for k, v in enc.items()}, "labels": labels[i], "task_ids": model.task_index[task]} for i in range(n)]
    return MultiTaskCollator(model.tokenizer, model.tasks)(rows)


def test_defaults_follow_the_report_heads():
    sent, para, sts, cos = _specs()
    assert (sent.head, sent.objective, sent.metric) == ("mlp", "ce-scl", "accuracy")
    assert sent.hparams == {"lambda": 0.9, "temperature": 0.3}
    assert (para.head, para.objective, para.separate) == ("concat", "ce", True)
    assert (sts.head, sts.objective, sts.metric) == ("cosine-mlp", "mse", "pearson")
    assert (cos.head, cos.objective) == ("cosine", "cosine")


def test_each_batch_trains_its_own_head_and_the_encoder_only(tiny_encoder_dir):
    model = MultiTaskModel.from_encoder(str(tiny_encoder_dir), _specs())
    model.train()
    for task in model.task_names:
        model.zero_grad(set_to_none=True)
        batch = _batch(model, task)
        assert batch["task_ids"].unique().tolist() == [model.task_index[task]]
        model(**batch).loss.backward()
        for name, head in model.heads.items():
            grads = [p.grad for p in head.parameters()]
            if name == task and name != "cos":  # the cosine head has no parameters
                assert grads and all(g is not None for g in grads) and sum(float(g.abs().sum()) for g in grads) > 0
            else:
                assert all(g is None for g in grads), f"{name}'s head got a gradient from a {task} batch"
        enc = [p.grad for p in model.encoder.parameters() if p.grad is not None]
        assert enc and sum(float(g.abs().sum()) for g in enc) > 0


def test_objectives_and_weights(tiny_encoder_dir):
    model = MultiTaskModel.from_encoder(str(tiny_encoder_dir), _specs())
    model.train()
    torch.manual_seed(0)
    batch = _batch(model, "sent")
    out = model(**batch)
    parts = {k: v.detach() for k, v in out.loss_parts.items()}
    # ce-scl: (1 - 0.9) CE + 0.9 SupCon on the features the head reads
    assert float(out.loss.detach()) == pytest.approx(0.1 * float(parts["sent_ce"]) + 0.9 * float(parts["sent_scl"]), rel=1e-5)
    # weight 0.5 on the sts task: the returned loss is half the task's objective
    out = model(**_batch(model, "sts"))
    assert float(out.loss.detach()) == pytest.approx(0.5 * float(out.loss_parts["sts"].detach()), rel=1e-6)
    # the cosine objective: squared error of cos(u, v) against the label scaled from [1, 3] onto [0, 1]
    model.eval()
    batch = _batch(model, "cos")
    with torch.no_grad():
        out = model(**batch)
    first = {k: batch[k] for k in ("input_ids", "attention_mask", "token_type_ids") if k in batch}
    second = {k[:-2]: batch[k] for k in ("input_ids_b", "attention_mask_b", "token_type_ids_b") if k in batch}
    with torch.no_grad():
        u, v = model.encoder(**first).pooled, model.encoder(**second).pooled
    cos = torch.nn.functional.cosine_similarity(u, v, dim=-1)
    target = (batch["labels"] - 1.0) / 2.0
    assert float(out.loss) == pytest.approx(float(((cos - target) ** 2).mean()), rel=1e-5)
    np.testing.assert_allclose(out.logits[:, 0].numpy(), (1.0 + 2.0 * cos).numpy(), rtol=1e-5)
    # SupCon sees the same pooled features as the head
    model.train()
    torch.manual_seed(1)
    b = _batch(model, "sent")
    torch.manual_seed(2)
    out = model(**b)
    torch.manual_seed(2)
    feats = model.encoder(**{k: b[k] for k in ("input_ids", "attention_mask", "token_type_ids") if k in b}).pooled
    assert float(out.loss_parts["sent_scl"].detach()) == pytest.approx(float(supcon(feats, b["labels"], 0.3).detach()),
                                                                       rel=1e-5)


def test_a_batch_mixing_tasks_is_refused(tiny_encoder_dir):
    model = MultiTaskModel.from_encoder(str(tiny_encoder_dir), _specs())
    batch = _batch(model, "sent")
    batch["task_ids"][0] = 1
    with pytest.raises(ValueError, match="mixes tasks"):
        model(**batch)
    rows = [{"input_ids": [2, 3], "attention_mask": [1, 1], "labels": 0, "task_ids": t} for t in (0, 1)]
    with pytest.raises(ValueError, match="mixes tasks"):
        MultiTaskCollator(model.tokenizer, model.tasks)(rows)


def test_prediction_errors_name_the_task(tiny_encoder_dir):
    model = MultiTaskModel.from_encoder(str(tiny_encoder_dir), _specs())
    with pytest.raises(ModelError, match="no task 'nli'.*sent, para, sts, cos"):
        model.predict(["good"], task="nli")
    with pytest.raises(DataError, match="task 'para' takes sentence pairs"):
        model.predict(["good"], task="para")
    with pytest.raises(DataError, match="task 'sent' takes one text"):
        model.predict(["good"], ["film"], task="sent")


# ---------------------------------------------------------------------------------------------
# Training through the Trainer
# ---------------------------------------------------------------------------------------------

def _run(tmp_path, tiny_encoder_dir, tasks, name="run", **kw):
    opts = dict(model=str(tiny_encoder_dir), output=str(tmp_path / name), batch_size=8, learning_rate=1e-3,
                progress=False, logging_steps=1, max_steps=6)
    opts.update(kw)
    return train_multitask(tasks=tasks, **opts)


def test_the_trainer_feeds_the_schedule_and_steps_leave_other_heads_alone(tmp_path, tiny_encoder_dir, sentiment_csv,
                                                                           pair_class_csv, monkeypatch):
    fed: list[list[int]] = []
    original = ContrastfitTrainer.compute_loss

    def spy(self, model, inputs, *args, **kwargs):
        if model.training:
            fed.append(inputs["task_ids"].tolist())
        return original(self, model, inputs, *args, **kwargs)

    monkeypatch.setattr(ContrastfitTrainer, "compute_loss", spy)
    snapshots: list[dict[str, dict[str, torch.Tensor]]] = []

    class Snapshot(TrainerCallback):
        def on_step_end(self, args, state, control, model=None, **kwargs):
            snapshots.append({name: {k: v.detach().clone() for k, v in head.state_dict().items()}
                              for name, head in model.heads.items()})

    tasks = [{"name": "sent", "data": str(sentiment_csv), "label_column": "sentiment"},
             {"name": "para", "data": str(pair_class_csv)}]
    # batch 16: an epoch is ceil(21 / 16) + ceil(36 / 16) = 5 steps, so 7 steps cross into a second epoch
    result = _run(tmp_path, tiny_encoder_dir, tasks, select_best=False, weight_decay=0.1, callbacks=[Snapshot()],
                  batch_size=16, max_steps=7)
    assert result["training"]["steps_per_epoch"] == 5
    # round-robin as the Trainer computed the losses, the rotation continuing across the epoch boundary
    assert [ids[0] for ids in fed] == [0, 1, 0, 1, 0, 1, 0]
    assert all(len(set(ids)) == 1 for ids in fed)  # one task per batch
    assert result["schedule"]["batches_per_task"] == {"sent": 4, "para": 3}
    # a step on one task's batch moves that head only (AdamW moments and weight decay leave the other alone)
    for step in range(1, len(snapshots)):
        task = ["sent", "para"][step % 2]
        other = ["sent", "para"][(step + 1) % 2]
        for k, v in snapshots[step][other].items():
            assert torch.equal(v, snapshots[step - 1][other][k]), f"step {step + 1} ({task}) moved {other}.{k}"
        assert any(not torch.equal(v, snapshots[step - 1][task][k]) for k, v in snapshots[step][task].items())
    # each task's loss is logged, averaged over its own batches
    logged = [h for h in result["log_history"] if "loss" in h]
    assert "loss_sent" in logged[0] and "loss_para" not in logged[0] and "loss_para" in logged[1]


def test_two_task_run_reloads_with_identical_predictions(tmp_path, tiny_encoder_dir, sentiment_csv, pair_score_csv):
    tasks = [Task("sent", str(sentiment_csv), label_column="sentiment", objective="ce-scl"),
             Task("sts", str(pair_score_csv), label_column="score", batch_size=4, weight=2.0)]
    result = _run(tmp_path, tiny_encoder_dir, tasks, schedule="proportional", eval_steps=3)
    texts = ["good fun film", "awful dull plot", "the movie was very weak", "superb"]
    seconds = ["bad film", "great plot", "dull", "fine actor"]
    reloaded = MultiTaskModel.from_pretrained(tmp_path / "run", device=result.model.device)  # on the device it trained on: the same kernels, so bitwise the same
    for model in (result.model, reloaded):
        assert model.task_names == ["sent", "sts"]
    np.testing.assert_array_equal(result.model.predict_logits(texts, task="sent"), reloaded.predict_logits(texts, task="sent"))
    np.testing.assert_array_equal(result.model.predict_logits(texts, seconds, task="sts"),
                                  reloaded.predict_logits(texts, seconds, task="sts"))
    assert set(reloaded.predict(texts, task="sent")) <= {"negative", "positive"}
    assert all(isinstance(v, float) for v in reloaded.predict(texts, seconds, task="sts"))
    # the record: each task's spec, data hashes and metrics; the average of the selection metrics
    record = json.loads((tmp_path / "run" / "results.json").read_text())
    assert record == result.to_dict()
    for name in ("sent", "sts"):
        data = record["tasks"][name]["data"]
        assert len(data["train_hash"]) == 16 and len(data["validation_hash"]) == 16 and data["train_size"] > 0
        assert "validation" in record["tasks"][name]["metrics"]
    assert record["tasks"]["sts"]["spec"]["weight"] == 2.0 and record["schedule"]["batch_sizes"] == {"sent": 8, "sts": 4}
    val = record["metrics"]["validation"]
    assert val["average"] == pytest.approx((val["sent"]["accuracy"] + (0.0 if math.isnan(val["sts"]["pearson"])
                                                                       else val["sts"]["pearson"])) / 2)
    cfg = json.loads((tmp_path / "run" / "contrastfit.json").read_text())
    assert cfg["kind"] == "multitask" and cfg["data"]["sts"]["train_hash"] == record["tasks"]["sts"]["data"]["train_hash"]
    assert "torch" in cfg["versions"]
    assert not (tmp_path / "run" / "checkpoints").exists()
    with pytest.raises(ModelError, match="multi-task model .*sent, sts.*MultiTaskModel.from_pretrained"):
        ContrastiveClassifier.from_pretrained(tmp_path / "run")


def test_selection_keeps_the_best_average_and_records_each_task(tmp_path, tiny_encoder_dir, sentiment_csv,
                                                              pair_class_csv):
    tasks = [{"name": "sent", "data": str(sentiment_csv), "label_column": "sentiment"},
             {"name": "para", "data": str(pair_class_csv)}]
    result = _run(tmp_path, tiny_encoder_dir, tasks, max_steps=6, eval_steps=2, learning_rate=3e-3)
    sel = result["training"]["selection"]
    evals = sel["evaluations"]
    assert [e["step"] for e in evals] == [2, 4, 6]
    for e in evals:
        assert e["average"] == pytest.approx((e["sent_accuracy"] + e["para_accuracy"]) / 2)
    best = max(evals, key=lambda e: e["selection_score"])
    assert sel["best_step"] == best["step"] and sel["best_average"] == max(e["average"] for e in evals)
    for name in ("sent", "para"):
        assert sel["per_task_best"][name]["best_value"] == max(e[f"{name}_accuracy"] for e in evals)
    # the kept model is the best step's: its validation scores are the ones recorded at that step
    val = result["metrics"]["validation"]
    assert val["sent"]["accuracy"] == pytest.approx(best["sent_accuracy"])
    assert val["para"]["accuracy"] == pytest.approx(best["para_accuracy"])


@pytest.mark.parametrize("task, message", [
    (Task("t", "x", type="pair-classification"), "type pair-classification needs sentence pairs"),
    (Task("t", "x", head="cosine"), "head 'cosine' does not fit a classification task"),
    (Task("t", "x", objective="mse"), "objective 'mse' does not apply to a classification task"),
    (Task("t", "x", hparams={"tau": 0.1}), "objective ce has no hyper-parameter 'tau'"),
    (Task("t", "x", objective="ce-scl", hparams={"lambda": 2}), "lambda must be in"),
    (Task("t", "x", metric="pearson"), "metric 'pearson' is not a classification metric"),
])
def test_task_errors_are_one_line(task, message):
    with pytest.raises(ConfigError, match=message) as err:
        resolve_task(task, label_names=["a", "b"], pairs=False, data_name="x")
    assert "\n" not in str(err.value) and "task 't'" in str(err.value)


@pytest.mark.parametrize("options, message", [
    ({"tasks": []}, "non-empty list of tasks"),
    ({"tasks": [{"name": "a", "data": "mr"}, {"name": "a", "data": "mr"}]}, "repeated: a"),
    ({"tasks": [{"name": "a", "data": "mr", "weight": 0}]}, "weight must be > 0, got 0"),
    ({"tasks": [{"name": "a.b", "data": "mr"}]}, "must be letters, digits"),
    ({"tasks": [{"name": "a", "data": "mr", "colour": 1}]}, r"tasks\[0\]: unknown key .colour. \(allowed: batch_size, data, "),
    ({"tasks": [{"name": "a"}]}, r"tasks\[0\]: data: Field required"),
    ({"tasks": [{"name": "a", "data": "mr"}], "select_on": "b"}, "select_on must be 'average' or a task name"),
    ({"tasks": [{"name": "a", "data": "mr"}], "schedule": "random"},
     "schedule must be one of round-robin, round-robin-epochs, proportional, temperature, got 'random'"),
    ({"tasks": [{"name": "a", "data": "mr"}], "warmup_ratio": 1.0}, r"warmup_ratio must be in \[0, 1\), got 1.0"),
    ({"tasks": [{"name": "a", "data": "mr"}], "pooling": "max"}, "pooling must be one of cls, pooler, mean"),
    ({"tasks": [{"name": "a", "data": "mr"}], "seed": -1}, "seed must be in"),
    ({"tasks": "mr"}, "tasks must be a list, got 'mr'"),
    ({"tasks": [{"name": "a", "data": "mr"}], "learning_rate": "2e-5"}, "learning_rate must be float"),
])
def test_config_errors_are_one_line_before_any_data_is_loaded(tmp_path, options, message):
    with pytest.raises(ContrastfitError, match=message) as err:
        train_multitask(output=str(tmp_path / "x"), progress=False, **options)
    assert "\n" not in str(err.value)
    assert not (tmp_path / "x").exists()


def test_a_multi_process_launch_is_refused(tmp_path, monkeypatch):
    """torchrun would shard the one-task batches across processes, so one step's processes would hold
    different tasks: refused before anything is loaded."""
    monkeypatch.setenv("WORLD_SIZE", "2")
    with pytest.raises(ConfigError, match="multi-task training runs in one process; launched with 2 processes"):
        train_multitask(tasks=[{"name": "a", "data": "mr"}], output=str(tmp_path / "x"), progress=False)
    assert not (tmp_path / "x").exists()


def test_task_type_is_checked_against_the_data(tmp_path, tiny_encoder_dir, sentiment_csv):
    tasks = [{"name": "sent", "data": str(sentiment_csv), "label_column": "sentiment", "type": "pair-classification"}]
    with pytest.raises(ConfigError, match=r"task 'sent': type pair-classification needs sentence pairs, but data '.*toy.csv'"):
        _run(tmp_path, tiny_encoder_dir, tasks)


# ---------------------------------------------------------------------------------------------
# Interruption and resume (as train's)
# ---------------------------------------------------------------------------------------------

def test_an_interrupted_run_resumes_to_the_uninterrupted_model(tmp_path, tiny_encoder_dir, sentiment_csv,
                                                              pair_class_csv):
    tasks = [{"name": "sent", "data": str(sentiment_csv), "label_column": "sentiment", "objective": "ce-scl"},
             {"name": "para", "data": str(pair_class_csv)}]
    # batch 16: 5 steps an epoch, so the run crosses an epoch boundary after the resume at step 3;
    # without validation selection, checkpoints come every save_steps
    kw = dict(select_best=False, batch_size=16, max_steps=7, save_steps=2, schedule="proportional")
    full = _run(tmp_path, tiny_encoder_dir, tasks, name="full", **kw)
    cut = _run(tmp_path, tiny_encoder_dir, tasks, name="cut", callbacks=[StopAt(3)], **kw)
    assert cut.interrupted.to_dict() == {"at_step": 3, "checkpoint": str(tmp_path / "cut" / "checkpoints" / "checkpoint-3")}
    assert cut.metrics == {} and cut.training == {}
    assert not (tmp_path / "cut" / "results.json").exists() and not (tmp_path / "cut" / "contrastfit.json").exists()
    with pytest.raises(ConfigError, match="holds an unfinished run; resume it"):
        _run(tmp_path, tiny_encoder_dir, tasks, name="cut", **kw)
    resumed = _run(tmp_path, tiny_encoder_dir, tasks, name="cut", resume=True, **kw)
    assert resumed["training"]["resumed_from"].endswith("checkpoint-3") and full["training"]["resumed_from"] is None
    assert resumed["training"]["steps"] == full["training"]["steps"] == 7
    # the schedule's batches per task count the steps before the interruption too
    assert resumed["schedule"]["batches_per_task"] == full["schedule"]["batches_per_task"]
    assert sum(full["schedule"]["batches_per_task"].values()) == 7
    texts, seconds = ["good fun film", "awful dull plot", "weak story"], ["bad film", "great plot", "dull"]
    np.testing.assert_allclose(resumed.model.predict_logits(texts, task="sent"),
                               full.model.predict_logits(texts, task="sent"), atol=1e-5)
    np.testing.assert_allclose(resumed.model.predict_logits(texts, seconds, task="para"),
                               full.model.predict_logits(texts, seconds, task="para"), atol=1e-5)
    # ... which the resumed steps did train: the model at the interruption predicts otherwise
    assert not np.allclose(cut.model.predict_logits(texts, task="sent"), full.model.predict_logits(texts, task="sent"),
                           atol=1e-5)
    assert not (tmp_path / "cut" / "checkpoints").exists()
    # a finished run is returned, not trained again, with resume; refused without
    again = _run(tmp_path, tiny_encoder_dir, tasks, name="cut", resume=True, **kw)
    assert dict(again) == json.loads((tmp_path / "cut" / "results.json").read_text())
    # the finished run's folder, loaded on the device the resumed run trained on: bitwise the same
    np.testing.assert_array_equal(again.model.to(resumed.model.device).predict_logits(texts, task="sent"),
                                  resumed.model.predict_logits(texts, task="sent"))
    with pytest.raises(ConfigError, match="finished run"):
        _run(tmp_path, tiny_encoder_dir, tasks, name="cut", **kw)


def test_resume_refuses_a_checkpoint_that_would_run_code(tmp_path, tiny_encoder_dir, sentiment_csv):
    tasks = [{"name": "sent", "data": str(sentiment_csv), "label_column": "sentiment"}]
    kw = dict(select_best=False, max_steps=4, save_steps=2)
    _run(tmp_path, tiny_encoder_dir, tasks, name="cut", callbacks=[StopAt(2)], **kw)
    marker = tmp_path / "ran"
    _poison(tmp_path / "cut" / "checkpoints" / "checkpoint-2" / "optimizer.pt", marker)
    with pytest.raises(ModelError, match=r"checkpoint-2: refused to resume: .*Unsupported global: GLOBAL exec"):
        _run(tmp_path, tiny_encoder_dir, tasks, name="cut", resume=True, **kw)
    assert not marker.exists()


def test_runs_that_would_train_nothing_or_in_emulated_precision_are_refused_before_any_data_is_loaded(tmp_path,
                                                                                                     monkeypatch):
    """Issue 19 §1, §3 (as train's): mixed precision without a GPU, a contrastive task's batch of one, a
    non-finite objective hyper-parameter: one line each, before anything is loaded."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: False)
    if hasattr(torch, "xpu"):
        monkeypatch.setattr(torch.xpu, "is_available", lambda: False)
    task = {"name": "a", "data": "no-such-data", "objective": "ce-scl"}
    for options, message in [
        ({"fp16": True}, "fp16 needs a GPU, and torch sees none on this machine: leave out fp16 to train in float32 on "
                         "the CPU"),
        ({"fp16": True, "use_cpu": True}, "fp16 is mixed precision on a GPU and use_cpu trains on the CPU, where "
                                          "float16 is emulated (about 10x slower than float32): leave out fp16, or "
                                          "give bf16 with use_cpu for bfloat16 on the CPU"),
        ({"bf16": True}, "bf16 needs a GPU, and torch sees none on this machine: leave out bf16 to train in float32, "
                         "or add use_cpu for bfloat16 autocast on the CPU"),
        ({"batch_size": 1}, "task 'a': objective ce-scl compares the rows of a batch with each other and needs "
                            "batch_size >= 2, got 1"),
        ({"tasks": [{**task, "batch_size": 1}]}, "task 'a': objective ce-scl compares the rows of a batch with each "
                                                 "other and needs batch_size >= 2, got 1"),
        ({"tasks": [{**task, "hparams": {"temperature": math.inf}}]}, "task 'a': objective ce-scl: temperature must be a "
                                                                       "finite number, got inf"),
        ({"tasks": [{**task, "hparams": {"lambda": math.nan}}]}, "task 'a': objective ce-scl: lambda must be a finite "
                                                                 "number, got nan"),
    ]:
        with pytest.raises(ConfigError) as err:
            train_multitask(**{"tasks": [task], "output": str(tmp_path / "x"), "progress": False, **options})
        assert str(err.value) == message
    assert not (tmp_path / "x").exists()


def test_resume_skips_an_incomplete_checkpoint_as_train_does(tmp_path, tiny_encoder_dir, sentiment_csv, capfd):
    """Issue 19 §5: the same resume as train's (contrastfit.checkpoints.resume_checkpoint)."""
    import shutil

    tasks = [{"name": "sent", "data": str(sentiment_csv), "label_column": "sentiment"}]
    kw = dict(select_best=False, max_steps=4, save_steps=2)
    _run(tmp_path, tiny_encoder_dir, tasks, name="cut", callbacks=[StopAt(2)], **kw)
    checkpoints = tmp_path / "cut" / "checkpoints"
    shutil.copytree(checkpoints / "checkpoint-2", checkpoints / "checkpoint-4")  # a kill before its state was written
    (checkpoints / "checkpoint-4" / "trainer_state.json").unlink()
    optimizer = checkpoints / "checkpoint-4" / "optimizer.pt"
    optimizer.write_bytes(optimizer.read_bytes()[:100])
    capfd.readouterr()
    resumed = _run(tmp_path, tiny_encoder_dir, tasks, name="cut", resume=True, **kw)
    assert (f"contrastfit: resuming from {checkpoints / 'checkpoint-2'} (step 2); skipped the incomplete "
            "checkpoint-4 (trainer_state.json is missing)") in capfd.readouterr().err.splitlines()
    assert resumed["training"]["resumed_from"].endswith("checkpoint-2") and resumed["training"]["steps"] == 4
