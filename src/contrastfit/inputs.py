"""What a trained model reads: one rule for ``predict``, ``explain`` and ``export`` (texts from the
command line, a file or standard input) and for ``serve`` (texts in a JSON request).

* A single-text model reads each text whole: a tab in it is part of the text, and second texts are
  refused.
* A pair model reads each text with a second text: the one given next to it (a table's pair column,
  the request's ``"pairs"``), else the text is split at its first tab (``first<TAB>second``); a text
  without a tab is refused.

Standard library only (the server imports it).
"""

from __future__ import annotations

from typing import Sequence

from .errors import DataError

__all__ = ["model_inputs"]


def model_inputs(texts: Sequence[str], pairs: Sequence[str] | None, pair_model: bool, what: str = "this model",
                 pairs_name: str = "second texts") -> tuple[list[str], list[str] | None]:
    """``(texts, pairs)`` as a model that takes pairs (``pair_model``) or single texts reads them
    (the rule of this module); a :class:`~contrastfit.errors.DataError` (a ``ValueError``) in one line
    naming ``what`` (the model) and ``pairs_name`` (how the caller's user gives second texts) otherwise."""
    texts = list(texts)
    if not pair_model:
        if pairs is not None:
            raise DataError(f"{what} classifies single texts: leave {pairs_name} out")
        return texts, None
    if pairs is None:
        no_tab = next((i for i, t in enumerate(texts) if "\t" not in t), None)
        if no_tab is not None:
            raise DataError(f"{what} classifies text pairs: separate the two texts with a tab, or give "
                            f"{pairs_name} (text {no_tab + 1} has no tab)")
        firsts, seconds = zip(*(t.split("\t", 1) for t in texts)) if texts else ((), ())
        return list(firsts), list(seconds)
    if len(pairs) != len(texts):
        raise DataError(f"{len(texts)} texts but {len(pairs)} {pairs_name}")
    return texts, list(pairs)
