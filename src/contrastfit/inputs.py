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

__all__ = ["check_utf8_texts", "model_inputs"]


def check_utf8_texts(texts: Sequence[str], what: str = "text argument") -> None:
    """Refuse a text that holds bytes that are not UTF-8 (Python keeps such bytes of a command-line
    argument or a pipe as lone surrogates, which no tokenizer takes) with a one-line
    :class:`~contrastfit.errors.DataError` naming ``what`` and the text's position (from 1), the text
    and its first bad byte."""
    for i, text in enumerate(texts, 1):
        try:
            text.encode("utf-8")
            continue
        except UnicodeEncodeError:
            pass
        raw = text.encode("utf-8", "surrogateescape" if _escaped_only(text) else "surrogatepass")
        try:
            raw.decode("utf-8")
            bad = "a lone surrogate"  # (surrogatepass's bytes always fail to decode; kept for safety)
        except UnicodeDecodeError as exc:
            bad = f"byte 0x{raw[exc.start]:02x} at byte {exc.start + 1}"
        shown = raw.decode("utf-8", "backslashreplace")
        shown = shown if len(shown) <= 40 else shown[:37] + "..."
        raise DataError(f"{what} {i} ('{shown}') is not valid UTF-8 ({bad}); give UTF-8 text")


def _escaped_only(text: str) -> bool:
    """Whether every surrogate of ``text`` stands for an undecodable byte (U+DC80..U+DCFF, surrogateescape)."""
    return all("\udc80" <= c <= "\udcff" for c in text if "\ud800" <= c <= "\udfff")


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
