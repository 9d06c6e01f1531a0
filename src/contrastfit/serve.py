"""A small HTTP server for a trained model: ``contrastfit serve FOLDER [--port 8000]``.

Standard library only (``http.server``). ``FOLDER`` is a ``contrastfit train`` output folder, a
multi-task folder with ``--task``, or an ONNX export (``contrastfit export``; served by ONNX Runtime,
no PyTorch model code).

* ``GET /health``: ``{"status": "ok", "labels": [...], "task": ..., "model": FOLDER}``;
* ``POST /predict`` with ``{"texts": [...]}`` (and ``"pairs": [...]`` for a pair model): one row per
  text, ``{"label": ..., "probabilities": {label: p}}`` (``{"score": x}`` for a regression model), the
  rows ``predict`` writes. Probabilities use the model's calibrated temperature when it has one.

One thread per connection reads and checks the request; one model thread (:class:`_Batcher`) runs
the model over a queue of the requests' texts, at most ``batch_size`` texts per forward pass, taking
the requests in turn: a large request is cut into chunks, and a small one arriving meanwhile runs
after the chunk in progress, in a pass of its own (or with other small ones), not after all of it.

Limits (all :func:`make_server` arguments and ``serve`` options): ``max_texts`` texts per request
(more: 413), ``max_body`` bytes per body (more: 413), ``timeout`` seconds for a connection to send
its request (an idle connection is closed; a body still incomplete after it gets 408),
``max_connections`` connections at a time (more: 503 at once). Every request the server does not
accept gets a 4xx status and ``{"error": "one line"}`` (a failure of the model: 500 and one line).
"""

from __future__ import annotations

import collections
import json
import socket
import sys
import threading
import time
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from .errors import ContrastfitError, DataError

__all__ = ["load_for_inference", "make_server", "prediction_rows"]

#: the largest request body read by default (bytes): a batch of texts, not a corpus
MAX_BODY = 8 * 1024 * 1024
#: the most texts one request may hold by default
MAX_TEXTS = 256
#: seconds a connection may take to send its request by default
TIMEOUT = 30.0
#: texts per forward pass of the model thread by default
BATCH_SIZE = 8
#: connections handled at a time by default (each holds a thread)
MAX_CONNECTIONS = 64
#: an oversized body is read and thrown away up to this many bytes, so that the client, still
#: sending, receives the 413 instead of a reset connection; past it the connection is closed
DRAIN_LIMIT = 64 * 1024 * 1024


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


def _rows(model, scores) -> list[dict[str, Any]]:
    if model.task == "regression":
        return [{"score": float(s[0])} for s in scores]
    names = model.label_names
    return [{"label": names[int(s.argmax())], "probabilities": {n: round(float(p), 6) for n, p in zip(names, s)}}
            for s in scores]


def prediction_rows(model, texts: list[str], pairs: list[str] | None, batch_size: int = 64) -> list[dict[str, Any]]:
    """One row per text, as ``predict`` writes them: ``label`` and ``probabilities`` (``score`` for
    a regression model)."""
    return _rows(model, model.predict_proba(texts, pairs, batch_size=batch_size))


class RequestError(ValueError):
    """A request the server does not accept: its HTTP status and a one-line message."""

    def __init__(self, message: str, status: int = HTTPStatus.BAD_REQUEST, drain: int = 0):
        super().__init__(message)
        self.status = int(status)
        self.drain = drain  # body bytes to read and drop after answering


def _one_line(text: str, limit: int = 300) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[:limit - 3] + "..."


