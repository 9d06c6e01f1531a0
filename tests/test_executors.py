"""Executors: the grid of a single-task experiment on a local Ray cluster of 2 workers and as a job array
on submitit's LocalExecutor gives the local runner's records (run ids, metrics) and report, also when a
worker is killed mid-grid; and an Optuna study shared by two processes through a journal file.

Ray starts slowly on 2 cores: one cluster serves the module (``ray_cluster``), and the grids are tiny
(2 methods x 3 samples on the tiny random encoder, a few steps each)."""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

from conftest import sentiment_rows, write_rows_csv
from contrastfit.errors import ConfigError
from contrastfit.experiments import load_config, run_experiment
from contrastfit.experiments.store import STORE_NAME, ResultsStore

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def grid(tmp_path_factory, tiny_encoder_dir):
    """The config of a 2-method x 3-sample grid (6 runs) and a function that loads it with overrides."""
    root = tmp_path_factory.mktemp("executors")
    train = write_rows_csv(root / "train.csv", sentiment_rows(30, seed=1))
    test = write_rows_csv(root / "test.csv", sentiment_rows(8, seed=2))
    raw = {
        "name": "tiny", "data": str(train), "model": str(tiny_encoder_dir),
        "data_options": {"label_column": "sentiment", "test_data": str(test)},
        "methods": ["ce", "ce-scl"], "protocol": {"kind": "few-shot", "shots": 4, "samples": 3},
        "seeds": [0], "validation_size": 8,
        "training": {"epochs": 1, "batch_size": 4, "learning_rate": 1e-3, "min_steps": 1},
        "analyses": [], "report": True, "output": str(root / "local"),
    }
    path = root / "config.yaml"
    path.write_text(yaml.safe_dump(raw), encoding="utf-8")

    def load(output: str, *overrides: str):
        return load_config(path, [f"output={json.dumps(str(root / output))}", *overrides])

    return SimpleNamespace(root=root, path=path, raw=raw, load=load)


@pytest.fixture(scope="module")
def local_run(grid):
    """The local runner's output folder of the grid: what every executor must reproduce."""
    run_experiment(grid.load("local"), progress=False)
    return grid.root / "local"


@pytest.fixture(scope="module")
def ray_cluster():
    """A local Ray cluster of 2 worker CPUs for the module (the executor uses a running one as it is)."""
    import ray

    _pickle_this_module_by_value()
    ray.init(num_cpus=2, include_dashboard=False, logging_level=logging.WARNING)
    yield ray
    ray.shutdown()


def _pickle_this_module_by_value() -> None:
    """Workers cannot import this test module: ship :class:`Attempts` (wrapped around a run's work) by value."""
    import cloudpickle
    import ray.cloudpickle

    for pickler in (cloudpickle, ray.cloudpickle):
        pickler.register_pickle_by_value(sys.modules[__name__])


class Attempts:
    """A run's work that logs each attempt (a line with its pid in ``log``) and, with ``kill``, kills its own
    process the first time: ``"before"`` it trains or ``"after"`` (trained, its record not yet returned)."""

    def __init__(self, work, log: Path, kill: str | None = None, error: str | None = None) -> None:
        self.work, self.log, self.kill, self.error = work, Path(log), kill, error

    def __call__(self, *args):
        with open(self.log, "a", encoding="utf-8") as fh:
            fh.write(f"{os.getpid()}\n")
        killed = Path(f"{self.log}.killed")
        first = self.kill is not None and not killed.exists()
        if first and self.kill == "before":
            killed.touch()
            os.kill(os.getpid(), signal.SIGKILL)
        if self.error is not None:
            raise ConfigError(self.error)
        record = self.work(*args)
        if first and self.kill == "after":
            killed.touch()
            os.kill(os.getpid(), signal.SIGKILL)
        return record


def _wrap_units(monkeypatch, log_folder: Path, **special) -> None:
    """Every unit's work logged by :class:`Attempts` in ``log_folder/<run_id>``; ``special``: the
    keyword arguments of Attempts for the unit at an index (``{1: {"kill": "after"}}``, as ``i1=...``)."""
    from contrastfit.experiments import runner

    log_folder.mkdir(parents=True, exist_ok=True)
    original = runner._job_units

    def units(*args, **kwargs):
        out = original(*args, **kwargs)
        for i, unit in enumerate(out):
            unit.work = Attempts(unit.work, log_folder / unit.run_id, **special.get(f"i{i}", {}))
        return out

    monkeypatch.setattr(runner, "_job_units", units)


