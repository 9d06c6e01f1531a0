"""How a saved model folder fits sentence-transformers, transformers and the Hugging Face Hub.

* :func:`write_sentence_transformers` adds to a folder being saved the files with which
  sentence-transformers loads the encoder with the model's own pooling, maximum length and L2
  normalisation. ``encoder/`` becomes a sentence-transformers model of its own (``modules.json``,
  ``config_sentence_transformers.json``, ``sentence_bert_config.json`` with ``max_seq_length``,
  ``1_Pooling/``, [``2_Dense/``], ``N_Normalize/``): ``SentenceTransformer(folder + "/encoder")``
  gives the encoder's pooled output, L2-normalised. The folder's root gets a ``modules.json`` that
  points at the same modules (``encoder``, ``encoder/1_Pooling``, ...), so ``SentenceTransformer(folder)``
  gives :meth:`ContrastiveClassifier.embed` (normalised, the default) -- only where that is the pooled
  output: a method that embeds elsewhere (LaCon's projection) gets no root ``modules.json``, and
  ``SentenceTransformer(folder)`` then refuses the folder (no ``config.json`` at its root).
  sentence-transformers has no "pooler" pooling mode: ``pooler`` (BERT's ``tanh(W h_[CLS] + b)``) is
  written, exactly, as CLS pooling followed by a ``Dense`` module holding the encoder's pooler weights
  with a Tanh activation; an encoder whose pooler is not that dense+tanh gets no sentence-transformers
  files at all.
* :func:`mark_encoder_without_head`: ``encoder/config.json`` declares zero labels (``id2label: {}``).
  ``AutoModel`` and sentence-transformers ignore it; ``AutoModelForSequenceClassification`` (so
  ``pipeline("text-classification", model=folder + "/encoder")``) builds a classifier with no outputs,
  and the pipeline fails on its first text instead of scoring with a random two-label head.
* :func:`push_to_hub` uploads a folder with its model card (``HfApi.create_repo`` + ``upload_folder``);
  :func:`resolve_model_folder` downloads one (``snapshot_download``) when the name given to
  ``from_pretrained`` is not a local folder. Failures (offline, no such repository) are one-line
  :class:`~contrastfit.errors.ModelError`.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any, Sequence

from .atomic import write_json_atomic, write_text_atomic
from .card import CARD_NAME, HUB_ID, card_settings, model_card, public_record, set_card_metadata
from .errors import ModelError
from .folder import CONFIG_NAME
from .progress import progress_bars
from .record import parse_model_config

__all__ = ["ST_FILES", "mark_encoder_without_head", "push_to_hub", "resolve_model_folder",
           "sentence_transformers_layout", "write_sentence_transformers"]

#: The root entries :func:`write_sentence_transformers` may write (a save removes those it did not write
#: now; the module folders live in ``encoder/``, which every save replaces whole).
ST_FILES = ("modules.json", "config_sentence_transformers.json")
_ST_CONFIG = {"model_type": "SentenceTransformer", "prompts": {}, "default_prompt_name": None, "similarity_fn_name": "cosine"}


# -- sentence-transformers ----------------------------------------------------------------------

def _bert_pooler(backbone) -> Any:
    """The encoder's ``tanh(dense(h_[CLS]))`` pooler (BERT, RoBERTa, ...), or None."""
    import torch.nn as nn

    pooler = getattr(backbone, "pooler", None)
    dense, act = getattr(pooler, "dense", None), getattr(pooler, "activation", None)
    if isinstance(dense, nn.Linear) and isinstance(act, nn.Tanh) and len(list(pooler.children())) == 2:
        return pooler
    return None


def sentence_transformers_layout(model) -> tuple[str, Any] | None:
    """``(pooling mode, pooler or None)`` that reproduces the encoder's pooled output in
    sentence-transformers, or None where it cannot be written faithfully (an unknown pooler)."""
    pooling = model.encoder.pooling
    if pooling in ("mean", "cls"):
        return pooling, None
    backbone = model.encoder.backbone
    pooler = _bert_pooler(backbone)
    if pooler is not None:
        return "cls", pooler
    # contrastfit falls back to cls where the encoder gives no pooler output; any other pooler: refuse
    return ("cls", None) if getattr(backbone, "pooler", None) is None else None


def embeds_pooled(model) -> bool:
    """Whether ``model.embed`` is the encoder's pooled output (normalised), not a space of the method's own."""
    # lazy: methods.base imports torch, this module imports without torch
    from .methods.base import Method

    return type(model.method).embedding is Method.embedding


