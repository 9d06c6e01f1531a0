"""`contrastfit serve` (FastAPI on uvicorn): the answers of both payloads, the schema, keep-alive, the
metrics, micro-batching, every limit and 4xx under load and abuse, and predict / evaluate / serve on an
ONNX (and int8) export. Servers run in-process on 127.0.0.1 (port 0) in a thread; FastAPI's TestClient
where no socket is needed."""

from __future__ import annotations

import contextlib
import http.client
import json
import re
import socket
import threading
import time
import urllib.error
import urllib.request

import numpy as np
import pytest

from contrastfit import ContrastiveClassifier
from contrastfit.inference import load_for_inference
from contrastfit.outputs import CLASSES, LABEL_SETS, REGRESSION
from contrastfit.record import ModelInfo
from contrastfit.serve import ServeOptions, make_app, make_server


@pytest.fixture(scope="module")
def saved(tmp_path_factory, tiny_encoder_dir):
    folder = tmp_path_factory.mktemp("serve")
    model = ContrastiveClassifier.from_encoder(str(tiny_encoder_dir), "ce", ["negative", "positive"])
    model.save_pretrained(folder / "run")
    return folder / "run", model.eval()


@contextlib.contextmanager
def _serving(model, **settings):
    """``make_server(model, port=0, **settings)`` on 127.0.0.1, running in a thread; yields (server, port)."""
    srv = make_server(model, port=0, **settings)
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    try:
        yield srv, srv.server_address[1]
    finally:
        srv.shutdown(timeout=60)
        srv.server_close()
        thread.join(timeout=10)


@pytest.fixture(scope="module")
def server(saved):
    run, _ = saved
    with _serving(load_for_inference(str(run)), name=str(run)) as (_, port):
        yield f"http://127.0.0.1:{port}"


@pytest.fixture(scope="module")
def client(saved):
    from fastapi.testclient import TestClient

    run, _ = saved
    with TestClient(make_app(load_for_inference(str(run)), name=str(run))) as c:
        yield c


