"""The results store: one SQLite database per experiment output folder (standard library only).

Every run is a row of one table::

    runs(run_id TEXT PRIMARY KEY, status TEXT ('running' | 'done' | 'failed'), config JSON,
         result JSON, started REAL, finished REAL, host TEXT, pid INTEGER, error TEXT)

``result`` holds whatever the runner records for the run (metrics, config, seed, data hash,
versions, timings); ``config`` the run's configuration; ``started`` / ``finished`` are Unix times.

Protocol: a runner calls :meth:`ResultsStore.claim` before a run and trains only when it returns
True, then :meth:`ResultsStore.finish` (or :meth:`ResultsStore.fail`). :func:`run_pending` is that
protocol for a list of :class:`Unit` s (what every experiment runner uses).

Guarantees
----------
* **Crash safety.** Every method is one short transaction (``BEGIN IMMEDIATE`` ... ``COMMIT``) on a
  database in WAL journal mode with ``synchronous=FULL``. SQLite's commit is atomic, so a process
  killed at any moment -- even by SIGKILL, even inside a write -- leaves the database consistent
  and keeps every committed row. What is lost is at most the run that was in progress, whose row
  stays ``running``.
* **Restart skips finished work.** ``claim`` returns False for a ``done`` run. A ``running`` row
  whose owner is dead is claimed again: the owner is dead when it was on this host and its pid no
  longer exists (or is a zombie, or has been reused by a process that started after the claim, as
  far as ``/proc`` tells). ``failed`` runs are claimed again.
* **Several runners on one store.** ``claim`` reads and writes inside one ``BEGIN IMMEDIATE``
  transaction, which holds SQLite's write lock, so two processes (or threads) can never both claim
  one run; ``busy_timeout`` makes a writer wait for the lock instead of failing. Runners on one
  store therefore share the work without duplicating or corrupting anything.

* **Only a run's own result is reused.** A :class:`Unit` with an ``identity`` (the content hash of
  everything that made the run, :mod:`contrastfit.identity`) skips a finished row only when
  the row's record carries that identity, and imports a ``results.json`` only when it is readable and
  carries it (else the file is named in one line, set aside and the run trained again). When a finished
  row is reused, its ``results.json`` (what a rebuild trusts) is checked against the row's record and,
  when truncated, missing or different, rewritten atomically from it (one line, nothing trained).
* **An unreadable database is one line.** A file that is not a (sound) SQLite database raises
  :class:`StoreError` naming it and how to rebuild it (``contrastfit experiment CONFIG --rebuild-store``).

* **One host on a network file system.** SQLite's WAL mode needs shared memory and locks that a
  network file system (NFS, SMB, Lustre, ...: :data:`NETWORK_FILESYSTEMS`) does not give across
  machines, so two hosts claiming runs in one store there could run a run twice or damage the store:
  :meth:`ResultsStore.claim` refuses, in one line with the way out, a claim on such a file system from
  a host other than the ones that already claimed runs there.

Limits: a ``running`` row owned by a process on *another* host is treated as alive (its liveness
cannot be checked) -- use :meth:`ResultsStore.release` to free it by hand. One :class:`ResultsStore` object is safe to share between threads
(its operations are serialised); across :func:`os.fork` it reopens its connection in the child.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from ..atomic import json_default, write_json_atomic
from ..errors import ContrastfitError

__all__ = ["NETWORK_FILESYSTEMS", "REBUILD_HINT", "ResultsStore", "STORE_NAME", "StoreError", "Unit", "check_written",
           "file_lock", "filesystem_type", "import_written", "read_written", "run_pending", "settle"]

#: File name of the store inside an experiment's output folder.
STORE_NAME = "results.sqlite"

_SCHEMA = """
CREATE TABLE IF NOT EXISTS runs (
    run_id   TEXT PRIMARY KEY,
    status   TEXT NOT NULL CHECK (status IN ('running', 'done', 'failed')),
    config   JSON,
    result   JSON,
    started  REAL,
    finished REAL,
    host     TEXT,
    pid      INTEGER,
    error    TEXT
)
"""
#: How to get a readable store back (what the error of an unreadable one says).
REBUILD_HINT = ("rebuild it from the runs' results.json files with `contrastfit experiment CONFIG --rebuild-store` "
                "(CONFIG may be the folder's experiment.json)")


class StoreError(ContrastfitError):
    """The results store cannot be used: not an SQLite database, a damaged one, or a run whose record does
    not match its id. One line naming the file."""


#: File system types (``/proc/self/mounts``) whose locks and shared memory do not hold across machines.
NETWORK_FILESYSTEMS = frozenset({"nfs", "nfs4", "cifs", "smb3", "smbfs", "ncpfs", "afs", "9p", "lustre", "gpfs",
                                 "beegfs", "ceph", "glusterfs", "fuse.glusterfs", "fuse.sshfs", "fuse.s3fs",
                                 "fuse.gcsfuse", "davfs", "fuse.juicefs", "pvfs2", "orangefs"})


def filesystem_type(path: str | os.PathLike) -> str | None:
    """The type of the file system ``path`` is on (the longest mount point above it in
    ``/proc/self/mounts``); None where that cannot be read (not Linux)."""
    target = os.path.realpath(path)
    best, kind = "", None
    try:
        with open("/proc/self/mounts", encoding="utf-8") as fh:
            for line in fh:
                fields = line.split()
                if len(fields) < 3:
                    continue
                point = fields[1].replace("\\040", " ")
                inside = target == point or target.startswith(point.rstrip("/") + "/")
                if inside and len(point) >= len(best):
                    best, kind = point, fields[2]
    except OSError:
        return None
    return kind


def _unreadable(path: Path, exc: BaseException) -> StoreError:
    return StoreError(f"{path} is not a readable results store ({exc}); {REBUILD_HINT}")


def _corrupt(exc: BaseException) -> bool:
    """Whether an sqlite3 error says the file is not a (sound) database, as opposed to a locked,
    missing or misused one."""
    return isinstance(exc, sqlite3.DatabaseError) and not isinstance(
        exc, (sqlite3.OperationalError, sqlite3.IntegrityError, sqlite3.ProgrammingError, sqlite3.InterfaceError))


_COLUMNS = ("run_id", "status", "config", "result", "started", "finished", "host", "pid", "error")

# Runs claimed by *this* process and not yet finished, per database file: lets a claim whose pid is
# our own be told apart from a stale claim of a dead process that happened to have the same pid.
_LIVE_CLAIMS: set[tuple[str, str]] = set()
_LIVE_LOCK = threading.Lock()


def _dumps(obj: Any) -> str | None:
    return None if obj is None else json.dumps(obj, ensure_ascii=False, default=json_default)


def _loads(text: str | None) -> Any:
    return None if text is None else json.loads(text)


def _process_start_time(pid: int) -> float | None:
    """Unix time the process started, from Linux's /proc; None where that is unavailable."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as fh:
            stat = fh.read()
        fields = stat[stat.rindex(")") + 2:].split()
        start_ticks = int(fields[19])  # field 22 of stat; fields[0] is field 3 (state)
        with open("/proc/stat", encoding="ascii") as fh:
            btime = next(int(line.split()[1]) for line in fh if line.startswith("btime "))
        return btime + start_ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, StopIteration):
        return None