def write_sentence_transformers(folder: Path, model, encoder_dir: str = "encoder") -> dict[str, Any] | None:
    """Write the sentence-transformers files of ``model`` (whose encoder is saved in
    ``folder/encoder_dir``); returns what was written (for ``contrastfit.json``), or None if nothing was."""
    from safetensors.torch import save_file

    layout = sentence_transformers_layout(model)
    if layout is None:
        return None
    mode, pooler = layout
    encoder = folder / encoder_dir
    modules = [("", "sentence_transformers.models.Transformer"), ("1_Pooling", "sentence_transformers.models.Pooling")]
    write_json_atomic(encoder / "sentence_bert_config.json", {"max_seq_length": int(model.max_length), "do_lower_case": False})
    write_json_atomic(encoder / "1_Pooling" / "config.json", {
        "word_embedding_dimension": int(model.encoder.hidden_size), "pooling_mode_cls_token": mode == "cls",
        "pooling_mode_mean_tokens": mode == "mean", "pooling_mode_max_tokens": False,
        "pooling_mode_mean_sqrt_len_tokens": False, "pooling_mode_weightedmean_tokens": False,
        "pooling_mode_lasttoken": False, "include_prompt": True})
    if pooler is not None:
        dense = pooler.dense
        write_json_atomic(encoder / "2_Dense" / "config.json", {
            "in_features": dense.in_features, "out_features": dense.out_features, "bias": dense.bias is not None,
            "activation_function": "torch.nn.modules.activation.Tanh"})
        tensors = {"linear.weight": dense.weight.detach().cpu().contiguous()}
        if dense.bias is not None:
            tensors["linear.bias"] = dense.bias.detach().cpu().contiguous()
        save_file(tensors, str(encoder / "2_Dense" / "model.safetensors"), metadata={"format": "pt"})
        modules.append(("2_Dense", "sentence_transformers.models.Dense"))
    normalize = f"{len(modules)}_Normalize"
    write_json_atomic(encoder / normalize / "config.json", {})  # an empty folder would not be uploaded
    modules.append((normalize, "sentence_transformers.models.Normalize"))

    def listing(prefix: str) -> list[dict[str, Any]]:
        return [{"idx": i, "name": str(i), "path": "/".join(p for p in (prefix, path) if p), "type": kind}
                for i, (path, kind) in enumerate(modules)]

    write_json_atomic(encoder / "modules.json", listing(""))
    write_json_atomic(encoder / "config_sentence_transformers.json", _ST_CONFIG)
    root = embeds_pooled(model)
    if root:
        write_json_atomic(folder / "modules.json", listing(encoder_dir))
        write_json_atomic(folder / "config_sentence_transformers.json", _ST_CONFIG)
    return {"pooling": "pooler" if pooler is not None else mode, "normalize": True,
            "max_seq_length": int(model.max_length), "modules": [m["path"] for m in listing(encoder_dir)],
            "folder": root}


def remove_stale_sentence_transformers(folder: Path, written: dict[str, Any] | None) -> None:
    """Remove the root sentence-transformers files a previous save left in ``folder`` that this save
    did not write (the atomic swap keeps entries the new contents lack)."""
    if written and written.get("folder"):
        return
    for name in ST_FILES:
        path = folder / name
        if path.is_file() or path.is_symlink():
            path.unlink()


# -- transformers --------------------------------------------------------------------------------

def mark_encoder_without_head(encoder_folder: Path) -> None:
    """Make ``encoder_folder/config.json`` declare zero labels (see the module docstring)."""
    path = encoder_folder / "config.json"
    config = json.loads(path.read_text(encoding="utf-8"))
    config["id2label"], config["label2id"] = {}, {}
    config.pop("num_labels", None)
    write_json_atomic(path, config)


# -- the Hub -------------------------------------------------------------------------------------

