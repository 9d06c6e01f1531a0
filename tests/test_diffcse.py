"""DiffCSE: the replaced-token-detection loss against a literal loop over Eq. 5-6 of the CS224N report,
the total loss (Eq. 3/6), masking, and the two generators (corpus unigram, tiny masked LM)."""

from __future__ import annotations

import math

import pytest
import torch

from contrastfit.data.masking import UnigramGenerator, fill_with_mlm, mask_tokens
from contrastfit.losses.diffcse import DEFAULT_LAMBDA, ReplacedTokenDetectionLoss, diffcse_loss, replaced_token_detection
from contrastfit.losses.simcse import simcse_unsup

PAD, UNK, CLS, SEP, MASK = 0, 1, 2, 3, 4
SPECIALS = (PAD, UNK, CLS, SEP, MASK)


def loop_rtd(logits: torch.Tensor, replaced, mask) -> torch.Tensor:
    """Eq. 5-6 token by token, with D(x'', h, t) = P(token t is original) = 1 - sigmoid(logit), mean over
    the positions with mask 1 (float64)."""
    x = logits.double()
    terms = []
    for i in range(x.shape[0]):
        for t in range(x.shape[1]):
            if not bool(mask[i][t]):
                continue
            d = 1.0 - torch.sigmoid(x[i, t])
            if bool(replaced[i][t]):
                terms.append(-torch.log(1.0 - d))
            else:
                terms.append(-torch.log(d))
    return sum(terms) / len(terms)