def _process_state(pid: int) -> str | None:
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as fh:
            stat = fh.read()
        return stat[stat.rindex(")") + 2:].split()[0]
    except (OSError, ValueError, IndexError):
        return None


def pid_alive(pid: int | None, since: float | None = None) -> bool:
    """Whether process ``pid`` on this host still exists (a zombie counts as dead). With ``since``
    (when the claim was made), a process that started more than 2 s after it is a reused pid and
    also counts as dead (Linux only; elsewhere only existence is checked)."""
    if pid is None or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # exists, owned by someone else
    except OSError:
        return False
    if _process_state(pid) == "Z":
        return False
    if since is not None:
        started = _process_start_time(pid)
        if started is not None and started > since + 2.0:
            return False
    return True


@contextlib.contextmanager
def file_lock(path: str | os.PathLike) -> Iterator[None]:
    """An exclusive ``flock`` on ``path`` (created, with its folder) while the block runs: two runners on
    one output folder never build the same shared artefact (a transfer source model, a stage-1 encoder)
    at once. A no-op where ``fcntl`` is missing (not POSIX)."""
    try:
        import fcntl
    except ImportError:  # not POSIX
        yield
        return
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


class ResultsStore:
    """Runs and their results in an SQLite database at ``path`` (created with its folder if absent).

    See the module docstring for the crash-safety and concurrency guarantees.
    """

    def __init__(self, path: str | os.PathLike, timeout: float = 60.0) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.timeout = float(timeout)
        self.host = socket.gethostname()
        self._lock = threading.RLock()
        self._conn: sqlite3.Connection | None = None
        self._conn_pid = -1
        self._key = os.path.realpath(self.path)
        self.filesystem = filesystem_type(self.path.parent)
        self._connection()

    # -- connection and transactions -------------------------------------------------------------

    def _connection(self) -> sqlite3.Connection:
        if self._conn is not None and self._conn_pid == os.getpid():
            return self._conn
        conn = sqlite3.connect(self.path, timeout=self.timeout, isolation_level=None, check_same_thread=False)
        try:
            conn.execute(f"PRAGMA busy_timeout = {int(self.timeout * 1000)}")
            self._retry(lambda: conn.execute("PRAGMA journal_mode = WAL").fetchone())
            conn.execute("PRAGMA synchronous = FULL")
            self._retry(lambda: conn.execute(_SCHEMA))
        except BaseException as exc:
            conn.close()
            if _corrupt(exc):
                raise _unreadable(self.path, exc) from None
            raise
        self._conn, self._conn_pid = conn, os.getpid()
        return conn

    def _retry(self, fn):
        """Run ``fn``, retrying while the database is locked (switching to WAL mode does not wait
        on ``busy_timeout`` in every SQLite version)."""
        deadline = time.monotonic() + self.timeout
        delay = 0.01
        while True:
            try:
                return fn()
            except sqlite3.OperationalError as exc:
                if "locked" not in str(exc) and "busy" not in str(exc) or time.monotonic() > deadline:
                    raise
                time.sleep(delay)
                delay = min(delay * 2, 0.5)

    @contextmanager
    def _transaction(self, write: bool = True) -> Iterator[sqlite3.Connection]:
        """One transaction: ``BEGIN IMMEDIATE`` (takes the write lock up front) for writes, a
        snapshot ``BEGIN`` for reads; commits on success, rolls back on any exception."""
        with self._lock:
            conn = self._connection()
            self._retry(lambda: conn.execute("BEGIN IMMEDIATE" if write else "BEGIN"))
            try:
                yield conn
            except BaseException as exc:
                if _corrupt(exc):  # a damaged page found by this query
                    with contextlib.suppress(sqlite3.Error):
                        conn.execute("ROLLBACK")
                    raise _unreadable(self.path, exc) from None
                conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")

    def close(self) -> None:
        with self._lock:
            if self._conn is not None and self._conn_pid == os.getpid():
                self._conn.close()
            self._conn = None

    def __enter__(self) -> ResultsStore:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # -- runs --------------------------------------------------------------------------------------

    def _owner_dead(self, host: str | None, pid: int | None, started: float | None, run_id: str) -> bool:
        if host != self.host:
            return False  # cannot check another host's processes
        if pid == os.getpid():
            with _LIVE_LOCK:
                return (self._key, run_id) not in _LIVE_CLAIMS
        return not pid_alive(pid, since=started)

    def claim(self, run_id: str, config: Any = None) -> bool:
        """Claim ``run_id`` for this process; True when the caller should run it.

        Atomic (one ``BEGIN IMMEDIATE`` transaction). Succeeds when the run is absent, ``failed``,
        or ``running`` under a dead owner on this host; fails when it is ``done`` or ``running``
        under a live process (or one on another host).
        """
        with self._transaction() as conn:
            if self.filesystem in NETWORK_FILESYSTEMS:
                other = conn.execute("SELECT host FROM runs WHERE host IS NOT NULL AND host != ? LIMIT 1",
                                     (self.host,)).fetchone()
                if other is not None:
                    raise StoreError(
                        f"{self.path} is on a network file system ({self.filesystem}) where host {other[0]} already "
                        f"claimed runs: SQLite's locks do not hold across machines there, so {self.host} would risk "
                        "running a run twice or damaging the store; give each machine an output folder on its own "
                        "disk, then copy their runs/ folders into one and import them with --rebuild-store")
            row = conn.execute("SELECT status, host, pid, started FROM runs WHERE run_id = ?", (run_id,)).fetchone()
            if row is not None:
                status, host, pid, started = row
                if status == "done":
                    return False
                if status == "running" and not self._owner_dead(host, pid, started, run_id):
                    return False
            conn.execute(
                "INSERT INTO runs (run_id, status, config, result, started, finished, host, pid, error) "
                "VALUES (?, 'running', ?, NULL, ?, NULL, ?, ?, NULL) "
                "ON CONFLICT(run_id) DO UPDATE SET status = 'running', config = excluded.config, result = NULL, "
                "started = excluded.started, finished = NULL, host = excluded.host, pid = excluded.pid, error = NULL",
                (run_id, _dumps(config), time.time(), self.host, os.getpid()),
            )
        with _LIVE_LOCK:
            _LIVE_CLAIMS.add((self._key, run_id))
        return True

    def _close_run(self, run_id: str, status: str, result: Any, error: str | None) -> None:
        with self._transaction() as conn:
            conn.execute(
                "INSERT INTO runs (run_id, status, config, result, started, finished, host, pid, error) "
                "VALUES (?, ?, NULL, ?, NULL, ?, ?, ?, ?) "
                "ON CONFLICT(run_id) DO UPDATE SET status = excluded.status, result = excluded.result, "
                "finished = excluded.finished, host = excluded.host, pid = excluded.pid, error = excluded.error",
                (run_id, status, _dumps(result), time.time(), self.host, os.getpid(), error),
            )
        with _LIVE_LOCK:
            _LIVE_CLAIMS.discard((self._key, run_id))

    def finish(self, run_id: str, result: Any) -> None:
        """Mark ``run_id`` done with its ``result`` (any JSON-able value; numpy values are converted).
        A run that was never claimed is recorded too."""
        self._close_run(run_id, "done", result, None)

    def fail(self, run_id: str, error: str | BaseException) -> None:
        """Mark ``run_id`` failed with an error message; a later :meth:`claim` may retry it."""
        message = f"{type(error).__name__}: {error}" if isinstance(error, BaseException) else str(error)
        self._close_run(run_id, "failed", None, message)

    def release(self, run_id: str) -> bool:
        """Forget a run that is not done (e.g. a stale claim from another host), so it can be
        claimed again; True if a row was removed."""
        with self._transaction() as conn:
            removed = conn.execute("DELETE FROM runs WHERE run_id = ? AND status != 'done'", (run_id,)).rowcount
        with _LIVE_LOCK:
            _LIVE_CLAIMS.discard((self._key, run_id))
        return removed > 0

    # -- reading -----------------------------------------------------------------------------------

    def _rows(self, where: str = "", params: tuple = ()) -> list[dict[str, Any]]:
        with self._transaction(write=False) as conn:
            rows = conn.execute(f"SELECT {', '.join(_COLUMNS)} FROM runs {where} "
                                "ORDER BY finished IS NULL, finished, run_id", params).fetchall()
        out = []
        for row in rows:
            rec = dict(zip(_COLUMNS, row))
            rec["config"], rec["result"] = _loads(rec["config"]), _loads(rec["result"])
            out.append(rec)
        return out

    def get(self, run_id: str) -> dict[str, Any] | None:
        """The row of ``run_id`` as a dict (``config`` and ``result`` decoded), or None."""
        rows = self._rows("WHERE run_id = ?", (run_id,))
        return rows[0] if rows else None

    def done(self) -> list[Any]:
        """The results of all finished runs, in the order they finished."""
        return [row["result"] for row in self._rows("WHERE status = 'done'")]

    def all(self) -> list[dict[str, Any]]:
        """Every row as a dict (``config`` and ``result`` decoded)."""
        return self._rows()

    def export_json(self, path: str | os.PathLike) -> Path:
        """Write every row to a JSON file atomically (:func:`contrastfit.atomic.write_json_atomic`:
        temporary file, fsync, rename); returns the path."""
        return write_json_atomic(path, {"runs": self.all()})

    def __len__(self) -> int:
        with self._transaction(write=False) as conn:
            return int(conn.execute("SELECT COUNT(*) FROM runs").fetchone()[0])

    def __repr__(self) -> str:
        return f"ResultsStore({str(self.path)!r})"


