"""Run an experiment: every (protocol run, method variant, training seed), each in its own folder,
every result in the SQLite results store of the output folder.

Crash safety: a run is claimed in the store before it trains and marked done (with its whole
record) after; :class:`~contrastfit.experiments.store.ResultsStore` commits each step atomically, so
a runner killed at any moment (even SIGKILL) loses at most the run in progress, and a restarted
runner skips what finished. A run that wrote its ``results.json`` but died before the store heard
of it is imported, not retrained. Several runners on one output folder share the work: a run
claimed by a live runner is left to it. A run's id ends with its identity (:mod:`.identity`): an
edited config makes new runs beside the old ones, and the summary covers the current config's runs
(``plan.json``) only. ``executor: ray`` or ``slurm`` trains the pending runs of a single-task grid on a
Ray cluster or a Slurm job array instead (:mod:`.executors`); this process still writes the store.

Per run, the runner also saves ``analysis.npz`` (test embeddings, L2-normalised and raw, labels,
predictions, texts and, for LaCon, the label embeddings) for the report's figures, and, for the first sample and seed of
the first setting, ``attributions.json``: Shapley values of the words of a few test examples (the
same examples for every method, with their gold label as the target).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
import time
from dataclasses import fields, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ..atomic import atomic_open, check_output, claim_folder, write_json_atomic, write_text_atomic
from ..data.descriptions import read_label_descriptions
from ..distributed import launched_processes
from ..errors import ConfigError, ContrastfitError
from ..evaluation.attributions import token_attributions
from ..methods import get_method
from ..methods.base import resolve_hparams
from ..modeling import CONFIG_NAME
from ..outputs import CLASSES
from ..checkpoints import CHECKPOINT_DIR
from ..pipeline import input_paths
from ..record import RESULTS_NAME, read_record
from ..trainer import with_method_defaults
from ..training import TrainConfig, train
from .config import ExperimentConfig, MethodVariant, MultiTaskExperimentConfig, load_experiment_data, run_config
from ..identity import (IDENTITY_TAG, base_run_id, changed_keys, content_hash, identity_settings, make_identity, path_digest,
                       record_identity, text_data_digest, with_identity)
from .executors import executor_package, run_units
from .multitask import variant_units
from .plan import Job, jobs, protocol_runs
from .records import ANALYSIS_FILE as ANALYSIS_NAME
from .records import ATTRIBUTIONS_FILE as ATTRIBUTIONS_NAME
from .records import EXPERIMENT_FILE, PLAN_FILE
from .report import format_summary, summarise, write_report
from .store import STORE_NAME, ResultsStore, Unit, file_lock, run_pending


def _train_config(config: ExperimentConfig, job: Job, folder: Path, progress: bool, model: str,
                  source: dict[str, Any] | None = None, identity: dict[str, Any] | None = None,
                  keep: bool = False) -> TrainConfig:
    tags = {"experiment": config.name, "variant": job.label, "setting": job.run.setting,
            "sample": job.run.sample, "params": job.run.params, "sampling": job.run.sampling,
            "run_id": job.run_id}
    if identity is not None:
        tags[IDENTITY_TAG] = identity
    if job.model_label is not None:
        tags["model"] = job.model_label
    if job.variant.training:
        tags["training_overrides"] = dict(job.variant.training)
    if source is not None:
        tags["transfer_source"] = source
    return run_config(config, job.variant, data=config.data, output=str(folder), model=model, seed=job.seed,
                      save_model=config.save_models or keep, resume=True, progress=progress, tags=tags)


def save_analysis(model, test, folder: Path, max_rows: int = 2000) -> None:
    """Test-set embeddings and predictions for the report (at most ``max_rows`` rows).

    ``embeddings_raw`` are the model's un-normalised sentence embeddings (``model.embed(...,
    normalize=False)``: what Sosnowski et al.'s Fig. 2 measures Euclidean distances to the mean
    in); ``embeddings`` are the same rows L2-normalised (t-SNE, alignment and uniformity)."""
    if test is None or len(test) == 0 or model.outputs is not CLASSES:
        return  # the embedding analyses read one class per text
    test = test.select(range(min(len(test), max_rows)))
    texts = list(test["text"])
    pairs = list(test["text_pair"]) if "text_pair" in test.column_names else None
    raw = model.embed(texts, pairs, normalize=False).astype(np.float32)
    # one forward pass: L2-normalise here as torch.nn.functional.normalize does (eps 1e-12)
    normalised = raw / np.maximum(np.linalg.norm(raw, axis=1, keepdims=True), 1e-12)
    arrays = {
        "embeddings": normalised.astype(np.float32),
        "embeddings_raw": raw,
        "labels": np.asarray(test["label"], dtype=np.int64),
        "predictions": model.predict_logits(texts, pairs).argmax(axis=1).astype(np.int64),
        "texts": np.asarray(texts, dtype=str),
    }
    anchors = model.method.anchors(model)
    if anchors is not None:  # e.g. LaCon's label embeddings, in the same space as the embeddings
        arrays["label_embeddings"] = torch.nn.functional.normalize(anchors.detach().float(), dim=-1).cpu().numpy()
    with atomic_open(folder / ANALYSIS_NAME, "wb") as fh:
        np.savez_compressed(fh, **arrays)


def pick_examples(word_counts: list[int], examples: int | list[int], max_words: int) -> list[int]:
    """Test indices to explain: the given list (those in range), or for a count N the first N
    examples of at most ``max_words`` words, topped up with the shortest longer ones."""
    if not isinstance(examples, int):
        return [i for i in examples if 0 <= i < len(word_counts)]
    order = sorted(range(len(word_counts)),
                   key=lambda i: (word_counts[i] > max_words, word_counts[i] if word_counts[i] > max_words else i))
    return sorted(order[:examples])


def save_attributions(model, test, folder: Path, options: dict[str, Any]) -> None:
    """Shapley values of the words of the chosen test examples for their gold label (``options``:
    ``examples`` -- a count (the first test examples of at most ``max_words`` words, then the
    shortest others) or a list of test indices --, ``samples``, ``baseline``; see
    :func:`~contrastfit.evaluation.attributions.token_attributions`)."""
    if test is None or len(test) == 0 or model.outputs is not CLASSES:
        return  # the target is the gold class
    seconds = test["text_pair"] if "text_pair" in test.column_names else [None] * len(test)
    words = [len(t.split()) + (len(p.split()) if p else 0) for t, p in zip(test["text"], seconds)]
    indices = pick_examples(words, options["examples"], int(options.get("max_words", 50)))
    if not indices:
        return
    items = []
    for i in indices:
        row = test[int(i)]
        a = token_attributions(model, row["text"], seconds[i], target=int(row["label"]),
                               n_samples=int(options["samples"]), baseline=str(options["baseline"]), seed=int(i))
        items.append({"index": int(i), **a.to_dict()})
    write_json_atomic(folder / ATTRIBUTIONS_NAME, {"options": dict(options), "examples": items})


SOURCES_DIR = "sources"


class TransferSources:
    """The source models of a ``transfer`` protocol (Gunel et al. Sec. 5.4), each trained once, on
    first use, in ``OUTPUT/sources/<key>/``, and shared by every target run that starts from it.

    By default the source of a method variant is trained with that variant's method,
    hyper-parameters and training settings (the experiment's ``training:`` with the variant's own on
    top): CE targets start from a CE source, CE+SCL targets from a CE+SCL source, one source per
    variant. ``source.method`` (and ``source.hparams``) overrides this: one source model, trained with
    that method and the experiment's ``training:``, for every variant. ``source.epochs`` overrides the
    epochs of either; ``source.data``, ``shots``, ``train_size`` and ``seed`` say what it trains on.

    A source folder records what it was trained with (``tags.source_spec`` of its ``results.json``);
    a folder trained with other settings (an edited config) is refused rather than silently reused.
    """

    def __init__(self, config: ExperimentConfig, out: Path, progress: bool = True):
        self.config = config
        self.source = config.protocol.source  # a protocols.transfer.TransferSource
        self.out = out
        self.progress = progress
        self._done: dict[str, dict[str, Any]] = {}

    @property
    def shared(self) -> bool:
        return self.source.method is not None

    def spec(self, variant: MethodVariant, model: str | None = None, model_label: str | None = None) -> dict[str, Any]:
        """What the source model of ``variant``'s runs on encoder ``model`` (default: the experiment's;
        ``model_label``: its name when the experiment compares several) is trained with (JSON-ready)."""
        src = self.source
        if self.shared:
            hparams = dict(src.hparams or {})
            key = MethodVariant(src.method, tuple(sorted(hparams.items()))).label
            method, own_training = src.method, {}
        else:
            key, method, hparams, own_training = variant.label, variant.method, dict(variant.hparams), dict(variant.training)
        if model_label is not None:
            key = f"{model_label}/{key}"
        training = {**self.config.training.settings(), **own_training}
        if src.epochs is not None:
            training["epochs"] = src.epochs
        spec = {"key": key, "shared": self.shared, "method": method, "hparams": hparams, "training": training,
                "data": src.data, "shots": src.shots, "train_size": src.train_size,
                "seed": src.seed, "base_model": model or self.config.model}
        return json.loads(json.dumps(spec))  # as it reads back from results.json

    def folder(self, spec: dict[str, Any]) -> Path:
        return self.out / SOURCES_DIR / re.sub(r"[^A-Za-z0-9_.=,-]+", "_",
                                               spec["key"].replace("[", "_").replace("]", "").replace("/", "_"))

    def get(self, variant: MethodVariant, model: str | None = None, model_label: str | None = None) -> dict[str, Any]:
        """The source of ``variant``'s runs on encoder ``model``, trained now if it is not yet: a dict with
        ``encoder`` (the folder the target runs load) and what the source was trained with and on."""
        spec = self.spec(variant, model, model_label)
        if spec["key"] in self._done:
            return self._done[spec["key"]]
        folder = self.folder(spec)
        with file_lock(folder.parent / (folder.name + ".lock")):
            written = folder / RESULTS_NAME
            if written.is_file():
                if read_record(written).tags.get("source_spec") != spec:
                    raise ConfigError(f"{folder} holds a transfer source trained with other settings than this "
                                      f"config's ({spec['key']}); delete it or choose another output folder")
            else:
                print(f"transfer: training the source model of {variant.label if not self.shared else 'every method'} "
                      f"({spec['key']} on {spec['data']}) in {folder}", flush=True)
            tc = TrainConfig(
                method=spec["method"], data=spec["data"], output=str(folder), model=spec["base_model"],
                hparams=dict(spec["hparams"]), shots=spec["shots"], train_size=spec["train_size"], seed=spec["seed"],
                save_model=True, resume=True, progress=self.progress,
                tags={"experiment": self.config.name, "role": "transfer source", "source_spec": spec},
                **spec["training"],
            )
            record = train(tc).record
        info = {"key": spec["key"], "shared": spec["shared"], "folder": f"{SOURCES_DIR}/{folder.name}",
                "encoder": str(folder / "encoder"), "method": record.method, "hparams": record.hparams,
                "data": spec["data"], "train_hash": record.run_data.train_hash,
                "train_size": record.run_data.train_size,
                "training": {k: getattr(record.training, k) for k in ("batch_size", "learning_rate", "epochs", "steps")},
                "base_model": spec["base_model"]}
        self._done[spec["key"]] = info
        return info


def job_identity(config: ExperimentConfig, job: Job, data: dict[str, Any], run: dict[str, Any],
                 model_sha256: str | None, source: dict[str, Any] | None = None) -> dict[str, Any]:
    """The identity (:mod:`.identity`) of ``job``'s run: its method and resolved hyper-parameters, seed,
    encoder (``model_sha256``: the hash of a local encoder folder), every training setting that shapes the
    result, the data (``data``: the loaded data's row hashes, :func:`~.identity.text_data_digest`), the run's
    own rows (``run``: the same for its protocol run) and setting, and a transfer run's source spec."""
    method, given = job.variant.method, dict(job.variant.hparams)
    # the settings left at None as the run will fill them (the method's learning rate and minimum steps):
    # a release that changes those defaults makes new runs, as one that changes a hyper-parameter's does
    # (of a multi-label run, its method's multi-label form's: the schedule it trains with)
    tc = run_config(config, job.variant, data=config.data, model=job.model, seed=job.seed)
    tc = with_method_defaults(tc, get_method(method).label_sets if tc.multi_label else None)
    fixed = {"method", "hparams", "seed", "model", "data"}
    training = identity_settings({f.name: getattr(tc, f.name) for f in fields(TrainConfig)}, fixed)
    # a file's content, not its path: an edited descriptions file makes new runs (and none: the
    # identities of runs made before the setting existed)
    descriptions = read_label_descriptions(training.pop("label_descriptions"))
    if descriptions is not None:
        training["label_descriptions"] = descriptions
    spec = {
        "kind": "experiment run", "method": method,
        "hparams": resolve_hparams(method, given), "seed": job.seed,
        "model": {"name": job.model, "sha256": model_sha256},
        "training": training,
        "data": {"name": config.data, "options": config.data_options.settings(), **data},
        "run": {"setting": job.run.setting, "sample": job.run.sample, "params": job.run.params,
                "sampling": job.run.sampling, **{k: v for k, v in run.items() if k.endswith("_hash")}},
    }
    if source is not None:
        spec["transfer_source"] = {**source, "data_sha256": path_digest(source.get("data"))}
    return make_identity(spec)


def _job_units(config: ExperimentConfig, out: Path, progress: bool) -> list[Unit]:
    """The single-task experiment's plan (:func:`~.plan.jobs`) as units of work for the store, each run's
    id ended by its identity (:func:`job_identity`)."""
    data = load_experiment_data(config)
    sources = TransferSources(config, out, progress) if config.protocol_kind == "transfer" else None
    plan = jobs(config, protocol_runs(config, data))
    kept = kept_run(config, [j.label for j in plan])
    first_setting = plan[0].run.setting if plan else None  # the closures below keep this, not the plan's data
    cache: dict[int, tuple[Any, str]] = {}
    data_digest = text_data_digest(data, cache)
    model_digests = {model: path_digest(model) for _, model in config.encoders}

    def unit(job: Job, keep: bool) -> Unit:
        source_spec = sources.spec(job.variant, job.model, job.model_label) if sources is not None else None
        identity = job_identity(config, job, data_digest, text_data_digest(job.run.data, cache),
                                model_digests[job.model], source_spec)
        job = replace(job, run_id=with_identity(job.run_id, identity["sha256"]))
        folder = out / "runs" / job.run_id

        def work(folder: Path = folder) -> dict[str, Any]:
            # `folder`: the run's own, or a scratch folder of a Ray worker (.executors.train_in_scratch)
            # a transfer source is trained on first use
            source = sources.get(job.variant, job.model, job.model_label) if sources is not None else None
            model = source["encoder"] if source is not None else job.model
            result = train(_train_config(config, job, folder, progress, model, source, identity,
                                         keep=keep), text_data=job.run.data)
            if config.analyses:
                save_analysis(result.model, job.run.data.test, folder)
            if ("attributions" in config.analyses and job.run.setting == first_setting
                    and job.run.sample == 0 and job.seed == config.seeds[0]):  # what the report draws
                save_attributions(result.model, job.run.data.test, folder, config.attributions.model_dump())
            return result.to_dict()

        return Unit(job.run_id, f"{job.label} {job.run.setting} sample={job.run.sample} seed={job.seed}", work,
                    claim={"variant": job.label, "setting": job.run.setting, "sample": job.run.sample,
                           "seed": job.seed},
                    written=folder / RESULTS_NAME, identity=identity)

    return [unit(job, i == kept) for i, job in enumerate(plan)]


#: where ``keep_model:`` puts a copy of the kept run's folder: ``OUTPUT/model``
KEPT_MODEL_DIR = "model"


def kept_run(config: ExperimentConfig, labels: list[str]) -> int | None:
    """The index, among the plan's runs (labelled ``labels``), of the run ``keep_model`` keeps: the first
    run of that variant (first setting, sample 0, first encoder, first seed); None without ``keep_model``."""
    keep = getattr(config, "keep_model", None)
    return labels.index(keep) if keep is not None and keep in labels else None


def _copy_kept_model(config: ExperimentConfig, out: Path, units: list[Unit]) -> None:
    """Copy the kept run's folder (its model, ``results.json`` and card) to ``OUTPUT/model`` (replacing an
    older copy) and print where it is and how to predict with it."""
    index = kept_run(config, [u.claim["variant"] for u in units])
    if index is None:
        return
    unit, target = units[index], out / KEPT_MODEL_DIR
    folder = unit.written.parent
    if not (folder / CONFIG_NAME).is_file():
        print(f"keep_model: {folder} holds no model ({unit.label} was trained before keep_model was set, or is not "
              f"finished): delete that folder and run the experiment again to keep it", flush=True)
        return
    if not ((target / RESULTS_NAME).is_file() and (target / RESULTS_NAME).read_bytes() == unit.written.read_bytes()):
        check_output(target, option="keep_model's copy")  # a folder of the user's own there is not replaced
        staging = Path(tempfile.mkdtemp(dir=out, prefix=f".{KEPT_MODEL_DIR}.new-"))
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(staging, 0o777 & ~umask)  # mkdtemp's folder is private; the copy is as readable as a new folder
        try:
            shutil.copytree(folder, staging, dirs_exist_ok=True, ignore=shutil.ignore_patterns(CHECKPOINT_DIR))
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise
        old = out / f".{KEPT_MODEL_DIR}.old"
        shutil.rmtree(old, ignore_errors=True)
        if target.exists():
            target.rename(old)
        staging.rename(target)
        shutil.rmtree(old, ignore_errors=True)
    print(f"model of {unit.label}: {target} (a copy of {folder}); predict with: contrastfit predict {target} "
          f"\"a fine film\"", flush=True)


def _set_store_aside(out: Path) -> None:
    """Move ``OUTPUT/results.sqlite`` (with its ``-wal`` / ``-shm`` files) to ``results.sqlite.broken-STAMP``,
    so the run that follows rebuilds the store from the runs' ``results.json`` files."""
    path = out / STORE_NAME
    if not path.exists():
        print(f"{path}: no store to set aside; it is built from the runs' {RESULTS_NAME} files", flush=True)
        return
    aside = path.with_name(f"{STORE_NAME}.broken-{time.strftime('%Y%m%d-%H%M%S')}")
    for suffix in ("", "-wal", "-shm"):
        if Path(f"{path}{suffix}").exists():
            Path(f"{path}{suffix}").replace(f"{aside}{suffix}")
    print(f"{path} moved to {aside.name}; rebuilding the store from the runs' {RESULTS_NAME} files", flush=True)


def _note_other_configs(out: Path, units: list[Unit], rows: list[dict[str, Any]]) -> int:
    """Print one line when finished runs of the store share a unit's place in the plan (variant, setting,
    sample, seed) but were made by another config, naming the identity keys that changed; returns the
    number of finished runs that are not this config's (kept, left out of the summary)."""
    mine = {u.run_id for u in units}
    others: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        if row["status"] == "done" and row["run_id"] not in mine:
            others.setdefault(base_run_id(row["run_id"]), []).append(row)
    changed: list[str] = []
    edited = legacy = 0
    for unit in units:
        for row in others.get(base_run_id(unit.run_id), []):
            tags = row["result"].get("tags") if isinstance(row["result"], dict) else None
            ident = tags.get(IDENTITY_TAG) if isinstance(tags, dict) else None
            if record_identity(row["result"]) is None or not isinstance(ident.get("spec"), dict):
                legacy += 1
                continue
            edited += 1
            changed += [k for k in changed_keys(ident["spec"], unit.identity["spec"]) if k not in changed]
    if edited or legacy:
        what = []
        if edited:
            keys = ", ".join(changed[:8]) + (f" and {len(changed) - 8} more" if len(changed) > 8 else "")
            what.append(f"{edited} finished run(s) in {out} were made with other settings (changed: {keys})")
        if legacy:
            what.append(f"{legacy} finished run(s) in {out} carry no run identity (made by an older contrastfit)")
        print("; ".join(what) + ": this config's runs are trained anew beside them, and the summary covers only "
              "this config's runs", flush=True)
    return sum(len(v) for v in others.values())


def run_experiment(config: ExperimentConfig | MultiTaskExperimentConfig, progress: bool = True,
                   rebuild_store: bool = False) -> dict[str, Any]:
    """Run (or continue) ``config``; return the summary rows. Also writes the report unless
    ``report: false``. A multi-task config's units are its (seed, variant) runs
    (:func:`contrastfit.experiments.multitask.variant_units`).

    Every run's id ends with its identity (:mod:`.identity`), so runs of an edited config are new runs
    beside the old ones; ``experiment.json`` and ``plan.json`` (this config's run ids and identities)
    name the runs the summary and the report cover. ``rebuild_store``: first move ``results.sqlite``
    aside (an unreadable one, say) and rebuild it from the runs' ``results.json`` files: this config's
    finished runs are imported, not trained again."""
    if launched_processes() > 1:
        raise ConfigError(f"experiments run in one process (one results store, one writer); launched with "
                          f"{launched_processes()} processes: run `contrastfit experiment` without torchrun, or "
                          f"launch single runs with `torchrun ... -m contrastfit train`")
    out = claim_folder(check_output(config.output, inputs=input_paths({k: v for k, v in config.raw.items() if k != "output"})))
    if rebuild_store:
        _set_store_aside(out)
    executor = getattr(config, "executor", "local")  # a multi-task config runs here
    if executor != "local":
        executor_package(executor)  # a missing package is one line before any work
    if isinstance(config, MultiTaskExperimentConfig):
        units = variant_units(config, out, progress)
    else:  # on ray and slurm, no per-step bars from the workers: one line per finished run
        units = _job_units(config, out, progress and executor == "local")
    started = time.perf_counter()
    with ResultsStore(out / STORE_NAME) as store:  # an unreadable store stops the run here, before any write
        others = _note_other_configs(out, units, store.all())
        # the plan first: a runner stopped between the two writes leaves files that load_runs refuses to pair
        write_json_atomic(out / PLAN_FILE, {"experiment_sha256": content_hash(config.raw),
                                            "runs": {u.run_id: u.identity["sha256"] for u in units}})
        write_json_atomic(out / EXPERIMENT_FILE, config.raw)
        if executor == "local":
            ran, skipped, elsewhere = run_pending(store, units)
        else:
            ran, skipped, elsewhere = run_units(config, store, units)
    summary = summarise(out)  # the report's summary: its metrics (regression ones for a regression task)
    write_json_atomic(out / "summary.json", summary)
    table = format_summary(summary)
    write_text_atomic(out / "summary.md", table + "\n")
    print()
    print(table)
    minutes = (time.perf_counter() - started) / 60
    print(f"\n{len(units)} runs ({ran} new, {skipped} done earlier"
          + (f", {len(elsewhere)} in other processes" if elsewhere else "") + f") in {minutes:.1f} min; results in {out}")
    if others:
        print(f"{others} finished run(s) of other configs stay in {STORE_NAME}, left out of the summary")
    if config.report and not elsewhere:
        try:
            paths = write_report(out)
            print(f"report: {paths['markdown']} and {paths['html']}")
        except ContrastfitError as exc:
            print(f"report not written: {exc}")
    if not isinstance(config, MultiTaskExperimentConfig):
        _copy_kept_model(config, out, units)  # the last line: where the kept model is
    return summary