def _attempts(log_folder: Path) -> dict[str, int]:
    return {p.name: len(p.read_text().split()) for p in log_folder.iterdir() if not p.name.endswith(".killed")}


def _rounded(value, places: int = 6):
    """Metrics to 6 decimals: a run retried in a new worker process (another thread count, so another
    order of float sums) may differ from the local runner's in the 8th decimal of a loss or an ECE."""
    if isinstance(value, float):
        return round(value, places)
    if isinstance(value, dict):
        return {k: _rounded(v, places) for k, v in value.items()}
    if isinstance(value, list):
        return [_rounded(v, places) for v in value]
    return value


def _store(out: Path) -> dict[str, dict]:
    with ResultsStore(out / STORE_NAME) as store:
        return {row["run_id"]: row for row in store.all()}


def _same_records(out: Path, reference: Path) -> None:
    """Every run of ``reference`` done once in ``out``'s store, with the same metrics and identity, its
    results.json the store's record; the report reads the same (but for the folder and the time taken)."""
    rows, ref = _store(out), _store(reference)
    assert sorted(rows) == sorted(ref) and len(rows) == 6
    assert all(row["status"] == "done" for row in rows.values())
    for run_id, row in rows.items():
        assert _rounded(row["result"]["metrics"]) == _rounded(ref[run_id]["result"]["metrics"]), run_id
        assert row["result"]["identity"] == ref[run_id]["result"]["identity"]
        assert json.loads((out / "runs" / run_id / "results.json").read_text()) == row["result"]

    def report(folder: Path) -> list[str]:
        lines = (folder / "report.md").read_text(encoding="utf-8").splitlines()
        return [line for line in lines if not line.startswith(("- **folder:**", "- **training time:**"))]

    assert report(out) == report(reference)


# -- Ray ---------------------------------------------------------------------------------------------------

def test_ray_grid_gives_the_local_runners_records_when_a_worker_is_killed(grid, local_run, ray_cluster,
                                                                          monkeypatch, capsys):
    """The worker of run 1 kills itself once it has trained (its files in a scratch folder, its record not
    yet returned): Ray starts the task again (max_retries), and the run reaches the store once."""
    logs = grid.root / "ray-attempts"
    _wrap_units(monkeypatch, logs, i1={"kill": "after"})
    run_experiment(grid.load("ray", "executor=ray", "ray={num_cpus: 1, max_retries: 2}"), progress=False)
    out = grid.root / "ray"
    _same_records(out, local_run)
    attempts = _attempts(logs)
    killed = [name for name in attempts if Path(f"{logs / name}.killed").exists()]
    assert len(killed) == 1 and attempts[killed[0]] == 2  # killed once, trained again
    assert sorted(attempts.values()) == [1, 1, 1, 1, 1, 2]
    printed = capsys.readouterr().out
    assert "ray: 6 run(s) as tasks of 1 CPU(s)" in printed and "[6/6] " in printed
    assert "6 runs (6 new, 0 done earlier)" in printed
    assert not list((out / "runs").glob("*/checkpoints"))
    capsys.readouterr()
    run_experiment(grid.load("ray", "executor=ray"), progress=False)  # nothing left to do
    assert "6 runs (0 new, 6 done earlier)" in capsys.readouterr().out


def test_a_run_that_raises_on_ray_is_recorded_failed_and_not_retried(grid, ray_cluster, monkeypatch, capsys):
    logs = grid.root / "ray-error-attempts"
    _wrap_units(monkeypatch, logs, i0={"error": "this run is broken"})
    with pytest.raises(ConfigError, match=r"^run ce-shots=4-sample0-seed0-[0-9a-f]+: this run is broken$"):
        run_experiment(grid.load("ray-error", "executor=ray", "methods=[ce]"), progress=False)
    rows = _store(grid.root / "ray-error")
    assert sorted(row["status"] for row in rows.values()) == ["done", "done", "failed"]
    assert sorted(_attempts(logs).values()) == [1, 1, 1]  # an error of the run is not retried
    assert "failed (ConfigError: this run is broken)" in capsys.readouterr().out


# -- Slurm through submitit ---------------------------------------------------------------------------------

