"""Results store: claim / finish / skip, concurrent runners, crash (SIGKILL) recovery, integrity."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import contrastfit.experiments.store as store_module
from contrastfit.experiments.store import ResultsStore, StoreError, pid_alive

# The child processes import the store as users do; the package imports its parts lazily, so this
# loads the standard library and the store alone (no torch, transformers): they start in milliseconds.
PRELUDE = """
import sys, time, os
from contrastfit.experiments.store import ResultsStore
store = ResultsStore(sys.argv[1])
"""


def child(code: str, *args: str, **kwargs) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", PRELUDE + code, *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, **kwargs)


def integrity_ok(path: Path) -> bool:
    conn = sqlite3.connect(path)
    try:
        return conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    finally:
        conn.close()


def test_claim_finish_skip(tmp_path):
    path = tmp_path / "out" / "results.sqlite"
    store = ResultsStore(path)
    assert store.claim("ce-seed0", {"method": "ce", "seed": 0})
    assert not store.claim("ce-seed0", {"method": "ce", "seed": 0})  # our own live claim
    row = store.get("ce-seed0")
    assert row["status"] == "running" and row["pid"] == os.getpid() and row["config"] == {"method": "ce", "seed": 0}
    store.finish("ce-seed0", {"accuracy": np.float32(0.5), "confusion": np.array([[1, 0], [0, 1]]), "seed": 0})
    assert not store.claim("ce-seed0", {})  # done: skipped
    assert store.done() == [{"accuracy": 0.5, "confusion": [[1, 0], [0, 1]], "seed": 0}]
    assert store.get("ce-seed0")["finished"] >= row["started"]
    assert store.get("missing") is None

    assert store.claim("lacon-seed0", {"method": "lacon"})
    store.fail("lacon-seed0", RuntimeError("CUDA out of memory"))
    failed = store.get("lacon-seed0")
    assert failed["status"] == "failed" and failed["error"] == "RuntimeError: CUDA out of memory"
    assert store.claim("lacon-seed0", {"method": "lacon"})  # failed runs are retried
    assert store.get("lacon-seed0")["error"] is None
    assert len(store) == 2 and {r["run_id"] for r in store.all()} == {"ce-seed0", "lacon-seed0"}

    exported = store.export_json(tmp_path / "runs.json")
    data = json.loads(exported.read_text(encoding="utf-8"))
    assert [r["run_id"] for r in data["runs"]] == ["ce-seed0", "lacon-seed0"]
    store.close()

    reopened = ResultsStore(path)  # a restart sees everything
    assert reopened.done() == [{"accuracy": 0.5, "confusion": [[1, 0], [0, 1]], "seed": 0}]
    assert reopened.release("lacon-seed0") and not reopened.release("ce-seed0")
    assert sqlite3.connect(path).execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    reopened.close()
    assert integrity_ok(path)


def test_stale_claim_with_our_own_pid_is_reclaimed(tmp_path):
    """A dead runner that had the same pid as this process (pid reuse in containers) left a claim."""
    path = tmp_path / "results.sqlite"
    with ResultsStore(path) as store:
        conn = sqlite3.connect(path)
        conn.execute("INSERT INTO runs (run_id, status, started, host, pid) VALUES ('r', 'running', ?, ?, ?)",
                     (time.time() - 60, store.host, os.getpid()))
        conn.commit()
        conn.close()
        assert store.claim("r", {})
        assert not ResultsStore(path).claim("r", {})  # now it is a live claim of this process


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs Linux /proc")
def test_reused_pid_of_newer_process_counts_as_dead(tmp_path):
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        time.sleep(0.1)
        assert pid_alive(sleeper.pid) and pid_alive(sleeper.pid, since=time.time() - 1)
        assert not pid_alive(sleeper.pid, since=time.time() - 3600)  # started long after the claim
        path = tmp_path / "results.sqlite"
        store = ResultsStore(path)
        conn = sqlite3.connect(path)
        conn.execute("INSERT INTO runs (run_id, status, started, host, pid) VALUES ('old', 'running', ?, ?, ?)",
                     (time.time() - 3600, store.host, sleeper.pid))
        conn.execute("INSERT INTO runs (run_id, status, started, host, pid) VALUES ('new', 'running', ?, ?, ?)",
                     (time.time(), store.host, sleeper.pid))
        conn.execute("INSERT INTO runs (run_id, status, started, host, pid) VALUES ('far', 'running', ?, ?, ?)",
                     (time.time(), "another-host", 1))
        conn.commit()
        conn.close()
        assert store.claim("old", {})
        assert not store.claim("new", {})  # its owner is alive
        assert not store.claim("far", {})  # other hosts cannot be checked: treated as alive
    finally:
        sleeper.kill()
        sleeper.wait()
    assert not pid_alive(sleeper.pid)


WRITER = """
prefix = sys.argv[2]
for i in range(50):
    rid = f"{prefix}-{i}"
    assert store.claim(rid, {"i": i, "writer": prefix})
    store.finish(rid, {"run_id": rid, "i": i, "pid": os.getpid()})
