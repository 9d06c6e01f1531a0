"""Evaluation protocols of the papers: which train / validation / test rows each run sees.

One file per protocol in this package, each a function with the schema of its options, registered
together (see :mod:`.base` for how to write one); importing the package imports every module in it,
so a new file is all it takes (the config schema and the plan read the registry). Every protocol
function takes the full :class:`~contrastfit.data.TextData` and its options and returns a list of
:class:`ProtocolRun`; the runner crosses these with methods and training seeds. Nothing is trained
here. All functions are deterministic: the same arguments give the same rows (compare
:func:`contrastfit.data.data_hash` of the splits).

Seeds
    ``seed`` is the protocol's *sampling* seed, independent of the training seeds. Each random draw
    uses its own integer seed from :func:`~contrastfit.data.sampling.derive_seed`,
    ``SeedSequence([seed, stream, index])`` (first 32-bit word), with a fixed ``stream`` per purpose
    (training sample, validation subset, CV pool, label noise, text noise, class subset) and ``index``
    the sample number ``s``. So the training sample ``s`` depends on ``(seed, s)`` only: sample ``s``
    of ``N=20`` and of ``N=100`` share a seed, and the same sample ``s`` is used at every noise level
    (paired comparisons).

Protocols (``kind``: module)
    ``few-shot``: :mod:`.few_shot`; ``full``: :mod:`.full`; ``cross-validation``:
    :mod:`.cross_validation`; ``imbalance``: :mod:`.imbalance`; ``noise``: :mod:`.noise`;
    ``classes``: :mod:`.classes`; ``transfer``: :mod:`.transfer`; ``augmentation``:
    :mod:`.augmentation`.
"""

from __future__ import annotations

import importlib
import pkgutil

from .base import ProtocolOptions, ProtocolRun, Sampled, register_protocol, registered_protocols

__all__ = ["ProtocolOptions", "ProtocolRun", "Sampled", "register_protocol", "registered_protocols"]

for _module in pkgutil.iter_modules(__path__):
    if _module.name != "base":
        importlib.import_module(f"{__name__}.{_module.name}")
