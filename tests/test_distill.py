"""Distillation (``contrastfit distill``, ``contrastfit.distill``): the two losses against literal loops
of their equations and in their gradients; the teacher's targets and their look-up by token ids; the
methods on a batch (the term alone moves the student's weights) and without a teacher (refused); and
end to end on tiny random encoders built here: a teacher trained on toy sentiment rows (hidden 32) and
a student of another width (hidden 48), distilled on texts without labels."""

from __future__ import annotations

import json

import pytest
import torch

import contrastfit
from conftest import sentiment_rows
from contrastfit import ContrastiveClassifier, train
from contrastfit.cli import main
from contrastfit.errors import ConfigError, DataError, ModelError
from contrastfit.losses import similarity_distillation, soft_target_kl
from contrastfit.methods.distill_base import TargetIndex, TeacherTargets, teacher_targets
from loss_references import ref_similarity_distillation, ref_soft_target_kl

#: texts without labels: the distinct sentences of another draw of the toy rows
UNLABELLED = list(dict.fromkeys(r["sentence"] for r in sentiment_rows(40, seed=1)))
FAST = {"learning_rate": 3e-3, "pooling": "mean", "batch_size": 8, "progress": False}


def _random(shape, seed, dtype=torch.float64):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64).to(dtype)


# ---------------------------------------------------------------------------------------------
# The losses
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("n,classes,t,seed", [(1, 2, 1.0, 0), (5, 3, 1.0, 1), (8, 4, 2.0, 2), (6, 2, 0.5, 3)])
def test_soft_target_kl_matches_its_equation(n, classes, t, seed):
    student, teacher = _random((n, classes), seed) * 3, _random((n, classes), seed + 10) * 3
    got = soft_target_kl(student.float(), teacher.float(), t)
    assert got.dtype == torch.float32
    assert got.item() == pytest.approx(ref_soft_target_kl(student, teacher, t).item(), rel=1e-5, abs=1e-6)
    exact = soft_target_kl(student, teacher, t)  # float64 stays float64
    assert exact.dtype == torch.float64
    assert exact.item() == pytest.approx(ref_soft_target_kl(student, teacher, t).item(), rel=1e-12, abs=1e-12)


def test_soft_target_kl_gradients_and_edges():
    student, teacher = _random((6, 3), 4).requires_grad_(), _random((6, 3), 5).requires_grad_()
    assert torch.autograd.gradcheck(lambda s: soft_target_kl(s, teacher, 2.0), (student,), eps=1e-6, atol=1e-6)
    soft_target_kl(student, teacher, 2.0).backward()
    assert teacher.grad is None  # the teacher's targets are constants
    t = 2.0  # d/dz = T/n (q - p) (Hinton et al., Eq. 2 with the T^2 factor)
    q, p = torch.softmax(student.detach() / t, -1), torch.softmax(teacher.detach() / t, -1)
    torch.testing.assert_close(student.grad, t / 6 * (q - p))
    same = _random((4, 3), 6)
    assert soft_target_kl(same, same.clone(), 1.0).item() == pytest.approx(0.0, abs=1e-12)
    assert soft_target_kl(same + 5.0, same, 1.0).item() == pytest.approx(0.0, abs=1e-12)  # a shift of every logit
    # a class the teacher gives nothing contributes nothing, finitely
    far = torch.tensor([[0.0, -float("inf")], [2.0, -1e4]])
    z = torch.zeros(2, 2, requires_grad=True)
    loss = soft_target_kl(z, far)
    loss.backward()
    assert torch.isfinite(loss) and torch.isfinite(z.grad).all()
    empty = torch.zeros(0, 3, requires_grad=True)
    out = soft_target_kl(empty, torch.zeros(0, 3))
    assert out.item() == 0.0 and out.requires_grad
    for bad in (0.0, -1.0, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="temperature"):
            soft_target_kl(same, same, bad)
    with pytest.raises(ValueError, match="shape"):
        soft_target_kl(same, same[:, :2])


