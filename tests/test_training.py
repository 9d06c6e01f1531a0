"""Training, saving and reloading on the tiny encoder: what the Trainer really does."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest
import torch

from transformers import TrainerCallback

from contrastfit import ContrastiveClassifier, train
from contrastfit.errors import ConfigError, ModelError
from contrastfit.losses import supcon
from contrastfit.trainer import ContrastfitTrainer
from contrastfit.config import TrainConfig


def _train(tmp_path, tiny_encoder_dir, data, method="ce-scl", name="run", **kw):
    opts = dict(method=method, data=str(data), output=str(tmp_path / name), model=str(tiny_encoder_dir),
                epochs=kw.pop("epochs", 2), batch_size=8, learning_rate=1e-3, progress=False, logging_steps=1,
                label_column="sentiment")
    opts.update(kw)
    return train(**opts)


def test_round_trip_predictions_identical(tmp_path, tiny_encoder_dir, sentiment_csv):
    result = _train(tmp_path, tiny_encoder_dir, sentiment_csv)
    texts = ["good fun film", "awful dull plot", "the movie was very weak", "superb"]
    before = result.model.predict_logits(texts)
    reloaded = ContrastiveClassifier.from_pretrained(tmp_path / "run", device=result.model.device)  # on the device it trained on: the same kernels, so bitwise the same
    after = reloaded.predict_logits(texts)
    np.testing.assert_array_equal(before, after)
    assert reloaded.label_names == ["negative", "positive"]
    assert reloaded.method.hparams == {"lambda": 0.9, "temperature": 0.3}
    cfg = json.loads((tmp_path / "run" / "contrastfit.json").read_text())
    # provenance: method, hyper-parameters, seed, data split and hash, model, versions
    assert cfg["method"] == "ce-scl" and cfg["seed"] == 0
    assert len(cfg["data"]["train_hash"]) == 16 and cfg["data"]["train_size"] > 0
    assert "torch" in cfg["versions"] and "transformers" in cfg["versions"]
    assert (tmp_path / "run" / "encoder" / "config.json").is_file()
    assert (tmp_path / "run" / "head.safetensors").is_file()
    assert not (tmp_path / "run" / "checkpoints").exists()


def test_results_record_metrics_and_loss_parts(tmp_path, tiny_encoder_dir, sentiment_csv):
    result = _train(tmp_path, tiny_encoder_dir, sentiment_csv)
    record = json.loads((tmp_path / "run" / "results.json").read_text())
    assert set(record["metrics"]) == {"validation"}  # a local file without --test-data has no test split
    assert 0.0 <= record["metrics"]["validation"]["accuracy"] <= 1.0
    logged = [h for h in record["log_history"] if "loss" in h]
    assert logged and all("loss_ce" in h and "loss_scl" in h for h in logged)
    # the logged total is the weighted sum of the logged parts
    h = logged[0]
    assert h["loss"] == pytest.approx(0.1 * h["loss_ce"] + 0.9 * h["loss_scl"], rel=1e-3)
    assert result["hparams"] == {"lambda": 0.9, "temperature": 0.3}


def test_contrastive_term_alone_moves_encoder(tmp_path, tiny_encoder_dir, sentiment_csv):
    """Pitfall 4: with lambda = 1 only SupCon trains; the encoder must still change."""
    model = ContrastiveClassifier.from_encoder(str(tiny_encoder_dir), "ce-scl", ["negative", "positive"],
                                               hparams={"lambda": 1.0})
    model.train()
    enc = model.tokenize(["good fun film", "superb great", "awful dull", "bad weak plot"], padding=True)
    batch = {k: torch.tensor(v) for k, v in enc.items()}
    labels = torch.tensor([1, 1, 0, 0])
    out = model(**batch, labels=labels)
    assert out.loss.item() == pytest.approx(out.loss_parts["scl"].item(), rel=1e-5)
    out.loss.backward()
    grads = [p.grad for n, p in model.named_parameters() if n.startswith("encoder.") and p.grad is not None]
    assert grads and sum(float(g.abs().sum()) for g in grads) > 0
    # and the head gets no gradient from a lambda = 1 objective
    assert all(p.grad is None or float(p.grad.abs().sum()) == 0 for p in model.head.parameters())
    model.eval()  # evaluation: the task loss on the logits, no parts
    assert model(**batch, labels=labels).loss_parts is None


def test_supcon_gradient_reaches_encoder_through_trainer(tmp_path, tiny_encoder_dir, sentiment_csv):
    before = ContrastiveClassifier.from_encoder(str(tiny_encoder_dir), "ce", ["a", "b"]).encoder.state_dict()
    result = _train(tmp_path, tiny_encoder_dir, sentiment_csv, hparams={"lambda": 1.0}, weight_decay=0.0, epochs=1)
    after = result.model.encoder.state_dict()
    changed = [k for k in before if not torch.equal(before[k], after[k].cpu())]
    assert len(changed) > len(before) // 2


def test_trainer_feeds_class_balanced_batches(tmp_path, tiny_encoder_dir, sentiment_csv, monkeypatch):
    """Pitfall 5: check the batches the Trainer really computes the loss on, not the setting."""
    seen: list[list[int]] = []
    original = ContrastfitTrainer.compute_loss

    def spy(self, model, inputs, *args, **kwargs):
        if model.training:
            seen.append(inputs["labels"].tolist())
        return original(self, model, inputs, *args, **kwargs)

    monkeypatch.setattr(ContrastfitTrainer, "compute_loss", spy)
    _train(tmp_path, tiny_encoder_dir, sentiment_csv, shots=5, epochs=3, validation_split=0)
    assert len(seen) == 3 * 2  # 10 examples, batch 8 -> 2 batches per epoch
    for labels in seen:
        counts = np.bincount(labels, minlength=2)
        assert len(labels) == 8 and (counts >= 2).all(), labels


def _batch_labels(monkeypatch) -> list[list[int]]:
    seen: list[list[int]] = []
    original = ContrastfitTrainer.compute_loss

    def spy(self, model, inputs, *args, **kwargs):
        if model.training:
            seen.append(inputs["labels"].tolist())
        return original(self, model, inputs, *args, **kwargs)

    monkeypatch.setattr(ContrastfitTrainer, "compute_loss", spy)
    return seen


def test_every_method_gets_the_same_sampler_by_default(tmp_path, tiny_encoder_dir, sentiment_csv, monkeypatch):
    """Issue 9: CE is not handed other batches than the contrastive methods it is compared with."""
    seen = _batch_labels(monkeypatch)
    _train(tmp_path, tiny_encoder_dir, sentiment_csv, method="ce", name="ce", shots=5, epochs=1)
    ce_batches = list(seen)
    seen.clear()
    _train(tmp_path, tiny_encoder_dir, sentiment_csv, method="ce-scl", name="scl", shots=5, epochs=1)
    assert ce_batches == seen and [len(b) for b in seen] == [8, 8]  # balanced: every batch full


def test_random_sampler_is_the_librarys(tmp_path, tiny_encoder_dir, sentiment_csv, monkeypatch):
    seen = _batch_labels(monkeypatch)
    with pytest.warns(UserWarning, match="in-batch positives"):
        _train(tmp_path, tiny_encoder_dir, sentiment_csv, method="ce-scl", shots=5, epochs=1, sampler="random")
    assert [len(b) for b in seen] == [8, 2]  # the library's sampler: the last batch is the remainder
    with pytest.raises(ConfigError, match="sampler"):
        _train(tmp_path, tiny_encoder_dir, sentiment_csv, name="bad", sampler="grouped")


def test_cli_sample_is_the_experiments_sample(tmp_path, tiny_encoder_dir, sentiment_csv):
    """One sampling path: train(shots=K, seed=S) draws what an experiment's sample 0 of protocol seed
    S draws; --sample-seed/--sample-index reach any other sample, independently of the training seed."""
    from contrastfit.data import data_hash, load_data
    from contrastfit.experiments.protocols.few_shot import few_shot

    data = load_data(str(sentiment_csv), label_column="sentiment")
    runs = few_shot(data, shots=4, samples=2, validation_size=2, seed=3)
    a = _train(tmp_path, tiny_encoder_dir, sentiment_csv, name="a", shots=4, seed=3, validation_size=2, epochs=1)
    assert a["data"]["train_hash"] == data_hash(runs[0].data.train)
    assert a["data"]["validation_hash"] == data_hash(runs[0].data.validation)
    b = _train(tmp_path, tiny_encoder_dir, sentiment_csv, name="b", shots=4, seed=0, sample_seed=3, sample_index=1, epochs=1)
    assert b["data"]["train_hash"] == data_hash(runs[1].data.train)
    assert b["data"]["sampling"]["sample_seed"] == 3 and b["seed"] == 0


class StopAt(TrainerCallback):
    """Stops training at ``step`` with a checkpoint there, as a job told to stop (e.g. preempted) would."""

    def __init__(self, step: int):
        self.step = step

    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step >= self.step:
            control.should_training_stop = True
            control.should_save = True
        return control


def test_resume_after_interruption(tmp_path, tiny_encoder_dir, sentiment_csv):
    # without selection on validation: checkpoints every save_steps (with it, at each evaluation)
    kwargs = dict(epochs=3, save_steps=2, shots=8, select_best=False)
    full = _train(tmp_path, tiny_encoder_dir, sentiment_csv, name="full", **kwargs)
    partial = _train(tmp_path, tiny_encoder_dir, sentiment_csv, name="cut", callbacks=[StopAt(3)], **kwargs)
    assert partial.interrupted.at_step == 3 and partial.interrupted.checkpoint.endswith("checkpoint-3")
    assert not (tmp_path / "cut" / "results.json").exists() and not (tmp_path / "cut" / "contrastfit.json").exists()
    with pytest.raises(ConfigError, match="unfinished run"):
        _train(tmp_path, tiny_encoder_dir, sentiment_csv, name="cut", **kwargs)
    resumed = _train(tmp_path, tiny_encoder_dir, sentiment_csv, name="cut", resume=True, **kwargs)
    assert resumed["training"]["resumed_from"].endswith("checkpoint-3")
    assert resumed["training"]["steps"] == full["training"]["steps"] == 6
    texts = ["good fun film", "awful dull plot"]
    np.testing.assert_allclose(resumed.model.predict_logits(texts), full.model.predict_logits(texts), atol=1e-5)
    # a finished run is not trained again
    again = _train(tmp_path, tiny_encoder_dir, sentiment_csv, name="cut", resume=True, **kwargs)
    assert again["metrics"] == resumed["metrics"]
    with pytest.raises(ConfigError, match="finished run"):
        _train(tmp_path, tiny_encoder_dir, sentiment_csv, name="cut", **kwargs)


def _poison(path, marker):
    """Overwrite ``path`` with a pickle that creates ``marker`` when it is unpickled (by plain pickle)."""

    class Payload:
        def __reduce__(self):
            return exec, (f"open({str(marker)!r}, 'w').close()",)

    torch.save({"state": Payload()}, path)


@pytest.mark.parametrize("name,caller_weights_only", [("optimizer.pt", None), ("rng_state.pth", False)])
def test_resume_refuses_a_checkpoint_that_would_run_code(tmp_path, tiny_encoder_dir, sentiment_csv, monkeypatch,
                                                         name, caller_weights_only):
    """Resuming unpickles nothing but tensors and plain data: a checkpoint file holding an object whose
    unpickling runs code is refused with one line, and the code does not run, also when the loading
    code asks torch for a full unpickle (``weights_only=False``) or the environment does."""
    kwargs = dict(epochs=2, save_steps=2, shots=8, select_best=False)
    partial = _train(tmp_path, tiny_encoder_dir, sentiment_csv, name="cut", callbacks=[StopAt(2)], **kwargs)
    target = tmp_path / "cut" / "checkpoints" / "checkpoint-2" / name
    assert partial.interrupted.checkpoint.endswith("checkpoint-2") and target.is_file()
    marker = tmp_path / "code-ran"
    _poison(target, marker)
    torch.load(target, weights_only=False)  # the payload is live: plain unpickling runs it
    assert marker.exists()
    marker.unlink()
    if caller_weights_only is not None:  # a library version that would ask for a full unpickle
        original = torch.load
        monkeypatch.setattr(torch, "load", lambda *a, **kw: original(*a, **{**kw, "weights_only": caller_weights_only}))
    monkeypatch.setenv("TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD", "1")
    with pytest.raises(ModelError, match=r"checkpoint-2: refused to resume: .*\(Unsupported global: GLOBAL exec\)"):
        _train(tmp_path, tiny_encoder_dir, sentiment_csv, name="cut", resume=True, **kwargs)
    assert not marker.exists()
    assert os.environ["TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD"] == "1" and "TORCH_FORCE_WEIGHTS_ONLY_LOAD" not in os.environ


def test_resume_loads_every_checkpoint_file_weights_only(tmp_path, tiny_encoder_dir, sentiment_csv, monkeypatch):
    kwargs = dict(epochs=2, save_steps=2, shots=8, select_best=False)
    _train(tmp_path, tiny_encoder_dir, sentiment_csv, name="cut", callbacks=[StopAt(2)], **kwargs)
    loads = []
    original = torch.load

    def spy(f, *args, **kw):
        loads.append((Path(f).name, kw.get("weights_only"), os.environ.get("TORCH_FORCE_WEIGHTS_ONLY_LOAD")))
        return original(f, *args, **kw)

    monkeypatch.setattr(torch, "load", spy)
    resumed = _train(tmp_path, tiny_encoder_dir, sentiment_csv, name="cut", resume=True, **kwargs)
    assert resumed["training"]["resumed_from"].endswith("checkpoint-2") and resumed["training"]["steps"] == 4
    assert {name for name, _, _ in loads} >= {"optimizer.pt", "scheduler.pt", "rng_state.pth"}
    assert all(flag is True and forced == "1" for _, flag, forced in loads), loads
    assert "TORCH_FORCE_WEIGHTS_ONLY_LOAD" not in os.environ  # only while resuming


def test_checkpoint_files_get_the_modes_the_umask_gives(tmp_path, tiny_encoder_dir, sentiment_csv):
    """Not the 0o600 of the temporary file safetensors writes model.safetensors through: a run stopped
    (or killed) after a checkpoint leaves files as readable as the rest of the output folder."""
    import stat

    old = os.umask(0o022)
    try:
        kwargs = dict(epochs=2, save_steps=2, shots=8, select_best=False)
        partial = _train(tmp_path, tiny_encoder_dir, sentiment_csv, name="cut", callbacks=[StopAt(2)], **kwargs)
    finally:
        os.umask(old)
    checkpoint = Path(partial.interrupted.checkpoint)
    files = sorted(p for p in (tmp_path / "cut" / "checkpoints").rglob("*") if p.is_file())
    assert checkpoint / "model.safetensors" in files and checkpoint / "optimizer.pt" in files
    assert {p.name: oct(stat.S_IMODE(p.stat().st_mode)) for p in files} == {p.name: "0o644" for p in files}


def test_quiet_prints_no_log_dicts_and_no_progress_bars(tmp_path, tiny_encoder_dir, sentiment_csv, capfd):
    """``contrastfit train --quiet``: neither the Trainer's log dicts (``{'loss': ...}`` lines, which
    transformers prints with its ``PrinterCallback`` once progress bars are off) nor progress bars;
    without ``--quiet`` both, as before. The logs still reach the record."""
    from contrastfit.cli import main

    def run(name: str, *flags: str) -> tuple[str, str]:
        capfd.readouterr()
        code = main(["train", "--method", "ce", "--data", str(sentiment_csv), "--label-column", "sentiment",
                     "--model", str(tiny_encoder_dir), "--output", str(tmp_path / name), "--epochs", "4",
                     "--batch-size", "8", *flags])  # 12 steps: the Trainer logs at step 10
        assert code == 0
        return capfd.readouterr()

    out, err = run("quiet", "--quiet")
    assert "{'loss'" not in out + err and "'train_runtime'" not in out + err
    assert "%|" not in err and "it/s" not in err  # no tqdm bar
    record = json.loads((tmp_path / "quiet" / "results.json").read_text())
    assert [h for h in record["log_history"] if "loss" in h]
    out, err = run("loud")
    assert "{'loss'" in out + err and "%|" in err


def test_regression_target_trains_with_mse(tmp_path, tiny_encoder_dir):
    import csv

    path = tmp_path / "sts.csv"
    rng = np.random.default_rng(0)
    with open(path, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["sentence1", "sentence2", "score"])
        for _ in range(40):
            w.writerow(["good film", "great movie", round(float(rng.uniform(3, 5)), 2)])
            w.writerow(["good film", "awful plot", round(float(rng.uniform(0, 2)), 2)])
    result = _train(tmp_path, tiny_encoder_dir, path, method="ce", label_column="score", epochs=3)
    assert result.model.task == "regression" and result.model.label_names is None
    assert set(result.metrics["validation"]) >= {"pearson", "spearman", "mse"}
    with pytest.raises(ConfigError, match="class labels"):
        _train(tmp_path, tiny_encoder_dir, path, method="ce-scl", label_column="score", name="r2")


def test_sentence_pairs_train_and_predict(tmp_path, tiny_encoder_dir):
    import csv

    path = tmp_path / "pairs.csv"
    with open(path, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["premise", "hypothesis", "label"])
        for i in range(12):
            w.writerow(["good film", "great fun movie", "entailment"])
            w.writerow(["good film", "awful dull movie", "contradiction"])
    result = _train(tmp_path, tiny_encoder_dir, path, epochs=2, label_column="label")
    assert result["data"]["text_pair"] is True  # found by the premise/hypothesis rule
    probs = result.model.predict_proba(["good film"], ["great fun movie"])
    assert probs.shape == (1, 2) and probs.sum() == pytest.approx(1.0, abs=1e-5)


def test_bad_hyper_parameters_are_refused(tmp_path, tiny_encoder_dir, sentiment_csv):
    with pytest.raises(ConfigError, match="no hyper-parameter 'lamda'"):
        _train(tmp_path, tiny_encoder_dir, sentiment_csv, hparams={"lamda": 0.5})
    with pytest.raises(ConfigError, match="lambda must be in"):
        _train(tmp_path, tiny_encoder_dir, sentiment_csv, hparams={"lambda": 2})
    with pytest.raises(ConfigError, match="either --shots"):
        _train(tmp_path, tiny_encoder_dir, sentiment_csv, shots=2, train_size=4)


def test_supcon_in_training_loss_matches_function(tiny_encoder_dir):
    model = ContrastiveClassifier.from_encoder(str(tiny_encoder_dir), "ce-scl", ["n", "p"], hparams={"temperature": 0.5})
    model.eval()  # no dropout: the two computations see the same embeddings
    enc = model.tokenize(["good fun", "great", "awful", "dull plot"], padding=True)
    batch = {k: torch.tensor(v) for k, v in enc.items()}
    labels = torch.tensor([1, 1, 0, 0])
    out = model.method.training_loss(model, batch, labels)
    pooled = model.encoder(**batch).pooled
    assert out.parts["scl"].item() == pytest.approx(supcon(pooled, labels, 0.5).item(), rel=1e-6)
    ce = torch.nn.functional.cross_entropy(model.head(pooled), labels)
    assert out.loss.item() == pytest.approx(0.1 * ce.item() + 0.9 * out.parts["scl"].item(), rel=1e-5)


def test_a_hyper_parameter_out_of_its_declared_range_names_the_method_key_range_and_value():
    from contrastfit.methods import get_method

    spec = get_method("diffcse")
    with pytest.raises(ConfigError, match=r"^method 'diffcse': mask_ratio must be in \(0, 1\], got 1\.5$"):
        spec.create(2, 8, mask_ratio=1.5)
    with pytest.raises(ConfigError, match=r"^method 'diffcse': discriminator_learning_rate must be >= 0, got -1$"):
        spec.create(2, 8, discriminator_learning_rate=-1)
    with pytest.raises(ConfigError, match=r"^method 'ce-scl': lambda must be in \[0, 1\], got 2$"):
        get_method("ce-scl").create(2, 8, **{"lambda": 2})
    with pytest.raises(ConfigError, match=r"^method 'ce-softtriple': centers_per_class must be >= 1, got 0$"):
        get_method("ce-softtriple").create(2, 8, centers_per_class=0)
    with pytest.raises(ConfigError, match=r"^method 'ce-scl': lambda must be in \[0, 1\], got 2$"):
        TrainConfig(method="ce-scl", hparams={"lambda": 2}).validate()  # before anything is loaded


def test_validation_selection_keeps_the_best_step_and_records_why(tmp_path, tiny_encoder_dir, sentiment_csv):
    """Issue 9: evaluation on validation during training (the Trainer's), the best step kept."""
    result = _train(tmp_path, tiny_encoder_dir, sentiment_csv, method="ce", epochs=6, learning_rate=3e-3,
                    metric_for_best="loss", save_checkpoints=False)
    sel = result["training"]["selection"]
    losses = {e["step"]: e["loss"] for e in sel["evaluations"]}
    assert len(losses) >= 4 and sel["metric"] == "loss"
    best = min(losses, key=losses.get)
    assert sel["best_step"] == best and sel["best_value"] == pytest.approx(losses[best])
    # the kept model is that step's: its validation loss is the recorded best
    from contrastfit.data import load_data

    model = result.model
    data = load_data(str(sentiment_csv), label_column="sentiment")
    logits = torch.from_numpy(model.predict_logits(list(data.validation["text"])))
    loss = torch.nn.functional.cross_entropy(logits, torch.tensor(data.validation["label"])).item()
    assert loss == pytest.approx(losses[best], rel=1e-4)
    assert not (tmp_path / "run" / "checkpoints").exists()


def test_without_selection_the_last_step_is_kept(tmp_path, tiny_encoder_dir, sentiment_csv):
    result = _train(tmp_path, tiny_encoder_dir, sentiment_csv, method="ce", epochs=2, select_best=False)
    assert result["training"]["selection"] is None


def test_early_stopping_stops_training(tmp_path, tiny_encoder_dir, sentiment_csv):
    result = _train(tmp_path, tiny_encoder_dir, sentiment_csv, method="ce", epochs=40, eval_steps=1,
                    early_stopping_patience=1, learning_rate=1e-6, metric_for_best="accuracy", save_checkpoints=False)
    sel = result["training"]["selection"]
    assert sel["stopped_early"] and result["training"]["steps"] < 40 * 3


def test_warmup_ratio_is_a_fraction():
    with pytest.raises(ConfigError, match="warmup_ratio"):
        TrainConfig(warmup_ratio=1).validate()


@pytest.mark.parametrize("field,value,message", [
    ("learning_rate", "2e-5", "learning_rate must be float, got '2e-5' (YAML reads 2e-5 as text: write 2.0e-5)"),
    ("batch_size", 8.5, "batch_size must be int, got 8.5"),
    ("refit_head", "yes", "refit_head must be true or false, got 'yes'"),
])
def test_config_values_of_the_wrong_type_get_one_line(field, value, message):
    with pytest.raises(ConfigError) as err:
        TrainConfig(**{field: value}).validate()
    assert str(err.value) == message


def test_selection_breaks_accuracy_ties_by_the_lower_validation_loss():
    """On a small validation set two checkpoints often tie on accuracy; the Trainer keeps the first of
    equals, which may be an untrained step inside the warm-up. The selection score breaks the tie."""
    from types import SimpleNamespace

    from contrastfit.pipeline import SELECTION_KEY
    from contrastfit.trainer import _compute_metrics

    compute = _compute_metrics(["a", "b"], "accuracy")
    labels = np.array([0, 1, 1, 0])
    unsure = compute(SimpleNamespace(predictions=np.array([[0.1, 0], [0, 0.1], [0.1, 0], [0.1, 0]]), label_ids=labels))
    sure = compute(SimpleNamespace(predictions=np.array([[3.0, 0], [0, 3.0], [0.1, 0], [3.0, 0]]), label_ids=labels))
    assert unsure["accuracy"] == sure["accuracy"] == 0.75
    assert sure["loss"] < unsure["loss"] and sure[SELECTION_KEY] > unsure[SELECTION_KEY]
    better = compute(SimpleNamespace(predictions=np.array([[0.1, 0], [0, 0.1], [0, 0.1], [0.1, 0]]), label_ids=labels))
    assert better[SELECTION_KEY] > sure[SELECTION_KEY]  # one more correct example beats any loss
    mse = _compute_metrics(None, "mse")(SimpleNamespace(predictions=np.array([[1.0], [2.0]]), label_ids=np.array([1.0, 1.0])))
    assert mse[SELECTION_KEY] == pytest.approx(-0.5, abs=2e-6)  # lower mse is better


# -- runs that would train nothing, non-finite hyper-parameters, mixed precision on the CPU ----------

def _encoder_change(run_folder, tiny_encoder_dir) -> float:
    """The largest absolute difference between the saved encoder's weights and the pretrained ones."""
    from safetensors.torch import load_file

    pretrained = load_file(str(Path(tiny_encoder_dir) / "model.safetensors"))
    saved = ContrastiveClassifier.from_pretrained(run_folder).encoder.backbone.state_dict()
    shared = [k for k in pretrained if k in saved]
    assert len(shared) == len(pretrained)
    return max(float((saved[k].float() - pretrained[k].float()).abs().max()) for k in shared)


def test_a_one_step_run_trains_and_warns_with_its_numbers(tmp_path, tiny_encoder_dir, sentiment_csv):
    """Issue 19 §3: 8 examples, batch 16, 1 epoch is one optimisation step; with a warm-up ratio of 0.1
    the library's warm-up was ceil(0.1) = 1 step, so that step ran at a learning rate of 0 and the saved
    encoder was the pretrained one. The warm-up now leaves the last step to training, and the run warns."""
    with pytest.warns(UserWarning, match=r"^1 optimisation step \(8 examples, batch 16, 1 epoch, no warm-up\): "
                                         r"fewer than 10 steps leave the encoder close to the pretrained one"):
        result = _train(tmp_path, tiny_encoder_dir, sentiment_csv, method="ce", shots=4, epochs=1, batch_size=16,
                        learning_rate=5e-5, select_best=False)
    assert result["training"]["steps"] == 1 and result["training"]["warmup_steps"] == 0
    assert _encoder_change(tmp_path / "run", tiny_encoder_dir) > 1e-6


def test_the_warm_up_never_takes_every_step():
    from contrastfit.trainer import capped_warmup

    assert [capped_warmup(w, n) for w, n in [(1, 1), (1, 2), (2, 2), (6, 60), (0, 5), (0, 1)]] == [0, 1, 1, 6, 0, 0]


@pytest.mark.parametrize("method", ["ce-scl", "supcl-seq", "simcse-unsup", "setfit"])
@pytest.mark.parametrize("sampler", ["random", "balanced"])
def test_a_batch_of_one_is_refused_for_a_method_that_compares_rows(method, sampler):
    """One rule for both samplers: a batch of one row makes every in-batch contrastive term 0."""
    with pytest.raises(ConfigError) as err:
        TrainConfig(method=method, batch_size=1, sampler=sampler).validate()
    assert str(err.value) == (f"{method} compares the rows of a batch with each other: --batch-size 1 makes its "
                              "contrastive term 0 at every step; use --batch-size >= 2")
    TrainConfig(method="ce", batch_size=1, sampler="random").validate()  # plain CE trains on single rows
    with pytest.raises(ConfigError, match=r"^the balanced sampler needs --batch-size >= 2"):
        TrainConfig(method="ce", batch_size=1, sampler="balanced").validate()
    TrainConfig(method="ce-scl", batch_size=1, sampler="random", memory_size=8).validate()  # the memory contrasts


def test_a_batch_of_one_is_refused_for_the_default_method_once_it_is_known(tmp_path, tiny_encoder_dir, sentiment_csv,
                                                                            monkeypatch):
    from contrastfit.modeling import ContrastiveClassifier

    built = []
    monkeypatch.setattr(ContrastiveClassifier, "from_encoder", lambda *a, **k: built.append(1))
    with pytest.raises(ConfigError, match=r"^ce-scl-lr compares the rows of a batch with each other: --batch-size 1"):
        _train(tmp_path, tiny_encoder_dir, sentiment_csv, method=None, batch_size=1, sampler="random")
    assert not built  # refused before the model is loaded


@pytest.mark.parametrize("value", [float("inf"), "inf", float("nan"), "nan", "-inf"])
def test_non_finite_hyper_parameters_are_refused_in_one_line(value):
    with pytest.raises(ConfigError) as err:
        TrainConfig(method="ce-scl", hparams={"temperature": value}).validate()  # before anything is loaded
    assert str(err.value) == f"method 'ce-scl': temperature must be a finite number, got {value!r}"
    from contrastfit.methods import get_method

    for method, key in [("ce-scl", "temperature"), ("ce-scl", "lambda"), ("lacon", "lcl_weight"),
                        ("diffcse", "mask_ratio"), ("ce-softtriple", "gamma")]:
        with pytest.raises(ConfigError, match=rf"^method '{method}': {key} must be a finite number"):
            get_method(method).create(2, 8, **{key: value})
    with pytest.raises(ConfigError, match=r"^method 'ce-softtriple': centers_per_class must be (a finite number|int)"):
        get_method("ce-softtriple").create(2, 8, centers_per_class=value)  # an int: no traceback from int(inf)
    with pytest.raises(ConfigError, match=r"^method 'supcl-seq': each of view_dropouts must be a finite"):
        TrainConfig(method="supcl-seq", hparams={"view_dropouts": f"0.1,{value}"}).validate()


def test_simcse_sup_keeps_its_minus_infinite_hard_negative_weight():
    from contrastfit.methods import get_method

    assert get_method("simcse-sup").create(2, 8, hard_negative_weight="-inf").hparams["hard_negative_weight"] == -np.inf
    TrainConfig(method="simcse-sup", hparams={"hard_negative_weight": "-inf"}).validate()
    with pytest.raises(ConfigError, match=r"^method 'simcse-sup': hard_negative_weight must be a "
                                          r"finite number or -inf, got 'inf'$"):
        TrainConfig(method="simcse-sup", hparams={"hard_negative_weight": "inf"}).validate()


@pytest.fixture()
def no_gpu(monkeypatch):
    """A machine where torch sees no GPU (also on one that has one)."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: False)
    if hasattr(torch, "xpu"):
        monkeypatch.setattr(torch.xpu, "is_available", lambda: False)


@pytest.mark.parametrize("flag,hint", [("fp16", "to train in float32 on the CPU"),
                                       ("bf16", "to train in float32, or add --cpu for bfloat16 autocast on the CPU")])
def test_mixed_precision_without_a_gpu_is_refused(flag, hint, no_gpu):
    with pytest.raises(ConfigError) as err:
        TrainConfig(**{flag: True}).validate()
    assert str(err.value) == f"--{flag} needs a GPU, and torch sees none on this machine: leave out --{flag} {hint}"
    TrainConfig().validate()


def test_fp16_on_the_cpu_is_refused_and_bf16_on_the_cpu_is_asked_for_explicitly(no_gpu):
    """float16 on the CPU is emulated (about 10x slower): refused even with --cpu; bfloat16 autocast
    on the CPU is the library's when both --bf16 and --cpu are given."""
    with pytest.raises(ConfigError, match=r"^--fp16 is mixed precision on a GPU and --cpu trains on the CPU, where "
                                          r"float16 is emulated"):
        TrainConfig(fp16=True, use_cpu=True).validate()
    TrainConfig(bf16=True, use_cpu=True).validate()


RESUME_KWARGS = dict(epochs=3, save_steps=2, shots=8, select_best=False)


@pytest.fixture(scope="module")
def cut_at_4(tmp_path_factory, tiny_encoder_dir):
    """An uninterrupted run, and a real interrupted run of the same settings with complete checkpoints at
    steps 2 and 4 (the library keeps one: the older is put back, as it is still there while the library
    writes the newer one)."""
    import shutil

    from conftest import write_sentiment_csv

    folder = tmp_path_factory.mktemp("cut-at-4")
    data = write_sentiment_csv(folder / "toy.csv")
    full = _train(folder, tiny_encoder_dir, data, name="full", **RESUME_KWARGS)
    _train(folder, tiny_encoder_dir, data, name="cut", callbacks=[StopAt(2)], **RESUME_KWARGS)
    checkpoints = folder / "cut" / "checkpoints"
    shutil.copytree(checkpoints / "checkpoint-2", folder / "kept-2")
    _train(folder, tiny_encoder_dir, data, name="cut", callbacks=[StopAt(4)], resume=True, **RESUME_KWARGS)
    assert not (checkpoints / "checkpoint-2").exists()
    shutil.copytree(folder / "kept-2", checkpoints / "checkpoint-2")
    texts = ["good fun film", "awful dull plot"]
    return folder / "cut", data, full["training"]["steps"], texts, full.model.predict_logits(texts)


@pytest.mark.parametrize("damage,reason", [
    ("truncate optimizer.pt", "optimizer.pt is truncated or not a torch file"),
    ("delete trainer_state.json", "trainer_state.json is missing"),
    ("truncate model.safetensors", "model.safetensors is truncated"),
    ("empty rng_state.pth", "rng_state.pth is empty"),
])
def test_resume_skips_a_checkpoint_cut_short_and_says_so(tmp_path, tiny_encoder_dir, cut_at_4, capfd, damage, reason):
    """Issue 19 §5: a kill while the library writes a checkpoint leaves it incomplete; --resume continues
    from the newest complete one, says which and why, and ends where an uninterrupted run does."""
    import shutil

    cut, data, full_steps, texts, full_logits = cut_at_4
    shutil.copytree(cut, tmp_path / "cut")
    checkpoints = tmp_path / "cut" / "checkpoints"
    action, name = damage.split()
    target = checkpoints / "checkpoint-4" / name
    if action == "delete":
        target.unlink()
    else:
        content = target.read_bytes()
        target.write_bytes(b"" if action == "empty" else content[: len(content) // 2])
    capfd.readouterr()
    resumed = _train(tmp_path, tiny_encoder_dir, data, name="cut", resume=True, **RESUME_KWARGS)
    assert (f"contrastfit: resuming from {checkpoints / 'checkpoint-2'} (step 2); skipped the incomplete "
            f"checkpoint-4 ({reason})") in capfd.readouterr().err.splitlines()
    assert resumed["training"]["resumed_from"].endswith("checkpoint-2")
    assert resumed["training"]["steps"] == full_steps == 6
    np.testing.assert_allclose(resumed.model.predict_logits(texts), full_logits, atol=1e-5)


def test_checkpoint_completeness_reads_headers_only(tmp_path):
    from safetensors.torch import save_file

    from contrastfit.checkpoints import checkpoint_problem

    folder = tmp_path / "checkpoint-1"
    folder.mkdir()
    assert checkpoint_problem(folder) == "trainer_state.json is missing"
    (folder / "trainer_state.json").write_text('{"global_step": 1', encoding="utf-8")
    assert checkpoint_problem(folder) == "trainer_state.json is unreadable"
    (folder / "trainer_state.json").write_text('{"global_step": 1}', encoding="utf-8")
    assert checkpoint_problem(folder) == "the model weights are missing"
    save_file({"w": torch.zeros(4, 4)}, str(folder / "model.safetensors"))
    assert checkpoint_problem(folder) == "optimizer.pt is missing"
    torch.save({"state": {}}, folder / "optimizer.pt")
    torch.save({"last_epoch": 1}, folder / "scheduler.pt")
    assert checkpoint_problem(folder) is None
    (folder / "scaler.pt").write_bytes(b"\x80\x02}q\x00.")  # a pickle, not torch's zip format
    assert checkpoint_problem(folder) == "scaler.pt is truncated or not a torch file"
    (folder / "scaler.pt").unlink()
    content = (folder / "model.safetensors").read_bytes()
    (folder / "model.safetensors").write_bytes(content[:-1])
    assert checkpoint_problem(folder) == "model.safetensors is truncated"
    (folder / "model.safetensors").write_bytes(content[:5])
    assert checkpoint_problem(folder) == "model.safetensors is truncated"
    (folder / "model.safetensors").unlink()
    (folder / "model.safetensors.index.json").write_text('{"weight_map": {"w": "model-1.safetensors"}}')
    assert checkpoint_problem(folder) == "model-1.safetensors is missing"


def test_resume_with_no_complete_checkpoint_starts_over_and_says_so(tmp_path, tiny_encoder_dir, sentiment_csv, capfd):
    kwargs = dict(epochs=2, save_steps=2, shots=8, select_best=False)
    _train(tmp_path, tiny_encoder_dir, sentiment_csv, name="cut", callbacks=[StopAt(2)], **kwargs)
    checkpoint = tmp_path / "cut" / "checkpoints" / "checkpoint-2"
    (checkpoint / "trainer_state.json").unlink()
    with pytest.raises(ConfigError, match="unfinished run"):  # an incomplete checkpoint is still a run's
        _train(tmp_path, tiny_encoder_dir, sentiment_csv, name="cut", **kwargs)
    capfd.readouterr()
    resumed = _train(tmp_path, tiny_encoder_dir, sentiment_csv, name="cut", resume=True, **kwargs)
    assert (f"contrastfit: no complete checkpoint in {checkpoint.parent} (checkpoint-2 (trainer_state.json is "
            "missing)): training from the start") in capfd.readouterr().err.splitlines()
    assert resumed["training"]["resumed_from"] is None and resumed["training"]["steps"] == 4


def test_a_weights_only_checkpoint_is_not_resumed_from_half_way(tmp_path, tiny_encoder_dir, sentiment_csv, capfd):
    """Without resumable checkpoints (the experiments' default) the library still writes the weights at
    each evaluation; resuming from one used to restart the optimiser and the warm-up in mid-run. Such a
    run now starts over, says so, and gives the uninterrupted run's model."""
    kwargs = dict(epochs=3, shots=8, eval_steps=2, save_checkpoints=False)
    full = _train(tmp_path, tiny_encoder_dir, sentiment_csv, name="full", **kwargs)
    _train(tmp_path, tiny_encoder_dir, sentiment_csv, name="cut", callbacks=[StopAt(2)], **kwargs)
    checkpoints = tmp_path / "cut" / "checkpoints"
    assert (checkpoints / "checkpoint-2" / "model.safetensors").is_file()
    capfd.readouterr()
    resumed = _train(tmp_path, tiny_encoder_dir, sentiment_csv, name="cut", resume=True, **kwargs)
    assert (f"contrastfit: no complete checkpoint in {checkpoints} (checkpoint-2 (optimizer.pt is missing)): "
            "training from the start") in capfd.readouterr().err.splitlines()
    assert resumed["training"]["resumed_from"] is None and resumed["training"]["steps"] == full["training"]["steps"]
    evaluations = lambda run: [(e["step"], round(e["loss"], 5)) for e in run["training"]["selection"]["evaluations"]]  # noqa: E731
    assert evaluations(resumed) == evaluations(full) and len(evaluations(full)) == 3
    texts = ["good fun film", "awful dull plot"]
    np.testing.assert_allclose(resumed.model.predict_logits(texts), full.model.predict_logits(texts), atol=1e-5)


def test_the_optimiser_groups_parameters_by_learning_rate_and_the_trainers_decay_rule(tmp_path):
    """pipeline.grouped_optimizer: a parameter placed in a group of its own gets that group's learning
    rate; every other one the main rate; weights decay and biases do not unless the group says."""
    from transformers import Trainer, TrainingArguments

    from contrastfit.pipeline import grouped_optimizer

    model = torch.nn.ModuleDict({"body": torch.nn.Linear(3, 3), "head": torch.nn.Linear(3, 2)})
    trainer = Trainer(model=model, args=TrainingArguments(output_dir=str(tmp_path), learning_rate=1e-3,
                                                           weight_decay=0.1, use_cpu=True, report_to=[]))
    optimizer = grouped_optimizer(trainer, model,
                                  lambda name, p: ("head", 5e-3, None) if name.startswith("head.") else None)
    got = {(g["name"], g["lr"], g["weight_decay"]): sorted(tuple(p.shape) for p in g["params"])
           for g in optimizer.param_groups}
    assert got == {("main", 1e-3, 0.1): [(3, 3)], ("main", 1e-3, 0.0): [(3,)],
                   ("head", 5e-3, 0.1): [(2, 3)], ("head", 5e-3, 0.0): [(2,)]}
    fixed = grouped_optimizer(trainer, model, lambda name, p: ("head", 5e-3, 0.0) if name.startswith("head.") else None)
    assert {(g["name"], g["weight_decay"]) for g in fixed.param_groups} == {("main", 0.1), ("main", 0.0), ("head", 0.0)}
