"""`contrastfit serve` under load and abuse: latency of small requests while large and malformed ones arrive.

A real model (MiniLM, `ce` on K = 16 MR sentences per class, a few steps: the predictions' quality is
not the point) is served by `contrastfit serve` in a separate process on 127.0.0.1, once per server
setting. Against each, at the same time and with bounded request counts:

* ``--clients`` threads each send ``--requests`` small requests (1 to 8 MR test sentences) one after
  another, a pause of 0 to 2 x ``--think`` s before each: their latency (p50, p95, max; apart for
  the requests that overlapped a large one) and failures (anything but a 200 with one row per text);
* one bulk client sends ``--bulk`` requests of ``--bulk-texts`` sentences (the server's cap), with a
  pause of ``--bulk-pause`` s before each;
* one abuser cycles through malformed and oversized requests (a lone surrogate, bad JSON, wrong
  types, too many texts, a body over the cap, a short body, deep nesting, a bad request line) and
  holds idle connections open: each must get its 4xx status with a JSON error, each idle
  connection must be closed by the server after ``--timeout``.

Settings compared (``--settings``, each ``tT-bB`` is ``--threads T --batch-size B``, ``-wW`` adds
``--workers W``): ``t1-b8`` (the defaults: one model worker with one PyTorch thread, chunks of 8
texts), ``t1-b16``, ``t1-b32`` (larger chunks), ``t0-b16`` (PyTorch's default thread count, one per
core), ``t1-b256`` (no chunking: a whole request per forward pass, as before the model thread, when a
request held the model's lock to its end), ``t1-b8-w2`` (two model workers, each one thread: two
forward passes at a time). The settings run one after another in one run, on the same model, with
the same clients (seeded), so that their rows compare.

    python bench/serve_load.py [--run TRAINED_FOLDER] [--output bench/results/serve_load]
    python bench/serve_load.py --settings t1-b8 t1-b8-w2 --output bench/results/serve_load_workers
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import random
import re
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

SETTINGS = {"t1-b8": ["--threads", "1", "--batch-size", "8"],
            "t1-b16": ["--threads", "1", "--batch-size", "16"],
            "t1-b32": ["--threads", "1", "--batch-size", "32"],
            "t0-b16": ["--threads", "0", "--batch-size", "16"],
            "t0-b32": ["--threads", "0", "--batch-size", "32"],
            "t1-b256": ["--threads", "1", "--batch-size", "256"],
            "t1-b8-w2": ["--threads", "1", "--batch-size", "8", "--workers", "2"]}


def _post(body: bytes, length: int | None = None) -> bytes:
    length = len(body) if length is None else length
    return (f"POST /predict HTTP/1.1\r\nHost: bench\r\nContent-Type: application/json\r\n"
            f"Content-Length: {length}\r\n\r\n").encode() + body


def abuse_requests(max_texts: int, max_body: int) -> list[tuple[str, bytes, int]]:
    """(name, raw request, the status it must get)."""
    return [
        ("lone surrogate", _post(b'{"texts": ["a fine film \\ud800"]}'), 400),
        ("bad JSON", _post(b'{"texts": ["a fine film", '), 400),
        ("wrong type", _post(b'{"texts": "a fine film"}'), 400),
        ("too many texts", _post(json.dumps({"texts": ["a fine film"] * (max_texts + 1)}).encode()), 413),
        ("body over the cap", _post(b'{"texts": ["' + b"a" * max_body + b'"]}'), 413),
        ("short body", _post(b'{"texts": ["a"]}', length=1000), 400),
        ("deep nesting", _post(b'{"texts": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"), 400),
        ("bad request line", b"HELLO THERE\r\n\r\n", 400),
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


def _predict(port: int, texts: list[str], timeout: float = 300.0) -> tuple[int | None, float, int]:
    """(status, seconds, rows answered) of one well-formed request."""
    start = time.perf_counter()
    try:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
        conn.request("POST", "/predict", json.dumps({"texts": texts}), {"Content-Type": "application/json"})
        reply = conn.getresponse()
        body = reply.read()
        conn.close()
        rows = len(json.loads(body).get("predictions", [])) if reply.status == 200 else 0
        return reply.status, time.perf_counter() - start, rows
    except (OSError, http.client.HTTPException, ValueError):
        return None, time.perf_counter() - start, 0


def _quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def run_setting(run: str, name: str, args, texts: list[str]) -> dict:
    cmd = [sys.executable, "-m", "contrastfit", "serve", run, "--port", "0", "--max-texts", str(args.bulk_texts),
           "--max-body", str(args.max_body), "--timeout", str(args.timeout), *SETTINGS[name]]
    proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True)
    try:
        line = ""
        while "serving" not in line:
            line = proc.stderr.readline()
            if not line:
                raise RuntimeError("the server exited before listening")
        port = int(re.search(r"http://[\d.]+:(\d+)", line).group(1))
        threading.Thread(target=lambda: [None for _ in proc.stderr], daemon=True).start()  # keep the pipe drained
        for _ in range(3):  # warm up: first forward passes
            _predict(port, texts[:8])

        small, bulk, abuse, idle = [], [], [], []
        lock = threading.Lock()
        stop_abuse = threading.Event()

        def client(seed: int) -> None:
            rng = random.Random(seed)
            for _ in range(args.requests):
                time.sleep(rng.uniform(0, 2 * args.think))
                k = rng.randint(1, 8)
                batch = rng.sample(texts, k)
                begun = time.perf_counter()
                status, seconds, rows = _predict(port, batch)
                with lock:
                    small.append({"status": status, "seconds": seconds, "ok": status == 200 and rows == k,
                                  "start": begun, "end": begun + seconds})

        def bulk_client() -> None:
            rng = random.Random(99)
            for _ in range(args.bulk):
                time.sleep(args.bulk_pause)  # small requests alone, then with a large one in progress
                batch = rng.sample(texts, args.bulk_texts)
                begun = time.perf_counter()
                status, seconds, rows = _predict(port, batch)
                with lock:
                    bulk.append({"status": status, "seconds": seconds, "ok": status == 200 and rows == len(batch),
                                 "start": begun, "end": begun + seconds})

        def abuser() -> None:
            requests = abuse_requests(args.bulk_texts, args.max_body)
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

        start = time.perf_counter()
        workers = [threading.Thread(target=client, args=(s,)) for s in range(args.clients)]
        workers.append(threading.Thread(target=bulk_client))
        bad = threading.Thread(target=abuser)
        for t in [*workers, bad]:
            t.start()
        for t in workers:
            t.join(timeout=args.limit)
        stop_abuse.set()
        bad.join(timeout=args.timeout + 60)
        wall = time.perf_counter() - start
        if any(t.is_alive() for t in workers):
            raise RuntimeError(f"{name}: clients still running after {args.limit} s")
    finally:
        proc.terminate()
        proc.wait(timeout=60)

    latencies = [r["seconds"] for r in small if r["ok"]]
    during = [r["seconds"] for r in small if r["ok"] and any(r["start"] < b["end"] and b["start"] < r["end"]
                                                              for b in bulk)]
    alone = [r["seconds"] for r in small if r["ok"] and not any(r["start"] < b["end"] and b["start"] < r["end"]
                                                                 for b in bulk)]

    def summary(values: list[float]) -> dict:
        if not values:
            return {"requests": 0}
        return {"requests": len(values), "p50_s": _quantile(values, 0.5), "p95_s": _quantile(values, 0.95),
                "max_s": max(values)}

    by_kind: dict[str, dict[str, int]] = {}
    for r in abuse:
        entry = by_kind.setdefault(r["request"], {"sent": 0, "expected_status": r["want"], "answered_as_expected": 0})
        entry["sent"] += 1
        entry["answered_as_expected"] += int(r["ok"])
    return {
        "setting": name, "server_options": SETTINGS[name], "wall_s": wall,
        "small": {"requests": len(small), "failed": sum(not r["ok"] for r in small), **summary(latencies),
                  "during_a_large_request": summary(during), "with_no_large_request": summary(alone)},
        "bulk": {"requests": len(bulk), "texts_each": args.bulk_texts, "failed": sum(not r["ok"] for r in bulk),
                 "mean_s": sum(r["seconds"] for r in bulk) / max(1, len(bulk))},
        "malformed": {"sent": len(abuse), "answered_as_expected": sum(r["ok"] for r in abuse), "by_request": by_kind},
        "idle_connections": {"held": len(idle), "closed_by_server": sum(r["closed"] for r in idle),
                             "mean_s_to_close": sum(r["seconds"] for r in idle) / max(1, len(idle))},
    }


def trained_run(folder: Path) -> str:
    from contrastfit import train

    train(data="mr", model="minilm-l6", method="ce", shots=16, epochs=3, seed=0, output=str(folder), progress=False,
          select_best=False)
    return str(folder)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--run", help="a trained folder to serve (default: train one, MiniLM `ce` on 16 MR sentences per class)")
    p.add_argument("--settings", nargs="+", default=["t1-b8", "t1-b16", "t1-b32", "t0-b16", "t1-b256", "t1-b8-w2"],
                   choices=list(SETTINGS))
    p.add_argument("--clients", type=int, default=4)
    p.add_argument("--requests", type=int, default=20, help="small requests per client")
    p.add_argument("--think", type=float, default=0.25,
                   help="mean pause of a small client between requests (uniform on 0 to twice this)")
    p.add_argument("--bulk-pause", type=float, default=3.0, help="pause of the bulk client before each request")
    p.add_argument("--bulk", type=int, default=2, help="large requests of the bulk client")
    p.add_argument("--bulk-texts", type=int, default=256, help="texts per large request (the server's --max-texts)")
    p.add_argument("--max-body", type=int, default=1 << 20)
    p.add_argument("--timeout", type=float, default=5.0, help="the server's --timeout")
    p.add_argument("--limit", type=float, default=500.0, help="seconds the clients of one setting may take")
    p.add_argument("--output", default="bench/results/serve_load")
    args = p.parse_args(argv)

    from contrastfit import load_data
    from contrastfit.versions import library_versions

    texts = list(load_data("mr").split("test")["text"])
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        run = args.run or trained_run(Path(tmp) / "mr-ce")
        train_s = time.perf_counter() - t0
        results = []
        for name in args.settings:
            results.append(run_setting(run, name, args, texts))
            print(json.dumps(results[-1]), file=sys.stderr)
    record = {"model": "MiniLM-L6 `ce`, K = 16 MR sentences per class, 3 epochs" if not args.run else args.run,
              "train_s": train_s if not args.run else None, "cpu_cores": os.cpu_count(),
              "load_average_1min_at_end": os.getloadavg()[0],
              "clients": args.clients, "small_requests_each": args.requests, "small_texts": "1-8 MR test sentences",
              "think_s": args.think, "bulk_pause_s": args.bulk_pause,
              "bulk_requests": args.bulk, "bulk_texts": args.bulk_texts, "max_body": args.max_body,
              "timeout_s": args.timeout, "results": results, "versions": library_versions()}
    out = Path(args.output)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
    lines = [f"# `contrastfit serve` under load ({record['model']})", "",
             f"{args.clients} clients x {args.requests} small requests (1-8 texts, a pause of 0-{2 * args.think:g} s "
             f"before each), 1 bulk client x {args.bulk} requests of {args.bulk_texts} texts ({args.bulk_pause:g} s "
             "pause before each), 1 client sending malformed/oversized requests and idle connections "
             f"(--timeout {args.timeout:g}); {os.cpu_count()} CPU cores, shared with other work (1-minute load "
             f"average {record['load_average_1min_at_end']:.1f} at the end), so the numbers are noisy. Latencies in "
             "seconds; \"during\": small requests that overlapped a large one.", "",
             "| setting | small p50 | small p95 | during: p50 | during: p95 | during: max | alone: p50 | small failed "
             "| large mean | large failed | malformed answered 4xx JSON | idle closed | wall s |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        s, b, m, i = r["small"], r["bulk"], r["malformed"], r["idle_connections"]
        d, a = s["during_a_large_request"], s["with_no_large_request"]
        lines.append(f"| {r['setting']} (`{' '.join(r['server_options'])}`) | {s['p50_s']:.2f} | {s['p95_s']:.2f} | "
                     f"{d.get('p50_s', float('nan')):.2f} | {d.get('p95_s', float('nan')):.2f} | "
                     f"{d.get('max_s', float('nan')):.2f} | {a.get('p50_s', float('nan')):.2f} | "
                     f"{s['failed']}/{s['requests']} | {b['mean_s']:.1f} | {b['failed']}/{b['requests']} | "
                     f"{m['answered_as_expected']}/{m['sent']} | {i['closed_by_server']}/{i['held']} | {r['wall_s']:.0f} |")
    out.with_suffix(".md").write_text("\n".join(lines) + "\n", encoding="utf-8")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
