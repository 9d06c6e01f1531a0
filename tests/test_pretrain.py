"""Stage 1 on its own corpus (``contrastfit.pretrain``) on the tiny encoder: the saved folder is a plain
Hugging Face encoder that later runs load, its weights moved, its record says what made it; bad input
is a one-line error that leaves nothing behind."""

from __future__ import annotations

import hashlib
import json

import pytest
import torch

from contrastfit import train
from contrastfit.encoders import default_pooling
from contrastfit.errors import ConfigError, DataError
from contrastfit.pretrain import RECORD_NAME, load_corpus, pretrain, read_pretrain_record

from conftest import sentiment_rows


@pytest.fixture()
def corpus_txt(tmp_path):
    path = tmp_path / "corpus.txt"
    lines = [r["sentence"] for r in sentiment_rows(20)]
    path.write_text("\n".join(lines[:20]) + "\n\n   \n" + "\n".join(lines[20:]) + "\n", encoding="utf-8")
    return path


def _pretrain(tiny_encoder_dir, data, out, method="simcse-unsup", **kw):
    opts = dict(model=str(tiny_encoder_dir), batch_size=8, learning_rate=1e-3, max_steps=3, progress=False)
    opts.update(kw)
    return pretrain(method, str(data), str(out), **opts)


def test_text_corpus_gives_a_plain_encoder_folder_with_moved_weights(tmp_path, tiny_encoder_dir, corpus_txt):
    from transformers import AutoModel, AutoTokenizer

    out = tmp_path / "enc"
    result = _pretrain(tiny_encoder_dir, corpus_txt, out, max_texts=30, pooling="mean")
    assert result.output == str(out)
    encoder = AutoModel.from_pretrained(out, local_files_only=True)
    base = AutoModel.from_pretrained(tiny_encoder_dir, local_files_only=True)
    AutoTokenizer.from_pretrained(out, local_files_only=True)
    assert (out / "model.safetensors").is_file() and not (out / "checkpoints").exists()
    before, after = base.state_dict(), encoder.state_dict()
    assert before.keys() == after.keys()
    changed = [k for k in before if not torch.equal(before[k], after[k])]
    assert len(changed) > len(before) // 2  # the encoder stage trained the encoder
    # the pooling it was trained with is what later runs use by default
    assert default_pooling(str(out)) == "mean" and default_pooling(str(tiny_encoder_dir)) == "cls"
    record = read_pretrain_record(out)
    assert record.to_dict() == json.loads((out / RECORD_NAME).read_text()) == result.to_dict()
    assert record.kind == "pretrain" and record.version == 1 and len(record.identity.sha256) == 64
    assert record.method == "simcse-unsup" and record.hparams == {"temperature": 0.05}
    assert record.base_model == str(tiny_encoder_dir) and record.training.pooling == "mean"
    assert record.training.steps == 3 and record.training.learning_rate == 1e-3
    assert record.training.weight_decay == 0.1  # the report's
    corpus = record.data
    assert corpus.kind == "text-lines" and corpus.n_texts == 30  # the first 30 non-blank lines
    assert corpus.sha256 == hashlib.sha256(corpus_txt.read_bytes()).hexdigest()
    assert len(corpus.rows_hash) == 16
    assert "torch" in record.versions and "transformers" in record.versions


def test_a_pretrained_encoder_is_a_model_for_train(tmp_path, tiny_encoder_dir, corpus_txt, sentiment_csv):
    from transformers import AutoModel

    out = tmp_path / "enc"
    _pretrain(tiny_encoder_dir, corpus_txt, out, method="diffcse", pooling="mean")
    # the linear probe does not train the encoder: the run's encoder is exactly the pre-trained one
    result = train(method="linear-probe", data=str(sentiment_csv), label_column="sentiment", model=str(out),
                   output=str(tmp_path / "run"), progress=False)
    assert result["model"] == str(out) and result["training"]["pooling"] == "mean"
    used = {k: v.cpu() for k, v in result.model.encoder.backbone.state_dict().items()}
    pre = AutoModel.from_pretrained(out, local_files_only=True).state_dict()
    base = AutoModel.from_pretrained(tiny_encoder_dir, local_files_only=True).state_dict()
    assert all(torch.equal(pre[k], used[k]) for k in pre)
    assert not all(torch.equal(base[k], used[k]) for k in base)


