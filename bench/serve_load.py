"""`contrastfit serve` before and after FastAPI + uvicorn, side by side in one run, under load and abuse.

The servers: ``old``, the hand-written ``http.server`` one of commit 94057b4 (HTTP/1.0, a thread per
connection; its ``serve.py``, read with ``git show``, is loaded as a module of the installed package
from a temporary file), and ``new``, today's ``contrastfit serve`` (FastAPI on uvicorn, HTTP/1.1
keep-alive, micro-batching). Each runs in a process of its own on 127.0.0.1, one after the other, on
the same model, with the same settings (``--threads 1 --batch-size 8``, one model worker) and the same
seeded clients:

* ``--clients`` threads each send ``--requests`` requests of 1 to 8 MR test sentences back to back (a
  pause of 0 to 2 x ``--think`` s before each; 0: none), each client on one ``http.client`` connection
  (kept alive where the server keeps it: the new one; the old one closes it after each answer): latency
  p50 / p95 / max, throughput (requests and texts per second over the phase's wall time), and failures
  (anything but a 200 with one row per text);
* at the same time one abuser cycles through malformed and oversized requests (a lone surrogate, bad
  JSON, wrong types, too many texts, a body over the cap, a short body, deep nesting, a bad request
  line, another method, a request line over 64 KiB, a chunked body), each of which must get its 4xx
  with a JSON error, and holds idle connections, which the server must close after ``--timeout``.

The model (default): MiniLM-L6 with an untrained ``ce`` head (its predictions are not the point, its
forward passes are), or ``--run FOLDER``.

    python bench/serve_load.py [--run TRAINED_FOLDER] [--output bench/results/serve_load_fastapi]
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import random
import re
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

ROOT = Path(__file__).resolve().parents[1]
#: the commit whose src/contrastfit/serve.py is the hand-written http.server
OLD_COMMIT = "94057b4"
SERVERS = {"old": f"http.server ({OLD_COMMIT})", "new": "FastAPI + uvicorn"}


def _post(body: bytes, length: int | None = None, extra: str = "") -> bytes:
    length = len(body) if length is None else length
    return (f"POST /predict HTTP/1.1\r\nHost: bench\r\nContent-Type: application/json\r\n"
            f"Content-Length: {length}\r\n{extra}\r\n").encode() + body


def abuse_requests(max_texts: int, max_body: int) -> list[tuple[str, bytes, int]]:
    """(name, raw request, the status it must get): the refusals both servers share."""
    return [
        ("lone surrogate", _post(b'{"texts": ["a fine film \\ud800"]}'), 400),
        ("bad JSON", _post(b'{"texts": ["a fine film", '), 400),
        ("wrong type", _post(b'{"texts": "a fine film"}'), 400),
        ("too many texts", _post(json.dumps({"texts": ["a fine film"] * (max_texts + 1)}).encode()), 413),
        ("body over the cap", _post(b'{"texts": ["' + b"a" * max_body + b'"]}'), 413),
        ("short body", _post(b'{"texts": ["a"]}', length=1000), 400),
        ("deep nesting", _post(b'{"texts": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"), 400),
        ("bad request line", b"HELLO THERE\r\n\r\n", 400),
        ("another method", b"PUT /predict HTTP/1.1\r\nHost: bench\r\n\r\n", 405),
        ("request line over 64 KiB", b"GET /" + b"a" * 70_000 + b" HTTP/1.1\r\nHost: bench\r\n\r\n", 414),
        ("chunked body", b"POST /predict HTTP/1.1\r\nHost: bench\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 411),
    ]


def _raw(port: int, data: bytes, timeout: float = 120.0) -> tuple[int | None, bool]:
    """(status, whether the body is a JSON error) of a raw request; (None, False) for no answer."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
            sock.sendall(data)
            sock.shutdown(socket.SHUT_WR)
            reply = b""
            while chunk := sock.recv(65536):
                reply += chunk
    except OSError:
        return None, False
    head, _, body = reply.partition(b"\r\n\r\n")
    try:
        status = int(head.split()[1])
        return status, set(json.loads(body)) == {"error"}
    except (IndexError, ValueError):
        return None, False


def _quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


# -- the old server, from git history -------------------------------------------------------------------


