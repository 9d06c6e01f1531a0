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
The block's schema is :class:`contrastfit.experiments.schema.Search`; trials train with the
experiment's ``training:`` settings, as its runs do.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..errors import ConfigError
from ..methods import get_method
from .schema import SearchDimension


def _suggest(trial, name: str, dim: SearchDimension, default: Any):
    """Optuna's suggestion for one dimension: categorical for choices; an int range where the
    method's default and both bounds are ints; else a float range."""
    if dim.choices is not None:
        return trial.suggest_categorical(name, dim.choices)
    if isinstance(default, int) and not isinstance(default, bool) and isinstance(dim.low, int) and isinstance(dim.high, int):
        return trial.suggest_int(name, dim.low, dim.high, log=dim.log, step=int(dim.step or 1))
    return trial.suggest_float(name, float(dim.low), float(dim.high), log=dim.log, step=dim.step)


def run_search(config, progress: bool = True) -> dict[str, Any]:
    """Run the config's Optuna study; return the best hyper-parameters and value."""
    try:
        import optuna
    except ImportError:
        raise ConfigError("--search optuna needs optuna: pip install 'contrastfit[search]'") from None
    from ..atomic import write_json_atomic
    from ..training import TrainConfig, train
    from .config import load_experiment_data
    from .plan import protocol_runs

    search = getattr(config, "search", None)  # a multi-task config has none
    if search is None:
        raise ConfigError("the config has no 'search' block")
    out = Path(config.output)
    out.mkdir(parents=True, exist_ok=True)
    storage = search.storage or f"sqlite:///{(out / 'optuna.sqlite3').resolve()}"
    metric = search.metric
    spec = get_method(search.method)
    data = load_experiment_data(config)
    first = protocol_runs(config, data)[0]
    study = optuna.create_study(study_name=search.study or config.name, storage=storage, load_if_exists=True,
                                direction=search.direction)
    done = len([t for t in study.trials if t.state == optuna.trial.TrialState.COMPLETE])

    def objective(trial) -> float:
        hparams = {n: _suggest(trial, n, d, spec.defaults[n]) for n, d in search.space.items()}
        scores = []
        for seed in config.seeds:
            folder = out / "search" / f"trial{trial.number}-seed{seed}"
            result = train(TrainConfig(method=search.method, data=config.data, output=str(folder), model=config.model,
                                       hparams=hparams, seed=seed, save_model=False, resume=True, progress=progress,
                                       evaluate_test=False, tags={"experiment": config.name, "trial": trial.number},
                                       **config.training.settings()), text_data=first.data)
            if "validation" not in result.metrics or metric not in result.metrics["validation"]:
                raise ConfigError(f"search: no validation {metric} (the data need a validation split)")
            scores.append(result.metrics["validation"][metric])
        return float(sum(scores) / len(scores))

    remaining = max(0, search.trials - done)
    if remaining:
        study.optimize(objective, n_trials=remaining, show_progress_bar=progress)
    best = {"method": search.method, "params": study.best_params, "value": study.best_value,
            "metric": f"validation {metric}", "trials": len(study.trials), "storage": storage,
            "setting": first.setting}
    write_json_atomic(out / "search.json", best)
    print(f"best {search.method} on validation {metric}: {study.best_value:.4f} with {study.best_params} "
          f"({len(study.trials)} trials; storage {storage})")
    return best
