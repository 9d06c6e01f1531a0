"""Load labelled text from a built-in data set, a local file or the Hugging Face Hub.

Every loader returns a :class:`TextData`: ``datasets.Dataset`` splits with the columns ``text``,
optionally ``text_pair``, and ``label`` (an integer class id, or a float for a regression target),
plus the label names. Problems with the input raise :class:`~contrastfit.errors.DataError` with one
line naming the file, column or value.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import math
import os
from collections import Counter
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Sequence

import datasets
import numpy as np

from ..errors import DataError
from .builtin import BUILTIN_DATASETS, MULTILABEL_BUILTIN_NAMES, load_builtin
from .types import (LABEL, TEXT, TEXT_PAIR, TextData, check_label_names, label_list_problem, label_name,
                    mixed_labels_problem)

__all__ = ["LABEL", "SUFFIX_BUILDERS", "TEXT", "TEXT_PAIR", "LabelReader", "TextData", "check_training_classes", "check_utf8",
           "data_hash", "decode_utf8", "in_memory", "load_data", "load_hub", "load_local", "load_memory", "memory_table",
           "normalise_columns", "parse_hub_name", "read_table",
           "sniff_delimiter", "stratified_split"]

#: the share of a local file or in-memory table held out for validation where a run chooses something
#: on it (:func:`contrastfit.config.validation_split_for`) and no validation data is given
VALIDATION_SPLIT = 0.1

SUFFIX_BUILDERS = {".csv": "csv", ".tsv": "csv", ".jsonl": "json", ".json": "json", ".parquet": "parquet"}
_TEXT_GUESSES = ("text", "sentence", "sentence1", "premise", "question", "question1", "review", "content", "document")
_PAIR_GUESSES = {"sentence1": "sentence2", "premise": "hypothesis", "question": "sentence", "question1": "question2"}


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
    regression target unless ``task='classification'``. A name is the label without surrounding
    white space (:func:`~contrastfit.data.types.label_name`); two that differ only in case or Unicode
    form are refused (:func:`~contrastfit.data.types.check_label_names`, naming ``where``, both and
    their row counts). Refused too: labels that mix numbers and words (``1``, ``0`` and ``pos``, in a
    JSON file or a CSV alike: :func:`~contrastfit.data.types.mixed_labels_problem`) and labels that look
    like label sets joined by ``|`` (:func:`_refuse_label_sets`).
    """
    if any(isinstance(v, (list, tuple, set, np.ndarray)) for v in values):
        raise DataError(f"{where}: the labels are lists (several labels per text), i.e. multi-label data; train "
                        "with --multi-label (train(..., multi_label=True)); see the docs' Multi-label page")
    uniq = set(values)
    if task == "regression":
        return None
    numeric = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in uniq)
    if numeric:
        if task != "classification" and any(isinstance(v, float) and not float(v).is_integer() for v in uniq):
            return None
        names = list(dict.fromkeys(label_name(v) for v in sorted(uniq)))
    else:
        mixed = mixed_labels_problem(values)
        if mixed is not None:
            raise DataError(f"{where}: {mixed}")
        names = sorted({label_name(v) for v in uniq})
        _refuse_label_sets(names, where)
    return check_label_names(names, where, Counter(label_name(v) for v in values))


def label_type_of(raw: datasets.Dataset, label_column: str | None, label_names: list[str] | None) -> str | None:
    """``"int"`` when the label column of the raw table ``raw`` holds integers (an int column of a file
    or a DataFrame, ``labels=[0, 1, ...]``; not booleans, not a ``ClassLabel``, not floats) and they are
    classes (``label_names``): a model trained on them predicts ints (:class:`TextData`'s ``label_type``);
    else None (the label names, strings, are the labels)."""
    if label_names is None:
        return None
    feature = raw.features.get(label_column or LABEL)
    dtype = getattr(feature, "dtype", "") if isinstance(feature, datasets.Value) else ""
    return "int" if dtype.startswith(("int", "uint")) else None


