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
      storage: null               # default: sqlite:///<output>/optuna.sqlite3; journal:PATH (a file on a shared
                                  # folder) or a database URL shares the study across machines
      study: null                 # default: the experiment's name

Each trial trains the method with the sampled hyper-parameters on the first run of the protocol
(its first setting and training sample) for every seed, and its value is the mean validation
metric. Trials are stored by Optuna in its own storage (SQLite by default), so an interrupted
search continues where it stopped, and several processes, on one machine or many, share one study
through a journal file or a database URL, together running ``trials`` trials (:mod:`.studies`); with
``executor: ray`` one process runs them as Ray tasks, asking and telling the study itself.
The block's schema is :class:`contrastfit.experiments.schema.Search`; a trial's TrainConfig is
assembled by :func:`~contrastfit.experiments.config.run_config`, as the grid's runs are: the
experiment's ``training:`` settings and its run data options, so on label sets
(``data_options.multi_label``) every trial trains the method's multi-label form.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping

from ..atomic import write_json_atomic
from ..config import TrainConfig, load_config_data
from ..data.loading import VALIDATION_SPLIT
from ..errors import ConfigError, ContrastfitError
from ..evaluation.metrics import headline_names
from ..methods import get_method
from ..methods.base import resolve_hparams
from .. import training
from ..progress import progress_bars
from ..shapes import DEFAULT_METHOD, DEFAULT_REGRESSION_METHOD
from ..training import _config_with_memory_data
from .config import MethodVariant, load_experiment_data, run_config
from .executors import executor_package, ray_error, ray_session, ray_task
from .plan import protocol_runs
from .schema import RUN_FIELDS, SearchDimension
from .studies import next_trial, open_storage, run_trials

__all__ = ["SearchResult", "hyperparameter_search", "mean_validation_score", "parse_space", "run_search",
           "suggest_params", "trial_score"]


def _suggest(trial, name: str, dim: SearchDimension, default: Any):
    """Optuna's suggestion for one dimension: categorical for choices; an int range where the
    method's default and both bounds are ints; else a float range."""
    if dim.choices is not None:
        return trial.suggest_categorical(name, dim.choices)
    if isinstance(default, int) and not isinstance(default, bool) and isinstance(dim.low, int) and isinstance(dim.high, int):
        return trial.suggest_int(name, dim.low, dim.high, log=dim.log, step=int(dim.step or 1))
    return trial.suggest_float(name, float(dim.low), float(dim.high), log=dim.log, step=dim.step)


def parse_space(space: Mapping[str, Any], where: str = "space") -> dict[str, SearchDimension]:
    """A search space as a config's ``search.space`` or a Python dict gives it, ``{name: [choices]}`` or
    ``{name: {low, high[, log, step]}}``, parsed into :class:`~.schema.SearchDimension` s (the one
    parser of both); a malformed dimension is a one-line :class:`ConfigError` naming it."""
    from pydantic import ValidationError

    if not isinstance(space, Mapping) or not space:
        raise ConfigError(f"{where} must be a non-empty mapping of name -> [choices] or {{low, high}}")
    out = {}
    for name, dim in space.items():
        try:
            out[str(name)] = dim if isinstance(dim, SearchDimension) else SearchDimension.model_validate(dim)
        except ValidationError as exc:
            reason = exc.errors(include_url=False)[0]["msg"].removeprefix("Value error, ")
            raise ConfigError(f"{where}.{name}: {reason} (got {dim!r})") from None
    return out


def suggest_params(trial, space: Mapping[str, SearchDimension], default_of: Callable[[str], Any]) -> dict[str, Any]:
    """One trial's values of every dimension of ``space`` (:func:`_suggest`; ``default_of(name)``: the
    setting's default, which makes a range of ints an int range)."""
    return {name: _suggest(trial, name, dim, default_of(name)) for name, dim in space.items()}


