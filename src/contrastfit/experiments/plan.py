"""From a config to the list of runs: the protocol's runs, the jobs and their ids.

A protocol ``kind`` is one file of :mod:`contrastfit.experiments.protocols`: a function, called with
the options the config gave (``protocol.options()``), and the model of those options, which the
config's ``protocol:`` parsed into (``config.protocol.function`` is the function). ``transfer``
additionally takes a ``source`` block (:mod:`contrastfit.experiments.protocols.transfer`).
"""

from __future__ import annotations

import inspect
import re
from dataclasses import dataclass
from typing import Any, Callable

from ..encoders import DEFAULT_MODEL
from ..errors import ConfigError
from .config import ExperimentConfig, MethodVariant


def _options(fn: Callable) -> set[str]:
    """The options of protocol function ``fn``: its keyword arguments but ``data``."""
    return {n for n, prm in inspect.signature(fn).parameters.items() if n != "data" and prm.kind != prm.VAR_KEYWORD}


def protocol_runs(config: ExperimentConfig, data) -> list:
    """The protocol's (setting, sample) runs for ``data``: a list of ``ProtocolRun``."""
    fn = config.protocol.function
    options = config.protocol.options()
    if "validation_size" in _options(fn) and config.validation_size is not None:
        options["validation_size"] = config.validation_size
    try:
        runs = list(fn(data, **options))
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"protocol '{config.protocol_kind}': {exc}") from None
    if not runs:  # before any run: an empty grid would end only at the summary, with no finished runs
        raise ConfigError(f"protocol '{config.protocol_kind}' drew no runs from '{getattr(data, 'name', data)}' "
                          f"with {options or 'its defaults'}: nothing to train")
    return runs


@dataclass(frozen=True)
class Job:
    run_id: str
    variant: MethodVariant
    seed: int
    run: Any  # ProtocolRun
    model: str = DEFAULT_MODEL  # the encoder the run starts from
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
