"""The head stage: fit a model's head on its frozen encoder.

Two-stage methods (SupCL-Seq, SimCSE, DiffCSE, SetFit, the linear probe, the default recipe) fit their
head here once the encoder stage is done; ``--refit-head`` and LP-FT's ``--head-init probe`` use it
too; for label sets the logistic regression is one-vs-rest, a regression per label.
"""

from __future__ import annotations

import time
from types import SimpleNamespace
from typing import Any, Callable

import datasets
import numpy as np
import torch
from sklearn.linear_model import LogisticRegression
from torch.utils.data import DataLoader
from tqdm.auto import tqdm

from .errors import ConfigError
from .methods.base import LogisticHead
from .modeling import ContrastiveClassifier
from .pipeline import SELECTION_KEY
from .trainer import _compute_metrics

Batch = dict[str, torch.Tensor]


def train_head(model: ContrastiveClassifier, train_ds: datasets.Dataset, collator, *, seed: int = 0,
               cache: bool = True, progress: bool = False, epochs: int | None = None,
               solver: str | None = None, validation_ds: datasets.Dataset | None = None,
               metric: str = "accuracy", eval_every: int | None = None) -> dict[str, Any]:
    """Freeze the encoder and fit ``model.head`` on the method's head features of the training set.

    ``solver`` (default: the method's ``head_solver``):

    * ``"adamw"``: ``head_epochs`` epochs of AdamW (``head_learning_rate``, mini-batches of
      ``head_batch_size`` shuffled with a generator seeded by ``seed``) on the method's task loss
      (CE, or MSE for a regression target);
    * ``"logistic"``: scikit-learn's L2-regularised logistic regression (``head_C``), copied into the
      linear head (:meth:`contrastfit.heads.LinearHead.fit_logistic`), as SetFit does.

    With ``cache=True`` (the default) the training set is encoded **once** and the head trains on
    the cached features; ``cache=False`` re-encodes every mini-batch of every epoch (AdamW only;
    useful to measure what the cache saves, see ``bench/``).

    With ``validation_ds`` (AdamW only), the head epoch is chosen on validation as the encoder step is
    in one-stage runs: the validation set is encoded once, scored every ``eval_every`` epochs
    (default: a tenth of them) by the same selection score (``metric``, ties broken by the lower
    validation loss), and the best head is kept; ``head_selection`` in the record says which.
    """
    method = model.method
    solver = solver or method.head_solver
    if solver not in ("adamw", "logistic"):
        raise ConfigError(f"unknown head solver '{solver}' (choose adamw or logistic)")
    if solver == "logistic" and (model.task != "classification" or not hasattr(model.head, "fit_logistic")):
        raise ConfigError(f"{method.name}: a logistic-regression head needs class labels and a linear head")
    frozen = [p for p in model.encoder.parameters() if p.requires_grad]
    for p in frozen:
        p.requires_grad_(False)
    model.eval()  # no dropout in the frozen encoder

    def encode(batch: Batch) -> tuple[torch.Tensor, torch.Tensor]:
        batch = {k: v.to(model.device) for k, v in batch.items()}
        labels = batch.pop("labels")
        with torch.no_grad():
            return method.head_features(model, batch).float(), labels

    t0 = time.perf_counter()
    try:
        features = labels = None
        if cache or solver == "logistic":
            features, labels = _encode_all(encode, train_ds, collator)
        t_encode = time.perf_counter() - t0
        if solver == "logistic":
            C, names = _logistic(model, features, labels, seed)
            return {"solver": "one-vs-rest logistic" if model.multi_label else solver, "C": C, "encode_s": t_encode,
                    "total_s": time.perf_counter() - t0, **names}
        scorer = None
        if validation_ds is not None and len(validation_ds) > 0:
            scorer = _HeadScorer(model, *_encode_all(encode, validation_ds, collator), metric)
        stage = _adamw(model, train_ds, collator, encode, features, labels, seed=seed, epochs=epochs, cache=cache,
                       progress=progress, scorer=scorer, eval_every=eval_every)
    finally:
        for p in frozen:
            p.requires_grad_(True)
        model.eval()
    selection = stage.pop("head_selection")
    final_loss = stage.pop("final_loss")
    return {**stage, "cached": cache, "encode_s": t_encode, "total_s": time.perf_counter() - t0,
            "final_loss": final_loss, "head_selection": selection}


def _encode_all(encode: Callable[[Batch], tuple[torch.Tensor, torch.Tensor]], ds: datasets.Dataset,
                collator) -> tuple[torch.Tensor, torch.Tensor]:
    parts = [encode(b) for b in DataLoader(ds, batch_size=64, shuffle=False, collate_fn=collator)]
    return torch.cat([f for f, _ in parts]), torch.cat([y for _, y in parts])


def _logistic(model: ContrastiveClassifier, features: torch.Tensor, labels: torch.Tensor,
              seed: int) -> tuple[float, dict[str, Any]]:
    """The logistic-regression head (one-vs-rest for label sets), with the label texts as weighted
    examples where ``label_prior`` > 0: its C, and where the prior is on, whether the names joined the
    fit (or why not)."""
    method = model.method
    head = LogisticHead.of(method)
    C, prior = float(head.head_C), float(head.label_prior)
    anchors = None
    if prior > 0 and hasattr(method, "label_features"):
        with torch.no_grad():
            anchors = method.label_features(model)  # None where the names are not used (codes, pairs)
            anchors = anchors if anchors is None else anchors.float()
    if model.multi_label:  # each label's text a positive of its own label, weighing `prior` times its positives
        fit_ovr_logistic(model.head, features, labels, C=C, seed=seed, anchors=anchors, prior=prior)
    else:
        weight = None
        if anchors is not None:  # each label text weighs as much as `prior` times its class's mean count
            n = len(labels)
            weight = torch.cat([torch.ones(n), torch.full((len(anchors),), prior * n / len(anchors))])
            features = torch.cat([features, anchors.to(features.device)])
            labels = torch.cat([labels, torch.arange(len(anchors), device=labels.device)])
        model.head.fit_logistic(features, labels, C=C, seed=seed, sample_weight=weight)
    if prior == 0:
        return C, {}
    return C, {"label_prior": "used" if anchors is not None else getattr(method, "anchor_note", None)}


