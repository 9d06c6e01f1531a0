"""What a model's logits mean: one class, a value, or a set of labels.

A model's outputs have one of three forms, and every reader of its logits (``predict_proba`` and
``predict`` of the PyTorch model and of its ONNX export, the rows ``predict`` and ``serve`` write,
the export's parity check) goes through its form instead of asking which it is:

* :data:`CLASSES`: ``softmax(logits / T)`` (``T``: the model's ``temperature``, 1 until calibrated);
  the prediction is the class of the largest logit, as the training data gave it (``labels``);
* :data:`REGRESSION`: the one output is the value;
* :data:`LABEL_SETS`: each label's ``sigmoid(logit_j / T_j)`` (``temperatures``, 1 each until
  calibrated); the prediction is the labels whose probability is at or above their ``thresholds``
  (chosen on validation when the model was trained), in label order, possibly none.

A form reads from the model only ``label_names``, ``labels``, ``temperature``, ``temperatures`` and
``thresholds``, which both :class:`~contrastfit.modeling.ContrastiveClassifier` and
:class:`~contrastfit.onnx_model.OnnxClassifier` have. NumPy only: the ONNX runtime model imports it
without PyTorch. A method declares its form (``Method.outputs``; a label-set form's is
:data:`LABEL_SETS`), and an ONNX export records its name (``export.json``: ``outputs``).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, Sequence

import numpy as np


def log_softmax(logits: np.ndarray) -> np.ndarray:
    """Row-wise ``log(softmax(logits))`` in float64, stable."""
    z = np.asarray(logits, dtype=np.float64)
    z = z - z.max(axis=1, keepdims=True)
    return z - np.log(np.exp(z).sum(axis=1, keepdims=True))


def sigmoid(logits: np.ndarray) -> np.ndarray:
    """``1 / (1 + exp(-logits))`` in float64."""
    logits = np.asarray(logits, dtype=np.float64)
    return 1.0 / (1.0 + np.exp(-logits))


def _rounded(names: Sequence[str], scores: np.ndarray) -> dict[str, float]:
    return {n: round(float(p), 6) for n, p in zip(names, scores)}


class OutputForm(ABC):
    """What every form gives: its probabilities, decisions, predictions and ``predict``'s rows (each form
    states them), and by default no near ties and an export that records only the form's name."""

    name = ""
    #: the activation a Hugging Face ``config.json`` names for these outputs (None: none)
    activation: str | None = None

    @abstractmethod
    def probabilities(self, model: Any, logits: np.ndarray) -> np.ndarray:
        """What ``predict_proba`` gives for ``logits``."""

    @abstractmethod
    def decisions(self, model: Any, logits: np.ndarray) -> np.ndarray:
        """What a prediction is decided by (what the export's check compares)."""

    @abstractmethod
    def predictions(self, model: Any, logits: np.ndarray) -> list:
        """What ``predict`` gives for ``logits``."""

    @abstractmethod
    def rows(self, model: Any, scores: np.ndarray) -> list[dict[str, Any]]:
        """``predict``'s rows of ``scores`` (:meth:`probabilities`)."""

    def near_ties(self, model: Any, logits: np.ndarray, band: float) -> np.ndarray:
        """The texts whose prediction a change of ``band`` in a probability could change."""
        return np.zeros(len(logits), dtype=bool)

    def serving(self, model: Any) -> dict[str, Any]:
        """What an export records of the form, beside the model's labels and temperature."""
        return {"outputs": self.name}


def _labels(model: Any) -> list:
    """The classes as predictions give them: ``labels`` (ints where the training labels were), else the names."""
    return getattr(model, "labels", None) or model.label_names


