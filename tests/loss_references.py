"""Reference implementations of the losses' equations, for the tests: literal loops over the
equations' indices (i, p, a, c, k, ...) in float64, written from the papers and the losses' docstrings,
never calling ``contrastfit.losses``.

Inputs are float64 tensors (pass ``x.double()``: autograd then differentiates back to ``x``) and
labels as lists of ints. Every cosine divides by ``max(||v||, eps)`` (the losses' documented
normalisation, ``contrastfit.losses._common``); ``eps`` (one per input tensor, default 0: the exact
cosine) is the normalisation eps of the dtype that tensor had before ``.double()``. Every softmax has its own log-sum-exp shifted by its largest logit (a
constant), so that a temperature of 1e-3 does not overflow. A reference returns ``None`` where the
equation is undefined (e.g. SupCon without any positive), and the tests then check the loss's
documented degenerate behaviour instead.
"""

from __future__ import annotations

import math

import torch


def lse(values):
    """log(sum_k exp(v_k)) of a list of scalars, shifted by the largest one (a constant)."""
    m = max(v.detach().item() for v in values)
    if m == -math.inf:
        return torch.tensor(-math.inf, dtype=torch.float64)
    return m + torch.log(sum(torch.exp(v - m) for v in values))


def cos(u, v, eps_u=0.0, eps_v=0.0):
    """u.v / (max(||u||, eps_u) max(||v||, eps_v)); a zero vector (with eps > 0) has cosine 0."""
    norm_u = torch.clamp(torch.linalg.vector_norm(u), min=eps_u)
    norm_v = torch.clamp(torch.linalg.vector_norm(v), min=eps_v)
    return (u * v).sum() / (norm_u * norm_v)


def ref_supcon(x, labels, t, eps=0.0):
    """Khosla et al. Eq. 2 (SupCon's docstring): mean over anchors with a positive of
    -1/|P(i)| sum_p log(exp(z_i.z_p/t) / sum_{a != i} exp(z_i.z_a/t)); None without such an anchor."""
    n = len(labels)
    per_anchor = []
    for i in range(n):
        positives = [p for p in range(n) if p != i and labels[p] == labels[i]]
        if not positives:
            continue
        log_denominator = lse([cos(x[i], x[a], eps, eps) / t for a in range(n) if a != i])
        per_anchor.append(-sum(cos(x[i], x[p], eps, eps) / t - log_denominator for p in positives) / len(positives))
    return sum(per_anchor) / len(per_anchor) if per_anchor else None


def ref_cosine_pairs(x, labels, eps=0.0):
    """SetFit's pair loss: half the mean of (cos - 1)^2 over same-label pairs i < j, half the mean of
    cos^2 over the others; one kind alone when the other is absent; None without any pair."""
    n = len(labels)
    same, other = [], []
    for i in range(n):
        for j in range(i + 1, n):
            c = cos(x[i], x[j], eps, eps)
            if labels[i] == labels[j]:
                same.append((c - 1.0) ** 2)
            else:
                other.append(c ** 2)
    kinds = [sum(k) / len(k) for k in (same, other) if k]
    return sum(kinds) / len(kinds) if kinds else None


def ref_soft_triple(x, labels, w, k, la, gamma, margin, center_reg, eps_x=0.0, eps_w=0.0):
    """Sosnowski et al. Eq. 3 (relaxed similarity, softmax over the K centres at temperature gamma)
    and Eq. 2 (margin on the true class, scale la), mean over rows; plus Qian et al.'s regulariser
    center_reg * sum_c sum_{t<s} ||w_t - w_s|| / (C K (K - 1)), ||w_t - w_s|| = sqrt(2 - 2 w_t.w_s) taken,
    as the docstring states, of max(2 - 2 w_t.w_s, 0) + 1e-10."""
    n, n_classes = len(labels), w.shape[0] // k
    total = 0.0
    for i in range(n):
        logits = []
        for c in range(n_classes):
            sims = [cos(x[i], w[c * k + j], eps_x, eps_w) for j in range(k)]
            log_z = lse([s / gamma for s in sims])
            relaxed = sum(torch.exp(s / gamma - log_z) * s for s in sims)
            logits.append(la * (relaxed - (margin if c == labels[i] else 0.0)))
        total = total - (logits[labels[i]] - lse(logits))
    loss = total / n if n else 0.0  # the mean over no row is 0 (the loss's docstring)
    if center_reg > 0 and k > 1:
        reg = 0.0
        for c in range(n_classes):
            for a in range(k):
                for b in range(a + 1, k):
                    reg = reg + torch.sqrt(torch.clamp(2.0 - 2.0 * cos(w[c * k + a], w[c * k + b], eps_w, eps_w), min=0.0) + 1e-10)
        loss = loss + center_reg * reg / (n_classes * k * (k - 1))
    return loss


