"""Gradient caching (issue 11, section 1): the gradients of every method's loss with caching equal
those of one full-batch pass with the same dropout masks, in float64, at chunk sizes that do and do
not divide the batch; refusals are one line; training runs with and without caching end with the
same weights; mixed precision and gradient accumulation compose.

Device-sensitive tests run on every device of ``conftest.DEVICES``: the CPU, and CUDA where a GPU is
visible (the replay must restore the CUDA generator of the device the chunk runs on). The tolerances
are the same on both: the reference and the cache run the same kernels on the same device, in
float64 (1e-6 absolute), or bf16 autocast (1e-2 of the largest gradient)."""

from __future__ import annotations

import contextlib
import copy
import json
import shutil

import datasets
import pytest
import torch

from conftest import DEVICES, assert_same_rng, rng_state
from contrastfit import ContrastiveClassifier
from contrastfit.encoders import dropout_probabilities, set_dropout
from contrastfit.errors import ConfigError
from contrastfit.gradcache import GradientCache, cached_backward, check_gradient_cache
from contrastfit.methods import available_methods
from contrastfit.methods.ce import CrossEntropy
from contrastfit.config import TrainConfig
from contrastfit.trainer import build_trainer

LABEL_NAMES = ["negative", "positive"]
TEXTS = ["good fun film", "awful dull plot the movie was", "superb great story", "bad weak plot",
         "the actor was very fun", "boring and dull", "a fine film but not great", "awful awful it was",
         "very good"]
LABELS = [1, 0, 1, 0, 1, 0, 1, 0, 1]  # 9 rows: chunks of 4 do not divide the batch

#: Every method that trains the encoder, with hyper-parameters that fit the tiny encoder (hidden 32).
CASES = [
    ("ce", {}),
    ("ce-scl", {}),
    ("ce-scl-lr", {}),
    ("ce-supcon", {}),
    ("ce-softtriple", {"centers_per_class": 3}),  # SoftTriple on every token state
    ("ce-softtriple", {"centers_per_class": 3, "dml_on": "pooled"}),
    ("ce-projection", {}),
    ("lacon", {"heads": 4}),
    ("lacon-fusion", {"heads": 4}),  # reads the token states (LEAM fusion)
    ("setfit", {}),
    ("supcl-seq", {}),  # three dropout views: three calls, each at its own dropout
    ("self-supervised-cl", {}),
    ("dropout-augmented-ce", {}),
    ("simcse-unsup", {}),  # two calls
    ("simcse-sup", {}),
    ("simcse-sup", {"augmented": True}),  # an extra call on the unpaired anchors' rows
    ("diffcse", {}),  # generator sampling before the calls, discriminator after
    ("distill-kl", {}),  # the teacher's targets looked up by the rows' token ids
    ("distill-cosine", {}),
]
CHUNKS = [1, 4, 20]  # every row alone; 4 + 4 + 1 (does not divide 9); one chunk larger than the batch


def _model(tiny_encoder_dir, name, hparams, seed=0, device="cpu"):
    torch.manual_seed(seed)
    model = ContrastiveClassifier.from_encoder(str(tiny_encoder_dir), name, LABEL_NAMES, hparams=hparams)
    model.double().to(device).train()  # every method, LaCon's fusion block included (heads.LabelFusion follows the dtype)
    if name == "diffcse":  # the unigram generator is built from the tokenised training set
        ids = model.tokenize(TEXTS)["input_ids"]
        model.method.prepare(model, datasets.Dataset.from_dict({"input_ids": ids}))
    if name.startswith("distill-"):  # the teacher's targets of the texts, made before training
        from contrastfit.methods.distill_base import TeacherTargets, teacher_targets

        g = torch.Generator().manual_seed(seed + 1)
        targets = TeacherTargets(TEXTS, logits=3 * torch.randn(len(TEXTS), 2, generator=g),
                                 embeddings=torch.randn(len(TEXTS), 16, generator=g))
        with teacher_targets(targets):
            ids = model.tokenize(TEXTS)["input_ids"]
            model.method.prepare(model, datasets.Dataset.from_dict({"input_ids": ids}))
    return model


