"""One encoder, one head per task: the multi-task model, its losses, prediction and save / load.

A batch belongs to one task (``task_ids``, one id repeated per row): :meth:`MultiTaskModel.forward`
encodes it with the shared encoder, applies that task's head and, with labels, that task's
objective times its weight. Only that head and the encoder take part in the graph, so the other
tasks' heads get no gradient from the batch (``grad`` stays ``None``; the optimizer then leaves them
alone, also their AdamW moments and weight decay).

Sentence pairs: heads that compare two sentence embeddings (``concat``, ``cosine-mlp``, ``cosine``)
get the two sentences **tokenised and encoded separately** (``input_ids`` and ``input_ids_b``, each
truncated to the maximum length), as the CS224N report encodes ``s1`` and ``s2``; the ``joint`` head
gets the pair tokenised together (``[CLS] a [SEP] b [SEP]``).

An output folder written by :meth:`MultiTaskModel.save_pretrained` holds ``encoder/`` (the shared
encoder and tokenizer, Hugging Face format, safetensors), ``heads.safetensors`` (every head, keys
``heads.<task>.*``) and ``contrastfit.json`` (``"kind": "multitask"``, the tasks with their labels,
heads and objectives, pooling, maximum length and provenance). :meth:`MultiTaskModel.from_pretrained`
rebuilds it offline without unpickling anything.
"""

from __future__ import annotations

import functools
import json
import os
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from ..encoders import TextEncoder, eval_mode, load_backbone
from ..errors import DataError, ModelError
from ..evaluation.calibration import temperature_scaling
from ..heads import HEAD_DROPOUT, CosineRegressionHead, LinearHead, MLPHead, PairConcatHead
from ..losses import supcon
from ..modeling import (CONFIG_NAME, ClassifierOutput, length_sorted_logits, load_model_folder, model_max_length,
                        save_model_folder)
from ..record import Calibration, ModelData, ModelInfo, MultiTaskModelConfig, MultiTaskModelInfo
from ..outputs import OutputForm, for_task
from .tasks import TaskSpec

HEADS_NAME = "heads.safetensors"
KIND = MultiTaskModelConfig.KIND
FORMAT_VERSION = 1


class CosineSimilarityHead(nn.Module):
    """No trainable parameters: ``cos(u, v)`` of the two halves of ``[u; v]``, mapped linearly from
    [0, 1] onto the training labels' [``low``, ``high``] (buffers, saved with the model). Sentence-BERT's
    regression head (Reimers & Gurevych 2019, Sec. 3)."""

    def __init__(self, hidden_size: int, low: float = 0.0, high: float = 1.0):
        super().__init__()
        self.hidden_size = hidden_size
        self.register_buffer("low", torch.tensor(float(low)))
        self.register_buffer("high", torch.tensor(float(high)))

    def similarity(self, features: torch.Tensor) -> torch.Tensor:
        if features.dim() != 2 or features.shape[1] != 2 * self.hidden_size:
            raise ValueError(f"pair features must be (batch, {2 * self.hidden_size}) = [u; v], got {tuple(features.shape)}")
        u, v = features[:, :self.hidden_size], features[:, self.hidden_size:]
        return F.cosine_similarity(u.float(), v.float(), dim=-1)

    def scale(self, labels: torch.Tensor) -> torch.Tensor:
        """Labels mapped from [low, high] onto [0, 1] (the cosine objective's targets)."""
        return (labels.float() - self.low) / (self.high - self.low)

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        return (self.low + (self.high - self.low) * self.similarity(features)).unsqueeze(-1)


def encoder_inputs(input_ids: torch.Tensor, attention_mask: torch.Tensor, token_type_ids: torch.Tensor | None,
                   input_ids_b: torch.Tensor | None, attention_mask_b: torch.Tensor | None,
                   token_type_ids_b: torch.Tensor | None) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor] | None]:
    """The encoder's inputs of a batch: the first texts' (or the jointly tokenised pairs'), and the second
    texts' where a pair's two texts were tokenised apart (``*_b``; None otherwise)."""
    first = {"input_ids": input_ids, "attention_mask": attention_mask}
    if token_type_ids is not None:
        first["token_type_ids"] = token_type_ids
    if input_ids_b is None:
        return first, None
    second = {"input_ids": input_ids_b, "attention_mask": attention_mask_b}
    if token_type_ids_b is not None:
        second["token_type_ids"] = token_type_ids_b
    return first, second


