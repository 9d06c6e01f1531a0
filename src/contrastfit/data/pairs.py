"""Sentence pairs in a tokenised batch: tell a batch of jointly tokenised pairs from one of single
sentences (:func:`is_pair`) and cut a pair back into its two sentences (:func:`split_pair`), so that a
method can encode them separately (the report's pair heads, Behrman & Christoglou Sec. 4.2, read
``[u; v]`` of the two sentences encoded alone).

Convention: a pair is ``[CLS] a [SEP] b [SEP]`` with ``token_type_ids`` 0 for ``[CLS] a [SEP]`` and 1
for ``b [SEP]`` (BERT's); a tokenizer without ``token_type_ids`` (RoBERTa-style) gives no pairs here.
"""

from __future__ import annotations

import torch

__all__ = ["is_pair", "split_pair", "concat_inputs"]


def is_pair(inputs: dict[str, torch.Tensor]) -> bool:
    """True when every row holds a sentence pair (some attended token with ``token_type_ids != 0``);
    False without ``token_type_ids`` or when no row has a second segment. A batch mixing both is refused."""
    tt = inputs.get("token_type_ids")
    if tt is None:
        return False
    second = ((tt != 0) & inputs["attention_mask"].bool()).any(dim=1)
    if bool(second.all()):
        return True
    if bool(second.any()):
        raise ValueError("a batch mixes sentence pairs and single sentences")
    return False


def split_pair(inputs: dict[str, torch.Tensor], pad_id: int = 0) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    """Cut jointly tokenised pairs (``[CLS] a [SEP] b [SEP]``, segment ids 0 then 1) into two batches
    ``[CLS] a [SEP]`` and ``[CLS] b [SEP]`` of the same width (padding with ``pad_id``, right side).

    The first attended token of segment 0 (``[CLS]``) is put in front of segment 1. Works whatever the
    padding side of the input. Both halves get all-zero ``token_type_ids``.
    """
    ids, att, tt = inputs["input_ids"], inputs["attention_mask"].bool(), inputs["token_type_ids"]
    in_a, in_b = att & (tt == 0), att & (tt != 0)
    len_a, len_b = in_a.sum(dim=1), in_b.sum(dim=1) + 1

    def compact(keep: torch.Tensor) -> torch.Tensor:  # kept tokens first, in order
        order = torch.argsort((~keep).to(torch.int8), dim=1, stable=True)
        return ids.gather(1, order)

    a_ids = compact(in_a)
    b_ids = torch.cat([a_ids[:, :1], compact(in_b)], dim=1)
    width = int(torch.maximum(len_a, len_b).max())
    pos = torch.arange(width, device=ids.device)[None, :]

    def half(tokens: torch.Tensor, length: torch.Tensor) -> dict[str, torch.Tensor]:
        mask = pos < length[:, None]
        tokens = tokens[:, :width].masked_fill(~mask, int(pad_id))
        return {"input_ids": tokens, "attention_mask": mask.to(inputs["attention_mask"].dtype),
                "token_type_ids": torch.zeros_like(tokens)}

    return half(a_ids, len_a), half(b_ids, len_b)


def concat_inputs(first: dict[str, torch.Tensor], second: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Two batches of the same width as one (rows of ``first``, then rows of ``second``)."""
    return {k: torch.cat([first[k], second[k]]) for k in first}