def test_slurm_job_array_on_submitits_local_executor_gives_the_local_runners_records(grid, local_run, monkeypatch,
                                                                                     capsys):
    """Two array tasks of 3 runs; the second run of the first task kills its process before training: the
    first run's results.json is imported, the task's two unfinished runs are submitted again."""
    import submitit

    _pickle_this_module_by_value()
    # submitit waits 15 s for a result file a network file system may show late; this one is local
    monkeypatch.setattr(submitit.core.core.Job, "_results_timeout_s", 0)
    logs = grid.root / "slurm-attempts"
    _wrap_units(monkeypatch, logs, i1={"kill": "before"})
    config = grid.load("slurm", "executor=slurm", "slurm={cluster: local, chunk: 3, cpus: 1, time: 10}")
    run_experiment(config, progress=False)
    out = grid.root / "slurm"
    _same_records(out, local_run)
    attempts = _attempts(logs)
    assert sorted(attempts.values()) == [1, 1, 1, 1, 1, 2]
    printed = capsys.readouterr().out
    assert "slurm: 6 run(s) in 2 array task(s) of at most 3 on local" in printed
    assert "ended without a result (2 run(s) unfinished" in printed and "submitting them again (1/1)" in printed
    assert (out / "submitit").is_dir()


# -- configuration, the command line, a missing package ------------------------------------------------------

def test_the_executor_keys_and_options_are_declared_once(grid):
    from dataclasses import fields

    from contrastfit.cli import build_parser
    from contrastfit.experiments.executors import RayOptions, SlurmOptions, executor_overrides
    from contrastfit.experiments.schema import Ray, Slurm

    assert list(Ray.model_fields) == [f.name for f in fields(RayOptions)]
    assert list(Slurm.model_fields) == [f.name for f in fields(SlurmOptions)]
    args = build_parser().parse_args(["experiment", str(grid.path), "--executor", "ray", "--ray-address", "auto"])
    values = {name: getattr(args, name) for name in ("executor", "address", "cluster")}
    assert executor_overrides(values) == ['executor="ray"', 'ray.address="auto"']
    args = build_parser().parse_args(["experiment", str(grid.path)])
    assert executor_overrides(vars(args)) == []  # not given: the config's own keys stay
    config = grid.load("x", "executor=slurm", "slurm={cluster: local, partition: gpu, mem: 8}")
    assert (config.executor, config.slurm.cluster, config.slurm.partition, config.slurm.mem) == ("slurm", "local", "gpu", 8)
    assert grid.load("x").executor == "local" and grid.load("x").ray.max_retries == 3
    with pytest.raises(ConfigError, match=r"ray: num_gpus must be >= 0, got -1"):
        grid.load("x", "ray.num_gpus=-1")
    with pytest.raises(ConfigError, match=r"executor must be one of local, ray, slurm, got 'dask'"):
        grid.load("x", "executor=dask")
    with pytest.raises(ConfigError, match="transfer protocol trains each source model once"):
        grid.load("x", "executor=ray", "protocol={kind: transfer, shots: 4, source: {data: mr}}")


@pytest.mark.parametrize("executor, module, extra", [("ray", "ray", "ray"), ("slurm", "submitit", "slurm")])
def test_a_missing_engine_is_one_line_naming_the_pip_command(grid, monkeypatch, capsys, executor, module, extra):
    from contrastfit.cli import main

    monkeypatch.setitem(sys.modules, module, None)  # import fails as where it is not installed
    assert main(["experiment", str(grid.path), "--quiet", "--executor", executor,
                 "--output", str(grid.root / f"missing-{executor}")]) == 2
    err = capsys.readouterr().err
    assert err == f"contrastfit: error: executor {executor} needs {module}: pip install 'contrastfit[{extra}]'\n"


def test_executor_options_are_refused_where_they_do_not_apply(grid, capsys):
    from contrastfit.cli import main

    assert main(["experiment", str(ROOT / "examples" / "cs224n_multitask.yaml"), "--executor", "ray"]) == 2
    assert "is a multi-task experiment" in capsys.readouterr().err
    assert main(["experiment", str(grid.path), "--search", "optuna", "--executor", "slurm"]) == 2
    assert "on Slurm, start `--search optuna` jobs that share one search.storage" in capsys.readouterr().err


# -- Optuna: trials as Ray tasks; one study, two processes ----------------------------------------------------