@pytest.mark.parametrize("n,width_s,width_t,seed", [(2, 4, 4, 0), (5, 3, 8, 1), (9, 16, 6, 2)])
def test_similarity_distillation_matches_its_equation(n, width_s, width_t, seed):
    """The two widths may differ: only each model's own cosines are compared."""
    student, teacher = _random((n, width_s), seed), _random((n, width_t), seed + 10)
    got = similarity_distillation(student.float(), teacher.float())
    assert got.dtype == torch.float32
    assert got.item() == pytest.approx(ref_similarity_distillation(student, teacher).item(), rel=1e-5, abs=1e-7)
    assert similarity_distillation(student, teacher).item() == pytest.approx(
        ref_similarity_distillation(student, teacher).item(), rel=1e-12)


def test_similarity_distillation_gradients_and_edges():
    student, teacher = _random((6, 5), 7).requires_grad_(), _random((6, 9), 8).requires_grad_()
    assert torch.autograd.gradcheck(lambda s: similarity_distillation(s, teacher), (student,), eps=1e-6, atol=1e-6)
    similarity_distillation(student, teacher).backward()
    assert teacher.grad is None and student.grad.abs().sum() > 0
    # the same geometry in another basis and scale: nothing to learn
    rotation, _ = torch.linalg.qr(_random((5, 5), 9))
    base = _random((6, 5), 10)
    assert similarity_distillation(base @ rotation * 3.0, base).item() == pytest.approx(0.0, abs=1e-12)
    one = torch.ones(1, 4, requires_grad=True)
    out = similarity_distillation(one, torch.ones(1, 7))
    assert out.item() == 0.0 and out.requires_grad  # no pair
    zero_row = torch.cat([torch.zeros(1, 4), _random((3, 4), 11, torch.float32)]).requires_grad_()
    loss = similarity_distillation(zero_row, _random((4, 6), 12, torch.float32))
    loss.backward()
    assert torch.isfinite(loss) and torch.isfinite(zero_row.grad).all()
    with pytest.raises(ValueError, match="one row per student row"):
        similarity_distillation(base, base[:3])


# ---------------------------------------------------------------------------------------------
# The teacher's targets and the methods
# ---------------------------------------------------------------------------------------------

def test_targets_are_found_by_the_students_token_ids_whatever_the_padding(tiny_encoder_dir):
    model = ContrastiveClassifier.from_encoder(str(tiny_encoder_dir), "ce", ["negative", "positive"])
    texts = ["good film", "bad plot the movie", "GOOD  film"]  # the tokenizer lower-cases: 1 and 3 are one text
    index = TargetIndex(TeacherTargets(texts, logits=torch.tensor([[1.0, 0.0], [0.0, 1.0], [3.0, 0.0]])), model)
    assert len(index) == 2
    for batch in (["bad plot the movie", "good film"], ["good film", "bad plot the movie"]):
        enc = model.tokenize(batch, padding=True)  # the shorter row padded
        rows = index.rows(torch.tensor(enc["input_ids"]), torch.tensor(enc["attention_mask"]))
        want = {"good film": [2.0, 0.0], "bad plot the movie": [0.0, 1.0]}  # duplicates: the mean
        assert index.logits[rows].tolist() == [want[t] for t in batch]
    enc = model.tokenize(["a story"], padding=True)
    with pytest.raises(DataError, match="no teacher target"):
        index.rows(torch.tensor(enc["input_ids"]), torch.tensor(enc["attention_mask"]))
    with pytest.raises(ValueError, match="logits must be"):
        TeacherTargets(texts, logits=torch.zeros(2, 2))


@pytest.mark.parametrize("method,part", [("distill-kl", "kl"), ("distill-cosine", "similarity")])
def test_the_distillation_term_alone_moves_the_students_encoder(student_dir, method, part):
    import datasets

    texts = UNLABELLED[:8]
    model = ContrastiveClassifier.from_encoder(str(student_dir), method, ["negative", "positive"], pooling="mean")
    model.train()
    targets = TeacherTargets(texts, logits=_random((8, 2), 0, torch.float32) * 3,
                             embeddings=_random((8, 32), 1, torch.float32))
    with teacher_targets(targets):
        model.method.prepare(model, datasets.Dataset.from_dict({"input_ids": model.tokenize(texts)["input_ids"]}))
    enc = model.tokenize(texts[::-1], padding=True)  # another order than the teacher's
    out = model.method.training_loss(model, {k: torch.tensor(v) for k, v in enc.items()}, torch.zeros(8).long())
    assert set(out.parts) == {part} and out.loss.item() > 0
    out.loss.backward()
    assert any(p.grad is not None and p.grad.abs().sum() > 0 for n, p in model.named_parameters() if n.startswith("encoder."))
    assert "index" not in json.dumps(model.config_dict())  # nothing of the teacher is saved with the student
    assert not any("index" in k for k in model.state_dict())


