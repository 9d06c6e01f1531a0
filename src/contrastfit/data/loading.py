"""Load labelled text from a built-in data set, a local file or the Hugging Face Hub.

Every loader returns a :class:`TextData`: ``datasets.Dataset`` splits with the columns ``text``,
optionally ``text_pair``, and ``label`` (an integer class id, or a float for a regression target),
plus the label names. Problems with the input raise :class:`~contrastfit.errors.DataError` with one
line naming the file, column or value.
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import datasets
import numpy as np

from ..errors import DataError

TEXT = "text"
TEXT_PAIR = "text_pair"
LABEL = "label"
SUFFIX_BUILDERS = {".csv": "csv", ".tsv": "csv", ".jsonl": "json", ".json": "json", ".parquet": "parquet"}
_TEXT_GUESSES = ("text", "sentence", "sentence1", "premise", "question", "question1", "review", "content", "document")
_PAIR_GUESSES = {"sentence1": "sentence2", "premise": "hypothesis", "question": "sentence", "question1": "question2"}


@dataclass
class TextData:
    """A labelled text data set split into train / validation / test."""

    name: str
    train: datasets.Dataset
    validation: datasets.Dataset | None
    test: datasets.Dataset | None
    label_names: list[str] | None  # None for a regression target
    source: dict[str, Any] = field(default_factory=dict)

    @property
    def task(self) -> str:
        return "regression" if self.label_names is None else "classification"

    @property
    def num_labels(self) -> int:
        return 1 if self.label_names is None else len(self.label_names)

    @property
    def has_pairs(self) -> bool:
        return TEXT_PAIR in self.train.column_names

    def split(self, name: str) -> datasets.Dataset:
        ds = getattr(self, name, None) if name in ("train", "validation", "test") else None
        if ds is None:
            have = [s for s in ("train", "validation", "test") if getattr(self, s) is not None]
            raise DataError(f"data set '{self.name}' has no '{name}' split (it has: {', '.join(have)})")
        return ds

    def sizes(self) -> dict[str, int]:
        return {s: len(getattr(self, s)) for s in ("train", "validation", "test") if getattr(self, s) is not None}


def data_hash(ds: datasets.Dataset) -> str:
    """sha256 of the rows (text, pair, label) in order: identifies exactly what a run saw."""
    h = hashlib.sha256()
    cols = [c for c in (TEXT, TEXT_PAIR, LABEL) if c in ds.column_names]
    for batch in ds.select_columns(cols).iter(batch_size=1024):
        for row in zip(*(batch[c] for c in cols)):
            h.update(json.dumps(row, ensure_ascii=False).encode("utf-8"))
            h.update(b"\n")
    return h.hexdigest()[:16]


# ---------------------------------------------------------------------------------------------
# Labels
# ---------------------------------------------------------------------------------------------

def _is_missing(value: Any) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value)) or (isinstance(value, str) and not value.strip())


def infer_label_names(values: Sequence[Any], where: str, task: str | None = None) -> list[str] | None:
    """Label names (sorted) for classification, ``None`` for a regression target.

    Integers, booleans and strings are classes; floats that are not all whole numbers are a
    regression target unless ``task='classification'``.
    """
    uniq = set(values)
    if task == "regression":
        return None
    numeric = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in uniq)
    if numeric:
        if task != "classification" and any(isinstance(v, float) and not float(v).is_integer() for v in uniq):
            return None
        return [_label_str(v) for v in sorted(uniq)]
    return sorted(_label_str(v) for v in uniq)


def _label_str(value: Any) -> str:
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def encode_labels(values: Sequence[Any], label_names: list[str] | None, where: str) -> list:
    """Map raw label values to class ids through ``label_names`` (or to floats for regression)."""
    if label_names is None:
        try:
            return [float(v) for v in values]
        except (TypeError, ValueError):
            bad = next(v for v in values if not _is_float(v))
            raise DataError(f"{where}: regression label {bad!r} is not a number") from None
    index = {name: i for i, name in enumerate(label_names)}
    out = []
    for row, v in enumerate(values):
        key = _label_str(v)
        if key not in index:
            raise DataError(f"{where}: label {key!r} (row {row + 1}) is not one of the labels ({', '.join(label_names)})")
        out.append(index[key])
    return out


def _is_float(v: Any) -> bool:
    try:
        float(v)
        return True
    except (TypeError, ValueError):
        return False


# ---------------------------------------------------------------------------------------------
# Normalising a raw table into text / text_pair / label
# ---------------------------------------------------------------------------------------------

def normalise_columns(
    ds: datasets.Dataset,
    where: str,
    text_column: str | None,
    text_pair_column: str | None,
    label_column: str | None,
    label_names: list[str] | None | str = "infer",
    task: str | None = None,
    require_labels: bool = True,
) -> tuple[datasets.Dataset, list[str] | None]:
    """Check the columns of a raw table and return it as text / [text_pair] / label."""
    cols = ds.column_names
    if len(ds) == 0:
        raise DataError(f"{where} has no rows")
    text_column = text_column or next((c for c in _TEXT_GUESSES if c in cols), None)
    if text_column is None:
        raise DataError(f"{where}: no text column found; name it with --text-column (columns: {', '.join(cols)})")
    if text_pair_column is None and text_column in _PAIR_GUESSES and _PAIR_GUESSES[text_column] in cols:
        text_pair_column = _PAIR_GUESSES[text_column]
    label_column = label_column or LABEL
    for role, col in (("text", text_column), ("text pair", text_pair_column), ("label", label_column if require_labels else None)):
        if col is not None and col not in cols:
            raise DataError(f"{where} has no {role} column '{col}' (columns: {', '.join(cols)})")

    texts = ds[text_column]
    _check_texts(texts, where, text_column)
    out: dict[str, list] = {TEXT: [str(t) for t in texts]}
    if text_pair_column is not None:
        pairs = ds[text_pair_column]
        _check_texts(pairs, where, text_pair_column)
        out[TEXT_PAIR] = [str(t) for t in pairs]

    has_labels = label_column in cols
    if has_labels:
        raw = ds[label_column]
        missing = [i for i, v in enumerate(raw) if _is_missing(v)]
        if missing:
            raise DataError(
                f"{where}: label column '{label_column}' has {len(missing)} missing value(s) (first at row {missing[0] + 1})"
            )
        if isinstance(label_names, str) and label_names == "infer":
            feature = ds.features.get(label_column)
            if isinstance(feature, datasets.ClassLabel):
                label_names = list(feature.names)
                raw = [feature.names[v] if isinstance(v, int) and v >= 0 else v for v in raw]
            else:
                label_names = infer_label_names(raw, where, task)
        else:
            feature = ds.features.get(label_column)
            if isinstance(feature, datasets.ClassLabel):
                raw = [feature.names[v] if isinstance(v, int) and v >= 0 else v for v in raw]
        out[LABEL] = encode_labels(raw, label_names, f"{where}, column '{label_column}'")
    elif isinstance(label_names, str):
        label_names = None
    features = {TEXT: datasets.Value("string")}
    if TEXT_PAIR in out:
        features[TEXT_PAIR] = datasets.Value("string")
    if LABEL in out:
        features[LABEL] = datasets.Value("int64") if label_names is not None else datasets.Value("float32")
    return datasets.Dataset.from_dict(out, features=datasets.Features(features)), label_names


def _check_texts(values: Sequence[Any], where: str, column: str) -> None:
    missing = [i for i, v in enumerate(values) if v is None or (isinstance(v, float) and math.isnan(v))]
    if missing:
        raise DataError(f"{where}: text column '{column}' has {len(missing)} missing value(s) (first at row {missing[0] + 1})")


# ---------------------------------------------------------------------------------------------
# Local files
# ---------------------------------------------------------------------------------------------

def check_utf8(path: Path) -> None:
    """Refuse a text file that is not UTF-8, naming the line of the first bad byte."""
    import codecs

    decoder = codecs.getincrementaldecoder("utf-8")()
    line = 1
    with open(path, "rb") as fh:
        while chunk := fh.read(1 << 20):
            try:
                text = decoder.decode(chunk)
            except UnicodeDecodeError as exc:
                line += chunk[: exc.start].count(b"\n")
                raise DataError(
                    f"{path}: not valid UTF-8 at line {line} (byte 0x{chunk[exc.start]:02x}); re-save the file as UTF-8"
                ) from None
            line += text.count("\n")
        try:
            decoder.decode(b"", final=True)
        except UnicodeDecodeError:
            raise DataError(f"{path}: not valid UTF-8 at the end of the file; re-save the file as UTF-8") from None


def read_table(path: str | Path) -> datasets.Dataset:
    """Read a CSV / TSV / JSONL / JSON / Parquet file into a ``datasets.Dataset`` (all its rows)."""
    path = Path(path).expanduser()
    if not path.exists():
        raise DataError(f"data file {path}: no such file")
    if path.is_dir():
        raise DataError(f"data file {path} is a folder; give a .csv, .tsv, .jsonl or .parquet file")
    builder = SUFFIX_BUILDERS.get(path.suffix.lower())
    if builder is None:
        raise DataError(f"data file {path}: unknown format '{path.suffix}' (use .csv, .tsv, .jsonl, .json or .parquet)")
    if path.stat().st_size == 0:
        raise DataError(f"data file {path} is empty")
    if builder != "parquet":
        check_utf8(path)
    kwargs: dict[str, Any] = {}
    if path.suffix.lower() == ".tsv":
        kwargs["delimiter"] = "\t"
    try:
        ds = datasets.load_dataset(builder, data_files=str(path), split="train", **kwargs)
    except Exception as exc:  # the libraries' parse errors are long and deep: keep their first line
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise DataError(f"data file {path} could not be read as {path.suffix.lstrip('.').upper()}: {first}") from None
    if len(ds) == 0:
        raise DataError(f"data file {path} has no rows")
    return ds


def load_local(
    path: str | Path,
    *,
    text_column: str | None = None,
    text_pair_column: str | None = None,
    label_column: str | None = None,
    validation_data: str | Path | None = None,
    test_data: str | Path | None = None,
    validation_split: float = 0.1,
    task: str | None = None,
    split_seed: int = 13,
) -> TextData:
    """A local file as training data; validation and test from their own files if given.

    Without a validation file, a stratified ``validation_split`` fraction of the file (fixed seed
    ``split_seed``) is held out for validation; ``validation_split=0`` keeps every row for training.
    """
    raw = read_table(path)
    train, names = normalise_columns(raw, str(path), text_column, text_pair_column, label_column, task=task)
    splits: dict[str, datasets.Dataset | None] = {"validation": None, "test": None}
    for split, file in (("validation", validation_data), ("test", test_data)):
        if file is not None:
            splits[split], _ = normalise_columns(read_table(file), str(file), text_column, text_pair_column, label_column, names)
    if splits["validation"] is None and validation_split > 0 and len(train) >= 20:
        train, splits["validation"] = stratified_split(train, validation_split, split_seed, names is not None)
    return TextData(
        name=Path(path).stem,
        train=train,
        validation=splits["validation"],
        test=splits["test"],
        label_names=names,
        source={
            "kind": "local",
            "path": str(Path(path).resolve()),
            "validation_data": str(validation_data) if validation_data else None,
            "test_data": str(test_data) if test_data else None,
            "validation_split": validation_split if validation_data is None else None,
            "text_column": text_column,
            "text_pair_column": text_pair_column,
            "label_column": label_column,
        },
    )


def stratified_split(ds: datasets.Dataset, fraction: float, seed: int, stratify: bool = True):
    """Split ``ds`` into (rest, held-out) with ``fraction`` of the rows held out, stratified by label."""
    from sklearn.model_selection import train_test_split

    idx = np.arange(len(ds))
    labels = np.asarray(ds[LABEL]) if (stratify and LABEL in ds.column_names) else None
    if labels is not None and np.min(np.unique(labels, return_counts=True)[1]) < 2:
        labels = None  # a class with one row cannot be stratified; fall back to a plain split
    rest, held = train_test_split(idx, test_size=fraction, random_state=seed, stratify=labels)
    return ds.select(np.sort(rest)), ds.select(np.sort(held))


# ---------------------------------------------------------------------------------------------
# Hugging Face Hub
# ---------------------------------------------------------------------------------------------

#: Short names whose part after the slash is a configuration of a canonical Hub data set.
HUB_ALIASES = {"glue": "nyu-mll/glue", "super_glue": "aps/super_glue"}


def parse_hub_name(name: str) -> tuple[str, str | None]:
    """``'glue/sst2'`` -> ``('nyu-mll/glue', 'sst2')``; ``'owner/name:config'`` -> ``('owner/name', 'config')``."""
    if ":" in name:
        repo, config = name.split(":", 1)
        return repo, config or None
    head, _, tail = name.partition("/")
    if head in HUB_ALIASES and tail:
        return HUB_ALIASES[head], tail
    return name, None


def load_hub(
    name: str,
    *,
    text_column: str | None = None,
    text_pair_column: str | None = None,
    label_column: str | None = None,
    split_seed: int = 13,
    revision: str | None = None,
) -> TextData:
    """A data set through ``datasets.load_dataset`` (a Hub name, or a local folder laid out like one).

    A test split without labels (GLUE's are all -1) is dropped; then, as Gunel et al. do, half of
    the validation split (stratified, fixed seed) becomes the test split. Without a validation split,
    10% of the training split is held out.
    """
    repo, config = parse_hub_name(name)
    try:
        dd = datasets.load_dataset(repo, config, revision=revision)
    except Exception as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise DataError(
            f"data set '{name}' is not built in ({', '.join(_builtin_names())}), not a local file, "
            f"and could not be loaded from the Hugging Face Hub: {first}"
        ) from None
    if not isinstance(dd, datasets.DatasetDict) or "train" not in dd:
        raise DataError(f"data set '{name}' has no 'train' split (splits: {', '.join(dd.keys())})")
    where = f"data set '{name}'"
    train, names = normalise_columns(dd["train"], f"{where} (train)", text_column, text_pair_column, label_column)
    parts: dict[str, datasets.Dataset | None] = {}
    for split in ("validation", "test"):
        raw = dd.get(split) if split in dd else (dd.get("dev") if split == "validation" and "dev" in dd else None)
        if raw is None:
            parts[split] = None
            continue
        lc = label_column or LABEL
        if lc in raw.column_names and all((v is None or (isinstance(v, (int, float)) and v < 0)) for v in raw[lc]):
            parts[split] = None  # unlabelled test split (GLUE style)
            continue
        parts[split], _ = normalise_columns(raw, f"{where} ({split})", text_column, text_pair_column, label_column, names)
    validation, test = parts["validation"], parts["test"]
    if validation is None:
        train, validation = stratified_split(train, 0.1, split_seed, names is not None)
    if test is None:
        validation, test = stratified_split(validation, 0.5, split_seed, names is not None)
    return TextData(
        name=name,
        train=train,
        validation=validation,
        test=test,
        label_names=names,
        source={"kind": "hub", "name": repo, "config": config, "revision": revision},
    )


def _builtin_names() -> list[str]:
    from .builtin import BUILTIN_DATASETS

    return list(BUILTIN_DATASETS)


def load_data(
    name_or_path: str,
    *,
    text_column: str | None = None,
    text_pair_column: str | None = None,
    label_column: str | None = None,
    validation_data: str | None = None,
    test_data: str | None = None,
    validation_split: float = 0.1,
    task: str | None = None,
) -> TextData:
    """Load a built-in data set by name, a local file by path, or a Hub data set by name."""
    from .builtin import BUILTIN_DATASETS, load_builtin

    if name_or_path in BUILTIN_DATASETS:
        return load_builtin(name_or_path)
    path = Path(name_or_path).expanduser()
    if path.suffix.lower() in SUFFIX_BUILDERS or path.is_file():
        return load_local(
            path,
            text_column=text_column,
            text_pair_column=text_pair_column,
            label_column=label_column,
            validation_data=validation_data,
            test_data=test_data,
            validation_split=validation_split,
            task=task,
        )
    if name_or_path.startswith((".", "/", "~")) and not path.exists():
        raise DataError(f"data file {path}: no such file")
    return load_hub(name_or_path, text_column=text_column, text_pair_column=text_pair_column, label_column=label_column)