class Classes(OutputForm):
    """One class per text: the softmax of the logits over the calibrated temperature."""

    name = "classes"
    activation = "softmax"

    def probabilities(self, model: Any, logits: np.ndarray) -> np.ndarray:
        return np.exp(log_softmax(np.asarray(logits, dtype=np.float64) / model.temperature)).astype(np.float32)

    def decisions(self, model: Any, logits: np.ndarray) -> np.ndarray:
        """The index of the largest logit."""
        return np.asarray(logits).argmax(axis=1)

    def predictions(self, model: Any, logits: np.ndarray) -> list:
        labels = _labels(model)
        return [labels[i] for i in self.decisions(model, logits)]

    def near_ties(self, model: Any, logits: np.ndarray, band: float) -> np.ndarray:
        """The texts whose two largest probabilities are within ``2 * band``."""
        p = self.probabilities(model, logits)
        if p.shape[1] < 2:
            return super().near_ties(model, logits, band)
        top2 = np.sort(p, axis=1)[:, -2:]
        return top2[:, 1] - top2[:, 0] < 2 * band

    def rows(self, model: Any, scores: np.ndarray) -> list[dict[str, Any]]:
        """``label`` and ``probabilities``."""
        labels = _labels(model)
        return [{"label": labels[int(s.argmax())], "probabilities": _rounded(model.label_names, s)} for s in scores]


class Regression(OutputForm):
    """One value per text: the output itself."""

    name = "regression"

    def probabilities(self, model: Any, logits: np.ndarray) -> np.ndarray:
        return logits

    def decisions(self, model: Any, logits: np.ndarray) -> np.ndarray:
        return np.asarray(logits)[:, 0]

    def predictions(self, model: Any, logits: np.ndarray) -> list:
        return self.decisions(model, logits).tolist()

    def rows(self, model: Any, scores: np.ndarray) -> list[dict[str, Any]]:
        """``score``."""
        return [{"score": float(s[0])} for s in scores]


class LabelSets(OutputForm):
    """A set of labels per text: each label's sigmoid over its temperature, against its threshold."""

    name = "label-sets"
    activation = "sigmoid"

    def probabilities(self, model: Any, logits: np.ndarray) -> np.ndarray:
        temperatures = np.asarray(model.temperatures, dtype=np.float64)
        return sigmoid(np.asarray(logits, dtype=np.float64) / temperatures).astype(np.float32)

    @staticmethod
    def _chosen(model: Any, probabilities: np.ndarray) -> np.ndarray:
        """Which labels each text gets: (texts, labels) booleans, each probability against its threshold."""
        return np.asarray(probabilities, dtype=np.float64) >= np.asarray(model.thresholds, dtype=np.float64)

    def decisions(self, model: Any, logits: np.ndarray) -> np.ndarray:
        return self._chosen(model, self.probabilities(model, logits))

    def predictions(self, model: Any, logits: np.ndarray) -> list:
        names = model.label_names
        return [[names[j] for j in np.flatnonzero(row)] for row in self.decisions(model, logits)]

    def near_ties(self, model: Any, logits: np.ndarray, band: float) -> np.ndarray:
        """The texts with a label whose probability is within ``band`` of its threshold."""
        p = self.probabilities(model, logits)
        return (np.abs(p - np.asarray(model.thresholds)) < band).any(axis=1)

    def serving(self, model: Any) -> dict[str, Any]:
        """The form, each label's threshold and temperature (``multi_label``: as exports before the
        form was recorded said it)."""
        return {**super().serving(model), "multi_label": True, "thresholds": [float(t) for t in model.thresholds],
                "temperatures": [float(t) for t in model.temperatures]}

    def rows(self, model: Any, scores: np.ndarray) -> list[dict[str, Any]]:
        """``labels`` (a list, possibly empty) and ``probabilities`` (per label)."""
        names = model.label_names
        return [{"labels": [names[j] for j in np.flatnonzero(row)], "probabilities": _rounded(names, s)}
                for row, s in zip(self._chosen(model, scores), scores)]


def for_task(task: str) -> "Classes | Regression":
    """The form of a single-label model of ``task`` (``classification`` or ``regression``)."""
    return REGRESSION if task == "regression" else CLASSES


CLASSES, REGRESSION, LABEL_SETS = Classes(), Regression(), LabelSets()
#: Every form by its name (what an ONNX export records).
FORMS = {form.name: form for form in (CLASSES, REGRESSION, LABEL_SETS)}
