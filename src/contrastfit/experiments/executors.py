"""Where an experiment's runs train: ``executor: local | ray | slurm`` (``contrastfit experiment CONFIG
--executor ...``).

* ``local`` (the default): the runner of :mod:`.runner` trains the pending runs one after the other in
  its own process (:func:`~.store.run_pending`); more runner processes on one output folder share the
  work through the store's claims.
* ``ray``: every pending run is a Ray task (``ray.remote`` with the config's ``ray: {num_cpus,
  num_gpus, max_retries}``) on the cluster at ``ray.address`` (``ray.init(address=...)``), or on a
  local cluster started for the experiment. A task trains its run in a scratch folder of its worker and
  returns the record with the run's files; the driver alone writes ``OUTPUT/runs/<id>/`` and the results
  store, so the store never sits on a file system the workers share. A task whose worker process died
  (killed, out of memory, node lost) is started again by Ray (``max_retries``); only the attempt that
  returns reaches the store, so no run is counted twice. An error the run itself raises is not retried.
* ``slurm``: the pending runs are a job array submitted through submitit (``slurm: {partition, time,
  cpus, gpus, mem, chunk}``; ``chunk`` runs per array task). Each task trains its runs straight into
  ``OUTPUT/runs/<id>/``, which must be on the file system the nodes share, and writes each run's
  ``results.json`` atomically; the driver imports every finished file into the store as
  ``--rebuild-store`` does (:func:`~.store.import_written`). The runs of a task that died without a
  result are submitted again, ``max_retries`` times; a task submitit requeues after a preemption skips
  the runs it finished. ``slurm: {cluster: local}`` runs the same path
  through submitit's ``LocalExecutor`` (each task a process on this machine; the tests use it) and
  ``cluster: debug`` through its ``DebugExecutor`` (in this process).

The settings are declared once here (:func:`contrastfit.settings.setting`): the experiment schema's
``executor``, ``ray:`` and ``slurm:`` keys (:mod:`.schema`) and ``contrastfit experiment``'s
``--executor``, ``--ray-address`` and ``--slurm-cluster`` options (:func:`executor_overrides`) are made
from them. Ray and submitit are optional (``pip install 'contrastfit[ray]'``, ``'contrastfit[slurm]'``),
imported only when their executor runs.

In both distributed executors the driver claims the pending runs in the store first (so a local runner
on the same folder leaves them alone), prints one line per finished run with an estimate of the time
left, records a run that raised as failed and goes on with the others, and raises the first error once
every run has ended.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import shutil
import tempfile
import time
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, Sequence

from ..atomic import MARKER, atomic_folder
from ..errors import ConfigError, ContrastfitError
from ..settings import setting
from .store import ResultsStore, Unit, import_written, settle

__all__ = ["EXECUTORS", "SLURM_CLUSTERS", "ExecutorChoice", "RayOptions", "SlurmOptions", "EXECUTOR_SECTIONS",
           "executor_overrides", "executor_package", "run_units"]

EXECUTORS = ("local", "ray", "slurm")
#: ``slurm.cluster``: submitit's executors (``AutoExecutor(cluster=...)``).
SLURM_CLUSTERS = ("slurm", "local", "debug")
#: The optional package of each distributed executor: (module, extra of contrastfit).
_PACKAGES = {"ray": ("ray", "ray"), "slurm": ("submitit", "slurm")}


@dataclass
class ExecutorChoice:
    """The top-level ``executor`` key."""

    executor: str = setting("local", "where the grid's runs train: local (this process; more runner processes "
                            "share a folder), ray (a Ray task per run) or slurm (a Slurm job array through "
                            "submitit)", group="executor", choices=EXECUTORS)


@dataclass
class RayOptions:
    """``ray:``: the cluster and each run's task."""

    address: str | None = setting(None, "the Ray cluster to run on (ray.init's address: auto, HOST:6379, "
                                  "ray://HOST:10001); default: RAY_ADDRESS, else a local cluster on this machine",
                                  group="ray", flag="--ray-address", metavar="ADDRESS")
    num_cpus: float = setting(1, "CPUs each run's task reserves (Ray also gives it as many PyTorch threads)", gt=0)
    num_gpus: float = setting(0, "GPUs each run's task reserves (a fraction shares one GPU)", ge=0)
    max_retries: int = setting(3, "times a run whose worker process died (killed, out of memory, node lost) is "
                               "started again; an error the run raises is not retried", ge=0)


