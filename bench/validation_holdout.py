"""A few-shot table given to ``train(...)``: what holding 10% of it out for validation costs the default.

The default recipe fits a logistic head after its encoder stage and chooses nothing on validation, so
since 2026-11-27 a local or in-memory table trains it on every row (``validation_split`` unset); before,
10% was held out from 20 rows up (32 rows gave 28 to training, 80 gave 72, and on 20 classes 8 of them
lost one of their 4 examples). This trains the default on the few-shot bench's own samples, each given
as an in-memory table with the bench's fixed test set, once with ``validation_split=0.1`` (the old rule)
and once unset (every row trains; its accuracy is the bench's record for that sample), and prints the
paired differences.

    python bench/validation_holdout.py        # about 10 minutes on 2 CPU cores
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np  # noqa: E402

from contrastfit.data import load_data  # noqa: E402
from contrastfit.experiments.protocols.few_shot import few_shot  # noqa: E402
from contrastfit.training import train  # noqa: E402
from contrastfit.versions import library_versions  # noqa: E402

HERE = Path(__file__).resolve().parent
RUNS = HERE / "results" / "validation_holdout_runs.jsonl"
CELLS = [("medmcqa-subject", 4), ("mr", 16), ("bbc-news", 4)]  # tables of 80, 32 and 20 rows


def named(split, label_names):
    """A split as the table a user would give: text and label name."""
    frame = split.to_pandas()[["text", "label"]]
    frame["label"] = [label_names[i] for i in frame["label"]]
    return frame


def main() -> int:
    import fewshot  # bench/fewshot.py (Python puts the running script's folder, bench/, on the path)

    done = {(r["data"], r["K"], r["sample"], r["split"]) for r in fewshot.read_records(RUNS)}
    for name, shots in CELLS:
        data = fewshot.fixed_test(load_data(name), 1000)
        test = named(data.test, data.label_names)
        for run in few_shot(data, shots=[shots], samples=3, validation_size=64, seed=0):
            rows = named(run.data.train, data.label_names)
            for split in (0.1, None):
                if (name, shots, run.sample, split) in done:
                    continue
                result = train(data=rows, test_data=test, validation_split=split, seed=0, progress=False)
                record = {"data": name, "K": shots, "sample": run.sample, "split": split, "rows": len(rows),
                          "train_size": result["data"]["train_size"], "accuracy": result.metrics["test"]["accuracy"],
                          "method": result["method"], "versions": library_versions()}
                fewshot.append_record(RUNS, record)
                print(json.dumps({k: record[k] for k in ("data", "K", "sample", "split", "train_size", "accuracy")}),
                      flush=True)
    print(markdown(fewshot.read_records(RUNS)), end="")
    return 0


def markdown(records: list[dict]) -> str:
    """The table of the records: per cell, the rows given and trained on with 10% held out, the accuracy
    (mean ± std over the samples) held out and on every row, and the paired differences."""
    lines = ["| data | K | rows | held out (10%) | every row | difference |", "|---|---|---|---|---|---|"]
    for name, shots in CELLS:
        by = {(r["sample"], r["split"]): r for r in records if (r["data"], r["K"]) == (name, shots)}
        samples = sorted({s for s, _ in by})
        if not samples:
            continue
        old = np.array([by[s, 0.1]["accuracy"] for s in samples]) * 100
        new = np.array([by[s, None]["accuracy"] for s in samples]) * 100
        lines.append(f"| {name} | {shots} | {by[samples[0], None]['rows']} -> {by[samples[0], 0.1]['train_size']} | "
                     f"{old.mean():.1f} ± {old.std(ddof=1):.1f} | {new.mean():.1f} ± {new.std(ddof=1):.1f} | "
                     f"{(new - old).mean():+.1f} ({', '.join(f'{d:+.1f}' for d in new - old)}) |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
