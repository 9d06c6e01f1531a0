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
