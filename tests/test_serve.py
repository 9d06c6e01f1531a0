"""`contrastfit serve`: the HTTP server's answers, and predict / evaluate on an ONNX export."""

from __future__ import annotations

import json
import threading
import urllib.error
import urllib.request

import pytest

from contrastfit import ContrastiveClassifier
from contrastfit.serve import load_for_inference, make_server


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
    proc = subprocess.Popen([sys.executable, "-m", "contrastfit", "serve", str(run), "--port", "0"],
                            stderr=subprocess.PIPE, text=True, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    try:
        line = ""
        while "serving" not in line:
            line = proc.stderr.readline()
            assert line, "the server exited before listening"
        url = re.search(r"http://[\d.]+:\d+", line).group(0)
        status, answer = _call(url + "/predict", {"texts": ["good fun film"]})
        assert status == 200 and answer["predictions"][0]["label"] == model.predict(["good fun film"])[0]
    finally:
        proc.send_signal(signal.SIGTERM)  # what a service manager sends (SIGINT may be ignored in a background job)
        assert proc.wait(timeout=30) == 0
