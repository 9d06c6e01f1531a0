"""From a config to the list of runs: protocol kinds, their options, and run ids.

A protocol ``kind`` maps to one function of :mod:`contrastfit.experiments.protocols`, called with
the options the config gave (``protocol.options()``: the protocol's model in
:mod:`contrastfit.experiments.schema` declares the function's keyword arguments, and a test keeps
the two in step). ``transfer`` additionally takes a ``source`` block (the source task the target runs
start from, see :class:`contrastfit.experiments.runner.TransferSources`): by default each method
variant gets its own source model, trained with that variant's method, hyper-parameters and
training settings (Gunel et al. Sec. 5.4: CE -> CE, CE+SCL -> CE+SCL); ``source.method`` (with
optional ``source.hparams``) instead trains one source model that every variant starts from.
"""

from __future__ import annotations

import inspect
import re
from dataclasses import dataclass
from typing import Any, Callable

from ..errors import ConfigError
from .config import ExperimentConfig, MethodVariant


def _full(data, seed: int = 0, validation_size: int | None = None):
    """The whole training split (no sampling)."""
    from .protocols import few_shot

    return few_shot(data, shots=None, train_size=None, samples=1, validation_size=validation_size, seed=seed)


def protocol_functions() -> dict[str, Callable]:
    from . import protocols as p

    return {
        "full": _full,
        "few-shot": p.few_shot,
        "cross-validation": p.cross_validation,
        "imbalance": p.imbalance,
        "noise": p.noise,
        "classes": p.class_sweep,
        "transfer": p.transfer_target,
        "augmentation": p.augmentation,
    }


def _options(fn: Callable) -> set[str]:
    """The options of protocol function ``fn``: its keyword arguments but ``data``."""
    return {n for n, prm in inspect.signature(fn).parameters.items() if n != "data" and prm.kind != prm.VAR_KEYWORD}


def protocol_runs(config: ExperimentConfig, data) -> list:
    """The protocol's (setting, sample) runs for ``data``: a list of ``ProtocolRun``."""
    fn = protocol_functions()[config.protocol_kind]
    options = config.protocol.options()
    if "validation_size" in _options(fn) and config.validation_size is not None:
        options["validation_size"] = config.validation_size
    try:
        return list(fn(data, **options))
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"protocol '{config.protocol_kind}': {exc}") from None


@dataclass(frozen=True)
class Job:
    run_id: str
    variant: MethodVariant
    seed: int
    run: Any  # ProtocolRun


def run_id(variant: MethodVariant, setting: str, sample: int, seed: int) -> str:
    raw = f"{variant.label}-{setting}-sample{sample}-seed{seed}"
    return re.sub(r"[^A-Za-z0-9_.=,-]+", "_", raw.replace("[", "_").replace("]", ""))


def jobs(config: ExperimentConfig, runs: list) -> list[Job]:
    """Every (protocol run, method variant, training seed), settings outermost."""
    out = [Job(run_id(v, r.setting, r.sample, seed), v, seed, r) for r in runs for v in config.methods for seed in config.seeds]
    ids = [j.run_id for j in out]
    if len(set(ids)) != len(ids):
        raise ConfigError("two runs of this config have the same id (a method listed twice?)")
    return out