print("ok")
"""


def test_two_processes_write_concurrently(tmp_path):
    path = tmp_path / "results.sqlite"
    procs = [child(WRITER, str(path), name) for name in ("a", "b")]
    outs = [p.communicate(timeout=60) for p in procs]
    for p, (out, err) in zip(procs, outs):
        assert p.returncode == 0, err
        assert out.strip() == "ok"
    store = ResultsStore(path)
    rows = store.all()
    assert len(rows) == 100 and all(r["status"] == "done" for r in rows)
    assert {r["result"]["run_id"] for r in rows} == {f"{w}-{i}" for w in "ab" for i in range(50)}
    store.close()
    assert integrity_ok(path)


CONTENDER = """
claimed = []
for i in range(40):
    rid = f"run-{i}"
    if store.claim(rid, {"i": i}):
        claimed.append(rid)
        store.finish(rid, {"by": os.getpid()})
print(",".join(claimed))
"""


def test_two_processes_share_one_plan_without_duplicates(tmp_path):
    path = tmp_path / "results.sqlite"
    procs = [child(CONTENDER, str(path)) for _ in range(2)]
    outs = [p.communicate(timeout=60) for p in procs]
    claimed = []
    for p, (out, err) in zip(procs, outs):
        assert p.returncode == 0, err
        claimed.append({r for r in out.strip().split(",") if r})
    assert not claimed[0] & claimed[1]  # no run was claimed twice
    assert claimed[0] | claimed[1] == {f"run-{i}" for i in range(40)}
    assert len(ResultsStore(path).done()) == 40
    assert integrity_ok(path)


KILLED = """
for i in range(3):
    assert store.claim(f"done-{i}", {"i": i})
    store.finish(f"done-{i}", {"i": i})
assert store.claim("victim", {"i": 99})
print("claimed", flush=True)
time.sleep(60)
"""


def test_sigkill_mid_run_loses_nothing_and_run_is_reclaimed(tmp_path):
    path = tmp_path / "results.sqlite"
    proc = child(KILLED, str(path))
    try:
        assert proc.stdout.readline().strip() == "claimed"
        store = ResultsStore(path)
        assert not store.claim("victim", {})  # its owner is alive
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == -signal.SIGKILL
    restarted = ResultsStore(path)
    assert restarted.get("victim")["status"] == "running"
    assert restarted.claim("victim", {"i": 99})  # dead owner: claimed again
    assert all(not restarted.claim(f"done-{i}", {}) for i in range(3))  # finished runs are kept
    assert sorted(r["i"] for r in restarted.done()) == [0, 1, 2]
    restarted.finish("victim", {"i": 99})
    assert len(restarted.done()) == 4
    restarted.close()
    assert integrity_ok(path)


OTHER_RUNNER = """
assert store.claim("a", {})
print("claimed", flush=True)
while not os.path.exists(sys.argv[2]):
    time.sleep(0.05)
if sys.argv[3] == "finish":
    store.finish("a", {"run": "a"})
