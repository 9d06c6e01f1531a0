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
      metric: null                # validation metric to maximise (never a test metric); default: the
                                  # data's headline (accuracy; Pearson's r; micro-F1 on label sets)
      storage: null               # default: sqlite:///<output>/optuna.sqlite3; a database URL shares the study
      study: null                 # default: the experiment's name

Each trial trains the method with the sampled hyper-parameters on the first run of the protocol
(its first setting and training sample) for every seed, and its value is the mean validation
metric. Trials are stored by Optuna in its own storage (SQLite by default), so an interrupted
search continues where it stopped and several machines can share one study through a database URL.
The block's schema is :class:`contrastfit.experiments.schema.Search`; a trial's TrainConfig is
assembled by :func:`~contrastfit.experiments.config.run_config`, as the grid's runs are: the
experiment's ``training:`` settings and its run data options, so on label sets
(``data_options.multi_label``) every trial trains the method's multi-label form.
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
    from ..evaluation.metrics import headline_names
    from ..training import train
    from .config import MethodVariant, load_experiment_data, run_config
    from .plan import protocol_runs

    search = getattr(config, "search", None)  # a multi-task config has none
    if search is None:
        raise ConfigError("the config has no 'search' block")
    out = Path(config.output)
    out.mkdir(parents=True, exist_ok=True)
    storage = search.storage or f"sqlite:///{(out / 'optuna.sqlite3').resolve()}"
    metric = search.metric  # None: the first validation metrics' headline, once they are known
    spec = get_method(search.method)
    data = load_experiment_data(config)
    first = protocol_runs(config, data)[0]
    study = optuna.create_study(study_name=search.study or config.name, storage=storage, load_if_exists=True,
                                direction=search.direction)
    done = len([t for t in study.trials if t.state == optuna.trial.TrialState.COMPLETE])

    def objective(trial) -> float:
        nonlocal metric
        hparams = {n: _suggest(trial, n, d, spec.defaults[n]) for n, d in search.space.items()}
        scores = []
        for seed in config.seeds:
            folder = out / "search" / f"trial{trial.number}-seed{seed}"
            trial_config = run_config(config, MethodVariant(search.method, tuple(hparams.items())),
                                      data=config.data, output=str(folder), model=config.model, seed=seed,
                                      save_model=False, resume=True, progress=progress, evaluate_test=False,
                                      tags={"experiment": config.name, "trial": trial.number})
            validation = train(trial_config, text_data=first.data).metrics.get("validation")
            if validation is None:
                raise ConfigError("search: no validation metrics (the data need a validation split)")
            metric = metric or headline_names(validation)[0]
            if metric not in validation:
                raise ConfigError(f"search: no validation {metric} (this run's are {', '.join(sorted(validation))})")
            scores.append(validation[metric])
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