@dataclass
class SlurmOptions:
    """``slurm:``: submitit's executor and each array task's resources."""

    cluster: str = setting("slurm", "slurm: sbatch job arrays; local: submitit's LocalExecutor, a process per task "
                           "on this machine; debug: submitit's DebugExecutor, in this process", group="slurm",
                           flag="--slurm-cluster", choices=SLURM_CLUSTERS)
    partition: str | None = setting(None, "the Slurm partition (sbatch --partition; default: the cluster's)")
    time: int = setting(60, "minutes each array task may run (sbatch --time; a task trains `chunk` runs)", ge=1)
    cpus: int = setting(1, "CPUs per array task", ge=1)
    gpus: int = setting(0, "GPUs per array task", ge=0)
    mem: float | None = setting(None, "memory per array task in GB (default: the partition's)", gt=0)
    chunk: int = setting(1, "runs per array task, trained one after the other", ge=1)
    parallelism: int | None = setting(None, "at most this many array tasks at once (default: Slurm's)", ge=1)
    max_retries: int = setting(1, "times the runs of a task that died without a result (killed, out of memory, "
                               "node lost) are submitted again; an error a run raises is not retried (a preempted "
                               "task is requeued by submitit itself)", ge=0)
    folder: str | None = setting(None, "submitit's folder (job scripts, pickles, logs), on the shared file system; "
                                 "default OUTPUT/submitit")
    parameters: dict[str, Any] | None = setting(None, "submitit's other parameters (update_parameters keywords: "
                                                "slurm_account, slurm_qos, slurm_additional_parameters, ...)")


#: Each declaration's place in the config: None for the top level, else its mapping's key.
EXECUTOR_SECTIONS: dict[str | None, type] = {None: ExecutorChoice, "ray": RayOptions, "slurm": SlurmOptions}


def executor_overrides(values: dict[str, Any]) -> list[str]:
    """The ``--set`` overrides (``KEY=VALUE``) of the executor options given on the command line:
    ``values`` holds each option's value by field name (None: not given, the config's value stays)."""
    out = []
    for section, source in EXECUTOR_SECTIONS.items():
        for f in fields(source):
            if f.metadata.get("group") and values.get(f.name) is not None:
                out.append(f"{f.name if section is None else f'{section}.{f.name}'}={json.dumps(values[f.name])}")
    return out


def executor_package(executor: str) -> Any:
    """The package the ``ray`` or ``slurm`` executor runs on, imported; a one-line ConfigError naming the
    pip command where it is not installed."""
    module, extra = _PACKAGES[executor]
    try:
        return importlib.import_module(module)
    except ImportError:
        raise ConfigError(f"executor {executor} needs {module}: pip install 'contrastfit[{extra}]'") from None


def run_units(config: Any, store: ResultsStore, units: Sequence[Unit]) -> tuple[int, int, list[str]]:
    """Run the units the store does not hold as done on ``config.executor`` (``ray`` or ``slurm``); the
    same contract as :func:`~.store.run_pending`: returns ``(ran, skipped, still running elsewhere)``."""
    package = executor_package(config.executor)
    skipped, elsewhere, pending = 0, [], []
    for unit in units:
        if settle(store, unit):
            skipped += 1
        elif store.claim(unit.run_id, unit.claim):
            pending.append(unit)
        else:
            elsewhere.append(unit.run_id)
            print(f"{unit.label}: running in another process, left to it", flush=True)
    progress = _Progress(len(units), skipped)
    if pending:
        run = _run_on_ray if config.executor == "ray" else _run_on_slurm
        try:
            run(package, config, store, pending, progress)
        except BaseException:
            for unit in pending:  # what never finished is free for the next runner at once
                row = store.get(unit.run_id)
                if row is not None and row["status"] == "running":
                    store.fail(unit.run_id, "interrupted: the driver stopped before the run ended")
            raise
    still_running = [run_id for run_id in elsewhere if (row := store.get(run_id)) is None or row["status"] != "done"]
    return progress.finished, skipped, still_running


