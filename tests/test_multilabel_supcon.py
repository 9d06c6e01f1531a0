"""Jaccard-weighted SupCon (multi-label): value and gradients against a literal loop over its equation,
its reduction to SupCon on single-label data, and the degenerate batches (pitfall 1)."""

from __future__ import annotations

import pytest
import torch

from contrastfit.losses import jaccard_supcon, supcon
from contrastfit.losses.multilabel_supcon import JaccardSupConLoss, jaccard_weights
from loss_references import ref_jaccard_supcon


def _sets(multi_hot: torch.Tensor) -> list[set[int]]:
    return [set(torch.nonzero(row > 0.5).flatten().tolist()) for row in multi_hot]


def _batch(n, dim, n_labels, seed, dtype=torch.float32, p=0.4):
    g = torch.Generator().manual_seed(seed)
    emb = torch.randn(n, dim, generator=g, dtype=torch.float64).to(dtype)
    y = (torch.rand(n, n_labels, generator=g) < p).float()
    return emb, y


CASES = [(6, 4, 3, 0), (9, 8, 4, 1), (12, 16, 5, 2), (5, 3, 2, 3)]


@pytest.mark.parametrize("n,dim,n_labels,seed", CASES)
@pytest.mark.parametrize("t", [0.05, 0.3, 1.0])
def test_value_matches_loop(n, dim, n_labels, seed, t):
    emb, y = _batch(n, dim, n_labels, seed)
    want = ref_jaccard_supcon(emb.double(), _sets(y), t)
    assert want is not None
    got = jaccard_supcon(emb, y, t)
    assert got.dtype == torch.float32
    assert got.item() == pytest.approx(want.item(), rel=1e-5, abs=1e-5)


def test_value_matches_loop_float64_and_label_dtypes():
    emb, y = _batch(10, 6, 4, 7, dtype=torch.float64)
    want = ref_jaccard_supcon(emb, _sets(y), 0.1).item()
    for labels in (y, y.bool(), y.long(), y.to(torch.float16)):
        got = jaccard_supcon(emb, labels, 0.1)
        assert got.dtype == torch.float64
        assert got.item() == pytest.approx(want, rel=1e-12, abs=1e-12)


@pytest.mark.parametrize("n,dim,n_labels,seed", CASES)
def test_gradient_matches_loop(n, dim, n_labels, seed):
    emb, y = _batch(n, dim, n_labels, seed, dtype=torch.float64)
    a = emb.clone().requires_grad_(True)
    b = emb.clone().requires_grad_(True)
    jaccard_supcon(a, y, 0.2).backward()
    ref_jaccard_supcon(b, _sets(y), 0.2).backward()
    torch.testing.assert_close(a.grad, b.grad, rtol=1e-9, atol=1e-12)
    assert a.grad.abs().sum() > 0


def test_gradcheck_float64():
    emb, y = _batch(7, 5, 3, 4, dtype=torch.float64)
    leaf = emb.requires_grad_(True)
    assert torch.autograd.gradcheck(lambda x: jaccard_supcon(x, y, 0.3), (leaf,), eps=1e-6, atol=1e-5)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_single_label_data_is_supcon(seed):
    """One label per row: w is 1 for the same class, 0 otherwise, so the loss and its gradient are SupCon's."""
    g = torch.Generator().manual_seed(seed)
    labels = torch.randint(0, 3, (10,), generator=g)
    one_hot = torch.nn.functional.one_hot(labels, 3).float()
    a = torch.randn(10, 8, generator=g, dtype=torch.float64).requires_grad_(True)
    b = a.detach().clone().requires_grad_(True)
    la, lb = jaccard_supcon(a, one_hot, 0.1), supcon(b, labels, 0.1)
    assert la.item() == pytest.approx(lb.item(), rel=1e-12)
    la.backward()
    lb.backward()
    torch.testing.assert_close(a.grad, b.grad)


def test_partial_overlap_is_a_weaker_positive():
    """The weights are Jaccard indices: {0,1} vs {1,2} is 1/3, {0} vs {0,1} is 1/2, empty vs anything 0."""
    y = torch.tensor([[1, 1, 0], [0, 1, 1], [1, 0, 0], [0, 0, 0], [0, 0, 0]], dtype=torch.float32)
    w = jaccard_weights(y)
    assert w[0, 1].item() == pytest.approx(1 / 3)
    assert w[0, 2].item() == pytest.approx(1 / 2)
    assert w[3].sum().item() == 0 and w[3, 4].item() == 0  # two empty sets: 0, not NaN
    # moving an anchor toward a full positive lowers the loss more than toward a weak one
    emb = torch.randn(5, 4, generator=torch.Generator().manual_seed(0))
    assert torch.isfinite(jaccard_supcon(emb, y, 0.1))


def test_no_positive_is_zero_with_graph():
    """Pitfall 1: disjoint label sets (or rows without labels) give no positive: a zero in the graph, not NaN."""
    leaf = torch.randn(4, 6, requires_grad=True)
    disjoint = torch.eye(4)
    for y in (disjoint, torch.zeros(4, 4), torch.zeros(0, 4)):
        emb = leaf[: y.shape[0]]
        loss = jaccard_supcon(emb, y, 0.1)
        assert loss.item() == 0.0 and loss.requires_grad
        loss.backward()
        assert torch.isfinite(leaf.grad).all() and leaf.grad.abs().sum() == 0
        leaf.grad = None


def test_anchor_without_positive_is_left_out():
    emb, _ = _batch(5, 4, 3, 9)
    y = torch.tensor([[1, 0, 0], [1, 1, 0], [0, 0, 1], [0, 0, 0], [0, 1, 0]], dtype=torch.float32)
    got = jaccard_supcon(emb, y, 0.2)
    assert got.item() == pytest.approx(ref_jaccard_supcon(emb.double(), _sets(y), 0.2).item(), rel=1e-5)


def test_bad_inputs_refused():
    emb = torch.randn(3, 4)
    with pytest.raises(ValueError, match="label_sets"):
        jaccard_supcon(emb, torch.ones(3), 0.1)
    with pytest.raises(ValueError, match="temperature"):
        jaccard_supcon(emb, torch.ones(3, 2), 0.0)
    with pytest.raises(ValueError, match="temperature"):
        jaccard_supcon(emb, torch.ones(3, 2), float("nan"))
    assert "temperature=0.2" in repr(JaccardSupConLoss(0.2))


def test_autocast_half_precision_input_computes_in_float32():
    emb, y = _batch(6, 8, 3, 5)
    got = jaccard_supcon(emb.to(torch.bfloat16), y, 0.1)
    assert got.dtype == torch.float32
    want = ref_jaccard_supcon(emb.to(torch.bfloat16).double(), _sets(y), 0.1).item()
    assert got.item() == pytest.approx(want, rel=1e-5)
