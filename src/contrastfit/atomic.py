"""Atomic writes of files and folders. Standard library only, so any module (also one loaded on its
own from its file) can use it; every file contrastfit writes goes through here.

Files (:func:`atomic_open`, :func:`write_text_atomic`, :func:`write_json_atomic`): the content is
written to a temporary file in the target's folder, flushed and ``fsync``-ed, then renamed over the
target with :func:`os.replace`. A crash or a full disk at any moment leaves either the old file or
the new one, never half of one, and a failed write removes its temporary file.

Folders (:func:`atomic_folder`): the new contents are built in a temporary folder next to the
target (``.NAME.new-*``), ``fsync``-ed, and swapped in with two renames (the target to
``.NAME.old-*``, the new folder to the target). Entries of the previous folder that the new contents
do not have (e.g. a run's ``checkpoints/`` or ``results.json`` next to a saved model) are moved
across, then the previous folder is deleted. Until the first rename nothing of the target has
changed, so a failed or killed write (full disk, SIGKILL) leaves the previous folder exactly as it
was. A kill between the two renames, or while entries are moved across, leaves a ``.NAME.old-*``
folder: :func:`recover_folder` (which :func:`atomic_folder` calls first) puts it back, or finishes
the move. Two processes must not write the same folder at once.

Permissions: what is written gets the modes the user's umask gives, as ``open`` and ``mkdir`` would
(files ``0o666 & ~umask``, keeping their execute bits, folders ``0o777 & ~umask``; :func:`umask_mode`),
not the private ``0o600`` / ``0o700`` of :mod:`tempfile` (or of a library that writes through a
temporary file): another account the umask lets read a saved model or result can read it. An existing
folder replaced by :func:`atomic_folder` keeps its own mode.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import IO, Any, Iterator

__all__ = ["atomic_folder", "atomic_open", "json_default", "recover_folder", "umask_mode", "write_json_atomic",
           "write_text_atomic"]


def _umask() -> int:
    """The process's umask, read without changing it where the platform allows (``/proc``: no race
    with another thread creating a file), else by setting it and back."""
    try:
        with open("/proc/self/status", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def umask_mode(folder: bool = False, mode: int = 0) -> int:
    """The mode the umask gives a new file (``0o666``, plus the execute bits of ``mode``) or
    folder (``0o777``): what ``open`` and ``mkdir`` would create."""
    return (0o777 if folder else 0o666 | (mode & 0o111)) & ~_umask()


def _apply_umask(root: Path) -> None:
    """Give every file and folder under ``root`` (itself excluded) the mode the umask gives."""
    for folder, dirs, files in os.walk(root):
        for name in dirs:
            os.chmod(Path(folder) / name, umask_mode(folder=True))
        for name in files:
            path = Path(folder) / name
            if not path.is_symlink():
                os.chmod(path, umask_mode(mode=path.stat().st_mode))


@contextlib.contextmanager
def atomic_open(path: str | os.PathLike, mode: str = "w") -> Iterator[IO]:
    """Open a temporary file for writing (``"w"`` text in UTF-8, or ``"wb"``) that replaces
    ``path`` when the block ends without an exception, and is removed otherwise."""
    if mode not in ("w", "wb"):
        raise ValueError(f"mode must be 'w' or 'wb', got {mode!r}")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.chmod(tmp, umask_mode())  # mkstemp's file is private (0o600)
        with os.fdopen(fd, mode, **({"encoding": "utf-8"} if mode == "w" else {})) as fh:
            yield fh
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def write_text_atomic(path: str | os.PathLike, text: str) -> Path:
    """Write ``text`` (UTF-8) to ``path`` atomically; returns the path."""
    with atomic_open(path) as fh:
        fh.write(text)
    return Path(path)


def json_default(obj: Any) -> Any:
    """``json.dump``'s ``default`` for what results hold besides plain JSON: NumPy scalars and arrays
    and torch tensors (anything with ``tolist``), paths, sets (as sorted lists)."""
    if hasattr(obj, "tolist"):
        return obj.tolist()
    if isinstance(obj, os.PathLike):
        return os.fspath(obj)
    if isinstance(obj, (set, frozenset)):
        return sorted(obj, key=repr)
    raise TypeError(f"{type(obj).__name__} is not JSON serialisable")


def write_json_atomic(path: str | os.PathLike, obj: Any) -> Path:
    """Write ``obj`` as indented UTF-8 JSON (with a final newline) to ``path`` atomically; returns
    the path. NumPy values, tensors and paths are converted (:func:`json_default`)."""
    with atomic_open(path) as fh:
        json.dump(obj, fh, indent=2, ensure_ascii=False, default=json_default)
        fh.write("\n")
    return Path(path)


# ---------------------------------------------------------------------------------------------
# Folders
# ---------------------------------------------------------------------------------------------

def _siblings(target: Path, kind: str) -> list[Path]:
    return sorted(target.parent.glob(f".{target.name}.{kind}-*"))


def _fsync_path(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:  # e.g. a folder on a platform that cannot open one
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _fsync_tree(root: Path) -> None:
    for folder, _, files in os.walk(root):
        for name in files:
            _fsync_path(Path(folder) / name)
        _fsync_path(Path(folder))


def _move_missing(source: Path, target: Path) -> None:
    """Move every entry of ``source`` that ``target`` lacks into ``target`` (renames, same file system)."""
    for entry in sorted(source.iterdir()):
        if not (target / entry.name).exists() and not (target / entry.name).is_symlink():
            os.rename(entry, target / entry.name)


def recover_folder(path: str | os.PathLike) -> None:
    """Finish or roll back an interrupted :func:`atomic_folder` swap of ``path``.

    * ``path`` missing and a ``.NAME.old-*`` folder present (killed between the two renames): the
      old folder is put back, so the previous contents are what ``path`` holds again;
    * ``path`` present and a ``.NAME.old-*`` folder present (killed while moving the previous
      folder's other entries across): the rest are moved, the old folder deleted;
    * ``.NAME.new-*`` folders (killed while writing): deleted.

    Nothing to do costs one directory listing.
    """
    target = Path(path).absolute()
    if not target.parent.is_dir():
        return
    olds = _siblings(target, "old")
    if olds and not target.exists():
        os.rename(olds.pop(), target)
    for old in olds:
        _move_missing(old, target)
        shutil.rmtree(old, ignore_errors=True)
    for new in _siblings(target, "new"):
        shutil.rmtree(new, ignore_errors=True)


@contextlib.contextmanager
def atomic_folder(path: str | os.PathLike) -> Iterator[Path]:
    """Build the new contents of folder ``path`` in the yielded temporary folder; when the block ends
    without an exception they replace ``path`` (see the module docstring), otherwise the temporary
    folder is deleted and ``path`` is untouched. Returns nothing; ``path`` then holds the new
    contents plus the previous folder's entries the new contents do not have."""
    target = Path(path).absolute()
    if target.exists() and not target.is_dir():
        raise NotADirectoryError(f"{target} exists and is not a folder")
    target.parent.mkdir(parents=True, exist_ok=True)
    recover_folder(target)
    new = Path(tempfile.mkdtemp(dir=target.parent, prefix=f".{target.name}.new-"))
    try:
        # mkdtemp makes the folder private (0o700): give it the mode the target has, or a new folder gets
        os.chmod(new, target.stat().st_mode & 0o7777 if target.is_dir() else umask_mode(folder=True))
        yield new
        _apply_umask(new)  # what the block wrote through tempfile (or safetensors) is private too
        _fsync_tree(new)
    except BaseException:
        shutil.rmtree(new, ignore_errors=True)
        raise
    if not target.exists():
        os.rename(new, target)
        _fsync_path(target.parent)
        return
    old = Path(tempfile.mkdtemp(dir=target.parent, prefix=f".{target.name}.old-"))
    os.rmdir(old)  # only the unique name is wanted: the rename below creates it
    os.rename(target, old)
    os.rename(new, target)
    _fsync_path(target.parent)
    _move_missing(old, target)
    shutil.rmtree(old, ignore_errors=True)