class _Progress:
    """One line per finished run: ``[k/N] LABEL: done, about M min left`` (the estimate: the time so far
    per finished run, times the runs left; the runs run side by side, so it is the grid's throughput)."""

    def __init__(self, total: int, skipped: int) -> None:
        self.total, self.skipped, self.finished = total, skipped, 0
        self.started = time.perf_counter()
        self.errors: list[tuple[Unit, BaseException]] = []

    def done(self, unit: Unit, pending: int, what: str = "done") -> None:
        self.finished += what == "done"
        ended = self.finished + len(self.errors)
        left = ""
        if self.finished and pending:
            left = f", about {(time.perf_counter() - self.started) / ended * pending / 60:.1f} min left"
        print(f"[{self.skipped + ended}/{self.total}] {unit.label}: {what}{left}", flush=True)

    def failed(self, store: ResultsStore, unit: Unit, error: BaseException, pending: int) -> None:
        store.fail(unit.run_id, f"{type(error).__name__}: {error}")
        self.errors.append((unit, error))
        self.done(unit, pending, f"failed ({type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''})")

    def raise_first(self) -> None:
        """The first run's error, once every run has ended: a ContrastfitError as one line naming the run
        (and how many others failed), any other error as it was raised."""
        if not self.errors:
            return
        unit, error = self.errors[0]
        if not isinstance(error, ContrastfitError):
            raise error
        more = f" ({len(self.errors) - 1} other run(s) failed too; see the lines above)" if len(self.errors) > 1 else ""
        message = f"run {unit.run_id}: {error}{more}"
        try:
            renamed = type(error)(message)
        except TypeError:  # a subclass with arguments of its own
            renamed = ContrastfitError(message)
        raise renamed from error


# -- Ray -----------------------------------------------------------------------------------------------

def train_in_scratch(work: Any, run_id: str) -> tuple[Any, dict[str, bytes]]:
    """A Ray task: train a run (``work(folder)``) in a scratch folder of this worker and return its record
    with its files (``{relative path: bytes}``, the Trainer's checkpoints left out); the folder is removed."""
    # lazy: checkpoints imports transformers, this module imports without torch
    from ..checkpoints import CHECKPOINT_DIR

    scratch = Path(tempfile.mkdtemp(prefix="contrastfit-run-"))
    try:
        folder = scratch / run_id
        record = work(folder)
        files = {}
        for path in sorted(folder.rglob("*")):
            relative = path.relative_to(folder)
            if path.is_file() and relative.parts[0] not in (CHECKPOINT_DIR, MARKER):
                files[relative.as_posix()] = path.read_bytes()
        return record, files
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _install(unit: Unit, files: dict[str, bytes]) -> None:
    """Write a run's files, as a Ray task returned them, to its folder ``OUTPUT/runs/<id>/`` at once
    (:func:`contrastfit.atomic.atomic_folder`: its ``results.json`` appears with the rest)."""
    with atomic_folder(unit.written.parent) as new:
        for name, data in files.items():
            path = new / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)


def ray_error(ray: Any, error: BaseException, retries: int) -> BaseException:
    """The error a run's task ended with, as the user should read it: what the run raised (a
    ContrastfitError stays one line), or a worker that died more often than ``max_retries`` allows."""
    if isinstance(error, ray.exceptions.RayTaskError):
        cause = getattr(error, "cause", None)
        return cause if isinstance(cause, BaseException) else error
    return ContrastfitError(f"its Ray worker died {retries + 1} time(s) ({type(error).__name__}: "
                            f"{str(error).splitlines()[0] if str(error) else ''}); raise ray.max_retries or give "
                            "each run more memory (ray.num_cpus, the cluster's nodes)")