print("done", flush=True)
time.sleep(0 if sys.argv[3] == "finish" else 60)
"""


@pytest.mark.parametrize("other_finishes", [True, False])
def test_run_pending_reports_only_units_still_running_elsewhere(tmp_path, other_finishes, capsys):
    """Two runners share a store: the one that ends last must not count a unit the other finished in
    the meantime as pending (else neither writes the report); one still running is reported."""
    path, signal_file = tmp_path / "results.sqlite", tmp_path / "go"
    proc = child(OTHER_RUNNER, str(path), str(signal_file), "finish" if other_finishes else "hold")
    try:
        assert proc.stdout.readline().strip() == "claimed"
        store = ResultsStore(path)

        def work_b():  # runs while "a" is in the other process; lets it end, waits until it has
            signal_file.touch()
            assert proc.stdout.readline().strip() == "done"
            return {"run": "b"}

        units = [store_module.Unit("a", "a", lambda: pytest.fail("a belongs to the other runner")),
                 store_module.Unit("b", "b", work_b), store_module.Unit("c", "c", lambda: {"run": "c"})]
        ran, skipped, elsewhere = store_module.run_pending(store, units)
        assert (ran, skipped) == (2, 0)
        # with another runner on the store, the time left is an upper bound (it may take some units)
        assert re.search(r"^\[3/3\] c, at most about \d+\.\d min left$", capsys.readouterr().out, re.M)
        assert elsewhere == ([] if other_finishes else ["a"])
        store.close()
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()


# -- an unreadable store, unreadable results.json files, run identities -----------------------------

def test_an_unreadable_store_is_one_line_naming_the_file_and_the_rebuild(tmp_path):
    from contrastfit.errors import ContrastfitError

    path = tmp_path / "results.sqlite"
    path.write_bytes(b"this is not an SQLite database, it was cut short or overwritten" * 20)
    with pytest.raises(ContrastfitError) as info:
        ResultsStore(path)
    message = str(info.value)
    assert "\n" not in message and message.startswith(f"{path} is not a readable results store")
    assert "contrastfit experiment CONFIG --rebuild-store" in message


def _identity(sha: str) -> dict:
    return {"sha256": sha, "spec": {"seed": 0}}


def _record(sha: str | None, value: int) -> dict:
    tags = {"run_id": "r"} if sha is None else {"run_id": "r", "run_identity": _identity(sha)}
    return {"value": value, "tags": tags}


def test_run_pending_reports_and_retrains_a_truncated_results_json(tmp_path, capsys):
    store = ResultsStore(tmp_path / "results.sqlite")
    written = tmp_path / "runs" / "r" / "results.json"
    written.parent.mkdir(parents=True)
    written.write_text(json.dumps(_record("a" * 64, 1))[:25], encoding="utf-8")  # a finished run's file, cut short
    calls = []
    unit = store_module.Unit("r", "r", lambda: calls.append(1) or _record("a" * 64, 2), written=written)
    assert store_module.run_pending(store, [unit]) == (1, 0, [])
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith(f"{written}: unreadable, truncated? (JSONDecodeError: ")
    assert out[0].endswith("); moved to results.json.unreadable, the run is trained again")
    assert calls == [1] and store.get("r")["result"]["value"] == 2
    assert not written.exists() and (written.parent / "results.json.unreadable").is_file()
    store.close()


def test_run_pending_reuses_only_records_of_the_units_identity(tmp_path, capsys):
    store = ResultsStore(tmp_path / "results.sqlite")
    same, other = "a" * 64, "b" * 64
    # a finished run's results.json of another identity is not imported: set aside, the run trained
    written = tmp_path / "runs" / "r" / "results.json"
    written.parent.mkdir(parents=True)
    written.write_text(json.dumps(_record(other, 1)), encoding="utf-8")
    unit = store_module.Unit("r", "r", lambda: _record(same, 2), written=written, identity=_identity(same))
    assert store_module.run_pending(store, [unit]) == (1, 0, [])
    assert "made by another config (its run identity differs)" in capsys.readouterr().out
    assert store.get("r")["result"]["value"] == 2 and store.get("r")["config"]["identity"] == same
    # a results.json of the unit's identity is imported, not trained
    written.write_text(json.dumps(_record(same, 3)), encoding="utf-8")
    imported = store_module.Unit("s", "s", lambda: pytest.fail("imported, not trained"), written=written,
                                 identity=_identity(same))
    assert store_module.run_pending(store, [imported]) == (0, 1, [])
    assert store.get("s")["result"]["value"] == 3
    # the same run again: reused
    assert store_module.run_pending(store, [unit]) == (0, 1, [])
    # a finished row whose record carries another identity (or none) is refused, in one line
    store.finish("t", _record(None, 4))
    stale = store_module.Unit("t", "t", lambda: pytest.fail("never trained"), identity=_identity(same))
    with pytest.raises(store_module.StoreError, match=r"results\.sqlite: the finished run t was made by another "
                                                      r"config than its id says .*--rebuild-store"):
        store_module.run_pending(store, [stale])
    store.close()


@pytest.mark.parametrize("damage", ["truncated", "missing", "different", "whole"])
def test_a_reused_runs_results_json_is_checked_and_rewritten_from_the_store(tmp_path, capsys, damage):
    store = ResultsStore(tmp_path / "results.sqlite")
    sha = "a" * 64
    record = {**_record(sha, 1), "metrics": {"test": {"loss": float("nan")}}}  # NaN compares as itself
    written = tmp_path / "runs" / "r" / "results.json"
    unit = store_module.Unit("r", "r", lambda: record, written=written, identity=_identity(sha))
    written.parent.mkdir(parents=True)
    assert store_module.run_pending(store, [unit]) == (1, 0, [])
    store_module.write_json_atomic(written, record)  # what the run wrote
    if damage == "truncated":
        written.write_text(written.read_text()[:30])
    elif damage == "missing":
        written.unlink()
    elif damage == "different":
        written.write_text(json.dumps(_record(sha, 7)))
    capsys.readouterr()
    unit.work = lambda: pytest.fail("reused, not trained")
    assert store_module.run_pending(store, [unit]) == (0, 1, [])
    out = capsys.readouterr().out.splitlines()
    if damage == "whole":
        assert out == []
    else:
        reason = {"truncated": "unreadable, truncated? (JSONDecodeError: ", "missing": "missing;",
                  "different": "differs from the store's record;"}[damage]
        assert len(out) == 1 and out[0].startswith(f"{written}: {reason}")
        assert out[0].endswith("; rewritten from the store's record")
    assert json.dumps(json.loads(written.read_text()), sort_keys=True) == json.dumps(store.get("r")["result"], sort_keys=True)
    assert sorted(p.name for p in written.parent.iterdir()) == ["results.json"]
    # a run whose folder is gone is left alone
    shutil.rmtree(written.parent)
    assert store_module.run_pending(store, [unit]) == (0, 1, []) and not written.parent.exists()
    store.close()



def test_filesystem_type_reads_the_longest_mount_point_above_the_path(tmp_path, monkeypatch):
    mounts = tmp_path / "mounts"
    mounts.write_text("overlay / overlay rw 0 0\nserver:/export /mnt/shared\\040data nfs4 rw 0 0\n"
                      "tmpfs /mnt/shared\\040data/tmp tmpfs rw 0 0\n")
    real_open = open
    monkeypatch.setattr("builtins.open", lambda f, *a, **k: real_open(mounts if f == "/proc/self/mounts" else f, *a, **k))
    assert store_module.filesystem_type("/mnt/shared data/exp/results.sqlite") == "nfs4"
    assert store_module.filesystem_type("/mnt/shared data/tmp/x") == "tmpfs"
    assert store_module.filesystem_type("/mnt/shared datax") == "overlay"


def test_a_second_host_on_a_network_file_system_is_refused_with_the_way_out(tmp_path, monkeypatch):
    monkeypatch.setattr(store_module, "filesystem_type", lambda path: "nfs4")
    first = ResultsStore(tmp_path / "results.sqlite")
    first.host = "node-a"
    assert first.claim("r1") and first.claim("r2")  # one host on NFS: as before
    first.finish("r1", {"ok": 1})
    second = ResultsStore(tmp_path / "results.sqlite")
    second.host = "node-b"
    with pytest.raises(StoreError, match=r"results.sqlite is on a network file system \(nfs4\) where host node-a "
                                         r"already claimed runs: .* give each machine an output folder on its own "
                                         r"disk, then copy their runs/ folders into one and import them with "
                                         r"--rebuild-store"):
        second.claim("r3")
    assert [r["run_id"] for r in second.all()] == ["r1", "r2"]  # nothing claimed
    # on a local file system two hosts' rows are fine (a liveness they cannot check is the only limit)
    monkeypatch.setattr(store_module, "filesystem_type", lambda path: "ext4")
    third = ResultsStore(tmp_path / "results.sqlite")
    third.host = "node-b"
    assert third.claim("r3")
    for s in (first, second, third):
        s.close()
