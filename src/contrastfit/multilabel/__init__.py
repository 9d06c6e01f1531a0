"""Multi-label classification: a text carries a set of labels (docs/how-to/multi-label.md).

* :mod:`.methods`: the multi-label forms of ``ce``, ``ce-scl``, ``ce-scl-lr`` (the default) and
  ``linear-probe``: a sigmoid head trained with BCE-with-logits, and Jaccard-weighted SupCon
  (:func:`contrastfit.losses.jaccard_supcon`) for the contrastive ones;
* :mod:`.model`: what a multi-label :class:`~contrastfit.modeling.ContrastiveClassifier` does
  differently (per-label probabilities and thresholds, label lists, per-label temperatures);
* :mod:`.cli`: what ``evaluate`` and ``calibrate`` read and print for label sets.

The label-set task shape that ``contrastfit train --multi-label`` / ``train(multi_label=True)`` plugs
into the one training job is :mod:`contrastfit.shapes.label_sets`.

The data side is :mod:`contrastfit.data.multilabel`; the metrics and thresholds
:mod:`contrastfit.evaluation.multilabel`.
"""

from .methods import MULTILABEL_METHODS, DEFAULT_MULTILABEL_METHOD, create_multilabel_method

__all__ = ["MULTILABEL_METHODS", "DEFAULT_MULTILABEL_METHOD", "create_multilabel_method"]