@contextlib.contextmanager
def ray_session(ray: Any, options: "RayOptions"):
    """Ray at ``options.address`` (or a local cluster) for the block; a cluster this process joined or
    started is left again at the end, one already running is used as it is."""
    started_here = not ray.is_initialized()
    if started_here:
        import logging

        ray.init(address=options.address, include_dashboard=False, logging_level=logging.WARNING)
    try:
        yield ray
    finally:
        if started_here:
            ray.shutdown()


def ray_task(ray: Any, function: Any, options: "RayOptions", name: str) -> Any:
    """``function`` as a Ray task with the config's resources; a dead worker's task is retried
    (``max_retries``), an error the function raises is not."""
    return ray.remote(function).options(num_cpus=options.num_cpus, num_gpus=options.num_gpus,
                                        max_retries=options.max_retries, retry_exceptions=False, name=name)


def _run_on_ray(ray: Any, config: Any, store: ResultsStore, pending: list[Unit], progress: _Progress) -> None:
    options = config.ray
    with ray_session(ray, options):
        task = ray_task(ray, train_in_scratch, options, "contrastfit-run")
        cpus = ray.cluster_resources().get("CPU", 0)
        where = options.address or "a local Ray cluster"
        print(f"ray: {len(pending)} run(s) as tasks of {options.num_cpus:g} CPU(s)"
              + (f" and {options.num_gpus:g} GPU(s)" if options.num_gpus else "")
              + f" on {where} ({cpus:g} CPUs)", flush=True)
        refs = {task.remote(unit.work, unit.run_id): unit for unit in pending}
        try:
            while refs:
                ready, _ = ray.wait(list(refs), num_returns=1)
                unit = refs.pop(ready[0])
                try:
                    record, files = ray.get(ready[0])
                except ray.exceptions.RayError as exc:
                    progress.failed(store, unit, ray_error(ray, exc, options.max_retries), len(refs))
                    continue
                _install(unit, files)
                store.finish(unit.run_id, record)
                progress.done(unit, len(refs))
        except BaseException:
            for ref in refs:
                ray.cancel(ref, force=True)
            raise
    progress.raise_first()


# -- Slurm (submitit) ------------------------------------------------------------------------------------

def train_runs(runs: Sequence[tuple[Any, str]]) -> None:
    """An array task: train its runs, ``(work, results.json path)`` each, one after the other (``work()``
    writes the run's folder, its ``results.json`` atomically, last). A run whose ``results.json`` is there
    already is skipped: a task Slurm requeued after a preemption starts again from the top. A run that
    raises does not stop the others; the first error is raised at the end."""
    errors = []
    for work, written in runs:
        if Path(written).is_file():
            continue
        try:
            work()
        except Exception as exc:  # noqa: BLE001 -- raised below, after the task's other runs
            errors.append(exc)
    if errors:
        raise errors[0]


def _slurm_executor(submitit: Any, config: Any, folder: Path) -> Any:
    options = config.slurm
    if options.cluster == "slurm" and shutil.which("sbatch") is None:
        raise ConfigError("executor slurm: no sbatch on this machine; start the experiment on a Slurm login node, "
                          "or try the config here with slurm.cluster local (--slurm-cluster local)")
    executor = submitit.AutoExecutor(folder=folder, cluster=options.cluster)
    parameters = {"name": f"contrastfit-{config.name}", "timeout_min": options.time, "cpus_per_task": options.cpus,
                  "gpus_per_node": options.gpus or None, "mem_gb": options.mem,
                  "slurm_partition": options.partition, "slurm_array_parallelism": options.parallelism,
                  **(options.parameters or {})}
    try:
        executor.update_parameters(**{k: v for k, v in parameters.items() if v is not None})
    except (TypeError, ValueError, NameError, AssertionError) as exc:
        raise ConfigError(f"slurm: submitit refused the parameters: {str(exc).splitlines()[0]}") from None
    return executor


