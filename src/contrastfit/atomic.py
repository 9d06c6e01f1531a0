"""Atomic writes of files and folders. Standard library only, so any module (also one loaded on its
own from its file) can use it; every file contrastfit writes goes through here.

Files (:func:`atomic_open`, :func:`write_text_atomic`, :func:`write_json_atomic`): the content is
written to a temporary file in the target's folder, flushed and ``fsync``-ed, then renamed over the
target with :func:`os.replace`. A crash or a full disk at any moment leaves either the old file or
the new one, never half of one, and a failed write removes its temporary file.

Folders (:func:`atomic_folder`): the new contents are built in a temporary folder next to the
target (``.NAME.new-*``) and ``fsync``-ed. A new target is that folder renamed. In an existing one,
only the entries the new contents replace are touched: they are moved to ``.NAME.old-*`` (a file
``.committed`` there marks the end of that step), the new entries renamed in, the old ones deleted.
Every other entry of the folder (e.g. a run's ``checkpoints/`` or ``results.json`` next to a saved
model) is never renamed. Until the first rename nothing of the target has changed, so a failed or
killed write (full disk, SIGKILL) leaves the previous folder exactly as it was; a kill during the
renames leaves ``.NAME.old-*``, and :func:`recover_folder` (which :func:`atomic_folder` calls first)
rolls back (not committed) or forward (committed). Two processes must not write the same folder at once.

Ownership: contrastfit writes only into folders it made or was given empty. The first write marks a
folder with :data:`MARKER` (``.contrastfit``: JSON, the relative paths of the files contrastfit put
there). :func:`check_output` refuses, in one line, an output that is the current, home or root
folder, holds one of the command's inputs, or exists, is not empty and was not written by contrastfit;
:func:`atomic_folder` refuses to replace an entry that holds a file the marker does not list (a file
the user put into a saved model's ``encoder/``, say). Folders written before the marker existed are
recognised by :data:`LEGACY_MARKERS`.

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
from typing import IO, Any, Iterable, Iterator

from .errors import ContrastfitError

__all__ = ["MARKER", "OutputError", "atomic_folder", "atomic_open", "check_output", "claim_folder", "json_default",
           "recover_folder", "umask_mode", "written_by_contrastfit", "write_json_atomic", "write_text_atomic"]

#: The file that marks a folder as written by contrastfit; it lists the files contrastfit put there.
MARKER = ".contrastfit"
#: Files that mark a folder contrastfit wrote before :data:`MARKER` existed (a model, a run's record,
#: an export, an experiment's store).
LEGACY_MARKERS = ("contrastfit.json", "results.json", "export.json", "results.sqlite")
_COMMITTED = ".committed"


class OutputError(ContrastfitError, ValueError):
    """An output that would overwrite, move or delete what contrastfit did not write."""


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
    and torch tensors (anything with ``tolist``), a record's typed entries (anything with ``to_dict``),
    paths, sets (as sorted lists)."""
    if hasattr(obj, "tolist"):
        return obj.tolist()
    if hasattr(obj, "to_dict"):
        return obj.to_dict()
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


def _marker_last(entry: Path) -> tuple[bool, str]:
    """Sort key: the entries that make a folder a model or run (:data:`LEGACY_MARKERS`) go last into a
    folder and first out of it, so a reader that finds ``contrastfit.json`` finds the rest with it."""
    return entry.name in LEGACY_MARKERS, entry.name


def _move_missing(source: Path, target: Path) -> None:
    """Move every entry of ``source`` that ``target`` lacks into ``target`` (renames, same file system),
    :data:`LEGACY_MARKERS` last."""
    for entry in sorted(source.iterdir(), key=_marker_last):
        if not (target / entry.name).exists() and not (target / entry.name).is_symlink():
            os.rename(entry, target / entry.name)


def recover_folder(path: str | os.PathLike) -> None:
    """Finish or roll back an interrupted :func:`atomic_folder` write of ``path``.

    * ``path`` missing and a ``.NAME.old-*`` folder present (a whole-folder swap of an older version,
      killed between its two renames): the old folder is put back;
    * a ``.NAME.old-*`` folder without ``.committed`` (killed while the replaced entries were moved out):
      they are moved back, the new contents deleted;
    * a ``.NAME.old-*`` folder with ``.committed`` (killed while the new entries were moved in): the rest
      of the new entries are moved in, the old ones deleted;
    * ``.NAME.new-*`` folders (killed while writing): deleted.

    Nothing to do costs one directory listing.
    """
    target = Path(path).absolute()
    if not target.parent.is_dir():
        return
    olds = _siblings(target, "old")
    if olds and not target.exists():
        os.rename(olds.pop(), target)
    news = _siblings(target, "new")
    for old in olds:
        if (old / _COMMITTED).exists():
            for new in news:
                _move_missing(new, target)
        else:
            _move_missing(old, target)
        shutil.rmtree(old, ignore_errors=True)
    for new in news:
        shutil.rmtree(new, ignore_errors=True)


