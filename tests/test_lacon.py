"""LaCon: values and gradients of ICL, LCL, LER and the total against literal loops over Zhang et
al.'s Eq. 4, 5, 6 and 7."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from contrastfit.losses import LaConLoss, LaConLossParts, lacon, lacon_predict
from loss_references import cos, ref_lacon


def _labels(labels) -> list[int]:
    return [int(v) for v in labels]


# The equations as literal loops (tests/loss_references.py), adapted to this file's arguments: any
# dtype in (differentiated back through .double()), labels as a tensor, LER weight ``lam``.

def loop_icl(emb, labels, lab_emb, t, heads):
    """Eq. 4: heads summed, instances averaged, softmax over all C labels."""
    return ref_lacon(emb.double(), _labels(labels), lab_emb.double(), t, heads, (1.0, 0.0, 0.0))[0]


def loop_lcl(emb, labels, lab_emb, t):
    """Eq. 5: anchors the labels present (with at least one negative), positives summed, denominator
    over the negatives B(p) only, labels averaged; None without an anchor."""
    return ref_lacon(emb.double(), _labels(labels), lab_emb.double(), t, 1, (0.0, 1.0, 0.0))[1]


def loop_ler(lab_emb):
    """Eq. 6: average over the pairs i != j of exp(1 + cos(L_i, L_j)) - 1."""
    lab = lab_emb.double()
    return ref_lacon(lab[:1], [0], lab, 1.0, 1, (0.0, 0.0, 1.0))[2]


def loop_total(emb, labels, lab_emb, t, heads, lam):
    """Eq. 7."""
    return ref_lacon(emb.double(), _labels(labels), lab_emb.double(), t, heads, (1.0, 1.0, lam))[3]


CASES = [
    # (n, dim, classes, heads, seed)
    (6, 4, 2, 1, 0),
    (9, 12, 3, 1, 1),
    (9, 12, 3, 3, 2),
    (8, 24, 4, 6, 3),
    (7, 8, 5, 2, 4),  # more classes than some batches hold
]


def _case(n, dim, c, seed, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    emb = torch.randn(n, dim, generator=g, dtype=torch.float64).to(dtype)
    lab = torch.randn(c, dim, generator=g, dtype=torch.float64).to(dtype)
    labels = torch.randint(0, c, (n,), generator=g)
    return emb, labels, lab


@pytest.mark.parametrize("n,dim,c,heads,seed", CASES)
@pytest.mark.parametrize("t", [0.07, 0.5])
def test_parts_match_loops(n, dim, c, heads, seed, t):
    emb, labels, lab = _case(n, dim, c, seed)
    parts = lacon(emb, labels, lab, t, heads, 0.3)
    assert isinstance(parts, LaConLossParts)
    assert all(p.dtype == torch.float32 and p.dim() == 0 for p in parts)
    assert parts.icl.item() == pytest.approx(loop_icl(emb, labels, lab, t, heads).item(), rel=1e-5, abs=1e-5)
    want_lcl = loop_lcl(emb, labels, lab, t)
    assert parts.lcl.item() == pytest.approx(want_lcl.item(), rel=1e-5, abs=1e-5)
    assert parts.ler.item() == pytest.approx(loop_ler(lab).item(), rel=1e-5, abs=1e-5)
    assert parts.total.item() == pytest.approx(loop_total(emb, labels, lab, t, heads, 0.3).item(), rel=1e-5, abs=1e-5)
    assert parts.total.item() == pytest.approx((parts.icl + parts.lcl + 0.3 * parts.ler).item(), rel=1e-6)


def test_parts_match_loops_float64():
    emb, labels, lab = _case(8, 12, 3, 5, dtype=torch.float64)
    parts = lacon(emb, labels, lab, 0.1, 4, 0.5)
    assert all(p.dtype == torch.float64 for p in parts)
    assert parts.total.item() == pytest.approx(loop_total(emb, labels, lab, 0.1, 4, 0.5).item(), rel=1e-12, abs=1e-12)


def test_heads_sum_and_heads_one_is_eq3():
    emb, labels, lab = _case(8, 12, 3, 6)
    one = lacon(emb, labels, lab, 0.1, 1).icl
    # Eq. 3 directly: cross-entropy over the full-vector cosines
    logits = F.normalize(emb, dim=1) @ F.normalize(lab, dim=1).T / 0.1
    assert one.item() == pytest.approx(F.cross_entropy(logits, labels).item(), rel=1e-6)
    # Eq. 4 sums the per-head Eq. 3 losses (no 1/m)
    three = lacon(emb, labels, lab, 0.1, 3).icl
    per_head = sum(lacon(emb[:, 4 * k:4 * k + 4], labels, lab[:, 4 * k:4 * k + 4], 0.1, 1).icl for k in range(3))
    assert three.item() == pytest.approx(per_head.item(), rel=1e-6)


def test_lcl_denominator_holds_negatives_only():
    # one positive per label: LCL = -mean_p (s_pa - logsumexp_b s_pb); no log-softmax over all instances
    emb, _, lab = _case(3, 6, 3, 7)
    labels = torch.tensor([0, 1, 2])
    s = F.normalize(lab, dim=1) @ F.normalize(emb, dim=1).T / 0.2
    want = -sum(s[p, p] - torch.logsumexp(s[p, [j for j in range(3) if j != p]], 0) for p in range(3)) / 3
    assert lacon(emb, labels, lab, 0.2, 1).lcl.item() == pytest.approx(want.item(), rel=1e-6)
    # a positive that is very close to its label gives a negative per-pair term
    lab2 = torch.eye(2, 4)
    emb2 = torch.tensor([[1.0, 0, 0, 0], [-1.0, 0, 0, 0]])
    assert lacon(emb2, torch.tensor([0, 1]), lab2, 0.1, 1).lcl.item() < 0


@pytest.mark.parametrize("n,dim,c,heads,seed", CASES)
def test_gradients_match_loops(n, dim, c, heads, seed):
    emb, labels, lab = _case(n, dim, c, seed)
    e = emb.clone().requires_grad_(True)
    w = lab.clone().requires_grad_(True)
    parts = lacon(e, labels, w, 0.1, heads, 0.4)
    refs = {
        "icl": loop_icl(e, labels, w, 0.1, heads),
        "lcl": loop_lcl(e, labels, w, 0.1),
        "total": loop_total(e, labels, w, 0.1, heads, 0.4),
    }
    for name, ref in refs.items():
        g_e, g_w = torch.autograd.grad(getattr(parts, name), (e, w), retain_graph=True)
        r_e, r_w = torch.autograd.grad(ref, (e, w))
        assert g_e.abs().max() > 1e-4 and g_w.abs().max() > 1e-4, name
        torch.testing.assert_close(g_e, r_e.float(), rtol=1e-4, atol=1e-5, msg=name)
        torch.testing.assert_close(g_w, r_w.float(), rtol=1e-4, atol=1e-5, msg=name)
    # LER depends on the label embeddings only
    (g_w,) = torch.autograd.grad(parts.ler, w, retain_graph=True)
    (r_w,) = torch.autograd.grad(loop_ler(w), w)
    torch.testing.assert_close(g_w, r_w.float(), rtol=1e-4, atol=1e-5)
    assert torch.autograd.grad(parts.ler, e, allow_unused=True)[0] is None


def test_gradcheck_float64():
    emb, labels, lab = _case(5, 6, 3, 8, dtype=torch.float64)
    e = emb.clone().requires_grad_(True)
    w = lab.clone().requires_grad_(True)
    assert torch.autograd.gradcheck(lambda a, b: lacon(a, labels, b, 0.2, 2, 0.5).total, (e, w),
                                    eps=1e-6, atol=1e-5, fast_mode=True)


def test_value_is_not_trivial():
    emb, labels, lab = _case(8, 12, 3, 9)
    base = lacon(emb, labels, lab, 0.1, 2, 0.5)
    assert base.total.item() != pytest.approx(lacon(emb, labels, lab, 0.3, 2, 0.5).total.item(), rel=1e-3)
    assert base.icl.item() != pytest.approx(lacon(emb, labels, lab, 0.1, 3).icl.item(), rel=1e-3)
    assert base.lcl.item() != pytest.approx(lacon(emb, (labels + 1) % 3, lab, 0.1, 2).lcl.item(), rel=1e-3)
    assert base.ler.item() > 0
    # LCL and LER do not depend on the heads; the total does through ICL only
    assert base.lcl.item() == lacon(emb, labels, lab, 0.1, 4).lcl.item()
    # whole rows rescaled change nothing: everything is a cosine
    assert lacon(emb * 3.0, labels, lab * 0.2, 0.1, 2, 0.5).total.item() == pytest.approx(base.total.item(), rel=1e-5)


def test_ler_range():
    # identical labels: exp(2) - 1; antipodal pair: 0
    same = torch.ones(3, 4)
    assert lacon(torch.randn(2, 4), torch.tensor([0, 1]), same, heads=1).ler.item() == pytest.approx(math.e ** 2 - 1, rel=1e-6)
    opposite = torch.tensor([[1.0, 0.0], [-1.0, 0.0]])
    assert lacon(torch.randn(2, 2), torch.tensor([0, 1]), opposite, heads=1).ler.item() == pytest.approx(0.0, abs=1e-6)


# ---------------------------------------------------------------------------------------------
# Absent classes, batch of one, single-class batch (pitfalls 1-2)
# ---------------------------------------------------------------------------------------------

def test_class_absent_from_batch():
    emb, _, lab = _case(6, 8, 4, 10)
    labels = torch.tensor([0, 2, 0, 2, 2, 0])  # classes 1 and 3 absent
    e = emb.clone().requires_grad_(True)
    w = lab.clone().requires_grad_(True)
    parts = lacon(e, labels, w, 0.1, 2, 0.5)
    assert parts.lcl.item() == pytest.approx(loop_lcl(emb, labels, lab, 0.1).item(), rel=1e-5)
    assert parts.total.item() == pytest.approx(loop_total(emb, labels, lab, 0.1, 2, 0.5).item(), rel=1e-5)
    # LCL has only the 2 present labels as anchors (divides by |P| = 2, not C = 4) ...
    s = F.normalize(lab, dim=1) @ F.normalize(emb, dim=1).T / 0.1
    by_hand = 0.0
    for p in (0, 2):
        a = (labels == p).nonzero().flatten()
        b = (labels != p).nonzero().flatten()
        by_hand = by_hand - (s[p, a] - torch.logsumexp(s[p, b], 0)).sum()
    assert parts.lcl.item() == pytest.approx((by_hand / 2).item(), rel=1e-5)
    # ... but the absent labels are negatives of ICL and in LER: they get a gradient
    parts.total.backward()
    assert w.grad[1].abs().sum() > 0 and w.grad[3].abs().sum() > 0
    (g_lcl,) = torch.autograd.grad(lacon(emb, labels, w, 0.1, 2).lcl, w)
    assert torch.equal(g_lcl[[1, 3]], torch.zeros(2, 8))


def test_batch_of_one():
    emb, _, lab = _case(1, 6, 3, 11)
    labels = torch.tensor([1])
    e = emb.clone().requires_grad_(True)
    w = lab.clone().requires_grad_(True)
    parts = lacon(e, labels, w, 0.1, 2, 0.5)
    assert all(torch.isfinite(p) for p in parts)
    assert parts.lcl.item() == 0.0 and parts.lcl.requires_grad  # no negative: no LCL anchor
    assert parts.icl.item() == pytest.approx(loop_icl(emb, labels, lab, 0.1, 2).item(), rel=1e-5)
    assert parts.total.item() == pytest.approx(loop_total(emb, labels, lab, 0.1, 2, 0.5).item(), rel=1e-5)
    parts.total.backward()
    assert torch.isfinite(e.grad).all() and e.grad.abs().sum() > 0
    assert torch.isfinite(w.grad).all() and w.grad.abs().sum() > 0


def test_single_class_batch():
    emb, _, lab = _case(6, 6, 3, 12)
    labels = torch.full((6,), 2)
    e = emb.clone().requires_grad_(True)
    w = lab.clone().requires_grad_(True)
    parts = lacon(e, labels, w, 0.1, 3, 0.5)
    assert all(torch.isfinite(p) for p in parts)
    assert parts.lcl.item() == 0.0 and not torch.isnan(parts.lcl)
    assert parts.total.item() == pytest.approx(loop_total(emb, labels, lab, 0.1, 3, 0.5).item(), rel=1e-5)
    (g_lcl,) = torch.autograd.grad(parts.lcl, e, retain_graph=True)
    assert torch.equal(g_lcl, torch.zeros_like(e))
    parts.total.backward()
    assert torch.isfinite(e.grad).all() and e.grad.abs().sum() > 0  # ICL still trains the encoder
    assert torch.isfinite(w.grad).all()


def test_single_label_task_ler_is_zero_with_graph():
    w = torch.randn(1, 4, requires_grad=True)
    parts = lacon(torch.randn(3, 4), torch.zeros(3, dtype=torch.long), w, 0.1, 2)
    assert parts.ler.item() == 0.0 and parts.ler.requires_grad
    assert parts.icl.item() == pytest.approx(0.0, abs=1e-6)  # a softmax over one label


# ---------------------------------------------------------------------------------------------
# Mixed precision, label-embedding training (pitfall 3)
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_input_under_autocast_is_finite_float32(dtype):
    emb, labels, lab = _case(12, 12, 3, 13)
    half = emb.to(dtype).requires_grad_(True)
    w = lab.clone().requires_grad_(True)
    with torch.autocast("cpu", dtype=dtype):
        parts = lacon(half, labels, w, 0.05, 3, 0.5)
        logits = lacon_predict(half, w)
    assert all(p.dtype == torch.float32 and torch.isfinite(p) for p in parts)
    assert logits.dtype == torch.float32
    want = lacon(half.detach().float(), labels, lab, 0.05, 3, 0.5)
    assert parts.total.item() == pytest.approx(want.total.item(), rel=1e-6)
    parts.total.backward()
    assert half.grad.dtype == dtype and torch.isfinite(half.grad.float()).all()
    assert torch.isfinite(w.grad).all() and w.grad.abs().sum() > 0


def test_label_embeddings_get_gradient_and_move_after_a_step():
    torch.manual_seed(2)
    encoder = torch.nn.Linear(5, 12)
    label_embeddings = torch.nn.Embedding(3, 12)  # lives in the model head
    loss_fn = LaConLoss(temperature=0.1, heads=3, ler_weight=0.5)
    optimizer = torch.optim.SGD([*encoder.parameters(), *label_embeddings.parameters()], lr=0.05)
    x = torch.randn(9, 5)
    labels = torch.tensor([0, 1, 2] * 3)
    before = label_embeddings.weight.detach().clone()
    parts = loss_fn(encoder(x), labels, label_embeddings.weight)
    parts.total.backward()
    assert label_embeddings.weight.grad.abs().sum(dim=1).min() > 0
    assert encoder.weight.grad.abs().sum() > 0
    optimizer.step()
    assert not torch.equal(label_embeddings.weight.detach(), before)
    assert loss_fn(encoder(x), labels, label_embeddings.weight).total.item() < parts.total.item()


# ---------------------------------------------------------------------------------------------
# Prediction (Eq. 8), module, arguments
# ---------------------------------------------------------------------------------------------

def test_predict_is_cosine_matrix():
    emb, labels, lab = _case(7, 8, 4, 14)
    got = lacon_predict(emb, lab)
    assert got.shape == (7, 4) and got.dtype == torch.float32
    for i in range(7):
        for j in range(4):
            assert got[i, j].item() == pytest.approx(cos(emb[i].double(), lab[j].double()).item(), rel=1e-5, abs=1e-6)
    # a label embedding equal (up to scale) to an instance is its prediction
    lab2 = lab.clone()
    lab2[2] = emb[0] * 4.0
    assert lacon_predict(emb, lab2)[0].argmax().item() == 2
    assert lacon_predict(emb.double(), lab).dtype == torch.float64


def test_module_equals_function():
    emb, labels, lab = _case(9, 12, 3, 15)
    module = LaConLoss(temperature=0.2, heads=4, ler_weight=0.3)
    got, want = module(emb, labels, lab), lacon(emb, labels, lab, 0.2, 4, 0.3)
    assert all(a.item() == b.item() for a, b in zip(got, want))
    assert list(module.parameters()) == []
    assert "heads=4" in repr(module) and "ler_weight=0.3" in repr(module)
    default = LaConLoss()
    assert (default.temperature, default.heads, default.ler_weight) == (0.1, 6, 0.5)
    assert lacon(emb, labels, lab).total.item() == lacon(emb, labels, lab, 0.1, 6, 0.5).total.item()


def test_non_contiguous_embeddings():
    g = torch.Generator().manual_seed(16)
    hidden = torch.randn(5, 7, 12, generator=g)
    cls = hidden[:, 0]  # a strided view, as a pooled [CLS] is
    lab = torch.randn(3, 12, generator=g)
    labels = torch.tensor([0, 1, 2, 0, 1])
    assert lacon(cls, labels, lab, 0.1, 3).total.item() == lacon(cls.contiguous(), labels, lab, 0.1, 3).total.item()


def test_bad_arguments():
    emb, labels, lab = _case(4, 6, 3, 17)
    with pytest.raises(ValueError, match="heads"):
        lacon(emb, labels, lab, 0.1, 4)
    with pytest.raises(ValueError, match="temperature"):
        lacon(emb, labels, lab, 0.0, 2)
    with pytest.raises(ValueError, match="labels"):
        lacon(emb, torch.tensor([0, 1, 3, 0]), lab, 0.1, 2)
    with pytest.raises(ValueError, match="labels"):
        lacon(emb, labels[:3], lab, 0.1, 2)
    with pytest.raises(ValueError, match="label_embeddings"):
        lacon(emb, labels, lab[:, :4], 0.1, 2)
    with pytest.raises(ValueError, match="embeddings"):
        lacon_predict(emb[0], lab)


# ---------------------------------------------------------------------------------------------
# Term weights for the ablations (Tables 3 and 6): total = w_icl ICL + w_lcl LCL + w_ler LER
# ---------------------------------------------------------------------------------------------

WEIGHTS = [(1.0, 1.0, 0.5), (0.3, 2.0, 0.7), (2.5, 0.0, 1.0), (0.0, 1.5, 0.2), (1.0, 1.0, 0.0), (1.0, 0.0, 0.0),
           (0.0, 1.0, 0.0)]


@pytest.mark.parametrize("w_icl,w_lcl,w_ler", WEIGHTS)
def test_weighted_total_is_the_weighted_sum_of_the_parts(w_icl, w_lcl, w_ler):
    emb, labels, lab = _case(9, 12, 3, 20)
    parts = lacon(emb, labels, lab, 0.2, 3, w_ler, icl_weight=w_icl, lcl_weight=w_lcl)
    # the parts themselves do not depend on the weights (they are returned unweighted)
    plain = lacon(emb, labels, lab, 0.2, 3)
    assert (parts.icl.item(), parts.lcl.item(), parts.ler.item()) == (plain.icl.item(), plain.lcl.item(), plain.ler.item())
    # each part computed separately by the literal loops, then weighted by hand
    icl, lcl, ler = loop_icl(emb, labels, lab, 0.2, 3), loop_lcl(emb, labels, lab, 0.2), loop_ler(lab)
    want = w_icl * icl.item() + w_lcl * lcl.item() + w_ler * ler.item()
    assert parts.total.item() == pytest.approx(want, rel=1e-5, abs=1e-6)
    assert parts.total.item() == pytest.approx((w_icl * plain.icl + w_lcl * plain.lcl + w_ler * plain.ler).item(), rel=1e-6)


def test_a_zero_weight_leaves_exactly_the_other_terms():
    emb, labels, lab = _case(10, 12, 3, 21)
    full = lacon(emb, labels, lab, 0.1, 3, 0.5)
    # -ICL, -LCL, -LER (Table 3): bit-for-bit the sum of the remaining terms
    assert torch.equal(lacon(emb, labels, lab, 0.1, 3, 0.5, icl_weight=0.0).total, full.lcl + 0.5 * full.ler)
    assert torch.equal(lacon(emb, labels, lab, 0.1, 3, 0.5, lcl_weight=0.0).total, full.icl + 0.5 * full.ler)
    assert torch.equal(lacon(emb, labels, lab, 0.1, 3, 0.0).total, full.icl + full.lcl)
    assert torch.equal(lacon(emb, labels, lab, 0.1, 3, 0.0, lcl_weight=0.0).total, full.icl)  # L'_ICL alone
    # the default weights are Eq. 7 exactly
    assert torch.equal(full.total, full.icl + full.lcl + 0.5 * full.ler)
    # and the removed term sends no gradient: -ICL's gradient is that of LCL + 0.5 LER
    e = emb.clone().requires_grad_(True)
    w = lab.clone().requires_grad_(True)
    got = torch.autograd.grad(lacon(e, labels, w, 0.1, 3, 0.5, icl_weight=0.0).total, (e, w))
    ref = lacon(e, labels, w, 0.1, 3, 0.5)
    want = torch.autograd.grad(ref.lcl + 0.5 * ref.ler, (e, w))
    for g, r in zip(got, want):
        torch.testing.assert_close(g, r, rtol=0, atol=0)
    # -LCL-and-LER on a batch whose LCL has no anchor: ICL alone, still finite
    single = lacon(emb[:3], torch.tensor([1, 1, 1]), lab, 0.1, 3, 0.0, lcl_weight=0.0)
    assert torch.isfinite(single.total) and single.total.item() == single.icl.item()


def test_weights_are_checked_and_the_module_passes_them():
    emb, labels, lab = _case(6, 6, 2, 22)
    with pytest.raises(ValueError, match="all 0"):
        lacon(emb, labels, lab, 0.1, 2, 0.0, icl_weight=0.0, lcl_weight=0.0)
    for name in ("icl_weight", "lcl_weight"):
        with pytest.raises(ValueError, match=f"{name} must be >= 0"):
            lacon(emb, labels, lab, 0.1, 2, **{name: -0.5})
        with pytest.raises(ValueError, match=f"{name} must be finite, got nan"):
            lacon(emb, labels, lab, 0.1, 2, **{name: float("nan")})
    module = LaConLoss(temperature=0.1, heads=2, ler_weight=0.4, icl_weight=0.0, lcl_weight=2.0)
    got = module(emb, labels, lab)
    assert got.total.item() == lacon(emb, labels, lab, 0.1, 2, 0.4, icl_weight=0.0, lcl_weight=2.0).total.item()
    assert "icl_weight=0.0" in repr(module) and "lcl_weight=2.0" in repr(module)
    assert (LaConLoss().icl_weight, LaConLoss().lcl_weight) == (1.0, 1.0)
