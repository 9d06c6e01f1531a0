"""Property-based tests (hypothesis) of every loss in ``contrastfit.losses``.

Each test draws a batch: its size (1-10), the label pattern (random, one class, all distinct, one pair
and singletons), the temperature (log-uniform on [1e-3, 1e3]; for SoftTriple the scale ``la`` and the
centre temperature ``gamma``), every row's magnitude (1e-4 .. 1e4, or a near-zero row of norm about
1e-6 or 1e-8, or a zero row), the input dtype (fp16, bf16, fp32, fp64) and whether the call runs
under CPU bf16 autocast. The properties:

* the loss is finite, computed in float32 (float64 when an input is float64), whatever the input dtype
  and autocast (the losses' shared convention, ``contrastfit.losses._common``);
* the gradient of every input is finite and has the input's dtype, zero and near-zero rows included:
  the normalisation is ``x / max(||x||, eps)`` with eps 2^-8 for an fp16 input and 1e-12 otherwise
  (``NORM_EPS``, the convention of ``contrastfit.losses._common``), so a zero row's gradient is at most
  256 (fp16) or 1e12 times the gradient of its normalised row, not 1e12 times in fp16. One exception is
  inherent to fp16: where the gradient of that function is larger than fp16 can hold (about 6.5e4, e.g.
  tau = 1e-3 on rows of norm 1e-2) no fp16 value is right, so it is only checked where it fits
  (``test_near_zero_rows_default_hyperparameters``: with each loss's default hyper-parameters it fits,
  and is finite, on batches holding zero rows and rows of norm 1e-8 .. 1e-4);
* where the paper's equation is defined, the loss and its gradient equal a reference written in
  ``tests/loss_references.py`` as a literal loop over the equation's indices (i, p, a, c, k, ...) in
  float64, with its own log-sum-exp (so that tau = 1e-3 does not overflow), never calling the
  function under test, with the same normalisation eps. The
  inputs of the reference are the test inputs after rounding to their dtype, so the tolerance only
  covers the loss's arithmetic: a few float32 (float64) epsilons, scaled by how sharp the softmax
  is (1/tau), plus the rounding of a half-precision gradient;
* where a docstring promises a degenerate-batch behaviour (no positive at all, a batch of one, no
  counted token), the loss is exactly 0 **with the graph intact**: it requires grad and back-propagates
  a zero gradient (pitfall 1 in docs/pitfalls.md);
* an empty batch gives every loss 0 with the graph intact (a mean over no anchor is 0); the terms that
  do not depend on the batch (LaCon's LER, SoftTriple's centre regulariser) are computed as usual;
* a non-finite hyper-parameter (NaN, +-inf: temperature, la, gamma, margin, center_reg, the LaCon
  weights, lam, hard_negative_weight except -inf) raises a one-line ``ValueError`` naming it and its value.

Profiles: ``losses`` (default: 50 examples a test, about 20 s for the file on 2 CPU cores) and
``losses-thorough`` (1,000 examples a test), chosen with ``CONTRASTFIT_HYPOTHESIS_PROFILE``. No
example database is written (``database=None``); a failure prints the example and its
``@reproduce_failure`` blob.
"""

from __future__ import annotations

import contextlib
import math
import os

import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from contrastfit.losses import (cosine_pairs, diffcse_loss, lacon, lacon_predict, replaced_token_detection,
                                simcse_sup, simcse_unsup, soft_triple, supcon)
from loss_references import (cos, ref_cosine_pairs, ref_lacon, ref_rtd, ref_simcse, ref_soft_triple,
                             ref_supcon)