def mean_validation_score(runs: Iterable[tuple[Any, Any]], metric: str | None) -> tuple[float, str]:
    """The objective of a trial: train each ``(TrainConfig, TextData)`` of ``runs`` (:func:`contrastfit.train`
    with ``text_data``) and return the mean of their validation ``metric`` (None: the headline metric of
    the first run's validation metrics: accuracy, Pearson's r, micro-F1 on label sets) and the metric's
    name. Never a test metric; runs without validation metrics are a one-line :class:`ConfigError`."""
    scores = []
    for config, text_data in runs:
        validation = training.train(config, text_data=text_data).metrics.get("validation")
        if validation is None:
            raise ConfigError("search: no validation metrics (the data need a validation split)")
        metric = metric or headline_names(validation)[0]
        if metric not in validation:
            raise ConfigError(f"search: no validation {metric} (this run's are {', '.join(sorted(validation))})")
        scores.append(validation[metric])
    if not scores:
        raise ConfigError("search: a trial needs at least one seed")
    return float(sum(scores) / len(scores)), str(metric)


#: Validation metrics a search minimises unless told otherwise (the selection's, and the probabilities' errors).
_LOWER_IS_BETTER = frozenset({"loss", "mse", "nll", "ece", "hamming_loss"})


def _optuna():
    try:
        import optuna
    except ImportError:
        raise ConfigError("hyper-parameter search needs optuna: pip install 'contrastfit[search]'") from None
    return optuna


def run_search(config, progress: bool = True) -> dict[str, Any]:
    """Run the config's Optuna study; return the best hyper-parameters and value."""
    try:
        import optuna
    except ImportError:
        raise ConfigError("--search optuna needs optuna: pip install 'contrastfit[search]'") from None
    search = getattr(config, "search", None)  # a multi-task config has none
    if search is None:
        raise ConfigError("the config has no 'search' block")
    if config.executor == "slurm":
        raise ConfigError("a search runs its trials in this process or, with executor: ray, as Ray tasks; on "
                          "Slurm, start `--search optuna` jobs that share one search.storage (journal:PATH)")
    out = Path(config.output)
    out.mkdir(parents=True, exist_ok=True)
    storage, where, lock = open_storage(search.storage, out)  # .studies: shared by every process on it
    metric = search.metric  # None: the first validation metrics' headline, once they are known
    spec = get_method(search.method)
    data = load_experiment_data(config)
    first = protocol_runs(config, data)[0]
    study = optuna.create_study(study_name=search.study or config.name, storage=storage, load_if_exists=True,
                                direction=search.direction)

    def objective(trial) -> float:
        nonlocal metric
        hparams = suggest_params(trial, search.space, spec.defaults.__getitem__)
        value, metric = trial_score(config, search.method, hparams, trial.number, metric, progress, first)
        return value

    if config.executor == "ray":  # the trials as Ray tasks; this process alone asks and tells the study
        metric = _run_trials_on_ray(config, study, spec, metric, lock)
    else:
        run_trials(study, objective, search.trials, lock)  # with the other processes on this storage
    best = {"method": search.method, "params": study.best_params, "value": study.best_value,
            "metric": f"validation {metric}", "trials": len(study.trials), "storage": where,
            "setting": first.setting}
    write_json_atomic(out / "search.json", best)
    print(f"best {search.method} on validation {metric}: {study.best_value:.4f} with {study.best_params} "
          f"({len(study.trials)} trials; storage {where})")
    return best


def trial_score(config, method: str, hparams: Mapping[str, Any], number: int, metric: str | None,
                progress: bool = False, first=None) -> tuple[float, str]:
    """One trial's value: ``method`` with ``hparams`` trained on the protocol's first run (``first``; read
    from the config's data when not given, as on a Ray worker) for every seed, into
    ``OUTPUT/search/trial<number>-seed<seed>``; the mean validation ``metric`` and the metric's name."""
    if first is None:
        first = protocol_runs(config, load_experiment_data(config))[0]
    out = Path(config.output)
    runs = (
        (run_config(config, MethodVariant(method, tuple(hparams.items())), data=config.data,
                    output=str(out / "search" / f"trial{number}-seed{seed}"), model=config.model,
                    seed=seed, save_model=False, resume=True, progress=progress, evaluate_test=False,
                    tags={"experiment": config.name, "trial": number}), first.data)
        for seed in config.seeds)
    return mean_validation_score(runs, metric)


