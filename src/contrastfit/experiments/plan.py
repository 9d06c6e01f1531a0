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
    model: str = "minilm-l6"  # the encoder the run starts from
    model_label: str | None = None  # its name in the tables when the experiment compares several (``models:``)

    @property
    def label(self) -> str:
        """The run's variant as the tables name it: ``VARIANT``, or ``MODEL/VARIANT`` with several models."""
        return self.variant.label if self.model_label is None else f"{self.model_label}/{self.variant.label}"


def run_id(variant: MethodVariant | str, setting: str, sample: int, seed: int) -> str:
    label = variant if isinstance(variant, str) else variant.label
    raw = f"{label}-{setting}-sample{sample}-seed{seed}"
    return re.sub(r"[^A-Za-z0-9_.=,-]+", "_", raw.replace("[", "_").replace("]", "").replace("/", "_"))


def jobs(config: ExperimentConfig, runs: list) -> list[Job]:
    """Every (protocol run, encoder, method variant, training seed), settings outermost, then encoders
    (``models:``), so that the runs of one encoder follow one another."""
    out = []
    for r in runs:
        for label, model in config.encoders:
            for v in config.methods:
                for seed in config.seeds:
                    name = v.label if label is None else f"{label}/{v.label}"
                    out.append(Job(run_id(name, r.setting, r.sample, seed), v, seed, r, model, label))
    ids = [j.run_id for j in out]
    if len(set(ids)) != len(ids):
        raise ConfigError("two runs of this config have the same id (a method listed twice?)")
    return out