def test_supervised_simcse_uses_the_labelled_training_split(tmp_path, tiny_encoder_dir, sentiment_csv):
    out = tmp_path / "enc"
    result = _pretrain(tiny_encoder_dir, sentiment_csv, out, method="simcse-sup", label_column="sentiment")
    corpus = result["data"]
    assert corpus["labels"] is True and corpus["split"] == "train"
    assert corpus["n_texts"] == 21  # 24 rows less the 10% validation split train holds out (stratified)
    assert result["training"]["sampler"] == "balanced"
    assert (out / "model.safetensors").is_file()


def test_an_unlabelled_table_is_read_as_texts_and_pairs(tmp_path):
    path = tmp_path / "pairs.csv"
    path.write_text("sentence1,sentence2\ngood film,great movie\nbad plot,dull story\n", encoding="utf-8")
    rows, labels, source = load_corpus(str(path), labelled=False)
    assert rows["text"] == ["good film", "bad plot"] and rows["text_pair"] == ["great movie", "dull story"]
    assert labels is None and source["kind"] == "table" and source["labels"] is False
    with pytest.raises(ConfigError, match="simcse-sup needs class labels, but .*pairs.csv has no label column 'label'"):
        load_corpus(str(path), labelled=True)


def _bad_cases(tmp_path, corpus_txt):
    empty = tmp_path / "empty.txt"
    empty.write_text("\n  \n\n", encoding="utf-8")
    latin = tmp_path / "latin.txt"
    latin.write_bytes("caf\xe9 au lait\n".encode("latin-1"))
    one = tmp_path / "one.txt"
    one.write_text("a single text\n", encoding="utf-8")
    scores = tmp_path / "scores.csv"
    scores.write_text("text,label\n" + "".join(f"text {i},{i / 7:.3f}\n" for i in range(30)), encoding="utf-8")
    taken = tmp_path / "taken"
    taken.mkdir()
    (taken / "x").write_text("x")
    return [
        ("simcse-unsup", empty, DataError, r"corpus .*empty.txt holds no text \(it is empty or has only blank lines\)"),
        ("simcse-sup", corpus_txt, ConfigError, r"simcse-sup needs class labels, but .*corpus.txt is unlabelled text"),
        ("simcse-unsup", latin, DataError, r"latin.txt: not valid UTF-8 at line 1"),
        ("simcse-unsup", one, DataError, r"holds 1 text; contrastive pre-training needs at least 2"),
        ("simcse-unsup", tmp_path / "missing.txt", DataError, r"corpus .*missing.txt: no such file"),
        ("ce-scl", corpus_txt, ConfigError, r"method must be one of simcse-unsup, simcse-sup, diffcse, got 'ce-scl'"),
        ("simcse-sup", scores, ConfigError, r"simcse-sup needs class labels, but '.*scores.csv' has a numeric"),
    ], taken


def test_bad_input_is_a_one_line_error_and_writes_nothing(tmp_path, tiny_encoder_dir, corpus_txt):
    cases, taken = _bad_cases(tmp_path, corpus_txt)
    for i, (method, data, error, message) in enumerate(cases):
        out = tmp_path / f"out{i}"
        with pytest.raises(error, match=message) as err:
            _pretrain(tiny_encoder_dir, data, out, method=method)
        assert "\n" not in str(err.value)
        assert not out.exists() and not list(tmp_path.glob(f".out{i}*"))
    with pytest.raises(ConfigError, match="taken already exists and is not an empty folder"):
        _pretrain(tiny_encoder_dir, corpus_txt, taken)
    with pytest.raises(ConfigError, match="method 'simcse-unsup': temperature must be > 0, got 0"):
        _pretrain(tiny_encoder_dir, corpus_txt, tmp_path / "bad_hp", hparams={"temperature": 0})
    assert not (tmp_path / "bad_hp").exists()