@pytest.mark.parametrize("method", ["distill-kl", "distill-cosine"])
def test_a_distillation_method_trains_only_with_a_teacher(tiny_encoder_dir, method):
    rows = sentiment_rows(6)
    with pytest.raises(ConfigError, match=r"learns from a teacher's predictions.*contrastfit distill"):
        train(texts=[r["sentence"] for r in rows], labels=[r["sentiment"] for r in rows], method=method,
              model=str(tiny_encoder_dir), epochs=1, progress=False)


# ---------------------------------------------------------------------------------------------
# End to end
# ---------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def student_dir(tmp_path_factory, tiny_encoder_dir):
    """A 1-layer BERT of hidden 48 (the teacher's is 32) with the tiny encoder's tokenizer."""
    from transformers import AutoTokenizer, BertConfig, BertModel

    folder = tmp_path_factory.mktemp("student")
    torch.manual_seed(1)
    config = BertConfig(vocab_size=len(AutoTokenizer.from_pretrained(tiny_encoder_dir)), hidden_size=48,
                        num_hidden_layers=1, num_attention_heads=2, intermediate_size=64, max_position_embeddings=64)
    BertModel(config).save_pretrained(folder)
    AutoTokenizer.from_pretrained(tiny_encoder_dir).save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def teacher_dir(tmp_path_factory, tiny_encoder_dir):
    """A confident, accurate toy teacher: CE on 24 labelled sentiment rows."""
    rows = sentiment_rows(12)
    folder = tmp_path_factory.mktemp("teacher") / "run"
    train(texts=[r["sentence"] for r in rows], labels=[r["sentiment"] for r in rows], model=str(tiny_encoder_dir),
          method="ce", learning_rate=3e-3, epochs=20, batch_size=8, output=str(folder), progress=False)
    return folder


def _agreement(model, teacher_labels) -> float:
    return sum(a == b for a, b in zip(model.predict(UNLABELLED), teacher_labels)) / len(UNLABELLED)


def test_python_distill_kl_makes_a_student_that_agrees_with_the_teacher(teacher_dir, student_dir, tmp_path):
    teacher = ContrastiveClassifier.from_pretrained(teacher_dir)
    said = teacher.predict(UNLABELLED)
    assert len(set(said)) == 2
    test = sentiment_rows(5, seed=2)
    out = tmp_path / "student"
    result = contrastfit.distill(str(teacher_dir), data=UNLABELLED, model=str(student_dir), output=str(out),
                                 method="distill-kl", test_data=([r["sentence"] for r in test],
                                                                 [r["sentiment"] for r in test]), **FAST)
    assert result["method"] == "distill-kl"
    losses = [h["loss_kl"] for h in result["log_history"] if "loss_kl" in h]
    assert len(losses) >= 3 and losses[-1] < 0.5 * losses[0]  # the student's loss decreases
    student = ContrastiveClassifier.from_pretrained(out)  # the saved folder reloads
    untrained = ContrastiveClassifier.from_encoder(str(student_dir), "distill-kl", teacher.label_names, pooling="mean")
    assert _agreement(student, said) >= 0.9 and _agreement(student, said) > _agreement(untrained, said) + 0.2
    assert student.label_names == teacher.label_names and set(student.predict(UNLABELLED)) <= set(teacher.label_names)
    assert student.encoder.hidden_size == 48 and student.method.name == "distill-kl"
    record = json.loads((out / "results.json").read_text())
    source = record["data"]["source"]
    assert source["kind"] == "distillation" and source["teacher"]["folder"] == str(teacher_dir.resolve())
    assert source["teacher"]["method"] == "ce" and source["unlabelled"]["texts"] == len(UNLABELLED)
    assert source["teacher_labels"] == {n: said.count(n) for n in teacher.label_names}
    assert source["teacher_predictions"]["texts"] == len(UNLABELLED)
    # the held-out tenth measures agreement with the teacher (and picks the step); the test rows, accuracy
    assert record["data"]["validation_size"] + record["data"]["train_size"] == len(UNLABELLED)
    assert record["metrics"]["validation"]["accuracy"] >= 0.75 and record["metrics"]["test"]["n"] == 10
    assert record["training"]["head_init"] is not None  # started from the probe on the teacher's labels
    assert (out / "README.md").is_file()  # the model card, as for `train`