def _call(url, body=None, raw: bytes | None = None):
    data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
    request = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=30) as reply:
            return reply.status, json.loads(reply.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


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


def _metric(text: str, name: str, **labels) -> float:
    """The value of one sample of the Prometheus text ``text`` (0 when absent)."""
    for line in text.splitlines():
        m = re.fullmatch(rf"{name}(?:\{{(.*)\}})? (\S+)", line)
        if m and dict(re.findall(r'(\w+)="([^"]*)"', m.group(1) or "")) == {k: str(v) for k, v in labels.items()}:
            return float(m.group(2))
    return 0.0


# -- the answers --------------------------------------------------------------------------------------


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
    assert _call(server + "/health/") == _call(server + "/health")  # (a trailing slash, as before)


def test_the_hugging_face_payload_gets_hugging_faces_answer(client, saved):
    _, model = saved
    texts = ["good fun film", "awful dull plot"]
    p = model.predict_proba(texts)
    answer = client.post("/predict", json={"inputs": texts[0]})
    assert answer.status_code == 200
    (scores,) = answer.json()  # one list per input, every label, highest score first
    order = np.argsort(-p[0])
    assert [s["label"] for s in scores] == [model.label_names[j] for j in order]
    assert [s["score"] for s in scores] == pytest.approx(p[0][order].tolist(), abs=1e-6)
    both = client.post("/predict", json={"inputs": texts, "parameters": {"top_k": 1}, "options": {"use_cache": False}})
    assert both.status_code == 200
    assert [[s["label"] for s in row] for row in both.json()] == [[label] for label in model.predict(texts)]
    # the same texts as {"texts": [...]}: today's rows
    assert [r["label"] for r in client.post("/predict", json={"texts": texts}).json()["predictions"]] == model.predict(texts)
    for body, message in [
        ({"inputs": []}, '"inputs" must be a text or a non-empty list of texts'),
        ({"inputs": 3}, '"inputs" must be a text or a non-empty list of texts'),
        ({"inputs": ["a", {"text": "b", "text_pair": "c"}]}, '"inputs" must be a text'),
        ({"inputs": {"text": "a", "text_pair": "b"}}, 'this model classifies single texts: leave "text_pair" out'),
        ({"inputs": "a", "extra": 1}, 'send {"inputs": "text" or [...]}'),
        ({"inputs": "a", "parameters": {"top_k": 0}}, '"parameters"."top_k": Input should be greater than'),
        ({"inputs": "a", "parameters": {"function_to_apply": "sigmoid"}},
         "\"parameters\".\"function_to_apply\" 'sigmoid': this model answers its own probabilities (softmax)"),
        ({"inputs": ["a \ud800"]}, '"inputs"[0] holds a lone surrogate'),
    ]:
        reply = client.post("/predict", content=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
        assert reply.status_code == 400 and reply.json()["error"].startswith(message), (body, reply.json())


def test_a_hugging_face_client_reads_the_answer(server, saved, monkeypatch):
    """huggingface_hub's own InferenceClient, pointed at the server's URL (no Hub involved)."""
    hub = pytest.importorskip("huggingface_hub")
    monkeypatch.setattr(hub.constants, "HF_HUB_OFFLINE", False)  # (the tests' offline mode: this is 127.0.0.1)
    _, model = saved
    client = hub.InferenceClient(model=server + "/predict")
    try:
        out = client.text_classification("good fun film")
    except Exception as exc:  # noqa: BLE001 (a client version that will not post to a bare URL offline)
        pytest.skip(f"InferenceClient could not post to the server: {type(exc).__name__}: {exc}")
    p = model.predict_proba(["good fun film"])[0]
    assert {o.label: o.score for o in out} == pytest.approx(dict(zip(model.label_names, p.tolist())), abs=1e-6)
    assert out[0].label == model.predict(["good fun film"])[0]


def test_a_pair_model_takes_pairs_in_both_payloads(tiny_encoder_dir):
    from fastapi.testclient import TestClient

    model = ContrastiveClassifier.from_encoder(str(tiny_encoder_dir), "ce", ["no", "yes"]).eval()
    model.info.data = {"text_pair": True}
    texts, pairs = ["good film", "awful plot"], ["great movie", "superb story"]
    want = model.predict_proba(texts, pairs)
    with TestClient(make_app(model)) as c:
        a = c.post("/predict", json={"texts": texts, "pairs": pairs}).json()["predictions"]
        b = c.post("/predict", json={"inputs": [{"text": t, "text_pair": p} for t, p in zip(texts, pairs)]}).json()
        tabs = c.post("/predict", json={"texts": [f"{t}\t{p}" for t, p in zip(texts, pairs)]}).json()["predictions"]
        assert c.get("/health").json()["pairs"] is True
        missing = c.post("/predict", json={"inputs": "good film"})
    np.testing.assert_allclose([list(r["probabilities"].values()) for r in a], want, atol=1e-5)
    np.testing.assert_allclose([{s["label"]: s["score"] for s in row}["yes"] for row in b], want[:, 1], atol=1e-5)
    assert tabs == a
    assert missing.status_code == 400 and "classifies text pairs" in missing.json()["error"]


class _Fixed:
    """A model stand-in that answers the same scores for every text: a multi-label or a regression model."""

    def __init__(self, task, labels, scores, **extra):
        self.task, self.label_names, self.info, self.scores = task, labels, ModelInfo(), np.array(scores)
        self.outputs = REGRESSION if task == "regression" else LABEL_SETS
        self.__dict__.update(extra)

    def predict_proba(self, texts, pairs=None, batch_size=64):
        return np.repeat(self.scores[None], len(texts), axis=0)


def test_multi_label_and_regression_models_answer_both_payloads():
    from fastapi.testclient import TestClient

    multi = _Fixed("classification", ["a", "b", "c"], [0.2, 0.9, 0.6], multi_label=True, thresholds=[0.5, 0.5, 0.7])
    with TestClient(make_app(multi)) as c:
        assert c.post("/predict", json={"texts": ["x"]}).json() == {
            "predictions": [{"labels": ["b"], "probabilities": {"a": 0.2, "b": 0.9, "c": 0.6}}]}
        assert c.post("/predict", json={"inputs": "x", "parameters": {"function_to_apply": "sigmoid"}}).json() == [
            [{"label": "b", "score": 0.9}, {"label": "c", "score": 0.6}, {"label": "a", "score": 0.2}]]
    regression = _Fixed("regression", None, [1.5])
    with TestClient(make_app(regression)) as c:
        assert c.post("/predict", json={"texts": ["x", "y"]}).json() == {"predictions": [{"score": 1.5}] * 2}
        assert c.post("/predict", json={"inputs": ["x"]}).json() == [[{"label": "LABEL_0", "score": 1.5}]]
        assert c.get("/health").json()["labels"] is None


def test_the_openapi_schema_describes_both_payloads_and_every_route(client):
    schema = client.get("/openapi.json").json()
    assert {"/predict", "/health", "/metrics"} <= set(schema["paths"])
    post = schema["paths"]["/predict"]["post"]
    refs = [s["$ref"] for s in post["requestBody"]["content"]["application/json"]["schema"]["oneOf"]]
    assert refs == ["#/components/schemas/PredictRequest", "#/components/schemas/InferenceRequest"]
    components = schema["components"]["schemas"]
    for name in ("PredictRequest", "InferenceRequest", "TextPair", "InferenceParameters", "PredictResponse",
                 "InferenceResponse", "ErrorResponse", "Health"):
        assert name in components, name
    assert components["PredictRequest"]["properties"]["texts"]["minItems"] == 1
    assert components["PredictRequest"]["additionalProperties"] is False
    assert {"400", "408", "411", "413", "500"} <= set(post["responses"])
    for ref in re.findall(r'"\$ref": "#/components/schemas/(\w+)"', json.dumps(schema)):
        assert ref in components, ref  # every reference resolves
    docs = client.get("/docs")
    assert docs.status_code == 200 and "swagger" in docs.text.lower() and "/openapi.json" in docs.text


def test_keep_alive_answers_two_requests_on_one_connection(server):
    port = int(server.rsplit(":", 1)[1])
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        conn.request("POST", "/predict", json.dumps({"texts": ["good film"]}), {"Content-Type": "application/json"})
        first = conn.getresponse()
        assert first.status == 200 and first.version == 11 and first.getheader("connection") != "close"
        first.read()
        sock = conn.sock
        assert sock is not None  # still open ...
        conn.request("POST", "/predict", json.dumps({"inputs": ["good film", "dull"]}), {"Content-Type": "application/json"})
        second = conn.getresponse()
        assert second.status == 200 and len(json.loads(second.read())) == 2
        conn.request("GET", "/health")
        third = conn.getresponse()
        assert third.status == 200 and json.loads(third.read())["status"] == "ok"
        assert conn.sock is sock  # ... and the same socket carried all three
    finally:
        conn.close()


def test_metrics_count_requests_by_path_and_status(saved):
    _, model = saved
    with _serving(model) as (_, port):
        url = f"http://127.0.0.1:{port}"
        for _ in range(3):
            assert _call(url + "/predict", {"texts": ["good film", "dull"]})[0] == 200
        assert _call(url + "/predict", {"texts": []})[0] == 400
        assert _call(url + "/nowhere")[0] == 404
        assert _raw(port, b"HELLO\r\n\r\n")[0] == 400
        with urllib.request.urlopen(url + "/metrics", timeout=30) as reply:
            assert reply.headers["Content-Type"].startswith("text/plain")
            text = reply.read().decode()
    assert _metric(text, "contrastfit_http_requests_total", path="/predict", status=200) == 3
    assert _metric(text, "contrastfit_http_requests_total", path="/predict", status=400) == 1
    assert _metric(text, "contrastfit_http_requests_total", path="other", status=404) == 1  # (not the path itself)
    assert _metric(text, "contrastfit_http_requests_total", path="other", status=400) == 1  # h11 could not read it
    assert _metric(text, "contrastfit_http_request_duration_seconds_count", path="/predict") == 4
    assert _metric(text, "contrastfit_batch_size_count") == 3 and _metric(text, "contrastfit_batch_size_sum") == 6
    assert _metric(text, "contrastfit_forward_pass_duration_seconds_count") == 3


def test_bad_requests_get_400_and_one_line(client):
    for body, message in [
        ({"text": ["a"]}, 'send {"texts": [...]}'),
        ({"texts": []}, '"texts" must be a non-empty list of strings'),
        ({}, '"texts" must be a non-empty list of strings'),
        ({"texts": "a film"}, '"texts" must be a list of strings'),
        ({"texts": ["a", 3]}, '"texts" must be a list of strings'),
        ({"texts": ["a"], "pairs": "b"}, '"pairs" must be a list of strings'),
        ({"texts": ["a"], "pairs": ["b"]}, 'this model classifies single texts: leave "pairs" out'),
        ([1, 2], 'send {"texts": [...]}'),
    ]:
        reply = client.post("/predict", json=body)
        answer = reply.json()
        assert reply.status_code == 400 and answer["error"].startswith(message) and "\n" not in answer["error"], body


def test_bad_bodies_paths_and_methods(server, client):
    assert _call(server + "/predict", raw=b"{not json")[0] == 400
    assert _call(server + "/predict", raw="\xff".encode("latin-1"))[0] == 400
    assert _call(server + "/other", {"texts": ["a"]}) == (404, {"error": "POST /predict"})
    assert _call(server + "/")[0] == 404
    for method in ("PUT", "DELETE", "PATCH", "GET"):
        reply = client.request(method, "/predict")
        assert reply.status_code == 405 and reply.json()["error"].startswith(f"{method} /predict: not allowed")
    assert client.post("/health").status_code == 405


# -- an export: predict, evaluate and serve ------------------------------------------------------------


def test_predict_evaluate_and_serve_read_an_onnx_and_an_int8_export(saved, tmp_path, capsys):
    import csv
    import shutil

    from fastapi.testclient import TestClient

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
    # an int8 export is served the same way (its own probabilities, ONNX Runtime's int8 graph): the folder of
    # `export --quantize int8`, quantised here by its code but without its check (tests/test_export.py has it)
    from contrastfit.export import _quantize

    shutil.copytree(tmp_path / "onnx", tmp_path / "int8")
    _quantize(tmp_path / "int8", "int8", True, True, None)
    int8 = load_for_inference(str(tmp_path / "int8"))
    with TestClient(make_app(int8, threads=1, name="int8")) as c:
        rows = c.post("/predict", json={"texts": texts}).json()["predictions"]
        hf = c.post("/predict", json={"inputs": texts[0]}).json()
    np.testing.assert_allclose([list(r["probabilities"].values()) for r in rows], int8.predict_proba(texts), atol=1e-5)
    assert hf[0][0]["label"] == int8.predict(texts[:1])[0]
    capsys.readouterr()
    assert main(["explain", str(tmp_path / "onnx"), "good film"]) == 2
    assert "is an ONNX export; explain needs the PyTorch model" in capsys.readouterr().err


# -- the command --------------------------------------------------------------------------------------


def test_the_serve_command_listens_and_stops(saved):
    import os
    import signal
    import subprocess
    import sys

    run, model = saved
    proc = subprocess.Popen([sys.executable, "-m", "contrastfit", "serve", str(run), "--port", "0", "--threads", "1",
                             "--max-texts", "2", "--timeout", "5", "--batch-size", "8", "--workers", "2",
                             "--max-wait", "0.01", "--keep-alive", "2"],
                            stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONFAULTHANDLER": "1"})
    try:
        line = ""
        while "serving" not in line:
            line = proc.stderr.readline()
            assert line, "the server exited before listening"
        url = re.search(r"http://[\d.]+:\d+", line).group(0)
        threading.Thread(target=lambda: [None for _ in proc.stderr], daemon=True).start()  # (uvicorn's log lines)
        status, answer = _call(url + "/predict", {"texts": ["good fun film"]})
        assert status == 200 and answer["predictions"][0]["label"] == model.predict(["good fun film"])[0]
        status, answer = _call(url + "/predict", {"texts": ["good", "fun", "film"]})
        assert status == 413 and answer["error"].startswith("3 texts in one request; this server takes at most 2")
        assert _call(url + "/openapi.json")[0] == 200
    finally:
        proc.send_signal(signal.SIGTERM)  # what a service manager sends (SIGINT may be ignored in a background job)
        try:
            code = proc.wait(timeout=120)  # about 1 s on an idle machine
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGABRT)  # the faulthandler prints every thread's stack: where it hangs
            proc.wait(timeout=30)
            pytest.fail("the server did not stop within 120 s of SIGTERM")
        assert code == 0


def test_serve_options_are_declared_once(saved, capsys, monkeypatch):
    import argparse
    from dataclasses import fields

    from contrastfit.cli import build_parser, main
    from contrastfit.errors import ContrastfitError
    from contrastfit.serve import require_serving

    parser = build_parser()
    serve = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices["serve"]
    options = {a.dest: a for a in serve._actions if a.option_strings and a.dest not in ("help", "task")}
    assert set(options) == {f.name for f in fields(ServeOptions)}
    for f in fields(ServeOptions):
        assert options[f.name].default == f.default and f.metadata["help"] in options[f.name].help
    with pytest.raises(ContrastfitError, match=r"^port 70000: give a port from 0 to 65535"):
        ServeOptions(port=70000)
    with pytest.raises(ContrastfitError, match=r"^max_wait 2: give a number of seconds from 0 to 1$"):
        make_app(saved[1], ServeOptions(), max_wait=2)
    with pytest.raises(ContrastfitError, match=r"^keep_alive 0: give a number of seconds above 0 and at most 86400$"):
        ServeOptions(keep_alive=0)
    with pytest.raises(TypeError, match="'colour' is no serve setting"):
        make_app(saved[1], colour=1)
    assert main(["serve", str(saved[0]), "--max-wait", "-1", "--port", "0"]) == 2
    assert capsys.readouterr().err == "contrastfit: error: --max-wait -1.0: give a number of seconds from 0 to 1\n"
    # without the serve extra: one line naming what to install, before the model loads
    monkeypatch.setitem(__import__("sys").modules, "uvicorn", None)
    with pytest.raises(ContrastfitError, match=r"^serving needs uvicorn, which is not installed: pip install "
                                               r"'contrastfit\[serve\]'$"):
        require_serving()
    assert main(["serve", str(saved[0]), "--port", "0"]) == 2
    assert "pip install 'contrastfit[serve]'" in capsys.readouterr().err


# -- under load and abuse -----------------------------------------------------------------------------


class _Slow:
    """The tiny model, ``per_text`` seconds slower per text, recording the size of each forward pass
    and PyTorch's thread count during it."""

    def __init__(self, model, per_text: float = 0.0, fail_on: str | None = None):
        self.model, self.per_text, self.fail_on = model, per_text, fail_on
        self.info, self.task, self.label_names, self.outputs = model.info, model.task, model.label_names, model.outputs
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


def test_too_many_texts_too_large_bodies_and_lengths(saved):
    _, model = saved
    with _serving(model, max_texts=4, max_body=2000) as (_, port):
        url = f"http://127.0.0.1:{port}/predict"
        status, answer = _call(url, {"texts": ["good film"] * 5})
        assert status == 413 and answer["error"].startswith("5 texts in one request; this server takes at most 4")
        status, answer = _call(url, {"inputs": ["good film"] * 5})
        assert status == 413 and answer["error"].startswith("5 texts in one request; this server takes at most 4")
        assert _call(url, {"texts": ["good film"] * 4})[0] == 200
        # a 1 MB body: read and dropped, so that urllib, which sends all of it first, gets the answer
        status, answer = _call(url, {"texts": ["good film " * 100_000]})
        assert status == 413 and answer["error"].startswith("a body of 1000015 bytes; this server reads at most 2000")
        # a client waiting for "100 Continue" gets the 413 at once, its body unsent
        status, answer = _raw(port, _post(b"", length=10_000, extra="Expect: 100-continue\r\n"), half_close=False)
        assert status == 413
        assert _raw(port, _post(b'{"texts": ["a"]}', length=-5))[0] == 400  # (h11: a bad Content-Length)
        assert _raw(port, _post(b'{"texts": ["a"]}', extra="Content-Length: 99\r\n"))[0] == 400  # two of them
        status, answer = _raw(port, _post(b"", extra="Transfer-Encoding: chunked\r\n").replace(b"Content-Length: 0\r\n",
                                                                                                b""))
        assert status == 411 and "Content-Length" in answer["error"]
        status, answer = _raw(port, b"POST /predict HTTP/1.1\r\nHost: x\r\n\r\n")  # no length at all
        assert status == 411 and answer["error"] == "send a JSON body of 1 to 2000 bytes with its Content-Length"
        assert _raw(port, _post(b""))[0] == 400  # an empty one
        status, answer = _raw(port, b"GET /" + b"a" * 70_000 + b" HTTP/1.1\r\nHost: x\r\n\r\n")
        assert status == 414 and answer == {"error": "the request line is longer than 65536 bytes"}
        status, answer = _raw(port, b"GET /health HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 70_000 + b"\r\n\r\n")
        assert status == 431 and answer == {"error": "the request line and headers are longer than 65536 bytes"}
        assert _call(url, {"texts": ["good film"]})[0] == 200


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
    with _serving(model, timeout=0.5, keep_alive=0.5) as (_, port):
        with socket.create_connection(("127.0.0.1", port), timeout=10) as idle:
            start = time.monotonic()
            assert idle.recv(100) == b""  # closed by the server, no answer: it sent no request
            assert 0.4 < time.monotonic() - start < 5
        with socket.create_connection(("127.0.0.1", port), timeout=10) as slow:  # half a request line, then nothing
            slow.sendall(b"POST /pre")
            start = time.monotonic()
            assert slow.recv(100) == b""
            assert 0.4 < time.monotonic() - start < 5
        # a body shorter than its Content-Length, the client still connected: 408 at the deadline
        start = time.monotonic()
        status, answer = _raw(port, _post(b'{"texts": ["a"]}', length=100), half_close=False)
        assert status == 408 and answer == {"error": "the body did not arrive within 0.5 s"}
        assert 0.4 < time.monotonic() - start < 5
        # ... and shorter with the client done sending: 400 at once
        status, answer = _raw(port, _post(b'{"texts": ["a"]}', length=100))
        assert status == 400 and answer == {"error": "the body ended after 16 of its 100 bytes (Content-Length)"}
        # a kept-alive connection idle after its answer is closed after --keep-alive
        start = time.monotonic()
        status, answer = _raw(port, _post(b'{"texts": ["good film"]}'), half_close=False)
        assert status == 200 and 0.4 < time.monotonic() - start < 5
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
        (_post(b'{"inputs": []}'), 400),
        (_post(json.dumps({"texts": ["a"] * 9}).encode()), 413),
        (_post(b"x" * 5000), 413),
        (_post(b'{"texts": ["a"]}', length=100), 400),
        (_post(b"[" * 3000), 400),
        (b"HELLO\r\n\r\n", 400),
        (b"PUT /predict HTTP/1.1\r\nHost: x\r\n\r\n", 405),
        (b"POST /predict HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 411),
        (b"GET /" + b"a" * 70_000 + b" HTTP/1.1\r\n\r\n", 414),
        (b"GET / HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 70_000 + b"\r\n\r\n", 431),
    ]
    failures, checked, malformed = [], [0], [0]
    lock = threading.Lock()

    def client(seed):
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)  # kept alive across its requests
        for i in range(8):
            k = 1 + (seed + i) % len(texts)
            payload = {"texts": texts[:k]} if i % 2 else {"inputs": texts[:k]}
            try:
                conn.request("POST", "/predict", json.dumps(payload), {"Content-Type": "application/json"})
                reply = conn.getresponse()
                status, answer = reply.status, json.loads(reply.read())
                got = ([list(r["probabilities"].values()) for r in answer["predictions"]] if i % 2 else
                       [[{s["label"]: s["score"] for s in row}[n] for n in model.label_names] for row in answer])
                ok = status == 200 and np.allclose(got, expected[:k], atol=1e-5)
            except Exception as exc:  # noqa: BLE001
                status, answer, ok = None, repr(exc), False
            with lock:
                if not ok:
                    failures.append((status, answer))
                checked[0] += 1
        conn.close()

    def abuser(seed):
        for i in range(2 * len(bad)):
            request, want = bad[(seed + i) % len(bad)]
            try:
                got = _raw(port, request)
            except OSError as exc:
                got = (None, repr(exc))
            with lock:
                if got[0] != want or not isinstance(got[1], dict) or set(got[1]) != {"error"}:
                    failures.append((want, got))
                malformed[0] += 1
        with socket.create_connection(("127.0.0.1", port), timeout=10) as idle:  # an idle client too
            with lock:
                if idle.recv(10) != b"":
                    failures.append("the idle connection got an answer")

    with _serving(model, max_texts=8, max_body=4096, timeout=1.0) as (srv, port):
        threads = [threading.Thread(target=client, args=(s,)) for s in range(4)]
        threads += [threading.Thread(target=abuser, args=(s,)) for s in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=120)
        assert not any(t.is_alive() for t in threads)
    assert failures == []
    assert checked[0] == 32 and malformed[0] == 3 * 2 * len(bad)


def test_connections_past_the_limit_get_503(saved):
    _, model = saved
    with _serving(model, max_connections=2, timeout=5) as (srv, port):
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
        text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30).read().decode()
    assert _metric(text, "contrastfit_http_requests_total", path="other", status=503) >= 1


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
    model.info.data = {"text_pair": True}
    texts = ["good film", "awful plot", "the story", "a fun actor", "dull"]
    pairs = ["great movie", "superb story", "the plot", "bad actor", "boring and weak"]
    slow = _Slow(model)
    with _serving(slow, batch_size=2) as (_, port):
        status, answer = _call(f"http://127.0.0.1:{port}/predict", {"texts": texts, "pairs": pairs})
    assert status == 200 and slow.calls == [2, 2, 1]
    np.testing.assert_allclose([list(r["probabilities"].values()) for r in answer["predictions"]],
                               model.predict_proba(texts, pairs), atol=1e-5)


# -- micro-batching and several model workers ----------------------------------------------------------


class _Numbered:
    """A model stand-in for texts ``"t<i>"``: the probability of "positive" is i / 1000, so that each
    row of an answer tells which text it is for. It records (thread, texts) of each forward pass, runs
    ``pause`` seconds per pass, calls ``meet`` (if any) inside it, and fails on the text ``fail_on``.
    The server's workers share this one object (``__deepcopy__``), and so its records."""

    def __init__(self, pause: float = 0.0, meet=None, fail_on: str | None = None):
        self.pause, self.meet, self.fail_on = pause, meet, fail_on
        self.info, self.task, self.label_names = ModelInfo(), "classification", ["negative", "positive"]
        self.outputs = CLASSES
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


def test_concurrent_requests_are_batched_and_each_answered(saved):
    """Twelve clients at once, one or two texts each: the model runs them in shared passes (the batch
    size histogram has passes of more than one text), and each client gets its own rows."""
    model = _Numbered(pause=0.05)
    answers = {}
    barrier = threading.Barrier(12, timeout=20)

    def ask(i):
        texts = [f"t{i}"] + ([f"t{100 + i}"] if i % 2 else [])
        barrier.wait()
        answers[i] = (texts, _call(url, {"texts": texts}))

    with _serving(model, batch_size=8, max_wait=0.02) as (_, port):
        url = f"http://127.0.0.1:{port}/predict"
        threads = [threading.Thread(target=ask, args=(i,)) for i in range(12)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=60)
        text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30).read().decode()
    for texts, (status, answer) in answers.values():
        assert status == 200 and _positive(answer) == [int(t[1:]) / 1000 for t in texts]
    sizes = [len(chunk) for _, chunk in model.passes]
    assert sum(sizes) == 18 and max(sizes) > 1 and max(sizes) <= 8 and len(sizes) < 12
    passes = _metric(text, "contrastfit_batch_size_count")
    assert passes == len(sizes) and _metric(text, "contrastfit_batch_size_sum") == 18
    assert _metric(text, "contrastfit_batch_size_bucket", le="1.0") < passes  # a pass of more than one text


def test_a_pass_with_room_waits_for_requests_that_fit():
    """With --max-wait, requests arriving a moment apart at an idle server share one pass; with 0 they
    do not wait for each other."""
    from contrastfit.serve import _Batcher

    for wait, want in ((0.5, [[f"t{i}" for i in range(4)]]), (0.0, None)):
        model = _Numbered()
        batcher = _Batcher(model, batch_size=4, max_wait=wait)
        try:
            futures = []
            for i in range(4):
                futures.append(batcher.submit([f"t{i}"]))
                time.sleep(0.05)
            assert [f.result(timeout=20)[0][1] for f in futures] == [i / 1000 for i in range(4)]
        finally:
            batcher.close()
        if want is not None:
            assert [chunk for _, chunk in model.passes] == want
        else:
            assert len(model.passes) == 4


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


def test_stopping_the_server_answers_the_requests_in_progress_and_ends_every_worker():
    gate, started = threading.Event(), threading.Semaphore(0)

    def meet():
        started.release()
        gate.wait(timeout=30)

    model = _Numbered(meet=meet)
    srv = make_server(model, port=0, workers=3, batch_size=1)  # one request per pass
    serving = threading.Thread(target=srv.serve_forever, daemon=True)
    serving.start()
    url = f"http://127.0.0.1:{srv.server_address[1]}/predict"
    workers = list(srv.batcher._threads)
    answers, clients = {}, []
    stopping = threading.Thread(target=srv.shutdown)

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
        stopping.start()  # (uvicorn: no new connections; the requests in progress are answered first)
        time.sleep(0.3)
        assert stopping.is_alive()
    finally:
        gate.set()
        for _ in range(2):
            started.release()
    stopping.join(timeout=60)
    srv.server_close()
    for t in clients:
        t.join(timeout=60)
    serving.join(timeout=10)
    assert not stopping.is_alive() and not serving.is_alive() and not any(t.is_alive() for t in workers)
    assert [answers[i][0] for i in range(4)] == [200, 200, 200, 200]
    with pytest.raises(OSError):  # no longer listening
        socket.create_connection(srv.server_address, timeout=5).close()


def test_closing_the_model_threads_fails_what_is_still_queued():
    from contrastfit.serve import _Batcher

    gate, started = threading.Event(), threading.Semaphore(0)

    def meet():
        started.release()
        gate.wait(timeout=30)

    batcher = _Batcher(_Numbered(meet=meet), batch_size=1, workers=2)
    running = [batcher.submit([f"t{i}"]) for i in range(2)]
    for _ in range(2):
        assert started.acquire(timeout=20)
    queued = batcher.submit(["t9"])
    closing = threading.Thread(target=batcher.close)
    closing.start()
    deadline = time.monotonic() + 20
    while not batcher._closed and time.monotonic() < deadline:
        time.sleep(0.01)
    gate.set()
    closing.join(timeout=60)
    assert [f.result(timeout=20)[0][1] for f in running] == [0.0, 0.001]  # the passes in progress end
    with pytest.raises(RuntimeError, match="the server is stopping"):
        queued.result(timeout=20)
    with pytest.raises(RuntimeError, match="the server is stopping"):
        batcher.submit(["t1"]).result(timeout=5)
    assert not any(t.is_alive() for t in batcher._threads)


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


def test_an_app_is_mounted_and_its_lifespan_stops_its_workers(saved):
    """make_app's application in an application of one's own, under FastAPI's TestClient."""
    from fastapi import FastAPI
    from fastapi.testclient import TestClient

    _, model = saved
    app = make_app(model, ServeOptions(batch_size=4), name="tiny")
    workers = list(app.state.batcher._threads)
    with TestClient(app) as c:
        assert c.get("/health").json()["model"] == "tiny"
        assert c.post("/predict", json={"texts": ["good film"]}).json()["predictions"][0]["label"] == \
            model.predict(["good film"])[0]
    assert not any(t.is_alive() for t in workers)  # the lifespan's end stopped them
    outer = FastAPI()
    inner = make_app(model)
    outer.mount("/models/tiny", inner)
    with TestClient(outer) as c:
        assert c.post("/models/tiny/predict", json={"inputs": "good film"}).status_code == 200
    inner.state.batcher.close()