settings.register_profile("losses", max_examples=50, deadline=None, database=None, print_blob=True,
                          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
settings.register_profile("losses-thorough", settings.get_profile("losses"), max_examples=1000)
PROFILE = settings.get_profile(os.environ.get("CONTRASTFIT_HYPOTHESIS_PROFILE", "losses"))

DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
#: Relative rounding of a gradient stored in the input's dtype (half an ulp), and the absolute
#: rounding of an fp16 gradient that underflows to a subnormal.
GRAD_ROUNDING = {torch.float16: 2.0 ** -11, torch.bfloat16: 2.0 ** -8, torch.float32: 0.0, torch.float64: 0.0}
GRAD_UNDERFLOW = {torch.float16: 2.0 ** -24, torch.bfloat16: 0.0, torch.float32: 0.0, torch.float64: 0.0}
#: The normalisation's eps by input dtype (``contrastfit.losses._common``): 2^-8 for fp16, 1e-12 otherwise.
NORM_EPS = {torch.float16: 2.0 ** -8, torch.bfloat16: 1e-12, torch.float32: 1e-12, torch.float64: 1e-12}
#: How many machine epsilons of the compute dtype the loss may be off, per unit of sharpness.
VALUE_EPS = 16
GRAD_EPS = 32


# ---------------------------------------------------------------------------------------------
# Strategies
# ---------------------------------------------------------------------------------------------

log_uniform = st.floats(min_value=-3.0, max_value=3.0).map(lambda e: 10.0 ** e)
precision = st.tuples(st.sampled_from(DTYPES), st.booleans())  # (input dtype, under CPU bf16 autocast)


@st.composite
def label_lists(draw, n: int, num_classes: int | None = None) -> list[int]:
    """Labels of a batch of ``n`` in [0, num_classes) (unbounded when None) in one of four patterns."""
    c = num_classes if num_classes is not None else n
    pattern = draw(st.sampled_from(["random", "one class", "all distinct", "one pair and singletons"]))
    if pattern == "one class":
        return [draw(st.integers(0, c - 1))] * n
    if pattern == "all distinct" and n <= c:
        return draw(st.permutations(range(c)))[:n]
    if pattern == "one pair and singletons" and 2 <= n <= c + 1:
        rest = draw(st.permutations(range(c)))[: n - 1]
        return [rest[0]] + rest  # rest[0] twice, every other label once
    return draw(st.lists(st.integers(0, c - 1), min_size=n, max_size=n))


#: A row's magnitude: its largest entry is about 10^e; None is a zero row. 1e-8 rounds to a zero row in fp16.
ROW_EXPONENTS = (None, -8, -6, -4, -3, -2, -1, 0, 1, 2, 3, 4)


@st.composite
def rows(draw, n: int, d: int, dtype: torch.dtype) -> torch.Tensor:
    """(n, d) in ``dtype``: random directions, row i's largest entry between 10^e_i / 2 and 10^e_i
    with e_i drawn from ``ROW_EXPONENTS`` (all entries within fp16's range), or a zero row."""
    seed = draw(st.integers(0, 2 ** 32 - 1))
    exponents = draw(st.lists(st.sampled_from(ROW_EXPONENTS), min_size=n, max_size=n))
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, d, generator=g, dtype=torch.float64)
    x = x / x.abs().amax(dim=1, keepdim=True)
    jitter = 0.5 + 0.5 * torch.rand(n, generator=g, dtype=torch.float64)
    scale = torch.tensor([0.0 if e is None else 10.0 ** e for e in exponents], dtype=torch.float64) * jitter
    return (x * scale.view(-1, 1)).to(dtype)


# ---------------------------------------------------------------------------------------------
# Checks
# ---------------------------------------------------------------------------------------------

def run(fn, leaves, autocast: bool):
    ctx = torch.autocast("cpu", dtype=torch.bfloat16) if autocast else contextlib.nullcontext()
    with ctx:
        return fn(*leaves)


def leaves_of(*tensors):
    """Leaves for the loss (in their own dtypes) and float64 copies of the same values for the reference."""
    mine = [t.detach().clone().requires_grad_(True) for t in tensors]
    ref = [t.detach().double().requires_grad_(True) for t in tensors]
    return mine, ref


def compute_dtype(tensors) -> torch.dtype:
    return torch.float64 if any(t.dtype == torch.float64 for t in tensors) else torch.float32