@pytest.mark.parametrize("values, message", [
    ({"batch_size": 0}, "batch_size must be >= 1, got 0"),
    ({"max_length": 0}, "max_length must be >= 1, got 0"),
    ({"learning_rate": 0}, "learning_rate must be > 0, got 0"),
    ({"learning_rate": "1e-5"}, "learning_rate must be float, got '1e-5'"),
    ({"epochs": 0}, "epochs must be > 0, got 0"),
    ({"max_steps": 0}, "max_steps must be >= 1, got 0"),
    ({"max_texts": 1}, "max_texts must be >= 2, got 1"),
    ({"warmup_ratio": 1.5}, "warmup_ratio must be in [0, 1), got 1.5"),
    ({"seed": -1}, "seed must be in [0, 4294967295], got -1"),
    ({"pooling": "max"}, "pooling must be one of"),
])
def test_python_callers_get_the_declared_one_line_errors(tmp_path, tiny_encoder_dir, corpus_txt, values, message):
    """pretrain() checks its arguments against PretrainOptions' declarations, as the CLI does, before it
    reads the corpus or writes anything."""
    with pytest.raises(ConfigError) as err:
        _pretrain(tiny_encoder_dir, corpus_txt, tmp_path / "out", **values)
    assert str(err.value).startswith(message) and "\n" not in str(err.value)
    assert not (tmp_path / "out").exists()


def test_cli_pretrain_writes_an_encoder_that_train_loads(tmp_path, tiny_encoder_dir, sentiment_csv, capsys):
    """`contrastfit pretrain` on a text file, then `contrastfit train --model ENC_DIR` on it."""
    from contrastfit.cli import main

    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(["good film", "bad plot", "great fun story", "dull movie", "the actor was fine",
                                 "boring and weak", "a superb story", "awful acting"]) + "\n", encoding="utf-8")
    enc = tmp_path / "enc"
    assert main(["pretrain", "--data", str(corpus), "--model", str(tiny_encoder_dir), "--output", str(enc),
                 "--max-steps", "2", "--batch-size", "4", "--quiet"]) == 0
    assert f"encoder saved to {enc}" in capsys.readouterr().out
    assert (enc / "config.json").exists() and (enc / "model.safetensors").exists()
    run = tmp_path / "run"
    assert main(["train", "--data", str(sentiment_csv), "--text-column", "sentence", "--label-column", "sentiment",
                 "--model", str(enc), "--method", "ce", "--min-steps", "2", "--epochs", "1", "--output", str(run),
                 "--quiet"]) == 0
    assert json.loads((run / "results.json").read_text())["model"] == str(enc)
    # bad input: one line, exit 2
    assert main(["pretrain", "--data", str(tmp_path / "missing.txt"), "--output", str(tmp_path / "e2"),
                 "--model", str(tiny_encoder_dir)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("contrastfit: error:") and "\n" not in err


def test_cli_pretrain_options_are_the_declared_ones(tmp_path, capsys):
    """`contrastfit pretrain`'s options are PretrainOptions' fields (the arguments of pretrain()), and a
    value out of its declared bounds is refused in one line, worded as train words it."""
    import dataclasses
    import inspect

    from contrastfit.cli import build_parser, main
    from contrastfit.pretrain import PretrainOptions, pretrain

    declared = {f.name: f.default for f in dataclasses.fields(PretrainOptions)}
    params = inspect.signature(pretrain).parameters  # the three it takes by position, the rest as declared
    assert {n: p.default for n, p in params.items() if p.kind is not p.VAR_KEYWORD} == {
        n: declared[n] for n in ("method", "data", "output")} and params["options"].kind is params["options"].VAR_KEYWORD
    args = build_parser().parse_args(["pretrain", "--data", "c.txt", "--output", "enc"])
    assert {n: getattr(args, n) for n in declared if n != "hparams"} == {n: d for n, d in declared.items()
                                                                          if n != "hparams"} | {"data": "c.txt",
                                                                                                "output": "enc"}
    with pytest.raises(TypeError, match="epoch"):  # a misspelt option is Python's error, as for train()
        pretrain("simcse-unsup", "c.txt", str(tmp_path / "x"), epoch=1)
    assert main(["pretrain", "--data", "c.txt", "--output", str(tmp_path / "e"), "--warmup-ratio", "1.5"]) == 2
    assert capsys.readouterr().err.strip() == "contrastfit: error: warmup_ratio must be in [0, 1), got 1.5"
    assert not (tmp_path / "e").exists()
