"""A run's Trainer checkpoints: where they are, whether one is complete, which one a resumed run
continues from, and loading it without unpickling anything but weights.

Every job resumes through :func:`resume_checkpoint` and :func:`weights_only_loading`
(:func:`contrastfit.pipeline.fit`); :func:`checkpoint_problem` reads a checkpoint's files as bytes and
JSON only, so a file cut short by a killed run is skipped, never loaded.
"""

from __future__ import annotations

import contextlib
import json
import os
import pickle
import struct
import sys
import zipfile
from pathlib import Path
from typing import Iterator

from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR, get_last_checkpoint

from .errors import ModelError

#: The folder of a run's output that holds its checkpoints while it trains.
CHECKPOINT_DIR = "checkpoints"


def last_checkpoint(output: str | Path) -> str | None:
    """The newest ``checkpoint-N`` folder of the run in ``output``, complete or not (None: none)."""
    folder = Path(output) / CHECKPOINT_DIR
    return get_last_checkpoint(str(folder)) if folder.is_dir() else None


#: A checkpoint's weights: one of these files (a ``*.index.json`` names its shards).
CHECKPOINT_WEIGHTS = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin",
                      "pytorch_model.bin.index.json")
#: What a resumable checkpoint holds besides its weights and ``trainer_state.json``.
CHECKPOINT_STATE_FILES = ("optimizer.pt", "scheduler.pt")


def checkpoint_problem(folder: str | Path) -> str | None:
    """None when the Trainer checkpoint ``folder`` is complete, else what is wrong with it (a phrase).
    Complete: ``trainer_state.json`` (which the library writes last) is there and parses as JSON with a
    ``global_step``; the weights (:data:`CHECKPOINT_WEIGHTS`, with every shard an index names) and
    :data:`CHECKPOINT_STATE_FILES` are there; every ``*.safetensors`` file is as long as its header says
    (:func:`_safetensors_problem`) and every torch file (``*.pt``, ``*.pth``, ``*.bin``) is a readable zip
    archive, torch's format, whose directory sits at its end, so a file cut short has none. Nothing is
    unpickled or loaded."""
    folder = Path(folder)
    state = folder / "trainer_state.json"
    if not state.is_file():
        return "trainer_state.json is missing"
    try:
        int(json.loads(state.read_text(encoding="utf-8"))["global_step"])
    except (OSError, UnicodeDecodeError, ValueError, KeyError, TypeError):
        return "trainer_state.json is unreadable"
    weights = [name for name in CHECKPOINT_WEIGHTS if (folder / name).is_file()]
    if not weights:
        return "the model weights are missing"
    for name in [*CHECKPOINT_STATE_FILES, *_shards(folder, weights)]:
        if not (folder / name).is_file():
            return f"{name} is missing"
    for path in sorted(folder.iterdir()):
        problem = (_safetensors_problem(path) if path.suffix == ".safetensors"
                   else _torch_file_problem(path) if path.suffix in (".pt", ".pth", ".bin") else None)
        if problem:
            return f"{path.name} {problem}"
    return None


def _shards(folder: Path, weights: list[str]) -> list[str]:
    """The shard files the ``*.index.json`` among ``weights`` names (a broken index names one that is not there)."""
    out = []
    for name in weights:
        if name.endswith(".index.json"):
            try:
                out += sorted(set(json.loads((folder / name).read_text(encoding="utf-8"))["weight_map"].values()))
            except (OSError, UnicodeDecodeError, ValueError, KeyError, TypeError, AttributeError):
                out.append(f"a readable {name}")
    return out


def _safetensors_problem(path: Path) -> str | None:
    """None when ``path`` holds a whole safetensors file: an 8-byte header length, a JSON header of that
    length, and as many data bytes as the header's largest tensor offset."""
    try:
        size = path.stat().st_size
        with open(path, "rb") as fh:
            head = fh.read(8)
            if len(head) < 8:
                return "is truncated"
            (length,) = struct.unpack("<Q", head)
            if length > size - 8:
                return "is truncated"
            header = json.loads(fh.read(length))
        end = max((int(v["data_offsets"][1]) for k, v in header.items() if k != "__metadata__"), default=0)
    except (OSError, ValueError, KeyError, TypeError, IndexError, AttributeError):
        return "is unreadable"
    return "is truncated" if size < 8 + length + end else None


def _torch_file_problem(path: Path) -> str | None:
    """None when ``path`` is a non-empty zip archive whose directory reads (``torch.save``'s format)."""
    try:
        if path.stat().st_size == 0:
            return "is empty"
        with zipfile.ZipFile(path) as archive:
            archive.infolist()
    except (OSError, zipfile.BadZipFile):
        return "is truncated or not a torch file"
    return None


def resume_checkpoint(output: str | Path) -> str | None:
    """The checkpoint ``--resume`` continues from: the newest complete one (:func:`checkpoint_problem`)
    in ``output``'s checkpoints, skipping incomplete ones (a run killed while writing one), with one
    line on stderr naming it and what was skipped; None when there is none (also said, when there were
    only incomplete ones: the run starts over). Every job resumes through it
    (:func:`contrastfit.pipeline.fit`)."""
    folder = Path(output) / CHECKPOINT_DIR
    if not folder.is_dir():
        return None
    found = []
    for path in folder.iterdir():
        step = path.name.removeprefix(f"{PREFIX_CHECKPOINT_DIR}-")
        if path.is_dir() and path.name.startswith(f"{PREFIX_CHECKPOINT_DIR}-") and step.isdigit():
            found.append((int(step), path))
    skipped = []
    for step, path in sorted(found, reverse=True):
        problem = checkpoint_problem(path)
        if problem is None:
            note = f"; skipped the incomplete {'; '.join(skipped)}" if skipped else ""
            print(f"contrastfit: resuming from {path} (step {step}){note}", file=sys.stderr)
            return str(path)
        skipped.append(f"{path.name} ({problem})")
    if skipped:
        print(f"contrastfit: no complete checkpoint in {folder} ({'; '.join(skipped)}): training from the start",
              file=sys.stderr)
    return None


@contextlib.contextmanager
def weights_only_loading(checkpoint: str | None) -> Iterator[None]:
    """While resuming from ``checkpoint``: every ``torch.load`` is weights-only (tensors, numbers,
    strings and containers of them, plus the NumPy types the Trainer allow-lists for its RNG state;
    no other Python object is unpickled), whatever the caller or ``TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD``
    asks, through torch's ``TORCH_FORCE_WEIGHTS_ONLY_LOAD``; a file that needs more is refused with a
    :class:`~contrastfit.errors.ModelError` naming the checkpoint. transformers 5 already passes
    ``weights_only=True`` for the optimizer, scheduler, scaler and RNG states; this keeps it so."""
    if checkpoint is None:
        yield
        return
    saved = {k: os.environ.get(k) for k in ("TORCH_FORCE_WEIGHTS_ONLY_LOAD", "TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD")}
    os.environ["TORCH_FORCE_WEIGHTS_ONLY_LOAD"] = "1"
    os.environ.pop("TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD", None)
    try:
        yield
    except pickle.UnpicklingError as exc:
        lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
        reason = next((line for line in lines if "Unsupported global" in line or "WeightsUnpickler" in line),
                      lines[0] if lines else type(exc).__name__)
        reason = reason.split(" was not an allowed global")[0].removeprefix("WeightsUnpickler error: ")
        raise ModelError(f"{checkpoint}: refused to resume: a file there holds pickled Python objects that "
                         f"weights-only loading does not allow ({reason}); delete that checkpoint to resume "
                         "from an earlier one, or the run's folder to start over") from None
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