def _batch(model, texts=TEXTS, labels=LABELS):
    enc = model.tokenize(texts, padding=True)
    return ({k: torch.tensor(v, device=model.device) for k, v in enc.items()},
            torch.tensor(labels, device=model.device))


@contextlib.contextmanager
def _chunked_with_graph(encoder, chunk):
    """The reference: every encoder call embeds its rows in the same chunks as the cache does (rows
    ordered longest first, each chunk cut to its longest row), so it draws the same dropout masks
    from the same seed, but keeps the graph; the loss and one backward then run on the full batch."""
    real = encoder.forward

    def forward(input_ids, attention_mask, token_type_ids=None):
        rows, width = input_ids.shape
        order = torch.sort(attention_mask.sum(dim=1), descending=True, stable=True).indices
        pooled, tokens = [None] * rows, [None] * rows
        for s in range(0, rows, chunk):
            idx = order[s:s + chunk]
            used = int(attention_mask[idx].sum(dim=0).nonzero().max()) + 1
            piece = {"input_ids": input_ids[idx, :used], "attention_mask": attention_mask[idx, :used]}
            if token_type_ids is not None:
                piece["token_type_ids"] = token_type_ids[idx, :used]
            out = real(**piece)
            padded = torch.nn.functional.pad(out.token_embeddings, (0, 0, 0, width - used))
            for k, i in enumerate(idx.tolist()):
                pooled[i], tokens[i] = out.pooled[k], padded[k]
        return type(out)(pooled=torch.stack(pooled), token_embeddings=torch.stack(tokens), attention_mask=attention_mask)

    encoder.forward = forward
    try:
        yield
    finally:
        del encoder.forward


def _grads(model):
    return {n: (p.grad.clone() if p.grad is not None else None) for n, p in model.named_parameters()}


def _reference_grads(model, inputs, labels, chunk, seed):
    model.zero_grad(set_to_none=True)
    torch.manual_seed(seed)
    with _chunked_with_graph(model.encoder, chunk):
        out = model.method.training_loss(model, inputs, labels)
    out.loss.backward()
    return float(out.loss.detach()), _grads(model), rng_state(model.device.type)


def _cached_grads(model, inputs, labels, chunk, seed):
    model.zero_grad(set_to_none=True)
    torch.manual_seed(seed)
    out = cached_backward(model, inputs, labels, chunk)
    return float(out.loss.detach()), _grads(model), rng_state(model.device.type)


def _assert_same_grads(expected, actual, atol=1e-6, rtol=0.0):
    assert expected.keys() == actual.keys()
    for name, g in expected.items():
        h = actual[name]
        if g is None or h is None:
            assert (g is None or not g.any()) and (h is None or not h.any()), name
            continue
        torch.testing.assert_close(h, g, atol=atol, rtol=rtol, msg=lambda m: f"{name}: {m}")


def test_every_training_method_is_covered():
    trained = {name for name, spec in available_methods().items() if spec.cls.trains_encoder}
    assert {name for name, _ in CASES} == trained


@pytest.mark.parametrize("name,hparams", CASES, ids=[f"{n}{'-' + '-'.join(map(str, h.values())) if h else ''}"
                                                     for n, h in CASES])