class _HeadScorer:
    """Scores the head on the encoded validation set by the selection score, and keeps the best head."""

    def __init__(self, model: ContrastiveClassifier, features: torch.Tensor, labels: torch.Tensor, metric: str):
        self.model, self.features, self.labels, self.metric = model, features, labels.cpu().numpy(), metric
        self.compute = _compute_metrics(model.label_names, metric)
        self.evaluations: list[dict[str, float]] = []
        self.best: tuple[float, int, dict[str, torch.Tensor]] | None = None

    def __call__(self, epoch: int) -> None:
        head = self.model.head
        head.eval()
        with torch.no_grad():
            logits = head(self.features).float().cpu().numpy()
        scores = self.compute(SimpleNamespace(predictions=logits, label_ids=self.labels))
        self.evaluations.append({"epoch": epoch, **scores})
        if self.best is None or scores[SELECTION_KEY] > self.best[0]:
            self.best = (scores[SELECTION_KEY], epoch, {k: v.detach().clone() for k, v in head.state_dict().items()})

    def keep_best(self) -> dict[str, Any] | None:
        """Load the best head; what the record's ``head_selection`` says."""
        if self.best is None:
            return None
        self.model.head.load_state_dict(self.best[2])
        best_epoch = self.best[1]
        return {"metric": self.metric, "best_epoch": best_epoch, "evaluations": self.evaluations,
                "best_value": next(e.get(self.metric) for e in self.evaluations if e["epoch"] == best_epoch)}


def _adamw(model: ContrastiveClassifier, train_ds: datasets.Dataset, collator, encode, features, labels, *, seed: int,
           epochs: int | None, cache: bool, progress: bool, scorer: _HeadScorer | None,
           eval_every: int | None) -> dict[str, Any]:
    """Epochs of AdamW on the method's task loss; the epoch kept is the scorer's best, where there is one."""
    method, hp = model.method, model.method.hp
    epochs = int(epochs if epochs is not None else hp.head_epochs)
    batch_size = int(hp.head_batch_size)
    optimizer = torch.optim.AdamW(model.head.parameters(), lr=float(hp.head_learning_rate), weight_decay=0.0)
    generator = torch.Generator().manual_seed(seed)
    n = len(train_ds)
    every = eval_every or max(1, epochs // 10)
    last = float("nan")
    model.head.train()
    for epoch in tqdm(range(1, epochs + 1), desc="head", disable=not progress, leave=False):
        order = torch.randperm(n, generator=generator)
        for start in range(0, n, batch_size):
            idx = order[start:start + batch_size]
            if cache:
                x, y = features[idx.to(features.device)], labels[idx.to(labels.device)]
            else:
                x, y = encode(collator([train_ds[int(i)] for i in idx]))
            loss = method.task_loss(model.head(x), y)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            last = float(loss.detach())
        if scorer is not None and (epoch % every == 0 or epoch == epochs):
            scorer(epoch)
            model.head.train()
    return {"solver": "adamw", "epochs": epochs, "batch_size": batch_size,
            "learning_rate": float(hp.head_learning_rate), "final_loss": last,
            "head_selection": scorer.keep_best() if scorer is not None else None}


@torch.no_grad()
def fit_ovr_logistic(head: torch.nn.Module, features: torch.Tensor, label_sets: torch.Tensor, C: float = 1.0,
                     seed: int = 0, anchors: torch.Tensor | None = None, prior: float = 0.0) -> None:
    """One-vs-rest: for each label, scikit-learn's ``LogisticRegression`` (L2, ``C``, lbfgs) on
    ``features`` against that label's 0/1 column, copied into row ``j`` of the linear head. A label
    that is on (off) for every training row gets weight 0 and bias +10 (-10). With ``anchors`` (one
    row per label: the label names' features) and ``prior`` > 0, row ``j`` joins label ``j``'s
    regression as a positive weighing ``prior`` times the label's positive rows together (at least one)."""
    linear = head.linear
    x = features.detach().float().cpu().numpy()
    y = (label_sets.detach().float().cpu().numpy() > 0.5).astype(int)
    names = anchors.detach().float().cpu().numpy() if anchors is not None and prior > 0 else None
    weight = torch.zeros_like(linear.weight)
    bias = torch.zeros_like(linear.bias)
    for j in range(y.shape[1]):
        xj, yj, wj = x, y[:, j], None
        if names is not None:
            xj, yj = np.vstack([x, names[j:j + 1]]), np.append(yj, 1)
            wj = np.append(np.ones(len(x)), prior * max(int(y[:, j].sum()), 1))
        if yj.min() == yj.max():
            bias[j] = 10.0 if yj[0] else -10.0
            continue
        clf = LogisticRegression(C=C, max_iter=1000, random_state=seed).fit(xj, yj, sample_weight=wj)
        weight[j] = torch.as_tensor(clf.coef_[0], dtype=weight.dtype)
        bias[j] = float(clf.intercept_[0])
    linear.weight.copy_(weight)
    linear.bias.copy_(bias)