def _rtd_batch(n=4, T=9, seed=0, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    logits = (2.0 * torch.randn(n, T, generator=g, dtype=torch.float64)).to(dtype)
    replaced = torch.rand(n, T, generator=g) < 0.3
    lengths = torch.randint(3, T + 1, (n,), generator=g)
    lengths[0] = T
    mask = (torch.arange(T)[None, :] < lengths[:, None]).long()
    replaced &= mask.bool()
    return logits, replaced, mask


# ---------------------------------------------------------------------------------------------
# Replaced-token detection (Eq. 5-6) and the total loss (Eq. 3/6)
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("seed", [0, 1, 2])
def test_rtd_value_matches_loop(seed):
    logits, replaced, mask = _rtd_batch(seed=seed)
    got = replaced_token_detection(logits, replaced, mask)
    assert got.dtype == torch.float32 and got.dim() == 0
    assert got.item() == pytest.approx(loop_rtd(logits, replaced, mask).item(), rel=1e-5)
    # (n, T, 1) logits, as a per-token linear head returns them, are accepted
    assert replaced_token_detection(logits[..., None], replaced, mask).item() == got.item()
    # without a mask every position counts
    full = torch.ones_like(mask)
    assert replaced_token_detection(logits, replaced).item() == pytest.approx(
        loop_rtd(logits, replaced, full).item(), rel=1e-5)


def test_rtd_gradient_matches_loop_float64():
    logits, replaced, mask = _rtd_batch(5, 7, 3, dtype=torch.float64)
    leaf = logits.clone().requires_grad_(True)
    (g_fn,) = torch.autograd.grad(replaced_token_detection(leaf, replaced, mask), leaf)
    (g_loop,) = torch.autograd.grad(loop_rtd(leaf, replaced, mask), leaf)
    torch.testing.assert_close(g_fn, g_loop, rtol=1e-10, atol=1e-12)
    assert torch.equal(g_fn[~mask.bool()], torch.zeros(int((~mask.bool()).sum()), dtype=torch.float64))
    assert torch.autograd.gradcheck(lambda x: replaced_token_detection(x, replaced, mask), (leaf,))


def test_rtd_sign_convention():
    # logits score "replaced": a confident, correct discriminator has a loss near zero
    replaced = torch.tensor([[False, True, False, True]])
    good = torch.where(replaced, 20.0, -20.0)
    assert replaced_token_detection(good, replaced).item() < 1e-6
    assert replaced_token_detection(-good, replaced).item() == pytest.approx(20.0, rel=1e-4)
    # an uninformed discriminator (logit 0) pays log 2 per token
    assert replaced_token_detection(torch.zeros(1, 4), replaced).item() == pytest.approx(math.log(2), rel=1e-6)


def test_rtd_ignores_padding_even_if_inf():
    logits, replaced, mask = _rtd_batch(4, 9, 4)
    want = replaced_token_detection(logits, replaced, mask).item()
    bad = logits.clone()
    bad[~mask.bool()] = float("inf")
    leaf = bad.requires_grad_(True)
    got = replaced_token_detection(leaf, replaced, mask)
    assert got.item() == pytest.approx(want, rel=1e-7)
    got.backward()
    assert torch.isfinite(leaf.grad).all()
    assert (leaf.grad[~mask.bool()] == 0).all()


def test_rtd_special_tokens_rule():
    # [CLS]/[SEP] count unless the caller removes them from the mask
    logits, replaced, mask = _rtd_batch(3, 8, 5)
    special = torch.zeros_like(mask, dtype=torch.bool)
    special[:, 0] = True
    with_specials = replaced_token_detection(logits, replaced, mask)
    without = replaced_token_detection(logits, replaced, mask.bool() & ~special)
    assert without.item() == pytest.approx(loop_rtd(logits, replaced, mask.bool() & ~special).item(), rel=1e-5)
    assert with_specials.item() != pytest.approx(without.item(), rel=1e-6)


def test_rtd_no_counted_token_is_zero_with_graph_and_batch_of_one():
    leaf = torch.randn(2, 5, requires_grad=True)
    loss = replaced_token_detection(leaf, torch.zeros(2, 5, dtype=torch.bool), torch.zeros(2, 5))
    assert loss.item() == 0.0 and loss.requires_grad
    loss.backward()
    assert torch.equal(leaf.grad, torch.zeros_like(leaf))
    one = replaced_token_detection(torch.tensor([[0.3]]), torch.tensor([[True]]), torch.tensor([[1]]))
    assert one.item() == pytest.approx(-math.log(torch.sigmoid(torch.tensor(0.3)).item()), rel=1e-6)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_rtd_half_precision_and_autocast(dtype):
    logits, replaced, mask = _rtd_batch(6, 12, 6)
    want = replaced_token_detection(logits, replaced, mask).item()
    leaf = logits.to(dtype).requires_grad_(True)
    got = replaced_token_detection(leaf, replaced, mask)
    assert got.dtype == torch.float32 and got.item() == pytest.approx(want, rel=1e-2)
    got.backward()
    assert leaf.grad.dtype == dtype and torch.isfinite(leaf.grad.float()).all()
    with torch.autocast("cpu", dtype=dtype):
        x = torch.randn(6, 12) @ torch.randn(12, 12)  # a half-precision head output
        loss = replaced_token_detection(x * 1e3, replaced, mask)
    assert loss.dtype == torch.float32 and torch.isfinite(loss)


def test_diffcse_total_loss():
    assert DEFAULT_LAMBDA == 0.005
    g = torch.Generator().manual_seed(7)
    z1 = torch.randn(6, 8, generator=g, requires_grad=True)
    z2 = torch.randn(6, 8, generator=g)
    logits = torch.randn(6, 10, generator=g, requires_grad=True)
    replaced = torch.rand(6, 10, generator=g) < 0.3
    c = simcse_unsup(z1, z2)
    r = replaced_token_detection(logits, replaced)
    total = diffcse_loss(c, r)
    assert total.item() == pytest.approx(c.item() + 0.005 * r.item(), rel=1e-6)
    assert diffcse_loss(c, r, lam=0.1).item() == pytest.approx(c.item() + 0.1 * r.item(), rel=1e-6)
    total.backward()
    # both terms reach their inputs; the RTD gradient is scaled by lambda
    assert z1.grad.abs().sum() > 0
    (g_r,) = torch.autograd.grad(replaced_token_detection(logits, replaced), logits)
    torch.testing.assert_close(logits.grad, 0.005 * g_r)
    with pytest.raises(ValueError, match="lam"):
        diffcse_loss(c, r, lam=-1.0)
    assert ReplacedTokenDetectionLoss()(logits, replaced).item() == r.item()


def test_rtd_bad_shapes():
    with pytest.raises(ValueError, match="replaced"):
        replaced_token_detection(torch.zeros(2, 3), torch.zeros(2, 4, dtype=torch.bool))
    with pytest.raises(ValueError, match="attention_mask"):
        replaced_token_detection(torch.zeros(2, 3), torch.zeros(2, 3, dtype=torch.bool), torch.ones(2, 4))
    with pytest.raises(ValueError, match="logits"):
        replaced_token_detection(torch.zeros(6), torch.zeros(6, dtype=torch.bool))


# ---------------------------------------------------------------------------------------------
# Masking
# ---------------------------------------------------------------------------------------------

def _token_batch(n=300, T=128, vocab=50, seed=0, min_len=3):
    """[CLS] w1 .. wk [SEP] [PAD] ..., with HF-style attention and special-token masks."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, vocab, (n, T), generator=g)
    lengths = torch.randint(min_len, T + 1, (n,), generator=g)
    pos = torch.arange(T)[None, :]
    attn = (pos < lengths[:, None]).long()
    ids[:, 0] = CLS
    ids[pos == (lengths[:, None] - 1)] = SEP
    ids[attn == 0] = PAD
    special = (ids == CLS) | (ids == SEP)
    return ids, attn, special.long()


@pytest.mark.parametrize("p", [0.15, 0.3])
def test_mask_tokens_rate_and_eligibility(p):
    ids, attn, special = _token_batch()
    g = torch.Generator().manual_seed(1)
    masked_ids, chosen = mask_tokens(ids, attn, special, MASK, p, g)
    assert chosen.dtype == torch.bool and chosen.shape == ids.shape
    eligible = attn.bool() & ~special.bool()
    assert not (chosen & ~eligible).any()  # never special, never padding
    rate = chosen.sum().item() / eligible.sum().item()
    assert abs(rate - p) < 0.01, rate  # ~18,000 eligible tokens: 4 standard deviations
    assert (masked_ids[chosen] == MASK).all()
    assert torch.equal(masked_ids[~chosen], ids[~chosen])
    assert torch.equal(ids, _token_batch()[0])  # the input is not modified


def test_mask_tokens_seeded_and_extremes():
    ids, attn, special = _token_batch(40, 32)
    a = mask_tokens(ids, attn, special, MASK, 0.2, torch.Generator().manual_seed(5))
    b = mask_tokens(ids, attn, special, MASK, 0.2, torch.Generator().manual_seed(5))
    c = mask_tokens(ids, attn, special, MASK, 0.2, torch.Generator().manual_seed(6))
    assert torch.equal(a[1], b[1]) and torch.equal(a[0], b[0])
    assert not torch.equal(a[1], c[1])
    none = mask_tokens(ids, attn, special, MASK, 0.0, torch.Generator().manual_seed(0))[1]
    assert not none.any()
    everything = mask_tokens(ids, attn, special, MASK, 1.0, torch.Generator().manual_seed(0))[1]
    assert torch.equal(everything, attn.bool() & ~special.bool())
    # special tokens marked in HF style (padding included in special_tokens_mask), no attention mask
    hf_special = special.bool() | (attn == 0)
    assert torch.equal(mask_tokens(ids, None, hf_special, MASK, 1.0)[1], everything)
    with pytest.raises(ValueError, match="probability"):
        mask_tokens(ids, attn, special, MASK, 1.5)
    with pytest.raises(ValueError, match="special_tokens_mask"):
        mask_tokens(ids, attn, special[:, :3], MASK, 0.1)


def test_mask_tokens_at_least_one():
    ids, attn, special = _token_batch(200, 12, seed=3)
    # a row made only of [CLS] [SEP]: nothing can be masked
    ids[0, 2:] = PAD
    ids[0, 1] = SEP
    attn[0] = 0
    attn[0, :2] = 1
    special[0] = 0
    special[0, :2] = 1
    g = torch.Generator().manual_seed(2)
    _, plain = mask_tokens(ids, attn, special, MASK, 0.02, g)
    assert (plain.sum(dim=1) == 0).sum() > 50  # at a 2% rate most short rows draw nothing
    _, chosen = mask_tokens(ids, attn, special, MASK, 0.02, torch.Generator().manual_seed(2), at_least_one=True)
    eligible = attn.bool() & ~special.bool()
    assert not (chosen & ~eligible).any()
    assert chosen[0].sum() == 0
    assert (chosen[1:].sum(dim=1) >= 1).all()
    # rows that drew something keep exactly their draws
    drew = plain.any(dim=1)
    assert torch.equal(chosen[drew], plain[drew])


# ---------------------------------------------------------------------------------------------
# Unigram generator
# ---------------------------------------------------------------------------------------------

def _corpus():
    """Sentences with [CLS]/[SEP] (specials, frequent) and known counts of ids 5..12; id 13 never occurs."""
    counts = {5: 400, 6: 250, 7: 150, 8: 100, 9: 60, 10: 25, 11: 10, 12: 5}
    tokens = [i for i, c in counts.items() for _ in range(c)]
    g = torch.Generator().manual_seed(0)
    tokens = [tokens[k] for k in torch.randperm(len(tokens), generator=g).tolist()]
    corpus = [[CLS, *tokens[s:s + 10], SEP] for s in range(0, len(tokens), 10)]
    corpus.append([])
    return corpus, counts


def test_unigram_counts_and_probabilities():
    corpus, counts = _corpus()
    gen = UnigramGenerator.from_corpus(corpus, vocab_size=14, special_ids=SPECIALS)
    assert gen.vocab_size == 14
    total = sum(counts.values())
    want = torch.zeros(14, dtype=torch.float64)
    for i, c in counts.items():
        want[i] = c / total
    torch.testing.assert_close(gen.probabilities, want)
    assert gen.counts[CLS] == 0 and gen.counts[SEP] == 0  # special ids are not counted
    # torch tensors in the corpus work too
    gen_t = UnigramGenerator.from_corpus([torch.tensor(s, dtype=torch.long) for s in corpus], 14, SPECIALS)
    torch.testing.assert_close(gen_t.probabilities, want)
    with pytest.raises(ValueError, match="outside"):
        UnigramGenerator.from_corpus([[1, 20]], vocab_size=14)
    with pytest.raises(ValueError, match="positive count"):
        UnigramGenerator.from_corpus([[CLS, SEP]], vocab_size=14, special_ids=SPECIALS)


def test_unigram_samples_follow_counts_and_never_specials():
    from scipy.stats import chisquare

    corpus, counts = _corpus()
    gen = UnigramGenerator.from_corpus(corpus, 14, SPECIALS)
    ids = torch.full((200, 100), 13, dtype=torch.long)  # 13 never occurs: every sample is a replacement
    ids[:, 0] = CLS
    masked = torch.ones_like(ids, dtype=torch.bool)
    masked[:, 0] = False
    new_ids, replaced = gen.fill(ids, masked, torch.Generator().manual_seed(0))
    sampled = new_ids[masked]
    assert not torch.isin(sampled, torch.tensor(SPECIALS + (13,))).any()
    assert (new_ids[:, 0] == CLS).all() and not replaced[:, 0].any()
    assert replaced[masked].all()
    observed = torch.bincount(sampled, minlength=14)[5:13].double()
    expected = torch.tensor([counts[i] for i in range(5, 13)], dtype=torch.float64)
    expected = expected / expected.sum() * observed.sum()
    assert chisquare(observed.numpy(), expected.numpy()).pvalue > 1e-3
    # and a wrong distribution is rejected by the same test
    assert chisquare(observed.numpy(), torch.full((8,), observed.sum().item() / 8).numpy()).pvalue < 1e-6


def test_unigram_same_token_is_not_replaced_and_seeded():
    gen = UnigramGenerator.from_corpus([[CLS, 7, 7, 7, SEP]], 10, SPECIALS)  # only id 7 can be drawn
    ids = torch.tensor([[CLS, 7, 8, 7, 9, SEP]])
    masked = torch.tensor([[False, True, True, False, True, False]])
    new_ids, replaced = gen.fill(ids, masked, torch.Generator().manual_seed(0))
    assert new_ids.tolist() == [[CLS, 7, 7, 7, 7, SEP]]
    assert replaced.tolist() == [[False, False, True, False, True, False]]
    assert new_ids.dtype == ids.dtype
    # nothing masked: unchanged, nothing replaced
    same, none = gen.fill(ids, torch.zeros_like(masked))
    assert torch.equal(same, ids) and not none.any()
    corpus, _ = _corpus()
    big = UnigramGenerator.from_corpus(corpus, 14, SPECIALS)
    x = torch.full((4, 30), 13)
    m = torch.ones_like(x, dtype=torch.bool)
    a = big.fill(x, m, torch.Generator().manual_seed(3))[0]
    b = big.fill(x, m, torch.Generator().manual_seed(3))[0]
    assert torch.equal(a, b)
    assert "vocab_size=14" in repr(big)


# ---------------------------------------------------------------------------------------------
# Masked-LM generator (tiny randomly initialised BERT)
# ---------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def tiny_mlm():
    from transformers import BertConfig, BertForMaskedLM

    torch.manual_seed(0)
    config = BertConfig(vocab_size=100, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                        intermediate_size=32, max_position_embeddings=64)
    model = BertForMaskedLM(config)
    with torch.no_grad():  # a peaked output distribution, so that sampling can be checked against it
        bias = torch.zeros(100)
        bias[20], bias[21], bias[22] = 4.0, 3.0, 2.0
        model.cls.predictions.decoder.bias.copy_(bias)
    return model.eval()


class _Recorder(torch.nn.Module):
    def __init__(self, model):
        super().__init__()
        self.model = model
        self.seen = []

    def forward(self, **kwargs):
        self.seen.append({k: v.clone() for k, v in kwargs.items()})
        return self.model(**kwargs)


def test_fill_with_mlm_runs_and_masks_input(tiny_mlm):
    ids, attn, special = _token_batch(6, 16, vocab=100, seed=4, min_len=6)
    masked_ids, chosen = mask_tokens(ids, attn, special, MASK, 0.3, torch.Generator().manual_seed(0))
    rec = _Recorder(tiny_mlm)
    new_ids, replaced = fill_with_mlm(rec, ids, attn, chosen, torch.Generator().manual_seed(0),
                                      mask_token_id=MASK, suppress_ids=SPECIALS)
    assert len(rec.seen) == 1
    assert torch.equal(rec.seen[0]["input_ids"], masked_ids)  # the MLM sees [MASK] at the chosen positions
    assert torch.equal(rec.seen[0]["attention_mask"], attn)
    assert new_ids.shape == ids.shape and new_ids.dtype == ids.dtype
    assert torch.equal(new_ids[~chosen], ids[~chosen])
    assert ((new_ids >= 0) & (new_ids < 100)).all()
    assert not torch.isin(new_ids[chosen], torch.tensor(SPECIALS)).any()
    assert torch.equal(replaced, chosen & (new_ids != ids))
    assert not new_ids.requires_grad and not replaced.requires_grad
    assert all(p.grad is None for p in tiny_mlm.parameters())
    again = fill_with_mlm(tiny_mlm, ids, attn, chosen, torch.Generator().manual_seed(0), mask_token_id=MASK,
                          suppress_ids=SPECIALS)
    assert torch.equal(again[0], new_ids)
    # nothing masked: the model is not even called
    rec.seen.clear()
    same, none = fill_with_mlm(rec, ids, attn, torch.zeros_like(chosen), mask_token_id=MASK)
    assert torch.equal(same, ids) and not none.any() and rec.seen == []


def test_fill_with_mlm_samples_follow_model_softmax(tiny_mlm):
    from scipy.stats import chisquare

    rows = 3000
    ids = torch.tensor([[CLS, 30, 31, 32, 33, SEP]]).repeat(rows, 1)
    attn = torch.ones_like(ids)
    masked = torch.zeros_like(ids, dtype=torch.bool)
    masked[:, 2] = True
    with torch.no_grad():
        logits = tiny_mlm(input_ids=ids.masked_fill(masked, MASK)[:1], attention_mask=attn[:1]).logits[0, 2]
    logits[list(SPECIALS)] = float("-inf")
    probs = torch.softmax(logits.double(), dim=0)
    assert probs.max() > 0.2  # peaked: the test can tell distributions apart
    new_ids, replaced = fill_with_mlm(tiny_mlm, ids, attn, masked, torch.Generator().manual_seed(1),
                                      mask_token_id=MASK, suppress_ids=SPECIALS)
    sampled = new_ids[:, 2]
    assert not torch.isin(sampled, torch.tensor(SPECIALS)).any()
    assert torch.equal(replaced[:, 2], sampled != 31)
    observed = torch.bincount(sampled, minlength=100).double()
    expected = probs * rows
    assert observed[expected == 0].sum() == 0  # suppressed ids
    big = expected >= 5  # pool the rare ids (if any) into one bin
    obs, exp = observed[big], expected[big]
    if expected[~big].sum() > 0:
        obs = torch.cat([obs, observed[~big].sum()[None]])
        exp = torch.cat([exp, expected[~big].sum()[None]])
    assert chisquare(obs.numpy(), exp.numpy()).pvalue > 1e-3


def test_pipeline_mask_fill_rtd_diffcse(tiny_mlm):
    """The pieces chain: mask -> generator -> replaced targets -> RTD + SimCSE -> total loss."""
    ids, attn, special = _token_batch(4, 12, vocab=100, seed=8, min_len=5)
    g = torch.Generator().manual_seed(0)
    _, chosen = mask_tokens(ids, attn, special, MASK, 0.3, g, at_least_one=True)
    gen = UnigramGenerator.from_corpus(ids.tolist(), 100, SPECIALS)
    for new_ids, replaced in (gen.fill(ids, chosen, g),
                              fill_with_mlm(tiny_mlm, ids, attn, chosen, g, mask_token_id=MASK, suppress_ids=SPECIALS)):
        head = torch.randn(4, 12, requires_grad=True)
        rtd = replaced_token_detection(head, replaced, attn.bool() & ~special.bool())
        z = torch.randn(4, 8, requires_grad=True)
        total = diffcse_loss(simcse_unsup(z, z + 0.1), rtd)
        assert torch.isfinite(total)
        total.backward()
        assert head.grad.abs().sum() > 0 and z.grad.abs().sum() > 0
