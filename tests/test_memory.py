"""Cross-batch memory (issue 11, section 3; contrastfit.memory, Wang et al. 2020): the queue's order
and eviction, the warm-up rule, the loss with a memory against a hand-written SupCon over one batch
holding the memory's rows as extra candidates, refusals, and the Trainer: attached while training,
in checkpoints (exact resume), not in the saved model. Two processes: tests/test_distributed.py."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

from contrastfit import ContrastiveClassifier
from contrastfit.errors import ConfigError
from contrastfit.losses import supcon
from contrastfit.memory import CrossBatchMemory, attach_memory, check_memory, detach_memory, memory_methods
from contrastfit.methods import available_methods
from contrastfit.modeling import non_encoder_state
from contrastfit.config import TrainConfig

TEXTS = ["good great film", "bad awful plot", "superb fun story", "dull weak movie", "fine good actor",
         "boring bad story", "great fun plot", "awful dull film", "a very good story", "the plot was weak",
         "fun and fine", "not good"]
LABELS = [1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0]
BATCHES = [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 10, 11]]


# ---------------------------------------------------------------------------------------------
# The queue
# ---------------------------------------------------------------------------------------------

def test_queue_keeps_the_last_rows_oldest_first_and_is_used_once_full():
    memory = CrossBatchMemory(5, 2)
    rows = torch.arange(30, dtype=torch.float32).view(15, 2)
    memory.enqueue(rows[:3], torch.tensor([0, 1, 2]))
    held, labels = memory.held()
    assert torch.equal(held, rows[:3]) and labels.tolist() == [0, 1, 2]
    assert not memory.full and memory.candidates() == {}  # warm-up: not used before it is full
    memory.enqueue(rows[3:7], torch.tensor([3, 4, 5, 6]))  # 7 rows seen: the 2 oldest are evicted
    held, labels = memory.held()
    assert torch.equal(held, rows[2:7]) and labels.tolist() == [2, 3, 4, 5, 6]
    assert memory.full and int(memory.count) == 5
    cands = memory.candidates()
    assert torch.equal(cands["candidates"], rows[2:7]) and cands["candidate_labels"].tolist() == [2, 3, 4, 5, 6]
    memory.enqueue(rows[7:15], torch.arange(7, 15))  # a batch larger than the memory: its last 5 rows
    held, labels = memory.held()
    assert torch.equal(held, rows[10:15]) and labels.tolist() == [10, 11, 12, 13, 14]
    live = rows[:2].clone().requires_grad_(True) * 2
    memory.enqueue(live, torch.tensor([0, 1]))  # stored detached
    assert not memory.embeddings.requires_grad
    assert torch.equal(memory.held()[0][-2:], rows[:2] * 2)


def test_buffers_are_in_the_state_dict_and_a_load_restores_the_queue():
    memory = CrossBatchMemory(4, 3)
    memory.enqueue(torch.randn(3, 3), torch.tensor([1, 0, 1]))
    state = memory.state_dict()
    assert set(state) == {"embeddings", "labels", "count"}
    other = CrossBatchMemory(4, 3)
    other.load_state_dict(state)
    assert int(other.count) == 3 and torch.equal(other.held()[0], memory.held()[0])
    assert other.held()[1].tolist() == [1, 0, 1]


# ---------------------------------------------------------------------------------------------
# The loss
# ---------------------------------------------------------------------------------------------

def _reference_supcon(anchors, labels, memory, memory_labels, t):
    """SupCon written out, row by row: every anchor against the other batch rows and every memory row
    (candidates, never anchors); mean over anchors with a positive."""
    def unit(v):
        norm = math.sqrt(sum(x * x for x in v))
        return [x / norm for x in v]

    z = [unit(a) for a in anchors.tolist()]
    m = [unit(r) for r in memory.tolist()]
    y, ym = labels.tolist(), memory_labels.tolist()
    terms = []
    for i, zi in enumerate(z):
        others = [(zj, y[j]) for j, zj in enumerate(z) if j != i] + list(zip(m, ym))
        sims = [sum(a * b for a, b in zip(zi, o)) / t for o, _ in others]
        log_denominator = math.log(sum(math.exp(s) for s in sims))
        positives = [s for s, (_, label) in zip(sims, others) if label == y[i]]
        if positives:
            terms.append(-sum(s - log_denominator for s in positives) / len(positives))
    return sum(terms) / len(terms)


def _model(tiny_encoder_dir, method, hparams=None):
    torch.manual_seed(0)
    return ContrastiveClassifier.from_encoder(str(tiny_encoder_dir), method, ["neg", "pos"], hparams=hparams or {},
                                              pooling="mean").double()


def _batch(model, rows):
    enc = model.tokenize([TEXTS[i] for i in rows], padding=True)
    return {k: torch.tensor(v) for k, v in enc.items()}, torch.tensor([LABELS[i] for i in rows])


#: (method, term logged, memory size): ce-scl's family contrasts the pooled embeddings (4 rows a step),
#: supcl-seq every one of its 3 views (12 rows a step). Each memory is full after the first two batches.
CASES = [("ce-scl", "scl", 6), ("ce-supcon", "scl", 6), ("supcl-seq", "supcon", 18)]


@pytest.mark.parametrize("method,part,size", CASES, ids=[c[0] for c in CASES])
def test_loss_with_a_memory_equals_one_batch_holding_its_rows_as_extra_candidates(tiny_encoder_dir, method, part,
                                                                                 size):
    """The encoder frozen (and dropout off), so that the memory's rows are what the encoder gives now:
    the method's term on the third batch equals SupCon over that batch with the memory's rows (the last
    ``size`` rows of the first two batches) as extra candidates, written out by hand; the first two
    batches (the warm-up, memory not full) give the plain in-batch term; each batch is enqueued after
    it is contrasted."""
    model = _model(tiny_encoder_dir, method).eval()
    for p in model.encoder.parameters():
        p.requires_grad_(False)
    memory = attach_memory(model, size)
    views = len(model.method.hparams.get("view_dropouts", (None,)))
    t = model.method.hparams["temperature"]

    def rows_of(batch):  # what the term contrasts: the pooled embedding, once per view
        inputs, labels = _batch(model, batch)
        with torch.no_grad():
            pooled = model.encoder(**inputs).pooled
        return pooled.repeat(views, 1), labels.repeat(views)

    seen_x, seen_y = [], []
    for step, batch in enumerate(BATCHES):
        inputs, labels = _batch(model, batch)
        before, before_labels = memory.held()
        term = model.method.training_loss(model, inputs, labels).parts[part]
        x, y = rows_of(batch)
        if step < 2:  # warm-up
            assert before.shape[0] < size
            assert float(term) == pytest.approx(float(supcon(x, y, t)), abs=1e-10)
        else:
            assert before.shape[0] == size
            mem_x, mem_y = torch.cat(seen_x)[-size:], torch.cat(seen_y)[-size:]
            assert torch.allclose(before, mem_x, atol=1e-10) and torch.equal(before_labels, mem_y)
            expected = _reference_supcon(x, y, mem_x, mem_y, t)
            assert float(term) == pytest.approx(expected, abs=1e-10)
            # the memory matters: the in-batch term alone is another number
            assert abs(float(supcon(x, y, t)) - expected) > 1e-3
        seen_x.append(x)
        seen_y.append(y)
        # compared, then enqueued: the batch's rows are now the newest rows
        held, held_labels = memory.held()
        assert torch.allclose(held[-x.shape[0]:], x[-size:], atol=1e-10) and torch.equal(held_labels[-len(y):], y[-size:])
    assert memory.full


def test_the_term_with_a_memory_still_trains_the_encoder(tiny_encoder_dir):
    """The memory's rows are constants; the anchors keep their graph (pitfall 4)."""
    model = _model(tiny_encoder_dir, "ce-scl").train()
    attach_memory(model, 4)
    for batch in BATCHES[:2]:
        model.method.training_loss(model, *_batch(model, batch))
    assert model.method.memory.full
    out = model.method.training_loss(model, *_batch(model, BATCHES[2]))
    model.zero_grad()
    out.parts["scl"].backward()
    assert any(p.grad is not None and bool(p.grad.abs().sum() > 0) for p in model.encoder.parameters())
    assert not model.method.memory.embeddings.requires_grad