# -- running a plan through the store ----------------------------------------------------------------

class Unit:
    """One run of an experiment's plan: its ``run_id`` in the store, a ``label`` for the progress line,
    ``work`` (trains it; returns its record; a single-task run's takes the folder to train in, by default
    its own, which the ``ray`` executor replaces by a worker's scratch folder), what its claim records
    (``claim``), ``written``, a
    file holding its record once it finished (its ``results.json``), which is imported when the runner
    died before the store heard of it, and ``identity``, the run's identity (``{"sha256", "spec"}``,
    :mod:`contrastfit.identity`) that its record must carry (``tags.run_identity``) to be
    reused. (A plain class: this module also loads from its file alone, outside the package, where
    ``dataclasses`` cannot find it.)"""

    __slots__ = ("run_id", "label", "work", "claim", "written", "identity")

    def __init__(self, run_id: str, label: str, work: Callable[[], Any], claim: dict[str, Any] | None = None,
                 written: Path | None = None, identity: dict[str, Any] | None = None) -> None:
        self.run_id, self.label, self.work = run_id, label, work
        self.claim = dict(claim or {})
        self.written = written
        self.identity = identity
        if identity is not None:
            self.claim["identity"] = identity["sha256"]


def _identity_of(record: Any) -> str | None:
    """``tags.run_identity.sha256`` of a record (:func:`contrastfit.identity.record_identity`,
    repeated here: this module loads on its own)."""
    tags = record.get("tags") if isinstance(record, dict) else None
    ident = tags.get("run_identity") if isinstance(tags, dict) else None
    return ident.get("sha256") if isinstance(ident, dict) else None


