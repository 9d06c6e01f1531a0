"""Progress bars of the libraries contrastfit calls, switched off for a block.

:func:`progress_bars` is what ``progress=False`` does everywhere: :func:`contrastfit.train`, and the
save, load and upload of a model (:meth:`~contrastfit.modeling.ContrastiveClassifier.save_pretrained`,
``from_pretrained``, ``push_to_hub``), which take the flag as an argument. It sits below them all
(it imports only the libraries), so the model classes use it without importing the training layer.
"""

from __future__ import annotations

import contextlib
from typing import Iterator

__all__ = ["progress_bars"]


@contextlib.contextmanager
def progress_bars(enabled: bool) -> Iterator[None]:
    """With ``enabled`` False: no progress bar from ``datasets`` (map, split generation), transformers
    (weight loading and writing) or ``huggingface_hub`` (downloads, uploads) while the block runs; each
    library's setting is put back afterwards. (The Trainer's own bars follow ``disable_tqdm``.) With
    True: nothing changes."""
    if enabled:
        yield
        return
    import datasets
    from huggingface_hub.utils import are_progress_bars_disabled, disable_progress_bars, enable_progress_bars
    from transformers.utils import logging as hf_logging

    was = (datasets.is_progress_bar_enabled(), hf_logging.is_progress_bar_enabled(), are_progress_bars_disabled())
    datasets.disable_progress_bars()
    hf_logging.disable_progress_bar()
    disable_progress_bars()
    try:
        yield
    finally:
        if was[0]:
            datasets.enable_progress_bars()
        if was[1]:
            hf_logging.enable_progress_bar()
        if not was[2]:
            enable_progress_bars()