def load_old_serve():
    """The module ``serve.py`` of OLD_COMMIT, loaded as ``contrastfit._serve_<commit>`` (so that its relative
    imports of the installed package's ``errors``, ``inference`` and ``inputs`` work)."""
    import importlib.util

    source = subprocess.run(["git", "show", f"{OLD_COMMIT}:src/contrastfit/serve.py"], cwd=ROOT, check=True,
                            capture_output=True, text=True).stdout
    folder = Path(tempfile.mkdtemp(prefix="serve-old-"))
    path = folder / f"serve_{OLD_COMMIT}.py"
    path.write_text(source, encoding="utf-8")
    name = f"contrastfit._serve_{OLD_COMMIT}"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def serve_old(argv: list[str]) -> int:
    """``--serve-old RUN [options]``: the old server in this process, until SIGTERM (what ``run_server``
    starts for ``old``)."""
    p = argparse.ArgumentParser()
    p.add_argument("run")
    for option, kind in (("--port", int), ("--threads", int), ("--batch-size", int), ("--max-texts", int),
                         ("--max-body", int), ("--timeout", float), ("--max-connections", int), ("--workers", int)):
        p.add_argument(option, type=kind)
    args = p.parse_args(argv)
    old = load_old_serve()
    from contrastfit.inference import load_for_inference

    model = load_for_inference(args.run)
    settings = {k: v for k, v in vars(args).items() if k not in ("run", "port", "threads") and v is not None}
    server = old.make_server(model, "127.0.0.1", args.port, name=args.run, threads=args.threads or None, **settings)
    server.quiet = True

    def stop(signum, frame):
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, stop)
    print(f"serving {args.run} on http://127.0.0.1:{server.server_address[1]}", file=sys.stderr, flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return 0


# -- one server under load ------------------------------------------------------------------------------


def _predict(conn: http.client.HTTPConnection, texts: list[str]) -> tuple[int | None, float, int]:
    """(status, seconds, rows answered) of one well-formed request on ``conn``."""
    start = time.perf_counter()
    try:
        conn.request("POST", "/predict", json.dumps({"texts": texts}), {"Content-Type": "application/json"})
        reply = conn.getresponse()
        body = reply.read()
        rows = len(json.loads(body).get("predictions", [])) if reply.status == 200 else 0
        return reply.status, time.perf_counter() - start, rows
    except (OSError, http.client.HTTPException, ValueError):
        conn.close()
        return None, time.perf_counter() - start, 0


def _metrics(port: int) -> dict[str, float]:
    """The new server's forward-pass counts from GET /metrics."""
    with urllib_open(f"http://127.0.0.1:{port}/metrics") as reply:
        text = reply.read().decode()
    values = {}
    for name in ("contrastfit_batch_size_count", "contrastfit_batch_size_sum",
                 "contrastfit_forward_pass_duration_seconds_sum"):
        m = re.search(rf"^{name} (\S+)$", text, re.MULTILINE)
        values[name] = float(m.group(1)) if m else float("nan")
    return values


def urllib_open(url: str):
    import urllib.request

    return urllib.request.urlopen(url, timeout=60)


def run_server(which: str, run: str, args, texts: list[str]) -> dict:
    options = ["--port", "0", "--threads", "1", "--batch-size", "8", "--max-texts", str(args.max_texts),
               "--max-body", str(args.max_body), "--timeout", str(args.timeout)]
    cmd = ([sys.executable, "-m", "contrastfit", "serve", run, *options] if which == "new" else
           [sys.executable, __file__, "--serve-old", run, *options])
    proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True, cwd=ROOT)
    try:
        line = ""
        while "serving" not in line:
            line = proc.stderr.readline()
            if not line:
                raise RuntimeError(f"{which}: the server exited before listening")
        port = int(re.search(r"http://[\d.]+:(\d+)", line).group(1))
        threading.Thread(target=lambda: [None for _ in proc.stderr], daemon=True).start()  # keep the pipe drained
        warm = http.client.HTTPConnection("127.0.0.1", port, timeout=300)
        for _ in range(5):  # warm up: first forward passes
            _predict(warm, texts[:8])
        warm.close()
        before = _metrics(port) if which == "new" else None

        small, abuse, idle = [], [], []
        lock = threading.Lock()
        stop_abuse = threading.Event()

        def client(seed: int) -> None:
            rng = random.Random(seed)
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=300)
            for _ in range(args.requests):
                if args.think:
                    time.sleep(rng.uniform(0, 2 * args.think))
                k = rng.randint(1, 8)
                status, seconds, rows = _predict(conn, rng.sample(texts, k))
                with lock:
                    small.append({"status": status, "seconds": seconds, "texts": k, "ok": status == 200 and rows == k})
            conn.close()

        def abuser() -> None:
            requests = abuse_requests(args.max_texts, args.max_body)
            i = 0
            while not stop_abuse.is_set():
                what, data, want = requests[i % len(requests)]
                status, is_json = _raw(port, data)
                with lock:
                    abuse.append({"request": what, "want": want, "status": status, "ok": status == want and is_json})
                i += 1
                if i % len(requests) == 0:  # an idle connection: closed by the server after --timeout
                    with socket.create_connection(("127.0.0.1", port), timeout=args.timeout + 30) as sock:
                        start = time.perf_counter()
                        try:
                            closed = sock.recv(10) == b""
                        except OSError:
                            closed = False
                        idle.append({"closed": closed, "seconds": time.perf_counter() - start})
                time.sleep(0.05)

        workers = [threading.Thread(target=client, args=(s,)) for s in range(args.clients)]
        bad = threading.Thread(target=abuser)
        bad.start()
        start = time.perf_counter()
        for t in workers:
            t.start()
        for t in workers:
            t.join(timeout=args.limit)
        wall = time.perf_counter() - start
        stop_abuse.set()
        bad.join(timeout=args.timeout + 120)
        if any(t.is_alive() for t in workers):
            raise RuntimeError(f"{which}: clients still running after {args.limit} s")
        after = _metrics(port) if which == "new" else None
    finally:
        proc.terminate()
        proc.wait(timeout=120)

    latencies = [r["seconds"] for r in small if r["ok"]]
    by_kind: dict[str, dict[str, int]] = {}
    for r in abuse:
        entry = by_kind.setdefault(r["request"], {"sent": 0, "expected_status": r["want"], "answered_as_expected": 0})
        entry["sent"] += 1
        entry["answered_as_expected"] += int(r["ok"])
    result = {
        "server": which, "description": SERVERS[which], "server_options": options[2:], "wall_s": wall,
        "requests": {"sent": len(small), "failed": sum(not r["ok"] for r in small),
                     "texts": sum(r["texts"] for r in small if r["ok"]),
                     "p50_s": _quantile(latencies, 0.5), "p95_s": _quantile(latencies, 0.95), "max_s": max(latencies),
                     "requests_per_s": len(latencies) / wall,
                     "texts_per_s": sum(r["texts"] for r in small if r["ok"]) / wall},
        "malformed": {"sent": len(abuse), "answered_as_expected": sum(r["ok"] for r in abuse), "by_request": by_kind},
        "idle_connections": {"held": len(idle), "closed_by_server": sum(r["closed"] for r in idle),
                             "mean_s_to_close": sum(r["seconds"] for r in idle) / max(1, len(idle))},
    }
    if after is not None:  # the passes of the measured phase (warm-up left out): texts per forward pass
        passes = after["contrastfit_batch_size_count"] - before["contrastfit_batch_size_count"]
        texts_run = after["contrastfit_batch_size_sum"] - before["contrastfit_batch_size_sum"]
        result["forward_passes"] = {"passes": passes, "texts": texts_run, "mean_texts_per_pass": texts_run / passes,
                                    "model_s": after["contrastfit_forward_pass_duration_seconds_sum"]
                                    - before["contrastfit_forward_pass_duration_seconds_sum"]}
    return result


