"""SimCSE losses: values and gradients against literal loops over Eq. 1 and Eq. 2 of the CS224N report."""

from __future__ import annotations

import math

import pytest
import torch

from contrastfit.losses.simcse import SimCSELoss, SupervisedSimCSELoss, simcse_sup, simcse_unsup


def _cos(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return (x @ y) / (x.norm() * y.norm())


def loop_unsup(z1: torch.Tensor, z2: torch.Tensor, t: float) -> torch.Tensor:
    """Eq. 1 as it reads: -log e^{sim(h_i,h_i^+)/t} / sum_j e^{sim(h_i,h_j^+)/t}, mean over i (float64)."""
    a, p = z1.double(), z2.double()
    n = a.shape[0]
    terms = []
    for i in range(n):
        num = torch.exp(_cos(a[i], p[i]) / t)
        denom = sum(torch.exp(_cos(a[i], p[j]) / t) for j in range(n))
        terms.append(-torch.log(num / denom))
    return sum(terms) / n


def loop_sup(a, p, h, t: float, w: float = 0.0, mask=None) -> torch.Tensor:
    """Eq. 2 with SimCSE's hard-negative weight alpha = e^w on the row's own negative (j == i) and
    hard-negative columns only for rows with mask[j] True (float64)."""
    a, p, h = a.double(), p.double(), h.double()
    n = a.shape[0]
    mask = [True] * n if mask is None else [bool(m) for m in mask]
    alpha = math.exp(w)
    terms = []
    for i in range(n):
        num = torch.exp(_cos(a[i], p[i]) / t)
        denom = 0
        for j in range(n):
            denom = denom + torch.exp(_cos(a[i], p[j]) / t)
            if mask[j]:
                denom = denom + (alpha if j == i else 1.0) * torch.exp(_cos(a[i], h[j]) / t)
        terms.append(-torch.log(num / denom))
    return sum(terms) / n


def _triple(n, d, seed, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    a = torch.randn(n, d, generator=g, dtype=torch.float64)
    p = a + 0.7 * torch.randn(n, d, generator=g, dtype=torch.float64)  # positives somewhat close
    h = torch.randn(n, d, generator=g, dtype=torch.float64)
    return a.to(dtype), p.to(dtype), h.to(dtype)


CASES = [(4, 3, 0), (7, 8, 1), (12, 16, 2)]


# ---------------------------------------------------------------------------------------------
# Unsupervised (Eq. 1)
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("n,d,seed", CASES)
@pytest.mark.parametrize("t", [0.05, 0.2, 1.0])
def test_unsup_value_matches_loop(n, d, seed, t):
    a, p, _ = _triple(n, d, seed)
    got = simcse_unsup(a, p, t)
    assert got.dtype == torch.float32 and got.dim() == 0
    assert got.item() == pytest.approx(loop_unsup(a, p, t).item(), rel=1e-5, abs=1e-5)


def test_unsup_float64_and_default_temperature():
    a, p, _ = _triple(9, 5, 3, dtype=torch.float64)
    got = simcse_unsup(a, p)
    assert got.dtype == torch.float64
    assert got.item() == pytest.approx(loop_unsup(a, p, 0.05).item(), rel=1e-12)
    # row i of z1 against every row of z2: not symmetric in (z1, z2)
    assert simcse_unsup(a, p).item() != pytest.approx(simcse_unsup(p, a).item(), rel=1e-6)
    # cosine: scaling rows does not change the loss
    scale = torch.linspace(0.5, 3.0, 9, dtype=torch.float64)[:, None]
    assert simcse_unsup(a * scale, p).item() == pytest.approx(got.item(), rel=1e-12)


@pytest.mark.parametrize("n,d,seed", CASES)
def test_unsup_gradient_matches_loop(n, d, seed):
    a, p, _ = _triple(n, d, seed, dtype=torch.float64)
    la, lp = a.clone().requires_grad_(True), p.clone().requires_grad_(True)
    g_fn = torch.autograd.grad(simcse_unsup(la, lp, 0.1), (la, lp))
    g_loop = torch.autograd.grad(loop_unsup(la, lp, 0.1), (la, lp))
    for x, y in zip(g_fn, g_loop):
        assert x.abs().max() > 1e-4
        torch.testing.assert_close(x, y, rtol=1e-9, atol=1e-11)


def test_unsup_gradcheck():
    a, p, _ = _triple(4, 3, 4, dtype=torch.float64)
    leaves = (a.requires_grad_(True), p.requires_grad_(True))
    assert torch.autograd.gradcheck(lambda x, y: simcse_unsup(x, y, 0.2), leaves, eps=1e-6, atol=1e-5)


def test_unsup_identical_views_and_orthogonal_batch():
    # n orthonormal rows as both views: the loss is -log(e^{1/t} / (e^{1/t} + (n - 1)))
    z = torch.eye(4)
    t = 0.5
    want = -math.log(math.exp(1 / t) / (math.exp(1 / t) + 3))
    assert simcse_unsup(z, z, t).item() == pytest.approx(want, rel=1e-6)


# ---------------------------------------------------------------------------------------------
# Supervised (Eq. 2), hard-negative weight, hard-negative mask
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("n,d,seed", CASES)
@pytest.mark.parametrize("t", [0.05, 0.3])
def test_sup_value_matches_loop(n, d, seed, t):
    a, p, h = _triple(n, d, seed)
    got = simcse_sup(a, p, h, temperature=t)
    assert got.dtype == torch.float32
    assert got.item() == pytest.approx(loop_sup(a, p, h, t).item(), rel=1e-5, abs=1e-5)
    # the hard negatives enlarge every denominator: the loss is larger than without them
    assert got.item() > simcse_sup(a, p, temperature=t).item()


def test_sup_without_hard_negatives_is_unsup():
    a, p, _ = _triple(8, 6, 5, dtype=torch.float64)
    assert simcse_sup(a, p, None, 0.1).item() == pytest.approx(simcse_unsup(a, p, 0.1).item(), rel=1e-14)


@pytest.mark.parametrize("w", [-1.0, 0.5, math.log(2.0), 2.0])
def test_sup_weight_matches_loop(w):
    a, p, h = _triple(7, 8, 6, dtype=torch.float64)
    got = simcse_sup(a, p, h, 0.1, hard_negative_weight=w)
    assert got.item() == pytest.approx(loop_sup(a, p, h, 0.1, w).item(), rel=1e-12)
    assert got.item() != pytest.approx(simcse_sup(a, p, h, 0.1).item(), rel=1e-6)


def test_sup_weight_is_only_on_the_matching_hard_negative():
    a, p, h = _triple(6, 5, 7, dtype=torch.float64)
    w = 1.5
    got = simcse_sup(a, p, h, 0.1, hard_negative_weight=w).item()
    # a weight on every hard-negative column (not what SimCSE does) gives a different number
    n, t = 6, 0.1
    an, pn, hn = (torch.nn.functional.normalize(x, dim=1) for x in (a, p, h))
    every = torch.cat([an @ pn.T / t, an @ hn.T / t + w], dim=1)
    wrong = torch.nn.functional.cross_entropy(every, torch.arange(n)).item()
    assert got != pytest.approx(wrong, rel=1e-6)
    assert got == pytest.approx(loop_sup(a, p, h, 0.1, w).item(), rel=1e-12)


def test_sup_weight_minus_inf_removes_own_negative():
    a, p, h = _triple(6, 5, 8, dtype=torch.float64)
    got = simcse_sup(a, p, h, 0.1, hard_negative_weight=float("-inf"))
    assert torch.isfinite(got)
    t = 0.1
    want = 0.0
    for i in range(6):
        num = torch.exp(_cos(a[i], p[i]) / t)
        denom = sum(torch.exp(_cos(a[i], p[j]) / t) for j in range(6))
        denom = denom + sum(torch.exp(_cos(a[i], h[j]) / t) for j in range(6) if j != i)
        want = want - torch.log(num / denom) / 6
    assert got.item() == pytest.approx(want.item(), rel=1e-12)


@pytest.mark.parametrize("mask", [[1, 0, 1, 1, 0, 1, 0], [0, 0, 0, 0, 0, 0, 1], [1, 1, 1, 1, 1, 1, 1]])
@pytest.mark.parametrize("w", [0.0, 0.7])
def test_sup_mask_matches_loop(mask, w):
    a, p, h = _triple(7, 8, 9, dtype=torch.float64)
    m = torch.tensor(mask, dtype=torch.bool)
    got = simcse_sup(a, p, h, 0.05, hard_negative_weight=w, hard_negative_mask=m)
    assert got.item() == pytest.approx(loop_sup(a, p, h, 0.05, w, mask).item(), rel=1e-12)


def test_sup_all_masked_is_unsup_and_masked_rows_are_ignored():
    a, p, h = _triple(6, 4, 10, dtype=torch.float64)
    none = torch.zeros(6, dtype=torch.bool)
    assert simcse_sup(a, p, h, 0.1, 1.0, none).item() == pytest.approx(simcse_unsup(a, p, 0.1).item(), rel=1e-14)
    # rows 1 and 4 have no hard negative: what their slot holds does not matter (zeros, garbage)
    m = torch.tensor([1, 0, 1, 1, 0, 1], dtype=torch.bool)
    h2 = h.clone()
    h2[1] = 0.0
    h2[4] = 1e6 * torch.ones(4, dtype=torch.float64)
    ref = simcse_sup(a, p, h, 0.1, 0.3, m).item()
    assert simcse_sup(a, p, h2, 0.1, 0.3, m).item() == pytest.approx(ref, rel=1e-14)


def test_sup_augmented_variant_with_dropout_positive():
    """The report's "augmented" rows: contradiction pairs without an entailment use a second view of
    the anchor as positive and have no hard negative column."""
    a, p, h = _triple(6, 8, 11, dtype=torch.float64)
    g = torch.Generator().manual_seed(0)
    dropout_view = a + 0.05 * torch.randn(a.shape, generator=g, dtype=torch.float64)
    augmented = torch.tensor([0, 0, 0, 0, 1, 1], dtype=torch.bool)
    pos = torch.where(augmented[:, None], dropout_view, p)
    # the brief's example: the augmented rows lack a hard negative
    m = ~augmented
    got = simcse_sup(a, pos, h, 0.05, 0.0, m)
    assert torch.isfinite(got)
    assert got.item() == pytest.approx(loop_sup(a, pos, h, 0.05, 0.0, m.tolist()).item(), rel=1e-12)


@pytest.mark.parametrize("mask", [None, [1, 0, 1, 1, 0, 1]])
@pytest.mark.parametrize("w", [0.0, 1.0])
def test_sup_gradient_matches_loop(mask, w):
    a, p, h = _triple(6, 5, 12, dtype=torch.float64)
    m = None if mask is None else torch.tensor(mask, dtype=torch.bool)
    leaves = [x.clone().requires_grad_(True) for x in (a, p, h)]
    g_fn = torch.autograd.grad(simcse_sup(*leaves, 0.1, w, m), leaves)
    g_loop = torch.autograd.grad(loop_sup(*leaves, 0.1, w, mask), leaves)
    for x, y in zip(g_fn, g_loop):
        torch.testing.assert_close(x, y, rtol=1e-9, atol=1e-11)
    assert g_fn[0].abs().max() > 1e-4 and g_fn[2].abs().max() > 1e-4
    if mask is not None:
        # a hard negative that is excluded gets no gradient
        assert torch.equal(g_fn[2][1], torch.zeros(5, dtype=torch.float64))
        assert torch.equal(g_fn[2][4], torch.zeros(5, dtype=torch.float64))


def test_sup_gradient_float32_matches_loop():
    a, p, h = _triple(8, 16, 13)
    leaves = [x.clone().requires_grad_(True) for x in (a, p, h)]
    g_fn = torch.autograd.grad(simcse_sup(*leaves, 0.05, 0.5), leaves)
    g_loop = torch.autograd.grad(loop_sup(*leaves, 0.05, 0.5), leaves)
    for x, y in zip(g_fn, g_loop):
        assert x.dtype == torch.float32
        torch.testing.assert_close(x, y.float(), rtol=1e-4, atol=1e-5)


def test_sup_gradcheck():
    a, p, h = _triple(4, 3, 14, dtype=torch.float64)
    m = torch.tensor([1, 1, 0, 1], dtype=torch.bool)
    leaves = tuple(x.requires_grad_(True) for x in (a, p, h))
    assert torch.autograd.gradcheck(lambda x, y, z: simcse_sup(x, y, z, 0.2, 0.8, m), leaves, eps=1e-6, atol=1e-5)


# ---------------------------------------------------------------------------------------------
# Batch of one, mixed precision
# ---------------------------------------------------------------------------------------------

def test_batch_of_one():
    a, p, h = (x.requires_grad_(True) for x in _triple(1, 4, 15))
    loss = simcse_unsup(a, p)
    assert loss.item() == pytest.approx(0.0, abs=1e-7) and loss.requires_grad
    loss.backward()
    assert torch.isfinite(a.grad).all() and torch.isfinite(p.grad).all()
    sup = simcse_sup(a, p, h, 0.05, 0.5)
    assert torch.isfinite(sup)
    want = loop_sup(a.detach(), p.detach(), h.detach(), 0.05, 0.5).item()
    assert sup.item() == pytest.approx(want, rel=1e-5, abs=1e-6)
    a.grad = None
    sup.backward()
    assert torch.isfinite(a.grad).all() and torch.isfinite(h.grad).all()
    masked = simcse_sup(a, p, h, 0.05, 0.5, torch.tensor([False]))
    assert masked.item() == pytest.approx(0.0, abs=1e-7)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_inputs_and_autocast(dtype):
    a, p, h = _triple(16, 32, 16)
    want_u = simcse_unsup(a, p).item()
    want_s = simcse_sup(a, p, h, 0.05, 0.5).item()
    # half-precision inputs: computed in float32
    leaves = [x.to(dtype).requires_grad_(True) for x in (a, p, h)]
    got = simcse_sup(*leaves, 0.05, 0.5)
    assert got.dtype == torch.float32 and torch.isfinite(got)
    assert got.item() == pytest.approx(want_s, rel=2e-2)
    got.backward()
    for x in leaves:
        assert x.grad.dtype == dtype and torch.isfinite(x.grad.float()).all()
    # under autocast (as the Trainer runs with --fp16 / --bf16): the matmuls stay in float32
    with torch.autocast("cpu", dtype=dtype):
        u = simcse_unsup(a, p)
        s = simcse_sup(a, p, h, 0.05, 0.5, torch.tensor([True, False] * 8))
    assert u.dtype == s.dtype == torch.float32
    assert torch.isfinite(u) and torch.isfinite(s)
    assert u.item() == pytest.approx(want_u, rel=1e-6)


def test_fp16_autocast_large_logits_are_finite():
    # tau = 0.05 and identical rows: logits of 20 would overflow exp() in fp16, never here
    z = torch.ones(8, 4)
    with torch.autocast("cpu", dtype=torch.float16):
        loss = simcse_sup(z, z, z, 0.05, 2.0)
    assert torch.isfinite(loss)
    assert loss.item() == pytest.approx(-math.log(1 / (8 + 7 + math.exp(2.0))), rel=1e-5)


# ---------------------------------------------------------------------------------------------
# Modules and argument checks
# ---------------------------------------------------------------------------------------------

def test_modules_equal_functions():
    a, p, h = _triple(6, 8, 17)
    m = torch.tensor([1, 0, 1, 1, 1, 0], dtype=torch.bool)
    assert SimCSELoss()(a, p).item() == simcse_unsup(a, p, 0.05).item()
    assert SimCSELoss(0.2)(a, p).item() == simcse_unsup(a, p, 0.2).item()
    mod = SupervisedSimCSELoss(temperature=0.1, hard_negative_weight=0.4)
    assert mod(a, p, h, m).item() == simcse_sup(a, p, h, 0.1, 0.4, m).item()
    assert mod(a, p).item() == simcse_unsup(a, p, 0.1).item()
    assert "temperature=0.1" in repr(mod) and "hard_negative_weight=0.4" in repr(mod)
    assert SupervisedSimCSELoss()(a, p, h).item() == simcse_sup(a, p, h).item()


def test_bad_arguments():
    a, p, h = _triple(4, 3, 18)
    with pytest.raises(ValueError, match="temperature"):
        simcse_unsup(a, p, 0.0)
    with pytest.raises(ValueError, match="z2"):
        simcse_unsup(a, p[:3])
    with pytest.raises(ValueError, match="z1"):
        simcse_unsup(a[0], p[0])
    with pytest.raises(ValueError, match="hard_negatives"):
        simcse_sup(a, p, h[:, :2])
    with pytest.raises(ValueError, match="hard_negative_mask"):
        simcse_sup(a, p, h, hard_negative_mask=torch.ones(3, dtype=torch.bool))
    with pytest.raises(ValueError, match="bool"):
        simcse_sup(a, p, h, hard_negative_mask=torch.ones(4))
    with pytest.raises(ValueError, match="without hard_negatives"):
        simcse_sup(a, p, None, hard_negative_mask=torch.ones(4, dtype=torch.bool))
    with pytest.raises(ValueError, match="hard_negative_weight"):
        simcse_sup(a, p, h, hard_negative_weight=float("nan"))
