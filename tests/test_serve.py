"""`contrastfit serve`: the HTTP server's answers, and predict / evaluate on an ONNX export."""

from __future__ import annotations

import json
import threading
import urllib.error
import urllib.request

import pytest

from contrastfit import ContrastiveClassifier
from contrastfit.inference import load_for_inference
from contrastfit.serve import make_server


@pytest.fixture(scope="module")
def saved(tmp_path_factory, tiny_encoder_dir):
    folder = tmp_path_factory.mktemp("serve")
    model = ContrastiveClassifier.from_encoder(str(tiny_encoder_dir), "ce", ["negative", "positive"])
    model.save_pretrained(folder / "run")
    return folder / "run", model.eval()


@pytest.fixture()
def server(saved):
    run, _ = saved
    srv = make_server(load_for_inference(str(run)), port=0, name=str(run))
    srv.quiet = True
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{srv.server_address[1]}"
    srv.shutdown()
    srv.server_close()


def _call(url, body=None, raw: bytes | None = None):
    data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
    request = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=30) as reply:
            return reply.status, json.loads(reply.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


def test_predict_answers_what_the_model_predicts(server, saved):
    _, model = saved
    texts = ["good fun film", "awful dull plot", "the story"]
    status, answer = _call(server + "/predict", {"texts": texts})
    assert status == 200
    rows = answer["predictions"]
    assert [r["label"] for r in rows] == model.predict(texts)
    for row, p in zip(rows, model.predict_proba(texts)):
        assert list(row["probabilities"].values()) == pytest.approx(p.tolist(), abs=1e-6)
    assert _call(server + "/health") == (200, {"status": "ok", "model": str(saved[0]), "task": "classification",
                                               "labels": ["negative", "positive"], "pairs": False})


@pytest.mark.parametrize("body, message", [
    ({"text": ["a"]}, 'send {"texts": [...]}'),
    ({"texts": []}, '"texts" must be a non-empty list of strings'),
    ({"texts": "a film"}, '"texts" must be a list of strings'),
    ({"texts": ["a", 3]}, '"texts" must be a list of strings'),
    ({"texts": ["a"], "pairs": ["b"]}, 'this model classifies single texts: leave "pairs" out'),
])
def test_bad_requests_get_400_and_one_line(server, body, message):
    status, answer = _call(server + "/predict", body)
    assert status == 400 and answer["error"].startswith(message) and "\n" not in answer["error"]


def test_bad_bodies_and_paths(server):
    assert _call(server + "/predict", raw=b"{not json")[0] == 400
    assert _call(server + "/predict", raw="\xff".encode("latin-1"))[0] == 400
    assert _call(server + "/other", {"texts": ["a"]}) == (404, {"error": "POST /predict"})
    assert _call(server + "/")[0] == 404


def test_predict_and_evaluate_read_an_onnx_export(saved, tmp_path, capsys):
    import csv

    from conftest import sentiment_rows
    from contrastfit.cli import main
    from contrastfit.export import export_onnx

    run, model = saved
    export_onnx(run, tmp_path / "onnx")
    texts = ["good fun film", "awful dull plot"]
    assert main(["predict", str(tmp_path / "onnx"), *texts]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [r["label"] for r in rows] == model.predict(texts)
    data = tmp_path / "toy.csv"
    with open(data, "w", newline="", encoding="utf-8") as fh:
        writer = csv.DictWriter(fh, fieldnames=["text", "label"])
        writer.writeheader()
        writer.writerows({"text": r["sentence"], "label": r["sentiment"]} for r in sentiment_rows())
    out_onnx, out_torch = tmp_path / "m1.json", tmp_path / "m2.json"
    assert main(["evaluate", str(tmp_path / "onnx"), "--data", str(data), "--json", str(out_onnx)]) == 0
    assert main(["evaluate", str(run), "--data", str(data), "--json", str(out_torch)]) == 0
    onnx_metrics, torch_metrics = (json.loads(p.read_text())["metrics"] for p in (out_onnx, out_torch))
    assert onnx_metrics["confusion_matrix"] == torch_metrics["confusion_matrix"]
    assert onnx_metrics["nll"] == pytest.approx(torch_metrics["nll"], abs=1e-5)
    served = load_for_inference(str(tmp_path / "onnx"))
    with _serving(served, threads=1, workers=2) as (srv, port):  # --threads gives ONNX Runtime a session with one
        status, answer = _call(f"http://127.0.0.1:{port}/predict", {"texts": texts})  # thread, which the workers share
        assert [m.session for m in srv.batcher.models] == [served.session] * 2
        assert srv.batcher.models[1].tokenizer is not served.tokenizer
    assert status == 200 and [r["label"] for r in answer["predictions"]] == model.predict(texts)
    assert served.session.get_session_options().intra_op_num_threads == 1
    capsys.readouterr()
    assert main(["explain", str(tmp_path / "onnx"), "good film"]) == 2
    assert "is an ONNX export; explain needs the PyTorch model" in capsys.readouterr().err


def test_the_serve_command_listens_and_stops(saved):
    import os
    import re
    import signal
    import subprocess
    import sys

    run, model = saved
    proc = subprocess.Popen([sys.executable, "-m", "contrastfit", "serve", str(run), "--port", "0", "--threads", "1",
                             "--max-texts", "2", "--timeout", "5", "--batch-size", "8", "--workers", "2"],
                            stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONFAULTHANDLER": "1"})
    try:
        line = ""
        while "serving" not in line:
            line = proc.stderr.readline()
            assert line, "the server exited before listening"
        url = re.search(r"http://[\d.]+:\d+", line).group(0)
        status, answer = _call(url + "/predict", {"texts": ["good fun film"]})
        assert status == 200 and answer["predictions"][0]["label"] == model.predict(["good fun film"])[0]
        status, answer = _call(url + "/predict", {"texts": ["good", "fun", "film"]})
        assert status == 413 and answer["error"].startswith("3 texts in one request; this server takes at most 2")
    finally:
        proc.send_signal(signal.SIGTERM)  # what a service manager sends (SIGINT may be ignored in a background job)
        try:
            code = proc.wait(timeout=120)  # about 1 s on an idle machine; a loaded CI machine took over 30 s once
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGABRT)  # the faulthandler prints every thread's stack: where it hangs
            proc.wait(timeout=30)
            pytest.fail("the server did not stop within 120 s of SIGTERM:\n" + proc.stderr.read()[-6000:])
        assert code == 0


# -- under load and abuse (issue #19 §7) -----------------------------------------------------------

import contextlib  # noqa: E402
import numpy as np  # noqa: E402
import socket  # noqa: E402
import time  # noqa: E402


@contextlib.contextmanager
def _serving(model, **limits):
    """``make_server(model, **limits)`` on 127.0.0.1, running in a thread; yields (server, port)."""
    srv = make_server(model, port=0, **limits)
    srv.quiet = True
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    try:
        yield srv, srv.server_address[1]
    finally:
        srv.shutdown()
        srv.server_close()
        thread.join(timeout=10)


def _raw(port: int, data: bytes, half_close: bool = True, timeout: float = 20):
    """Send ``data`` as is on a new connection; (status, JSON body) of the answer, (None, None) when the
    server closed the connection without one."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        try:
            sock.sendall(data)
            if half_close:
                sock.shutdown(socket.SHUT_WR)
        except OSError:
            pass
        reply = b""
        while chunk := sock.recv(65536):
            reply += chunk
    if not reply:
        return None, None
    head, _, body = reply.partition(b"\r\n\r\n")
    assert b"application/json" in head, head
    return int(head.split()[1]), json.loads(body)


def _post(body: bytes, length: int | None = None, extra: str = "") -> bytes:
    length = len(body) if length is None else length
    return (f"POST /predict HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {length}\r\n"
            f"{extra}\r\n").encode() + body


class _Slow:
    """The tiny model, ``per_text`` seconds slower per text, recording the size of each forward pass
    and PyTorch's thread count during it."""

    def __init__(self, model, per_text: float = 0.0, fail_on: str | None = None):
        self.model, self.per_text, self.fail_on = model, per_text, fail_on
        self.info, self.task, self.label_names = model.info, model.task, model.label_names
        self.calls: list[int] = []
        self.threads: list[int] = []

    def predict_proba(self, texts, pairs=None, batch_size=64):
        import torch

        self.calls.append(len(texts))
        self.threads.append(torch.get_num_threads())
        if self.fail_on in texts:
            raise RuntimeError("the model broke")
        time.sleep(self.per_text * len(texts))
        return self.model.predict_proba(texts, pairs, batch_size)


def test_lone_surrogates_and_deep_nesting_get_400_json(server):
    port = int(server.rsplit(":", 1)[1])
    status, answer = _raw(port, _post(b'{"texts": ["a film \\ud800"]}'))
    assert status == 400 and answer["error"].startswith('"texts"[0] holds a lone surrogate')
    status, answer = _raw(port, _post(b'{"texts": ["' + b"\\udfff" + b'"]}'))
    assert status == 400 and "lone surrogate" in answer["error"]
    status, answer = _raw(port, _post(b'{"texts": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"))
    assert status == 400 and answer["error"] == "the body is not UTF-8 JSON (nested too deeply)"
    assert _call(server + "/predict", {"texts": ["good fun film"]})[0] == 200  # still serving


def test_too_many_texts_and_too_large_bodies_get_413(saved):
    _, model = saved
    with _serving(model, max_texts=4, max_body=2000) as (_, port):
        url = f"http://127.0.0.1:{port}/predict"
        status, answer = _call(url, {"texts": ["good film"] * 5})
        assert status == 413 and answer["error"].startswith("5 texts in one request; this server takes at most 4")
        assert _call(url, {"texts": ["good film"] * 4})[0] == 200
        # a 2 MB body: read and dropped, so that urllib, which sends all of it first, gets the answer
        status, answer = _call(url, {"texts": ["good film " * 100_000]})
        assert status == 413 and answer["error"].startswith("a body of 1000015 bytes; this server reads at most 2000")
        assert _raw(port, _post(b'{"texts": ["a"]}', length=-5))[0] == 400
        assert _raw(port, _post(b'{"texts": ["a"]}', extra="Content-Length: 99\r\n"))[0] == 400
        status, answer = _raw(port, _post(b"", extra="Transfer-Encoding: chunked\r\n").replace(b"Content-Length: 0\r\n",
                                                                                                b""))
        assert status == 411 and "Content-Length" in answer["error"]


def test_a_model_failure_gets_500_and_the_server_goes_on(saved):
    _, model = saved
    slow = _Slow(model, fail_on="boom")
    with _serving(slow) as (_, port):
        url = f"http://127.0.0.1:{port}/predict"
        status, answer = _call(url, {"texts": ["good", "boom"]})
        assert status == 500 and answer["error"] == "the model failed on this request: RuntimeError: the model broke"
        assert _call(url, {"texts": ["good film"]})[0] == 200
        slow.calls.clear()
        assert _call(url, {"texts": ["boom"] + ["good"] * 19})[0] == 500  # its first chunk of 8 fails ...
        assert _call(url, {"texts": ["good film"]})[0] == 200
    assert slow.calls == [8, 1]  # ... and the other 12 texts are not run


def test_idle_and_stalled_connections_time_out(saved):
    _, model = saved
    with _serving(model, timeout=0.5) as (_, port):
        with socket.create_connection(("127.0.0.1", port), timeout=10) as idle:
            start = time.monotonic()
            assert idle.recv(100) == b""  # closed by the server, no answer: it sent no request
            assert 0.4 < time.monotonic() - start < 5
        # a body shorter than its Content-Length, the client still connected: 408 at the deadline
        start = time.monotonic()
        status, answer = _raw(port, _post(b'{"texts": ["a"]}', length=100), half_close=False)
        assert status == 408 and answer == {"error": "the body did not arrive within 0.5 s"}
        assert 0.4 < time.monotonic() - start < 5
        # ... and shorter with the client done sending: 400 at once
        status, answer = _raw(port, _post(b'{"texts": ["a"]}', length=100))
        assert status == 400 and answer == {"error": "the body ended after 16 of its 100 bytes (Content-Length)"}
        assert _call(f"http://127.0.0.1:{port}/predict", {"texts": ["good film"]})[0] == 200


def test_a_small_request_is_answered_while_a_large_one_runs(saved):
    _, model = saved
    slow = _Slow(model, per_text=0.01)  # 256 texts: 2.6 s of model time, in chunks of 8 (0.08 s)
    import random

    from conftest import WORDS

    large = [" ".join(random.Random(i).sample(WORDS, 1 + i % 7)) for i in range(256)]
    done: dict[str, float] = {}
    answers = {}

    def ask(name, texts):
        answers[name] = _call(url, {"texts": texts})
        done[name] = time.monotonic()

    with _serving(slow) as (srv, port):
        url = f"http://127.0.0.1:{port}/predict"
        big = threading.Thread(target=ask, args=("large", large))
        big.start()
        deadline = time.monotonic() + 20
        while not slow.calls and time.monotonic() < deadline:
            time.sleep(0.01)
        start = time.monotonic()
        ask("small", ["good fun film"])
        big.join(timeout=60)
    assert answers["small"][0] == answers["large"][0] == 200
    assert done["small"] < done["large"]  # the small answer arrived first ...
    assert done["small"] - start < 1.5  # ... within a chunk or two, not after the 2.6 s of the large one
    assert slow.calls[0] == 8 and sum(slow.calls) == 257 and max(slow.calls) <= 8
    assert 1 in slow.calls  # the small request ran in a pass of its own, not filled up with the large one's texts
    rows = answers["large"][1]["predictions"]  # the chunks put back together in order
    assert [r["label"] for r in rows] == model.predict(large)
    probabilities = np.array([list(r["probabilities"].values()) for r in rows])
    np.testing.assert_allclose(probabilities, model.predict_proba(large), atol=1e-5)


def test_no_well_formed_request_fails_among_malformed_ones(saved):
    _, model = saved
    texts = ["good fun film", "awful dull plot", "the story was superb", "a weak actor", "boring", "fine movie"]
    expected = model.predict_proba(texts)
    bad = [  # (raw request, expected status)
        (_post(b'{"texts": ["\\ud800"]}'), 400),
        (_post(b'{"texts": ["a", '), 400),
        (_post(b'{"texts": "a film"}'), 400),
        (_post(b'{"texts": [1, 2]}'), 400),
        (_post(json.dumps({"texts": ["a"] * 9}).encode()), 413),
        (_post(b"x" * 5000), 413),
        (_post(b'{"texts": ["a"]}', length=100), 400),
        (_post(b"[" * 3000), 400),
        (b"HELLO\r\n\r\n", 400),
        (b"PUT /predict HTTP/1.1\r\nHost: x\r\n\r\n", 405),
        (b"GET /" + b"a" * 70_000 + b" HTTP/1.1\r\n\r\n", 414),
    ]
    failures, checked, malformed = [], [0], [0]
    lock = threading.Lock()

    def client(seed):
        for i in range(8):
            k = 1 + (seed + i) % len(texts)
            status, answer = _call(url, {"texts": texts[:k]})
            with lock:
                if status != 200 or not np.allclose([list(r["probabilities"].values()) for r in answer["predictions"]],
                                                    expected[:k], atol=1e-5):
                    failures.append((status, answer))
                checked[0] += 1

    def abuser(seed):
        for i in range(2 * len(bad)):
            request, want = bad[(seed + i) % len(bad)]
            got = _raw(port, request)
            with lock:
                if got[0] != want or not isinstance(got[1], dict) or set(got[1]) != {"error"}:
                    failures.append((want, got))
                malformed[0] += 1
        with socket.create_connection(("127.0.0.1", port), timeout=10) as idle:  # an idle client too
            with lock:
                if idle.recv(10) != b"":
                    failures.append("the idle connection got an answer")

    with _serving(model, max_texts=8, max_body=4096, timeout=1.0) as (srv, port):
        url = f"http://127.0.0.1:{port}/predict"
        threads = [threading.Thread(target=client, args=(s,)) for s in range(4)]
        threads += [threading.Thread(target=abuser, args=(s,)) for s in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=120)
        assert not any(t.is_alive() for t in threads)
    assert failures == []
    assert checked[0] == 32 and malformed[0] == 66


def test_connections_past_the_limit_get_503(saved):
    _, model = saved
    with _serving(model, max_connections=2, timeout=5) as (_, port):
        idle = [socket.create_connection(("127.0.0.1", port), timeout=10) for _ in range(2)]
        time.sleep(0.3)
        status, answer = _raw(port, _post(b'{"texts": ["good"]}'))
        assert status == 503 and answer == {"error": "2 connections are open; try again shortly"}
        for sock in idle:
            sock.close()
        deadline = time.monotonic() + 10
        while (status := _raw(port, _post(b'{"texts": ["good"]}'))[0]) == 503 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert status == 200


def test_threads_sets_the_model_threads_and_gives_them_back(saved):
    import torch

    _, model = saved
    before = torch.get_num_threads()
    want = 3 if before != 3 else 2
    slow = _Slow(model)
    with _serving(slow, threads=want) as (_, port):
        assert _call(f"http://127.0.0.1:{port}/predict", {"texts": ["good film"]})[0] == 200
    assert slow.threads == [want]
    assert torch.get_num_threads() == before


def test_small_requests_waiting_together_share_one_pass(saved):
    _, model = saved
    gate, started = threading.Event(), threading.Event()

    class Gated(_Slow):
        def predict_proba(self, texts, pairs=None, batch_size=64):
            started.set()
            gate.wait(timeout=30)  # the first pass (the large request's first chunk) waits for the others
            return super().predict_proba(texts, pairs, batch_size)

    slow = Gated(model)
    answers = {}

    def ask(name, texts):
        answers[name] = _call(url, {"texts": texts})

    small = {"a": ["good film"], "b": ["awful plot", "dull"], "c": ["fun", "superb story", "weak actor"]}
    with _serving(slow, batch_size=8) as (srv, port):
        url = f"http://127.0.0.1:{port}/predict"
        threads = [threading.Thread(target=ask, args=("large", ["the film"] * 20))]
        threads[0].start()
        assert started.wait(timeout=20)
        deadline = time.monotonic() + 20
        threads += [threading.Thread(target=ask, args=(k, v)) for k, v in small.items()]
        for t in threads[1:]:
            t.start()
        while len(srv.batcher._pending) < 3 and time.monotonic() < deadline:  # the three small ones queued (the
            time.sleep(0.01)  # large one's rest rejoins the queue after its pass)
        assert len(srv.batcher._pending) == 3
        gate.set()
        for t in threads:
            t.join(timeout=60)
    # 8 of the large request's texts, then the three small requests whole (6 texts) in one pass, then
    # the large one's next 8 and its last 4
    assert slow.calls == [8, 6, 8, 4]
    for name, texts in small.items():
        assert [r["label"] for r in answers[name][1]["predictions"]] == model.predict(texts)
    assert answers["large"][0] == 200 and len(answers["large"][1]["predictions"]) == 20


def test_a_pair_model_runs_in_chunks_with_its_pairs(tiny_encoder_dir):
    model = ContrastiveClassifier.from_encoder(str(tiny_encoder_dir), "ce", ["no", "yes"]).eval()
    model.info["data"] = {"text_pair": True}
    texts = ["good film", "awful plot", "the story", "a fun actor", "dull"]
    pairs = ["great movie", "superb story", "the plot", "bad actor", "boring and weak"]
    slow = _Slow(model)
    with _serving(slow, batch_size=2) as (_, port):
        status, answer = _call(f"http://127.0.0.1:{port}/predict", {"texts": texts, "pairs": pairs})
    assert status == 200 and slow.calls == [2, 2, 1]
    np.testing.assert_allclose([list(r["probabilities"].values()) for r in answer["predictions"]],
                               model.predict_proba(texts, pairs), atol=1e-5)


# -- several model workers (issue #21 §4: serve --workers) ---------------------------------------


class _Numbered:
    """A model stand-in for texts ``"t<i>"``: the probability of "positive" is i / 1000, so that each
    row of an answer tells which text it is for. It records (thread, texts) of each forward pass, runs
    ``pause`` seconds per pass, calls ``meet`` (if any) inside it, and fails on the text ``fail_on``.
    The server's workers share this one object (``__deepcopy__``), and so its records."""

    def __init__(self, pause: float = 0.0, meet=None, fail_on: str | None = None):
        self.pause, self.meet, self.fail_on = pause, meet, fail_on
        self.info, self.task, self.label_names = {}, "classification", ["negative", "positive"]
        self.passes: list[tuple[str, list[str]]] = []

    def __deepcopy__(self, memo):
        return self

    def predict_proba(self, texts, pairs=None, batch_size=64):
        self.passes.append((threading.current_thread().name, list(texts)))
        if self.fail_on in texts:
            raise RuntimeError("the model broke")
        if self.meet is not None:
            self.meet()
        time.sleep(self.pause)
        p = np.array([int(t[1:]) / 1000 for t in texts])
        return np.stack([1 - p, p], axis=1)


def _positive(answer) -> list[float]:
    return [row["probabilities"]["positive"] for row in answer["predictions"]]


@pytest.mark.parametrize("workers", [1, 2])
def test_two_workers_run_two_passes_at_the_same_time(workers):
    # each pass waits for a second pass to start: only two passes at the same time get through
    barrier = threading.Barrier(2, timeout=20 if workers == 2 else 1)
    model = _Numbered(meet=barrier.wait)
    answers = {}

    def ask(name, texts):
        answers[name] = _call(url, {"texts": texts})

    with _serving(model, workers=workers, batch_size=2) as (srv, port):  # a fills a pass: b does not join it
        url = f"http://127.0.0.1:{port}/predict"
        threads = [threading.Thread(target=ask, args=(k, v)) for k, v in (("a", ["t1", "t2"]), ("b", ["t3"]))]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=60)
    if workers == 1:  # one pass at a time: the barrier breaks, and the requests fail (the test sees concurrency)
        assert answers["a"][0] == answers["b"][0] == 500
        return
    assert answers["a"] == (200, {"predictions": [{"label": "negative", "probabilities": {"negative": 0.999,
                                                                                          "positive": 0.001}},
                                                  {"label": "negative", "probabilities": {"negative": 0.998,
                                                                                          "positive": 0.002}}]})
    assert answers["b"][0] == 200 and _positive(answers["b"][1]) == [0.003]
    assert sorted(name for name, _ in model.passes) == ["contrastfit-serve-model-1", "contrastfit-serve-model-2"]


def test_a_large_request_split_across_workers_comes_back_in_order():
    model = _Numbered(pause=0.02)
    texts = [f"t{i}" for i in range(100)]
    with _serving(model, workers=3, batch_size=4) as (srv, port):
        url = f"http://127.0.0.1:{port}/predict"
        status, answer = _call(url, {"texts": texts})
        assert status == 200 and _positive(answer) == [i / 1000 for i in range(100)]
        assert len(srv.batcher._threads) == 3
        # a failed chunk fails its request, which gets no more passes, and no other request
        model.passes.clear()
        model.fail_on = "t8"
        other = {}
        small = threading.Thread(target=lambda: other.update(answer=_call(url, {"texts": ["t7", "t9"]})))
        small.start()
        status, answer = _call(url, {"texts": texts})
        small.join(timeout=60)
        assert status == 500 and answer["error"] == "the model failed on this request: RuntimeError: the model broke"
        assert other["answer"][0] == 200 and _positive(other["answer"][1]) == [0.007, 0.009]
        ran = [t for _, chunk in model.passes for t in chunk]
        assert "t8" in ran and "t99" not in ran  # at most the chunks in progress ran after the failure
        model.fail_on = None
        assert _call(url, {"texts": texts[:9]})[0] == 200  # the server goes on
    workers = {name for name, _ in model.passes}
    assert len(workers) >= 2  # the large request's chunks ran on several workers ...
    assert all(len(chunk) <= 4 for _, chunk in model.passes)


def test_the_large_request_alone_runs_on_all_workers_in_order():
    model = _Numbered(pause=0.02)
    texts = [f"t{i}" for i in range(60)]
    with _serving(model, workers=2, batch_size=4) as (_, port):
        status, answer = _call(f"http://127.0.0.1:{port}/predict", {"texts": texts})
    assert status == 200 and _positive(answer) == [i / 1000 for i in range(60)]
    assert sorted(int(t[1:]) for _, chunk in model.passes for t in chunk) == list(range(60))  # each text once
    assert {name for name, _ in model.passes} == {"contrastfit-serve-model-1", "contrastfit-serve-model-2"}


def test_closing_the_server_ends_every_worker():
    gate, started = threading.Event(), threading.Semaphore(0)

    def meet():
        started.release()
        gate.wait(timeout=30)

    model = _Numbered(meet=meet)
    srv = make_server(model, port=0, workers=3, batch_size=1)  # one request per pass
    srv.quiet = True
    serving = threading.Thread(target=srv.serve_forever, daemon=True)
    serving.start()
    url = f"http://127.0.0.1:{srv.server_address[1]}/predict"
    workers = list(srv.batcher._threads)
    answers, clients = {}, []
    closing = threading.Thread(target=srv.server_close)

    def ask(name):
        answers[name] = _call(url, {"texts": [f"t{name}"]})

    try:
        assert [t.name for t in workers] == [f"contrastfit-serve-model-{i}" for i in (1, 2, 3)]
        assert all(t.is_alive() for t in workers)
        clients += [threading.Thread(target=ask, args=(i,)) for i in range(3)]
        for t in clients:
            t.start()
        for _ in range(3):  # three passes in progress, one per worker ...
            assert started.acquire(timeout=20)
        clients.append(threading.Thread(target=ask, args=(3,)))  # ... and a fourth request waiting in the queue
        clients[-1].start()
        deadline = time.monotonic() + 20
        while not srv.batcher._pending and time.monotonic() < deadline:
            time.sleep(0.01)
        assert len(srv.batcher._pending) == 1
        srv.shutdown()
        closing.start()
        while not srv.batcher._closed and time.monotonic() < deadline:
            time.sleep(0.01)
    finally:
        gate.set()  # the passes in progress end; close() joins the workers
        if not closing.is_alive() and not srv.batcher._closed:
            srv.shutdown()
            srv.server_close()
    closing.join(timeout=60)
    for t in clients:
        t.join(timeout=60)
    assert not closing.is_alive() and not any(t.is_alive() for t in workers)
    assert not [t for t in threading.enumerate() if t.name.startswith("contrastfit-serve-model")]
    assert [answers[i][0] for i in range(3)] == [200, 200, 200]  # the passes in progress were answered
    assert answers[3] == (500, {"error": "the model failed on this request: RuntimeError: the server is stopping"})


def test_workers_share_the_model_weights_and_predict_like_it(saved, capsys):
    from contrastfit.cli import main
    from contrastfit.errors import ContrastfitError
    from conftest import WORDS
    import random

    run, model = saved
    served = load_for_inference(str(run))
    groups = [[" ".join(random.Random(k * 100 + i).sample(WORDS, 1 + i % 7)) for i in range(20 + k)]
              for k in range(3)]
    answers = {}
    with _serving(served, workers=2, batch_size=4, threads=1) as (srv, port):
        first, second = srv.batcher.models
        assert first is served and second is not served
        assert all(a is b for a, b in zip(first.parameters(), second.parameters()))  # one copy of the weights
        assert second.tokenizer is not first.tokenizer  # a tokenizer of its own (not safe to share)
        url = f"http://127.0.0.1:{port}/predict"
        threads = [threading.Thread(target=lambda k=k: answers.update({k: _call(url, {"texts": groups[k]})}))
                   for k in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=120)
    for k, texts in enumerate(groups):
        assert answers[k][0] == 200
        np.testing.assert_allclose([list(r["probabilities"].values()) for r in answers[k][1]["predictions"]],
                                   model.predict_proba(texts), atol=1e-5)
    with pytest.raises(ContrastfitError, match=r"^workers 0: give 1 or more$"):
        make_server(served, port=0, workers=0)
    capsys.readouterr()
    assert main(["serve", str(run), "--workers", "0", "--port", "0"]) == 2  # before the model loads
    assert capsys.readouterr().err == "contrastfit: error: --workers 0: give 1 or more\n"


def test_a_stop_signal_during_a_thread_start_stops_the_server(saved, monkeypatch):
    """SIGTERM's KeyboardInterrupt landing in Thread.start() after the request's thread runs (what hung a
    loaded CI machine): it propagates out of process_request, and the slot is released once, by the thread."""
    _, model = saved
    srv = make_server(model, port=0, max_connections=2)
    srv.quiet = True
    real_start = threading.Thread.start

    def start_then_interrupt(self):
        real_start(self)
        self.join(timeout=20)  # as under load: the request's thread is done before start() returns
        raise KeyboardInterrupt

    a, b = socket.socketpair()
    b.close()  # the handler reads nothing and ends
    monkeypatch.setattr(threading.Thread, "start", start_then_interrupt)
    try:
        with pytest.raises(KeyboardInterrupt):
            srv.process_request(a, ("127.0.0.1", 0))
        monkeypatch.setattr(threading.Thread, "start", real_start)
        deadline = time.monotonic() + 20
        while srv._slots._value < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert srv._slots._value == 2
    finally:
        monkeypatch.setattr(threading.Thread, "start", real_start)
        srv.server_close()