def _run_trials_on_ray(config, study, spec, metric: str | None, lock) -> str | None:
    """The study's trials as Ray tasks (``executor: ray``, the config's ``ray:`` resources), as many at a
    time as the cluster's CPUs hold: this process asks each trial's values and tells its result, so the
    study's storage is written from here only; a trial whose worker died is retried by Ray
    (``max_retries``), one whose training raised is told failed and its error raised."""
    import optuna

    search, options = config.search, config.ray
    ray = executor_package("ray")
    with ray_session(ray, options):
        task = ray_task(ray, trial_score, options, "contrastfit-trial")
        slots = max(1, int(ray.cluster_resources().get("CPU", 1) // max(options.num_cpus, 1e-9)))
        print(f"ray: trials as tasks of {options.num_cpus:g} CPU(s), {slots} at a time on "
              f"{options.address or 'a local Ray cluster'}", flush=True)
        running: dict[Any, Any] = {}
        try:
            while True:
                while len(running) < slots and (trial := next_trial(study, search.trials, lock)) is not None:
                    hparams = suggest_params(trial, search.space, spec.defaults.__getitem__)
                    running[task.remote(config, search.method, hparams, trial.number, metric)] = trial
                if not running:
                    return metric
                (ready,), _ = ray.wait(list(running), num_returns=1)
                trial = running.pop(ready)
                try:
                    value, metric = ray.get(ready)
                except ray.exceptions.RayError as exc:
                    study.tell(trial, state=optuna.trial.TrialState.FAIL)
                    error = ray_error(ray, exc, options.max_retries)
                    raise ContrastfitError(f"trial {trial.number}: {error}") from None
                study.tell(trial, value)
                print(f"trial {trial.number}: {value:.4f} with {trial.params}", flush=True)
        except BaseException:
            for ref, trial in running.items():
                ray.cancel(ref, force=True)
                study.tell(trial, state=optuna.trial.TrialState.FAIL)
            raise


# -- from Python ------------------------------------------------------------------------------------

@dataclasses.dataclass
class SearchResult:
    """What :func:`hyperparameter_search` found: the best trial's ``params`` (each searched name and its
    value), its ``value`` (the mean validation ``metric`` over the seeds), ``config`` (the search's
    :class:`~contrastfit.TrainConfig` with those values in: ``train(result.config)`` trains with the
    best settings, on the same data) and the Optuna ``study`` (every trial)."""

    params: dict[str, Any]
    value: float
    metric: str
    config: Any
    study: Any


def _setting_fields() -> dict[str, Any]:
    """The TrainConfig fields a Python search space may hold besides the method's hyper-parameters:
    those an experiment's ``training:`` sets (not the data, sampling, model, seed or output)."""
    import typing

    hints = typing.get_type_hints(TrainConfig)
    return {f.name: hints[f.name] for f in dataclasses.fields(TrainConfig) if f.name not in RUN_FIELDS}


def _split_space(space: Mapping[str, SearchDimension], method: str) -> tuple[set[str], dict[str, Any]]:
    """The names of ``space`` that are ``method``'s hyper-parameters, and the training settings'
    (name -> a sample default: an int for an int field, so an int range of it is suggested as ints)."""
    import typing

    defaults = get_method(method).defaults
    settings = _setting_fields()
    hparams, fields = set(), {}
    for name, dim in space.items():
        if name in defaults:
            for value in dim.choices if dim.choices is not None else (dim.low, dim.high):
                resolve_hparams(method, {name: value})  # the method's own bounds, in one line
            hparams.add(name)
        elif name in settings:
            kinds = typing.get_args(settings[name]) or (settings[name],)
            fields[name] = 0 if int in kinds else 0.0
        else:
            raise ConfigError(f"space: {name!r} is neither a hyper-parameter of {method} "
                              f"({', '.join(sorted(defaults)) or 'none'}) nor a training setting "
                              f"(e.g. learning_rate, batch_size, epochs)")
    return hparams, fields


def hyperparameter_search(config: Any = None, *, space: Mapping[str, Any] | Callable[[Any], dict[str, Any]],
                          n_trials: int = 20, metric: str | None = None, direction: str | None = None,
                          seeds: Iterable[int] | None = None, texts: Any = None, labels: Any = None,
                          storage: str | None = None, study_name: str | None = None, sampler: Any = None,
                          **overrides: Any) -> SearchResult:
    """Search a method's hyper-parameters (and training settings) with Optuna from Python, as ``search:``
    does in an experiment config (the same space parsing, :func:`parse_space`, and objective,
    :func:`mean_validation_score`): each trial trains on the data with the trial's values and scores the
    mean validation ``metric`` over ``seeds``; returns the best trial as a :class:`SearchResult` (its
    values, score, a :class:`~contrastfit.TrainConfig` to train with, and the study).

    ``config`` and ``overrides`` are what :func:`contrastfit.train` takes (a ``TrainConfig``, or the data
    first; ``texts=`` and ``labels=``; ``method=``, ``shots=``, ``model=``, ...): the data is loaded once
    (a local or in-memory table holds 10% out for validation unless ``validation_data`` or
    ``validation_split`` says otherwise) and every trial trains in a temporary folder, no model kept, no
    test metric computed. ``method`` None: the default recipe.

    ``space``: ``{name: [choices]}`` or ``{name: {"low": ..., "high": ..., "log": bool, "step": ...}}``
    over the method's hyper-parameters (``temperature``, ``lambda``, ...) and ``TrainConfig``'s training
    settings (``learning_rate``, ``batch_size``, ``epochs``, ...); or a function ``trial -> {name: value}``
    that asks the Optuna ``trial`` itself. ``metric``: a validation metric (default: the headline one,
    accuracy; Pearson's r; micro-F1 on label sets); ``direction``: ``"maximize"`` or ``"minimize"``
    (default: minimize for ``nll``, ``ece``, ``mse``, ``hamming_loss`` and ``loss``, else maximize).
    ``seeds``: the training seeds each trial averages over (default: the config's ``seed``; with
    ``shots`` and no ``sample_seed``, each seed draws its own sample). ``storage`` / ``study_name``: an Optuna
    storage URL (e.g. ``sqlite:///search.db``) to keep the trials and continue a study (default: in
    memory); ``sampler``: an Optuna sampler (default: TPE seeded with the config's ``seed``)."""
    optuna = _optuna()
    base, memory, seeds = _search_base(config, texts, labels, overrides, n_trials, direction, seeds)
    with progress_bars(base.progress):
        text_data = load_config_data(base, memory)
    method = base.method or (DEFAULT_METHOD if text_data.label_names is not None else DEFAULT_REGRESSION_METHOD)
    ask = space if callable(space) else _space_asker(parse_space(space), method)
    metric_name = metric

    def objective(trial) -> float:
        nonlocal metric_name
        values = ask(trial)
        runs = ((dataclasses.replace(_trial_config(base, method, values, seed), output=None, save_model=False,
                                     evaluate_test=False, resume=False, keep_checkpoints=False), text_data)
                for seed in seeds)
        value, metric_name = mean_validation_score(runs, metric_name)
        trial.set_user_attr("values", dict(values))  # what the trial trained with (a space function's names)
        trial.set_user_attr("metric", f"validation {metric_name}")
        return value

    study = _run_study(optuna, objective, base, n_trials, metric, direction, storage, study_name, sampler)
    best = study.best_trial
    params = dict(best.user_attrs.get("values", best.params))
    # the data as given (in memory, or the name or file), the best values in
    best_config = dataclasses.replace(_trial_config(base, method, params, base.seed), **memory)
    return SearchResult(params=params, value=float(best.value), metric=str(best.user_attrs.get("metric", metric_name)),
                        config=best_config, study=study)


def _search_base(config: Any, texts: Any, labels: Any, overrides: dict[str, Any], n_trials: int,
                 direction: str | None, seeds: Iterable[int] | None) -> tuple[TrainConfig, dict[str, Any], list[int]]:
    """The checked arguments of :func:`hyperparameter_search`: its base TrainConfig, in-memory data and seeds."""
    if config is not None and not isinstance(config, TrainConfig):  # hyperparameter_search(df, ...): the data first
        if "data" in overrides or texts is not None or labels is not None:
            raise ConfigError("give the training data once: as the first argument, or as data= or texts= and labels=")
        config, overrides = None, {**overrides, "data": config}
    base, memory = _config_with_memory_data(config, texts, labels, overrides)
    if base.data is None:
        raise ConfigError("hyperparameter_search() needs training data: data= (a built-in name such as 'mr', a file, "
                          "a Hugging Face data set name, or in-memory data) or texts= and labels=")
    if n_trials < 1:
        raise ConfigError(f"n_trials must be at least 1, got {n_trials}")
    if direction not in (None, "maximize", "minimize"):
        raise ConfigError(f"direction must be 'maximize' or 'minimize', got {direction!r}")
    base.validate()
    seeds = [base.seed] if seeds is None else [int(s) for s in seeds]
    if not seeds:
        raise ConfigError("seeds: give at least one training seed")
    if base.validation_split is None and base.validation_data is None:  # every trial is scored on validation
        base = dataclasses.replace(base, validation_split=VALIDATION_SPLIT)
    return base, memory, seeds


def _space_asker(parsed: Mapping[str, SearchDimension], method: str) -> Callable[[Any], dict[str, Any]]:
    """A function ``trial -> {name: value}`` suggesting every dimension of a parsed space for ``method``."""
    hparam_names, setting_defaults = _split_space(parsed, method)

    def ask(trial) -> dict[str, Any]:
        return suggest_params(trial, parsed, lambda n: get_method(method).defaults[n] if n in hparam_names
                              else setting_defaults[n])

    return ask


def _trial_config(base: TrainConfig, method: str, values: Mapping[str, Any], seed: int) -> TrainConfig:
    """``base`` with ``method``, the ``values`` (hyper-parameters and training settings) and ``seed`` in."""
    defaults = get_method(method).defaults
    hparams = {**base.hparams, **{k: v for k, v in values.items() if k in defaults}}
    settings = {k: v for k, v in values.items() if k not in defaults}
    unknown = [k for k in settings if k not in _setting_fields()]
    if unknown:
        raise ConfigError(f"space: {unknown[0]!r} is neither a hyper-parameter of {method} nor a training setting")
    return dataclasses.replace(base, method=method, hparams=hparams, seed=seed, **settings)


def _run_study(optuna, objective: Callable[[Any], float], base: TrainConfig, n_trials: int, metric: str | None,
               direction: str | None, storage: str | None, study_name: str | None, sampler: Any):
    """Create (or load) the Optuna study and run ``n_trials`` of ``objective``, quiet without progress; the study."""
    verbosity = optuna.logging.get_verbosity()
    if not base.progress:
        optuna.logging.set_verbosity(optuna.logging.ERROR)  # no line for the study and each trial
    try:
        study = optuna.create_study(study_name=study_name, storage=storage, load_if_exists=storage is not None,
                                    direction=direction or ("minimize" if metric in _LOWER_IS_BETTER else "maximize"),
                                    sampler=sampler if sampler is not None
                                    else optuna.samplers.TPESampler(seed=base.seed))
        study.optimize(objective, n_trials=n_trials, show_progress_bar=base.progress)
    finally:
        optuna.logging.set_verbosity(verbosity)
    return study
