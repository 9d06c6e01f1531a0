"""A small HTTP server for a trained model: ``contrastfit serve FOLDER [--port 8000]``.

Standard library only (``http.server``, one thread per request, one model shared under a lock).
``FOLDER`` is a ``contrastfit train`` output folder, a multi-task folder with ``--task``, or an ONNX
export (``contrastfit export``; served by ONNX Runtime, no PyTorch model code).

* ``GET /health``: ``{"status": "ok", "labels": [...], "task": ..., "model": FOLDER}``;
* ``POST /predict`` with ``{"texts": [...]}`` (and ``"pairs": [...]`` for a pair model): one row per
  text, ``{"label": ..., "probabilities": {label: p}}`` (``{"score": x}`` for a regression model), the
  rows ``predict`` writes. Probabilities use the model's calibrated temperature when it has one.

A malformed request gets status 400 and ``{"error": "one line"}``; nothing else is accepted.
"""

from __future__ import annotations

import json
import threading
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from .errors import ContrastfitError

__all__ = ["load_for_inference", "make_server", "prediction_rows"]

#: the largest request body read (bytes): a batch of texts, not a corpus
MAX_BODY = 8 * 1024 * 1024


def load_for_inference(folder: str, task: str | None = None):
    """The model in ``folder`` for prediction: an ONNX export (:class:`~contrastfit.export.OnnxClassifier`),
    the task ``task`` of a multi-task folder (:class:`~contrastfit.multitask.model.TaskModel`), or a
    single-task :class:`~contrastfit.modeling.ContrastiveClassifier`; one-line errors for a missing,
    unknown or superfluous ``task``."""
    from .export import EXPORT_NAME, OnnxClassifier
    from .modeling import ContrastiveClassifier
    from .multitask import MultiTaskModel, is_multitask_folder

    if (Path(folder) / EXPORT_NAME).is_file():
        if task is not None:
            raise ContrastfitError(f"--task {task}: {folder} is a single-task ONNX export; leave --task out")
        return OnnxClassifier(folder)
    if not is_multitask_folder(folder):
        if task is not None:
            raise ContrastfitError(f"--task {task}: {folder} holds a single-task model (it has no tasks); "
                                   "leave --task out")
        return ContrastiveClassifier.from_pretrained(folder)
    model = MultiTaskModel.from_pretrained(folder)
    tasks = ", ".join(model.task_names)
    if task is None:
        raise ContrastfitError(f"{folder} holds a multi-task model: give --task NAME (tasks: {tasks})")
    if task not in model.task_names:
        raise ContrastfitError(f"--task {task!r} is not a task of {folder} (tasks: {tasks})")
    return model.for_task(task)


def takes_pairs(model) -> bool:
    """Whether ``model`` (any :func:`load_for_inference` gives) classifies text pairs."""
    return bool(model.info.get("data", {}).get("text_pair"))


def prediction_rows(model, texts: list[str], pairs: list[str] | None, batch_size: int = 64) -> list[dict[str, Any]]:
    """One row per text, as ``predict`` writes them: ``label`` and ``probabilities`` (``score`` for
    a regression model)."""
    scores = model.predict_proba(texts, pairs, batch_size=batch_size)
    if model.task == "regression":
        return [{"score": float(s[0])} for s in scores]
    names = model.label_names
    return [{"label": names[int(s.argmax())], "probabilities": {n: round(float(p), 6) for n, p in zip(names, s)}}
            for s in scores]


def _parse(body: bytes, pair_model: bool) -> tuple[list[str], list[str] | None]:
    try:
        request = json.loads(body.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"the body is not UTF-8 JSON ({exc})") from None
    if not isinstance(request, dict) or set(request) - {"texts", "pairs"}:
        raise ValueError('send {"texts": [...]} (and "pairs": [...] for a pair model)')
    texts, pairs = request.get("texts"), request.get("pairs")
    for name, value in (("texts", texts), ("pairs", pairs)):
        if value is not None and (not isinstance(value, list) or not all(isinstance(t, str) for t in value)):
            raise ValueError(f'"{name}" must be a list of strings')
    if not texts:
        raise ValueError('"texts" must be a non-empty list of strings')
    from .inputs import model_inputs  # the rule predict follows too (a DataError is a ValueError)

    return model_inputs(texts, pairs, pair_model, "this model", '"pairs"')


def make_server(model, host: str = "127.0.0.1", port: int = 8000, name: str = "") -> ThreadingHTTPServer:
    """An HTTP server for ``model`` (not started: call ``serve_forever``); ``port=0`` picks a free port."""
    lock = threading.Lock()
    pair_model = takes_pairs(model)
    health = {"status": "ok", "model": name, "task": model.task, "labels": model.label_names, "pairs": pair_model}

    class Handler(BaseHTTPRequestHandler):
        server_version = "contrastfit"

        def _reply(self, status: int, payload: Any) -> None:
            data = json.dumps(payload, ensure_ascii=False).encode("utf-8")
            self.send_response(status)
            self.send_header("Content-Type", "application/json; charset=utf-8")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:  # noqa: N802 (http.server's name)
            if self.path.rstrip("/") == "/health":
                self._reply(HTTPStatus.OK, health)
            else:
                self._reply(HTTPStatus.NOT_FOUND, {"error": "GET /health or POST /predict"})

        def do_POST(self) -> None:  # noqa: N802
            if self.path.rstrip("/") != "/predict":
                self._reply(HTTPStatus.NOT_FOUND, {"error": "POST /predict"})
                return
            try:
                length = int(self.headers.get("Content-Length") or 0)
            except ValueError:
                length = -1
            if not 0 < length <= MAX_BODY:
                self._reply(HTTPStatus.BAD_REQUEST, {"error": f"send a JSON body of 1 to {MAX_BODY} bytes with its "
                                                              "Content-Length"})
                return
            try:
                texts, pairs = _parse(self.rfile.read(length), pair_model)
            except ValueError as exc:
                self._reply(HTTPStatus.BAD_REQUEST, {"error": str(exc)})
                return
            with lock:
                rows = prediction_rows(model, texts, pairs)
            self._reply(HTTPStatus.OK, {"predictions": rows})

        def log_message(self, format: str, *args: Any) -> None:  # one line per request, on stderr
            if not getattr(self.server, "quiet", False):
                super().log_message(format, *args)

    return ThreadingHTTPServer((host, port), Handler)
