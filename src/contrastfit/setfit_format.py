"""A trained model as a SetFit model: ``contrastfit export RUN --format setfit --output DIR`` writes a
folder that ``setfit.SetFitModel.from_pretrained(DIR)`` loads, and that predicts the same labels and
probabilities as the contrastfit model (checked to :data:`TOLERANCE` before anything is written).

SetFit's format is a sentence-transformers model (the body) with ``config_setfit.json`` (its labels and
whether it normalises the embeddings) and ``model_head.pkl``, a scikit-learn classifier saved with joblib.
The run's ``encoder/`` is already a sentence-transformers model (:mod:`contrastfit.hub`), so the body is a
copy of it; the head is a ``LogisticRegression`` whose coefficients are the model's linear head divided by
its temperature (one vector ``w1 - w0`` for two classes, as scikit-learn keeps a binary model). That
holds for every model whose head is a logistic regression on the sentence embedding (the default recipe,
the linear probe, ``setfit``; any method with ``--refit-head``); another head (LaCon's label matching, an
MLP, a head trained jointly on other features), a model of text pairs, of label sets or of a regression
target has no SetFit equivalent and is refused in one line saying why.

The pickle is written, never read, by contrastfit: SetFit reads it (``joblib.load``), so load such a
folder only from a source you trust, as any SetFit model.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import torch

from .atomic import atomic_folder, check_output, write_json_atomic
from .errors import ModelError
from .export import check_texts
from .inference import takes_pairs
from .modeling import ENCODER_DIR, ContrastiveClassifier
from .outputs import LABEL_SETS, REGRESSION
from .versions import library_versions

__all__ = ["SETFIT_CONFIG", "SETFIT_HEAD", "TOLERANCE", "export_setfit", "setfit_head"]

SETFIT_CONFIG = "config_setfit.json"
SETFIT_HEAD = "model_head.pkl"
#: the largest probability difference allowed between the SetFit model and the contrastfit one
TOLERANCE = 1e-5
#: what the export records next to SetFit's files
RECORD_NAME = "contrastfit_export.json"


def _unsupported(model: ContrastiveClassifier) -> str | None:
    """Why ``model`` has no SetFit equivalent (None: it has one)."""
    if model.outputs is REGRESSION:
        return "a regression model"
    if model.outputs is LABEL_SETS:
        return "a multi-label model (one sigmoid a label)"
    if takes_pairs(model):
        return "a model of text pairs (SetFit takes one text)"
    if not hasattr(model.head, "linear") or not isinstance(model.head.linear, torch.nn.Linear):
        return f"a model whose head ({type(model.head).__name__}, method {model.method.name}) is not one linear layer"
    return None


def _head_features(model: ContrastiveClassifier, texts: list[str]) -> np.ndarray:
    """What the model's head reads for ``texts`` (the method's head features), as float64."""
    model.eval()
    out = []
    with torch.no_grad():
        for start in range(0, len(texts), 64):
            enc = model.tokenize(texts[start:start + 64], padding=True)
            batch = {k: torch.as_tensor(v, device=model.device) for k, v in enc.items()}
            out.append(model.method.head_features(model, batch).double().cpu().numpy())
    return np.concatenate(out)


def setfit_head(model: ContrastiveClassifier) -> Any:
    """The scikit-learn ``LogisticRegression`` that gives ``model``'s probabilities from its head's
    features: coefficients and intercepts of its linear head over its temperature."""
    from sklearn.linear_model import LogisticRegression

    weight = model.head.linear.weight.detach().double().cpu().numpy() / model.temperature
    bias = model.head.linear.bias.detach().double().cpu().numpy() / model.temperature
    n = len(model.label_names)
    head = LogisticRegression()
    head.classes_ = np.arange(n)
    if n == 2:  # scikit-learn's binary model: sigmoid(w x + b) is softmax over (w0 x + b0, w1 x + b1)
        head.coef_, head.intercept_ = (weight[1] - weight[0])[None, :], np.array([bias[1] - bias[0]])
    else:
        head.coef_, head.intercept_ = weight, bias
    head.n_features_in_ = weight.shape[1]
    head.n_iter_ = np.zeros(1, dtype=np.int32)
    return head


def export_setfit(run: str | os.PathLike, output: str | os.PathLike, *, check_data: str | os.PathLike | None = None,
                  text_column: str | None = None) -> dict[str, Any]:
    """Write the model in ``run`` as a SetFit model to ``output`` (see the module docstring); return
    what ``contrastfit_export.json`` records (the check: texts, where they came from, the largest
    probability difference, whether SetFit normalises the embeddings)."""
    import joblib
    from sentence_transformers import SentenceTransformer

    check_output(output, inputs=(run, check_data))
    model = ContrastiveClassifier.from_pretrained(run, device="cpu")
    why = _unsupported(model)
    if why is not None:
        raise ModelError(f"{run} is {why}: --format setfit needs a logistic-regression head on the sentence "
                         "embedding (the default recipe, linear-probe, setfit, or --refit-head)")
    texts, _, checked_on = check_texts(model, run, check_data=check_data, text_column=text_column)
    texts = list(texts)
    body = SentenceTransformer(str(Path(run) / ENCODER_DIR), device="cpu")
    embeddings = body.encode(texts, batch_size=64, convert_to_numpy=True).astype(np.float64)
    features = _head_features(model, texts)
    normalized = embeddings / np.linalg.norm(embeddings, axis=1, keepdims=True)
    normalize = next((flag for flag, e in ((False, embeddings), (True, normalized))
                      if e.shape == features.shape and np.abs(e - features).max() <= 1e-4), None)
    if normalize is None:
        raise ModelError(f"{run}: its head reads other features than the sentence embedding of {ENCODER_DIR}/ "
                         f"(method {model.method.name}), which SetFit cannot compute")
    head = setfit_head(model)
    got = head.predict_proba(normalized if normalize else embeddings)
    want = model.predict_proba(texts)
    worst = float(np.abs(got - want).max())
    if worst > TOLERANCE:
        raise ModelError(f"export --format setfit: the SetFit model's probabilities differ from contrastfit's by "
                         f"{worst:.1e} (at most {TOLERANCE:g}); nothing written to {output} "
                         f"(checked on {checked_on['description']})")
    record = {"format": "setfit", "source": str(Path(run).absolute()), "labels": list(model.label_names),
              "normalize_embeddings": normalize, "temperature": model.temperature,
              "verification": {"texts": len(texts), "max_prob_diff": worst, "tolerance": TOLERANCE,
                               "same_predictions": bool((got.argmax(1) == want.argmax(1)).all()),
                               "check_data": checked_on},
              "versions": library_versions()}
    with atomic_folder(output) as staging:
        shutil.copytree(Path(run) / ENCODER_DIR, staging, dirs_exist_ok=True)
        write_json_atomic(staging / SETFIT_CONFIG, {"labels": list(model.label_names), "normalize_embeddings": normalize})
        joblib.dump(head, staging / SETFIT_HEAD)
        write_json_atomic(staging / RECORD_NAME, record)
    return record
