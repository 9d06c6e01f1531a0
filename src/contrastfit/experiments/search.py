"""Hyper-parameter search with Optuna (``contrastfit experiment CONFIG --search optuna``).

The grids of the papers are plain experiment configs (lists in ``methods`` are grids, and the
report picks the best point by mean validation score). For larger spaces, a ``search`` block runs
an Optuna study instead:

.. code-block:: yaml

    search:
      method: ce-scl
      space:
        temperature: {low: 0.05, high: 1.0, log: true}   # float range
        lambda: [0.1, 0.5, 0.9]                           # categorical
      trials: 20
      metric: accuracy            # validation metric to maximise (never a test metric)
      storage: null               # default: sqlite:///<output>/optuna.sqlite3; a database URL shares the study
      study: null                 # default: the experiment's name

Each trial trains the method with the sampled hyper-parameters on the first run of the protocol
(its first setting and training sample) for every seed, and its value is the mean validation
metric. Trials are stored by Optuna in its own storage (SQLite by default), so an interrupted
search continues where it stopped and several machines can share one study through a database URL.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..errors import ConfigError
from ..methods import get_method

SEARCH_KEYS = {"method", "space", "trials", "metric", "storage", "study", "direction"}


def check_search(search: Any, where: str) -> None:
    if not isinstance(search, dict):
        raise ConfigError(f"{where}: search must be a mapping")
    bad = sorted(set(search) - SEARCH_KEYS)
    if bad:
        raise ConfigError(f"{where}: search has unknown key(s) {', '.join(bad)} (allowed: {', '.join(sorted(SEARCH_KEYS))})")
    if "method" not in search or "space" not in search:
        raise ConfigError(f"{where}: search needs 'method' and 'space'")
    spec = get_method(search["method"])
    space = search["space"]
    if not isinstance(space, dict) or not space:
        raise ConfigError(f"{where}: search space must be a non-empty mapping of hyper-parameters")
    unknown = sorted(set(space) - set(spec.defaults))
    if unknown:
        raise ConfigError(f"{where}: method '{search['method']}' has no hyper-parameter {', '.join(unknown)}")
    for name, dist in space.items():
        if isinstance(dist, dict):
            if not {"low", "high"} <= set(dist) or set(dist) - {"low", "high", "log", "step"}:
                raise ConfigError(f"{where}: search space '{name}' needs low and high (optional log, step)")
        elif not isinstance(dist, list) or not dist:
            raise ConfigError(f"{where}: search space '{name}' must be a list of choices or {{low, high}}")


def _suggest(trial, name: str, dist: Any, default: Any):
    if isinstance(dist, list):
        return trial.suggest_categorical(name, dist)
    if isinstance(default, int) and not isinstance(default, bool) and isinstance(dist["low"], int) and isinstance(dist["high"], int):
        return trial.suggest_int(name, dist["low"], dist["high"], log=bool(dist.get("log", False)), step=dist.get("step", 1))
    return trial.suggest_float(name, float(dist["low"]), float(dist["high"]), log=bool(dist.get("log", False)),
                               step=dist.get("step"))


def run_search(config, progress: bool = True) -> dict[str, Any]:
    """Run the config's Optuna study; return the best hyper-parameters and value."""
    try:
        import optuna
    except ImportError:
        raise ConfigError("--search optuna needs optuna: pip install 'contrastfit[search]'") from None
    from ..data import load_data
    from ..modeling import write_json_atomic
    from ..training import TrainConfig, train
    from .plan import protocol_runs

    search = config.search
    if not search:
        raise ConfigError("the config has no 'search' block")
    out = Path(config.output)
    out.mkdir(parents=True, exist_ok=True)
    storage = search.get("storage") or f"sqlite:///{(out / 'optuna.sqlite3').resolve()}"
    metric = search.get("metric", "accuracy")
    spec = get_method(search["method"])
    data = load_data(config.data, **config.data_options)
    first = protocol_runs(config, data)[0]
    study = optuna.create_study(study_name=search.get("study") or config.name, storage=storage, load_if_exists=True,
                                direction=search.get("direction", "maximize"))
    done = len([t for t in study.trials if t.state == optuna.trial.TrialState.COMPLETE])

    def objective(trial) -> float:
        hparams = {n: _suggest(trial, n, d, spec.defaults[n]) for n, d in search["space"].items()}
        scores = []
        for seed in config.seeds:
            folder = out / "search" / f"trial{trial.number}-seed{seed}"
            result = train(TrainConfig(method=search["method"], data=config.data, output=str(folder), model=config.model,
                                       hparams=hparams, seed=seed, save_model=False, resume=True, progress=progress,
                                       evaluate_test=False, tags={"experiment": config.name, "trial": trial.number},
                                       **config.training), text_data=first.data)
            if "validation" not in result.metrics or metric not in result.metrics["validation"]:
                raise ConfigError(f"search: no validation {metric} (the data need a validation split)")
            scores.append(result.metrics["validation"][metric])
        return float(sum(scores) / len(scores))

    remaining = max(0, int(search.get("trials", 20)) - done)
    if remaining:
        study.optimize(objective, n_trials=remaining, show_progress_bar=progress)
    best = {"method": search["method"], "params": study.best_params, "value": study.best_value,
            "metric": f"validation {metric}", "trials": len(study.trials), "storage": storage,
            "setting": first.setting}
    write_json_atomic(out / "search.json", best)
    print(f"best {search['method']} on validation {metric}: {study.best_value:.4f} with {study.best_params} "
          f"({len(study.trials)} trials; storage {storage})")
    return best
