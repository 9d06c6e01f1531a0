"""The label-set task shape (``contrastfit train --multi-label`` / ``train(..., multi_label=True)``).

The one training job (:func:`contrastfit.training.train`) with :class:`LabelSets` plugged in
(:class:`~contrastfit.shapes.single_label.TaskShape` is the single-label shape it overrides): the same Trainer
(:func:`contrastfit.trainer.build_trainer`: the batches of
:class:`~contrastfit.data.multilabel.MultiLabelBatchSampler` with ``--sampler balanced``) and the same
:class:`~contrastfit.record.Record` (kind ``train``, ``data.multi_label`` true). What differs:

1. the data: ``--shots K`` draws a sample with at least K texts per label
   (:func:`~contrastfit.data.multilabel.sample_per_label`); ``--train-size`` / ``--validation-size``
   draw plain random subsets (seeded like the single-label draws);
2. the model: the encoder and a sigmoid head with the multi-label form of the method
   (each in its method's file, :func:`contrastfit.methods.base.register_label_sets`; default ``ce-scl-lr``: BCE + Jaccard-weighted SupCon, then
   one-vs-rest logistic regressions on the frozen encoder, :func:`contrastfit.head_stage.train_head`);
3. selection (``--select-best``): the best step on validation at threshold 0.5 by ``--metric-for-best``
   (:data:`SELECTION`; default micro-F1), ties broken by the lower validation BCE;
4. the thresholds: per label, on the validation split
   (:func:`contrastfit.evaluation.multilabel.choose_thresholds`; 0.5 without one), kept in the model
   (``info.thresholds``, the folder's ``contrastfit.json``) and the record (``training.thresholds``,
   ``training.threshold_rule``); the metrics on validation and test are at those thresholds.

Not available with ``--multi-label`` (a one-line error): ``--memory-size``, and methods other than
``ce``, ``ce-scl``, ``ce-scl-lr``, ``linear-probe``.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import datasets
import numpy as np

from ..data import load_data
from ..data.multilabel import (LabelSetReader, MultiLabelBatchSampler, is_multilabel, label_counts, random_subset,
                              sample_per_label)
from ..data.sampling import derive_seed
from ..data.types import LABEL, TEXT, TEXT_PAIR, TextData
from ..encoders import TextEncoder, load_backbone
from ..errors import ConfigError, DataError
from ..evaluation.multilabel import choose_thresholds, multilabel_metrics
from ..head_stage import train_head
from ..methods import get_method
from ..modeling import ContrastiveClassifier
from ..outputs import sigmoid
from ..methods.base import check_multilabel_method, create_multilabel_method, label_name_hparams
from ..pipeline import SELECTION_KEY, tie_broken
from ..trainer import with_method_defaults
from .single_label import PreparedData, TaskShape, sampling, validation_choices

#: --metric-for-best -> the multi-label metric it selects on
SELECTION = {None: "micro_f1", "f1": "micro_f1", "accuracy": "subset_accuracy", "macro_f1": "macro_f1", "loss": "loss"}


def check_multilabel_config(config) -> str:
    """What a multi-label run refuses before it loads anything (each a one-line ConfigError): a method
    without a multi-label form, ``--memory-size`` and a ``--metric-for-best`` without a multi-label
    meaning. Returns the metric that selects the kept step. An experiment config calls it for every
    variant when it is read (:mod:`contrastfit.experiments.config`)."""
    if config.memory_size is not None:
        raise ConfigError("--memory-size is not available with --multi-label (the memory holds one label per row)")
    check_multilabel_method(config.method)
    return LABEL_SETS.selection_metric(config)


def compute_metrics(label_names: list[str], metric: str):
    """The Trainer's validation metrics at threshold 0.5, the BCE ``loss`` and the selection score
    (the metric, ties broken by the lower loss: :func:`contrastfit.pipeline.tie_broken`)."""

    def compute(eval_pred) -> dict[str, float]:
        logits, labels = eval_pred.predictions, eval_pred.label_ids
        logits = np.asarray(logits[0] if isinstance(logits, tuple) else logits, dtype=np.float64)
        y = np.asarray(labels, dtype=np.float64)
        m = multilabel_metrics(y, sigmoid(logits) >= 0.5, label_names)
        out = {k: float(v) for k, v in m.items() if isinstance(v, (int, float))}
        out["loss"] = loss = float(np.mean(np.logaddexp(0.0, logits) - y * logits))
        out[SELECTION_KEY] = -loss if metric == "loss" else tie_broken(out[metric], loss)
        return out

    return compute


def validation_thresholds(model, validation: datasets.Dataset | None) -> tuple[list[float], str]:
    """Each label's threshold, chosen on ``validation`` (0.5 without it), and the rule that chose them."""
    if validation is None or len(validation) == 0:
        thresholds, rule = choose_thresholds(None, None)
    else:
        pairs = validation[TEXT_PAIR] if TEXT_PAIR in validation.column_names else None
        thresholds, rule = choose_thresholds(model.predict_proba(validation[TEXT], pairs),
                                             np.asarray(validation[LABEL]))
    return thresholds or [0.5] * len(model.label_names), rule