def _refuse_label_sets(names: list[str], where: str) -> None:
    """Refuse single-label names that look like label sets joined by ``|`` (the multi-label
    separator): two or more different names hold ``|``, or one does and each of its parts is a
    label of its own (``food``, ``service``, ``food|service``). One name with a ``|`` whose parts are
    not labels (``yes|no``) is kept as a class."""
    piped = [n for n in names if "|" in n]
    known = set(names)
    if len(piped) >= 2 or any(all(p.strip() in known for p in n.split("|") if p.strip()) for n in piped):
        raise DataError(f"{where}: {len(piped)} label{'s hold' if len(piped) != 1 else ' holds'} '|' (e.g. {piped[0]!r}): "
                        "they look like label sets (several labels per text); train with --multi-label "
                        "(train(..., multi_label=True)), with --label-separator if '|' is not the separator; "
                        "see the docs' Multi-label page")


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
        key = label_name(v)
        if isinstance(v, bool) and key not in index and str(v) in index:
            key = str(v)  # a model trained before booleans were named true / false
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
    strict_text: bool = False,
) -> tuple[datasets.Dataset, list[str] | None]:
    """Check the columns of a raw table and return it as text / [text_pair] / label. With
    ``strict_text`` (in-memory data) a text that is not a ``str`` (a number, a list) is refused; a file's
    cells are read as text (a CSV column of numbers is its digits)."""
    cols = ds.column_names
    if len(ds) == 0:
        raise DataError(f"{where} has no rows")
    text_column = text_column or next((c for c in _TEXT_GUESSES if c in cols), None)
    if text_column is None:
        raise DataError(f"{where}: no text column found; name it with --text-column (columns: {', '.join(cols)})")
    if text_pair_column is None and text_column in _PAIR_GUESSES and _PAIR_GUESSES[text_column] in cols:
        text_pair_column = _PAIR_GUESSES[text_column]
    named_label = label_column is not None
    label_column = label_column or LABEL
    for role, col in (("text", text_column), ("text pair", text_pair_column), ("label", label_column if require_labels else None)):
        if col is not None and col not in cols:
            raise DataError(f"{where} has no {role} column '{col}' (columns: {', '.join(cols)})")
    roles = [("text", text_column), ("text pair", text_pair_column)]
    if require_labels or named_label:  # (predict's table may hold its texts in a column named 'label')
        roles.append(("label", label_column))
    for i, (role, col) in enumerate(roles):
        other = next((r for r, c in roles[:i] if c is not None and c == col), None)
        if other is not None:
            raise DataError(f"{where}: column '{col}' cannot be both the {other} column and the {role} column "
                            f"(columns: {', '.join(cols)})")

    texts = ds[text_column]
    _check_texts(texts, where, text_column, strict_text)
    out: dict[str, list] = {TEXT: [str(t) for t in texts]}
    if text_pair_column is not None:
        pairs = ds[text_pair_column]
        _check_texts(pairs, where, text_pair_column, strict_text)
        out[TEXT_PAIR] = [str(t) for t in pairs]

    has_labels = label_column in cols and label_column not in (text_column, text_pair_column)
    label_where = f"{where}, column '{label_column}'"
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
                label_names = check_label_names(list(feature.names), label_where)
                raw = [feature.names[v] if isinstance(v, int) and v >= 0 else v for v in raw]
            else:
                label_names = infer_label_names(raw, label_where, task)
        else:
            feature = ds.features.get(label_column)
            if isinstance(feature, datasets.ClassLabel):
                raw = [feature.names[v] if isinstance(v, int) and v >= 0 else v for v in raw]
        out[LABEL] = encode_labels(raw, label_names, label_where)
    elif isinstance(label_names, str):
        label_names = None
    features = {TEXT: datasets.Value("string")}
    if TEXT_PAIR in out:
        features[TEXT_PAIR] = datasets.Value("string")
    if LABEL in out:
        features[LABEL] = datasets.Value("int64") if label_names is not None else datasets.Value("float32")
    return datasets.Dataset.from_dict(out, features=datasets.Features(features)), label_names


def _check_texts(values: Sequence[Any], where: str, column: str, strict: bool = False) -> None:
    missing = [i for i, v in enumerate(values) if v is None or (isinstance(v, float) and math.isnan(v))]
    if missing:
        raise DataError(f"{where}: text column '{column}' has {len(missing)} missing value(s) (first at row {missing[0] + 1})")
    if strict:
        bad = next((i for i, v in enumerate(values) if not isinstance(v, str)), None)
        if bad is not None:
            raise DataError(f"{where}: text column '{column}' row {bad + 1} is {_short(values[bad])} "
                            f"({type(values[bad]).__name__}), not a text")
    empty = [i for i, v in enumerate(values) if not str(v).strip()]
    if empty:
        raise DataError(f"{where}: text column '{column}' has {len(empty)} empty or white-space-only text(s) "
                        f"(first at row {empty[0] + 1})")


# ---------------------------------------------------------------------------------------------
# Local files
# ---------------------------------------------------------------------------------------------

def check_utf8(path: Path) -> None:
    """Refuse a text file that is not UTF-8, naming the line of the first bad byte."""
    with open(path, "rb") as fh:
        _decode_utf8(iter(lambda: fh.read(1 << 20), b""), str(path), "the file", "re-save the file as UTF-8", keep=False)


def decode_utf8(data: bytes, where: str) -> str:
    """``data`` decoded as UTF-8; bytes that are not are a :class:`DataError` naming ``where`` and the
    line of the first bad byte, as :func:`check_utf8` says of a file."""
    return _decode_utf8([data], where, "the text", "give UTF-8 text", keep=True)


