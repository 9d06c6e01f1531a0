"""Saving a model is atomic at the folder level: a full disk or a kill while saving leaves the previous
model loadable with identical predictions, and the run's other files in the folder are kept."""

from __future__ import annotations

import errno
import json
from pathlib import Path

import numpy as np
import pytest
import torch

import contrastfit.atomic as atomic
import contrastfit.modeling as modeling
from contrastfit import ContrastiveClassifier

TEXTS = ["good fun film", "awful dull plot", "the movie was very weak", "superb"]


def _model(tiny_encoder_dir, seed: int) -> ContrastiveClassifier:
    """The tiny encoder with a new head; for ``seed`` > 0 the encoder's weights moved too (as by training)."""
    torch.manual_seed(seed)
    model = ContrastiveClassifier.from_encoder(str(tiny_encoder_dir), "ce", ["negative", "positive"])
    if seed:
        with torch.no_grad():
            for p in model.encoder.parameters():
                p.add_(0.05 * torch.randn_like(p))
    return model


def _saved_run(tmp_path, tiny_encoder_dir):
    """A run folder: model A saved, plus a results file and a checkpoint folder of the run."""
    folder = tmp_path / "run"
    first = _model(tiny_encoder_dir, 0)
    first.save_pretrained(folder)
    (folder / "results.json").write_text('{"metrics": {}}\n')
    (folder / "checkpoints" / "checkpoint-2").mkdir(parents=True)
    (folder / "checkpoints" / "checkpoint-2" / "trainer_state.json").write_text("{}")
    return folder, ContrastiveClassifier.from_pretrained(folder).predict_logits(TEXTS)


def _leftovers(folder):
    return sorted(p.name for p in folder.parent.iterdir() if p.name.startswith(f".{folder.name}."))


def test_a_save_that_fails_half_way_leaves_the_previous_model(tmp_path, tiny_encoder_dir, monkeypatch):
    folder, before = _saved_run(tmp_path, tiny_encoder_dir)
    second = _model(tiny_encoder_dir, 1)
    assert not np.allclose(second.predict_logits(TEXTS), before)  # another model, other predictions
    real_save_file = modeling.save_file

    def disk_full(tensors, filename, metadata=None):  # half of head.safetensors, then the disk is full
        with open(filename, "wb") as fh:
            fh.write(b"\x00" * 100)
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(modeling, "save_file", disk_full)
    with pytest.raises(OSError, match="No space left"):
        second.save_pretrained(folder)
    reloaded = ContrastiveClassifier.from_pretrained(folder)
    np.testing.assert_array_equal(reloaded.predict_logits(TEXTS), before)
    assert _leftovers(folder) == []  # the temporary folder is gone
    assert sorted(p.name for p in folder.iterdir()) == [".contrastfit", "checkpoints", "config_sentence_transformers.json",
                                                        "contrastfit.json", "encoder", "head.safetensors",
                                                        "modules.json", "results.json"]
    # and a save that succeeds replaces the model, keeping the run's other entries
    monkeypatch.setattr(modeling, "save_file", real_save_file)
    second.save_pretrained(folder)
    np.testing.assert_array_equal(ContrastiveClassifier.from_pretrained(folder).predict_logits(TEXTS),
                                  second.predict_logits(TEXTS))
    assert json.loads((folder / "results.json").read_text()) == {"metrics": {}}
    assert (folder / "checkpoints" / "checkpoint-2" / "trainer_state.json").is_file()
    assert _leftovers(folder) == []


def test_a_save_killed_while_moving_the_old_entries_out_is_rolled_back_on_load(tmp_path, tiny_encoder_dir, monkeypatch):
    folder, before = _saved_run(tmp_path, tiny_encoder_dir)
    real_rename = atomic.os.rename
    moved = []

    def killed_moving_the_second_entry_out(src, dst):
        if Path(dst).parent.name.startswith(".run.old-"):
            moved.append(Path(src).name)
            if len(moved) == 2:  # contrastfit.json is aside, the encoder not yet
                raise KeyboardInterrupt
        return real_rename(src, dst)

    monkeypatch.setattr(atomic.os, "rename", killed_moving_the_second_entry_out)
    with pytest.raises(KeyboardInterrupt):
        _model(tiny_encoder_dir, 1).save_pretrained(folder)
    monkeypatch.setattr(atomic.os, "rename", real_rename)
    assert moved[0] == "contrastfit.json" and not (folder / "contrastfit.json").exists()
    assert len(_leftovers(folder)) == 2  # .run.old-* and .run.new-*
    reloaded = ContrastiveClassifier.from_pretrained(folder)  # puts the previous entries back
    np.testing.assert_array_equal(reloaded.predict_logits(TEXTS), before)
    assert (folder / "results.json").is_file() and _leftovers(folder) == []


def test_a_save_killed_while_moving_the_new_entries_in_is_finished(tmp_path, tiny_encoder_dir, monkeypatch):
    folder, _ = _saved_run(tmp_path, tiny_encoder_dir)
    second = _model(tiny_encoder_dir, 1)
    inodes = {name: (folder / name).stat().st_ino for name in ("results.json", "checkpoints")}
    real_rename = atomic.os.rename

    def killed_moving_the_first_entry_in(src, dst):
        if Path(src).parent.name.startswith(".run.new-"):  # committed; killed moving the first new entry in
            raise KeyboardInterrupt
        return real_rename(src, dst)

    monkeypatch.setattr(atomic.os, "rename", killed_moving_the_first_entry_in)
    with pytest.raises(KeyboardInterrupt):
        second.save_pretrained(folder)
    monkeypatch.setattr(atomic.os, "rename", real_rename)
    assert not (folder / "contrastfit.json").exists()  # it goes in last
    np.testing.assert_array_equal(ContrastiveClassifier.from_pretrained(folder).predict_logits(TEXTS),
                                  second.predict_logits(TEXTS))  # the load finishes the move first
    assert (folder / "checkpoints" / "checkpoint-2").is_dir() and _leftovers(folder) == []
    # the run's own entries were never renamed
    assert {name: (folder / name).stat().st_ino for name in inodes} == inodes