def build_task_head(spec: TaskSpec, hidden_size: int) -> nn.Module:
    """The head of ``spec`` (see :mod:`contrastfit.multitask.tasks` for what each is)."""
    out = spec.num_outputs
    if spec.head in ("linear", "joint"):
        return LinearHead(hidden_size, out)
    if spec.head == "mlp":
        return MLPHead(hidden_size, out, depth=2, inner_size=max(1, hidden_size // 2), dropout=HEAD_DROPOUT,
                       activation="relu")
    if spec.head == "concat":
        return PairConcatHead(hidden_size, out)
    if spec.head == "cosine-mlp":
        return CosineRegressionHead(hidden_size)
    if spec.head == "cosine":
        low, high = spec.label_range or (0.0, 1.0)
        return CosineSimilarityHead(hidden_size, low, high)
    raise ModelError(f"task '{spec.name}': unknown head {spec.head!r}")


class MultiTaskModel(nn.Module):
    """A shared encoder with one head per task (``heads[name]``)."""

    def __init__(self, encoder: TextEncoder, tokenizer, tasks: Sequence[TaskSpec], max_length: int = 128,
                 info: dict[str, Any] | None = None):
        super().__init__()
        if not tasks:
            raise ModelError("a multi-task model needs at least one task")
        names = [t.name for t in tasks]
        if len(set(names)) != len(names):
            raise ModelError(f"task names must be distinct, got {names}")
        self.encoder = encoder
        self.tokenizer = tokenizer
        self.tasks = list(tasks)
        self.task_index = {t.name: i for i, t in enumerate(self.tasks)}
        self.heads = nn.ModuleDict({t.name: build_task_head(t, encoder.hidden_size) for t in self.tasks})
        self.max_length = model_max_length(tokenizer, encoder, max_length)
        self.info = MultiTaskModelInfo.read(info)

    @classmethod
    def from_encoder(cls, model: str, tasks: Sequence[TaskSpec], *, pooling: str = "cls", max_length: int = 128,
                     trust_remote_code: bool = False) -> "MultiTaskModel":
        """Fresh heads on the pretrained encoder ``model`` (built-in name, local folder or Hub name)."""
        backbone, tokenizer = load_backbone(model, trust_remote_code=trust_remote_code)
        return cls(TextEncoder(backbone, pooling), tokenizer, tasks, max_length, info={"base_model": model})

    @property
    def device(self) -> torch.device:
        return next(self.parameters()).device

    @property
    def task_names(self) -> list[str]:
        return [t.name for t in self.tasks]

    def task(self, name: str) -> TaskSpec:
        if name not in self.task_index:
            raise ModelError(f"this model has no task '{name}' (tasks: {', '.join(self.task_names)})")
        return self.tasks[self.task_index[name]]

    # -- forward -------------------------------------------------------------------------------
    def features(self, spec: TaskSpec, first: dict[str, torch.Tensor],
                 second: dict[str, torch.Tensor] | None = None) -> torch.Tensor:
        """What the task's head reads: the pooled embedding (hidden), or ``[u; v]`` (2 hidden) of the two
        separately encoded sentences of a pair."""
        if spec.separate:
            if second is None:
                raise ValueError(f"task '{spec.name}' reads the two sentences of a pair separately: the batch has no "
                                 "input_ids_b")
            return torch.cat([self.encoder(**first).pooled, self.encoder(**second).pooled], dim=-1)
        return self.encoder(**first).pooled

    def _batch_task(self, task_ids: torch.Tensor | None) -> TaskSpec:
        if task_ids is None:
            if len(self.tasks) == 1:
                return self.tasks[0]
            raise ValueError("a multi-task batch needs task_ids (one task per batch)")
        first = int(task_ids.reshape(-1)[0])
        if bool((task_ids != first).any()):
            raise ValueError(f"a batch mixes tasks {sorted(set(task_ids.tolist()))}: each batch must hold one task")
        if not 0 <= first < len(self.tasks):
            raise ValueError(f"task id {first} out of range (the model has {len(self.tasks)} tasks)")
        return self.tasks[first]

    def objective(self, spec: TaskSpec, features: torch.Tensor, logits: torch.Tensor,
                  labels: torch.Tensor) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """The task's objective (unweighted) and its parts."""
        if spec.objective in ("ce", "ce-scl"):
            ce = F.cross_entropy(logits.float(), labels.long())
            if spec.objective == "ce":
                return ce, {"ce": ce}
            hp = spec.hp
            scl = supcon(features, labels.long(), hp.temperature)
            lam = hp.lambda_
            return (1 - lam) * ce + lam * scl, {"ce": ce, "scl": scl}
        if spec.objective == "mse":
            mse = F.mse_loss(logits.squeeze(-1).float(), labels.float())
            return mse, {"mse": mse}
        if spec.objective == "cosine":
            head = self.heads[spec.name]
            loss = F.mse_loss(head.similarity(features), head.scale(labels))
            return loss, {"cosine": loss}
        raise ModelError(f"task '{spec.name}': unknown objective {spec.objective!r}")

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, token_type_ids: torch.Tensor | None = None,
                input_ids_b: torch.Tensor | None = None, attention_mask_b: torch.Tensor | None = None,
                token_type_ids_b: torch.Tensor | None = None, labels: torch.Tensor | None = None,
                task_ids: torch.Tensor | None = None) -> ClassifierOutput:
        spec = self._batch_task(task_ids)
        first, second = encoder_inputs(input_ids, attention_mask, token_type_ids, input_ids_b, attention_mask_b,
                                       token_type_ids_b)
        features = self.features(spec, first, second)
        logits = self.heads[spec.name](features)
        if labels is None:
            return ClassifierOutput(loss=None, logits=logits)
        loss, parts = self.objective(spec, features, logits, labels)
        if not self.training:
            return ClassifierOutput(loss=loss, logits=logits)
        # the task's objective (unweighted) and its terms, which the Trainer logs as loss_<task>[_<term>]
        loss_parts = {spec.name: loss, **({f"{spec.name}_{k}": v for k, v in parts.items()} if len(parts) > 1 else {})}
        return ClassifierOutput(loss=spec.weight * loss, logits=logits, loss_parts=loss_parts)

    # -- inference -----------------------------------------------------------------------------
    def encode_inputs(self, spec: TaskSpec, texts: Sequence[str], pairs: Sequence[str] | None = None,
                      padding: bool | str = False) -> dict[str, Any]:
        """Tokenise ``texts`` (and ``pairs``) the way the task's head reads them: pairs jointly, or the two
        sentences separately (the second's keys end in ``_b``)."""
        if spec.pairs and pairs is None:
            raise DataError(f"task '{spec.name}' takes sentence pairs: give the second texts too")
        if not spec.pairs and pairs is not None:
            raise DataError(f"task '{spec.name}' takes one text per example, not sentence pairs")
        if pairs is not None and len(pairs) != len(texts):
            raise DataError(f"task '{spec.name}': {len(texts)} texts but {len(pairs)} second texts")
        kw = dict(truncation=True, max_length=self.max_length, padding=padding)
        if spec.separate:
            enc = dict(self.tokenizer(list(texts), **kw))
            enc.update({f"{k}_b": v for k, v in self.tokenizer(list(pairs), **kw).items()})
            return enc
        return dict(self.tokenizer(list(texts), list(pairs) if pairs is not None else None, **kw))

    def predict_logits(self, texts: Sequence[str], pairs: Sequence[str] | None = None, *, task: str,
                       batch_size: int = 64, progress: bool = False) -> np.ndarray:
        """Logits of ``task`` (n, classes), or its predicted value (n, 1) for a regression task."""
        spec = self.task(task)
        return length_sorted_logits(self, texts, pairs, batch_size, functools.partial(self.encode_inputs, spec),
                                    spec.num_outputs, extra={"task_ids": self.task_index[task]},
                                    desc=f"predict {task}", progress=progress)

    def task_temperature(self, task: str) -> float:
        """The temperature :meth:`predict_proba` divides ``task``'s logits by: 1, or the one
        :meth:`calibrate` fitted for that task."""
        self.task(task)  # a one-line error for an unknown task
        temperature = self.info.calibration[task].temperature if task in self.info.calibration else None
        return 1.0 if temperature is None else float(temperature)

    def predict_proba(self, texts: Sequence[str], pairs: Sequence[str] | None = None, *, task: str,
                      batch_size: int = 64) -> np.ndarray:
        """Class probabilities, ``softmax(logits / temperature)`` with the task's temperature, or the
        predicted values for a regression task (:mod:`contrastfit.outputs`)."""
        return self.for_task(task).predict_proba(texts, pairs, batch_size)

    def calibrate(self, texts: Sequence[str], labels: Sequence[int], pairs: Sequence[str] | None = None, *,
                  task: str, batch_size: int = 64, progress: bool = False) -> dict[str, float]:
        """Temperature scaling of one classification task's probabilities (as
        :meth:`contrastfit.modeling.ContrastiveClassifier.calibrate`): fit it on held-out ``texts`` with
        their label ids, keep it in ``info.calibration[task]`` (saved with the model) and return it
        with the NLL and ECE before and after. Other tasks keep theirs."""
        if self.task(task).type == "regression":
            raise ModelError(f"task '{task}' is a regression task; temperature scaling calibrates class probabilities")
        record = temperature_scaling(self.predict_logits(texts, pairs, task=task, batch_size=batch_size,
                                                         progress=progress), labels)
        self.info.calibration = {**self.info.calibration, task: record}
        return record

    def predict(self, texts: Sequence[str], pairs: Sequence[str] | None = None, *, task: str,
                batch_size: int = 64) -> list:
        """Label names (classification) or values (regression) of ``task`` for ``texts`` (and ``pairs``)."""
        return self.for_task(task).predict(texts, pairs, batch_size)

    @torch.no_grad()
    def embed(self, texts: Sequence[str], batch_size: int = 64, normalize: bool = True) -> np.ndarray:
        """The shared encoder's pooled sentence embeddings (L2-normalised by default)."""
        chunks = []
        with eval_mode(self):
            for start in range(0, len(texts), batch_size):
                enc = self.tokenizer(list(texts[start:start + batch_size]), truncation=True, max_length=self.max_length,
                                     padding=True)
                emb = self.encoder(**{k: torch.as_tensor(v, device=self.device) for k, v in enc.items()}).pooled.float()
                chunks.append(F.normalize(emb, dim=-1) if normalize else emb)
        return torch.cat(chunks).cpu().numpy() if chunks else np.zeros((0, self.encoder.hidden_size), np.float32)

    def for_task(self, name: str) -> "TaskModel":
        """One task of this model seen as a single-task classifier (:class:`TaskModel`), for the code
        written against :class:`~contrastfit.modeling.ContrastiveClassifier`: evaluation, attributions."""
        return TaskModel(self, name)

    # -- save / load ---------------------------------------------------------------------------
    def config_dict(self) -> dict[str, Any]:
        return {"format_version": FORMAT_VERSION, "kind": KIND, "tasks": [t.to_dict() for t in self.tasks],
                "pooling": self.encoder.pooling, "max_length": self.max_length, **self.info.to_dict()}

    def save_pretrained(self, directory: str | os.PathLike, *, progress: bool = True) -> Path:
        """Write ``encoder/``, ``heads.safetensors`` and ``contrastfit.json`` to ``directory`` atomically
        (:func:`contrastfit.modeling.save_model_folder`: built next to it and swapped in by renames; a
        failed save leaves the previous model intact; other entries such as ``results.json`` are kept).
        ``progress=False``: no progress bar."""
        return save_model_folder(directory, self, HEADS_NAME, self.config_dict(), progress=progress)

    @classmethod
    def from_pretrained(cls, directory: str | os.PathLike, device: str | torch.device | None = None, *,
                        revision: str | None = None, token: str | bool | None = None,
                        progress: bool = True) -> "MultiTaskModel":
        """The model saved in ``directory`` (:func:`contrastfit.modeling.load_model_folder`), in eval mode;
        a Hub id (``owner/name``) is downloaded at ``revision`` with ``token``, as
        :meth:`contrastfit.ContrastiveClassifier.from_pretrained` does. ``progress=False``: no progress bar."""
        def build(cfg: MultiTaskModelConfig, encoder: TextEncoder, tokenizer) -> tuple["MultiTaskModel", str]:
            tasks = [TaskSpec.from_dict(t) for t in cfg.tasks]
            return cls(encoder, tokenizer, tasks, cfg.max_length, info=cfg.info()), f"the tasks in {CONFIG_NAME}"

        return load_model_folder(directory, HEADS_NAME, KIND, build, device, revision=revision, token=token,
                                 progress=progress)


