"""An experiment grid on 1 worker and on 2: the local runner against the Ray executor with 1 and 2 CPUs.

The grid: 12 runs (``ce`` and ``ce-scl`` x 6 few-shot samples of K = 8 per class, one seed) of the
tests' tiny random BERT (2 layers, hidden 32, built here as ``tests/conftest.py`` builds it; the model's
quality is not the point) on 240 toy sentiment rows, ``epochs: 15`` at batch 4 (a few seconds a run on
one core), no analyses, no report.
Each setting runs in a **fresh Python process** (``--one``) on a new output folder, one after another:

* ``local``: ``contrastfit experiment`` as it runs today, one runner, one PyTorch thread;
* ``local x2``: two runner processes on one output folder (the store's claims share the runs), each
  one thread, started together once both have imported PyTorch and contrastfit: the local runner's
  way to use two cores;
* ``ray 1 CPU`` / ``ray 2 CPUs``: ``executor: ray`` on a local Ray cluster started with
  ``ray.init(num_cpus=1 | 2)`` (each run's task 1 CPU: 1 or 2 runs at a time).

Per setting: ``wall_s``, the grid (``run_experiment``, from reading the data to the summary; for
``local x2`` from the start of both runners to the end of the later); for
Ray also ``startup_s``, ``ray.init`` (not in ``wall_s``); ``process_s``, the whole process with its
imports (Python, PyTorch, contrastfit; for ``local x2`` the later of the two); ``run_s``, the sum of
the runs' own setup + training + evaluation seconds (their records' ``timings``); and the
overhead per run, ``(wall_s x workers - run_s) / runs``: what a worker slot spent per run on anything
but training it (loading data and hashing it, the driver's bookkeeping, Ray's scheduling, a worker's
imports of PyTorch and contrastfit, moving the run's files back). The load average before and after is
recorded: on a shared machine the other jobs on the cores change every number.

    python bench/executors.py                       # bench/results/executors.{json,md}
    python bench/executors.py --settings local ray-2 --runs 12
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("OMP_NUM_THREADS", "1")

ROOT = Path(__file__).resolve().parents[1]
#: epochs of every run: a few seconds each on one core, so that the runs, not the imports, fill the grid
EPOCHS = 15
#: setting -> (label, workers, executor, Ray CPUs, runner processes)
SETTINGS = {"local": ("local", 1, "local", None, 1), "local-2": ("local x2", 2, "local", None, 2),
            "ray-1": ("ray 1 CPU", 1, "ray", 1, 1), "ray-2": ("ray 2 CPUs", 2, "ray", 2, 1)}


def _conftest():
    spec = importlib.util.spec_from_file_location("contrastfit_tests_conftest", ROOT / "tests" / "conftest.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def write_config(folder: Path, runs: int) -> Path:
    """The grid's config (2 methods x runs/2 samples) with its data and the tiny encoder, in ``folder``."""
    import yaml

    tests = _conftest()
    encoder = folder / "tiny-bert"
    if not encoder.exists():
        tests._make_tiny_encoder(encoder)
    train = tests.write_rows_csv(folder / "train.csv", tests.sentiment_rows(120, seed=1))
    test = tests.write_rows_csv(folder / "test.csv", tests.sentiment_rows(40, seed=2))
    raw = {"name": "executors-bench", "data": str(train), "model": str(encoder),
           "data_options": {"label_column": "sentiment", "test_data": str(test)},
           "methods": ["ce", "ce-scl"], "protocol": {"kind": "few-shot", "shots": 8, "samples": runs // 2},
           "seeds": [0], "validation_size": 16,
           "training": {"epochs": EPOCHS, "batch_size": 4, "learning_rate": 1e-3},
           "analyses": [], "report": False, "output": str(folder / "out")}
    path = folder / "config.yaml"
    path.write_text(yaml.safe_dump(raw), encoding="utf-8")
    return path


def one(setting: str, config_path: str, output: str, result: str) -> None:
    """One setting in this (fresh) process; its numbers to ``result`` (JSON)."""
    began = time.perf_counter()
    from contrastfit.experiments import load_config, run_experiment

    imported = time.perf_counter() - began
    label, workers, executor, cpus, processes = SETTINGS[setting]
    overrides = [f"output={json.dumps(output)}", f"executor={executor}"]
    startup = None
    if cpus is not None:
        import logging

        import ray

        t = time.perf_counter()
        ray.init(num_cpus=cpus, include_dashboard=False, logging_level=logging.WARNING)
        startup = time.perf_counter() - t
    config = load_config(config_path, overrides)
    if processes == 1:
        t = time.perf_counter()
        run_experiment(config, progress=False)
        wall = time.perf_counter() - t
    else:  # runner processes on one folder: their imports first, then all started together
        from contrastfit.atomic import claim_folder

        # made first: a runner that finds the other's marker half-written (its temporary file) refuses the folder
        claim_folder(output)
        go = Path(f"{result}.go")
        ready = [Path(f"{result}.ready{i}") for i in range(processes)]
        procs = [subprocess.Popen([sys.executable, __file__, "--runner", config_path, output, str(r), str(go)],
                                  stdout=subprocess.DEVNULL) for r in ready]
        while not all(r.exists() for r in ready):
            if any(p.poll() is not None for p in procs):
                raise SystemExit("a runner process ended before it was ready")
            time.sleep(0.05)
        t = time.perf_counter()
        go.touch()
        codes = [p.wait() for p in procs]
        wall = time.perf_counter() - t
        if any(codes):
            raise SystemExit(f"a runner failed: exit codes {codes}")
    if cpus is not None:
        ray.shutdown()
    from contrastfit.experiments.store import STORE_NAME, ResultsStore

    with ResultsStore(Path(output) / STORE_NAME) as store:
        records = store.done()
    run_s = sum(sum(r["timings"].get(k, 0.0) for k in ("setup_s", "train_s", "eval_s")) for r in records)
    Path(result).write_text(json.dumps({
        "setting": setting, "label": label, "workers": workers, "runs": len(records), "wall_s": wall,
        "startup_s": startup, "import_s": imported, "run_s": run_s,
        "overhead_per_run_s": (wall * workers - run_s) / len(records),
        "wall_per_run_s": wall / len(records)}), encoding="utf-8")


def runner(config_path: str, output: str, ready: str, go: str) -> None:
    """One of the ``local x2`` runner processes: imports, says it is ready, waits for the start, runs."""
    from contrastfit.experiments import load_config, run_experiment

    config = load_config(config_path, [f"output={json.dumps(output)}"])
    Path(ready).touch()
    while not Path(go).exists():
        time.sleep(0.01)
    run_experiment(config, progress=False)


def markdown(summary: dict) -> str:
    """The report of a summary (``bench/results/executors.json``): the grid, the machine, and a row per setting
    (seconds, the ratio to the local runner, Ray's start, the runs' own seconds, the overhead per run)."""
    rows = summary["rows"]
    base = next((r for r in rows if r["setting"] == "local"), rows[0])
    lines = ["# Executors: a 12-run grid on 1 and 2 workers", "",
             f"{summary['grid']}; each setting a fresh process; {summary['cores']} CPU cores, load average "
             f"{summary['load_average_before']:.1f} before and {summary['load_average_after']:.1f} after (other jobs "
             "share the cores). "
             "grid s: `run_experiment` from reading the data to the summary (local x2: from the start of both "
             "runners, their imports done, to the end of the later); Ray start: `ray.init` (not in grid s); "
             "process s: the whole process with its imports; run s: the runs' own setup + train + eval seconds, "
             "summed; overhead per run: (grid s x workers - run s) / runs.", "",
             "| setting | workers | runs | grid s | vs local | Ray start s | process s | run s | overhead per run s |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        start = f"{r['startup_s']:.1f}" if r["startup_s"] is not None else "-"
        lines.append(f"| {r['label']} | {r['workers']} | {r['runs']} | {r['wall_s']:.1f} | "
                     f"{r['wall_s'] / base['wall_s']:.2f}x | {start} | {r['process_s']:.1f} | {r['run_s']:.1f} | "
                     f"{r['overhead_per_run_s']:.2f} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--settings", nargs="+", default=list(SETTINGS), choices=list(SETTINGS))
    parser.add_argument("--runs", type=int, default=12, help="runs in the grid (even: 2 methods x runs/2 samples)")
    parser.add_argument("--output", default=str(ROOT / "bench" / "results" / "executors"))
    parser.add_argument("--one", nargs=4, metavar=("SETTING", "CONFIG", "OUTPUT", "RESULT"), help=argparse.SUPPRESS)
    parser.add_argument("--runner", nargs=4, metavar=("CONFIG", "OUTPUT", "READY", "GO"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.one:
        one(*args.one)
        return 0
    if args.runner:
        runner(*args.runner)
        return 0
    from contrastfit.atomic import write_json_atomic, write_text_atomic

    load_before = os.getloadavg()
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-executors-") as tmp:
        folder = Path(tmp)
        config = write_config(folder, args.runs)
        for setting in args.settings:
            result = folder / f"{setting}.json"
            t = time.perf_counter()
            subprocess.run([sys.executable, __file__, "--one", setting, str(config), str(folder / setting), str(result)],
                           check=True)
            row = json.loads(result.read_text(encoding="utf-8"))
            row["process_s"] = time.perf_counter() - t
            rows.append(row)
            print(f"{row['label']}: {row['wall_s']:.1f} s for {row['runs']} runs "
                  f"({row['overhead_per_run_s']:.2f} s overhead per run)", flush=True)
    load_after = os.getloadavg()
    summary = {"grid": f"{args.runs} runs: ce and ce-scl x {args.runs // 2} few-shot samples (K = 8, epochs {EPOCHS}, "
                       "batch 4) of a 2-layer hidden-32 random BERT", "cores": os.cpu_count(),
               "load_average_before": load_before[0], "load_average_after": load_after[0], "rows": rows}
    write_json_atomic(f"{args.output}.json", summary)
    text = markdown(summary)
    write_text_atomic(f"{args.output}.md", text)
    print(text, end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