class LabelSets(TaskShape):
    """A set of labels per text: a sigmoid head, selection at threshold 0.5, thresholds chosen on validation."""

    selection_rule = ("the checkpoint with the best validation metric at threshold 0.5, ties broken by the lower "
                      "validation BCE, is kept (Trainer load_best_model_at_end)")
    balanced_sampler = MultiLabelBatchSampler  # every row gets a row sharing one of its labels

    def check(self, config: Any) -> None:
        check_multilabel_config(config)

    def chooses_on_validation(self, config: Any) -> bool:
        return True  # the thresholds

    def load(self, config: Any, memory: dict[str, Any]) -> TextData:
        return load_data(memory.get("data", config.data), text_column=config.text_column,
                         text_pair_column=config.text_pair_column, label_column=config.label_column,
                         validation_data=memory.get("validation_data", config.validation_data),
                         test_data=memory.get("test_data", config.test_data),
                         validation_split=self.validation_split(config), labels=LabelSetReader(config.label_separator))

    def sample(self, config: Any, data: TextData) -> PreparedData:
        """The seed's training sample (``--shots``: at least K per label; ``--train-size``) and validation subset."""
        if not is_multilabel(data):
            raise DataError(f"data set '{data.name}' is not multi-label data (load it with "
                            "load_data(..., labels=contrastfit.data.multilabel.LabelSetReader()))")
        seed = config.seed if config.sample_seed is None else config.sample_seed
        train_seed = derive_seed(seed, "train", config.sample_index)
        train = data.train
        if config.shots is not None:
            train = sample_per_label(train, config.shots, train_seed, data.label_names)
        elif config.train_size is not None:
            train = random_subset(train, config.train_size, train_seed)
        validation = data.validation
        if validation is not None and config.validation_size is not None:
            validation = random_subset(validation, config.validation_size, derive_seed(seed, "validation"))
        return PreparedData(data, train, validation, data.test)

    def choose_method(self, config: Any, prepared: PreparedData) -> Any:
        """The multi-label form of the method (default ``ce-scl-lr``) and its own schedule."""
        config = replace(config, method=check_multilabel_method(config.method))
        return with_method_defaults(config, get_method(config.method).label_sets)

    def hparams(self, config: Any, n_train: int) -> dict[str, Any]:
        """The single-label defaults with the label names off (the multi-label forms'), under the user's."""
        return {**get_method(config.method).defaults_for(n_train), **label_name_hparams(config.method),
                **config.hparams}

    def build_model(self, config: Any, prepared: PreparedData, hparams: dict[str, Any],
                    pooling: str) -> ContrastiveClassifier:
        backbone, tokenizer = load_backbone(config.model, trust_remote_code=config.trust_remote_code)
        encoder = TextEncoder(backbone, pooling)
        names = prepared.data.label_names
        method = create_multilabel_method(config.method, len(names), encoder.hidden_size, **hparams)
        return ContrastiveClassifier(encoder, tokenizer, method, names, config.max_length,
                                     info={"base_model": config.model, "multi_label": True})

    def validation_choices(self, config: Any) -> tuple[bool, bool]:
        return validation_choices(config)[0], False  # one-vs-rest logistic heads: no epoch to choose

    def selection_metric(self, config: Any, task: str = "classification") -> str:
        """The multi-label metric ``--metric-for-best`` names (:data:`SELECTION`; default micro-F1)."""
        if config.metric_for_best not in SELECTION:
            raise ConfigError(f"--metric-for-best {config.metric_for_best} does not apply to multi-label data; use f1 "
                              "(micro-F1, the default), macro_f1, accuracy (subset accuracy) or loss")
        return SELECTION[config.metric_for_best]

    def compute_metrics(self, label_names: list[str] | None, metric: str) -> Any:
        return compute_metrics(label_names, metric)

    def fit_head(self, model: ContrastiveClassifier, train_ds: datasets.Dataset, collator, config: Any, *,
                 probe: bool = False, validation_ds: datasets.Dataset | None = None) -> dict[str, Any]:
        return train_head(model, train_ds, collator, seed=config.seed, solver="logistic")  # one-vs-rest

    def finish(self, model: ContrastiveClassifier, validation: datasets.Dataset | None) -> dict[str, Any]:
        """Each label's threshold, chosen on ``validation``, kept in the model and the record."""
        model.eval()
        thresholds, rule = validation_thresholds(model, validation)
        model.info.update(thresholds=thresholds, threshold_rule=rule)
        return {"thresholds": dict(zip(model.label_names, thresholds)), "threshold_rule": rule}

    def describe(self, config: Any, prepared: PreparedData) -> dict[str, Any]:
        """As a single-label run's, with ``multi_label`` and each label's training count."""
        names = prepared.data.label_names
        shots_rule = "at least K texts per label" if config.shots else None
        return {"name": prepared.data.name, "source": prepared.data.source, "task": "classification",
                "multi_label": True, "label_names": names, "text_pair": prepared.data.has_pairs,
                "sampling": sampling(config, shots_rule=shots_rule),
                "train_label_counts": dict(zip(names, label_counts(prepared.train).tolist())), **prepared.hashes()}

    def examples(self, prepared: PreparedData) -> list[dict[str, str]]:
        return []

    def label(self, method: str) -> str:
        return f"{method} (multi-label)"


LABEL_SETS = LabelSets()