def _decode_utf8(chunks, where: str, what: str, advice: str, keep: bool) -> str:
    import codecs

    decoder = codecs.getincrementaldecoder("utf-8")()
    line, parts = 1, []
    for chunk in chunks:
        try:
            text = decoder.decode(chunk)
        except UnicodeDecodeError as exc:
            line += chunk[: exc.start].count(b"\n")
            raise DataError(f"{where}: not valid UTF-8 at line {line} (byte 0x{chunk[exc.start]:02x}); {advice}") from None
        line += text.count("\n")
        if keep:
            parts.append(text)
    try:
        decoder.decode(b"", final=True)
    except UnicodeDecodeError:
        raise DataError(f"{where}: not valid UTF-8 at the end of {what}; {advice}") from None
    return "".join(parts)


#: Column separators a delimited text file may use, and their names for messages.
DELIMITERS = {",": "commas", ";": "semicolons", "\t": "tabs", "|": "vertical bars"}
_SNIFF_CHARS = 1 << 16  # the first 64 KiB of text ...
_SNIFF_ROWS = 100  # ... and at most this many rows of it


def sniff_delimiter(path: str | Path, default: str) -> str:
    """The column separator of a CSV/TSV file (one of :data:`DELIMITERS`), read from its first lines.

    Each separator is tried with Python's ``csv`` reader (quotes honoured) on the first rows: one
    that splits the header and every row into the same number (>= 2) of columns wins. Where two
    do, the file is ambiguous and refused (:class:`DataError` naming both). Where none does (ragged
    rows, or one column), ``csv.Sniffer``'s guess is taken if it splits the header into two or more
    columns, else ``default`` (``,`` for .csv, tab for .tsv); the reader or the column checks then
    report what is wrong. A file whose only line is its header has no rows (:class:`DataError`).
    """
    path = Path(path)
    with open(path, encoding="utf-8", newline="") as fh:
        sample = fh.read(_SNIFF_CHARS)
        whole = not fh.read(1)
    if not whole:  # keep whole lines; the last row may still be cut inside a quoted field: dropped below
        sample = sample[: sample.rfind("\n") + 1] or sample

    def rows(delimiter: str) -> list[list[str]]:
        try:
            out = [r for r in csv.reader(io.StringIO(sample), delimiter=delimiter) if any(c.strip() for c in r)]
        except csv.Error:
            return []
        return (out if whole else out[:-1])[:_SNIFF_ROWS]

    parsed = {d: rows(d) for d in DELIMITERS}
    if whole and max(map(len, parsed.values())) <= 1:
        header = sample.strip().splitlines()[0][:60] if sample.strip() else ""
        raise DataError(f"data file {path} has no rows" + (f" (only the header line '{header}')" if header else ""))
    consistent = [d for d, r in parsed.items() if r and len(r[0]) >= 2 and all(len(x) == len(r[0]) for x in r)]
    if len(consistent) == 1:
        return consistent[0]
    if len(consistent) > 1:
        names = " and ".join(DELIMITERS[d] for d in consistent)
        raise DataError(f"data file {path}: cannot tell its column separator ({names} each split every line into "
                        f"the same number of columns); save it with one kind of separator")
    try:
        guess = csv.Sniffer().sniff(sample, delimiters="".join(DELIMITERS)).delimiter
    except csv.Error:
        return default
    return guess if parsed[guess] and len(parsed[guess][0]) >= 2 else default


def file_problem(path: str | Path) -> str | None:
    """What keeps ``path`` from being read as a file, in words for a one-line message (``no such
    file``, ``is a folder, not a file``, ``is a symlink loop ...``, ``is a symlink to X, which does not
    exist``); None for a file (or a link to one)."""
    import errno
    import stat

    path = Path(path)
    try:
        mode = os.stat(path).st_mode
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            return "is a symlink loop (following its links leads back to a link already followed)"
        if path.is_symlink():
            return f"is a symlink to {os.readlink(path)}, which does not exist"
        if exc.errno in (errno.ENOENT, errno.ENOTDIR):
            return "no such file"
        return f"cannot be read ({exc.strerror or exc})"
    if stat.S_ISDIR(mode):
        return "is a folder, not a file"
    return None


def read_table(path: str | Path) -> datasets.Dataset:
    """Read a CSV / TSV / JSONL / JSON / Parquet file into a ``datasets.Dataset`` (all its rows)."""
    path = Path(path).expanduser()
    problem = file_problem(path)
    if problem is not None:
        advice = "; give a .csv, .tsv, .jsonl or .parquet file" if problem.startswith("is a folder") else ""
        raise DataError(f"data file {path}: {problem}{advice}")
    builder = SUFFIX_BUILDERS.get(path.suffix.lower())
    if builder is None:
        raise DataError(f"data file {path}: unknown format '{path.suffix}' (use .csv, .tsv, .jsonl, .json or .parquet)")
    if path.stat().st_size == 0:
        raise DataError(f"data file {path} is empty")
    if builder != "parquet":
        check_utf8(path)
    kwargs: dict[str, Any] = {}
    if builder == "csv":
        delimiter = sniff_delimiter(path, "\t" if path.suffix.lower() == ".tsv" else ",")
        if delimiter != ",":
            kwargs["delimiter"] = delimiter
    _check_column_names(path, builder, kwargs.get("delimiter", ","))
    try:
        ds = datasets.load_dataset(builder, data_files=str(path), split="train", **kwargs)
        bools = [c for c, f in ds.features.items() if isinstance(f, datasets.Value) and f.dtype == "bool"]
        if builder == "csv" and bools:  # pandas read True / FALSE / true as booleans: keep the cells as written
            ds = datasets.load_dataset(builder, data_files=str(path), split="train",
                                       converters={c: str for c in bools}, **kwargs)
    except Exception as exc:  # the libraries' parse errors are long and deep: keep their first line
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        if "corresponds to no data" in first:  # datasets' words for a file without a single record
            raise DataError(f"data file {path} has no rows") from None
        raise DataError(f"data file {path} could not be read as {path.suffix.lstrip('.').upper()}: {first}") from None
    if len(ds) == 0:
        raise DataError(f"data file {path} has no rows")
    return ds


