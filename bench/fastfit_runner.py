"""Train and run FastFit on one few-shot job: a standalone script for FastFit's own environment.

``bench/fewshot.py`` runs this with the interpreter of a separate virtual environment (FastFit
1.2.1 does not install beside contrastfit: see ``docs/benchmarks.md``), so it imports nothing
from contrastfit. It reads a JSON job and writes a JSON result::

    python bench/fastfit_runner.py JOB.json

Job fields: ``train_texts``, ``train_labels`` (label names, strings), ``label_names`` (all of
them), ``test_texts``, ``model`` (a local model folder), ``recipe`` (``library-defaults`` or
``paper``), ``seed``, ``output`` (where the result goes), optionally ``device`` (``auto``,
``cpu``, ``cuda``), ``workdir`` and ``overrides`` (extra FastFitTrainer arguments, e.g.
``{"max_steps": 2}`` to show that a recipe starts). The result: ``predictions`` (label names,
one a test text), ``train_s`` (wall-clock from loading the encoder to a trained model),
``steps``, ``recipe``, ``arguments`` (given), ``effective`` (the settings the trainer used), ``device`` and the versions of FastFit, transformers,
datasets and torch.

Three work-arounds for fast-fit 1.2.1 with transformers 4.57 and datasets 2.21: its
``load_metric`` (which fetches a metric script from the Hub) is replaced by a local accuracy; a
``test`` split is always passed (the test texts, each with a placeholder label, so the test labels
never reach FastFit); the text and label columns are cast to plain ``string`` (not
``large_string``, which the collator fails on with "too many dimensions 'str'").
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

# The README's recipe (Yehudai & Bandel, 2024): 40 epochs, batch 32, 4 repeats, Adafactor,
# length 128, fp16 (added below on a GPU only). Library defaults: the HF Trainer's own.
RECIPES = {
    "library-defaults": {},
    "paper": {"num_train_epochs": 40, "per_device_train_batch_size": 32, "num_repeats": 4, "optim": "adafactor",
              "max_text_length": 128, "clf_loss_factor": 0.1, "dataloader_drop_last": False},
}


class _Accuracy:
    """Stands in for ``datasets.load_metric("accuracy")``."""

    def compute(self, predictions, references):
        import numpy as np

        predictions, references = np.asarray(predictions), np.asarray(references)
        return {"accuracy": float((predictions == references).mean()) if len(references) else 0.0}


def _version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def run(job: dict) -> dict:
    import datasets
    import numpy as np
    import torch
    import fastfit.train
    from fastfit import FastFitTrainer

    fastfit.train.load_metric = lambda *args, **kwargs: _Accuracy()  # work-around 1: no Hub metric script

    recipe = job["recipe"]
    if recipe not in RECIPES:
        raise SystemExit(f"unknown recipe {recipe!r} (choose from {', '.join(RECIPES)})")
    labels = [str(x) for x in job["train_labels"]]
    if not set(labels) <= set(job["label_names"]):
        raise SystemExit("train_labels must be label names")
    want = job.get("device", "auto")
    cuda = want != "cpu" and torch.cuda.is_available()
    if want == "cuda" and not cuda:
        raise SystemExit("device cuda: no GPU is visible")

    features = datasets.Features({"text": datasets.Value("string"), "label": datasets.Value("string")})
    train = datasets.Dataset.from_dict({"text": [str(t) for t in job["train_texts"]], "label": labels},
                                       features=features)  # work-around 3: plain string columns
    # work-around 2: a test split is always passed; its labels are placeholders (a train label)
    test = datasets.Dataset.from_dict({"text": [str(t) for t in job["test_texts"]],
                                       "label": [labels[0]] * len(job["test_texts"])}, features=features)
    dataset = datasets.DatasetDict({"train": train, "test": test})

    args = {**RECIPES[recipe], **({"fp16": True} if recipe == "paper" and cuda else {}), **job.get("overrides", {})}
    workdir = Path(job.get("workdir") or tempfile.mkdtemp(prefix="fastfit-"))
    trainer_args = {"model_name_or_path": job["model"], "text_column_name": "text", "label_column_name": "label",
                    "seed": job.get("seed", 0), "output_dir": str(workdir), "overwrite_output_dir": True,
                    "save_strategy": "no", "report_to": "none", "per_device_eval_batch_size": 64,
                    "disable_tqdm": True, "use_cpu": not cuda, **args}
    t0 = time.perf_counter()
    trainer = FastFitTrainer(dataset=dataset, **trainer_args)
    trainer.train()
    train_s = time.perf_counter() - t0

    trainer.model.eval()
    out = trainer.trainer.predict(trainer.predict_dataset)
    scores = out.predictions[0] if isinstance(out.predictions, tuple) else out.predictions
    ids = np.asarray(scores).argmax(axis=-1)
    predictions = [trainer.labels[int(i)] for i in ids]
    ta = trainer.training_args
    effective = {"num_train_epochs": ta.num_train_epochs, "max_steps": ta.max_steps,
                 "per_device_train_batch_size": ta.per_device_train_batch_size, "learning_rate": ta.learning_rate,
                 "optim": str(getattr(ta.optim, "value", ta.optim)), "fp16": ta.fp16,
                 "max_text_length": trainer.data_args.max_text_length, "num_repeats": trainer.config.num_repeats,
                 "clf_loss_factor": trainer.config.clf_loss_factor}
    return {"predictions": predictions, "train_s": train_s, "steps": int(trainer.trainer.state.global_step),
            "recipe": recipe, "arguments": args, "effective": effective, "device": "cuda" if cuda else "cpu",
            "gpu": torch.cuda.get_device_name(0) if cuda else None,
            "versions": {d: _version(d) for d in ("fast-fit", "transformers", "datasets", "torch")}}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    job = json.loads(Path(argv[0]).read_text(encoding="utf-8"))
    result = run(job)
    output = Path(job["output"])
    tmp = output.with_suffix(output.suffix + ".tmp")
    tmp.write_text(json.dumps(result, ensure_ascii=False), encoding="utf-8")
    tmp.replace(output)
    return 0


if __name__ == "__main__":
    sys.exit(main())