@pytest.mark.parametrize("device", DEVICES)
def test_cached_gradients_equal_full_batch_gradients_with_the_same_dropout(tiny_encoder_dir, name, hparams, device):
    model = _model(tiny_encoder_dir, name, hparams, device=device)
    inputs, labels = _batch(model)
    encoder_grad_seen = False
    for chunk in CHUNKS:
        loss_ref, ref, rng_ref = _reference_grads(model, inputs, labels, chunk, seed=chunk)
        loss, got, rng = _cached_grads(model, inputs, labels, chunk, seed=chunk)
        assert loss == pytest.approx(loss_ref, rel=1e-12, abs=1e-12)
        _assert_same_grads(ref, got)
        # the random stream continues where it would have without caching
        assert_same_rng(rng, rng_ref)
        encoder_grad_seen |= any(g is not None and bool(g.abs().sum() > 0)
                                 for n, g in got.items() if n.startswith("encoder."))
    assert encoder_grad_seen  # the comparison is not vacuous: the encoder gets a gradient


@pytest.mark.parametrize("name,hparams", [("ce-scl", {}), ("ce-softtriple", {"centers_per_class": 3}),
                                          ("lacon-fusion", {"heads": 4})])
@pytest.mark.parametrize("device", DEVICES)
def test_with_dropout_off_cached_gradients_equal_one_unchunked_pass(tiny_encoder_dir, name, hparams, device):
    """Splitting the rows is invisible: against a single encoder call on the whole batch. Every
    dropout of the model is off, the head's too: on CUDA the head's dropout drew different masks
    from the same generator state on the cached embeddings and on one call's pooled output (seen on
    an H100, torch 2.11; the encoder at dropout 0 did not move the generator, checked there), so
    only a run without random draws can be compared with one unchunked call."""
    model = _model(tiny_encoder_dir, name, hparams, device=device)
    inputs, labels = _batch(model)
    with set_dropout(model, 0.0):
        model.zero_grad(set_to_none=True)
        torch.manual_seed(0)
        ref_out = model.method.training_loss(model, inputs, labels)
        ref_out.loss.backward()
        ref = _grads(model)
        for chunk in (2, 4):
            loss, got, _ = _cached_grads(model, inputs, labels, chunk, seed=0)
            assert loss == pytest.approx(float(ref_out.loss.detach()), rel=1e-10)
            _assert_same_grads(ref, got)


@pytest.mark.parametrize("device", DEVICES)
def test_without_replaying_the_random_state_the_gradients_differ(tiny_encoder_dir, monkeypatch, device):
    """The equality above depends on the replay of dropout masks: skip the replay and it fails."""
    import contrastfit.gradcache as gc

    model = _model(tiny_encoder_dir, "ce-scl", {}, device=device)
    inputs, labels = _batch(model)
    _, ref, _ = _reference_grads(model, inputs, labels, 4, seed=1)
    monkeypatch.setattr(gc, "_restore_random_state", lambda state: None)
    _, got, _ = _cached_grads(model, inputs, labels, 4, seed=1)
    with pytest.raises(AssertionError):
        _assert_same_grads(ref, got)


def test_supcl_seq_views_replay_their_own_dropout(tiny_encoder_dir):
    """Each of SupCL-Seq's calls is recorded with the dropout probability it ran at."""
    model = _model(tiny_encoder_dir, "supcl-seq", {"view_dropouts": (0.0, 0.3)})
    inputs, labels = _batch(model)
    configured = dropout_probabilities(model.encoder)
    cache = GradientCache(model.encoder, 4)
    with cache.caching():
        loss = model.method.training_loss(model, inputs, labels).loss
    assert [sorted(set(c.dropout)) for c in cache.calls] == [[0.0], [0.3]]
    # rows longest first (ties in batch order), chunks of 4, each cut to its longest row
    lengths = inputs["attention_mask"].sum(dim=1).tolist()
    assert lengths == [5, 8, 5, 5, 7, 5, 8, 6, 4]
    expected = [([1, 6, 4, 7], 8), ([0, 2, 3, 5], 5), ([8], 4)]
    for c in cache.calls:
        assert [(idx.tolist(), width) for idx, width in c.spans] == expected
    loss.backward()
    cache.backward()
    assert dropout_probabilities(model.encoder) == configured  # the replay put the configured values back