def _check_column_names(path: Path, builder: str, delimiter: str) -> None:
    """Refuse a column name given twice (a CSV header, a Parquet schema, a key of a JSON record):
    the readers would keep one of them silently (pandas renames the second ``label.1``, Python's
    ``json`` keeps the last). A JSON file that does not parse is refused here too, in one line naming
    the line (of JSON lines: the first bad line)."""
    def refuse(name: str, where: str) -> None:
        raise DataError(f"data file {path}: column '{name}' appears twice{where}; rename or remove one")

    if builder == "csv":
        with open(path, encoding="utf-8", newline="") as fh:
            header = next((row for row in csv.reader(fh, delimiter=delimiter) if any(c.strip() for c in row)), [])
        twice = next((c for c, k in Counter(header).items() if k > 1), None)
        if twice is not None:
            refuse(twice, " in the header")
    elif builder == "parquet":
        import pyarrow.parquet as pq

        try:
            names = pq.read_schema(path).names
        except Exception:  # not Parquet: the reader below says so
            return
        twice = next((c for c, k in Counter(names).items() if k > 1), None)
        if twice is not None:
            refuse(twice, " in the schema")
    else:  # JSON lines, or one JSON document
        class Twice(Exception):
            pass

        def pairs(items: list) -> dict:
            keys = Counter(k for k, _ in items)
            twice = next((k for k, n in keys.items() if n > 1), None)
            if twice is not None:
                raise Twice(twice)
            return dict(items)

        number, records, bad = None, 0, None
        try:
            with open(path, encoding="utf-8") as fh:
                for number, line in enumerate(fh, 1):
                    if line.strip():
                        try:
                            json.loads(line, object_pairs_hook=pairs)
                            records += 1
                        except json.JSONDecodeError as exc:
                            bad = (number, exc)
                            break  # a document over several lines (or a bad line): read whole below
                else:
                    return  # JSON lines, every record checked
            number = None
            json.loads(path.read_text(encoding="utf-8"), object_pairs_hook=pairs)
        except Twice as exc:
            refuse(str(exc), f" in the record on line {number}" if number else " in a record")
        except json.JSONDecodeError:  # one line here (the reader would log its own line first)
            if bad is not None and (records or path.suffix.lower() == ".jsonl"):
                line, exc = bad  # JSON lines with a bad line
                raise DataError(f"data file {path}: line {line} is not valid JSON ({exc.msg} at column {exc.colno}); "
                                "each line must hold one JSON record") from None
            raise DataError(f"data file {path}: not valid JSON at line {exc.lineno} ({exc.msg} at column "
                            f"{exc.colno})") from None


class LabelReader:
    """How a table's label column is read: one class (or a value, for a regression target) a row, as
    :func:`normalise_columns` reads it. A task shape that reads labels otherwise hands the loaders its own
    reader (label sets: :class:`contrastfit.data.multilabel.LabelSetReader`); the loaders' sequence --
    built-in sets, files, in-memory data, Hub data sets, the given splits and the hold-outs -- is one."""

    #: what messages call such a data set
    noun = "data set"

    def __init__(self, task: str | None = None):
        self.task = task

    def table(self, raw: datasets.Dataset, where: str, columns: tuple[str | None, str | None, str | None],
              names: list[str] | None | str = "infer", strict_text: bool = False) -> tuple[datasets.Dataset, Any]:
        """``raw`` as text / [text_pair] / label (``columns``: text, pair and label column), and the label
        names: inferred where ``names`` is ``"infer"``, else ``names``' ids."""
        return normalise_columns(raw, where, *columns, names, task=self.task, strict_text=strict_text)

    def check(self, train: datasets.Dataset, names: Any, where: str, label_column: str | None) -> None:
        """Refuse training rows a model cannot learn from (:func:`check_training_classes`)."""
        check_training_classes(train, names, where, label_column or LABEL)

    def hold_out(self, ds: datasets.Dataset, fraction: float, seed: int, names: Any):
        """``(rest, held out)``: ``fraction`` of the rows, stratified by class (:func:`stratified_split`)."""
        return stratified_split(ds, fraction, seed, names is not None)

    def unlabelled(self, raw: datasets.Dataset, label_column: str | None) -> bool:
        """Whether a Hub split has no labels (GLUE's test splits are all -1): it is dropped."""
        lc = label_column or LABEL
        return lc in raw.column_names and all((v is None or (isinstance(v, (int, float)) and v < 0)) for v in raw[lc])

    def label_type(self, raw: datasets.Dataset, label_column: str | None, names: Any) -> str | None:
        return label_type_of(raw, label_column, names)

    def builtins(self) -> Sequence[str]:
        """The built-in sets this reader loads by name."""
        return tuple(BUILTIN_DATASETS)

    def builtin(self, name: str) -> TextData | None:
        """The built-in set ``name``, a one-line error for a set of another kind, else None."""
        if name in BUILTIN_DATASETS:
            return load_builtin(name)
        if name in MULTILABEL_BUILTIN_NAMES:
            raise DataError(f"'{name}' is a multi-label data set (several labels per text); train with "
                            "--multi-label (train(..., multi_label=True)); see the docs' Multi-label page")
        return None

    def source(self) -> dict[str, Any]:
        """What the data's ``source`` records of how its labels were read."""
        return {}


