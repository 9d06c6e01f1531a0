"""Few-shot bench: contrastfit's default recipe and methods against a linear probe and SetFit.

Every system trains on the same K-per-class training samples (drawn by the experiments' own
``few-shot`` protocol, so sample ``s`` here is sample ``s`` of ``contrastfit experiment``) and is
scored on the same fixed test set (a stratified subset of the data set's test split, drawn once).
One record per (data set, K, sample, system) is appended to ``--runs`` as it finishes, so a killed
bench resumes where it stopped; a contrastfit system's record is reused only while the system trains
the same recipe (method, resolved hyper-parameters and training settings: a changed default is
trained again, and the bench says what changed; where another system's record in the runs file or in
``--reuse`` files trained that very recipe on the same sample, as a variant that became the default
did, that record stands for the run and names where it came from: :func:`stand_in`; ``--retime``
trains such runs again, to time them alike), and a SetFit library run only while it was made under
the same step cap (:func:`setfit_cap_changed`; a run skipped for a cap, as the bench did before it
capped, is redone); the summary (mean +- std, macro-F1, training seconds, paired tests against
SetFit) is rewritten after every record to ``--output`` (JSON), a Markdown table next to it,
and a figure of accuracy against training time.

Systems (``--systems``):

* ``default``: what ``contrastfit train --data FILE`` does with no method and no tuning flag;
* any method name (``ce``, ``ce-scl``, ``setfit``, ``linear-probe``, ...; ``all`` = every method);
* ``zero-shot``: no training example, the nearest label name (the floor every system should clear;
  skipped where the label names are codes or the texts are pairs);
* ``setfit-lib``: the real SetFit library with its defaults (``pip install setfit``: the
  ``bench`` extra; a text pair is joined into one text by the tokenizer's separator token, as
  SetFit takes one text an example); skipped with a note where it is not installed. Where its default pair
  count needs more than ``--setfit-max-steps`` steps (SetFit's pairs grow with the square of the
  training-set size) it trains that many steps only (its ``TrainingArguments(max_steps=...)``), and the
  record and the summary say so (``capped: 200 of 960 steps``); the ``setfit`` method takes the same steps
  and is skipped by the same rule (contrastfit's settings have no step cap);
* ``fastfit`` and ``fastfit-defaults``: FastFit (Yehudai & Bandel, 2024) with its README's recipe
  (40 epochs, batch 32, 4 repeats, Adafactor, length 128, fp16 on a GPU) and with its library
  defaults (the HF Trainer's: 3 epochs, batch 8, length 32). FastFit does not install beside
  contrastfit, so ``bench/fastfit_runner.py`` runs it in its own virtual environment, whose python
  ``--fastfit-python`` names (default: ``$CONTRASTFIT_FASTFIT_PYTHON``); skipped with a note where
  that is absent (such a record is redone once it is given) or where the texts are pairs. Each
  record names the recipe, FastFit's version and the device FastFit trained on;
* ``crossfit``: a study of a per-run choice: each of :data:`CROSSFIT_CANDIDATES` (the default recipe,
  and the longer schedule without the weight interpolation) is trained on one half of the training
  sample (two stratified folds) and scored on the other, and the one with the better mean fold
  accuracy (ties: the default) is trained on the whole sample; its seconds include the four fold runs
  and the record names the fold scores and the choice;
* a variant ``NAME=METHOD:key=value,key=value`` where each key is a ``TrainConfig`` field
  (``min_steps``, ``learning_rate``, ``head_init``, ``refit_head``, ...) or ``hp.NAME`` for a
  method hyper-parameter, e.g. ``lpft=ce-scl:head_init=probe,refit_head=true``.

Training seconds are wall-clock from loading the pretrained encoder to a trained classifier
(evaluation excluded), on whatever the machine is doing: compare systems within one run only.
``--device`` runs every system (the probe, SetFit and contrastfit's) on the CPU or on the GPU
(``auto``: a GPU where one is visible); each record names its device.

    python bench/fewshot.py --data mr bbc-news --shots 8 16 --samples 5
    python bench/fewshot.py --figure   # trains nothing: the figure of docs/benchmarks.md

docs/benchmarks.md shows these records through ``docs/hooks_bench.py``, which calls :func:`goal_markdown`,
:func:`kinds_markdown`, :func:`misses_markdown`, :func:`markdown` and :func:`datasets_markdown` at build time.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import re
import sys
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import numpy as np  # noqa: E402

from contrastfit.atomic import write_json_atomic, write_text_atomic  # noqa: E402
from contrastfit.data import data_hash, load_data, sample_stratified  # noqa: E402
from contrastfit.data.loading import TextData  # noqa: E402
from contrastfit.encoders import resolve_model  # noqa: E402
from contrastfit.errors import ConfigError, ContrastfitError  # noqa: E402
from contrastfit.evaluation.metrics import classification_metrics  # noqa: E402
from contrastfit.experiments.protocols.few_shot import few_shot  # noqa: E402
from contrastfit.methods import available_methods  # noqa: E402
from contrastfit.pipeline import WeightInterpolation  # noqa: E402
from contrastfit.config import TrainConfig  # noqa: E402
from contrastfit.training import train  # noqa: E402
from contrastfit.versions import library_versions  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
TEST_SEED = 20211
REFERENCE = "setfit-lib"
CEILING = "ceiling"  # the default recipe on the whole training split (--ceiling)
PROBE = "linear-probe"
FASTFIT = {"fastfit": "paper", "fastfit-defaults": "library-defaults"}  # system -> fastfit_runner.py recipe
FASTFIT_PAPER = "fastfit"  # the FastFit system the goal table compares with (its paper's recipe)
FASTFIT_RUNNER = Path(__file__).resolve().parent / "fastfit_runner.py"
CROSSFIT = "crossfit"
CODES = ":codes"  # `--data mr:codes`: the set with its label names replaced by class numbers
#: the recipes ``crossfit`` chooses between: the default, and 60 steps at 5e-5 without the interpolation
CROSSFIT_CANDIDATES = ("default", "long=ce-scl-lr:min_steps=60,learning_rate=5e-5,wise_ft=1")


# ---------------------------------------------------------------------------------------------
# Systems
# ---------------------------------------------------------------------------------------------

def parse_system(spec: str) -> tuple[str, str | None, dict[str, Any], dict[str, Any]]:
    """``spec`` -> (name, method or None for the default recipe, TrainConfig overrides, hparams)."""
    import yaml

    if spec in ("default", REFERENCE):
        return spec, None, {}, {}
    if "=" not in spec.split(":")[0]:
        return spec, spec, {}, {}
    name, rest = spec.split("=", 1)
    method, _, options = rest.partition(":")
    config, hparams = {}, {}
    for item in filter(None, options.split(",")):
        key, _, value = item.partition("=")
        try:
            value = float(value) if any(c in value for c in ".eE") and not value.isalpha() else yaml.safe_load(value)
        except ValueError:  # not a number after all (e.g. a word with an "e")
            value = yaml.safe_load(value)
        (hparams if key.startswith("hp.") else config)[key.removeprefix("hp.")] = value
    return name, method or None, config, hparams


def run_contrastfit(spec: str, data: TextData, seed: int, model: str, max_length: int, workdir: Path,
                    device: str = "auto") -> dict[str, Any]:
    name, method, overrides, hparams = parse_system(spec)
    kwargs = {"method": method} if method else {}  # the default recipe: no method given
    folder = workdir / f"{name}-{time.time_ns()}"
    result = train(TrainConfig(**{**kwargs, "data": data.name, "output": str(folder), "model": model, "seed": seed,
                                  "max_length": max_length, "hparams": hparams, "save_model": False,
                                  "save_checkpoints": False, "progress": False, "use_cpu": device == "cpu", **overrides}),
                   text_data=data)
    test = result.metrics["test"]
    return {"accuracy": test["accuracy"], "macro_f1": test["macro_f1"],
            "train_s": result["timings"]["setup_s"] + result["timings"]["train_s"],
            "steps": result["training"]["steps"], "method": result["method"], "hparams": result["hparams"],
            "training": {k: v for k, v in result["training"].items() if k not in ("head_stage", "head_init")}}


def crossfit_folds(labels: list[int], seed: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """Two stratified halves of a training sample: [(train on, score on), (the other way round)]."""
    from sklearn.model_selection import StratifiedKFold

    folds = StratifiedKFold(n_splits=2, shuffle=True, random_state=seed)
    return [(a, b) for a, b in folds.split(np.zeros(len(labels)), labels)]


def run_crossfit(data: TextData, seed: int, model: str, max_length: int, workdir: Path,
                 device: str = "auto") -> dict[str, Any]:
    """The ``crossfit`` system: :data:`CROSSFIT_CANDIDATES` cross-fitted on the training sample's two
    halves, the better one trained on all of it (see the module docstring)."""
    started = time.perf_counter()
    train_split = data.train
    scores: dict[str, float] = {}
    for candidate in CROSSFIT_CANDIDATES:
        accuracies = []
        for fit_on, score_on in crossfit_folds(train_split["label"], seed):
            fold = TextData(data.name, train_split.select(fit_on), data.validation, train_split.select(score_on),
                            data.label_names, dict(data.source))
            accuracies.append(run_contrastfit(candidate, fold, seed, model, max_length, workdir, device)["accuracy"])
        scores[candidate] = float(np.mean(accuracies))
    chosen = max(CROSSFIT_CANDIDATES, key=lambda c: (scores[c], c == CROSSFIT_CANDIDATES[0]))
    choosing_s = time.perf_counter() - started
    record = run_contrastfit(chosen, data, seed, model, max_length, workdir, device)
    record["train_s"] += choosing_s
    record["crossfit"] = {"scores": scores, "chosen": chosen, "choosing_s": choosing_s}
    return record


#: the training settings a contrastfit record keeps (``training``) and a rerun compares
RECIPE_SETTINGS = ("batch_size", "learning_rate", "weight_decay", "warmup_ratio", "gradient_accumulation_steps",
                   "max_length", "fp16", "bf16", "min_steps", "refit_head", "sampler", "gradient_cache_chunk",
                   "memory_size", "pooling")


def recipe(spec: str, train_size: int, model: str, max_length: int) -> dict[str, Any] | None:
    """What a contrastfit system (``spec``) would train with today on ``train_size`` examples: its
    method, resolved hyper-parameters and training settings, as its record keeps them (None for the
    SetFit library and FastFit, whose records name their library's version instead)."""
    from contrastfit.encoders import default_pooling
    from contrastfit.methods import get_method
    from contrastfit.shapes import DEFAULT_METHOD
    from contrastfit.trainer import with_method_defaults

    if spec in (REFERENCE, CROSSFIT) or spec in FASTFIT:
        return None
    _, method, overrides, hparams = parse_system(spec)
    config = with_method_defaults(TrainConfig(method=method or DEFAULT_METHOD, model=model, max_length=max_length,
                                              hparams=hparams, **overrides))
    cls = get_method(config.method)
    training = {k: getattr(config, k) for k in RECIPE_SETTINGS if k != "pooling"}
    training["pooling"] = config.pooling or default_pooling(model)
    if config.wise_ft is not None:
        training["wise_ft"] = config.wise_ft
    return {"method": config.method, "hparams": cls.resolve({**cls.defaults_for(train_size), **hparams}),
            "training": training}


def stale(record: dict[str, Any], expected: dict[str, Any] | None) -> list[str]:
    """What differs between a finished record and the recipe its system trains today (:func:`recipe`):
    the method, a hyper-parameter or a training setting (a setting the record predates counts as
    unchanged while it is unset today). An empty list: the record stands."""
    if expected is None or "accuracy" not in record or "method" not in record:
        return []
    changed = ["method"] if record["method"] != expected["method"] else []
    changed += [f"hparams.{k}" for k in sorted(set(record.get("hparams", {})) | set(expected["hparams"]))
                if record.get("hparams", {}).get(k) != expected["hparams"].get(k)]
    kept = dict(record.get("training", {}))
    if "wise_ft" in kept:  # the record keeps the interpolation's weight and rule
        kept["wise_ft"] = WeightInterpolation.recorded_alpha(kept)
    changed += [f"training.{k}" for k, v in expected["training"].items()
                if (kept[k] if k in kept else None) != v and not (k not in kept and v is None)]
    return changed


#: what must match for another system's record to stand in for a run (:func:`stand_in`): the sample, the
#: test set, the seeds, the encoder and the device
SAME_RUN = ("data", "shots", "sample", "train_hash", "test_hash", "seed", "model", "device")
#: systems whose records name no contrastfit recipe of their own (crossfit's time includes its fold runs)
OWN_RECIPES = (REFERENCE, CROSSFIT, CEILING, *FASTFIT)


def stand_in(pool: list[tuple[str, dict[str, Any]]], run: dict[str, Any],
             expected: dict[str, Any] | None) -> tuple[str, dict[str, Any]] | None:
    """A finished record of another contrastfit system (``pool``: (file name, record) pairs) that trained
    the recipe ``expected`` on the same run (:data:`SAME_RUN`), so that it stands for this system's run
    instead of training it again: a variant that became the default is the default's record. The last
    such record, else None."""
    if expected is None:
        return None
    found = None
    for where, record in pool:
        if ("accuracy" in record and "method" in record and record.get("system") not in (run["system"], *OWN_RECIPES)
                and all(record.get(k) == run[k] for k in SAME_RUN) and not stale(record, expected)):
            found = (where, record)
    return found


def setfit_steps(labels: list[int], batch_size: int = 16) -> int:
    from contrastfit.methods.setfit import setfit_pair_count

    return -(-setfit_pair_count(labels) // batch_size)


@functools.lru_cache(maxsize=None)
def class_count(data: str) -> int | None:
    """How many classes the bench set ``data`` has (None where it cannot be read here)."""
    try:
        names = load_data(base_data(data)).label_names
    except ContrastfitError:
        return None
    return len(names) if names else None


def setfit_default_steps(data: str, shots: int) -> int | None:
    """The steps the SetFit library's defaults train on ``shots`` examples of each class of ``data``
    (:func:`setfit_steps`): what a SetFit record that kept no step count trained, the sample being K per
    class (None where the class count is unknown)."""
    classes = class_count(data) if shots else None
    return None if classes is None else setfit_steps([c for c in range(classes) for _ in range(shots)])


def setfit_texts(split, sf) -> list[str]:
    """SetFit takes one text per example: a pair (BoolQ's question and passage) is joined by the
    tokenizer's separator token, which the tokenizer reads back as that special token, as a SetFit
    user would feed it."""
    if "text_pair" not in split.column_names:
        return list(split["text"])
    sep = sf.model_body.tokenizer.sep_token or "\n"
    return [f"{a} {sep} {b}" for a, b in zip(split["text"], split["text_pair"])]


def setfit_cap(default_steps: int, max_steps: int | None) -> int | None:
    """The step cap a SetFit library run takes under ``--setfit-max-steps max_steps``: ``max_steps`` where
    its default (``default_steps``, :func:`setfit_steps`) needs more, else None (its defaults, uncapped)."""
    return max_steps if max_steps is not None and default_steps > max_steps else None


def run_setfit_lib(data: TextData, seed: int, model: str, workdir: Path, device: str = "auto",
                   max_steps: int | None = None) -> dict[str, Any]:
    """The SetFit library with its default TrainingArguments (output folder aside); where its default
    pair count needs more than ``max_steps`` steps (``--setfit-max-steps``), ``max_steps=max_steps``
    as well (SetFit's own cap: it draws only the pairs those steps take), and the record keeps
    ``setfit_steps`` (what the default would take) and ``setfit_max_steps`` (the cap)."""
    import datasets
    from setfit import SetFitModel, Trainer, TrainingArguments

    default_steps = setfit_steps(data.train["label"])
    cap = setfit_cap(default_steps, max_steps)
    path = resolve_model(model)[0]
    t0 = time.perf_counter()
    sf = SetFitModel.from_pretrained(path, **({} if device == "auto" else {"device": device}))
    train_ds = datasets.Dataset.from_dict({"text": setfit_texts(data.train, sf), "label": data.train["label"]})
    args = TrainingArguments(output_dir=str(workdir / f"setfit-{time.time_ns()}"), seed=seed,
                             **({} if cap is None else {"max_steps": cap}))
    trainer = Trainer(model=sf, args=args, train_dataset=train_ds)
    trainer.train()
    train_s = time.perf_counter() - t0
    pred = np.asarray(sf.predict(setfit_texts(data.test, sf), batch_size=64))
    m = classification_metrics(data.test["label"], pred.astype(int), data.label_names)
    return {"accuracy": m["accuracy"], "macro_f1": m["macro_f1"], "train_s": train_s,
            # SetFit 1.x trains through a sentence-transformers trainer (`st_trainer`), whose state counts the steps;
            # else the count its arguments imply (its defaults', or the cap)
            "steps": getattr(getattr(getattr(trainer, "st_trainer", trainer), "state", None), "global_step", None)
            or (default_steps if cap is None else cap),
            **({} if cap is None else {"setfit_steps": default_steps, "setfit_max_steps": cap}),
            "method": "setfit (library)", "setfit_version": _version("setfit")}


def fastfit_missing(python: str | None) -> str | None:
    """Why FastFit's environment cannot run (None when it can)."""
    if not python:
        return "FastFit's environment is not given (--fastfit-python or CONTRASTFIT_FASTFIT_PYTHON; see docs/benchmarks.md)"
    if not (Path(python).is_file() and os.access(python, os.X_OK)):
        return f"FastFit's environment is absent: {python} is not an executable"
    return None


def run_fastfit(data: TextData, seed: int, model: str, workdir: Path, python: str, recipe: str,
                device: str = "auto") -> dict[str, Any]:
    """FastFit in its own environment: ``bench/fastfit_runner.py`` as a subprocess on the same
    training sample and test set (the test labels stay here)."""
    import subprocess

    names = data.label_names
    folder = workdir / f"fastfit-{time.time_ns()}"
    folder.mkdir(parents=True)
    job = {"train_texts": list(data.train["text"]), "train_labels": [names[i] for i in data.train["label"]],
           "label_names": names, "test_texts": list(data.test["text"]), "model": resolve_model(model)[0],
           "recipe": recipe, "seed": seed, "device": device, "output": str(folder / "result.json"),
           "workdir": str(folder / "trainer")}
    (folder / "job.json").write_text(json.dumps(job, ensure_ascii=False), encoding="utf-8")
    proc = subprocess.run([python, str(FASTFIT_RUNNER), str(folder / "job.json")], capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"FastFit ({recipe}) failed with exit status {proc.returncode}:\n{proc.stderr[-3000:]}")
    out = json.loads((folder / "result.json").read_text(encoding="utf-8"))
    index = {name: i for i, name in enumerate(names)}
    pred = np.array([index[p] for p in out["predictions"]], dtype=int)
    m = classification_metrics(data.test["label"], pred, names)
    return {"accuracy": m["accuracy"], "macro_f1": m["macro_f1"], "train_s": out["train_s"], "steps": out["steps"],
            "method": "fastfit (library)", "recipe": recipe, "fastfit_arguments": out["arguments"],
            "fastfit_settings": out.get("effective"),
            "fastfit_version": out["versions"].get("fast-fit"), "fastfit_versions": out["versions"],
            "device": out["device"], **({"gpu": out["gpu"]} if out.get("gpu") else {})}


def _version(dist: str) -> str | None:
    import importlib.metadata

    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


# ---------------------------------------------------------------------------------------------
# Records and summary
# ---------------------------------------------------------------------------------------------

def read_records(path: Path) -> list[dict[str, Any]]:
    if not path.is_file():
        return []
    out = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:  # a line cut short by a kill: that run is redone
            continue
    return out


def capped_steps(record: dict[str, Any]) -> int | None:
    """The SetFit step count a record was skipped for (``--setfit-max-steps``), else None; records
    written before the count had its own field carry it in their note only. (A SetFit library run
    trained under the cap has a result: it was not skipped, whatever its ``setfit_steps``.)"""
    if "accuracy" in record:
        return None
    if "setfit_steps" in record:
        return int(record["setfit_steps"])
    match = re.match(r"SetFit's default would take (\d+) steps", record.get("skipped", ""))
    return int(match.group(1)) if match else None


def redone(records: list[dict[str, Any]], max_steps: int) -> list[dict[str, Any]]:
    """The records a run with ``--setfit-max-steps max_steps`` takes as done: a SetFit library run skipped
    for a step cap (as the bench did before it capped SetFit's steps instead) is redone, under the cap;
    a ``setfit`` method run skipped for a smaller cap is redone; the skip note is dropped once a result
    stands for its cell. (A SetFit library run made under another cap: :func:`setfit_cap_changed`.)"""
    capped = {i for i, r in enumerate(records)
              if (n := capped_steps(r)) is not None and (r.get("system") == REFERENCE or n <= max_steps)}
    return [r for i, r in enumerate(records) if i not in capped]


def setfit_cap_changed(record: dict[str, Any], default_steps: int, max_steps: int) -> list[str]:
    """How a finished SetFit library record's step cap differs from the one a run with
    ``--setfit-max-steps max_steps`` takes on its sample (whose default takes ``default_steps``:
    :func:`setfit_steps`): the steps it trained, ``min(default_steps, max_steps)`` today, against the
    record's (its ``setfit_max_steps``, else the default's, uncapped). An empty list: the record stands.
    An uncapped run always stands: SetFit's own default is the reference a cap only stands in for."""
    if "accuracy" not in record:
        return []
    was, now = record.get("setfit_max_steps"), setfit_cap(default_steps, max_steps)
    if was is None or was == now:
        return []
    return [f"setfit_max_steps: {'none' if was is None else was} -> {'none' if now is None else now} "
            f"(of {default_steps} steps)"]


def append_record(path: Path, record: dict[str, Any]) -> None:
    with open(path, "a", encoding="utf-8") as fh:
        fh.write(json.dumps(record, ensure_ascii=False) + "\n")
        fh.flush()
        os.fsync(fh.fileno())


def capped_note(row: dict[str, Any]) -> str | None:
    """What a summary row's ``capped`` says, as its cells show it: ``capped: 200 of 960 steps`` (SetFit's
    ``max_steps`` of the steps its default would take; ``in 2 of 3 runs`` where not all were), else None."""
    capped = row.get("capped")
    if not capped:
        return None

    def span(values: list[int]) -> str:
        return str(values[0]) if len(values) == 1 else f"{values[0]}–{values[-1]}"

    runs = "" if capped["runs"] == row["n"] else f" in {capped['runs']} of {row['n']} runs"
    return f"capped{runs}: {span(capped['max_steps'])} of {span(capped['setfit_steps'])} steps"


def paired_std_test(a: np.ndarray, b: np.ndarray) -> float | None:
    """p of the Pitman-Morgan test that two systems' accuracies on the same samples have the same
    variance: the correlation of ``a + b`` with ``a - b`` is 0 exactly when they do (Pitman 1939,
    Morgan 1939), tested as a Pearson correlation. None with fewer than 3 samples or a constant sum
    or difference (nothing to test)."""
    from scipy import stats

    if len(a) < 3 or np.allclose(a + b, (a + b)[0]) or np.allclose(a - b, (a - b)[0]):
        return None
    return float(stats.pearsonr(a + b, a - b).pvalue)


def summarise(records: list[dict[str, Any]]) -> dict[str, Any]:
    """Per (data, shots, system): mean +- std of accuracy and macro-F1, mean training seconds,
    and, against SetFit and against the linear probe on the samples both have, the mean difference
    with a paired t-test and a Wilcoxon signed-rank test (SciPy), and whether the two stds differ
    (:func:`paired_std_test`). SetFit's steps, where its records kept no count, are its defaults' on K
    examples a class (:func:`setfit_default_steps`), which the time goal reads."""
    from scipy import stats

    cells: dict[tuple, dict[str, dict[int, dict]]] = {}
    for r in records:
        if "accuracy" in r and r["system"] != CEILING:
            cells.setdefault((r["data"], r["shots"]), {}).setdefault(r["system"], {})[r["sample"]] = r
    rows = []
    for (data, shots), systems in sorted(cells.items()):
        for system, runs in systems.items():
            acc = np.array([r["accuracy"] for r in runs.values()]) * 100
            f1 = np.array([r["macro_f1"] for r in runs.values()]) * 100
            row = {"data": data, "shots": shots, "system": system, "n": len(acc),
                   "accuracy_mean": acc.mean(), "accuracy_std": acc.std(ddof=1) if len(acc) > 1 else 0.0,
                   "macro_f1_mean": f1.mean(), "macro_f1_std": f1.std(ddof=1) if len(f1) > 1 else 0.0,
                   "train_s": float(np.mean([r["train_s"] for r in runs.values()])),
                   "steps": (float(np.mean(steps)) if (steps := [r["steps"] for r in runs.values()
                                                                  if r.get("steps") is not None]) else None)}
            if system == REFERENCE and row["steps"] is None:  # older records kept no count: the default's
                row["steps"] = setfit_default_steps(data, shots)
            if capped := [r for r in runs.values() if r.get("setfit_max_steps") is not None]:  # SetFit's steps cut
                row["capped"] = {"runs": len(capped),
                                 "max_steps": sorted({int(r["setfit_max_steps"]) for r in capped}),
                                 "setfit_steps": sorted({int(r["setfit_steps"]) for r in capped})}
                row["capped"]["note"] = capped_note(row)
            for label, other in (("vs_setfit", REFERENCE), ("vs_probe", PROBE), ("vs_fastfit", FASTFIT_PAPER)):
                ref = systems.get(other, {})
                common = sorted(set(runs) & set(ref))
                if system == other or not common:
                    continue
                a = np.array([runs[s]["accuracy"] for s in common]) * 100
                b = np.array([ref[s]["accuracy"] for s in common]) * 100
                d, tested = a - b, len(common) >= 2  # one shared sample: its difference, no test
                row[label] = {"samples": len(common), "mean_diff": float(d.mean()),
                              "p_ttest": None if not tested or np.allclose(d, d[0]) else float(stats.ttest_rel(a, b).pvalue),
                              "p_wilcoxon": None if not tested or np.allclose(d, 0) else float(stats.wilcoxon(a, b).pvalue),
                              "p_std": paired_std_test(a, b) if tested else None}
            rows.append(row)
    ceilings = {r["data"]: {**{k: r[k] for k in ("accuracy", "macro_f1", "train_s", "train_size", "steps")},
                            "wise_ft": WeightInterpolation.recorded_alpha(r.get("training"))}
                for r in records if r["system"] == CEILING and "accuracy" in r}
    ran = {(r["data"], r["shots"], r["system"]) for r in records if "accuracy" in r}
    skipped = {f"{r['data']}|{r['shots']}|{r['system']}": r["skipped"] for r in records
               if "skipped" in r and not r.get("unavailable") and (r["data"], r["shots"], r["system"]) not in ran}
    return {"rows": rows, "ceilings": ceilings, "skipped": skipped}


#: The default recipe's goal, per (data set, K): never more than ``floor`` points below the best of the probe,
#: SetFit and FastFit; a sample-to-sample std at most SetFit's + ``std_margin``; at most ``time_ratio`` of
#: SetFit's training time wherever SetFit trains more than ``setfit_steps`` steps. Over all cells: at least
#: SetFit + ``mean_vs_setfit`` and probe + ``mean_vs_probe`` on average.
GOAL = {"floor": 1.0, "std_margin": 1.0, "time_ratio": 0.5, "setfit_steps": 30, "mean_vs_setfit": 3.0,
        "mean_vs_probe": 5.0}
#: the systems the goal compares the default with, as the tables name them
RIVALS = {PROBE: "probe", REFERENCE: "SetFit", FASTFIT_PAPER: "FastFit"}


#: the summary's key of the default's paired difference over each rival
PAIRED = {PROBE: "vs_probe", REFERENCE: "vs_setfit", FASTFIT_PAPER: "vs_fastfit"}


def margin(systems: dict[str, dict], rival: str) -> float:
    """The default's mean accuracy minus ``rival``'s in one cell, on the training samples both ran (the
    summary's paired difference): a rival run on fewer samples (FastFit, on the CPU) is compared on its own."""
    paired = systems["default"].get(PAIRED.get(rival, ""))
    return paired["mean_diff"] if paired else systems["default"]["accuracy_mean"] - systems[rival]["accuracy_mean"]


def cell_misses(systems: dict[str, dict]) -> list[str]:
    """The parts of :data:`GOAL` the default misses in one (data set, K) cell, each with its number; the floor
    is the smallest :func:`margin` over the rivals, on the samples each shares with the default."""
    d, sf = systems["default"], systems.get(REFERENCE)
    misses = []
    gaps = {name: margin(systems, s) for s, name in RIVALS.items() if s in systems}
    if gaps:
        name, gap = min(gaps.items(), key=lambda kv: kv[1])
        if gap < -GOAL["floor"]:
            misses.append(f"floor: {gap:+.1f} vs {name}")
    if sf is not None and sf["n"] >= 2 and d["accuracy_std"] > sf["accuracy_std"] + GOAL["std_margin"]:
        p_std = d.get("vs_setfit", {}).get("p_std")
        misses.append(f"std {d['accuracy_std']:.1f} > {sf['accuracy_std']:.1f} + {GOAL['std_margin']:g}"
                      + ("" if p_std is None else f" (p={p_std:.2f})"))
    if sf is not None and (sf.get("steps") is None or sf["steps"] > GOAL["setfit_steps"]):
        ratio = d["train_s"] / sf["train_s"] if sf["train_s"] else float("inf")
        if ratio > GOAL["time_ratio"]:
            misses.append(f"time {ratio:.2f}x")
    return misses


def goal_markdown(summary: dict[str, Any], kinds: bool = True) -> str:
    """One row per (data set, K): the zero-shot floor, the probe, the SetFit library (FastFit's paper recipe
    where any cell has it) and the default recipe, the default's margins, its time against SetFit's, and
    the parts of :data:`GOAL` it misses, each by how much (:func:`cell_misses`; a full-data ceiling where
    ``--ceiling`` ran one). Then, unless ``kinds`` is false, the averages over the cells against the goal's
    means, a summary per kind of task and the mean rank of each system (:func:`kinds_markdown`)."""
    cells: dict[tuple, dict[str, dict]] = {}
    for r in summary["rows"]:
        cells.setdefault((r["data"], r["shots"]), {})[r["system"]] = r
    fastfit = any(r["system"] == FASTFIT_PAPER for r in summary["rows"])
    header = ["data", "K", "n", "zero-shot", "probe", "SetFit library", *(["FastFit"] if fastfit else []), "default",
              "vs SetFit", "vs probe", *(["vs FastFit"] if fastfit else []), "time vs SetFit", "goal"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]

    def acc(r: dict | None, n: int = 0) -> str:  # the sample count where it is not the default's n
        if r is None:
            return "–"
        more = [] if r["system"] == "zero-shot" else [f"{r['train_s']:.0f} s"]
        more += [f"n={r['n']}"] if n and r["n"] != n else []
        more += [note] if (note := capped_note(r)) else []  # SetFit trained fewer steps than its default
        return f"{r['accuracy_mean']:.1f} ± {r['accuracy_std']:.1f}" + (f" ({', '.join(more)})" if more else "")

    def diff(vs: dict | None) -> str:
        if not vs:
            return "–"
        p = "" if vs["p_ttest"] is None else " (p<0.01)" if vs["p_ttest"] < 0.005 else f" (p={vs['p_ttest']:.2f})"
        return f"{vs['mean_diff']:+.1f}{p}"

    capped = False
    for (data, shots), systems in sorted(cells.items()):
        d, sf, pr = systems.get("default"), systems.get(REFERENCE), systems.get(PROBE)
        if d is None:
            continue
        capped = capped or (sf is not None and "capped" in sf)
        misses = cell_misses(systems)
        if sf is None:
            why = summary.get("skipped", {}).get(f"{data}|{shots}|{REFERENCE}")
            sf_cell, time_cell = f"not run: {why}" if why else "–", "–"
        else:
            sf_cell, time_cell = acc(sf, d["n"]), f"{d['train_s'] / sf['train_s']:.2f}x" if sf["train_s"] else "–"
        ff = systems.get(FASTFIT_PAPER)
        paired = min(d.get("vs_setfit", {}).get("samples", 0) if sf is not None else 99,
                     d.get("vs_probe", {}).get("samples", 0) if pr is not None else 99)
        goal = "; ".join(misses) if misses else "met" if paired >= 2 else "–"  # no verdict on fewer than 2 pairs
        row = [data, shots, d["n"], acc(systems.get("zero-shot")), acc(pr, d["n"]), sf_cell,
               *([acc(ff, d["n"])] if fastfit else []), f"**{acc(d)}**", diff(d.get("vs_setfit")),
               diff(d.get("vs_probe")), *([diff(d.get("vs_fastfit"))] if fastfit else []), time_cell, goal]
        lines.append("| " + " | ".join(map(str, row)) + " |")
    for data, c in sorted(summary.get("ceilings", {}).items()):
        mixed = "no weight interpolation" if c.get("wise_ft") is None else f"--wise-ft {c['wise_ft']:g}"
        lines.append(f"\nCeiling, {data}: the default recipe on the whole training split ({c['train_size']} examples, "
                     f"{c['steps']} steps, {mixed}): {100 * c['accuracy']:.1f}% in {c['train_s']:.0f} s.")
    if capped:
        lines.append("\nCapped SetFit: where its default pair count needs more steps than `--setfit-max-steps`, "
                     "SetFit trained that many only (its `max_steps`: the pairs those steps take), and its cell says "
                     "`capped: N of M steps`; its accuracy is what N steps reach, and the time against it compares "
                     "with fewer steps than its default takes.")
    return "\n".join(lines) + "\n" + (kinds_markdown(summary) if kinds else "")


def goal_statement() -> str:
    """:data:`GOAL` in words (the sentence the documentation shows above the cells that miss it)."""
    g = GOAL
    return (f"The goal (`GOAL` in bench/fewshot.py): in every (data set, K) cell the default is at most {g['floor']:g} point below the best of the probe, "
            f"SetFit and FastFit (the floor; each compared on the training samples it shares with the default), its sample-to-sample std is at most SetFit's + {g['std_margin']:g}, "
            f"and it trains in at most {g['time_ratio']:g}x SetFit's time wherever SetFit trains more than "
            f"{g['setfit_steps']} steps; over all cells it is on average at least SetFit + {g['mean_vs_setfit']:g} "
            f"and probe + {g['mean_vs_probe']:g} points.")


def misses_markdown(summary: dict[str, Any]) -> str:
    """A list item per (data set, K) cell where the default misses part of :data:`GOAL`, each part with its
    number (:func:`cell_misses`), in the goal table's order; a line saying so where no cell misses."""
    cells: dict[tuple, dict[str, dict]] = {}
    for r in summary["rows"]:
        cells.setdefault((r["data"], r["shots"]), {})[r["system"]] = r
    lines = [f"- {data}, K = {shots}: " + "; ".join(misses)
             for (data, shots), systems in sorted(cells.items())
             if "default" in systems and (misses := cell_misses(systems))]
    return "\n".join(lines) + "\n" if lines else "No cell misses the goal.\n"


#: the built-in sets the default recipe's settings were chosen on: its schedule, weight interpolation and head
#: C on the first four, its step count (30, from 15) on all eight
CHOSE_DEFAULTS = ("mr", "imdb", "bbc-news", "medmcqa-subject", "trec", "sms-spam", "crowdflower-tweets", "mcid")
#: the built-in sets no study has used: kept out of every choice, scoring the default once, after it was chosen
HELD_OUT = ("hwu64", "20newsgroups", "disaster-tweets", "election-tweets", "yahoo-answers")
#: the one records file the held-out sets appear in: the default, scored once against the others
HELD_OUT_RECORDS = "heldout_runs.jsonl"
#: the systems scored on the held-out sets: the default and what it is compared with
HELD_OUT_SYSTEMS = ("zero-shot", PROBE, REFERENCE, "default", *FASTFIT)
#: The sets of each records file the README's table reads (``--name``), which ``--data`` defaults to: the
#: first grid's built-in sets, the other kinds of task (the default's step count was chosen on four of them),
#: and the held-out sets. ``make bench-fewshot`` runs the three.
RECORD_SETS = {"fewshot": ("mr", "imdb", "bbc-news", "boolq", "medmcqa-subject"),
               "heldout_kinds": ("trec", "sms-spam", "crowdflower-tweets", "mcid", "vitaminc"),
               "heldout": HELD_OUT}
#: The built-in sets no run of the bench has used: kept out of every choice, to score the next change of the
#: default, as the held-out sets scored this one.
RESERVE = ("banking77", "clinc150", "stackoverflow20", "drug-reviews", "health-tweets", "privacyqa", "reuters-r8")


def base_data(data: str) -> str:
    """The built-in set a record's ``data`` names: ``mr:codes`` and a CSV copy ``.gpu/mr`` are ``mr``."""
    name = data.replace("\\", "/").rsplit("/", 1)[-1]
    return name[: -len(CODES)] if name.endswith(CODES) else name


def datasets_markdown(records: dict[str, list[dict[str, Any]]]) -> str:
    """One row per built-in single-label set: its kind of task, its part in the bench (chose the default's
    settings: :data:`CHOSE_DEFAULTS`; held out: :data:`HELD_OUT`; scored only: in a record; the
    :data:`RESERVE`; else not used yet) and how many of the records (``records``: record name -> its runs) score it."""
    from contrastfit.data.builtin import BUILTIN_DATASETS

    scored: dict[str, list[str]] = {}
    for name, runs in sorted(records.items()):
        for data in sorted({base_data(r["data"]) for r in runs if isinstance(r.get("data"), str)}):
            scored.setdefault(data, []).append(name)
    lines = ["| data set | kind of task | part in the bench | committed records that score it |", "|---|---|---|---|"]
    for name in bench_sets():
        part = ("held out, scored once" if name in HELD_OUT else "chose the default's settings" if name in CHOSE_DEFAULTS
                else "scored only" if name in scored else "reserve, not used yet" if name in RESERVE else "not used yet")
        lines.append(f"| {name} | {BUILTIN_DATASETS[name].kind} | {part} | {len(scored.get(name, [])) or '–'} |")
    return "\n".join(lines) + "\n"


def data_kind(data: str) -> str:
    """The kind of task of a bench data set (its registry entry's ``kind``; ``NAME:codes`` adds "codes")."""
    from contrastfit.data.builtin import BUILTIN_DATASETS

    base = data[: -len(CODES)] if data.endswith(CODES) else data
    spec = BUILTIN_DATASETS.get(base)
    kind = spec.kind if spec is not None and spec.kind else "other"
    return f"{kind}, label codes" if data.endswith(CODES) else kind


def kinds_markdown(summary: dict[str, Any]) -> str:
    """The goal's averages over every cell the default has, one row per kind of task (mean accuracy of each
    system on the cells where the default and it both ran, the default's mean margins), and the mean rank
    of each system (1 = best) over the cells where all of them ran."""
    cells: dict[tuple, dict[str, dict]] = {}
    for r in summary["rows"]:
        cells.setdefault((r["data"], r["shots"]), {})[r["system"]] = r
    cells = {k: v for k, v in cells.items() if "default" in v}
    if not cells:
        return ""
    systems = ["default", *RIVALS]
    names = {"default": "default", **RIVALS}
    groups: dict[str, list[dict[str, dict]]] = {"all": list(cells.values())}
    for (data, _), c in sorted(cells.items()):
        groups.setdefault(data_kind(data), []).append(c)
    present = [s for s in systems if any(s in c for c in cells.values())]
    lines = ["", "| kind of task | cells | " + " | ".join(names[s] for s in present)
             + " | default - SetFit | default - probe | cells missing the goal |",
             "|" + "---|" * (len(present) + 5)]
    for kind, group in [(k, g) for k, g in groups.items() if k != "all"] + [("all", groups["all"])]:
        means = [f"{np.mean([c[s]['accuracy_mean'] for c in group if s in c]):.1f}" if any(s in c for c in group)
                 else "–" for s in present]
        margins = []
        for other in (REFERENCE, PROBE):
            d = [margin(c, other) for c in group if other in c]
            margins.append(f"{np.mean(d):+.1f} ({len(d)})" if d else "–")
        missing = sum(1 for c in group if cell_misses(c))
        label = "**all**" if kind == "all" else kind
        lines.append(f"| {label} | {len(group)} | " + " | ".join(means) + f" | {' | '.join(margins)} | {missing} |")
    full = [c for c in cells.values() if all(s in c for s in present)]
    if full and len(present) > 1:
        ranks = {s: [] for s in present}
        for c in full:
            order = sorted(present, key=lambda s: -c[s]["accuracy_mean"])
            for i, s in enumerate(order):
                ranks[s].append(i + 1)
        lines.append("\nMean rank over the " + str(len(full)) + " cells where all ran (1 = best): "
                     + ", ".join(f"{names[s]} {np.mean(ranks[s]):.2f}" for s in present) + ".")
    for other, key, name in ((REFERENCE, "mean_vs_setfit", "SetFit"), (PROBE, "mean_vs_probe", "probe")):
        d = [margin(c, other) for c in cells.values() if other in c]
        if d:
            verdict = "met" if np.mean(d) >= GOAL[key] else f"missed by {GOAL[key] - np.mean(d):.1f}"
            lines.append(f"\nOn average over {len(d)} cells the default is {np.mean(d):+.1f} against {name} "
                         f"(goal +{GOAL[key]:g}: {verdict}).")
    return "\n".join(lines) + "\n"


def markdown(summary: dict[str, Any], order: list[str]) -> str:
    def versus(vs: dict[str, Any] | None) -> str:
        if not vs:
            return ""
        p = "" if vs["p_ttest"] is None else " (p<0.01)" if vs["p_ttest"] < 0.005 else f" (p={vs['p_ttest']:.2f})"
        return f"{vs['mean_diff']:+.1f}{p}"

    lines = ["| data | K | system | n | accuracy | macro-F1 | train s | vs SetFit (p, paired t) | vs probe (p, paired t) |",
             "|---|---|---|---|---|---|---|---|---|"]
    rank = {s: i for i, s in enumerate(order)}
    for r in sorted(summary["rows"], key=lambda r: (r["data"], r["shots"], rank.get(r["system"], 99))):
        system = r["system"] + (f" ({note})" if (note := capped_note(r)) else "")
        lines.append(f"| {r['data']} | {r['shots']} | {system} | {r['n']} | {r['accuracy_mean']:.1f} ± {r['accuracy_std']:.1f} "
                     f"| {r['macro_f1_mean']:.1f} ± {r['macro_f1_std']:.1f} | {r['train_s']:.0f} "
                     f"| {versus(r.get('vs_setfit'))} | {versus(r.get('vs_probe'))} |")
    return "\n".join(lines) + "\n"


def plot(summary: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from contrastfit.atomic import atomic_open

    from matplotlib.ticker import NullFormatter

    cells = sorted({(r["data"], r["shots"]) for r in summary["rows"]})
    if not cells:
        return
    datas = list(dict.fromkeys(d for d, _ in cells))  # a row of panels per data set, a column per K
    shots = sorted({k for _, k in cells})
    fig, grid = plt.subplots(len(datas), len(shots), figsize=(4.2 * len(shots), 3.4 * len(datas) + 0.6), squeeze=False)
    axes = [grid[datas.index(d)][shots.index(k)] for d, k in cells]
    for ax in grid.flat:
        ax.set_visible(False)
    systems = list(dict.fromkeys(r["system"] for r in summary["rows"]))
    colours = {s: plt.cm.tab10(i % 10) for i, s in enumerate(systems)}
    handles = {}
    for ax, (data, k) in zip(axes, cells):
        ax.set_visible(True)
        for r in summary["rows"]:
            if (r["data"], r["shots"]) != (data, k):
                continue
            handles[r["system"]] = ax.errorbar(r["train_s"], r["accuracy_mean"], yerr=r["accuracy_std"], fmt="o",
                                               capsize=3, color=colours[r["system"]], label=r["system"])
        ax.set_xscale("log")
        ax.xaxis.set_minor_formatter(NullFormatter())
        ax.set_xlabel("training seconds (log)")
        ax.set_ylabel("test accuracy %")
        ax.set_title(f"{data}, K={k}")
        ax.grid(alpha=0.3)
    names = [s for s in systems if s in handles]
    fig.legend([handles[s] for s in names], names, loc="lower center", ncol=min(6, len(names)), fontsize=8)
    fig.tight_layout(rect=(0, 0.6 / (3.4 * len(datas) + 0.6), 1, 1))
    with atomic_open(path, "wb") as fh:
        fig.savefig(fh, dpi=110, format="png")
    plt.close(fig)


#: the systems of the accuracy figure, in its legend's order, with their names there
FIGURE_SYSTEMS = {"zero-shot": "zero-shot (label names)", PROBE: "linear probe", REFERENCE: "SetFit library",
                  FASTFIT_PAPER: "FastFit (paper recipe)", "default": "contrastfit default"}
FIGURE = "fewshot_accuracy.png"


def accuracy_figure(summaries: list[dict[str, Any]], path: Path) -> None:
    """The few-shot results across data sets: a panel per data set (in the order of ``summaries``, then of
    their rows), test accuracy (mean and std over the samples) against K for each system of
    :data:`FIGURE_SYSTEMS`; the zero-shot floor, which takes no example, as a dashed line."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from contrastfit.atomic import atomic_open

    rows: dict[str, list[dict]] = {}
    for summary in summaries:
        for r in summary["rows"]:
            if r["system"] in FIGURE_SYSTEMS:
                rows.setdefault(r["data"], []).append(r)
    datas = [d for d in rows if any(r["system"] == "default" for r in rows[d])]
    if not datas:
        raise ValueError("no record has the default recipe: nothing to draw")
    columns = min(3, len(datas))
    lines = -(-len(datas) // columns)
    fig, grid = plt.subplots(lines, columns, figsize=(4.3 * columns, 3.2 * lines + 0.7), squeeze=False)
    for ax in grid.flat[len(datas):]:
        ax.set_visible(False)
    colours = {s: plt.cm.tab10(i) for i, s in enumerate(FIGURE_SYSTEMS)}
    handles = {}
    shots_all = sorted({r["shots"] for d in datas for r in rows[d]})
    for ax, data in zip(grid.flat, datas):
        shots = sorted({r["shots"] for r in rows[data]})
        for i, system in enumerate(FIGURE_SYSTEMS):
            mine = sorted((r for r in rows[data] if r["system"] == system), key=lambda r: r["shots"])
            if not mine:
                continue
            if system == "zero-shot":
                handles[system] = ax.axhline(mine[0]["accuracy_mean"], color=colours[system], linestyle="--",
                                             linewidth=1.2, label=FIGURE_SYSTEMS[system])
                continue
            offset = 2 ** ((i - 2.5) * 0.04)  # side by side at each K, on the log axis
            handles[system] = ax.errorbar([r["shots"] * offset for r in mine], [r["accuracy_mean"] for r in mine],
                                          yerr=[r["accuracy_std"] for r in mine], fmt="o-" if len(mine) > 1 else "o",
                                          capsize=3, markersize=4, color=colours[system], label=FIGURE_SYSTEMS[system])
        ax.set_xscale("log", base=2)
        ax.set_xticks(shots_all if len(shots) > 1 else shots)
        ax.set_xticklabels([str(k) for k in (shots_all if len(shots) > 1 else shots)])
        ax.minorticks_off()
        ax.set_xlim(min(shots) / 1.5, max(shots) * 1.5)
        ax.set_xlabel("K (training examples per class)")
        ax.set_ylabel("test accuracy %")
        ax.set_title(f"{data} ({data_kind(data)})", fontsize=10)
        ax.grid(alpha=0.3)
    names = [s for s in FIGURE_SYSTEMS if s in handles]
    fig.legend([handles[s] for s in names], [FIGURE_SYSTEMS[s] for s in names], loc="lower center",
               ncol=len(names), fontsize=8, frameon=False)
    fig.tight_layout(rect=(0, 0.7 / (3.2 * lines + 0.7), 1, 1))
    with atomic_open(path, "wb") as fh:
        fig.savefig(fh, dpi=90, format="png", metadata={"Software": None})
    plt.close(fig)


#: The README's results table: these records, at this K (`python bench/fewshot.py --readme`)
README_RECORDS = tuple(RECORD_SETS)
README_SHOTS = 8
README_START, README_END = "<!-- results table: python bench/fewshot.py --readme -->", "<!-- end of results table -->"


def set_part(data: str) -> str:
    """A bench set's part in the default's choice: it ``chose`` a setting, is ``held out`` of every
    study, or ``scored`` it only."""
    base = base_data(data)
    return "held out" if base in HELD_OUT else "chose" if base in CHOSE_DEFAULTS else "scored"


def readme_markdown(summaries: list[dict[str, Any]], shots: int = README_SHOTS) -> str:
    """The README's results: a table per data set (in the records' order) of the test accuracy at ``shots``
    examples per class of the probe, the SetFit library, FastFit (its paper's recipe) and the default
    recipe, the mean over the samples (how many: the default's; a system with fewer says ``n=``), the best
    in bold (``not run`` where a system has no run, ``(capped)`` where SetFit trained fewer steps than its
    default); then a line per system with the default's mean margin over it by kind of task, on the sets
    and the samples both ran (:func:`margin`) (how many in brackets), each system's mean rank over the sets where all ran, and every set
    that misses the goal (:data:`GOAL`), by how much (lines ending in two spaces: one paragraph, a line
    each)."""
    names = {PROBE: "probe", REFERENCE: "SetFit", FASTFIT_PAPER: "FastFit", "default": "default"}
    cells: dict[str, dict[str, dict]] = {}
    for summary in summaries:
        for r in summary["rows"]:
            if r["shots"] == shots and r["system"] in names:
                cells.setdefault(r["data"], {})[r["system"]] = r
    cells = {data: systems for data, systems in cells.items() if "default" in systems}
    lines = ["| data | kind | part | samples | " + " | ".join(names.values()) + " |", "|---|---|---|--:|" + "--:|" * 4]
    for data, systems in cells.items():
        n, best = systems["default"]["n"], max(round(r["accuracy_mean"], 1) for r in systems.values())
        row = []
        for system in names:
            r = systems.get(system)
            text = "not run" if r is None else f"{r['accuracy_mean']:.1f}"
            text = f"**{text}**" if r is not None and round(r["accuracy_mean"], 1) == best else text
            notes = [f"n={r['n']}"] if r is not None and r["n"] != n else []
            notes += ["capped"] if r is not None and "capped" in r else []
            row.append(text + (f" ({', '.join(notes)})" if notes else ""))
        lines.append(f"| {data} | {data_kind(data)} | {set_part(data)} | {n} | " + " | ".join(row) + " |")
    kinds: dict[str, list[dict[str, dict]]] = {}
    for data, systems in cells.items():
        kinds.setdefault(data_kind(data), []).append(systems)
    lines.append("")
    for rival in [s for s in names if s != "default"]:  # the default's mean margin per kind, on the sets both ran
        parts = []
        for kind, group in [*sorted(kinds.items()), ("all", list(cells.values()))]:
            if d := [margin(c, rival) for c in group if rival in c]:
                parts.append(f"{'**all**' if kind == 'all' else kind} {np.mean(d):+.1f} ({len(d)})")
        lines.append(f"Default minus {names[rival]} by kind of task (sets): {', '.join(parts)}.  ")
    full = [c for c in cells.values() if all(s in c for s in names)]
    if full:
        ranks = {s: np.mean([1 + sorted(names, key=lambda t: -c[t]["accuracy_mean"]).index(s) for c in full])
                 for s in names}
        lines.append(f"Mean rank over the {len(full)} sets where all four ran (1 = best): "
                     + ", ".join(f"{name} {ranks[s]:.2f}" for s, name in names.items()) + ".  ")
    misses = [f"{data} ({'; '.join(m)})" for data, systems in cells.items() if (m := cell_misses(systems))]
    lines.append("Missing the goal: " + (", ".join(misses) if misses else "no set") + ".")
    return "\n".join(lines) + "\n"


def write_readme_table(readme: Path) -> bool:
    """Rewrite the table between the README's markers from the committed records; True if it changed."""
    text = readme.read_text(encoding="utf-8")
    if README_START not in text or README_END not in text:
        raise ValueError(f"{readme}: no {README_START!r} ... {README_END!r} markers")
    head, rest = text.split(README_START, 1)
    table = readme_markdown([summarise(read_records(RESULTS / f"{n}_runs.jsonl")) for n in README_RECORDS])
    new = head + README_START + "\n" + table + rest[rest.index(README_END):]
    if new != text:
        readme.write_text(new, encoding="utf-8")
    return new != text


# ---------------------------------------------------------------------------------------------
# Main
# ---------------------------------------------------------------------------------------------

def load_bench_data(spec: str) -> TextData:
    """A data set by name; ``NAME:codes`` is NAME with its label names replaced by ``0``, ``1``, ... (the form
    many users' files have: the same texts and labels, but nothing a label-name method can read)."""
    if not spec.endswith(CODES):
        return load_data(spec)
    data = load_data(spec[: -len(CODES)])
    if data.label_names is None:
        raise ConfigError(f"{spec}: a regression set has no label names to replace")
    return TextData(spec, data.train, data.validation, data.test, [str(i) for i in range(len(data.label_names))],
                    {**data.source, "label_names": "codes"})


def bench_sets(held_out: bool = True) -> list[str]:
    """Every built-in single-label classification set, in the registry's order (``make bench-data``
    installs the packages the added ones are read from); without the :data:`HELD_OUT` ones where
    ``held_out`` is False."""
    from contrastfit.data.builtin import BUILTIN_DATASETS

    return [name for name, spec in BUILTIN_DATASETS.items()
            if spec.task == "classification" and (held_out or name not in HELD_OUT)]


def fixed_test(data: TextData, size: int | None) -> TextData:
    test = data.test if size is None or size >= len(data.test) else sample_stratified(data.test, size, TEST_SEED)
    return TextData(data.name, data.train, data.validation, test, data.label_names, dict(data.source))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", nargs="+", default=None,
                   help="data sets (NAME:codes: NAME with its label names replaced by class numbers); default: "
                        "the sets of --name's records (" + "; ".join(f"{n}: {' '.join(d)}" for n, d in
                                                              RECORD_SETS.items())
                        + "; another name: fewshot's); the held-out sets score the default only, with --name "
                        f"{HELD_OUT_RECORDS.removesuffix('_runs.jsonl')}")
    p.add_argument("--shots", nargs="+", type=int, default=[4, 8, 16])
    p.add_argument("--samples", type=int, default=5)
    p.add_argument("--systems", nargs="+", default=["zero-shot", "linear-probe", REFERENCE, "default"])
    p.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto",
                   help="where every system trains (auto: a GPU where one is visible)")
    p.add_argument("--model", default="minilm-l6")
    p.add_argument("--max-length", type=int, default=128)
    p.add_argument("--test-size", type=int, default=1000, help="fixed stratified test subset (default 1000)")
    p.add_argument("--validation-size", type=int, default=64)
    p.add_argument("--seed", type=int, default=0, help="protocol seed of the training samples; also the training seed")
    p.add_argument("--setfit-max-steps", type=int, default=100,
                   help="cap SetFit's steps (its max_steps) where its default pair count needs more, and say so "
                        "in its record and cell; skip the setfit method there (default 100: about 2-10 minutes "
                        "a run on 2 CPU cores; raise it on a GPU)")
    p.add_argument("--ceiling", nargs="*", default=[], metavar="DATA",
                   help="data sets on which the default recipe also trains once on the whole training split "
                        "(the ceiling the goal's probe margin is read against)")
    p.add_argument("--fastfit-python", default=os.environ.get("CONTRASTFIT_FASTFIT_PYTHON"),
                   help="python of FastFit's own environment, for the fastfit systems "
                        "(default: $CONTRASTFIT_FASTFIT_PYTHON)")
    p.add_argument("--reuse", nargs="*", default=[], metavar="RUNS",
                   help="other records files (NAME_runs.jsonl) whose runs of the same recipe on the same sample stand "
                        "for a system's run (the runs file's own are always looked at): a variant that became the "
                        "default is not trained again")
    p.add_argument("--retime", action="store_true",
                   help="train again the runs whose record stands in from another system's (their seconds were "
                        "measured in that run, on whatever the machine was doing then): on an idle machine, to time "
                        "them alike; the accuracy must come out the same, and the bench says where it does not")
    p.add_argument("--name", default="fewshot", help="files: bench/results/NAME.{json,md,png} and NAME_runs.jsonl")
    p.add_argument("--figure", nargs="*", metavar="NAME", default=None,
                   help=f"train nothing: draw bench/results/{FIGURE} (few-shot accuracy against K, a panel per data "
                        "set) from the committed records NAME_runs.jsonl (default: the README table's, "
                        f"{' '.join(README_RECORDS)})")
    p.add_argument("--readme", action="store_true",
                   help="train nothing: write the README's results table again from the committed records "
                        f"({', '.join(README_RECORDS)}; K = {README_SHOTS})")
    args = p.parse_args(argv)
    if args.readme:
        readme = Path(__file__).resolve().parents[1] / "README.md"
        print(f"{readme}: {'table written again' if write_readme_table(readme) else 'table already current'}")
        return 0
    if args.figure is not None:
        names = args.figure or list(README_RECORDS)
        missing = [n for n in names if not (RESULTS / f"{n}_runs.jsonl").is_file()]
        if missing:
            p.error(f"--figure: no records bench/results/{missing[0]}_runs.jsonl")
        accuracy_figure([summarise(read_records(RESULTS / f"{n}_runs.jsonl")) for n in names], RESULTS / FIGURE)
        print(f"written to {RESULTS / FIGURE}")
        return 0

    systems = [s for spec in args.systems for s in (sorted(available_methods()) if spec == "all" else [spec])]
    runs_path = RESULTS / f"{args.name}_runs.jsonl"
    held_out = runs_path.name == HELD_OUT_RECORDS
    if args.data is None:
        args.data = list(RECORD_SETS.get(args.name, RECORD_SETS["fewshot"]))
    if used := [d for d in args.data if (base_data(d) in HELD_OUT) != held_out]:
        p.error(f"--data {used[0]}: the held-out sets ({', '.join(HELD_OUT)}) are scored in {HELD_OUT_RECORDS} "
                f"(--name {HELD_OUT_RECORDS.removesuffix('_runs.jsonl')}) only, and nothing else is")
    if held_out and (other := [s for s in systems if s not in HELD_OUT_SYSTEMS]):
        p.error(f"--systems {other[0]}: the held-out sets score the default against "
                f"{', '.join(s for s in HELD_OUT_SYSTEMS if s != 'default')} only (no variant is tried on them)")
    RESULTS.mkdir(parents=True, exist_ok=True)
    workdir = Path(os.environ.get("TMPDIR", "/tmp")) / "contrastfit-bench"
    have_setfit = _version("setfit") is not None
    import torch

    device = "cuda" if args.device != "cpu" and torch.cuda.is_available() else "cpu"
    if args.device == "cuda" and device == "cpu":
        p.error("--device cuda: no GPU is visible")
    # a SetFit library run skipped for a step cap is redone (capped now), and a setfit method run skipped for
    # a smaller --setfit-max-steps than this one
    records = redone(read_records(runs_path), args.setfit_max_steps)
    # a record skipped for want of FastFit's environment is redone once that environment is given
    done = {(r["data"], r["shots"], r["sample"], r["system"]) for r in records if not r.get("unavailable")}
    latest = {(r["data"], r["shots"], r["sample"], r["system"]): r for r in records}
    unavailable = {(r["data"], r["shots"], r["sample"], r["system"]) for r in records if r.get("unavailable")}
    reuse = [Path(f) if Path(f).is_file() else RESULTS / f for f in args.reuse]
    if missing := [str(f) for f in reuse if not f.is_file()]:
        p.error(f"--reuse: no records file {missing[0]}")
    pool = [(f.name, r) for f in [runs_path, *reuse] for r in (records if f == runs_path else read_records(f))]
    fastfit_absent = fastfit_missing(args.fastfit_python) if any(s in FASTFIT for s in systems) else None

    def write_summary() -> None:
        summary = {"config": vars(args), "versions": {**library_versions(), "setfit": _version("setfit")},
                   **summarise(read_records(runs_path))}
        write_json_atomic(RESULTS / f"{args.name}.json", summary)
        write_text_atomic(RESULTS / f"{args.name}.md", goal_markdown(summary) + "\n" + markdown(summary, systems))
        plot(summary, RESULTS / f"{args.name}.png")

    for data_name in args.data:
        data = fixed_test(load_bench_data(data_name), args.test_size)
        for run in few_shot(data, shots=args.shots, samples=args.samples, validation_size=args.validation_size, seed=args.seed):
            shots = run.params["shots"]
            for system in systems:
                key = (data_name, shots, run.sample, system)
                if key in done:
                    # a record is reused only while its system trains the same recipe (method, resolved
                    # hyper-parameters, settings): a changed default is trained again, never read back
                    changed = stale(latest[key], recipe(system, len(run.data.train), args.model, args.max_length))
                    if system == REFERENCE:  # and a SetFit library run only while it trained under the same cap
                        changed += setfit_cap_changed(latest[key], setfit_steps(run.data.train["label"]),
                                                      args.setfit_max_steps)
                    retime = args.retime and "reused" in latest[key]
                    if not changed and not retime:
                        continue
                    print(f"redo {data_name} K={shots} sample {run.sample} {system}: " + (
                        f"its record was made with another recipe ({', '.join(changed)})" if changed else
                        f"to time it (its record is the run of {latest[key]['reused']['system']} in "
                        f"{latest[key]['reused']['file']})"), flush=True)
                record = {"data": data_name, "shots": shots, "sample": run.sample, "system": system,
                          "train_hash": data_hash(run.data.train), "test_hash": data_hash(run.data.test),
                          "test_size": len(run.data.test), "seed": args.seed, "model": args.model, "device": device}
                expected = recipe(system, len(run.data.train), args.model, args.max_length)
                if not args.retime and (found := stand_in(pool, record, expected)) is not None:  # the same recipe, run as another system
                    where, same = found
                    record.update({k: v for k, v in same.items() if k not in record},
                                  reused={"file": where, "system": same["system"]})
                    print(f"{data_name} K={shots} sample {run.sample} {system}: accuracy {record['accuracy']:.3f} "
                          f"(the same recipe's run as {same['system']} in {where})", flush=True)
                    append_record(runs_path, record)
                    write_summary()
                    continue
                if system == "setfit":  # our rewrite takes the library's pair count (the library is capped instead:
                    # run_setfit_lib). Skipped, not capped: TrainConfig has no step cap, only --epochs, which would
                    # replace the pair-count rule by epochs over the examples (another schedule, not a cut one)
                    steps = setfit_steps(run.data.train["label"])
                    if steps > args.setfit_max_steps:
                        record["skipped"] = f"SetFit's default would take {steps} steps (> --setfit-max-steps {args.setfit_max_steps})"
                        record["setfit_steps"] = steps
                        append_record(runs_path, record)
                        continue
                if system in FASTFIT:
                    skip = ("FastFit takes single texts, not pairs" if run.data.has_pairs
                            else "FastFit needs class labels" if run.data.label_names is None else None)
                    if skip is None and fastfit_absent:
                        if key in unavailable:  # already noted
                            continue
                        record["unavailable"] = True
                        skip = fastfit_absent
                    if skip is not None:
                        record.update(skipped=skip, recipe=FASTFIT[system])
                        append_record(runs_path, record)
                        continue
                    record.update(run_fastfit(run.data, args.seed, args.model, workdir, args.fastfit_python,
                                              FASTFIT[system], args.device))
                elif system == CROSSFIT:
                    record.update(run_crossfit(run.data, args.seed, args.model, args.max_length, workdir, device))
                elif system == REFERENCE:
                    if not have_setfit:
                        print(f"skip {key}: setfit is not installed (pip install setfit)", file=sys.stderr)
                        continue
                    record.update(run_setfit_lib(run.data, args.seed, args.model, workdir, device,
                                                 max_steps=args.setfit_max_steps))
                else:
                    try:
                        record.update(run_contrastfit(system, run.data, args.seed, args.model, args.max_length, workdir,
                                                      device))
                    except ConfigError as exc:  # e.g. zero-shot on label names that are codes, or on pairs
                        record["skipped"] = str(exc)
                        append_record(runs_path, record)
                        continue
                if key in latest and "reused" in latest[key] and record["accuracy"] != latest[key]["accuracy"]:
                    print(f"  the same recipe's run gave another accuracy: {latest[key]['accuracy']:.4f} in "
                          f"{latest[key]['reused']['file']}", flush=True)
                capped = (f", capped: {record['setfit_max_steps']} of {record['setfit_steps']} steps"
                          if "setfit_max_steps" in record else "")
                print(f"{data_name} K={shots} sample {run.sample} {system}: accuracy {record['accuracy']:.3f} "
                      f"({record['train_s']:.0f} s{capped})", flush=True)
                append_record(runs_path, record)
                write_summary()
        ceiling = latest.get((data_name, None, 0, CEILING))
        # the ceiling is the default recipe too: redone when that changes
        changed = ceiling is not None and stale(ceiling, recipe("default", ceiling.get("train_size", 0), args.model,
                                                                args.max_length))
        if data_name in args.ceiling and (ceiling is None or changed):
            if changed:
                print(f"redo {data_name} full data, default: its record was made with another recipe "
                      f"({', '.join(changed)})", flush=True)
            (full,) = few_shot(data, samples=1, validation_size=args.validation_size, seed=args.seed)
            record = {"data": data_name, "shots": None, "sample": 0, "system": CEILING,
                      "train_hash": data_hash(full.data.train), "test_hash": data_hash(full.data.test),
                      "test_size": len(full.data.test), "train_size": len(full.data.train), "seed": args.seed,
                      "model": args.model, "device": device,
                      **run_contrastfit("default", full.data, args.seed, args.model, args.max_length, workdir, device)}
            print(f"{data_name} full data, default: accuracy {record['accuracy']:.3f} ({record['train_s']:.0f} s)",
                  flush=True)
            append_record(runs_path, record)
            write_summary()
    write_summary()
    summary = json.loads((RESULTS / f"{args.name}.json").read_text())
    print(goal_markdown(summary) + "\n" + markdown(summary, systems))
    return 0


if __name__ == "__main__":
    sys.exit(main())