def _replayed_outputs(model, cache, loss):
    """Back-propagate ``loss`` and replay ``cache``; return the pooled outputs the replay computed."""
    places, offset = [], 0  # where each replayed chunk's rows go in the calls' concatenated outputs
    for call in cache.calls:
        places += [offset + idx for idx, _ in call.spans]
        offset += sum(len(idx) for idx, _ in call.spans)
    seen = []
    hook = model.encoder.register_forward_hook(lambda module, args, out: seen.append(out.pooled.detach().clone()))
    try:
        loss.backward()
        cache.backward()
    finally:
        hook.remove()
    assert len(seen) == len(places)
    result = torch.empty((offset, seen[0].shape[1]), dtype=seen[0].dtype, device=seen[0].device)
    for rows, out in zip(places, seen):
        result[rows] = out
    return result


@pytest.mark.parametrize("device", DEVICES)
def test_mixed_precision_replays_autocast(tiny_encoder_dir, device):
    """Under bf16 autocast the replay recomputes exactly what the first pass cached (same autocast,
    same dropout masks), and the gradients agree with the reference up to bf16 rounding."""
    model = _model(tiny_encoder_dir, "ce-scl", {}, device=device).float()
    inputs, labels = _batch(model)
    with torch.autocast(device, dtype=torch.bfloat16):
        _, ref, _ = _reference_grads(model, inputs, labels, 4, seed=3)

    def first_pass():
        model.zero_grad(set_to_none=True)
        torch.manual_seed(3)
        cache = GradientCache(model.encoder, 4)
        with torch.autocast(device, dtype=torch.bfloat16):
            with cache.caching():
                out = model.method.training_loss(model, inputs, labels)
        return cache, out.loss, cache.calls[0].leaves["pooled"].detach().clone()

    cache, loss, cached = first_pass()
    assert cache.calls[0].autocast == (device, True, torch.bfloat16)
    # the Trainer back-propagates outside autocast; the replay puts the recorded autocast back
    assert torch.equal(_replayed_outputs(model, cache, loss), cached)
    grads = _grads(model)
    scale = max(float(g.abs().max()) for g in ref.values() if g is not None)
    for name, g in ref.items():
        if g is not None:  # bf16 rounding: a sum of bf16 gradients over chunks vs per chunk
            torch.testing.assert_close(grads[name], g, rtol=0, atol=1e-2 * scale, msg=lambda m: f"{name}: {m}")
    # the check has teeth: a replay in full precision recomputes something else
    cache, loss, cached = first_pass()
    cache.calls[0].autocast = (device, False, torch.bfloat16)
    assert not torch.equal(_replayed_outputs(model, cache, loss), cached)


@pytest.mark.parametrize("device", DEVICES)
def test_replay_recomputes_the_cached_embeddings_with_dropout(tiny_encoder_dir, device):
    """With dropout on, every replayed chunk equals what the first pass cached, for each view."""
    model = _model(tiny_encoder_dir, "simcse-unsup", {}, device=device)
    inputs, labels = _batch(model)
    torch.manual_seed(5)
    cache = GradientCache(model.encoder, 4)
    with cache.caching():
        loss = model.method.training_loss(model, inputs, labels).loss
    cached = torch.cat([c.leaves["pooled"].detach().clone() for c in cache.calls])
    assert len(cache.calls) == 2 and not torch.equal(cached[:9], cached[9:])  # two dropout views differ
    assert torch.equal(_replayed_outputs(model, cache, loss), cached)


def test_encoder_is_restored_and_calls_without_grad_are_not_cached(tiny_encoder_dir):
    model = _model(tiny_encoder_dir, "ce-scl", {})
    inputs, labels = _batch(model)
    cache = GradientCache(model.encoder, 4)
    with pytest.raises(RuntimeError, match="boom"):
        with cache.caching():
            raise RuntimeError("boom")
    assert "forward" not in model.encoder.__dict__
    with cache.caching():
        with torch.no_grad():
            out = model.encoder(**inputs)
    assert not cache.calls and not out.pooled.requires_grad
    cache.backward()  # nothing recorded: nothing to do


