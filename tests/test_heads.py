"""Heads (contrastfit.heads): LaCon-fusion's label fusion follows the input dtype and autocast like
the other heads' layers, while its attention is computed in full precision."""

from __future__ import annotations

import torch
from torch import nn

from contrastfit.heads import LabelFusion, LabelMatchingHead


def _inputs(dtype=torch.float32):
    torch.manual_seed(0)
    tokens = torch.randn(3, 6, 16, dtype=dtype)
    mask = torch.tensor([[1] * 6, [1] * 4 + [0] * 2, [1] * 2 + [0] * 4])
    return tokens, mask, torch.randn(4, 16, dtype=dtype)


def test_fusion_follows_the_input_dtype():
    for dtype in (torch.float32, torch.float64):
        fusion = LabelFusion(4, 2).to(dtype)
        tokens, mask, labels = _inputs(dtype)
        z = fusion(tokens, mask, labels)
        assert z.dtype == dtype  # float64 in, float64 out (it was float32 whatever the input)
        beta = fusion.attention(tokens, mask, labels)
        assert beta.dtype == dtype
        assert torch.allclose(z, torch.einsum("bs,bsd->bd", beta, tokens))


def test_fusion_under_bf16_autocast_on_cpu_is_bf16_like_a_linear_layer():
    """Under ``torch.autocast("cpu", torch.bfloat16)`` the fused vector is bf16, as ``nn.Linear``'s
    output is (it was float32), and it is the full-precision vector up to bf16 rounding: the token
    weights are computed in float32 with autocast off."""
    fusion = LabelFusion(4, 2)
    tokens, mask, labels = _inputs()
    full = fusion(tokens, mask, labels)
    linear = nn.Linear(16, 16)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        z = fusion(tokens, mask, labels)
        beta = fusion.attention(tokens, mask, labels)
        assert linear(tokens).dtype == torch.bfloat16
    assert z.dtype == torch.bfloat16
    assert beta.dtype == torch.float32  # the attention itself is not rounded to bf16
    assert torch.equal(beta, fusion.attention(tokens, mask, labels))
    torch.testing.assert_close(z.float(), full, atol=5e-2, rtol=2e-2)
    assert (beta[1, 4:] == 0).all() and (beta[2, 2:] == 0).all()  # padding still gets no weight


def test_label_matching_head_with_fusion_runs_in_float64_end_to_end():
    head = LabelMatchingHead(16, 4, depth=2, temperature=0.1, fusion_radius=1).double()
    tokens, mask, _ = _inputs(torch.float64)
    z = head.fuse(tokens, mask)
    logits = head(z)  # the float64 projection accepts the float64 fused vector
    assert z.dtype == torch.float64 and logits.dtype == torch.float64
    assert logits.shape == (3, 4)