def read_written(path: Path, identity: dict[str, Any] | None = None) -> dict[str, Any] | None:
    """The record in a finished run's ``results.json``; None, after one line saying so, when the file is
    unreadable (truncated, not JSON, not a mapping) or, with ``identity``, carries another run identity:
    such a file is renamed ``results.json.unreadable`` (kept for inspection) and the run is trained again."""
    try:
        record = json.loads(Path(path).read_text(encoding="utf-8"))
        reason = None if isinstance(record, dict) else "not a JSON object"
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        record, reason = None, f"unreadable, truncated? ({type(exc).__name__}: {str(exc)[:80]})"
    if reason is None and identity is not None and _identity_of(record) != identity["sha256"]:
        reason = "made by another config (its run identity differs)"
    if reason is None:
        return record
    aside = Path(path).with_name(Path(path).name + ".unreadable")
    os.replace(path, aside)
    print(f"{path}: {reason}; moved to {aside.name}, the run is trained again", flush=True)
    return None


def _canonical(record: Any) -> str:
    """A record as JSON with sorted keys: two records are the same when these are (NaN included)."""
    return json.dumps(record, sort_keys=True, ensure_ascii=False, default=json_default)


def check_written(path: Path, record: Any) -> bool:
    """Keep a finished run's ``results.json`` (``path``) whole: when it is missing (its folder still there),
    unreadable (truncated, not JSON) or differs from ``record`` (the store's), rewrite it atomically from
    ``record`` with one line saying so, since ``--rebuild-store`` trusts these files. True when it was
    rewritten. A run whose folder is gone is left alone."""
    path = Path(path)
    if not path.parent.is_dir():
        return False
    try:
        written = json.loads(path.read_text(encoding="utf-8"))
        reason = None if _canonical(written) == _canonical(record) else "differs from the store's record"
    except FileNotFoundError:
        reason = "missing"
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        reason = f"unreadable, truncated? ({type(exc).__name__}: {str(exc)[:80]})"
    if reason is None:
        return False
    write_json_atomic(path, record)
    print(f"{path}: {reason}; rewritten from the store's record", flush=True)
    return True