# ---------------------------------------------------------------------------------------------
# Ownership
# ---------------------------------------------------------------------------------------------

def written_by_contrastfit(folder: str | os.PathLike) -> bool:
    """True when ``folder`` carries :data:`MARKER` or one of :data:`LEGACY_MARKERS`."""
    folder = Path(folder)
    return any((folder / name).exists() for name in (MARKER, *LEGACY_MARKERS))


def _listed(folder: Path) -> set[str] | None:
    """The relative paths :data:`MARKER` lists (None: no marker, or an unreadable one)."""
    try:
        files = json.loads((folder / MARKER).read_text(encoding="utf-8"))["files"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return set(files) if isinstance(files, list) else None


def _files_under(root: Path, entry: Path) -> list[str]:
    """The relative paths (to ``root``) of every file (and link) in or at ``entry``."""
    if entry.is_file() or entry.is_symlink() or not entry.is_dir():
        return [entry.relative_to(root).as_posix()]
    return sorted((Path(folder) / name).relative_to(root).as_posix()
                  for folder, _, names in os.walk(entry) for name in names)


def _write_marker(folder: Path, files: Iterable[str]) -> None:
    write_json_atomic(folder / MARKER, {"written_by": "contrastfit", "files": sorted(set(files))})


def _listing(folder: Path, limit: int = 3) -> str:
    names = sorted(p.name for p in folder.iterdir())
    return ", ".join(names[:limit]) + (f" and {len(names) - limit} more" if len(names) > limit else "")


def check_output(path: str | os.PathLike, *, inputs: Iterable[str | os.PathLike | None] = (),
                 option: str = "--output", folder: bool = True, overwrite: bool = False) -> Path:
    """Refuse, in one :class:`OutputError` line naming it, an output that would put the user's own files
    at risk: an empty name; the current, the home or the root folder; a folder that is, or holds, one of
    ``inputs`` (the data, the model a command reads); a folder (``folder``) that exists, is not empty and
    was not written by contrastfit; a file (not ``folder``) that exists, is not empty and is one of
    ``inputs``, or (without ``overwrite``) any other such file. Returns the absolute path."""
    raw = os.fspath(path)
    if not raw.strip():
        raise OutputError(f"{option} is empty; name a new folder" if folder else f"{option} is empty; name a file")
    target = Path(raw).expanduser().absolute()
    real = Path(os.path.realpath(target))
    for special, what in ((Path.cwd(), "the current folder"), (Path.home(), "your home folder"),
                          (Path(real.anchor), "the root folder")):
        if folder and real == Path(os.path.realpath(special)):
            raise OutputError(f"{option} {raw} is {what}; contrastfit writes into a folder of its own: name a new "
                              "one (e.g. runs/NAME)")
    for given in inputs:
        if given is None or not os.path.exists(given):
            continue
        source = Path(os.path.realpath(given))
        if real == source or (folder and real in source.parents):
            what = "is" if real == source else "holds"
            raise OutputError(f"{option} {raw} {what} the input {given}; write the output somewhere else")
    try:
        exists = real.exists()
    except OSError:
        return target
    if folder and exists and real.is_dir() and any(real.iterdir()) and not written_by_contrastfit(real):
        raise OutputError(f"{option} {raw} already holds files contrastfit did not write ({_listing(real)}); "
                          "choose a new or empty folder")
    if not folder and exists and real.is_file() and real.stat().st_size > 0 and not overwrite:
        raise OutputError(f"{option} {raw} already exists; give --overwrite to replace it, or another file name")
    check_output_path(raw, option=option, folder=folder)
    return target


def check_output_path(value: str, *, option: str = "--output", folder: bool = True, what: str = "") -> None:
    """Refuse, in one :class:`OutputError` line, an output path nothing could be written to: a file where
    a folder goes or the other way round, a path under a file, a name too long for the file system, a
    folder without write permission. ``what`` follows the kind of path the option takes in the message
    (e.g. `` (for the model and results.json)``)."""

    def exists(p: Path) -> bool:
        try:
            return p.exists()
        except OSError:  # e.g. a name too long: checked below
            return False

    kind = f"{'folder' if folder else 'file name'}{what}"
    path = Path(value).expanduser()
    if exists(path) and path.is_dir() != folder:
        raise OutputError(f"output {value} is a {'file' if folder else 'folder'}; {option} takes a {kind}")
    existing = path if folder and exists(path) else next(p for p in path.absolute().parents if exists(p))
    if not existing.is_dir():
        raise OutputError(f"output {value} lies under {existing}, which is a file; {option} takes a {kind}")
    try:
        name_max = os.pathconf(existing, "PC_NAME_MAX")
    except (OSError, ValueError, AttributeError):
        name_max = 255
    too_long = next((part for part in path.parts if len(os.fsencode(part)) > name_max), None)
    if too_long is not None:
        raise OutputError(f"output {value}: the name '{too_long[:20]}...' is longer than {name_max} bytes")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise OutputError(f"output {value}: no permission to write in {existing}")


def claim_folder(path: str | os.PathLike) -> Path:
    """Create folder ``path`` (with its parents) and mark it as contrastfit's (:data:`MARKER`) unless it
    already is; :func:`check_output` decides beforehand whether it may be written. Returns the path."""
    folder = Path(path)
    if not folder.exists():
        # a new folder appears with its marker (renamed into place whole), so a second process claiming
        # or checking it at the same moment never sees it half-made: unmarked and not empty
        folder.parent.mkdir(parents=True, exist_ok=True)
        new = Path(tempfile.mkdtemp(dir=folder.parent, prefix=f".{folder.name}.new-"))
        os.chmod(new, umask_mode(folder=True))
        _write_marker(new, ())
        try:
            os.rename(new, folder)
        except OSError:  # another process made it first
            shutil.rmtree(new, ignore_errors=True)
    folder.mkdir(parents=True, exist_ok=True)
    if not written_by_contrastfit(folder):
        _write_marker(folder, ())
    return folder


@contextlib.contextmanager
def atomic_folder(path: str | os.PathLike) -> Iterator[Path]:
    """Build the new contents of folder ``path`` in the yielded temporary folder; when the block ends
    without an exception they replace ``path`` (see the module docstring), otherwise the temporary
    folder is deleted and ``path`` is untouched. Returns nothing; ``path`` then holds the new
    contents plus the previous folder's entries the new contents do not have."""
    target = Path(path).absolute()
    if target.exists() and not target.is_dir():
        raise NotADirectoryError(f"{target} exists and is not a folder")
    recover_folder(target)
    if target.is_dir() and any(target.iterdir()) and not written_by_contrastfit(target):
        raise OutputError(f"{target} already holds files contrastfit did not write ({_listing(target)}); "
                          "choose a new or empty folder")
    target.parent.mkdir(parents=True, exist_ok=True)
    new = Path(tempfile.mkdtemp(dir=target.parent, prefix=f".{target.name}.new-"))
    try:
        # mkdtemp makes the folder private (0o700): give it the mode the target has, or a new folder gets
        os.chmod(new, target.stat().st_mode & 0o7777 if target.is_dir() else umask_mode(folder=True))
        yield new
        (new / MARKER).unlink(missing_ok=True)  # the target's marker is kept (and extended) below
        written = _files_under(new, new)
        _apply_umask(new)  # what the block wrote through tempfile (or safetensors) is private too
        _fsync_tree(new)
    except BaseException:
        shutil.rmtree(new, ignore_errors=True)
        raise
    if not target.exists():
        _write_marker(new, written)
        os.rename(new, target)
        _fsync_path(target.parent)
        return
    replaced = [target / e.name for e in sorted(new.iterdir(), key=_marker_last)
                if (target / e.name).exists() or (target / e.name).is_symlink()]
    listed = _listed(target)
    if listed is not None:  # a folder written before the marker existed: no list to check against
        foreign = next((f for e in replaced for f in _files_under(target, e) if f not in listed), None)
        if foreign is not None:
            shutil.rmtree(new, ignore_errors=True)
            raise OutputError(f"{target / foreign} was not written by contrastfit and would be replaced; move it "
                              f"out of {target}, or choose another output")
    _write_marker(target, (listed or set()) | set(written))  # before any rename: a roll-back keeps it true
    old = Path(tempfile.mkdtemp(dir=target.parent, prefix=f".{target.name}.old-"))
    for entry in reversed(replaced):  # contrastfit.json first: a reader without it recovers the folder
        os.rename(entry, old / entry.name)
    (old / _COMMITTED).touch()
    _fsync_path(old)
    _move_missing(new, target)
    _fsync_path(target)
    shutil.rmtree(old, ignore_errors=True)
    shutil.rmtree(new, ignore_errors=True)
