"""Multi-label classification: a text carries a set of labels (docs/how-to/multi-label.md).

* the methods' forms for label sets are in each method's own file (``ce``, ``ce-scl``, ``ce-scl-lr``, the
  default, and ``linear-probe``; :func:`contrastfit.methods.base.register_label_sets`): a sigmoid head
  trained with BCE-with-logits, and Jaccard-weighted SupCon (:func:`contrastfit.losses.jaccard_supcon`)
  for the contrastive ones; ``MULTILABEL_METHODS`` names them;
* :mod:`.model`: what a multi-label :class:`~contrastfit.modeling.ContrastiveClassifier` does
  differently (per-label probabilities and thresholds, label lists, per-label temperatures);
* :mod:`.cli`: what ``evaluate`` and ``calibrate`` read and print for label sets.

The label-set task shape that ``contrastfit train --multi-label`` / ``train(multi_label=True)`` plugs
into the one training job is :mod:`contrastfit.shapes.label_sets`.

The data side is :mod:`contrastfit.data.multilabel`; the metrics and thresholds
:mod:`contrastfit.evaluation.multilabel`.
"""

from ..methods import multilabel_methods
from ..methods.base import DEFAULT_MULTILABEL_METHOD, create_multilabel_method

#: single-label method name -> its form for label sets (every registered one that has one)
MULTILABEL_METHODS = multilabel_methods()

__all__ = ["MULTILABEL_METHODS", "DEFAULT_MULTILABEL_METHOD", "create_multilabel_method"]