def test_a_method_that_refuses_says_why_in_one_line(tiny_encoder_dir, tmp_path):
    class ReadsHiddenStates(CrossEntropy):  # not registered: a stand-in for such a method
        gradient_cache = "its loss reads the backbone's intermediate layers, which are not cached"

    method = ReadsHiddenStates(2, 32)
    with pytest.raises(ConfigError) as err:
        check_gradient_cache(method, 8)
    message = str(err.value)
    assert "\n" not in message and "ce cannot train with gradient caching" in message
    assert "intermediate layers" in message
    model = _model(tiny_encoder_dir, "ce", {})
    model.method = ReadsHiddenStates(2, 32)
    inputs, labels = _batch(model)
    with pytest.raises(ConfigError, match="cannot train with gradient caching"):
        cached_backward(model, inputs, labels, 4)
    with pytest.raises(ConfigError, match="cannot train with gradient caching"):
        build_trainer(TrainConfig(method="ce", output=str(tmp_path / "r"), gradient_cache_chunk=4, progress=False),
                      model, None, 1.0)


@pytest.mark.parametrize("bad", [0, -3, 2.5, True, "8"])
def test_bad_chunk_sizes_are_refused(bad):
    with pytest.raises(ConfigError, match="gradient_cache_chunk"):
        check_gradient_cache(CrossEntropy(2, 32), bad)


# ---------------------------------------------------------------------------------------------
# Inside transformers.Trainer
# ---------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def tiny_no_dropout_dir(tiny_encoder_dir, tmp_path_factory):
    """The tiny encoder with every dropout of the encoder at 0 (the head's dropout stays on)."""
    folder = tmp_path_factory.mktemp("tiny-bert-no-dropout")
    shutil.copytree(tiny_encoder_dir, folder, dirs_exist_ok=True)
    config = json.loads((folder / "config.json").read_text())
    config.update(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    (folder / "config.json").write_text(json.dumps(config))
    return folder


def _dataset(model):
    from conftest import sentiment_rows

    from contrastfit.trainer import tokenize_dataset

    rows = sentiment_rows(12)
    ds = datasets.Dataset.from_dict({"text": [r["sentence"] for r in rows],
                                     "label": [LABEL_NAMES.index(r["sentiment"]) for r in rows]})
    return tokenize_dataset(ds, model.tokenizer, model.max_length)


def _run(model, tmp_path, name, chunk, steps=4, **kw):
    config = TrainConfig(method=model.method.name, output=str(tmp_path / name), batch_size=8, learning_rate=1e-3,
                         weight_decay=0.01, warmup_ratio=0.0, save_checkpoints=False, progress=False, logging_steps=1,
                         gradient_cache_chunk=chunk, **kw)
    trainer = build_trainer(config, model, _dataset(model), 1.0, max_steps=steps)
    trainer.train()
    return trainer


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name,hparams,accumulation", [("ce-scl", {}, 1),
                                                      ("ce-softtriple", {"centers_per_class": 3}, 2)])