def row_norms(x: torch.Tensor, chunks: int = 1) -> torch.Tensor:
    """Per-element max(norm, eps) of the (chunk of the) row each element belongs to: the gradient of a
    normalised row scales as 1 / max(norm, eps), so gradients are compared after multiplying by it."""
    n, d = x.shape
    parts = x.detach().double().reshape(n, chunks, d // chunks)
    norms = parts.norm(dim=2, keepdim=True).clamp_min(NORM_EPS[x.dtype])
    return norms.expand(n, chunks, d // chunks).reshape(n, d)


def assert_finite_loss(loss: torch.Tensor, dtype: torch.dtype) -> None:
    assert loss.dim() == 0 and loss.dtype == dtype, (loss.shape, loss.dtype, dtype)
    assert torch.isfinite(loss), loss


def assert_value(got: torch.Tensor, want: torch.Tensor, sharpness: float, extra: float = 0.0) -> None:
    eps = torch.finfo(got.dtype).eps
    tol = VALUE_EPS * eps * (abs(want.item()) + 1.0 + sharpness) + extra
    assert abs(got.item() - want.item()) <= tol, (got.item(), want.item(), tol)


def assert_gradients(loss, leaves, want, ref_leaves, sharpness: float, unit: float, norms,
                     compare: bool = True) -> None:
    """Every gradient is finite and in its input's dtype; with ``compare``, it equals the reference's.

    Error model: the gradient of a normalised row is (dL/dz) / ||row||, so gradients are compared
    after multiplying by ``norms``. In the compute dtype, a softmax of logits of scale ``sharpness``
    (1/tau) has a relative error of about eps * (1 + sharpness), and a sum of terms of size ``unit``
    that cancels keeps an absolute error of about eps * unit; a half-precision gradient adds its own
    rounding, relative to itself (and fp16's subnormal step where it underflows)."""
    grads = torch.autograd.grad(loss, leaves, retain_graph=True, allow_unused=True)
    if want is not None and want.requires_grad:
        ref_grads = torch.autograd.grad(want, ref_leaves, retain_graph=True, allow_unused=True)
    else:
        ref_grads = [None] * len(leaves)
    eps = torch.finfo(loss.dtype).eps
    for leaf, g, r, norm in zip(leaves, grads, ref_grads, norms):
        g = torch.zeros_like(leaf) if g is None else g  # None: an input the term does not use (LaCon's LER)
        assert g.dtype == leaf.dtype
        if g.numel() == 0:  # an empty batch's embeddings
            continue
        r = torch.zeros_like(g, dtype=torch.float64) if r is None else r
        if leaf.dtype == torch.float16 and r.abs().max() >= 0.5 * torch.finfo(torch.float16).max:
            continue  # the exact gradient does not fit fp16 (see the module docstring)
        assert torch.isfinite(g).all(), g
        if not compare:
            continue
        scaled = (r * norm).abs().max().item()
        tol = ((GRAD_EPS * eps * (1.0 + sharpness) * (scaled + unit) + GRAD_ROUNDING[leaf.dtype] * scaled) / norm
               + GRAD_UNDERFLOW[leaf.dtype])
        err = (g.double() - r).abs()
        assert (err <= tol).all(), (err / tol).max()


def assert_connected_zero(loss, leaves) -> None:
    """The documented degenerate case: exactly 0, still a function of the inputs, zero gradient."""
    assert loss.item() == 0.0 and loss.requires_grad
    for g in torch.autograd.grad(loss, leaves, retain_graph=True, allow_unused=True):
        assert g is None or torch.equal(g, torch.zeros_like(g))  # None: an input the term does not use


# ---------------------------------------------------------------------------------------------
# SupCon
# ---------------------------------------------------------------------------------------------

@PROFILE
@given(data=st.data(), n=st.integers(1, 10), d=st.integers(1, 8), t=log_uniform, prec=precision)
def test_supcon(data, n, d, t, prec):
    dtype, autocast = prec
    x = data.draw(rows(n, d, dtype))
    labels = data.draw(label_lists(n, 2 * n))
    (leaf,), (ref_leaf,) = leaves_of(x)
    loss = run(lambda e: supcon(e, torch.tensor(labels), t), [leaf], autocast)
    assert_finite_loss(loss, compute_dtype([x]))
    want = ref_supcon(ref_leaf, labels, t, NORM_EPS[dtype])
    if want is None:  # no anchor has a positive (all distinct, a batch of one)
        assert_connected_zero(loss, [leaf])
        return
    assert_value(loss, want, 2 / t)
    assert_gradients(loss, [leaf], want, [ref_leaf], 2 / t, 2 / t, [row_norms(x)])


# ---------------------------------------------------------------------------------------------
# SetFit's cosine-pair loss
# ---------------------------------------------------------------------------------------------

@PROFILE
@given(data=st.data(), n=st.integers(1, 10), d=st.integers(1, 8), prec=precision)
def test_cosine_pairs(data, n, d, prec):
    dtype, autocast = prec
    x = data.draw(rows(n, d, dtype))
    labels = data.draw(label_lists(n, 2 * n))
    (leaf,), (ref_leaf,) = leaves_of(x)
    loss = run(lambda e: cosine_pairs(e, torch.tensor(labels)), [leaf], autocast)
    assert_finite_loss(loss, compute_dtype([x]))
    want = ref_cosine_pairs(ref_leaf, labels, NORM_EPS[dtype])
    if want is None:  # a batch of one: no pair
        assert_connected_zero(loss, [leaf])
        return
    assert 0.0 <= loss.item() <= 4.0 + 1e-5  # (cos - 1)^2 <= 4 and cos^2 <= 1, averaged
    assert_value(loss, want, 1.0)
    assert_gradients(loss, [leaf], want, [ref_leaf], 1.0, 1.0, [row_norms(x)])


# ---------------------------------------------------------------------------------------------
# SoftTriple
# ---------------------------------------------------------------------------------------------

def _regular_centres(w: torch.Tensor, n_classes: int, k: int, center_reg: float) -> bool:
    """Qian's regulariser sqrt(2 - 2 cos) is not differentiable where two centres of a class coincide
    (always in one dimension), and ill-conditioned near it: compare there only what is finite."""
    wd, eps = w.double(), NORM_EPS[w.dtype]
    gaps = [2.0 - 2.0 * cos(wd[c * k + a], wd[c * k + b], eps, eps).item()
            for c in range(n_classes) for a in range(k) for b in range(a + 1, k)]
    return center_reg == 0 or not gaps or min(gaps) > 1e-2


@PROFILE
@given(data=st.data(), n=st.integers(1, 8), d=st.integers(1, 6), n_classes=st.integers(1, 4), k=st.integers(1, 3),
       la=log_uniform, gamma=log_uniform, margin=st.floats(0.0, 1.0),
       center_reg=st.sampled_from([0.0, 0.2, 1.0]), prec=precision)
def test_soft_triple(data, n, d, n_classes, k, la, gamma, margin, center_reg, prec):
    dtype, autocast = prec
    x = data.draw(rows(n, d, dtype))
    w = data.draw(rows(n_classes * k, d, dtype))
    labels = data.draw(label_lists(n, n_classes))
    leaves, ref = leaves_of(x, w)
    loss = run(lambda e, c: soft_triple(e, torch.tensor(labels), c, la, gamma, margin, k, center_reg), leaves, autocast)
    assert_finite_loss(loss, compute_dtype([x, w]))
    eps = NORM_EPS[dtype]
    want = ref_soft_triple(ref[0], labels, ref[1], k, la, gamma, margin, center_reg, eps, eps)
    regular = _regular_centres(w, n_classes, k, center_reg)
    sharpness = la * (1.0 + 1.0 / gamma)
    if regular:
        assert_value(loss, want, sharpness)
    else:
        assert_value(loss, want, sharpness, extra=center_reg * math.sqrt(VALUE_EPS * torch.finfo(loss.dtype).eps))
    unit = la + 10 * center_reg  # the regulariser's gradient is at most center_reg / gap where compared
    assert_gradients(loss, leaves, want, ref, sharpness, unit, [row_norms(x), row_norms(w)], compare=regular)


# ---------------------------------------------------------------------------------------------
# LaCon (every term, the weights of the ablations, the prediction)
# ---------------------------------------------------------------------------------------------

@PROFILE
@given(data=st.data(), n=st.integers(1, 8), heads=st.integers(1, 3), width=st.integers(1, 3), c=st.integers(1, 4),
       t=log_uniform, weights=st.tuples(*[st.sampled_from([0.0, 0.5, 1.0, 1.7])] * 3).filter(any),
       prec=precision)
def test_lacon(data, n, heads, width, c, t, weights, prec):
    dtype, autocast = prec
    d = heads * width
    x = data.draw(rows(n, d, dtype))
    lab = data.draw(rows(c, d, dtype))
    labels = data.draw(label_lists(n, c))
    leaves, ref = leaves_of(x, lab)
    w_icl, w_lcl, w_ler = weights
    parts = run(lambda e, l_: lacon(e, torch.tensor(labels), l_, t, heads, w_ler, icl_weight=w_icl, lcl_weight=w_lcl),
                leaves, autocast)
    cdtype = compute_dtype([x, lab])
    for part in parts:
        assert_finite_loss(part, cdtype)
    eps = NORM_EPS[dtype]
    icl, lcl, ler, total = ref_lacon(ref[0], labels, ref[1], t, heads, weights, eps, eps)
    sharpness = (heads + n) / t
    norms = [row_norms(x, heads), row_norms(lab, heads)]
    assert_value(parts.icl, icl, heads / t)
    assert_gradients(parts.icl, leaves, icl, ref, heads / t, heads / t, norms)
    if lcl is None:  # every row has one label (single class, a batch of one): no anchor
        assert_connected_zero(parts.lcl, leaves)
    else:
        assert_value(parts.lcl, lcl, n / t)
        assert_gradients(parts.lcl, leaves, lcl, ref, n / t, n / t, norms)
    if ler is None:  # one label: no pair
        assert_connected_zero(parts.ler, leaves[1:])  # LER is a function of the label embeddings only
    else:
        assert 0.0 <= parts.ler.item() <= math.e ** 2 - 1 + 1e-5  # the range Sec. 2.4 states
        assert_value(parts.ler, ler, 1.0)
    if not torch.is_tensor(total):  # the weighted terms are all undefined, e.g. LCL alone on one class
        assert_connected_zero(parts.total, leaves)
    else:
        assert_value(parts.total, total, sharpness)
        # a zero weight leaves its term out: no gradient comes from it (the reference sums the others only)
        assert_gradients(parts.total, leaves, total, ref, sharpness, sharpness + 8 * w_ler, norms)

    with torch.autocast("cpu", dtype=torch.bfloat16) if autocast else contextlib.nullcontext():
        predicted = lacon_predict(x, lab)
    assert predicted.dtype == cdtype and predicted.shape == (n, c)
    xd, ld = x.double(), lab.double()
    for i in range(n):
        for j in range(c):
            want = cos(xd[i], ld[j], eps, eps).item()
            assert abs(predicted[i, j].item() - want) <= VALUE_EPS * torch.finfo(cdtype).eps


# ---------------------------------------------------------------------------------------------
# SimCSE (unsupervised, supervised with hard negatives) and DiffCSE's objective
# ---------------------------------------------------------------------------------------------

@PROFILE
@given(data=st.data(), n=st.integers(1, 8), d=st.integers(1, 8), t=log_uniform, prec=precision)
def test_simcse_unsup(data, n, d, t, prec):
    dtype, autocast = prec
    z1, z2 = data.draw(rows(n, d, dtype)), data.draw(rows(n, d, dtype))
    leaves, ref = leaves_of(z1, z2)
    loss = run(lambda a, b: simcse_unsup(a, b, t), leaves, autocast)
    assert_finite_loss(loss, compute_dtype([z1, z2]))
    if n == 1:  # the single positive is the whole softmax
        assert_connected_zero(loss, leaves)
        return
    want = ref_simcse(*ref, None, t, eps=NORM_EPS[dtype])
    assert_value(loss, want, 2 / t)
    assert_gradients(loss, leaves, want, ref, 2 / t, 2 / t, [row_norms(z1), row_norms(z2)])


@PROFILE
@given(data=st.data(), n=st.integers(1, 8), d=st.integers(1, 8), t=log_uniform,
       weight=st.one_of(st.just(0.0), st.just(-math.inf), st.floats(-5.0, 5.0)), masked=st.booleans(), prec=precision)
def test_simcse_sup(data, n, d, t, weight, masked, prec):
    dtype, autocast = prec
    a, p, h = (data.draw(rows(n, d, dtype)) for _ in range(3))
    has_negative = data.draw(st.lists(st.booleans(), min_size=n, max_size=n)) if masked else None
    mask = torch.tensor(has_negative) if masked else None
    leaves, ref = leaves_of(a, p, h)
    loss = run(lambda a_, p_, h_: simcse_sup(a_, p_, h_, t, weight, mask), leaves, autocast)
    assert_finite_loss(loss, compute_dtype([a, p, h]))
    want = ref_simcse(*ref, t, weight, has_negative, NORM_EPS[dtype])
    assert_value(loss, want, 2 / t)
    norms = [row_norms(a), row_norms(p), row_norms(h)]
    assert_gradients(loss, leaves, want, ref, 2 / t, 2 / t, norms)


@PROFILE
@given(data=st.data(), n=st.integers(1, 6), d=st.integers(1, 6), tokens=st.integers(1, 6), t=log_uniform,
       lam=st.sampled_from([0.0, 0.005, 1.0]), squeeze=st.booleans(), prec=precision)
def test_diffcse(data, n, d, tokens, t, lam, squeeze, prec):
    """Replaced-token detection (Eq. 5-6) on its own and DiffCSE's objective, Eq. 3: SimCSE + lam * RTD."""
    dtype, autocast = prec
    z1, z2 = data.draw(rows(n, d, dtype)), data.draw(rows(n, d, dtype))
    logits = data.draw(rows(n, tokens, dtype))  # logits of every magnitude, 1e-4 .. 1e4
    replaced = data.draw(st.lists(st.lists(st.booleans(), min_size=tokens, max_size=tokens), min_size=n, max_size=n))
    counted = data.draw(st.lists(st.lists(st.booleans(), min_size=tokens, max_size=tokens), min_size=n, max_size=n))
    leaves, ref = leaves_of(z1, z2, logits)
    rtd_args = (torch.tensor(replaced), torch.tensor(counted, dtype=torch.long))

    def objective(a, b, lg):
        rtd = replaced_token_detection(lg.unsqueeze(-1) if squeeze else lg, *rtd_args)
        return diffcse_loss(simcse_unsup(a, b, t), rtd, lam), rtd

    loss, rtd = run(objective, leaves, autocast)
    assert_finite_loss(rtd, compute_dtype([logits]))
    assert_finite_loss(loss, compute_dtype([z1, z2, logits]))
    want_rtd = ref_rtd(ref[2], replaced, counted)
    if want_rtd is None:  # no counted position
        assert_connected_zero(rtd, [leaves[2]])
    else:
        sharpness = logits.double().abs().max().item()
        assert_value(rtd, want_rtd, sharpness)
        # the gradient sigmoid(l) - [replaced] is bounded by 1 whatever the logits' size
        assert_gradients(rtd, [leaves[2]], want_rtd, [ref[2]], 1.0, 1.0, [torch.ones(n, tokens, dtype=torch.float64)])
    if n == 1:
        return  # the contrastive part is a connected zero (test_simcse_unsup)
    want = ref_simcse(ref[0], ref[1], None, t, eps=NORM_EPS[dtype]) + lam * (0.0 if want_rtd is None else want_rtd)
    assert_value(loss, want, 2 / t + lam * logits.double().abs().max().item())


# ---------------------------------------------------------------------------------------------
# Zero and near-zero rows: finite gradients in every dtype with each loss's default hyper-parameters
# ---------------------------------------------------------------------------------------------

def _with_small_rows(n: int, d: int, norm: float, dtype: torch.dtype, seed: int) -> torch.Tensor:
    """(n, d) random rows of norm 1, rows 0 and 2 of norm ``norm`` (0: zero rows), in ``dtype``."""
    x = torch.nn.functional.normalize(torch.randn(n, d, generator=torch.Generator().manual_seed(seed),
                                                  dtype=torch.float64), dim=1)
    x[0] *= norm
    x[min(2, n - 1)] *= norm
    return x.to(dtype)


@PROFILE
@given(norm=st.sampled_from([0.0, 1e-8, 1e-6, 1e-4]), dtype=st.sampled_from(DTYPES), autocast=st.booleans(),
       seed=st.integers(0, 2 ** 16))
def test_near_zero_rows_default_hyperparameters(norm, dtype, autocast, seed):
    """With the defaults (tau 0.1 / 0.05, la 20, gamma 0.1, ...), a zero row or one of norm 1e-8, 1e-6 or
    1e-4 among rows of norm 1 gets a finite gradient in every dtype, fp16 included (the normalisation
    amplifies its gradient at most 2^8-fold there instead of 1e12-fold)."""
    n, d, c, k = 6, 12, 3, 4
    x, y, h = (_with_small_rows(n, d, norm, dtype, seed + i) for i in range(3))
    centers = _with_small_rows(c * k, d, norm, dtype, seed + 3)
    lab = _with_small_rows(c, d, norm, dtype, seed + 4)
    labels = torch.tensor([0, 0, 1, 1, 2, 0])
    replaced = torch.tensor([[True, False, False]] * n)
    calls = {
        "supcon": (lambda e: supcon(e, labels), [x]),
        "cosine_pairs": (lambda e: cosine_pairs(e, labels), [x]),
        "soft_triple": (lambda e, w: soft_triple(e, labels, w, centers_per_class=k, center_reg=0.2), [x, centers]),
        "lacon": (lambda e, l_: lacon(e, labels, l_).total, [x, lab]),
        "lacon_predict": (lambda e, l_: lacon_predict(e, l_).sum(), [x, lab]),
        "simcse_unsup": (lambda a, b: simcse_unsup(a, b), [x, y]),
        "simcse_sup": (lambda a, b, c_: simcse_sup(a, b, c_), [x, y, h]),
        "diffcse": (lambda a, b, lg: diffcse_loss(simcse_unsup(a, b), replaced_token_detection(lg, replaced)),
                    [x, y, x[:, :3]]),
    }
    for name, (fn, tensors) in calls.items():
        leaves = [t.detach().clone().requires_grad_(True) for t in tensors]
        loss = run(fn, leaves, autocast)
        assert torch.isfinite(loss), name
        for leaf, g in zip(leaves, torch.autograd.grad(loss, leaves)):
            assert g.dtype == leaf.dtype and torch.isfinite(g).all(), (name, g.abs().max())


# ---------------------------------------------------------------------------------------------
# Empty batches: 0 with the graph intact; batch-independent terms as usual
# ---------------------------------------------------------------------------------------------

@PROFILE
@given(data=st.data(), heads=st.integers(1, 3), width=st.integers(1, 3), n_classes=st.integers(1, 3),
       k=st.integers(1, 3), t=log_uniform, center_reg=st.sampled_from([0.0, 0.2]),
       weights=st.tuples(*[st.sampled_from([0.0, 0.5, 1.0])] * 3).filter(any), prec=precision)
def test_empty_batch(data, heads, width, n_classes, k, t, center_reg, weights, prec):
    dtype, autocast = prec
    d = heads * width
    cdtype = compute_dtype([torch.zeros(0, dtype=dtype)])
    no_labels = torch.zeros(0, dtype=torch.long)

    def empty(cols=d):
        return torch.zeros(0, cols, dtype=dtype, requires_grad=True)

    memory = data.draw(rows(3, d, dtype)).requires_grad_(True)
    zeros = {
        "supcon": (lambda e: supcon(e, no_labels, t), [empty()]),
        "supcon with candidates": (lambda e, m: supcon(e, no_labels, t, m, torch.tensor([0, 1, 0])), [empty(), memory]),
        "cosine_pairs": (lambda e: cosine_pairs(e, no_labels), [empty()]),
        "simcse_unsup": (lambda a, b: simcse_unsup(a, b, t), [empty(), empty()]),
        "simcse_sup": (lambda a, b, c_: simcse_sup(a, b, c_, t, 1.0), [empty(), empty(), empty()]),
        "simcse_sup masked": (lambda a, b, c_: simcse_sup(a, b, c_, t, -math.inf, torch.zeros(0, dtype=torch.bool)),
                              [empty(), empty(), empty()]),
        "simcse_sup, no hard negative": (lambda a, b: simcse_sup(a, b, None, t), [empty(), empty()]),
        "replaced_token_detection": (lambda lg: replaced_token_detection(lg, torch.zeros(0, 4, dtype=torch.bool)),
                                     [empty(4)]),
        "diffcse": (lambda a, b, lg: diffcse_loss(simcse_unsup(a, b, t),
                                                  replaced_token_detection(lg, torch.zeros(0, 4, dtype=torch.bool))),
                    [empty(), empty(), empty(4)]),
    }
    for name, (fn, leaves) in zeros.items():
        loss = run(fn, leaves, autocast)
        assert loss.dtype == cdtype, name
        assert_connected_zero(loss, leaves)

    # SoftTriple: Eq. 2's mean over no row is 0; the centre regulariser does not depend on the batch
    w = data.draw(rows(n_classes * k, d, dtype))
    (e, wl), (e_ref, w_ref) = leaves_of(torch.zeros(0, d, dtype=dtype), w)
    loss = run(lambda e_, w_: soft_triple(e_, no_labels, w_, 20.0, 0.1, 0.1, k, center_reg), [e, wl], autocast)
    assert_finite_loss(loss, cdtype)
    eps = NORM_EPS[dtype]
    want = ref_soft_triple(e_ref, [], w_ref, k, 20.0, 0.1, 0.1, center_reg, eps, eps)
    if not torch.is_tensor(want):  # no regulariser (off, or K = 1)
        assert_connected_zero(loss, [e, wl])
    else:
        regular = _regular_centres(w, n_classes, k, center_reg)
        extra = 0.0 if regular else center_reg * math.sqrt(VALUE_EPS * torch.finfo(loss.dtype).eps)
        assert_value(loss, want, 1.0, extra=extra)
        assert_gradients(loss, [e, wl], want, [e_ref, w_ref], 1.0, 10 * center_reg,
                         [torch.ones(0, d, dtype=torch.float64), row_norms(w)], compare=regular)

    # LaCon: ICL (mean over no instance) and LCL (no anchor) are connected zeros; LER as usual
    lab = data.draw(rows(n_classes, d, dtype))
    (e, ll), (e_ref, l_ref) = leaves_of(torch.zeros(0, d, dtype=dtype), lab)
    w_icl, w_lcl, w_ler = weights
    parts = run(lambda e_, l_: lacon(e_, no_labels, l_, t, heads, w_ler, icl_weight=w_icl, lcl_weight=w_lcl),
                [e, ll], autocast)
    for part in parts:
        assert_finite_loss(part, cdtype)
    assert_connected_zero(parts.icl, [e, ll])
    assert_connected_zero(parts.lcl, [e, ll])
    _, lcl, ler, total = ref_lacon(e_ref, [], l_ref, t, heads, weights, eps, eps)
    assert lcl is None
    if ler is None:  # one label: no pair
        assert_connected_zero(parts.ler, [ll])
    else:
        assert_value(parts.ler, ler, 1.0)
    if not torch.is_tensor(total):  # LER's weight is 0 or it has no pair: nothing left
        assert_connected_zero(parts.total, [e, ll])
    else:
        assert_value(parts.total, total, 1.0)
        assert_gradients(parts.total, [e, ll], total, [e_ref, l_ref], 1.0, 8 * w_ler,
                         [torch.ones(0, d, dtype=torch.float64), row_norms(lab)])
    assert lacon_predict(e, ll).shape == (0, n_classes)


# ---------------------------------------------------------------------------------------------
# Non-finite hyper-parameters: a one-line ValueError naming the parameter and its value
# ---------------------------------------------------------------------------------------------

#: (loss, parameter) -> a call of the loss on ``(x, labels, centers, lab)`` with that parameter set to ``v``
#: and every other hyper-parameter ``t`` (a valid value drawn by the test).
NON_FINITE_CALLS = {
    ("supcon", "temperature"): lambda v, t, x, y, w, l_: supcon(x, y, v),
    ("simcse_unsup", "temperature"): lambda v, t, x, y, w, l_: simcse_unsup(x, x, v),
    ("simcse_sup", "temperature"): lambda v, t, x, y, w, l_: simcse_sup(x, x, x, v, t),
    ("simcse_sup", "hard_negative_weight"): lambda v, t, x, y, w, l_: simcse_sup(x, x, x, t, v),
    ("soft_triple", "la"): lambda v, t, x, y, w, l_: soft_triple(x, y, w, v, t, t, 2, t),
    ("soft_triple", "gamma"): lambda v, t, x, y, w, l_: soft_triple(x, y, w, t, v, t, 2, t),
    ("soft_triple", "margin"): lambda v, t, x, y, w, l_: soft_triple(x, y, w, t, t, v, 2, t),
    ("soft_triple", "center_reg"): lambda v, t, x, y, w, l_: soft_triple(x, y, w, t, t, t, 2, v),
    ("lacon", "temperature"): lambda v, t, x, y, w, l_: lacon(x, y, l_, v, 2, t),
    ("lacon", "ler_weight"): lambda v, t, x, y, w, l_: lacon(x, y, l_, t, 2, v),
    ("lacon", "icl_weight"): lambda v, t, x, y, w, l_: lacon(x, y, l_, t, 2, t, icl_weight=v),
    ("lacon", "lcl_weight"): lambda v, t, x, y, w, l_: lacon(x, y, l_, t, 2, t, lcl_weight=v),
    ("diffcse_loss", "lam"): lambda v, t, x, y, w, l_: diffcse_loss(simcse_unsup(x, x, t), torch.tensor(0.5), v),
}


@PROFILE
@given(case=st.sampled_from(sorted(NON_FINITE_CALLS)), value=st.sampled_from([math.nan, math.inf, -math.inf]),
       t=log_uniform, dtype=st.sampled_from(DTYPES), data=st.data())
def test_non_finite_hyperparameters(case, value, t, dtype, data):
    _, name = case
    x = data.draw(rows(4, 4, dtype)).requires_grad_(True)
    y = torch.tensor([0, 1, 0, 1])
    w, lab = data.draw(rows(4, 4, dtype)), data.draw(rows(2, 4, dtype))
    call = NON_FINITE_CALLS[case]
    if name == "hard_negative_weight" and value == -math.inf:  # documented: alpha = 0 (no own hard negative)
        assert torch.isfinite(call(value, t, x, y, w, lab))
        return
    allowed = "finite or -inf" if name == "hard_negative_weight" else "finite"
    try:
        call(value, t, x, y, w, lab)
    except ValueError as err:
        assert str(err) == f"{name} must be {allowed}, got {value}", str(err)
    else:
        raise AssertionError(f"{case} accepted {value}")