def _reason(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def resolve_model_folder(name: str | os.PathLike, *, revision: str | None = None,
                         token: str | bool | None = None) -> Path:
    """``name`` itself when it is a local folder (or not a Hub id: the folder checks then explain);
    else the local copy of the Hub repository ``owner/name`` at ``revision`` (a branch, tag or commit;
    None: the main branch), downloaded with ``token`` (None: the saved login or ``HF_TOKEN``) by
    ``huggingface_hub.snapshot_download``. A ``revision`` for a local folder is a one-line
    :class:`~contrastfit.errors.ModelError` (a folder has one version)."""
    path = Path(name)
    text = os.fspath(name)
    if path.exists() or not HUB_ID.match(text):
        if revision is not None:
            raise ModelError(f"{text} is a local folder, not a Hub id: revision={revision!r} applies to a model "
                             "downloaded from the Hugging Face Hub")
        return path
    try:
        from huggingface_hub import snapshot_download

        return Path(snapshot_download(repo_id=text, repo_type="model", revision=revision, token=token))
    except Exception as exc:  # offline, no such repository or revision, no access, network errors
        at = f" at revision {revision}" if revision is not None else ""
        raise ModelError(f"{text}: no such local folder, and downloading it{at} from the Hugging Face Hub failed: "
                         f"{_reason(exc)}") from None


def _link_or_copy(src: str, dst: str) -> None:
    try:
        os.link(src, dst)  # the records replaced in the copy are new files: the originals stay as they are
    except OSError:
        shutil.copy2(src, dst)


def push_to_hub(folder: str | os.PathLike, repo_id: str, *, private: bool = False,
                commit_message: str | None = None, token: str | None = None, license: str | None = None,
                language: str | Sequence[str] | None = None, datasets: str | Sequence[str] | None = None,
                progress: bool = True) -> str:
    """Upload the contrastfit model folder ``folder`` to the Hub repository ``repo_id`` (created if
    needed) with its model card; returns the repository's URL. What is uploaded: ``encoder/``, the
    weights, ``contrastfit.json``, ``results.json`` if present (absolute local paths in both written
    as file names), the sentence-transformers files and ``README.md`` (written from the records if
    the folder has none); not ``checkpoints/`` or hidden files. ``license``, ``language`` and
    ``datasets`` (Hub data set ids; :func:`contrastfit.card.card_settings`) are set in the uploaded
    card's metadata (a README.md of the folder is kept otherwise) and in the uploaded ``contrastfit.json``;
    the folder itself is left as it is. ``progress=False``: no upload progress bar."""
    folder = Path(folder)
    if not HUB_ID.match(repo_id):
        raise ModelError(f"--repo {repo_id!r} is not a Hub repository id (owner/name)")
    settings = card_settings(license, language, datasets)
    if not (folder / CONFIG_NAME).is_file():
        raise ModelError(f"{folder} is not a contrastfit output folder (no {CONFIG_NAME})")
    try:
        config = parse_model_config(json.loads((folder / CONFIG_NAME).read_text(encoding="utf-8")),
                                    str(folder / CONFIG_NAME))
        record = json.loads((folder / "results.json").read_text(encoding="utf-8")) \
            if (folder / "results.json").is_file() else None
    except json.JSONDecodeError as exc:
        raise ModelError(f"{folder}: a record is not valid JSON ({exc.msg} at line {exc.lineno})") from None
    try:
        from huggingface_hub import HfApi
    except ImportError:  # pragma: no cover - a transformers dependency
        raise ModelError("pushing to the Hub needs huggingface_hub: pip install huggingface_hub") from None
    with tempfile.TemporaryDirectory(prefix="contrastfit-push-") as tmp:
        staging = Path(tmp) / folder.name  # a copy (hard links where possible) whose records are made public
        shutil.copytree(folder, staging, ignore=shutil.ignore_patterns("checkpoints", ".*"), copy_function=_link_or_copy)
        if settings:
            config.card = {**config.card, **settings}
        write_json_atomic(staging / CONFIG_NAME, public_record(config.to_dict()))
        if record is not None:
            write_json_atomic(staging / "results.json", public_record(record))
        if not (staging / CARD_NAME).is_file():
            write_text_atomic(staging / CARD_NAME, model_card(record if record is not None else config.to_dict(), config))
        elif settings:  # the folder's own card (perhaps edited): only these fields change
            set_card_metadata(staging / CARD_NAME, settings)  # a new file: the hard-linked original stays
        api = HfApi(token=token)
        try:
            with progress_bars(progress):
                url = api.create_repo(repo_id=repo_id, repo_type="model", private=private, exist_ok=True)
                api.upload_folder(repo_id=repo_id, repo_type="model", folder_path=str(staging),
                                  commit_message=commit_message or f"Upload contrastfit model from {folder.name}")
        except Exception as exc:  # offline, no token, no write access
            raise ModelError(f"pushing {folder} to the Hugging Face Hub as {repo_id} failed: {_reason(exc)}") from None
    return str(getattr(url, "url", url) or f"https://huggingface.co/{repo_id}")