def test_a_search_runs_its_trials_as_ray_tasks_each_once(grid, ray_cluster, tmp_path, capsys):
    """executor: ray with a search: the driver asks and tells the study, the trials train on Ray's workers
    (two at a time on the 2-CPU cluster), each of the budget once, each into its own folder."""
    import optuna

    from contrastfit.experiments.search import run_search

    raw = {**grid.raw, "methods": ["ce-scl"], "output": str(tmp_path / "out"), "executor": "ray",
           "search": {"method": "ce-scl", "trials": 4, "space": {"temperature": {"low": 0.05, "high": 1.0}}}}
    path = tmp_path / "search.yaml"
    path.write_text(yaml.safe_dump(raw), encoding="utf-8")
    best = run_search(load_config(path), progress=False)
    printed = capsys.readouterr().out
    assert "ray: trials as tasks of 1 CPU(s), 2 at a time on a local Ray cluster" in printed
    study = optuna.load_study(study_name="tiny", storage=f"sqlite:///{tmp_path / 'out' / 'optuna.sqlite3'}")
    done = [t for t in study.trials if t.state == optuna.trial.TrialState.COMPLETE]
    assert len(study.trials) == 4 and len(done) == 4
    assert best["trials"] == 4 and best["value"] == max(t.value for t in done)
    for t in done:  # trained on a worker, into the trial's folder, its value the run's validation accuracy
        record = json.loads((tmp_path / "out" / "search" / f"trial{t.number}-seed0" / "results.json").read_text())
        assert record["metrics"]["validation"]["accuracy"] == pytest.approx(t.value)
        assert f"trial {t.number}: {t.value:.4f}" in printed
    again = run_search(load_config(path), progress=False)  # the budget is spent: no trial more
    assert again["trials"] == 4


# -- Optuna: one study, two processes -------------------------------------------------------------------------

SEARCH_PROCESS = """
import sys, time
from pathlib import Path
from contrastfit.experiments import load_config
from contrastfit.experiments.search import run_search

config = load_config(sys.argv[1])
Path(sys.argv[2]).touch()                      # ready: imports done
while not Path(sys.argv[3]).exists():          # both start their trials together
    time.sleep(0.05)
run_search(config, progress=False)
"""


def test_two_processes_share_one_optuna_study_in_a_journal_file(grid, tmp_path):
    """No trial lost (a trial left running by a dead process is redone) or doubled (each of the study's
    budget of trials runs once, in one of the two processes)."""
    import optuna

    from contrastfit.experiments.studies import RUNNER_ATTR, open_storage

    journal = tmp_path / "shared" / "study.journal"
    raw = {**grid.raw, "methods": ["ce-scl"], "output": str(tmp_path / "out"),
           "search": {"method": "ce-scl", "trials": 6, "storage": f"journal:{journal}",
                      "space": {"temperature": {"low": 0.05, "high": 1.0}}}}
    path = tmp_path / "search.yaml"
    path.write_text(yaml.safe_dump(raw), encoding="utf-8")
    # a trial a killed process left running: its pid is gone
    storage, _, _ = open_storage(f"journal:{journal}", tmp_path / "out")
    study = optuna.create_study(study_name="tiny", storage=storage, direction="maximize")
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    stale = study.ask()
    stale.set_user_attr(RUNNER_ATTR, {"host": os.uname().nodename, "pid": dead.pid, "started": time.time()})

    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    go = tmp_path / "go"
    procs = [subprocess.Popen([sys.executable, "-c", SEARCH_PROCESS, str(path), str(tmp_path / f"ready{i}"), str(go)],
                              env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for i in range(2)]
    try:
        deadline = time.time() + 300
        while not all((tmp_path / f"ready{i}").exists() for i in range(2)):
            assert time.time() < deadline and all(p.poll() is None for p in procs), [p.communicate() for p in procs]
            time.sleep(0.1)
        go.touch()
        outputs = [p.communicate(timeout=300)[0] for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    assert all(p.returncode == 0 for p in procs), outputs
    trials = optuna.load_study(study_name="tiny", storage=open_storage(f"journal:{journal}", tmp_path)[0]).trials
    done = [t for t in trials if t.state == optuna.trial.TrialState.COMPLETE]
    assert len(done) == 6 and len({t.number for t in done}) == 6  # none lost, none doubled
    assert [t.number for t in trials if t.state == optuna.trial.TrialState.FAIL] == [stale.number]
    assert not [t for t in trials if t.state == optuna.trial.TrialState.RUNNING]
    runners = {t.user_attrs[RUNNER_ATTR]["pid"] for t in done}
    assert runners == {p.pid for p in procs}, outputs  # both processes ran trials of the one study
    for t in done:  # each trial trained once, in its own folder
        assert (tmp_path / "out" / "search" / f"trial{t.number}-seed0" / "results.json").is_file()
    assert sum(out.count("marked failed") for out in outputs) == 1
    printed = "".join(outputs)
    assert sum(printed.count(f"trial {t.number}: ") for t in done) == 6