def test_training_with_and_without_caching_gives_the_same_weights(tiny_no_dropout_dir, tmp_path, name, hparams,
                                                                   accumulation, device):
    plain = _model(tiny_no_dropout_dir, name, hparams, device=device)
    for module in plain.modules():  # the head's dropout too (see the unchunked-pass test above)
        if isinstance(module, torch.nn.Dropout):
            module.p = 0.0
    cached = copy.deepcopy(plain)
    start = {k: v.clone() for k, v in plain.state_dict().items()}
    cpu = device == "cpu"
    t_plain = _run(plain, tmp_path, "plain", None, gradient_accumulation_steps=accumulation, use_cpu=cpu)
    t_cached = _run(cached, tmp_path, "cached", 3, gradient_accumulation_steps=accumulation, use_cpu=cpu)
    assert plain.device.type == cached.device.type == device
    assert t_plain.state.global_step == t_cached.state.global_step == 4
    after_plain, after_cached = plain.state_dict(), cached.state_dict()
    moved = [k for k in start if k.startswith("encoder.") and not torch.equal(start[k], after_plain[k])]
    assert len(moved) > 10  # training did move the encoder
    for key in after_plain:
        torch.testing.assert_close(after_cached[key], after_plain[key], atol=1e-6, rtol=0, msg=lambda m: f"{key}: {m}")
    losses = lambda t: [h["loss"] for h in t.state.log_history if "loss" in h]  # noqa: E731
    assert losses(t_cached) == pytest.approx(losses(t_plain), rel=1e-6)


@pytest.mark.parametrize("device", DEVICES)
def test_trainer_step_with_mixed_precision_and_caching(tiny_no_dropout_dir, tmp_path, device):
    """bf16 (autocast through the accelerator, on the CPU and on CUDA): the cached run trains, and its
    weights stay close to the uncached run's (bf16 arithmetic, so not equal)."""
    plain = _model(tiny_no_dropout_dir, "ce-scl", {}, device=device).float()
    cached = copy.deepcopy(plain)
    _run(plain, tmp_path, "plain", None, steps=2, bf16=True, use_cpu=device == "cpu")
    trainer = _run(cached, tmp_path, "cached", 3, steps=2, bf16=True, use_cpu=device == "cpu")
    assert plain.device.type == cached.device.type == device
    losses = [h["loss"] for h in trainer.state.log_history if "loss" in h]
    assert len(losses) == 2 and all(torch.isfinite(torch.tensor(x)) for x in losses)  # logged every step (logging_steps=1)
    a, b = plain.state_dict(), cached.state_dict()
    worst = max(float((a[k].float() - b[k].float()).abs().max()) for k in a)
    assert worst < 1e-2


@pytest.mark.parametrize("device", DEVICES)
def test_resume_with_caching_gives_the_uninterrupted_model(tmp_path, tiny_encoder_dir, sentiment_csv, device):
    """Checkpoints and --resume keep working: an interrupted cached run, resumed, ends where an
    uninterrupted cached run does (dropout on: the random state travels with the checkpoint)."""
    import numpy as np
    from transformers import TrainerCallback

    from contrastfit import train

    class StopAt(TrainerCallback):  # a job told to stop at step 2, with a checkpoint there
        def on_step_end(self, args, state, control, **kwargs):
            if state.global_step >= 2:
                control.should_training_stop = control.should_save = True
            return control

    kw = dict(method="ce-scl", data=str(sentiment_csv), model=str(tiny_encoder_dir), label_column="sentiment",
              epochs=2, batch_size=8, learning_rate=1e-3, progress=False, save_steps=2, shots=8, select_best=False,
              gradient_cache_chunk=3, use_cpu=device == "cpu")
    full = train(output=str(tmp_path / "full"), **kw)
    cut = train(output=str(tmp_path / "cut"), callbacks=[StopAt()], **kw)
    assert cut.interrupted.at_step == 2 and not (tmp_path / "cut" / "results.json").exists()
    resumed = train(output=str(tmp_path / "cut"), resume=True, **kw)
    assert full.model.device.type == resumed.model.device.type == device
    assert resumed["training"]["resumed_from"].endswith("checkpoint-2")
    assert resumed["training"]["steps"] == full["training"]["steps"] == 4
    assert resumed["training"]["gradient_cache_chunk"] == full["training"]["gradient_cache_chunk"] == 3
    texts = ["good fun film", "awful dull plot"]
    np.testing.assert_allclose(resumed.model.predict_logits(texts), full.model.predict_logits(texts), atol=1e-5)