def _job_error(error: BaseException) -> BaseException:
    """What a task raised, in one line (the last line of the traceback submitit kept) and where its log is."""
    lines = [line for line in str(error).splitlines() if line.strip()]
    trace_end = next((i for i, line in enumerate(lines) if line.startswith("-----") and i > 1), None)
    last = lines[trace_end - 1] if trace_end else (lines[0] if lines else type(error).__name__)
    log = next((line.strip().removeprefix("- ") for line in lines if line.strip().startswith("- ")), None)
    return ContrastfitError(f"its Slurm task failed: {last.strip()}" + (f" (log: {log})" if log else ""))


def _wait_for_files(collect: Any, group: list[Unit], seconds: float = 120.0) -> list[Unit]:
    """``collect(group)`` again until it leaves no run missing or ``seconds`` pass: a task that returned
    has written every run's results.json, which another host's view of a network file system may show a
    while later (listing the run's folder refreshes that view)."""
    deadline = time.monotonic() + seconds
    while True:
        for unit in group:
            with contextlib.suppress(OSError):
                os.listdir(unit.written.parent)
        missing = collect(group)
        if not missing or time.monotonic() > deadline:
            return missing
        time.sleep(2.0)


def _run_on_slurm(submitit: Any, config: Any, store: ResultsStore, pending: list[Unit],
                  progress: _Progress) -> None:
    options = config.slurm
    folder = Path(options.folder) if options.folder else Path(config.output).absolute() / "submitit"
    executor = _slurm_executor(submitit, config, folder)
    chunks = [pending[i:i + options.chunk] for i in range(0, len(pending), options.chunk)]
    print(f"slurm: {len(pending)} run(s) in {len(chunks)} array task(s) of at most {options.chunk} on "
          f"{options.cluster} (submitit's folder: {folder})", flush=True)

    def submit(groups: list[list[Unit]], attempt: int) -> dict[Any, tuple[list[Unit], int]]:
        jobs = executor.map_array(train_runs, [[(u.work, str(u.written)) for u in group] for group in groups])
        return {job: (group, attempt) for job, group in zip(jobs, groups)}

    active = submit(chunks, 0)
    waiting = {u.run_id for u in pending}

    def collect(group: list[Unit]) -> list[Unit]:
        """Import the group's finished runs; return those without a results.json yet."""
        missing = []
        for unit in group:
            if unit.run_id not in waiting:
                continue
            if unit.written.is_file() and import_written(store, unit, claimed=True):
                waiting.discard(unit.run_id)
                progress.done(unit, len(waiting))
            else:
                missing.append(unit)
        return missing

    try:
        while active:
            for job, (group, attempt) in list(active.items()):
                collect(group)
                if not job.done():
                    continue
                del active[job]
                missing = collect(group)
                if not missing:
                    continue
                error = job.exception()
                if error is None:  # the task trained them all: a network file system may show the files late
                    missing = _wait_for_files(collect, group)
                    if not missing:
                        continue
                if isinstance(error, submitit.core.utils.UncompletedJobError) and attempt < options.max_retries:
                    print(f"slurm: task {job.job_id} ended without a result ({len(missing)} run(s) unfinished: "
                          f"killed, out of memory or node lost?); submitting them again "
                          f"({attempt + 1}/{options.max_retries})", flush=True)
                    active.update(submit([missing], attempt + 1))
                    continue
                reason = _job_error(error) if error is not None else ContrastfitError(
                    "its Slurm task ended without writing the run's results.json")
                for unit in missing:
                    waiting.discard(unit.run_id)
                    progress.failed(store, unit, reason, len(waiting))
            if active:
                time.sleep(1.0)
    except BaseException:
        for job in active:
            try:
                job.cancel(check=False)
            except Exception:  # noqa: BLE001 -- best effort: the driver is stopping anyway
                pass
        raise
    progress.raise_first()