def load_local(
    path: str | Path,
    *,
    text_column: str | None = None,
    text_pair_column: str | None = None,
    label_column: str | None = None,
    validation_data: Any = None,
    test_data: Any = None,
    validation_split: float = 0.1,
    task: str | None = None,
    split_seed: int = 13,
    labels: LabelReader | None = None,
) -> TextData:
    """A local file as training data; validation and test from their own files (or in-memory data,
    :func:`memory_table`) if given. ``labels``: how the label column is read (default: one class a row,
    of ``task``).

    Without a validation file, ``validation_split`` of the file (stratified by class; fixed seed
    ``split_seed``) is held out for validation; ``validation_split=0`` keeps every row for training.
    """
    labels = labels or LabelReader(task)
    raw = read_table(path)
    columns = (text_column, text_pair_column, label_column)
    train, names = labels.table(raw, str(path), columns)
    labels.check(train, names, str(path), label_column)
    return _table_data(Path(path).stem, raw, train, names, {"kind": "local", "path": str(Path(path).resolve())},
                       labels, columns, validation_data=validation_data, test_data=test_data,
                       validation_split=validation_split, split_seed=split_seed)


def _table_data(name: str, raw, train, names: Any, source: dict[str, Any], labels: LabelReader,
                columns: tuple[str | None, str | None, str | None], *, validation_data: Any, test_data: Any,
                validation_split: float, split_seed: int) -> TextData:
    """A file's or an in-memory table's :class:`TextData`: ``train`` (its rows read from ``raw``), the given
    validation and test data (else ``validation_split`` of ``train`` held out for validation, seed
    ``split_seed``), and ``source`` completed with how the splits, columns and labels were read."""
    splits, sources = _given_splits(validation_data, test_data, names, *columns, labels=labels)
    if splits["validation"] is None and validation_split > 0 and len(train) >= 20:
        train, splits["validation"] = labels.hold_out(train, validation_split, split_seed, names)
    return TextData(
        name=name,
        train=train,
        validation=splits["validation"],
        test=splits["test"],
        label_names=names,
        label_type=labels.label_type(raw, columns[2], names),
        source={
            **source,
            "validation_data": sources["validation"],
            "test_data": sources["test"],
            "validation_split": validation_split if validation_data is None else None,
            "text_column": columns[0],
            "text_pair_column": columns[1],
            "label_column": columns[2],
            **labels.source(),
        },
    )


def _given_splits(validation_data: Any, test_data: Any, names: Any, text_column: str | None,
                  text_pair_column: str | None, label_column: str | None, labels: LabelReader | None = None):
    """The validation and test splits given as files or in memory (:func:`in_memory`), labelled with the
    training data's ``names`` (read by ``labels``, default one class a row), and what each was for the
    record: a file as given, in-memory data as ``{"kind": "memory", "form", "rows", "hash"}``, None when
    not given."""
    labels = labels or LabelReader()
    columns = (text_column, text_pair_column, label_column)
    splits: dict[str, datasets.Dataset | None] = {"validation": None, "test": None}
    sources: dict[str, Any] = {"validation": None, "test": None}
    for split, given in (("validation", validation_data), ("test", test_data)):
        if given is None:
            continue
        if in_memory(given):
            raw, form = memory_table(given, f"{split}_data", label_column)
            splits[split], _ = labels.table(raw, f"{split}_data ({form}, {len(raw)} rows)", columns, names,
                                            strict_text=True)
            sources[split] = {"kind": "memory", "form": form, "rows": len(raw), "hash": data_hash(splits[split])}
        else:
            splits[split], _ = labels.table(read_table(given), str(given), columns, names)
            sources[split] = str(given)
    return splits, sources


#: What :func:`memory_table` takes, for messages.
MEMORY_FORMS = ("a built-in name, a file path, (texts, labels), a pandas DataFrame, a datasets.Dataset, a dict of "
                "columns or a list of row dicts")


