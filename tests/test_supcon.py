"""Supervised contrastive loss: value and gradients against a literal loop over Khosla's Eq. 2."""

from __future__ import annotations

import math

import pytest
import torch

from contrastfit.losses import SupConLoss, supcon
from loss_references import ref_supcon


def loop_supcon(emb: torch.Tensor, labels, t: float) -> torch.Tensor:
    """L^sup_out as a literal loop (tests/loss_references.py), computed in float64 from ``emb`` of any
    dtype (autograd differentiates back to it)."""
    want = ref_supcon(emb.double(), [int(v) for v in labels], t)
    assert want is not None, "the reference is only defined when some anchor has a positive"
    return want


CASES = [
    # (n, dim, number of classes, seed)
    (6, 4, 2, 0),
    (9, 8, 3, 1),
    (12, 16, 4, 2),
    (5, 3, 2, 3),
]


def _batch(n, dim, k, seed, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    emb = torch.randn(n, dim, generator=g, dtype=torch.float64).to(dtype)
    labels = torch.arange(n) % k  # every class has >= 2 members when n >= 2k
    labels = labels[torch.randperm(n, generator=g)]
    return emb, labels


@pytest.mark.parametrize("n,dim,k,seed", CASES)
@pytest.mark.parametrize("t", [0.05, 0.1, 0.3, 1.0])
def test_value_matches_loop(n, dim, k, seed, t):
    emb, labels = _batch(n, dim, k, seed)
    got = supcon(emb, labels, t)
    want = loop_supcon(emb, labels, t)
    assert got.dtype == torch.float32
    assert got.item() == pytest.approx(want.item(), rel=1e-5, abs=1e-5)


@pytest.mark.parametrize("t", [0.07, 0.5])
def test_value_matches_loop_float64(t):
    emb, labels = _batch(10, 6, 3, 7, dtype=torch.float64)
    got = supcon(emb, labels, t)
    assert got.dtype == torch.float64  # float64 input is not truncated to float32
    assert got.item() == pytest.approx(loop_supcon(emb, labels, t).item(), rel=1e-12, abs=1e-12)


def test_value_is_not_trivial():
    # guards the comparison itself: different temperatures / labels give different values
    emb, labels = _batch(8, 4, 2, 0)
    assert supcon(emb, labels, 0.1).item() != pytest.approx(supcon(emb, labels, 0.5).item(), rel=1e-3)
    assert supcon(emb, labels, 0.1).item() != pytest.approx(supcon(emb, labels.flip(0), 0.1).item(), rel=1e-3)
    # scaling an embedding does not change the loss: it is normalised inside
    scaled = emb * torch.tensor([[3.0], [0.5], [1], [1], [7], [1], [1], [2]])
    assert supcon(scaled, labels, 0.1).item() == pytest.approx(supcon(emb, labels, 0.1).item(), rel=1e-5)


@pytest.mark.parametrize("views", [2, 3])
def test_multi_view_matches_loop(views):
    """SupCL-Seq style: views stacked along the batch, labels repeated; another view of the
    same example is a positive."""
    g = torch.Generator().manual_seed(11)
    base_labels = torch.tensor([0, 1, 2, 0, 1])
    stacked = torch.cat([torch.randn(5, 8, generator=g) for _ in range(views)])
    labels = base_labels.repeat(views)
    got = supcon(stacked, labels, 0.1)
    assert got.item() == pytest.approx(loop_supcon(stacked, labels, 0.1).item(), rel=1e-5)
    # with unique labels per example, the only positives are the other views of the same example
    unique = torch.arange(5).repeat(views)
    got_u = supcon(stacked, unique, 0.1)
    assert got_u.item() == pytest.approx(loop_supcon(stacked, unique, 0.1).item(), rel=1e-5)
    assert got_u.item() > 0


@pytest.mark.parametrize("n,dim,k,seed", CASES[:3])
@pytest.mark.parametrize("t", [0.1, 0.5])
def test_gradient_matches_loop(n, dim, k, seed, t):
    emb, labels = _batch(n, dim, k, seed)
    leaf = emb.clone().requires_grad_(True)
    (g_fn,) = torch.autograd.grad(supcon(leaf, labels, t), leaf)
    (g_loop,) = torch.autograd.grad(loop_supcon(leaf, labels, t), leaf)
    assert g_fn.shape == leaf.shape and g_fn.dtype == leaf.dtype
    assert g_fn.abs().max() > 1e-4  # a non-trivial gradient
    torch.testing.assert_close(g_fn, g_loop.float(), rtol=1e-4, atol=1e-5)


def test_gradient_matches_loop_with_anchor_without_positive():
    emb, _ = _batch(7, 5, 2, 4)
    labels = torch.tensor([0, 0, 1, 1, 1, 2, 3])  # rows 5 and 6 have no positive
    leaf = emb.clone().requires_grad_(True)
    (g_fn,) = torch.autograd.grad(supcon(leaf, labels, 0.2), leaf)
    (g_loop,) = torch.autograd.grad(loop_supcon(leaf, labels, 0.2), leaf)
    torch.testing.assert_close(g_fn, g_loop.float(), rtol=1e-4, atol=1e-5)
    # rows without positive still get a gradient: they are negatives of the other anchors
    assert g_fn[5].abs().sum() > 0 and g_fn[6].abs().sum() > 0


def test_gradcheck_float64():
    emb, labels = _batch(6, 4, 2, 5, dtype=torch.float64)
    leaf = emb.clone().requires_grad_(True)
    assert torch.autograd.gradcheck(lambda x: supcon(x, labels, 0.3), (leaf,), eps=1e-6, atol=1e-5)
    labels2 = torch.tensor([0, 0, 1, 2, 2, 3])  # with anchors that have no positive
    assert torch.autograd.gradcheck(lambda x: supcon(x, labels2, 0.1), (leaf,), eps=1e-6, atol=1e-5)


# ---------------------------------------------------------------------------------------------
# No positives (pitfall 1), single-class batches (pitfall 2)
# ---------------------------------------------------------------------------------------------

def test_anchor_without_positive_is_excluded():
    emb, _ = _batch(7, 5, 2, 8)
    labels = torch.tensor([0, 1, 0, 1, 0, 2, 3])  # rows 5 and 6 have no positive
    got = supcon(emb, labels, 0.1)
    assert torch.isfinite(got)
    assert got.item() == pytest.approx(loop_supcon(emb, labels, 0.1).item(), rel=1e-5)
    # explicitly: the mean over the 5 anchors with a positive, each computed with all 7 rows
    z = torch.nn.functional.normalize(emb.double(), dim=1)
    logits = z @ z.T / 0.1
    vals = []
    for i in range(5):
        others = [a for a in range(7) if a != i]
        log_denom = torch.logsumexp(logits[i, others], dim=0)
        pos = [p for p in range(5) if p != i and labels[p] == labels[i]]
        vals.append(-sum(logits[i, p] - log_denom for p in pos) / len(pos))
    assert got.item() == pytest.approx((sum(vals) / 5).item(), rel=1e-5)


def test_all_distinct_labels_gives_zero_with_graph():
    leaf = torch.randn(5, 4, requires_grad=True)
    loss = supcon(leaf, torch.arange(5), 0.1)
    assert loss.item() == 0.0 and not torch.isnan(loss)
    assert loss.requires_grad
    assert loss.dim() == 0
    loss.backward()
    assert leaf.grad is not None
    assert torch.isfinite(leaf.grad).all()
    assert torch.equal(leaf.grad, torch.zeros_like(leaf))


def test_batch_of_one():
    leaf = torch.randn(1, 4, requires_grad=True)
    loss = supcon(leaf, torch.tensor([3]), 0.1)
    assert loss.item() == 0.0 and loss.requires_grad
    loss.backward()
    assert torch.equal(leaf.grad, torch.zeros_like(leaf))


def test_single_class_batch_is_finite():
    emb, _ = _batch(6, 4, 1, 9)
    labels = torch.zeros(6, dtype=torch.long)
    leaf = emb.clone().requires_grad_(True)
    loss = supcon(leaf, labels, 0.1)
    assert torch.isfinite(loss)
    assert loss.item() == pytest.approx(loop_supcon(emb, labels, 0.1).item(), rel=1e-5)
    # all others are positives: each anchor's probabilities over a != i sum to one, so the
    # loss is at least log(n - 1) (mean of -log p >= -log mean p)
    assert loss.item() >= math.log(5) - 1e-6
    loss.backward()
    assert torch.isfinite(leaf.grad).all()


def test_identical_embeddings_single_class_equals_log_n_minus_1():
    emb = torch.ones(4, 3)
    assert supcon(emb, torch.zeros(4, dtype=torch.long), 0.1).item() == pytest.approx(math.log(3), rel=1e-6)


# ---------------------------------------------------------------------------------------------
# Mixed precision (pitfall 8)
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_input_gives_float32(dtype):
    emb, labels = _batch(12, 16, 3, 10)
    half = emb.to(dtype)
    got = supcon(half, labels, 0.1)
    assert got.dtype == torch.float32
    # the same numbers in float32: identical; the original float32 numbers: close
    assert got.item() == pytest.approx(supcon(half.float(), labels, 0.1).item(), rel=1e-6)
    assert got.item() == pytest.approx(supcon(emb, labels, 0.1).item(), rel=2e-2)
    leaf = half.clone().requires_grad_(True)
    supcon(leaf, labels, 0.1).backward()
    assert leaf.grad.dtype == dtype and torch.isfinite(leaf.grad.float()).all()


def test_no_positive_half_precision_returns_float32_zero():
    leaf = torch.randn(3, 4, dtype=torch.bfloat16, requires_grad=True)
    loss = supcon(leaf, torch.arange(3), 0.1)
    assert loss.dtype == torch.float32 and loss.item() == 0.0 and loss.requires_grad


def test_autocast_region_computes_in_float32():
    """Under bf16 autocast (as the Trainer runs with --bf16) the matmul must not drop to bf16."""
    emb, labels = _batch(16, 32, 3, 12)
    want = supcon(emb, labels, 0.05)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        got = supcon(emb, labels, 0.05)
    assert got.dtype == torch.float32
    assert got.item() == pytest.approx(want.item(), rel=1e-6)


# ---------------------------------------------------------------------------------------------
# Module, argument checks, reference implementation
# ---------------------------------------------------------------------------------------------

def test_module_equals_function():
    emb, labels = _batch(9, 8, 3, 13)
    for t in (0.1, 0.7):
        module = SupConLoss(temperature=t)
        assert module(emb, labels).item() == supcon(emb, labels, t).item()
        assert f"temperature={t}" in repr(module)
    assert SupConLoss()(emb, labels).item() == supcon(emb, labels).item() == supcon(emb, labels, 0.1).item()


def test_bad_arguments():
    emb = torch.randn(4, 3)
    with pytest.raises(ValueError, match="temperature"):
        supcon(emb, torch.arange(4), 0.0)
    with pytest.raises(ValueError, match="labels"):
        supcon(emb, torch.arange(3), 0.1)
    with pytest.raises(ValueError, match="embeddings"):
        supcon(torch.randn(4), torch.arange(4), 0.1)


def test_matches_pytorch_metric_learning():
    # an oracle from the test extra: imported, not importorskip'ed, so that a missing package fails
    from pytorch_metric_learning import losses as pml_losses

    emb, labels = _batch(12, 8, 3, 14)
    for t in (0.1, 0.5):
        ref = pml_losses.SupConLoss(temperature=t)(emb, labels)
        assert supcon(emb, labels, t).item() == pytest.approx(ref.item(), rel=1e-4)