def _check_done(store: ResultsStore, unit: Unit, result: Any) -> None:
    if unit.identity is not None and _identity_of(result) != unit.identity["sha256"]:
        raise StoreError(f"{store.path}: the finished run {unit.run_id} was made by another config than its id "
                         f"says (its run identity differs); {REBUILD_HINT}, or use a new output folder")


def import_written(store: ResultsStore, unit: Unit, claimed: bool = False) -> bool:
    """Record the run of ``unit.written`` (a finished run's ``results.json`` the store has not heard of) as
    done: True when the file held the unit's record (:func:`read_written`; one that does not is set aside,
    False). ``claimed``: the caller holds the run's claim (a driver whose Slurm task wrote the file); else
    the run is claimed first, and left alone when a live process holds it. What ``--rebuild-store`` and a
    restarted runner do with every finished folder, and what the ``slurm`` executor does with each run its
    tasks finish."""
    record = read_written(unit.written, unit.identity)
    if record is None:
        return False
    if claimed or store.claim(unit.run_id, {"imported": True}):
        store.finish(unit.run_id, record)
    return True


def settle(store: ResultsStore, unit: Unit) -> bool:
    """True when ``unit`` needs no training: done in the store (reused only with its identity, its
    ``results.json`` kept whole: :func:`check_written`), or finished with a ``results.json`` the store never
    heard of, which is imported (:func:`import_written`)."""
    row = store.get(unit.run_id)
    if row is not None and row["status"] == "done":
        _check_done(store, unit, row["result"])
        if unit.written is not None:  # what --rebuild-store trusts: kept whole
            check_written(unit.written, row["result"])
        return True
    if unit.written is not None and unit.written.is_file():  # finished, but the store never heard of it
        return import_written(store, unit)
    return False


