"""Shared fixtures: a tiny randomly initialised BERT (built here, no download) and small data files."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

def load_script(folder: str, name: str):
    """A script of ``bench/`` or ``docs/`` (not a package) as a module, for its tests."""
    import importlib.util

    path = Path(__file__).resolve().parents[1] / folder / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"{folder}_{name}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def load_bench(name: str):
    """A script of ``bench/`` as a module, for the tests of its record keeping."""
    return load_script("bench", name)


def pytest_addoption(parser):
    parser.addoption("--run-slow", action="store_true", default=False,
                     help="also run the tests marked slow (make test-all)")


def pytest_collection_modifyitems(config, items):
    if config.getoption("--run-slow"):
        return
    skip = pytest.mark.skip(reason="slow: run with --run-slow (make test-all)")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)


def _devices() -> list[str]:
    import torch

    return ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


#: The devices a device-sensitive test runs on: the CPU always, and CUDA where a GPU is visible (so
#: the same test checks the CUDA path on a machine that has one; CI has none).
DEVICES = _devices()


def rng_state(device: str):
    """The random state a dropout draw on ``device`` advances: the CPU generator's, and the CUDA
    generator's of the current device on CUDA."""
    import torch

    state = [torch.get_rng_state()]
    if device == "cuda":
        state.append(torch.cuda.get_rng_state())
    return state


def assert_same_rng(a, b) -> None:
    import torch

    assert len(a) == len(b) and all(torch.equal(x, y) for x, y in zip(a, b))


WORDS = ("good great fine film movie bad awful boring plot actor story dull superb weak fun a the is was very not "
         "and but it this that of to").split()


def _make_tiny_encoder(folder: Path) -> Path:
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors
    from transformers import BertConfig, BertModel, PreTrainedTokenizerFast
    import torch

    vocab = {t: i for i, t in enumerate(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *WORDS])}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="[UNK]"))
    tok.normalizer = normalizers.Lowercase()
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", vocab["[CLS]"]), ("[SEP]", vocab["[SEP]"])],
    )
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]", pad_token="[PAD]", cls_token="[CLS]",
                                   sep_token="[SEP]", mask_token="[MASK]", model_max_length=64)
    torch.manual_seed(0)
    config = BertConfig(vocab_size=len(vocab), hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=64, max_position_embeddings=64, hidden_dropout_prob=0.1,
                        attention_probs_dropout_prob=0.1)
    BertModel(config).save_pretrained(folder)
    fast.save_pretrained(folder)
    return folder


@pytest.fixture(scope="session")
def tiny_encoder_dir(tmp_path_factory) -> Path:
    """A 2-layer, hidden-32 BERT with a word-level tokenizer over WORDS, saved as a local HF folder."""
    return _make_tiny_encoder(tmp_path_factory.mktemp("tiny-bert"))


@pytest.fixture()
def tiny_backbone(tiny_encoder_dir):
    from contrastfit.encoders import load_backbone

    return load_backbone(str(tiny_encoder_dir))


def sentiment_rows(n_per_class: int = 12, seed: int = 0):
    """Deterministic toy sentiment rows: positive words vs negative words."""
    import random

    rng = random.Random(seed)
    pos, neg, filler = ["good", "great", "superb", "fun", "fine"], ["bad", "awful", "boring", "dull", "weak"], ["the", "film", "movie", "plot", "actor", "story", "was", "very", "a"]
    rows = []
    for label, words in (("positive", pos), ("negative", neg)):
        for _ in range(n_per_class):
            text = " ".join(rng.sample(filler, 3) + rng.sample(words, 2))
            rows.append({"sentence": text, "sentiment": label})
    rng.shuffle(rows)
    return rows


def write_rows_csv(path: Path, rows, delimiter: str = ",") -> Path:
    """``rows`` (dicts with ``sentence`` and ``sentiment``) as a CSV with those two columns."""
    import csv

    with open(path, "w", newline="", encoding="utf-8") as fh:
        writer = csv.DictWriter(fh, fieldnames=["sentence", "sentiment"], delimiter=delimiter)
        writer.writeheader()
        writer.writerows(rows)
    return path


def write_sentiment_csv(path: Path, delimiter: str = ",", **rows) -> Path:
    """``sentiment_rows(**rows)`` as a CSV with columns ``sentence`` and ``sentiment``."""
    return write_rows_csv(path, sentiment_rows(**rows), delimiter)


@pytest.fixture()
def sentiment_csv(tmp_path) -> Path:
    return write_sentiment_csv(tmp_path / "toy.csv")
