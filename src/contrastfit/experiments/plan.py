"""From a config to the list of runs: protocol kinds, their options, and run ids.

A protocol ``kind`` maps to one function of :mod:`contrastfit.experiments.protocols`; the
function's keyword arguments *are* the protocol's options, so the YAML schema and the code cannot
drift apart. ``transfer`` additionally takes a ``source`` block (the source task the target runs
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


#: keys of a transfer protocol's ``source`` block
SOURCE_KEYS = {"data", "method", "shots", "train_size", "epochs", "hparams", "seed"}


def _options(fn: Callable) -> set[str]:
    return {n for n, prm in inspect.signature(fn).parameters.items() if n != "data" and prm.kind != prm.VAR_KEYWORD}


def check_protocol(protocol: dict[str, Any], where: str) -> None:
    functions = protocol_functions()
    kind = protocol.get("kind")
    if kind not in functions:
        raise ConfigError(f"{where}: unknown protocol kind '{kind}' (available: {', '.join(functions)})")
    allowed = _options(functions[kind]) - {"validation_size"} | {"kind"} | ({"source"} if kind == "transfer" else set())
    unknown = sorted(set(protocol) - allowed)
    if unknown:
        raise ConfigError(f"{where}: protocol '{kind}' has no option(s) {', '.join(unknown)} "
                          f"(it has: {', '.join(sorted(allowed - {'kind'}))})")
    if kind == "transfer":
        source = protocol.get("source")
        if not isinstance(source, dict) or "data" not in source:
            raise ConfigError(f"{where}: a transfer protocol needs a 'source' block with at least 'data'")
        bad = sorted(set(source) - SOURCE_KEYS)
        if bad:
            raise ConfigError(f"{where}: protocol source has unknown key(s) {', '.join(bad)} (allowed: {', '.join(sorted(SOURCE_KEYS))})")
        if source.get("method") is None:
            if source.get("hparams"):
                raise ConfigError(f"{where}: protocol source.hparams needs source.method (without it, each method "
                                  "variant's source is trained with that variant's own hyper-parameters)")
        else:
            from ..methods import get_method

            spec = get_method(source["method"])
            hp = source.get("hparams") or {}
            if not isinstance(hp, dict):
                raise ConfigError(f"{where}: protocol source.hparams must be a mapping, got {hp!r}")
            unknown = sorted(set(hp) - set(spec.defaults))
            if unknown:
                raise ConfigError(f"{where}: source method '{source['method']}' has no hyper-parameter "
                                  f"{', '.join(unknown)} (it has: {', '.join(spec.defaults) or 'none'})")


def protocol_runs(config: ExperimentConfig, data) -> list:
    """The protocol's (setting, sample) runs for ``data``: a list of ``ProtocolRun``."""
    fn = protocol_functions()[config.protocol_kind]
    options = {k: v for k, v in config.protocol.items() if k not in ("kind", "source")}
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
