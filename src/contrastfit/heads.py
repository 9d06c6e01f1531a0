"""Prediction heads on top of the pooled sentence embedding.

* :class:`LinearHead`, :class:`MLPHead`: logits from the pooled embedding.
* :class:`LabelMatchingHead` (LaCon, Zhang et al.): a projection MLP ``g`` and learnable label
  embeddings; the logits are the cosines of ``g(x)`` to the label embeddings divided by a
  temperature (Eq. 1, 2, 8). With ``fusion_radius`` set it also holds a :class:`LabelFusion` block
  (Eq. 9), which the method calls on the token embeddings to build the vector ``g`` reads.
* :class:`ProjectionClassifierHead`: LaCon's "BERT w/ g" baseline (Table 3), ``g`` then a linear head.
* :class:`SimCSETaskHead` (Behrman & Christoglou, CS224N report, Sec. 4.2): the MLP of one sentence,
  or for a pair ``[u; v]`` of separately encoded sentences :class:`PairConcatHead` (classification)
  or :class:`CosineRegressionHead` (STS).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from .losses._common import compute_dtype
from .losses.lacon import lacon_predict


class LinearHead(nn.Module):
    """BERT-style classification head: dropout, then one linear layer (Devlin et al., 2019)."""

    def __init__(self, hidden_size: int, num_outputs: int, dropout: float = 0.1):
        super().__init__()
        self.dropout = nn.Dropout(dropout)
        self.linear = nn.Linear(hidden_size, num_outputs)

    def forward(self, embeddings: torch.Tensor) -> torch.Tensor:
        return self.linear(self.dropout(embeddings))

    @torch.no_grad()
    def fit_logistic(self, features: torch.Tensor, labels: torch.Tensor, C: float = 1.0, seed: int = 0,
                     sample_weight=None) -> None:
        """Set the weights to an L2-regularised logistic regression fitted on ``features``
        (scikit-learn's ``LogisticRegression``, lbfgs, multinomial): the linear probe of SetFit's
        head and of LP-FT (Kumar et al., 2022). With two classes scikit-learn fits one weight
        vector ``w``; the two logits ``-w/2, +w/2`` give the same probabilities under softmax."""
        from sklearn.linear_model import LogisticRegression

        x = features.detach().float().cpu().numpy()
        y = labels.detach().long().cpu().numpy()
        classes = sorted(set(y.tolist()))
        n_out = self.linear.out_features
        weight = torch.zeros_like(self.linear.weight)
        bias = torch.zeros_like(self.linear.bias)
        if len(classes) < 2:
            raise ValueError("a logistic-regression head needs examples of at least two classes")
        clf = LogisticRegression(C=C, max_iter=1000, random_state=seed).fit(
            x, y, sample_weight=None if sample_weight is None else torch.as_tensor(sample_weight).cpu().numpy())
        coef = torch.as_tensor(clf.coef_, dtype=weight.dtype)
        intercept = torch.as_tensor(clf.intercept_, dtype=bias.dtype)
        if len(classes) == 2:
            coef = torch.cat([-coef / 2, coef / 2])
            intercept = torch.cat([-intercept / 2, intercept / 2])
        # a class absent from the features keeps a logit far below the others
        bias.fill_(-1e4 if len(classes) < n_out else 0.0)
        index = torch.as_tensor(classes, device=weight.device)
        weight[index] = coef.to(weight.device)
        bias[index] = intercept.to(bias.device)
        self.linear.weight.copy_(weight)
        self.linear.bias.copy_(bias)


class MLPHead(nn.Module):
    """``depth`` linear layers with a non-linearity between them (RoBERTa's head has depth 2)."""

    def __init__(self, hidden_size: int, num_outputs: int, depth: int = 2, inner_size: int | None = None,
                 dropout: float = 0.1, activation: str = "tanh"):
        super().__init__()
        if depth < 1:
            raise ValueError("an MLP head needs depth >= 1")
        inner = inner_size or hidden_size
        act = {"tanh": nn.Tanh, "relu": nn.ReLU, "gelu": nn.GELU}[activation]
        layers: list[nn.Module] = []
        width = hidden_size
        for _ in range(depth - 1):
            layers += [nn.Dropout(dropout), nn.Linear(width, inner), act()]
            width = inner
        layers += [nn.Dropout(dropout), nn.Linear(width, num_outputs)]
        self.layers = nn.Sequential(*layers)

    def forward(self, embeddings: torch.Tensor) -> torch.Tensor:
        return self.layers(embeddings)


class LabelFusion(nn.Module):
    r"""LaCon-fusion's label fusion block (Zhang et al., Eq. 9; LEAM, Wang et al. 2018, Eq. 2-5).

    For token embeddings ``E`` (b, s, d), label embeddings ``L`` (C, d) and the attention mask:

    1. ``G[c, j] = cos(L_c, E_j)`` (b, C, s), the word-label compatibility matrix; padded
       positions are set to 0 (exactly what the convolution's own zero padding puts past the ends).
    2. ``u[c, j] = ReLU(sum_{t=-r..r} w_t G[c, j+t] + b_c)``: one filter ``w`` of width ``2r+1``
       shared by all labels, and one bias per label (LEAM Eq. 4: ``W_1 in R^{2r+1}``,
       ``b_1 in R^K``); zero padding keeps the length ``s``.
    3. ``m_j = max_c u[c, j]`` (max-pooling over the labels, LEAM Eq. 5).
    4. ``beta = softmax(m)`` over the **non-padding** tokens (padding gets weight exactly 0);
       ``z = sum_j beta_j E_j``.

    Appending padding to a sequence therefore changes neither ``beta`` on its real tokens nor ``z``.

    Precision: G, the convolution and the softmax run with autocast off in float32, or in float64
    when the token or label embeddings are float64 (:func:`contrastfit.losses._common.compute_dtype`):
    a cosine rounded to bf16 and then sharpened by a softmax would put the weight on the wrong token.
    The weighted sum ``z`` follows the input like the other heads' layers: it has the token
    embeddings' dtype (float64 in, float64 out), and under autocast it is computed in autocast's
    precision (bf16 under ``torch.autocast("cpu", torch.bfloat16)``, as ``nn.Linear`` would be).
    """

    def __init__(self, num_labels: int, radius: int):
        super().__init__()
        if radius < 0:
            raise ValueError(f"fusion radius must be >= 0, got {radius}")
        self.radius = radius
        self.conv = nn.Conv1d(1, 1, kernel_size=2 * radius + 1, padding=radius, bias=False)
        self.bias = nn.Parameter(torch.zeros(num_labels))

    def attention(self, token_embeddings: torch.Tensor, attention_mask: torch.Tensor,
                  label_embeddings: torch.Tensor) -> torch.Tensor:
        """The token weights ``beta`` (b, s); rows sum to 1, padding positions are 0."""
        b, s, _ = token_embeddings.shape
        c = label_embeddings.shape[0]
        keep = attention_mask.bool()
        dtype = compute_dtype(token_embeddings, label_embeddings)
        with torch.autocast(device_type=token_embeddings.device.type, enabled=False):
            e = F.normalize(token_embeddings.to(dtype), p=2, dim=-1)
            lab = F.normalize(label_embeddings.to(dtype), p=2, dim=-1)
            g = torch.einsum("cd,bsd->bcs", lab, e) * keep.unsqueeze(1)  # (b, C, s)
            u = F.conv1d(g.reshape(b * c, 1, s), self.conv.weight.to(dtype), padding=self.radius)
            u = u.reshape(b, c, s) + self.bias.to(dtype).view(1, c, 1)
            m = torch.relu(u).amax(dim=1)  # (b, s)
            # the most negative finite float, not -inf: exp underflows to exactly 0 for padding, and a
            # row without any real token (no tokenizer makes one) gives zeros, not NaN
            m = m.masked_fill(~keep, torch.finfo(m.dtype).min)
            beta = torch.softmax(m, dim=1)
            return torch.where(keep, beta, torch.zeros_like(beta))

    def forward(self, token_embeddings: torch.Tensor, attention_mask: torch.Tensor,
                label_embeddings: torch.Tensor) -> torch.Tensor:
        """The fused vector ``z`` (b, d), in the token embeddings' dtype (or autocast's)."""
        beta = self.attention(token_embeddings, attention_mask, label_embeddings)
        return torch.einsum("bs,bsd->bd", beta.to(token_embeddings.dtype), token_embeddings)


class LabelMatchingHead(nn.Module):
    """LaCon's head (Zhang et al., Sec. 2.1, 2.5, 2.6).

    * ``projection`` (``g``): a ``depth``-layer MLP ``hidden_size -> dim -> ... -> dim`` with ReLU
      after every hidden layer and none on the output (Sec. 2.1: "a 3-layer MLP with ReLU activation
      function for each hidden layer"; dropout ``dropout``, 0 by default: the paper names none).
      ``depth = 0`` is no projection (the "-g" ablation, Table 3; needs ``dim == hidden_size``).
    * ``label_embeddings`` (``W_emb``, Eq. 2): an ``(num_labels, dim)`` parameter, randomly
      initialised (Sec. 2.1) from N(0, 1), like ``nn.Embedding``; only its direction matters.
    * ``forward(features)``: Eq. 8 as logits, ``cos(g(features), L) / temperature``; the argmax is the
      prediction and the softmax a distribution over labels.
    * ``fusion`` (``fusion_radius`` not None): the :class:`LabelFusion` block of LaCon-fusion, which
      uses these same label embeddings (so ``dim`` must equal the encoder's hidden size).
    """

    def __init__(self, hidden_size: int, num_outputs: int, dim: int | None = None, depth: int = 3,
                 temperature: float = 1.0, dropout: float = 0.0, fusion_radius: int | None = None):
        super().__init__()
        dim = dim or hidden_size
        if depth < 0:
            raise ValueError(f"projection depth must be >= 0, got {depth}")
        if depth == 0 and dim != hidden_size:
            raise ValueError(f"no projection (depth 0) needs dim == hidden_size ({hidden_size}), got {dim}")
        if temperature <= 0:
            raise ValueError(f"temperature must be > 0, got {temperature}")
        if fusion_radius is not None and dim != hidden_size:
            raise ValueError(f"label fusion compares label and token embeddings: dim must be {hidden_size}, got {dim}")
        self.dim = dim
        self.temperature = float(temperature)
        self.projection: nn.Module = (
            MLPHead(hidden_size, dim, depth=depth, inner_size=dim, dropout=dropout, activation="relu")
            if depth > 0 else nn.Identity()
        )
        self.label_embeddings = nn.Parameter(torch.randn(num_outputs, dim))
        self.fusion = LabelFusion(num_outputs, fusion_radius) if fusion_radius is not None else None

    def project(self, features: torch.Tensor) -> torch.Tensor:
        """``H = g(features)`` (Eq. 1), not normalised."""
        return self.projection(features)

    def fuse(self, token_embeddings: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """LaCon-fusion's ``z`` (Eq. 9) from the encoder's token embeddings."""
        if self.fusion is None:
            raise RuntimeError("this head has no label fusion block (build it with fusion_radius)")
        return self.fusion(token_embeddings, attention_mask, self.label_embeddings)

    def match(self, projected: torch.Tensor) -> torch.Tensor:
        """Logits of already projected embeddings: ``cos(H, L) / temperature`` (Eq. 8)."""
        return lacon_predict(projected, self.label_embeddings) / self.temperature

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        return self.match(self.project(features))


class ProjectionClassifierHead(nn.Module):
    """"BERT w/ g" (Zhang et al., Table 3): LaCon's projection head ``g`` and then a linear classifier.

    ``projection`` is built exactly as :class:`~contrastfit.heads.LabelMatchingHead`'s (``depth``
    linear layers ``hidden_size -> dim -> ... -> dim``, ReLU after each hidden layer, none on the
    output, no dropout); ``classifier`` is BERT's head (:class:`~contrastfit.heads.LinearHead`:
    dropout 0.1, one linear layer) on ``g``'s output. ``forward(features)`` returns the logits.
    """

    def __init__(self, hidden_size: int, num_outputs: int, dim: int | None = None, depth: int = 3,
                 dropout: float = 0.1):
        super().__init__()
        if depth < 1:
            raise ValueError(f"projection depth must be >= 1, got {depth}")
        dim = dim or hidden_size
        self.dim = dim
        self.projection = MLPHead(hidden_size, dim, depth=depth, inner_size=dim, dropout=0.0, activation="relu")
        self.classifier = LinearHead(dim, num_outputs, dropout=dropout)

    def project(self, features: torch.Tensor) -> torch.Tensor:
        """``g(features)``."""
        return self.projection(features)

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.projection(features))


# ---------------------------------------------------------------------------------------------
# The CS224N report's task heads (SimCSE, DiffCSE), Sec. 4.2
# ---------------------------------------------------------------------------------------------

HEAD_DROPOUT = 0.1  # report, classifier fine-tuning table
STS_HIDDEN = 10  # report, Sec. 4.2: cosine -> [1, 10] -> [10, 1]


def _halves(features: torch.Tensor, hidden_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    if features.dim() != 2 or features.shape[1] != 2 * hidden_size:
        raise ValueError(f"pair features must be (batch, {2 * hidden_size}) = [u; v], got {tuple(features.shape)}")
    return features[:, :hidden_size], features[:, hidden_size:]


class CosineRegressionHead(nn.Module):
    """STS head: ``cos(u, v)`` -> Linear(1, 10) -> ReLU -> Linear(10, 1) (report Sec. 4.2, Sec. 6.1).
    Reads ``[u; v]`` (batch, 2 hidden); returns (batch, 1)."""

    def __init__(self, hidden_size: int, inner_size: int = STS_HIDDEN):
        super().__init__()
        self.hidden_size = hidden_size
        self.mlp = nn.Sequential(nn.Linear(1, inner_size), nn.ReLU(), nn.Linear(inner_size, 1))

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        u, v = _halves(features, self.hidden_size)
        return self.mlp(F.cosine_similarity(u, v, dim=-1).unsqueeze(-1))


class PairConcatHead(nn.Module):
    """Paraphrase head: ``[u; v]`` -> dropout -> Linear(2 hidden, hidden) -> ReLU -> dropout ->
    Linear(hidden, outputs) (report Sec. 4.2: [1536, 768], [768, ·] for BERT-base)."""

    def __init__(self, hidden_size: int, num_outputs: int, dropout: float = HEAD_DROPOUT):
        super().__init__()
        self.hidden_size = hidden_size
        self.mlp = MLPHead(2 * hidden_size, num_outputs, depth=2, inner_size=hidden_size, dropout=dropout,
                           activation="relu")

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        _halves(features, self.hidden_size)  # shape check
        return self.mlp(features)


class SimCSETaskHead(nn.Module):
    """The report's heads, picked by the width of the features: ``hidden`` (one sentence) -> MLP
    ``hidden -> hidden/2 -> outputs`` (ReLU, dropout); ``2 hidden`` (a pair ``[u; v]``) ->
    :class:`CosineRegressionHead` for a regression target, else :class:`PairConcatHead`. Both branches
    exist (and are saved) whatever the data; only the one the data uses is trained."""

    def __init__(self, hidden_size: int, num_outputs: int, task: str = "classification", dropout: float = HEAD_DROPOUT):
        super().__init__()
        self.hidden_size = hidden_size
        self.single = MLPHead(hidden_size, num_outputs, depth=2, inner_size=max(1, hidden_size // 2),
                              dropout=dropout, activation="relu")
        if task == "regression":
            self.pair: nn.Module = CosineRegressionHead(hidden_size)
        else:
            self.pair = PairConcatHead(hidden_size, num_outputs, dropout)

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        if features.shape[-1] == self.hidden_size:
            return self.single(features)
        if features.shape[-1] == 2 * self.hidden_size:
            return self.pair(features)
        raise ValueError(f"features of width {features.shape[-1]}: expected {self.hidden_size} (one sentence) "
                         f"or {2 * self.hidden_size} (a pair)")


HEADS = {"linear": LinearHead, "mlp": MLPHead, "label-matching": LabelMatchingHead}


def build_head(kind: str, hidden_size: int, num_outputs: int, **kwargs) -> nn.Module:
    try:
        cls = HEADS[kind]
    except KeyError:
        raise ValueError(f"unknown head '{kind}' (choose from {', '.join(HEADS)})") from None
    return cls(hidden_size, num_outputs, **kwargs)