def run_pending(store: ResultsStore, units: Sequence[Unit]) -> tuple[int, int, list[str]]:
    """Run every unit the store does not hold as done, in order: claim it (a unit claimed by a live
    process is left to it), run its ``work``, record its result with :meth:`ResultsStore.finish` (or
    :meth:`ResultsStore.fail` when ``work`` raises, which then propagates). Prints one progress line
    per unit (with an estimate of the time left). Returns ``(ran, skipped, still running elsewhere)``:
    the last list holds the units left to other processes that are not done when this call returns,
    so the last of several runners sharing a store sees none and writes the report.

    A finished run is reused only when its record carries the unit's ``identity`` (a store whose record
    does not is refused with a :class:`StoreError`); a ``written`` file that is unreadable or of another
    identity is reported in one line, set aside and the run trained again (:func:`read_written`)."""
    started = time.perf_counter()
    ran, skipped, elsewhere = 0, 0, []
    for i, unit in enumerate(units, 1):
        label = f"[{i}/{len(units)}] {unit.label}"
        if settle(store, unit):
            skipped += 1
            continue
        if not store.claim(unit.run_id, unit.claim):
            elsewhere.append(unit.run_id)
            print(f"{label}: running in another process, left to it", flush=True)
            continue
        eta = ""
        if ran:
            per_run = (time.perf_counter() - started) / ran
            # the units from here on, this one included; other runners sharing the store may take some
            left = per_run * (len(units) - i + 1) / 60
            eta = f", at most about {left:.1f} min left" if elsewhere else f", about {left:.1f} min left"
        print(f"{label}{eta}", flush=True)
        try:
            result = unit.work()
        except BaseException as exc:
            store.fail(unit.run_id, f"{type(exc).__name__}: {exc}")
            raise
        store.finish(unit.run_id, result)
        ran += 1
    still_running = [run_id for run_id in elsewhere if (row := store.get(run_id)) is None or row["status"] != "done"]
    return ran, skipped, still_running