def test_cli_distill_from_a_text_file_with_the_default_method(teacher_dir, student_dir, tmp_path, capsys):
    corpus = tmp_path / "texts.txt"
    corpus.write_text("\n".join(UNLABELLED + UNLABELLED[:5] + [""]) + "\n", encoding="utf-8")  # duplicates, a blank
    out = tmp_path / "student"
    assert main(["distill", str(teacher_dir), "--data", str(corpus), "--model", str(student_dir), "--output", str(out),
                 "--learning-rate", "3e-3", "--pooling", "mean", "--batch-size", "8",
                 "--param", "head_C=10", "--quiet"]) == 0
    assert f"saved to {out}" in capsys.readouterr().out
    teacher = ContrastiveClassifier.from_pretrained(teacher_dir)
    said = teacher.predict(UNLABELLED)
    student = ContrastiveClassifier.from_pretrained(out)
    untrained = ContrastiveClassifier.from_encoder(str(student_dir), "distill-cosine", teacher.label_names, pooling="mean")
    assert _agreement(student, said) >= 0.9 and _agreement(student, said) > _agreement(untrained, said) + 0.2
    record = json.loads((out / "results.json").read_text())
    assert record["method"] == "distill-cosine" and record["hparams"]["head_C"] == 10
    assert record["data"]["source"]["unlabelled"]["duplicates_dropped"] == 5
    losses = [h["loss_similarity"] for h in record["log_history"] if "loss_similarity" in h]
    assert losses[-1] < losses[0]
    assert main(["predict", str(out), "good fun film"]) == 0
    assert json.loads(capsys.readouterr().out)["label"] in teacher.label_names


def _error(argv, capsys) -> str:
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert "Traceback" not in err and len(err.splitlines()) == 1 and err.startswith("contrastfit: error: "), err
    return err


def test_bad_input_is_one_line(teacher_dir, student_dir, tmp_path, capsys):
    corpus = tmp_path / "texts.txt"
    corpus.write_text("\n".join(UNLABELLED), encoding="utf-8")
    base = ["--model", str(student_dir), "--quiet"]
    not_a_model = tmp_path / "folder"
    not_a_model.mkdir()
    (not_a_model / "notes.txt").write_text("x")
    assert "is not a contrastfit output folder" in _error(
        ["distill", str(not_a_model), "--data", str(corpus), "--output", str(tmp_path / "o1"), *base], capsys)
    assert "no such folder" in _error(
        ["distill", str(tmp_path / "missing"), "--data", str(corpus), "--output", str(tmp_path / "o2"), *base], capsys)
    empty = tmp_path / "empty.txt"
    empty.write_text("\n \n", encoding="utf-8")
    assert "holds no text" in _error(
        ["distill", str(teacher_dir), "--data", str(empty), "--output", str(tmp_path / "o3"), *base], capsys)
    assert "model './nowhere/student': no such folder" in _error(
        ["distill", str(teacher_dir), "--data", str(corpus), "--output", str(tmp_path / "o4"), "--model",
         "./nowhere/student", "--quiet"], capsys)
    assert "holds the input" in _error(  # the output may not be (or hold) the teacher
        ["distill", str(teacher_dir), "--data", str(corpus), "--output", str(teacher_dir.parent), *base], capsys)
    assert "validation_split must be in [0, 1), got 1.5" in _error(
        ["distill", str(teacher_dir), "--data", str(corpus), "--output", str(tmp_path / "o5"), "--validation-split",
         "1.5", *base], capsys)
    for name in ("o1", "o2", "o3", "o4", "o5"):
        assert not (tmp_path / name).exists()  # refused before anything was written
    with pytest.raises(DataError, match="holds 1 distinct text"):
        contrastfit.distill(str(teacher_dir), data=["good film", "good film"], model=str(student_dir))
    with pytest.raises(ModelError, match="not a contrastfit output folder"):
        contrastfit.distill(str(not_a_model), data=UNLABELLED, model=str(student_dir))
    with pytest.raises(ConfigError, match="temperature"):
        contrastfit.distill(str(teacher_dir), data=UNLABELLED, model=str(student_dir), hparams={"temperature": 0})