def test_supcon_candidates_are_not_anchors():
    """A candidate with the anchor's label is a positive; candidates add no anchor of their own."""
    torch.manual_seed(0)
    x, c = torch.randn(4, 3, dtype=torch.float64), torch.randn(5, 3, dtype=torch.float64)
    y, yc = torch.tensor([0, 1, 2, 3]), torch.tensor([0, 0, 1, 4, 4])
    got = supcon(x, y, 0.2, candidates=c, candidate_labels=yc)
    assert float(got) == pytest.approx(_reference_supcon(x, y, c, yc, 0.2), abs=1e-12)
    # the anchors without any positive (labels 2, 3) are left out, as in the batch alone
    assert float(supcon(x, y, 0.2)) == 0.0
    with pytest.raises(ValueError, match="go together"):
        supcon(x, y, 0.2, candidates=c)


# ---------------------------------------------------------------------------------------------
# Which methods, and one-line refusals
# ---------------------------------------------------------------------------------------------

def test_the_methods_with_a_supcon_term_take_a_memory_and_every_other_one_is_refused():
    assert memory_methods() == ["ce-scl", "ce-scl-lr", "ce-supcon", "supcl-seq"]
    for name in available_methods():
        if name in memory_methods():
            check_memory(name, 8)
            TrainConfig(method=name, memory_size=8).validate()
            continue
        with pytest.raises(ConfigError) as err:
            TrainConfig(method=name, memory_size=8).validate()
        message = str(err.value)
        assert "\n" not in message and message.startswith(f"{name} cannot use a cross-batch memory (--memory-size)")


def test_attaching_to_a_method_without_a_supcon_term_is_refused(tiny_encoder_dir):
    model = _model(tiny_encoder_dir, "lacon", {"heads": 4})
    with pytest.raises(ConfigError, match="^lacon cannot use a cross-batch memory"):
        attach_memory(model, 8)
    with pytest.raises(ConfigError, match="must be an integer >= 1"):
        check_memory("ce-scl", 0)


