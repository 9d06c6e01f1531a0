"""The command line's multi-label hooks: the labelled split ``evaluate`` and ``calibrate`` read, and
what ``calibrate`` prints."""

from __future__ import annotations

from pathlib import Path

from ..data.loading import SUFFIX_BUILDERS, read_table
from ..data.multilabel import DEFAULT_SEPARATOR, load_multilabel, multilabel_table
from ..errors import DataError
from ..record import DataSource


def load_eval_split(args, model) -> tuple[object, str]:
    """A local file (whole) or a built-in / Hub data set's split (``--split``, default test) as label sets
    over the model's labels; the label column and separator default to the ones the model was trained with."""
    source = model.info.data.source or DataSource()
    separator = source.label_separator or DEFAULT_SEPARATOR
    path = Path(args.data).expanduser()
    if path.suffix.lower() in SUFFIX_BUILDERS or path.is_file():
        ds, _ = multilabel_table(read_table(path), str(path), text_column=args.text_column or source.text_column,
                                 text_pair_column=args.text_pair_column or source.text_pair_column,
                                 label_column=args.label_column or source.label_column, separator=separator,
                                 label_names=model.label_names)
        return ds, f"{path} (all {len(ds)} rows)"
    data = load_multilabel(args.data, text_column=args.text_column, text_pair_column=args.text_pair_column,
                           label_column=args.label_column, label_separator=separator)
    if data.label_names != model.label_names:
        raise DataError(f"data set '{args.data}' has labels {data.label_names}, the model {model.label_names}")
    split = args.split or "test"
    ds = data.split(split)
    return ds, f"{args.data} ({split} split, {len(ds)} rows)"


def calibration_lines(record: dict) -> list[str]:
    temps = ", ".join(f"{t:.3f}" for t in record["temperatures"])
    lines = [f"  per-label temperatures {temps}", f"  mean binary NLL {record['nll_before']:.4f} -> {record['nll_after']:.4f}"]
    if record["not_fitted"]:
        lines.append(f"  kept at 1 (separated, one-sided or out of range): {', '.join(record['not_fitted'])}")
    return lines