def in_memory(value: Any) -> bool:
    """Whether ``value`` is data itself rather than a name or a path (``str`` / ``os.PathLike``)."""
    return value is not None and not isinstance(value, (str, os.PathLike))


def _short(value: Any, limit: int = 60) -> str:
    """``repr(value)`` on one line, cut to about ``limit`` characters (a DataFrame's repr has many lines)."""
    import reprlib

    short = reprlib.Repr()
    short.maxstring, short.maxother, short.maxlist, short.maxtuple = 40, 40, 4, 4
    text = " ".join(short.repr(value).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _sequence(value: Any, name: str, where: str) -> list:
    """``value`` (a list, tuple, NumPy array, pandas Series, ...) as a list; one string is refused."""
    if isinstance(value, (str, bytes)) or not hasattr(value, "__iter__") or isinstance(value, Mapping):
        raise DataError(f"{where}: {name} must be a list (one item a row), got {_short(value)}")
    return value.tolist() if hasattr(value, "tolist") else list(value)


def _refuse_odd_column(name: str, values: list, where: str, label_column: str | None) -> None:
    """A one-line :class:`DataError` for an in-memory column that pyarrow cannot type, naming the
    column, the row and the value: labels mixing numbers and words (as a file's are refused,
    :func:`infer_label_names`), a ``nan`` label, a list of labels holding a null or a number among
    words, or a value that is not a text in a column of texts. Returns where none of these is the
    cause."""
    labels = {c.strip() for c in (label_column or LABEL).split(",")}
    missing = next((i for i, v in enumerate(values) if isinstance(v, float) and math.isnan(v)), None)
    if name in labels:
        lists = [v for v in values if isinstance(v, (list, tuple))]
        text_labels = any(isinstance(x, str) for v in lists for x in v)
        for i, v in enumerate(values):
            problem = label_list_problem(list(v), text_labels) if isinstance(v, (list, tuple)) else None
            if problem is not None:
                raise DataError(f"{where}, column '{name}': row {i + 1}: {problem}")
        mixed = mixed_labels_problem(values)
        if mixed is not None:
            raise DataError(f"{where}, column '{name}': {mixed}")
        if missing is not None:
            raise DataError(f"{where}: label column '{name}' row {missing + 1} is nan, a missing label; "
                            "give every text a label")
    if any(isinstance(v, str) for v in values):
        bad = next((i for i, v in enumerate(values) if v is not None and not isinstance(v, str)), None)
        if bad is not None:
            role = "label column" if name in labels else "text column" if name == TEXT else "column"
            raise DataError(f"{where}: {role} '{name}' row {bad + 1} is {_short(values[bad])} "
                            f"({type(values[bad]).__name__}), not a text")


def memory_table(value: Any, where: str = "data", label_column: str | None = None) -> tuple[datasets.Dataset, str]:
    """In-memory data as a raw table (a ``datasets.Dataset`` with the user's columns) and the name of
    its form, for :func:`normalise_columns`, which then checks it as it checks a file's table:

    * ``(texts, labels)``: two lists of equal length, the columns ``text`` and ``label``;
    * a pandas ``DataFrame`` (its index is dropped), a ``datasets.Dataset``, a dict of columns
      (``{"text": [...], "label": [...]}``) or a list of row dicts: their own columns, named with
      ``text_column`` / ``label_column`` / ``text_pair_column`` as a file's are.

    Anything else, a ``DatasetDict`` (give its splits as ``data`` / ``validation_data`` /
    ``test_data``) or a table with a column name twice is a one-line :class:`DataError` naming ``where``.
    So is a column that cannot be typed (:func:`_refuse_odd_column`: labels mixing numbers and words, a
    ``nan`` label, a text that is not a string), naming the column, the row and the value
    (``label_column``, comma-separated for one 0/1 column per label: the label column(s), default
    ``label``)."""
    columns: dict[str, list] = {}
    form = ""
    if isinstance(value, datasets.DatasetDict):
        raise DataError(f"{where} is a datasets.DatasetDict (splits: {', '.join(value)}); give one split, e.g. "
                        "data=dd['train'], validation_data=dd['validation']")
    try:
        if isinstance(value, datasets.Dataset):
            table, form = value, "Dataset"
        elif type(value).__module__.split(".")[0] == "pandas" and type(value).__name__ == "DataFrame":
            names = [str(c) for c in value.columns]
            twice = next((c for c, k in Counter(names).items() if k > 1), None)
            if twice is not None:
                raise DataError(f"{where}: column '{twice}' appears twice in the DataFrame; rename or remove one")
            form, columns = "DataFrame", {n: value.iloc[:, i].tolist() for i, n in enumerate(names)}
            table = datasets.Dataset.from_pandas(value.set_axis(names, axis=1), preserve_index=False)
        elif isinstance(value, Mapping):
            columns = {str(k): _sequence(v, f"column '{k}'", where) for k, v in value.items()}
            lengths = {k: len(v) for k, v in columns.items()}
            if len(set(lengths.values())) > 1:
                raise DataError(f"{where}: the columns differ in length ({', '.join(f'{k}: {n}' for k, n in lengths.items())})")
            form = "dict of columns"
            table = datasets.Dataset.from_dict(columns)
        elif isinstance(value, (list, tuple)) and value and all(isinstance(row, Mapping) for row in value):
            form = "list of rows"
            columns = {str(k): [row.get(k) for row in value] for k in dict.fromkeys(k for row in value for k in row)}
            table = datasets.Dataset.from_list([dict(row) for row in value])
        elif isinstance(value, tuple) and len(value) == 2 or (
                isinstance(value, list) and len(value) == 2 and not any(isinstance(v, (str, bytes)) for v in value)):
            texts, labels = _sequence(value[0], "texts", where), _sequence(value[1], "labels", where)
            if len(texts) != len(labels):
                raise DataError(f"{where}: {len(texts)} texts and {len(labels)} labels; give one label per text")
            form, columns = "texts and labels", {TEXT: texts, LABEL: labels}
            table = datasets.Dataset.from_dict(columns)
        else:
            raise DataError(f"{where} must be {MEMORY_FORMS}; got {_short(value)} ({type(value).__name__})")
    except DataError:
        raise
    except Exception as exc:  # pyarrow's word on a column it cannot type (e.g. numbers and strings mixed)
        rows = len(next(iter(columns.values()), []))
        for name, values in columns.items():  # say which column, row and value, as a file's checks do
            _refuse_odd_column(name, values, f"{where} ({form}, {rows} rows)", label_column)
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise DataError(f"{where} could not be read as a table: {first}") from None
    if len(table) == 0:
        raise DataError(f"{where} has no rows")
    return table, form


def load_memory(
    data: Any,
    *,
    text_column: str | None = None,
    text_pair_column: str | None = None,
    label_column: str | None = None,
    validation_data: Any = None,
    test_data: Any = None,
    validation_split: float = 0.1,
    task: str | None = None,
    split_seed: int = 13,
    labels: LabelReader | None = None,
) -> TextData:
    """In-memory data (:func:`memory_table`'s forms) as training data, with the same checks, label rule
    and validation hold-out as a local file (:func:`load_local`): texts must be strings and not empty;
    labels are stripped and their names sorted (numbers in numeric order; floats that are not all
    whole make a regression target); ``validation_data`` / ``test_data`` may be files or in memory.
    The source records ``{"kind": "memory", "form", "rows", "hash"}`` (the hash of every row, before
    the hold-out: :func:`data_hash`); nothing there is a path."""
    labels = labels or LabelReader(task)
    raw, form = memory_table(data, "data", label_column)
    where = f"data ({form}, {len(raw)} rows)"
    columns = (text_column, text_pair_column, label_column)
    train, names = labels.table(raw, where, columns, strict_text=True)
    labels.check(train, names, where, label_column)
    source = {"kind": "memory", "form": form, "rows": len(train), "hash": data_hash(train)}
    return _table_data("in-memory data", raw, train, names, source, labels, columns, validation_data=validation_data,
                       test_data=test_data, validation_split=validation_split, split_seed=split_seed)


def stratified_split(ds: datasets.Dataset, fraction: float, seed: int, stratify: bool = True):
    """Split ``ds`` into (rest, held-out) with ``fraction`` of the rows held out, stratified by label.

    A class with a single row cannot be stratified: that row stays in ``rest`` (the training side,
    so that every class can be learnt) and the other classes are stratified."""
    from sklearn.model_selection import train_test_split

    idx = np.arange(len(ds))
    labels = np.asarray(ds[LABEL]) if (stratify and LABEL in ds.column_names) else None
    keep = np.zeros(len(ds), dtype=bool)
    if labels is not None:
        classes, counts = np.unique(labels, return_counts=True)
        keep = np.isin(labels, classes[counts < 2])
    pool = idx[~keep]
    if len(pool) < 2:
        return ds, ds.select([])
    strata = labels[pool] if labels is not None else None
    if strata is not None:
        n_classes, n_held = len(np.unique(strata)), math.ceil(fraction * len(pool))
        if min(n_held, len(pool) - n_held) < n_classes:
            strata = None  # too few rows to put every class on both sides: a plain split
    rest, held = train_test_split(pool, test_size=fraction, random_state=seed, stratify=strata)
    return ds.select(np.sort(np.concatenate([rest, idx[keep]]))), ds.select(np.sort(held))


def check_training_classes(train: datasets.Dataset, label_names: list[str] | None, where: str,
                           label_column: str = LABEL) -> None:
    """Refuse training data a classifier cannot learn from: a single class (it would answer every
    text with probability 1.0), or a class with no training row. Regression targets pass."""
    if label_names is None:
        return
    if len(label_names) < 2:
        raise DataError(f"{where}: every row has the label '{label_names[0]}' (column '{label_column}'); "
                        "a classifier needs at least two classes")
    present = set(np.unique(np.asarray(train[LABEL])).tolist())
    missing = [name for i, name in enumerate(label_names) if i not in present]
    if missing:
        raise DataError(f"{where}: class '{missing[0]}' has no row in the training split"
                        + (f" ({len(missing)} classes have none)" if len(missing) > 1 else ""))


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
    labels: LabelReader | None = None,
) -> TextData:
    """A data set through ``datasets.load_dataset`` (a Hub name, or a local folder laid out like one).

    A test split without labels (GLUE's are all -1) is dropped; then, as Gunel et al. do, half of
    the validation split (stratified, fixed seed) becomes the test split. Without a validation split,
    10% of the training split is held out.
    """
    labels = labels or LabelReader()
    repo, config = parse_hub_name(name)
    try:
        dd = datasets.load_dataset(repo, config, revision=revision)
    except Exception as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        if Path(repo).expanduser().is_dir():
            raise DataError(
                f"{name} is a folder that datasets.load_dataset cannot read as a data set; give a data file "
                f"({', '.join(SUFFIX_BUILDERS)}), a built-in name ({', '.join(labels.builtins())}) or a Hugging Face "
                "data set name (e.g. glue/sst2)"
            ) from None
        raise DataError(
            f"{labels.noun} '{name}' is not built in ({', '.join(labels.builtins())}), not a local file, "
            f"and could not be loaded from the Hugging Face Hub: {first}"
        ) from None
    if not isinstance(dd, datasets.DatasetDict) or "train" not in dd:
        raise DataError(f"data set '{name}' has no 'train' split (splits: {', '.join(dd.keys())})")
    where = f"data set '{name}'"
    columns = (text_column, text_pair_column, label_column)
    train, names = labels.table(dd["train"], f"{where} (train)", columns)
    labels.check(train, names, f"{where} (train)", label_column)
    parts: dict[str, datasets.Dataset | None] = {}
    for split in ("validation", "test"):
        raw = dd.get(split) if split in dd else (dd.get("dev") if split == "validation" and "dev" in dd else None)
        if raw is None or labels.unlabelled(raw, label_column):
            parts[split] = None  # none, or an unlabelled test split (GLUE style)
            continue
        parts[split], _ = labels.table(raw, f"{where} ({split})", columns, names)
    validation, test = parts["validation"], parts["test"]
    if validation is None:
        train, validation = labels.hold_out(train, 0.1, split_seed, names)
    if test is None:
        validation, test = labels.hold_out(validation, 0.5, split_seed, names)
    return TextData(
        name=name,
        train=train,
        validation=validation,
        test=test,
        label_names=names,
        source={"kind": "hub", "name": repo, "config": config, "revision": revision, "label_column": label_column,
                **labels.source()},
        label_type=labels.label_type(dd["train"], label_column, names),
    )