def test_attach_and_detach(tiny_encoder_dir):
    model = _model(tiny_encoder_dir, "ce-scl")
    keys = set(model.state_dict())
    memory = attach_memory(model, 8)
    assert memory.embeddings.dtype == torch.float64 and memory.embeddings.shape == (8, 32)
    assert {"method.memory.embeddings", "method.memory.labels", "method.memory.count"} <= set(model.state_dict())
    # DistributedDataParallel leaves the memory alone (no broadcast per step: every process fills it alike)
    assert sorted(model._ddp_params_and_buffers_to_ignore) == ["method.memory.count", "method.memory.embeddings",
                                                              "method.memory.labels"]
    detach_memory(model)
    assert model.method.memory is None and set(model.state_dict()) == keys
    assert not hasattr(model, "_ddp_params_and_buffers_to_ignore")


# ---------------------------------------------------------------------------------------------
# Inside the Trainer: checkpoints, resume, the saved model
# ---------------------------------------------------------------------------------------------

def _train_kw(sentiment_csv, tiny_encoder_dir):
    # 16 training rows, batches of 8: 2 steps an epoch, 4 in all; the memory (8) is full after step 1
    return dict(method="ce-scl", data=str(sentiment_csv), model=str(tiny_encoder_dir), label_column="sentiment",
                epochs=2, batch_size=8, learning_rate=1e-3, progress=False, save_steps=2, shots=8,
                select_best=False, memory_size=8)


def test_resume_restores_the_memory_and_the_saved_model_does_not_carry_it(tmp_path, tiny_encoder_dir, sentiment_csv,
                                                                         monkeypatch):
    """An interrupted run, resumed, ends with the uninterrupted run's model: the checkpoint holds the
    memory, and the resumed run contrasts with it. A resume that lost it (the memory's buffers not
    loaded) ends elsewhere, so the comparison can fail. The saved model has no memory in it."""
    from transformers import TrainerCallback

    from contrastfit import train

    class StopAt(TrainerCallback):  # a job told to stop at step 2, with a checkpoint there
        def on_step_end(self, args, state, control, **kwargs):
            if state.global_step >= 2:
                control.should_training_stop = control.should_save = True
            return control

    class Spy(TrainerCallback):  # the memory while training
        held: list[int] = []

        def on_step_end(self, args, state, control, model=None, **kwargs):
            self.held.append(int(model.method.memory.count))

    kw = _train_kw(sentiment_csv, tiny_encoder_dir)
    spy = Spy()
    full = train(output=str(tmp_path / "full"), callbacks=[spy], **kw)
    assert spy.held == [8, 8, 8, 8]
    assert full["training"]["memory_size"] == 8 and full["training"]["steps"] == 4
    cut = train(output=str(tmp_path / "cut"), callbacks=[StopAt()], **kw)
    assert cut.interrupted.at_step == 2
    state = load_file(str(tmp_path / "cut" / "checkpoints" / "checkpoint-2" / "model.safetensors"))
    assert int(state["method.memory.count"]) == 8 and state["method.memory.embeddings"].abs().sum() > 0
    for other, saying in ((4, "--memory-size 4"), (None, "none")):  # resuming with another memory: refused
        with pytest.raises(ConfigError) as err:
            train(output=str(tmp_path / "cut"), resume=True, **{**kw, "memory_size": other})
        assert "\n" not in str(err.value)
        assert str(err.value).endswith(f"was saved with a cross-batch memory of 8 rows; resume it with --memory-size 8 "
                                       f"(got {saying})")
    resumed = train(output=str(tmp_path / "cut"), resume=True, **kw)
    assert resumed["training"]["resumed_from"].endswith("checkpoint-2")
    texts = ["good fun film", "awful dull plot", "a very weak story"]
    np.testing.assert_allclose(resumed.model.predict_logits(texts), full.model.predict_logits(texts), atol=1e-6)

    # the saved model: no memory, the same tensors as a model of the method without one, reloads
    head = load_file(str(tmp_path / "full" / "head.safetensors"))
    assert not [k for k in head if "memory" in k]
    assert set(head) == set(non_encoder_state(full.model))
    assert full.model.method.memory is None
    again = ContrastiveClassifier.from_pretrained(tmp_path / "full")
    np.testing.assert_allclose(again.predict_logits(texts), full.model.predict_logits(texts), atol=1e-6)

    # the control: a resume whose memory was not restored (buffers skipped on load) ends elsewhere
    cut2 = train(output=str(tmp_path / "cut2"), callbacks=[StopAt()], **kw)
    assert cut2.interrupted.at_step == 2
    monkeypatch.setattr(CrossBatchMemory, "_load_from_state_dict", lambda self, *args, **kwargs: None)
    lost = train(output=str(tmp_path / "cut2"), resume=True, **kw)
    assert np.abs(lost.model.predict_logits(texts) - full.model.predict_logits(texts)).max() > 1e-4
