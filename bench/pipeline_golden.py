"""Golden runs of the training pipeline: the same tiny jobs before and after a change to it give the same
weights and the same record, to the bit.

Eight tiny deterministic jobs on the tests' random 2-layer BERT (``tests/conftest.py``), on the CPU: a
one-stage single-task run (``ce-scl``, validation selection), the default recipe (``ce-scl-lr``: label
names as anchors and prior, WiSE-FT, the logistic head), a two-stage one (``simcse-unsup`` with its head
stage), one in a temporary folder (``ce``, no selection), two multi-label runs (the default recipe's
label-set form with thresholds; ``ce`` with validation selection), a multi-task run (a classification
task with ``ce-scl`` and a regression task) and stage-1 pre-training (``simcse-unsup``). Each run's
weights are hashed (sha256 of every tensor, in name order) and its record kept without what varies
from run to run (timings, versions, paths of the work folder, the Trainer's speed entries); ``OUT/golden.json``
holds both. With ``--against OLD/golden.json`` the two are compared (records read with
:class:`contrastfit.record.Record`, so a record of an older version compares as it reads today; the
run identity, which holds the work folder's paths, is left out) and the exit status says whether they
are identical.

    PYTHONPATH=src:tests python bench/pipeline_golden.py /tmp/golden-before        # on the old code
    PYTHONPATH=src:tests python bench/pipeline_golden.py /tmp/golden-after --against /tmp/golden-before/golden.json
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import json
import os
import random
import shutil
import sys
import warnings
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import conftest  # noqa: E402  (tests/: the tiny encoder and the toy data)
import test_multilabel  # noqa: E402  (tests/: the toy label-set data)

from contrastfit import train  # noqa: E402
from contrastfit import train_multitask  # noqa: E402
from contrastfit.pretrain import pretrain  # noqa: E402


def weights_hash(module) -> str:
    h = hashlib.sha256()
    for name, value in sorted(module.state_dict().items()):
        h.update(name.encode())
        h.update(value.detach().cpu().float().numpy().tobytes())
    return h.hexdigest()[:16]


def stable(record: dict, work: Path) -> dict:
    """``record`` without what differs between two runs of the same job."""
    record = json.loads(json.dumps(record.to_dict() if hasattr(record, "to_dict") else dict(record), default=str))
    for key in ("timings", "versions", "identity"):
        record.pop(key, None)
    for entry in record.get("log_history", []):
        for key in [k for k in entry if k.endswith(("_runtime", "_per_second")) or k == "total_flos"]:
            entry.pop(key)

    def walk(obj):
        if isinstance(obj, dict):
            for key, value in obj.items():
                if key in ("encode_s", "total_s", "resumed_from") or (isinstance(value, str) and str(work) in value):
                    obj[key] = "<varies>"
                else:
                    walk(value)
        elif isinstance(obj, list):
            for value in obj:
                walk(value)

    walk(record)
    return record


def golden(out: Path) -> dict:
    work = out / "work"
    work.mkdir(parents=True)
    encoder = conftest._make_tiny_encoder(work / "tiny")
    sentiment = conftest.write_sentiment_csv(work / "toy.csv")
    rng = random.Random(4)
    with open(work / "sts.csv", "w", newline="", encoding="utf-8") as fh:
        writer = csv.DictWriter(fh, fieldnames=["sentence1", "sentence2", "score"])
        writer.writeheader()
        writer.writerows({"sentence1": " ".join(rng.sample(conftest.WORDS, 3)),
                          "sentence2": " ".join(rng.sample(conftest.WORDS, 3)),
                          "score": round(rng.uniform(0, 5), 3)} for _ in range(40))
    common = dict(model=str(encoder), data=str(sentiment), label_column="sentiment", text_column="sentence",
                  progress=False, batch_size=8, epochs=2, logging_steps=2, use_cpu=True)
    topics = test_multilabel.write_csv(work / "topics.csv", test_multilabel.topic_rows())
    label_sets = dict(common, data=str(topics), label_column=None, text_column=None, multi_label=True)
    runs = {
        "single": lambda: train(output=str(work / "single"), method="ce-scl", **common),
        "default": lambda: train(output=str(work / "default"), **common),
        "multi-label": lambda: train(output=str(work / "multi-label"), **label_sets),
        "multi-label-ce": lambda: train(output=str(work / "multi-label-ce"), method="ce", **label_sets),
        "two-stage": lambda: train(output=str(work / "two-stage"), method="simcse-unsup", hparams={"head_epochs": 5},
                                   **common),
        "in-memory": lambda: train(method="ce", select_best=False, **common),
        "multitask": lambda: train_multitask(
            tasks=[{"name": "sent", "data": str(sentiment), "text_column": "sentence", "label_column": "sentiment",
                    "objective": "ce-scl"},
                   {"name": "sts", "data": str(work / "sts.csv"), "label_column": "score"}],
            model=str(encoder), output=str(work / "multitask"), batch_size=8, learning_rate=1e-3, progress=False,
            logging_steps=1, max_steps=6, use_cpu=True),
        "pretrain": lambda: pretrain("simcse-unsup", str(sentiment), str(work / "encoder"), model=str(encoder),
                                     batch_size=8, learning_rate=1e-3, max_steps=3, progress=False,
                                     text_column="sentence", label_column="sentiment", use_cpu=True),
    }
    results = {}
    for name, run in runs.items():
        result = run()
        if name == "pretrain":
            from transformers import AutoModel

            model = AutoModel.from_pretrained(result.output)
        else:
            model = result.model
        results[name] = {"weights": weights_hash(model), "record": stable(result, work)}
    return results


def differences(old: dict, new: dict) -> list[str]:
    from contrastfit.record import Record  # (not in the code before it: the old side only writes golden.json)

    out = []
    for name in sorted(set(old) | set(new)):
        if name not in old or name not in new:
            out.append(f"{name}: only in {'new' if name in new else 'old'}")
            continue
        if old[name]["weights"] != new[name]["weights"]:
            out.append(f"{name}: weights {old[name]['weights']} -> {new[name]['weights']}")
        a, b = (Record.from_dict(x[name]["record"]).to_dict() for x in (old, new))
        for key in sorted(set(a) | set(b)):
            if key != "identity" and a.get(key) != b.get(key):
                out.append(f"{name}: record entry {key} differs")
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("out", type=Path, help="a new folder for the runs and golden.json")
    p.add_argument("--against", type=Path, help="an earlier golden.json to compare with")
    args = p.parse_args(argv)
    if args.out.exists():
        shutil.rmtree(args.out)
    warnings.filterwarnings("ignore")
    results = golden(args.out)
    (args.out / "golden.json").write_text(json.dumps(results, indent=1, sort_keys=True), encoding="utf-8")
    print(json.dumps({name: r["weights"] for name, r in results.items()}))
    if args.against is None:
        return 0
    found = differences(json.loads(args.against.read_text(encoding="utf-8")), results)
    print("\n".join(found) if found else f"identical to {args.against}: weights and records")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