class TaskModel(nn.Module):
    """One task of a :class:`MultiTaskModel` with the interface of a single-task
    :class:`~contrastfit.modeling.ContrastiveClassifier` that :func:`contrastfit.evaluation.evaluate_model`,
    :func:`contrastfit.evaluation.attributions.token_attributions` and the command line read: ``task``
    (``"classification"`` or ``"regression"``), ``label_names``, ``tokenizer``, ``max_length``, ``info``
    (the task's data record), ``forward`` (a joint encoding, the batch's task filled in) and
    ``predict_logits`` / ``predict_proba`` / ``predict``. It shares the model's parameters (no copy)."""

    def __init__(self, model: MultiTaskModel, name: str):
        super().__init__()
        self.spec = model.task(name)
        self.model = model
        task_data = model.info.data.get(name, ModelData()).model_copy(update={"text_pair": self.spec.pairs})
        shared = model.info.model_dump(exclude_unset=True, exclude={"data", "calibration", "training", "schedule"})
        self.info = ModelInfo.read({**shared, "data": task_data})
        self._sync_calibration()

    def _sync_calibration(self) -> None:
        """``info.calibration`` is this task's record (as a single-task model's), when it has one."""
        self.info.calibration = self.model.info.calibration.get(self.name, Calibration())

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def task(self) -> str:
        return "regression" if self.spec.type == "regression" else "classification"

    @property
    def outputs(self) -> OutputForm:
        """What the task's logits mean (:mod:`contrastfit.outputs`): a value, or one class."""
        return for_task(self.task)

    @property
    def label_names(self) -> list[str] | None:
        return self.spec.label_names

    @property
    def tokenizer(self):
        return self.model.tokenizer

    @property
    def max_length(self) -> int:
        return self.model.max_length

    @property
    def device(self) -> torch.device:
        return self.model.device

    @property
    def separate_pairs(self) -> bool:
        """Whether the task's head reads the two texts of a pair encoded separately (``*_b`` inputs)."""
        return self.spec.separate

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, token_type_ids: torch.Tensor | None = None,
                labels: torch.Tensor | None = None, input_ids_b: torch.Tensor | None = None,
                attention_mask_b: torch.Tensor | None = None, token_type_ids_b: torch.Tensor | None = None) -> ClassifierOutput:
        """The task's logits for a batch tokenised as one sequence (a text, or a pair jointly), or, for a
        task whose head reads the two texts of a pair encoded separately, for the two encodings
        (``input_ids`` / ``attention_mask`` of the first texts, ``input_ids_b`` / ``attention_mask_b``
        of the second)."""
        if self.spec.separate != (input_ids_b is not None):
            raise ModelError(f"task '{self.name}' encodes the two sentences of a pair separately ({self.spec.head} "
                             "head): give input_ids_b and attention_mask_b" if self.spec.separate else
                             f"task '{self.name}' reads one sequence: input_ids_b is not an input of it")
        inputs, second = encoder_inputs(input_ids, attention_mask, token_type_ids, input_ids_b, attention_mask_b,
                                        token_type_ids_b)
        # the task is known: no task ids to check (which would make the graph depend on the data, for torch.export)
        features = self.model.features(self.spec, inputs, second)
        logits = self.model.heads[self.name](features)
        loss = None if labels is None else self.model.objective(self.spec, features, logits, labels)[0]
        return ClassifierOutput(loss=loss, logits=logits)

    def predict_logits(self, texts: Sequence[str], pairs: Sequence[str] | None = None, batch_size: int = 64,
                       progress: bool = False) -> np.ndarray:
        return self.model.predict_logits(texts, pairs, task=self.name, batch_size=batch_size, progress=progress)

    @property
    def temperature(self) -> float:
        return self.model.task_temperature(self.name)

    def predict_proba(self, texts: Sequence[str], pairs: Sequence[str] | None = None, batch_size: int = 64) -> np.ndarray:
        return self.outputs.probabilities(self, self.predict_logits(texts, pairs, batch_size))

    def calibrate(self, texts: Sequence[str], labels: Sequence[int], pairs: Sequence[str] | None = None,
                  batch_size: int = 64, progress: bool = False) -> dict[str, float]:
        """:meth:`MultiTaskModel.calibrate` of this task (the record lands in the shared model's ``info``)."""
        record = self.model.calibrate(texts, labels, pairs, task=self.name, batch_size=batch_size, progress=progress)
        self._sync_calibration()
        return record

    def predict(self, texts: Sequence[str], pairs: Sequence[str] | None = None, batch_size: int = 64) -> list:
        return self.outputs.predictions(self, self.predict_logits(texts, pairs, batch_size))


def is_multitask_folder(directory: str | os.PathLike) -> bool:
    """True when ``directory`` holds a model saved by :meth:`MultiTaskModel.save_pretrained`."""
    path = Path(directory) / CONFIG_NAME
    try:
        return json.loads(path.read_text(encoding="utf-8")).get("kind") == KIND
    except (OSError, ValueError, AttributeError):
        return False