def ref_lacon(x, labels, lab, t, heads, weights, eps_x=0.0, eps_l=0.0):
    """Zhang et al. Eq. 4 (ICL: per head, softmax over all C labels; heads summed, rows averaged),
    Eq. 5 (LCL: labels present with a negative are anchors, positives summed, denominator over the
    negatives only, anchors averaged; None when there is no anchor), Eq. 6 (LER: mean over ordered
    pairs i != j of exp(1 + cos) - 1; None for one label) and Eq. 7 with a weight per term (a zero
    weight leaves its term out)."""
    n, d = x.shape
    c = lab.shape[0]
    dk = d // heads
    icl = 0.0
    for h in range(heads):
        part = slice(h * dk, (h + 1) * dk)
        for i in range(n):
            s = [cos(x[i, part], lab[p, part], eps_x, eps_l) / t for p in range(c)]
            icl = icl - (s[labels[i]] - lse(s))
    icl = icl / n if n else 0.0  # the mean over no instance is 0 (the loss's docstring)
    per_label = []
    for p in sorted(set(labels)):
        negatives = [b for b in range(n) if labels[b] != p]
        if not negatives:
            continue
        log_denominator = lse([cos(lab[p], x[b], eps_l, eps_x) / t for b in negatives])
        per_label.append(-sum(cos(lab[p], x[a], eps_l, eps_x) / t - log_denominator
                              for a in range(n) if labels[a] == p))
    lcl = sum(per_label) / len(per_label) if per_label else None
    pairs = [torch.exp(1.0 + cos(lab[i], lab[j], eps_l, eps_l)) - 1.0 for i in range(c) for j in range(c) if i != j]
    ler = sum(pairs) / len(pairs) if pairs else None
    total = sum(wt * term for wt, term in zip(weights, (icl, lcl, ler)) if wt and term is not None)
    return icl, lcl, ler, total


def ref_simcse(a, p, h, t, weight=0.0, has_negative=None, eps=0.0):
    """SimCSE (report Eq. 1, and Eq. 2 with hard negatives h): -log(exp(cos(a_i, p_i)/t) / (sum_j
    exp(cos(a_i, p_j)/t) + sum_{j with a hard negative} alpha^[i=j] exp(cos(a_i, h_j)/t))), alpha =
    e^weight, mean over i."""
    n = a.shape[0]
    total = 0.0
    for i in range(n):
        logits = [cos(a[i], p[j], eps, eps) / t for j in range(n)]
        if h is not None:
            for j in range(n):
                if has_negative is None or has_negative[j]:
                    logits.append(cos(a[i], h[j], eps, eps) / t + (weight if j == i else 0.0))
        total = total - (logits[i] - lse(logits))
    return total / n


def ref_rtd(logits, replaced, counted):
    """Eq. 5-6 with D = 1 - sigmoid(logit): -log sigmoid(l) for a replaced token, -log(1 - sigmoid(l))
    for an original one, i.e. log(1 + e^l) - l [replaced], mean over counted positions; None when none
    is counted. log(1 + e^l) is l + log(1 + e^-l) for l >= 0 and log(1 + e^l) below, each branch fed
    a clamped l, so that neither overflows and the gradient at l = 0 is sigmoid(0) = 1/2 (the form
    max(l, 0) + log(1 + e^-|l|) gets 1 there from autograd's subgradients of max and |.|)."""
    terms = []
    for i in range(logits.shape[0]):
        for j in range(logits.shape[1]):
            if counted[i][j]:
                v = logits[i, j]
                pos, neg = torch.clamp(v, min=0.0), torch.clamp(v, max=0.0)
                softplus = torch.where(v >= 0, pos + torch.log1p(torch.exp(-pos)), torch.log1p(torch.exp(neg)))
                terms.append(softplus - v * float(replaced[i][j]))
    return sum(terms) / len(terms) if terms else None


def ref_jaccard_supcon(x, label_sets, t, eps=0.0):
    """Jaccard-weighted SupCon (jaccard_supcon's docstring): w_ip = |Y_i & Y_p| / |Y_i | Y_p| (0 for two
    empty sets), l_i = -1/W_i sum_{p != i} w_ip log(exp(z_i.z_p/t) / sum_{a != i} exp(z_i.z_a/t)),
    W_i = sum_{p != i} w_ip, mean over anchors with W_i > 0; ``label_sets`` a list of Python sets;
    None without such an anchor."""
    n = len(label_sets)
    per_anchor = []
    for i in range(n):
        weights = {}
        for p in range(n):
            if p == i:
                continue
            union = label_sets[i] | label_sets[p]
            w = len(label_sets[i] & label_sets[p]) / len(union) if union else 0.0
            if w > 0:
                weights[p] = w
        total = sum(weights.values())
        if total == 0:
            continue
        log_denominator = lse([cos(x[i], x[a], eps, eps) / t for a in range(n) if a != i])
        per_anchor.append(-sum(w * (cos(x[i], x[p], eps, eps) / t - log_denominator) for p, w in weights.items()) / total)
    return sum(per_anchor) / len(per_anchor) if per_anchor else None


def ref_soft_target_kl(student, teacher, t):
    """Hinton et al. 2015 (soft_target_kl's docstring): t^2 / n sum_i sum_c p_ic (log p_ic - log q_ic),
    p = softmax(teacher_i / t), q = softmax(student_i / t), with 0 log 0 = 0; None for no rows."""
    n, classes = student.shape
    if n == 0:
        return None
    total = 0
    for i in range(n):
        log_p_denominator = lse([teacher[i, c] / t for c in range(classes)])
        log_q_denominator = lse([student[i, c] / t for c in range(classes)])
        for c in range(classes):
            log_p = teacher[i, c] / t - log_p_denominator
            p = torch.exp(log_p)
            if p.item() > 0:
                total = total + p * (log_p - (student[i, c] / t - log_q_denominator))
    return t * t * total / n


def ref_similarity_distillation(student, teacher, eps_s=0.0, eps_t=0.0):
    """SetFit's distillation (similarity_distillation's docstring): the mean over pairs i < j of
    (cos(s_i, s_j) - cos(t_i, t_j))^2; None with fewer than two rows."""
    n = student.shape[0]
    terms = [(cos(student[i], student[j], eps_s, eps_s) - cos(teacher[i], teacher[j], eps_t, eps_t)) ** 2
             for i in range(n) for j in range(i + 1, n)]
    return sum(terms) / len(terms) if terms else None