def _parse(body: bytes, pair_model: bool, max_texts: int | None = None) -> tuple[list[str], list[str] | None]:
    try:
        request = json.loads(body.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:  # JSONDecodeError, and an integer too long to convert
        raise RequestError(_one_line(f"the body is not UTF-8 JSON ({exc})")) from None
    except RecursionError:
        raise RequestError("the body is not UTF-8 JSON (nested too deeply)") from None
    if not isinstance(request, dict) or set(request) - {"texts", "pairs"}:
        raise RequestError('send {"texts": [...]} (and "pairs": [...] for a pair model)')
    texts, pairs = request.get("texts"), request.get("pairs")
    for name, value in (("texts", texts), ("pairs", pairs)):
        if value is not None and (not isinstance(value, list) or not all(isinstance(t, str) for t in value)):
            raise RequestError(f'"{name}" must be a list of strings')
    if not texts:
        raise RequestError('"texts" must be a non-empty list of strings')
    if max_texts is not None and len(texts) > max_texts:
        raise RequestError(f"{len(texts)} texts in one request; this server takes at most {max_texts}: "
                           "send them in several requests", HTTPStatus.REQUEST_ENTITY_TOO_LARGE)
    for name, value in (("texts", texts), ("pairs", pairs or [])):
        for i, text in enumerate(value):
            try:
                text.encode("utf-8")
            except UnicodeEncodeError as exc:  # "\ud800" is valid JSON but no Unicode text
                raise RequestError(f'"{name}"[{i}] holds a lone surrogate ({ascii(text[exc.start])}): '
                                   "send Unicode text") from None
    from .inputs import model_inputs  # the rule predict follows too

    try:
        return model_inputs(texts, pairs, pair_model, "this model", '"pairs"')
    except DataError as exc:
        raise RequestError(str(exc)) from None


class _Job:
    """One request's texts in the model thread's queue; ``next`` is the first text not yet taken."""

    def __init__(self, texts: list[str], pairs: list[str] | None):
        self.texts, self.pairs = texts, pairs
        self.next = 0
        self.parts: dict[int, Any] = {}  # start -> scores of texts[start:start + len(scores)]
        self.left = len(texts)
        self.error: BaseException | None = None
        self.done = threading.Event()


class _Batcher:
    """The one thread that runs the model: one forward pass at a time over up to ``batch_size``
    texts, the next ``batch_size`` of the request first in the queue, and whole requests behind it
    that fit in the room left (in queue order); a request with texts left goes to the back of the
    queue once the pass is over. Each request gets its scores when all of its texts have run."""

    def __init__(self, model, batch_size: int = BATCH_SIZE, threads: int | None = None):
        if batch_size < 1:
            raise ContrastfitError(f"batch size {batch_size}: give 1 or more")
        self.model, self.batch_size, self.threads = model, batch_size, threads
        self._pending: collections.deque[_Job] = collections.deque()
        self._cond = threading.Condition()
        self._closed = False
        self._again: _Job | None = None
        self._thread = threading.Thread(target=self._run, name="contrastfit-serve-model", daemon=True)
        self._thread.start()

    def predict(self, texts: list[str], pairs: list[str] | None):
        """The scores of ``texts`` (and ``pairs``), once the model thread has run all of them."""
        import numpy as np

        job = _Job(texts, pairs)
        with self._cond:
            if self._closed:
                raise RuntimeError("the server is stopping")
            self._pending.append(job)
            self._cond.notify()
        job.done.wait()
        if job.error is not None:
            raise job.error
        return np.concatenate([job.parts[start] for start in sorted(job.parts)])

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        self._thread.join(timeout=60)

    def _take(self) -> list[tuple[_Job, int, int]] | None:
        with self._cond:
            if self._again is not None and self._again.error is None:
                self._pending.append(self._again)
            self._again = None
            while not self._pending and not self._closed:
                self._cond.wait()
            if self._closed:
                for job in self._pending:
                    job.error = RuntimeError("the server is stopping")
                    job.done.set()
                self._pending.clear()
                return None
            first = self._pending.popleft()
            n = min(self.batch_size, len(first.texts) - first.next)
            batch, room, waiting = [(first, first.next, first.next + n)], self.batch_size - n, collections.deque()
            first.next += n
            for job in self._pending:  # the others join the pass only whole: a small request is not
                left = len(job.texts) - job.next  # slowed down by a large one's texts filling the pass
                if left <= room:
                    batch.append((job, job.next, len(job.texts)))
                    job.next, room = len(job.texts), room - left
                else:
                    waiting.append(job)
            self._pending = waiting
            # a request with texts left goes back to the queue when this pass is over, behind the
            # requests that arrive during it
            self._again = first if first.next < len(first.texts) else None
            return batch

    def _run(self) -> None:
        if self.threads is not None:
            try:
                _set_threads(self.model, self.threads)
            except Exception as exc:  # noqa: BLE001 (serve with the library's threads rather than not at all)
                print(f"contrastfit serve: could not set {self.threads} threads ({exc}); serving with the "
                      "library's default", file=sys.stderr)
        while (batch := self._take()) is not None:
            try:
                texts = [t for job, a, b in batch for t in job.texts[a:b]]
                pairs = None if batch[0][0].pairs is None else [p for job, a, b in batch for p in job.pairs[a:b]]
                scores = self.model.predict_proba(texts, pairs, batch_size=len(texts))
                if len(scores) != len(texts):
                    raise RuntimeError(f"{len(scores)} rows of scores for {len(texts)} texts")
            except BaseException as exc:  # noqa: BLE001 (the requests get a 500 with the reason, the server goes on)
                for job, _, _ in batch:
                    job.error = exc  # a request whose chunk failed gets no more passes
                    job.done.set()
                continue
            at = 0
            for job, a, b in batch:
                job.parts[a] = scores[at:at + b - a]
                at += b - a
                job.left -= b - a
                if job.left == 0:
                    job.done.set()


def _set_threads(model, threads: int) -> None:
    """``threads`` intra-op threads for the model: PyTorch's, or a new ONNX Runtime session's."""
    session = getattr(model, "session", None)
    if session is not None and hasattr(session, "get_providers"):  # an OnnxClassifier
        import onnxruntime

        if getattr(session, "_model_path", None) is None:
            return
        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        model.session = onnxruntime.InferenceSession(session._model_path, sess_options=options,
                                                     providers=session.get_providers())
        return
    import torch

    torch.set_num_threads(threads)


def _response(status: int, payload: Any, close: bool = True) -> bytes:
    """A whole HTTP/1.0 response, for answering before a handler runs (the connection limit)."""
    data = json.dumps(payload).encode("utf-8")
    head = (f"HTTP/1.0 {int(status)} {HTTPStatus(status).phrase}\r\nContent-Type: application/json; charset=utf-8\r\n"
            f"Content-Length: {len(data)}\r\n" + ("Connection: close\r\n" if close else "") + "\r\n")
    return head.encode("latin-1") + data


class ModelServer(ThreadingHTTPServer):
    """:class:`ThreadingHTTPServer` with the model thread, a limit on connections at a time, and no
    traceback for a client that went away."""

    daemon_threads = True
    request_queue_size = 128  # the listen backlog: a burst of clients waits instead of being refused

    def __init__(self, address, handler, batcher: _Batcher, max_connections: int):
        self.batcher = batcher
        self.max_connections = max_connections
        self._slots = threading.BoundedSemaphore(max_connections)
        self._torch_threads = None
        super().__init__(address, handler)

    def process_request(self, request, client_address):
        if not self._slots.acquire(blocking=False):
            try:
                request.sendall(_response(HTTPStatus.SERVICE_UNAVAILABLE, {
                    "error": f"{self.max_connections} connections are open; try again shortly"}))
            except OSError:
                pass
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._slots.release()
            raise

    def process_request_thread(self, request, client_address):
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._slots.release()

    def handle_error(self, request, client_address):
        if isinstance(sys.exc_info()[1], (ConnectionError, TimeoutError)):
            return
        super().handle_error(request, client_address)

    def server_close(self):
        super().server_close()
        self.batcher.close()
        if self._torch_threads is not None:  # leave the process as it was (tests run servers in-process)
            import torch

            torch.set_num_threads(self._torch_threads)
            self._torch_threads = None


def make_server(model, host: str = "127.0.0.1", port: int = 8000, name: str = "", *, max_texts: int = MAX_TEXTS,
                max_body: int = MAX_BODY, timeout: float = TIMEOUT, batch_size: int = BATCH_SIZE,
                threads: int | None = None, max_connections: int = MAX_CONNECTIONS) -> ModelServer:
    """An HTTP server for ``model`` (not started: call ``serve_forever``; ``server_close`` stops its
    model thread); ``port=0`` picks a free port. ``threads``: the model's intra-op threads (None:
    leave them as they are); the other arguments are the limits of the module docstring."""
    for what, value in (("max_texts", max_texts), ("max_body", max_body), ("max_connections", max_connections)):
        if value < 1:
            raise ContrastfitError(f"{what} {value}: give 1 or more")
    if not timeout > 0:
        raise ContrastfitError(f"timeout {timeout}: give a number of seconds above 0")
    if threads is not None and threads < 1:
        raise ContrastfitError(f"threads {threads}: give 1 or more")
    pair_model = takes_pairs(model)
    health = {"status": "ok", "model": name, "task": model.task, "labels": model.label_names, "pairs": pair_model}

    class Handler(BaseHTTPRequestHandler):
        server_version = "contrastfit"
        # ``timeout`` (set below): StreamRequestHandler puts it on the socket, so every read of the
        # request line and headers waits at most this long (an idle connection is closed); the body
        # has it as one deadline

        def _reply(self, status: int, payload: Any) -> None:
            data = json.dumps(payload, ensure_ascii=False).encode("utf-8")
            self.send_response(status)
            self.send_header("Content-Type", "application/json; charset=utf-8")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
            """http.server's own errors (a malformed request line or header, a method it has no
            handler for) as JSON, like every other answer."""
            if code == HTTPStatus.NOT_IMPLEMENTED:  # a method other than GET and POST
                code, message = HTTPStatus.METHOD_NOT_ALLOWED, "GET /health or POST /predict"
            self.close_connection = True
            if self.request_version == "HTTP/0.9":  # a request line it could not read: answer with headers
                self.request_version = "HTTP/1.0"
            try:
                self._reply(code, {"error": _one_line(message or HTTPStatus(code).phrase)})
            except (OSError, ValueError):
                pass

        def do_GET(self) -> None:  # noqa: N802 (http.server's name)
            if self.path.rstrip("/") == "/health":
                self._reply(HTTPStatus.OK, health)
            else:
                self._reply(HTTPStatus.NOT_FOUND, {"error": "GET /health or POST /predict"})

        def _length(self) -> int:
            if self.headers.get("Transfer-Encoding"):
                raise RequestError("send the body with a Content-Length (a chunked body is not read)",
                                   HTTPStatus.LENGTH_REQUIRED)
            values = self.headers.get_all("Content-Length") or []
            if len(set(v.strip() for v in values)) > 1:
                raise RequestError("more than one Content-Length")
            try:
                length = int(values[0]) if values else 0
            except ValueError:
                length = -1
            if length > max_body:  # read and dropped after the answer, up to DRAIN_LIMIT: the client sends
                # all of its body before it reads, and would otherwise see a reset connection
                raise RequestError(f"a body of {length} bytes; this server reads at most {max_body}",
                                   HTTPStatus.REQUEST_ENTITY_TOO_LARGE, drain=min(length, DRAIN_LIMIT))
            if not 0 < length:
                raise RequestError(f"send a JSON body of 1 to {max_body} bytes with its Content-Length")
            return length

        def _read(self, length: int, deadline: float, keep: bool = True) -> bytes:
            """``length`` bytes of body, or fewer where the client stops sending; TimeoutError at ``deadline``."""
            chunks, got = [], 0
            while got < length:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError
                self.connection.settimeout(left)
                chunk = self.rfile.read1(min(length - got, 1 << 16))
                if not chunk:
                    break
                got += len(chunk)
                if keep:
                    chunks.append(chunk)
            return b"".join(chunks) if keep else b""

        def do_POST(self) -> None:  # noqa: N802
            self.close_connection = True
            deadline = time.monotonic() + timeout
            try:
                if self.path.rstrip("/") != "/predict":
                    raise RequestError("POST /predict", HTTPStatus.NOT_FOUND)
                length = self._length()
                try:
                    body = self._read(length, deadline)
                except TimeoutError:
                    raise RequestError(f"the body did not arrive within {timeout:g} s", HTTPStatus.REQUEST_TIMEOUT)
                if len(body) < length:
                    raise RequestError(f"the body ended after {len(body)} of its {length} bytes (Content-Length)")
                texts, pairs = _parse(body, pair_model, max_texts)
            except RequestError as exc:
                self._reply(exc.status, {"error": str(exc)})
                if exc.drain:
                    try:
                        self._read(exc.drain, time.monotonic() + timeout, keep=False)
                    except OSError:  # TimeoutError, or the client went away
                        pass
                return
            try:
                rows = _rows(model, self.server.batcher.predict(texts, pairs))
            except Exception as exc:  # noqa: BLE001
                self._reply(HTTPStatus.INTERNAL_SERVER_ERROR,
                            {"error": _one_line(f"the model failed on this request: {type(exc).__name__}: {exc}")})
                return
            self._reply(HTTPStatus.OK, {"predictions": rows})

        def log_message(self, format: str, *args: Any) -> None:  # one line per request, on stderr
            if not getattr(self.server, "quiet", False):
                super().log_message(format, *args)

    Handler.timeout = timeout
    server = ModelServer((host, port), Handler, None, max_connections)  # its model thread starts once it is bound
    if threads is not None and not hasattr(getattr(model, "session", None), "get_providers"):
        import torch

        server._torch_threads = torch.get_num_threads()
    server.batcher = _Batcher(model, batch_size, threads)
    return server
