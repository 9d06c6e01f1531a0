"""Atomic writes: a failure inside the block keeps the old file and leaves no temporary file."""

from __future__ import annotations

import pytest

from contrastfit.atomic import atomic_open, write_text_atomic


def test_failed_write_keeps_the_old_file(tmp_path):
    target = tmp_path / "sub" / "result.json"
    write_text_atomic(target, "old")
    with pytest.raises(RuntimeError):
        with atomic_open(target) as fh:
            fh.write("half of the new")
            raise RuntimeError("crash")
    assert target.read_text() == "old"
    assert [p.name for p in target.parent.iterdir()] == ["result.json"]


def test_binary_and_text_writes(tmp_path):
    with atomic_open(tmp_path / "a.bin", "wb") as fh:
        fh.write(b"\x89PNG")
    assert (tmp_path / "a.bin").read_bytes() == b"\x89PNG"
    assert write_text_atomic(tmp_path / "b.txt", "é").read_text(encoding="utf-8") == "é"
    with pytest.raises(ValueError):
        with atomic_open(tmp_path / "c", "a"):
            pass


def test_write_json_atomic_converts_numpy_tensors_paths_and_sets(tmp_path):
    import json
    from pathlib import Path

    import numpy as np
    import torch

    from contrastfit.atomic import write_json_atomic

    target = write_json_atomic(tmp_path / "r.json", {"a": np.float32(0.5), "b": np.arange(3), "c": torch.tensor([1.5]),
                                                     "d": Path("x/y"), "e": {"b", "a"}, "f": np.int64(7)})
    text = target.read_text(encoding="utf-8")
    assert json.loads(text) == {"a": 0.5, "b": [0, 1, 2], "c": [1.5], "d": "x/y", "e": ["a", "b"], "f": 7}
    assert text.endswith("}\n") and text.startswith("{\n  ")  # indented, one final newline
    with pytest.raises(TypeError, match="object is not JSON serialisable"):
        write_json_atomic(tmp_path / "r.json", {"bad": object()})
    assert json.loads((tmp_path / "r.json").read_text())["f"] == 7  # the failed write kept the old file
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.json"]


def test_atomic_folder_failure_keeps_the_old_folder_and_success_keeps_other_entries(tmp_path):
    from contrastfit.atomic import atomic_folder

    target = tmp_path / "model"
    with atomic_folder(target) as new:
        (new / "weights").write_text("v1")
    (target / "notes.txt").write_text("the run's own file")
    with pytest.raises(RuntimeError, match="crash"):
        with atomic_folder(target) as new:
            (new / "weights").write_text("v2, half")
            raise RuntimeError("crash")
    assert (target / "weights").read_text() == "v1"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model"]
    with atomic_folder(target) as new:
        (new / "weights").write_text("v2")
        (new / "extra").mkdir()
    assert (target / "weights").read_text() == "v2" and (target / "extra").is_dir()
    assert (target / "notes.txt").read_text() == "the run's own file"  # carried across
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model"]
    with pytest.raises(NotADirectoryError):
        with atomic_folder(target / "weights"):
            pass


def test_recover_folder_rolls_back_or_finishes(tmp_path):
    import os

    from contrastfit.atomic import recover_folder

    target = tmp_path / "m"
    # killed between the two renames: the old folder is put back, the unfinished new one removed
    (tmp_path / ".m.old-1").mkdir()
    (tmp_path / ".m.old-1" / "weights").write_text("old")
    (tmp_path / ".m.new-1").mkdir()
    recover_folder(target)
    assert (target / "weights").read_text() == "old" and sorted(os.listdir(tmp_path)) == ["m"]
    # killed while moving the old folder's other entries across: the move is finished
    (tmp_path / ".m.old-2").mkdir()
    (tmp_path / ".m.old-2" / "weights").write_text("older")
    (tmp_path / ".m.old-2" / "results.json").write_text("{}")
    recover_folder(target)
    assert (target / "weights").read_text() == "old" and (target / "results.json").read_text() == "{}"
    assert sorted(os.listdir(tmp_path)) == ["m"]
    recover_folder(tmp_path / "absent" / "x")  # nothing to do


@pytest.fixture()
def umask_022():
    import os

    old = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(old)


def test_files_and_folders_get_the_modes_the_umask_gives(tmp_path, umask_022):
    """Not tempfile's private 0o600 / 0o700: another account can read a saved result or model."""
    import stat

    import torch
    from safetensors.torch import save_file

    from contrastfit.atomic import atomic_folder, write_json_atomic

    def mode(path):
        return stat.S_IMODE(path.stat().st_mode)

    assert mode(write_text_atomic(tmp_path / "results.txt", "x")) == 0o644
    assert mode(write_json_atomic(tmp_path / "results.json", {"a": 1})) == 0o644
    with atomic_folder(tmp_path / "model") as staging:
        write_json_atomic(staging / "contrastfit.json", {})
        (staging / "encoder").mkdir()
        save_file({"w": torch.zeros(2)}, str(staging / "encoder" / "model.safetensors"))  # written 0o600 by the library
    model = tmp_path / "model"
    assert mode(model) == 0o755 and mode(model / "encoder") == 0o755
    assert mode(model / "contrastfit.json") == 0o644 and mode(model / "encoder" / "model.safetensors") == 0o644


def test_a_folder_claimed_by_two_processes_at_once_is_never_seen_half_made(tmp_path):
    """Two runners started at the same moment on a new output folder: each checks the folder and claims
    it; neither may see it unmarked and not empty (the other's marker half-written) and refuse it."""
    import multiprocessing

    from contrastfit.atomic import check_output, claim_folder, written_by_contrastfit

    ctx = multiprocessing.get_context("fork")
    for i in range(20):
        target = tmp_path / f"run{i}"
        with ctx.Pool(2) as pool:
            results = pool.starmap(_check_and_claim, [(str(target),)] * 4)
        assert results == ["ok"] * 4, results
        assert written_by_contrastfit(target) and sorted(p.name for p in target.iterdir()) == [".contrastfit"]
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temporary folder left
    del check_output, claim_folder


def _check_and_claim(path: str) -> str:
    from contrastfit.atomic import check_output, claim_folder
    from contrastfit.errors import ContrastfitError

    try:
        check_output(path)
        claim_folder(path)
        check_output(path)
        return "ok"
    except ContrastfitError as exc:
        return str(exc)
