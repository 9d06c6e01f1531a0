"""SoftTriple loss: values and gradients against a literal loop over Sosnowski et al.'s Eq. 2-3
(and Qian et al.'s centre regulariser)."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from contrastfit.losses import SOSNOWSKI_TABLE1, SoftTripleLoss, flatten_tokens, soft_triple
from loss_references import ref_soft_triple


def loop_soft_triple(emb, labels, centers, k, la, gamma, margin, center_reg=0.0):
    """Eq. 2-3 (and Qian's regulariser) as a literal loop (tests/loss_references.py), in float64 from
    inputs of any dtype (autograd differentiates back to them)."""
    return ref_soft_triple(emb.double(), [int(v) for v in labels], centers.double(), k, la, gamma, margin, center_reg)


CASES = [
    # (n, dim, classes, K, seed)
    (6, 4, 2, 3, 0),
    (9, 8, 3, 2, 1),
    (8, 8, 4, 4, 2),
    (5, 3, 3, 1, 3),
]

HYPER = [
    # (la, gamma, margin)
    (20.0, 0.1, 0.01),  # Qian et al.
    (9.0, 0.1, 0.7),    # Sosnowski Table 1, 20 examples
    (4.0, 0.05, 0.3),
]


def _case(n, dim, n_classes, k, seed, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    emb = torch.randn(n, dim, generator=g, dtype=torch.float64).to(dtype)
    centers = torch.randn(n_classes * k, dim, generator=g, dtype=torch.float64).to(dtype)
    labels = torch.randint(0, n_classes, (n,), generator=g)
    return emb, labels, centers


@pytest.mark.parametrize("n,dim,n_classes,k,seed", CASES)
@pytest.mark.parametrize("la,gamma,margin", HYPER)
def test_value_matches_loop(n, dim, n_classes, k, seed, la, gamma, margin):
    emb, labels, centers = _case(n, dim, n_classes, k, seed)
    got = soft_triple(emb, labels, centers, la, gamma, margin, centers_per_class=k)
    want = loop_soft_triple(emb, labels, centers, k, la, gamma, margin)
    assert got.dtype == torch.float32 and got.dim() == 0
    assert got.item() == pytest.approx(want.item(), rel=1e-5, abs=1e-5)
    # K given through num_classes instead: the same number
    assert soft_triple(emb, labels, centers, la, gamma, margin, num_classes=n_classes).item() == got.item()


@pytest.mark.parametrize("n,dim,n_classes,k,seed", CASES[:3])
@pytest.mark.parametrize("center_reg", [0.2, 1.0])
def test_value_with_center_regulariser_matches_loop(n, dim, n_classes, k, seed, center_reg):
    emb, labels, centers = _case(n, dim, n_classes, k, seed)
    got = soft_triple(emb, labels, centers, 20.0, 0.1, 0.01, k, center_reg)
    want = loop_soft_triple(emb, labels, centers, k, 20.0, 0.1, 0.01, center_reg)
    assert got.item() == pytest.approx(want.item(), rel=1e-5, abs=1e-5)
    assert got.item() > soft_triple(emb, labels, centers, 20.0, 0.1, 0.01, k).item()


def test_value_matches_loop_float64():
    emb, labels, centers = _case(8, 6, 3, 4, 7, dtype=torch.float64)
    got = soft_triple(emb, labels, centers, 20.0, 0.1, 0.01, 4, 0.2)
    assert got.dtype == torch.float64
    want = loop_soft_triple(emb, labels, centers, 4, 20.0, 0.1, 0.01, 0.2)
    assert got.item() == pytest.approx(want.item(), rel=1e-12, abs=1e-12)


def test_value_is_not_trivial():
    emb, labels, centers = _case(8, 6, 3, 4, 8)
    base = soft_triple(emb, labels, centers, 20.0, 0.1, 0.01, 4).item()
    assert base != pytest.approx(soft_triple(emb, labels, centers, 20.0, 0.1, 0.5, 4).item(), rel=1e-3)  # margin
    assert base != pytest.approx(soft_triple(emb, labels, centers, 20.0, 0.5, 0.01, 4).item(), rel=1e-3)  # gamma
    assert base != pytest.approx(soft_triple(emb, (labels + 1) % 3, centers, 20.0, 0.1, 0.01, 4).item(), rel=1e-3)
    # embeddings and centres are normalised inside: scaling rows changes nothing
    scale_e = torch.rand(8, 1) * 5 + 0.1
    scale_c = torch.rand(12, 1) * 5 + 0.1
    assert soft_triple(emb * scale_e, labels, centers * scale_c, 20.0, 0.1, 0.01, 4).item() == pytest.approx(base, rel=1e-5)


@pytest.mark.parametrize("n,dim,n_classes,k,seed", CASES)
@pytest.mark.parametrize("center_reg", [0.0, 0.2])
def test_gradients_match_loop(n, dim, n_classes, k, seed, center_reg):
    emb, labels, centers = _case(n, dim, n_classes, k, seed)
    e = emb.clone().requires_grad_(True)
    w = centers.clone().requires_grad_(True)
    g_e, g_w = torch.autograd.grad(soft_triple(e, labels, w, 9.0, 0.1, 0.3, k, center_reg), (e, w))
    r_e, r_w = torch.autograd.grad(loop_soft_triple(e, labels, w, k, 9.0, 0.1, 0.3, center_reg), (e, w))
    assert g_e.dtype == torch.float32 and g_w.dtype == torch.float32
    assert g_e.abs().max() > 1e-4 and g_w.abs().max() > 1e-4
    torch.testing.assert_close(g_e, r_e.float(), rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(g_w, r_w.float(), rtol=1e-4, atol=1e-5)


def test_gradcheck_float64():
    emb, labels, centers = _case(5, 4, 3, 2, 9, dtype=torch.float64)
    e = emb.clone().requires_grad_(True)
    w = centers.clone().requires_grad_(True)
    assert torch.autograd.gradcheck(lambda a, b: soft_triple(a, labels, b, 5.0, 0.2, 0.1, 2, 0.2), (e, w),
                                    eps=1e-6, atol=1e-5, fast_mode=True)


@pytest.mark.parametrize("la,margin", [(20.0, 0.01), (9.0, 0.7), (1.0, 0.0)])
def test_k1_is_normalised_softmax_with_margin(la, margin):
    emb, labels, centers = _case(10, 8, 4, 1, 10)
    got = soft_triple(emb, labels, centers, la, 0.1, margin, 1)
    cos = F.normalize(emb, dim=1) @ F.normalize(centers, dim=1).T
    want = F.cross_entropy(la * (cos - margin * F.one_hot(labels, 4)), labels)
    assert got.item() == pytest.approx(want.item(), rel=1e-5, abs=1e-6)
    # with K = 1, gamma plays no role and the regulariser has no pair
    assert soft_triple(emb, labels, centers, la, 0.9, margin, 1, 0.5).item() == pytest.approx(got.item(), rel=1e-6)


def test_matches_pytorch_metric_learning():
    # an oracle from the test extra: imported, not importorskip'ed, so that a missing package fails
    import pytorch_metric_learning as pml
    from pytorch_metric_learning import losses, regularizers

    emb, labels, centers = _case(12, 8, 3, 4, 11)
    ref_loss = losses.SoftTripleLoss(3, 8, centers_per_class=4, la=9.0, gamma=0.1, margin=0.3)
    with torch.no_grad():
        fc = ref_loss.fc
        fc.copy_(centers.T if fc.shape == (8, 12) else centers)
    assert soft_triple(emb, labels, centers, 9.0, 0.1, 0.3, 4).item() == pytest.approx(
        ref_loss(emb, labels).item(), rel=1e-4)
    reg = regularizers.SparseCentersRegularizer(3, 4)
    mine = soft_triple(emb, labels, centers, 9.0, 0.1, 0.3, 4, 0.2) - soft_triple(emb, labels, centers, 9.0, 0.1, 0.3, 4)
    assert mine.item() == pytest.approx(0.2 * reg(centers).item(), rel=1e-4), pml.__version__


# ---------------------------------------------------------------------------------------------
# Edge cases
# ---------------------------------------------------------------------------------------------

def test_batch_of_one_is_finite():
    emb, _, centers = _case(1, 6, 3, 2, 12)
    leaf = emb.clone().requires_grad_(True)
    loss = soft_triple(leaf, torch.tensor([2]), centers, 20.0, 0.1, 0.01, 2)
    assert torch.isfinite(loss) and loss.item() > 0
    assert loss.item() == pytest.approx(loop_soft_triple(emb, [2], centers, 2, 20.0, 0.1, 0.01).item(), rel=1e-5)
    loss.backward()
    assert torch.isfinite(leaf.grad).all() and leaf.grad.abs().sum() > 0


def test_single_class_batch_is_finite():
    emb, _, centers = _case(6, 6, 3, 2, 13)
    labels = torch.zeros(6, dtype=torch.long)
    e = emb.clone().requires_grad_(True)
    w = centers.clone().requires_grad_(True)
    loss = soft_triple(e, labels, w, 20.0, 0.1, 0.01, 2, 0.2)
    assert torch.isfinite(loss)
    assert loss.item() == pytest.approx(loop_soft_triple(emb, labels, centers, 2, 20.0, 0.1, 0.01, 0.2).item(), rel=1e-5)
    loss.backward()
    assert torch.isfinite(e.grad).all() and e.grad.abs().sum() > 0
    assert torch.isfinite(w.grad).all()
    assert w.grad[2:].abs().sum() > 0  # the absent classes' centres are negatives and move


def test_class_absent_from_batch_is_still_a_negative():
    emb, _, centers = _case(6, 6, 4, 3, 14)
    labels = torch.tensor([0, 1, 0, 1, 1, 0])  # classes 2 and 3 absent
    got = soft_triple(emb, labels, centers, 9.0, 0.1, 0.7, 3)
    assert got.item() == pytest.approx(loop_soft_triple(emb, labels, centers, 3, 9.0, 0.1, 0.7).item(), rel=1e-5)
    assert got.item() != pytest.approx(soft_triple(emb, labels, centers[:6], 9.0, 0.1, 0.7, 3).item(), rel=1e-3)


def test_coincident_centres_with_regulariser_are_finite():
    emb, labels, centers = _case(6, 5, 2, 3, 15)
    centers[1] = centers[0] * 2.0  # the same direction: distance 0 after normalisation
    w = centers.clone().requires_grad_(True)
    loss = soft_triple(emb, labels, w, 20.0, 0.1, 0.01, 3, 0.2)
    assert torch.isfinite(loss)
    loss.backward()
    assert torch.isfinite(w.grad).all()


# ---------------------------------------------------------------------------------------------
# Token-level use (Sosnowski Sec. 3.1.2)
# ---------------------------------------------------------------------------------------------

def test_flatten_tokens_keeps_only_masked_tokens():
    tokens = torch.arange(2 * 4 * 3, dtype=torch.float32).view(2, 4, 3)
    mask = torch.tensor([[1, 1, 1, 0], [1, 1, 0, 0]])
    labels = torch.tensor([5, 7])
    flat, flat_labels = flatten_tokens(tokens, mask, labels)
    assert flat.shape == (5, 3) and flat_labels.tolist() == [5, 5, 5, 7, 7]
    torch.testing.assert_close(flat, torch.cat([tokens[0, :3], tokens[1, :2]]))
    # a boolean mask gives the same
    flat_b, labels_b = flatten_tokens(tokens, mask.bool(), labels)
    assert torch.equal(flat_b, flat) and torch.equal(labels_b, flat_labels)


def test_token_level_loss_ignores_padding():
    g = torch.Generator().manual_seed(16)
    tokens = torch.randn(3, 5, 8, generator=g)
    mask = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0], [1, 1, 0, 0, 0]])
    labels = torch.tensor([0, 1, 1])
    centers = torch.randn(4, 8, generator=g)
    leaf = tokens.clone().requires_grad_(True)
    loss = soft_triple(*flatten_tokens(leaf, mask, labels), centers, 20.0, 0.1, 0.01, 2)
    # the padding's content does not matter
    garbage = tokens.clone()
    garbage[mask == 0] = 1e3 * torch.randn(int((mask == 0).sum()), 8, generator=g)
    assert soft_triple(*flatten_tokens(garbage, mask, labels), centers, 20.0, 0.1, 0.01, 2).item() == loss.item()
    # the mean over all real tokens, each with its sequence's label
    real = torch.cat([tokens[0, :5], tokens[1, :3], tokens[2, :2]])
    real_labels = torch.tensor([0] * 5 + [1] * 3 + [1] * 2)
    assert loss.item() == pytest.approx(loop_soft_triple(real, real_labels, centers, 2, 20.0, 0.1, 0.01).item(), rel=1e-5)
    loss.backward()
    assert torch.equal(leaf.grad[mask == 0], torch.zeros(int((mask == 0).sum()), 8))
    assert (leaf.grad[mask == 1].abs().sum(dim=1) > 0).all()


# ---------------------------------------------------------------------------------------------
# Module: centres are parameters that train (pitfall 3)
# ---------------------------------------------------------------------------------------------

def test_module_equals_function_and_centres_are_normalised_parameters():
    torch.manual_seed(0)
    module = SoftTripleLoss(dim=8, num_classes=3, centers_per_class=4, la=9.0, gamma=0.1, margin=0.7, center_reg=0.2)
    assert [name for name, _ in module.named_parameters()] == ["centers"]
    assert module.centers.shape == (12, 8)
    torch.testing.assert_close(module.centers.detach().norm(dim=1), torch.ones(12))
    emb, labels, _ = _case(7, 8, 3, 4, 17)
    assert module(emb, labels).item() == soft_triple(emb, labels, module.centers, 9.0, 0.1, 0.7, 4, 0.2).item()
    assert "centers_per_class=4" in repr(module) and "center_reg=0.2" in repr(module)
    # seeded by the global RNG
    torch.manual_seed(0)
    assert torch.equal(SoftTripleLoss(8, 3, 4).centers, module.centers)
    assert SoftTripleLoss(8, 3).centers.shape == (30, 8)  # K = 10 by default


def test_module_centres_get_gradient_and_move_after_a_step():
    torch.manual_seed(1)
    encoder = torch.nn.Linear(6, 8)
    module = SoftTripleLoss(dim=8, num_classes=2, centers_per_class=3, center_reg=0.2)
    optimizer = torch.optim.SGD([*encoder.parameters(), *module.parameters()], lr=0.01)
    before_c = module.centers.detach().clone()
    before_w = encoder.weight.detach().clone()
    x = torch.randn(8, 6)
    labels = torch.tensor([0, 1] * 4)
    loss = module(encoder(x), labels)
    loss.backward()
    assert module.centers.grad is not None and module.centers.grad.abs().sum() > 0
    assert encoder.weight.grad.abs().sum() > 0  # the loss alone moves the encoder (pitfall 4)
    optimizer.step()
    assert not torch.equal(module.centers.detach(), before_c)
    assert not torch.equal(encoder.weight.detach(), before_w)
    assert module(encoder(x), labels).item() < loss.item()


# ---------------------------------------------------------------------------------------------
# Mixed precision
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_input_under_autocast_is_finite_float32(dtype):
    emb, labels, centers = _case(12, 16, 3, 4, 18)
    half = emb.to(dtype).requires_grad_(True)
    w = centers.clone().requires_grad_(True)
    with torch.autocast("cpu", dtype=dtype):
        loss = soft_triple(half, labels, w, 20.0, 0.1, 0.01, 4, 0.2)
    assert loss.dtype == torch.float32 and torch.isfinite(loss)
    assert loss.item() == pytest.approx(soft_triple(half.detach().float(), labels, centers, 20.0, 0.1, 0.01, 4, 0.2).item(),
                                        rel=1e-6)
    loss.backward()
    assert half.grad.dtype == dtype and torch.isfinite(half.grad.float()).all()
    assert torch.isfinite(w.grad).all()


def test_autocast_region_computes_in_float32():
    emb, labels, centers = _case(16, 32, 3, 5, 19)
    want = soft_triple(emb, labels, centers, 20.0, 0.1, 0.01, 5)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        got = soft_triple(emb, labels, centers, 20.0, 0.1, 0.01, 5)
    assert got.dtype == torch.float32 and got.item() == pytest.approx(want.item(), rel=1e-6)


# ---------------------------------------------------------------------------------------------
# Arguments
# ---------------------------------------------------------------------------------------------

def test_bad_arguments():
    emb, labels, centers = _case(4, 3, 2, 3, 20)
    with pytest.raises(ValueError, match="centers_per_class or num_classes"):
        soft_triple(emb, labels, centers)
    with pytest.raises(ValueError, match="multiple"):
        soft_triple(emb, labels, centers, centers_per_class=4)
    with pytest.raises(ValueError, match="expected"):
        soft_triple(emb, labels, centers, centers_per_class=3, num_classes=3)
    with pytest.raises(ValueError, match="labels"):
        soft_triple(emb, torch.tensor([0, 1, 2, 0]), centers, centers_per_class=3)
    with pytest.raises(ValueError, match="labels"):
        soft_triple(emb, labels[:3], centers, centers_per_class=3)
    with pytest.raises(ValueError, match="centers"):
        soft_triple(emb, labels, centers[:, :2], centers_per_class=3)
    with pytest.raises(ValueError, match="gamma"):
        soft_triple(emb, labels, centers, gamma=0.0, centers_per_class=3)
    with pytest.raises(ValueError, match="embeddings"):
        soft_triple(emb[0], labels, centers, centers_per_class=3)
    with pytest.raises(ValueError, match="attention_mask"):
        flatten_tokens(torch.randn(2, 4, 3), torch.ones(2, 3), torch.tensor([0, 1]))


def test_sosnowski_table1():
    assert SOSNOWSKI_TABLE1[20] == {"centers_per_class": 25, "gamma": 0.1, "la": 9.0, "margin": 0.7, "beta": 0.4}
    assert SOSNOWSKI_TABLE1[100]["centers_per_class"] == SOSNOWSKI_TABLE1[1000]["centers_per_class"] == 2000
    assert math.isclose(SOSNOWSKI_TABLE1[1000]["margin"], 0.9)