def load_data(
    name_or_path: Any,
    *,
    text_column: str | None = None,
    text_pair_column: str | None = None,
    label_column: str | None = None,
    validation_data: Any = None,
    test_data: Any = None,
    validation_split: float | None = None,
    task: str | None = None,
    labels: LabelReader | None = None,
) -> TextData:
    """Load a built-in data set by name, a local file by path, a Hub data set by name (or a local
    folder laid out like one, see :func:`load_hub`), or in-memory data (:func:`load_memory`).
    ``validation_split``: the share of a local or in-memory table held out for validation where no
    ``validation_data`` is given (None: :data:`VALIDATION_SPLIT`). ``labels``: how the label column is
    read (default: one class a row, or a value for ``task="regression"``; label sets:
    :class:`contrastfit.data.multilabel.LabelSetReader`)."""
    labels = labels or LabelReader(task)
    if validation_split is None:
        validation_split = VALIDATION_SPLIT
    options = {"text_column": text_column, "text_pair_column": text_pair_column, "label_column": label_column,
               "validation_data": validation_data, "test_data": test_data, "validation_split": validation_split,
               "labels": labels}
    if in_memory(name_or_path):
        return load_memory(name_or_path, **options)
    name_or_path = os.fspath(name_or_path)
    path = Path(name_or_path).expanduser()
    builtin = name_or_path in labels.builtins()
    # a path that names a file (by its suffix, or a link) is read as one, so that a missing file, a folder or a
    # symlink loop is said as such (read_table), not as a Hub data set that could not be loaded
    local = not builtin and (path.suffix.lower() in SUFFIX_BUILDERS or path.is_file() or path.is_symlink())
    for split, given in (("validation_data", validation_data), ("test_data", test_data)):
        if in_memory(given) and not local:
            raise DataError(f"{split} in memory goes with training data in memory or a local file, not with "
                            f"'{name_or_path}', which has its own splits")
    if (data := labels.builtin(name_or_path)) is not None:
        return data
    if local:
        return load_local(path, **options)
    if name_or_path.startswith((".", "/", "~")) and not path.exists():
        raise DataError(f"data file {path}: {file_problem(path) or 'no such file'}")
    return load_hub(name_or_path, text_column=text_column, text_pair_column=text_pair_column, label_column=label_column,
                    labels=labels)