def untrained_run(folder: Path) -> str:
    from contrastfit import ContrastiveClassifier

    model = ContrastiveClassifier.from_encoder("minilm-l6", "ce", ["negative", "positive"])
    model.save_pretrained(folder)
    return str(folder)


def markdown(record: dict) -> str:
    """The report of a record (``bench/results/serve_load_fastapi.json``): how the servers were loaded, and a
    row per server and round (latencies, throughput, failures, malformed requests answered, idle connections
    closed, texts per forward pass)."""
    think = record["think_s"]
    lines = [f"# `contrastfit serve`: http.server ({OLD_COMMIT}) against FastAPI + uvicorn ({record['model']})", "",
             f"{record['clients']} clients x {record['requests_each']} requests of 1-8 texts, back to back"
             f"{f' (a pause of 0-{2 * think:g} s before each)' if think else ''}, each client on one "
             "connection (kept alive by the new server, closed after each answer by the old one); meanwhile one "
             "client sends malformed and oversized requests and holds idle connections "
             f"(--timeout {record['timeout_s']:g}). Both servers `--threads 1 --batch-size 8`, one model worker, "
             f"each in its own process, one after the other; {record['cpu_cores']} CPU cores shared with other work "
             f"(1-minute load average {record['load_average_1min_at_end']:.1f} at the end), so the numbers are "
             "noisy. Latencies in seconds.", "",
             "| server | round | p50 | p95 | max | requests/s | texts/s | failed | malformed answered 4xx + JSON "
             "| idle closed | texts per forward pass |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in record["results"]:
        q, m, i = r["requests"], r["malformed"], r["idle_connections"]
        per_pass = f"{r['forward_passes']['mean_texts_per_pass']:.1f}" if "forward_passes" in r else "-"
        lines.append(f"| {r['description']} | {r['round']} | {q['p50_s']:.3f} | {q['p95_s']:.3f} | {q['max_s']:.3f} | "
                     f"{q['requests_per_s']:.1f} | {q['texts_per_s']:.1f} | {q['failed']}/{q['sent']} | "
                     f"{m['answered_as_expected']}/{m['sent']} | {i['closed_by_server']}/{i['held']} | {per_pass} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--serve-old"]:
        return serve_old(argv[1:])
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--run", help="a model folder to serve (default: MiniLM-L6 with an untrained `ce` head)")
    p.add_argument("--servers", nargs="+", default=["old", "new"], choices=list(SERVERS))
    p.add_argument("--rounds", type=int, default=1, help="each server this many times, in turn (old, new, old, ...)")
    p.add_argument("--clients", type=int, default=4)
    p.add_argument("--requests", type=int, default=40, help="requests per client")
    p.add_argument("--think", type=float, default=0.0,
                   help="mean pause of a client before each request (uniform on 0 to twice this; 0: none)")
    p.add_argument("--max-texts", type=int, default=64, help="the servers' --max-texts")
    p.add_argument("--max-body", type=int, default=1 << 20, help="the servers' --max-body")
    p.add_argument("--timeout", type=float, default=5.0, help="the servers' --timeout")
    p.add_argument("--limit", type=float, default=500.0, help="seconds the clients of one server may take")
    p.add_argument("--output", default="bench/results/serve_load_fastapi")
    args = p.parse_args(argv)

    from contrastfit import load_data
    from contrastfit.versions import library_versions

    texts = list(load_data("mr").split("test")["text"])
    with tempfile.TemporaryDirectory() as tmp:
        run = args.run or untrained_run(Path(tmp) / "minilm-ce")
        results = []
        for round_ in range(1, args.rounds + 1):
            for which in args.servers:
                results.append({"round": round_, **run_server(which, run, args, texts)})
                print(json.dumps(results[-1]), file=sys.stderr)
    versions = library_versions()
    for package in ("fastapi", "uvicorn", "starlette", "h11"):
        try:
            from importlib.metadata import version

            versions[package] = version(package)
        except Exception:  # noqa: BLE001
            versions[package] = None
    record = {"model": "MiniLM-L6 with an untrained `ce` head" if not args.run else args.run,
              "cpu_cores": os.cpu_count(), "load_average_1min_at_end": os.getloadavg()[0],
              "clients": args.clients, "requests_each": args.requests, "texts_per_request": "1-8 MR test sentences",
              "think_s": args.think, "max_texts": args.max_texts, "max_body": args.max_body, "timeout_s": args.timeout,
              "results": results, "versions": versions}
    out = ROOT / args.output if not Path(args.output).is_absolute() else Path(args.output)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
    text = markdown(record)
    out.with_suffix(".md").write_text(text, encoding="utf-8")
    print(text, end="")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
