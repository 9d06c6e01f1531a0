"""The trainable model: encoder + pooling + head + method, and its save / load format.

An output folder written by :meth:`ContrastiveClassifier.save_pretrained` holds

* ``encoder/``: the fine-tuned encoder and its tokenizer in Hugging Face format
  (``AutoModel.from_pretrained("run/encoder")`` works on its own, e.g. for sentence embeddings);
* ``head.safetensors``: every other trained tensor (the head and any parameters the method owns);
* ``contrastfit.json``: labels, task, method and hyper-parameters, pooling, maximum length, plus
  whatever provenance the trainer adds (seed, data split and hash, library versions);
* for a single-task model, the sentence-transformers files (:mod:`contrastfit.hub`): ``encoder/`` is a
  sentence-transformers model with the model's pooling, length and normalisation, and where the
  model's embedding is the pooled one a root ``modules.json`` makes ``SentenceTransformer(folder)``
  give :meth:`ContrastiveClassifier.embed`. ``encoder/config.json`` declares no labels, so
  ``pipeline("text-classification", model=folder + "/encoder")`` cannot score with a random head.

Saving is atomic at the folder level (:func:`contrastfit.atomic.atomic_folder`): the three are
written to a temporary folder next to the output folder and swapped in with renames, so a full disk
or a kill while saving leaves the previous model as it was; other entries of the folder (a run's
``results.json``, ``checkpoints/``) are kept. :meth:`ContrastiveClassifier.from_pretrained` rebuilds
the same model from that folder without network access and without unpickling anything.

The forward pass returns a :class:`ClassifierOutput`: ``loss`` and ``logits`` as every Hugging Face
model, and in training mode ``loss_parts``, the unweighted terms the method combined into ``loss``
(``{"ce": ..., "scl": ...}``), which the Trainer logs.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np
import torch
from safetensors.torch import load_file, save_file
from torch import nn
from tqdm.auto import tqdm
from transformers.utils import ModelOutput

from .atomic import atomic_folder, recover_folder, write_json_atomic
from .encoders import POOLINGS, TextEncoder, eval_mode, load_backbone
from .errors import ModelError
from .evaluation.calibration import calibrate_per_label, temperature_scaling, temperatures
from .evaluation.multilabel import thresholds
from .hub import (
    mark_encoder_without_head,
    push_to_hub,
    remove_stale_sentence_transformers,
    resolve_model_folder,
    write_sentence_transformers,
)
from .methods import Method, get_method
from .methods.base import create_multilabel_method
from .outputs import LABEL_SETS, OutputForm
from .progress import progress_bars
from .record import ModelConfig, ModelInfo, MultiTaskModelConfig, parse_model_config

from .folder import CONFIG_NAME, ENCODER_DIR, FORMAT_VERSION, HEAD_NAME  # noqa: F401  (the folder's names)


@dataclass
class ClassifierOutput(ModelOutput):
    """The forward pass's output.

    * ``loss``: the training objective (with labels), or the task loss (CE / MSE) on ``logits`` in
      eval mode;
    * ``logits``: (batch, labels), or (batch, 1) for regression; None for methods whose training
      pass has no head (the two-stage methods' encoder stage);
    * ``loss_parts``: in training mode, the method's terms by name, unweighted, as tensors with their
      graph (``ContrastfitTrainer`` logs them as ``loss_<name>``); None in eval mode.
    """

    loss: torch.Tensor | None = None
    logits: torch.Tensor | None = None
    loss_parts: dict[str, torch.Tensor] | None = None


def model_max_length(tokenizer, encoder: TextEncoder, requested: int) -> int:
    """``requested`` clipped to what the tokenizer and the position embeddings allow."""
    limits = [requested]
    tok_limit = getattr(tokenizer, "model_max_length", None)
    if isinstance(tok_limit, int) and 0 < tok_limit < 1_000_000:  # "unset" is a huge sentinel
        limits.append(tok_limit)
    positions = getattr(getattr(encoder.backbone, "config", None), "max_position_embeddings", None)
    if isinstance(positions, int) and positions > 0:
        # RoBERTa-style models offset positions by padding_idx + 1
        offset = getattr(encoder.backbone.config, "pad_token_id", 0) + 1 if "roberta" in type(encoder.backbone).__name__.lower() else 0
        limits.append(positions - offset)
    return min(limits)


@torch.no_grad()
def length_sorted_logits(model: nn.Module, texts: Sequence[str], pairs: Sequence[str] | None, batch_size: int,
                         encode: Callable[..., Any], num_outputs: int, *, extra: dict[str, Any] | None = None,
                         desc: str = "predict", progress: bool = False) -> np.ndarray:
    """``model``'s logits for ``texts`` (and ``pairs``), in eval mode, in batches of texts of similar
    length (longest first, so padding is short), returned in the given order. ``encode(texts, pairs,
    padding=True)`` tokenises a batch; ``extra``: more inputs of every batch, one value per row (a
    multi-task model's task id)."""
    texts, pairs = list(texts), list(pairs) if pairs is not None else None
    order = np.argsort([-len(t) for t in texts], kind="stable")
    out = []
    with eval_mode(model):
        for start in tqdm(range(0, len(texts), batch_size), desc=desc, disable=not progress, leave=False):
            idx = order[start:start + batch_size]
            enc = encode([texts[i] for i in idx], [pairs[i] for i in idx] if pairs is not None else None, padding=True)
            batch = {k: torch.as_tensor(v, device=model.device) for k, v in enc.items()}
            batch.update({k: torch.full((len(idx),), v, dtype=torch.long, device=model.device)
                          for k, v in (extra or {}).items()})
            out.append(model(**batch).logits.float().cpu())
    if not out:
        return np.zeros((0, num_outputs), dtype=np.float32)
    logits = torch.cat(out).numpy()
    result = np.empty_like(logits)
    result[order] = logits
    return result


class ContrastiveClassifier(nn.Module):
    """A text classifier (or regressor) trained by one of the registered methods."""

    def __init__(
        self,
        encoder: TextEncoder,
        tokenizer,
        method: Method,
        label_names: list[str] | None,
        max_length: int = 128,
        info: ModelInfo | dict[str, Any] | None = None,
    ):
        super().__init__()
        self.encoder = encoder
        self.method = method
        self.head = method.build_head()
        self.tokenizer = tokenizer
        self.label_names = label_names
        self.max_length = model_max_length(tokenizer, encoder, max_length)
        self.info = ModelInfo.read(info)

    # -- construction --------------------------------------------------------------------------
    @classmethod
    def from_encoder(
        cls,
        model: str,
        method: str,
        label_names: list[str] | None,
        *,
        hparams: dict[str, Any] | None = None,
        pooling: str = "cls",
        max_length: int = 128,
        trust_remote_code: bool = False,
    ) -> "ContrastiveClassifier":
        """A fresh model: the pretrained encoder ``model`` and a new head for ``method``."""
        spec = get_method(method)  # fail on a bad method name before loading any weights
        backbone, tokenizer = load_backbone(model, trust_remote_code=trust_remote_code)
        encoder = TextEncoder(backbone, pooling)
        task = "regression" if label_names is None else "classification"
        num_labels = 1 if label_names is None else len(label_names)
        m = spec.create(num_labels, encoder.hidden_size, task, **(hparams or {}))
        return cls(encoder, tokenizer, m, label_names, max_length, info={"base_model": model})

    @property
    def task(self) -> str:
        return self.method.task

    @property
    def outputs(self) -> OutputForm:
        """What the logits mean (:mod:`contrastfit.outputs`): one class, a value or a set of labels."""
        return self.method.outputs

    @property
    def multi_label(self) -> bool:
        """Whether each text carries a set of labels (the output form :data:`~contrastfit.outputs.LABEL_SETS`)."""
        return self.outputs is LABEL_SETS

    @property
    def thresholds(self) -> list[float]:
        """Multi-label models: each label's decision threshold on its probability (chosen on validation)."""
        return thresholds(self)

    @property
    def temperatures(self) -> np.ndarray:
        """Multi-label models: each label's temperature (1 each until :meth:`calibrate`)."""
        return temperatures(self)

    @property
    def device(self) -> torch.device:
        return next(self.parameters()).device

    # -- forward -------------------------------------------------------------------------------
    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        token_type_ids: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
    ) -> ClassifierOutput:
        inputs = {"input_ids": input_ids, "attention_mask": attention_mask}
        if token_type_ids is not None:
            inputs["token_type_ids"] = token_type_ids
        if labels is None or not self.training:
            logits = self.method.predict_logits(self, inputs)
            loss = self.method.task_loss(logits, labels) if labels is not None else None
            return ClassifierOutput(loss=loss, logits=logits)
        out = self.method.training_loss(self, inputs, labels)
        return ClassifierOutput(loss=out.loss, logits=out.logits, loss_parts=dict(out.parts))

    # -- inference -----------------------------------------------------------------------------
    def tokenize(self, texts: Sequence[str], pairs: Sequence[str] | None = None, padding: bool | str = False):
        return self.tokenizer(
            list(texts), list(pairs) if pairs is not None else None,
            truncation=True, max_length=self.max_length, padding=padding,
        )

    def predict_logits(self, texts: Sequence[str], pairs: Sequence[str] | None = None, batch_size: int = 64,
                       progress: bool = False) -> np.ndarray:
        """Logits for ``texts`` (and ``pairs``), shape (n, num_labels), or (n, 1) for regression."""
        return length_sorted_logits(self, texts, pairs, batch_size, self.tokenize, self.method.num_outputs,
                                    progress=progress)

    @property
    def temperature(self) -> float:
        """The temperature :meth:`predict_proba` divides the logits by: 1, or the one :meth:`calibrate` fitted."""
        temperature = self.info.calibration.temperature
        return 1.0 if temperature is None else float(temperature)

    def predict_proba(self, texts: Sequence[str], pairs: Sequence[str] | None = None, batch_size: int = 64) -> np.ndarray:
        """Class probabilities, ``softmax(logits / temperature)`` (the predicted values for regression);
        for a multi-label model, each label's ``sigmoid(logit / T_label)``, shape (n, labels)
        (:mod:`contrastfit.outputs`)."""
        return self.outputs.probabilities(self, self.predict_logits(texts, pairs, batch_size))

    def calibrate(self, texts: Sequence[str], labels: Sequence[int], pairs: Sequence[str] | None = None,
                  batch_size: int = 64, progress: bool = False) -> dict[str, float]:
        """Temperature scaling (Guo et al. 2017; :mod:`contrastfit.evaluation.calibration`): fit the
        temperature of :meth:`predict_proba` on held-out ``texts`` with their label ids, keep it in
        ``info.calibration`` (saved with the model) and return it with the NLL and expected calibration
        error before and after. Predictions (the arg max) do not change."""
        if self.task != "classification":
            raise ModelError("temperature scaling calibrates class probabilities; this model is a regression model")
        if self.multi_label:  # labels: one multi-hot row per text; one temperature per label
            return calibrate_per_label(self, self.predict_logits(texts, pairs, batch_size, progress=progress), labels)
        record = temperature_scaling(self.predict_logits(texts, pairs, batch_size, progress=progress), labels)
        self.info.calibration = record
        return record

    @property
    def labels(self) -> list | None:
        """The classes as the training data gave them, in the order of the logits: :attr:`label_names`
        (strings), or ints where the training labels were integers (``info.label_type == "int"``,
        saved with the model); None for regression."""
        if self.label_names is not None and self.info.label_type == "int":
            return [int(name) for name in self.label_names]
        return self.label_names

    def predict(self, texts: Sequence[str], pairs: Sequence[str] | None = None, batch_size: int = 64) -> list:
        """Labels (classification: as the training data gave them, :attr:`labels`: strings, or ints for
        integer labels) or values (regression) for ``texts``; for a multi-label model, a list of label
        names per text (those at or above their threshold; possibly empty)."""
        return self.outputs.predictions(self, self.predict_logits(texts, pairs, batch_size))

    @torch.no_grad()
    def embed(self, texts: Sequence[str], pairs: Sequence[str] | None = None, batch_size: int = 64,
              normalize: bool = True) -> np.ndarray:
        """Sentence embeddings in the space the method compares in (the pooled embedding, or e.g.
        LaCon's projection), L2-normalised by default (for analyses and retrieval)."""
        chunks = []
        with eval_mode(self):
            for start in range(0, len(texts), batch_size):
                enc = self.tokenize(texts[start:start + batch_size],
                                    pairs[start:start + batch_size] if pairs is not None else None, padding=True)
                batch = {k: torch.as_tensor(v, device=self.device) for k, v in enc.items()}
                emb = self.method.embedding(self, batch).float()
                chunks.append(nn.functional.normalize(emb, dim=-1) if normalize else emb)
        return torch.cat(chunks).cpu().numpy() if chunks else np.zeros((0, self.encoder.hidden_size), np.float32)

    # -- save / load ---------------------------------------------------------------------------
    def config_dict(self) -> dict[str, Any]:
        return {
            "format_version": FORMAT_VERSION,
            "method": getattr(self.method, "registered_name", self.method.name),
            "hparams": self.method.hparams,
            "task": self.task,
            "label_names": self.label_names,
            "pooling": self.encoder.pooling,
            "max_length": self.max_length,
            **self.info.to_dict(),
        }

    def save_pretrained(self, directory: str | os.PathLike, *, progress: bool = True) -> Path:
        """Write the model to ``directory`` (created if needed) atomically: the encoder, head and
        config are written to a temporary folder next to it and swapped in with renames; if anything
        fails (full disk, a kill) the model that was there is left intact. Other entries of
        ``directory`` are kept (:func:`save_model_folder`). ``progress=False``: no progress bar."""
        return save_model_folder(directory, self, HEAD_NAME, self.config_dict(), sentence_transformers=True,
                                 progress=progress)

    def push_to_hub(self, repo_id: str, *, private: bool = False, commit_message: str | None = None,
                    token: str | None = None, license: str | None = None, language: str | Sequence[str] | None = None,
                    datasets: str | Sequence[str] | None = None, progress: bool = True) -> str:
        """Save the model to a temporary folder and upload it, with its model card, to the Hugging Face
        Hub repository ``repo_id`` (:func:`contrastfit.hub.push_to_hub`); returns the repository's URL.
        ``license``, ``language`` and ``datasets`` (Hub data set ids) go into the card's metadata."""
        import tempfile

        with tempfile.TemporaryDirectory(prefix="contrastfit-push-") as tmp:
            folder = self.save_pretrained(Path(tmp) / repo_id.split("/")[-1], progress=progress)
            return push_to_hub(folder, repo_id, private=private, commit_message=commit_message, token=token,
                               license=license, language=language, datasets=datasets, progress=progress)

    @classmethod
    def from_pretrained(cls, directory: str | os.PathLike, device: str | torch.device | None = None, *,
                        revision: str | None = None, token: str | bool | None = None,
                        progress: bool = True) -> "ContrastiveClassifier":
        """The model saved in ``directory`` (:func:`load_model_folder`), in eval mode; ``directory`` may
        be a Hugging Face Hub id (``owner/name``) when no such local folder exists, downloaded at
        ``revision`` (a branch, tag or commit; default the main branch) with ``token`` (default: the
        saved login or ``HF_TOKEN``). ``progress=False``: no progress bar (download, weight loading)."""
        def build(cfg: ModelConfig, encoder: TextEncoder, tokenizer) -> tuple["ContrastiveClassifier", str]:
            num_labels = 1 if cfg.label_names is None else len(cfg.label_names)
            if cfg.multi_label:
                method = create_multilabel_method(cfg.method, num_labels, encoder.hidden_size, **cfg.hparams)
            else:
                method = get_method(cfg.method).create(num_labels, encoder.hidden_size, cfg.task, **cfg.hparams)
            model = cls(encoder, tokenizer, method, cfg.label_names, cfg.max_length, info=cfg.info())
            return model, f"method '{cfg.method}'"

        return load_model_folder(directory, HEAD_NAME, None, build, device, revision=revision, token=token,
                                 progress=progress)


# -- the folder format, shared with contrastfit.multitask.MultiTaskModel ----------------------------

def non_encoder_state(model: nn.Module) -> dict[str, torch.Tensor]:
    """Every tensor of ``model`` outside its ``encoder`` (heads, a method's own parameters), detached,
    on the CPU, contiguous: what the folder's safetensors file next to ``encoder/`` holds."""
    return {k: v.detach().cpu().contiguous() for k, v in model.state_dict().items() if not k.startswith("encoder.")}


def save_model_folder(directory: str | os.PathLike, model: nn.Module, weights_name: str,
                      config: dict[str, Any], sentence_transformers: bool = False, progress: bool = True) -> Path:
    """Write ``model`` (a shared ``encoder`` with its ``tokenizer``, and other tensors) to ``directory``
    atomically: ``encoder/`` (Hugging Face format, safetensors), ``weights_name`` (:func:`non_encoder_state`,
    safetensors) and ``contrastfit.json`` (``config``) are written to a temporary folder next to it and
    swapped in with renames (:func:`contrastfit.atomic.atomic_folder`); if anything fails (full disk, a
    kill) the model that was there is left intact. Other entries of ``directory`` are kept, except a
    previous save's root sentence-transformers files that this one does not write (removed before the
    swap, so that a kill cannot pair them with the new encoder). ``encoder/config.json``
    declares no labels (:func:`contrastfit.hub.mark_encoder_without_head`); with ``sentence_transformers``
    the files with which ``SentenceTransformer(directory)`` gives ``model.embed`` are written too, and
    what they hold is ``config["sentence_transformers"]`` (None where they cannot be written faithfully).
    ``progress=False``: no progress bar (:func:`contrastfit.progress.progress_bars`)."""
    directory = Path(directory)
    written = None
    with progress_bars(progress), atomic_folder(directory) as staging:
        model.encoder.backbone.save_pretrained(staging / ENCODER_DIR, safe_serialization=True)
        model.tokenizer.save_pretrained(staging / ENCODER_DIR)
        mark_encoder_without_head(staging / ENCODER_DIR)
        save_file(non_encoder_state(model), str(staging / weights_name), metadata={"format": "pt"})
        if sentence_transformers:
            written = write_sentence_transformers(staging, model, ENCODER_DIR)
            config = {**config, "sentence_transformers": written}
        write_json_atomic(staging / CONFIG_NAME, config)
        if not (written or {}).get("folder") and directory.is_dir():
            # before the swap: a kill after it must not leave the previous model's modules.json next to
            # this encoder (sentence-transformers would load it without a word)
            remove_stale_sentence_transformers(directory, None)
    return directory


def read_model_config(directory: str | os.PathLike, weights_name: str,
                      kind: str | None) -> ModelConfig | MultiTaskModelConfig:
    """The ``contrastfit.json`` of a model folder written by :func:`save_model_folder`, typed
    (:func:`~contrastfit.record.parse_model_config`), after putting back the previous model of a save killed
    between its renames. ``kind`` is the folder's ``"kind"`` the caller loads (None: a single-task model,
    ``"multitask"``); another kind, a missing or unreadable config, an entry of the wrong type, or a missing
    ``weights_name`` / ``encoder/`` is a one-line :class:`ModelError` that says which class loads the folder."""
    directory = Path(directory)
    cfg_path = directory / CONFIG_NAME
    if not cfg_path.is_file():
        recover_folder(directory)  # a save killed between its renames: put the previous model back
    if not cfg_path.is_file():
        raise ModelError(f"{directory} is not a contrastfit output folder (no {CONFIG_NAME})")
    try:
        cfg = parse_model_config(json.loads(cfg_path.read_text(encoding="utf-8")), str(cfg_path))
    except json.JSONDecodeError as exc:
        raise ModelError(f"{cfg_path}: not valid JSON ({exc.msg} at line {exc.lineno})") from None
    if cfg.KIND != kind:
        if cfg.KIND == "multitask":
            raise ModelError(f"{directory} holds a multi-task model (tasks: {', '.join(t['name'] for t in cfg.tasks)}); "
                             "load it with contrastfit.multitask.MultiTaskModel.from_pretrained and predict with task=NAME")
        raise ModelError(f"{directory} holds a single-task model; load it with ContrastiveClassifier.from_pretrained")
    if not (directory / weights_name).is_file() or not (directory / ENCODER_DIR / "config.json").is_file():
        raise ModelError(f"{directory} is incomplete: {weights_name} or {ENCODER_DIR}/ is missing")
    return cfg


def check_safetensors(path: str | os.PathLike) -> None:
    """Refuse a safetensors file that cannot be read whole (empty, truncated, not safetensors) with a
    one-line :class:`ModelError` naming it; reads the header only."""
    from safetensors import safe_open

    try:
        with safe_open(str(path), "pt"):
            pass
    except Exception as exc:  # safetensors' SafetensorError (header too small, incomplete, ...) or OSError
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ModelError(f"{path}: not a complete safetensors file ({reason}); the model folder is damaged: "
                         "save or copy it again") from None


def _check_shapes(state: dict[str, torch.Tensor], model: nn.Module, path: Path, cfg_path: Path,
                  cfg: ModelConfig | MultiTaskModelConfig, what: str) -> None:
    """Refuse, in one line naming ``path`` and the tensor, weights whose shape is not the one the model
    ``cfg_path`` describes has (e.g. a ``contrastfit.json`` naming 3 labels for a head of 2 rows)."""
    expected = model.state_dict()
    for key, tensor in state.items():
        if key in expected and tuple(tensor.shape) != tuple(expected[key].shape):
            got, want = list(tensor.shape), list(expected[key].shape)
            labels = getattr(cfg, "label_names", None)  # a multi-task config's are its tasks'
            hint = ""
            if isinstance(labels, list) and got and want and want[0] == len(labels) != got[0]:
                hint = f": {cfg_path.name} names {len(labels)} labels, the head has {got[0]} rows"
            raise ModelError(f"{path} does not fit {cfg_path}: {key} has shape {got} in {path.name}, but {want} "
                             f"for {what}{hint} (was {cfg_path.name} edited? put it back as it was saved)")


def load_model_folder(directory: str | os.PathLike, weights_name: str, kind: str | None, build: Any,
                      device: str | torch.device | None = None, *, revision: str | None = None,
                      token: str | bool | None = None, progress: bool = True) -> Any:
    """The model saved by :func:`save_model_folder` in ``directory``, offline and without unpickling:
    its config (:func:`read_model_config`, ``kind`` the folder's kind), the encoder and tokenizer from
    ``encoder/``, ``build(config, encoder, tokenizer)`` -> (the model with fresh heads, what it is for
    error messages), then the tensors of ``weights_name`` (a file that does not fit the config is a
    :class:`ModelError`); in eval mode, on ``device`` if given. A ``directory`` that is no local folder
    but a Hub id (``owner/name``) is downloaded first (:func:`contrastfit.hub.resolve_model_folder`, at
    ``revision`` with ``token``). ``progress=False``: no progress bar (:func:`contrastfit.progress.progress_bars`)."""
    with progress_bars(progress):
        return _load_model_folder(directory, weights_name, kind, build, device, revision, token)


def _load_model_folder(directory: str | os.PathLike, weights_name: str, kind: str | None, build: Any,
                       device: str | torch.device | None, revision: str | None, token: str | bool | None) -> Any:
    directory = resolve_model_folder(directory, revision=revision, token=token)
    cfg = read_model_config(directory, weights_name, kind)
    if cfg.pooling not in POOLINGS:  # before any weights load
        raise ModelError(f"{directory / CONFIG_NAME}: unknown pooling {cfg.pooling!r} "
                         f"(allowed: {', '.join(POOLINGS)})")
    for weights in [directory / weights_name, *sorted((directory / ENCODER_DIR).glob("*.safetensors"))]:
        check_safetensors(weights)
    backbone, tokenizer = load_backbone(str(directory / ENCODER_DIR))
    model, what = build(cfg, TextEncoder(backbone, cfg.pooling), tokenizer)
    path = directory / weights_name
    state = load_file(str(path))
    _check_shapes(state, model, path, directory / CONFIG_NAME, cfg, what)
    missing, unexpected = model.load_state_dict(state, strict=False)
    missing = [k for k in missing if not k.startswith("encoder.")]
    if missing or unexpected:
        raise ModelError(f"{path} does not match {what} (missing: {missing[:3]}, unexpected: {unexpected[:3]})")
    model.eval()
    if device is not None:
        model.to(device)
    return model

