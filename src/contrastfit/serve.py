"""A small HTTP server for a trained model: ``contrastfit serve FOLDER [--port 8000]``.

Standard library only (``http.server``). ``FOLDER`` is a ``contrastfit train`` output folder, a
multi-task folder with ``--task``, or an ONNX export (``contrastfit export``; served by ONNX Runtime,
no PyTorch model code).

* ``GET /health``: ``{"status": "ok", "labels": [...], "task": ..., "model": FOLDER}``;
* ``POST /predict`` with ``{"texts": [...]}`` (and ``"pairs": [...]`` for a pair model): one row per
  text, ``{"label": ..., "probabilities": {label: p}}`` (``{"score": x}`` for a regression model), the
  rows ``predict`` writes. Probabilities use the model's calibrated temperature when it has one.

One thread per connection reads and checks the request; ``workers`` model threads (:class:`_Batcher`,
one by default) run the model over a queue of the requests' texts, at most ``batch_size`` texts per
forward pass, taking the requests in turn: a large request is cut into chunks, and a small one
arriving meanwhile runs after the chunk in progress, in a pass of its own (or with other small ones),
not after all of it. With several workers, passes run at the same time (PyTorch and ONNX Runtime
release the GIL in their kernels), each worker on its own copy of the model object that shares the
weights (see :func:`_worker_model`).

Limits (all :func:`make_server` arguments and ``serve`` options): ``max_texts`` texts per request
(more: 413), ``max_body`` bytes per body (more: 413), ``timeout`` seconds for a connection to send
its request (an idle connection is closed; a body still incomplete after it gets 408),
``max_connections`` connections at a time (more: 503 at once). Every request the server does not
accept gets a 4xx status and ``{"error": "one line"}`` (a failure of the model: 500 and one line).
"""

from __future__ import annotations

import collections
import copy
import itertools
import json
import sys
import threading
import time
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from .errors import ContrastfitError, DataError
from .inference import rows, takes_pairs

__all__ = ["make_server"]

#: the largest request body read by default (bytes): a batch of texts, not a corpus
MAX_BODY = 8 * 1024 * 1024
#: the most texts one request may hold by default
MAX_TEXTS = 256
#: seconds a connection may take to send its request by default
TIMEOUT = 30.0
#: texts per forward pass of the model thread by default
BATCH_SIZE = 8
#: model threads by default (forward passes at a time)
WORKERS = 1
#: connections handled at a time by default (each holds a thread)
MAX_CONNECTIONS = 64
#: an oversized body is read and thrown away up to this many bytes, so that the client, still
#: sending, receives the 413 instead of a reset connection; past it the connection is closed
DRAIN_LIMIT = 64 * 1024 * 1024
#: the longest ``timeout`` (seconds): a day (a socket cannot wait past about 1e10 seconds)
MAX_TIMEOUT = 86400.0


def check_settings(*, cli: bool = False, **values: Any) -> None:
    """Refuse a setting no server runs with, in one line naming it: as the ``serve`` option
    (``--max-texts``) with ``cli``, else as :func:`make_server`'s argument. ``port``: 0 to 65535;
    ``timeout``: seconds above 0, at most :data:`MAX_TIMEOUT`; ``threads``: 1 or more (the option: 0 or
    more, 0 the library's default); the other counts 1 or more. A None value is not checked."""
    for name, value in values.items():
        if value is None:
            continue
        shown = f"--{name.replace('_', '-')} {value}" if cli else f"{name} {value}"
        if name == "port":
            if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= 65535:
                raise ContrastfitError(f"{shown}: give a port from 0 to 65535 (0 picks a free one)")
        elif name == "timeout":
            if not 0 < value <= MAX_TIMEOUT:  # (nan too)
                raise ContrastfitError(f"{shown}: give a number of seconds above 0 and at most {MAX_TIMEOUT:g}")
        elif name == "threads" and cli:
            if value < 0:
                raise ContrastfitError(f"{shown}: give 1 or more, or 0 for the library's default (one per core)")
        elif value < 1:
            raise ContrastfitError(f"{shown}: give 1 or more")


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
        self.running = 0  # passes over some of its texts in progress
        self.error: BaseException | None = None
        self.done = threading.Event()


class _Batcher:
    """The threads that run the model, ``workers`` of them (one by default), each one forward pass at a
    time over up to ``batch_size`` texts: the next ``batch_size`` of the request first in the queue, and
    whole requests behind it that fit in the room left (in queue order). A request with texts left goes
    to the back of the queue once its pass is over (behind the requests that arrived meanwhile); while
    the queue is empty, an idle worker takes the next chunk of a request whose pass is still running,
    so that a large request alone runs on all the workers. Each request gets its scores, in the order
    of its texts, when all of them have run; a pass that fails fails its requests only (a failed
    request gets no more passes)."""

    def __init__(self, model, batch_size: int = BATCH_SIZE, threads: int | None = None, workers: int = WORKERS):
        if batch_size < 1:
            raise ContrastfitError(f"batch size {batch_size}: give 1 or more")
        if workers < 1:
            raise ContrastfitError(f"workers {workers}: give 1 or more")
        self.model, self.batch_size, self.threads = model, batch_size, threads
        self._pending: collections.deque[_Job] = collections.deque()
        self._busy: list[_Job] = []  # requests with texts left and a pass in progress, out of the queue
        self._cond = threading.Condition()
        self._closed = False
        self._warned = False
        if threads is not None and _runs_onnx(model):  # a new session, once, that the workers' copies share
            self._set_threads(model)
        self.models = [model, *(_worker_model(model) for _ in range(workers - 1))]
        self._threads = [threading.Thread(target=self._run, args=(m,), name=f"contrastfit-serve-model-{i}",
                                          daemon=True) for i, m in enumerate(self.models, 1)]
        for thread in self._threads:
            thread.start()

    def predict(self, texts: list[str], pairs: list[str] | None):
        """The scores of ``texts`` (and ``pairs``), once the model threads have run all of them."""
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
        """Stop taking requests (those still queued get "the server is stopping"); each worker ends
        after its pass in progress."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        deadline = time.monotonic() + 60
        for thread in self._threads:
            thread.join(timeout=max(0.0, deadline - time.monotonic()))

    def _take(self) -> list[tuple[_Job, int, int]] | None:
        with self._cond:
            while True:
                if self._closed:
                    for job in self._pending:
                        job.error = RuntimeError("the server is stopping")
                        job.done.set()
                    self._pending.clear()
                    return None
                if self._pending:
                    first = self._pending.popleft()
                    break
                # nothing queued: help with a request whose pass is running (several workers only)
                first = next((j for j in self._busy if j.error is None and j.next < len(j.texts)), None)
                if first is not None:
                    break
                self._cond.wait()
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
            for job, _, _ in batch:
                job.running += 1
            if first.next < len(first.texts):  # back to the queue when its passes are over (_done), behind
                if first not in self._busy:  # the requests that arrive meanwhile; an idle worker may take
                    self._busy.append(first)  # its next chunk before then
                self._cond.notify()
            return batch

    def _done(self, batch: list[tuple[_Job, int, int]], scores, error: BaseException | None) -> None:
        with self._cond:
            at = 0
            for job, a, b in batch:
                job.running -= 1
                if error is not None:
                    if job.error is None:
                        job.error = error  # a request whose chunk failed gets no more passes
                    job.done.set()
                elif job.error is None:
                    job.parts[a] = scores[at:at + b - a]
                    job.left -= b - a
                    if job.left == 0:
                        job.done.set()
                at += b - a
                if job.running == 0 and job in self._busy:
                    self._busy.remove(job)
                    if job.error is None and job.next < len(job.texts):
                        self._pending.append(job)
                        self._cond.notify()

    def _set_threads(self, model) -> None:
        try:
            _set_threads(model, self.threads)
        except Exception as exc:  # noqa: BLE001 (serve with the library's threads rather than not at all)
            with self._cond:
                warned, self._warned = self._warned, True
            if not warned:
                print(f"contrastfit serve: could not set {self.threads} threads ({exc}); serving with the "
                      "library's default", file=sys.stderr)

    def _run(self, model) -> None:
        if self.threads is not None and not _runs_onnx(model):  # PyTorch's threads, for this thread
            self._set_threads(model)
        while (batch := self._take()) is not None:
            try:
                texts = [t for job, a, b in batch for t in job.texts[a:b]]
                pairs = None if batch[0][0].pairs is None else [p for job, a, b in batch for p in job.pairs[a:b]]
                scores = model.predict_proba(texts, pairs, batch_size=len(texts))
                if len(scores) != len(texts):
                    raise RuntimeError(f"{len(scores)} rows of scores for {len(texts)} texts")
            except BaseException as exc:  # noqa: BLE001 (the requests get a 500 with the reason, the server goes on)
                self._done(batch, None, exc)
                continue
            self._done(batch, scores, None)


def _runs_onnx(model) -> bool:
    return hasattr(getattr(model, "session", None), "get_providers")


def _worker_model(model):
    """``model`` for one more model thread: a copy of the object that shares its weights (PyTorch's
    parameters and buffers, or the ONNX Runtime session, both safe to run from several threads at
    once) and copies the rest. The rest is not safe to share: a Hugging Face fast tokenizer changes its
    padding and truncation settings in place, which fails ("RuntimeError: Already borrowed",
    huggingface/tokenizers#537) while another thread encodes with it, and ``predict_logits`` turns the
    modules' eval mode on and back."""
    shared: dict[int, Any] = {}
    if callable(getattr(model, "parameters", None)) and callable(getattr(model, "buffers", None)):
        shared.update((id(t), t) for t in itertools.chain(model.parameters(), model.buffers()))
    if getattr(model, "session", None) is not None:
        shared[id(model.session)] = model.session
    try:
        return copy.deepcopy(model, shared)
    except Exception as exc:  # noqa: BLE001
        raise ContrastfitError(_one_line(f"workers: could not copy the model for another worker "
                                         f"({type(exc).__name__}: {exc}); serve it with one worker")) from None


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
    """:class:`ThreadingHTTPServer` with the model threads, a limit on connections at a time, and no
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
        except Exception:  # the thread did not start (RuntimeError): it will not release the slot
            self._slots.release()
            raise
        # not BaseException: a Ctrl-C/SIGTERM (KeyboardInterrupt) that lands while Thread.start() waits for a
        # thread already running must stop the server; releasing here too raised "Semaphore released too many
        # times", which replaced the KeyboardInterrupt, and serve_forever went on (a loaded CI machine hung)

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
        if self.batcher is not None:  # (None: socketserver closes a server that could not bind)
            self.batcher.close()
        if self._torch_threads is not None:  # leave the process as it was (tests run servers in-process)
            import torch

            torch.set_num_threads(self._torch_threads)
            self._torch_threads = None


def make_server(model, host: str = "127.0.0.1", port: int = 8000, name: str = "", *, max_texts: int = MAX_TEXTS,
                max_body: int = MAX_BODY, timeout: float = TIMEOUT, batch_size: int = BATCH_SIZE,
                threads: int | None = None, max_connections: int = MAX_CONNECTIONS,
                workers: int = WORKERS) -> ModelServer:
    """An HTTP server for ``model`` (not started: call ``serve_forever``; ``server_close`` stops its
    model threads); ``port=0`` picks a free port. ``threads``: the model's intra-op threads, per worker
    (None: leave them as they are); ``workers``: model threads, forward passes at a time; the other
    arguments are the limits of the module docstring."""
    check_settings(port=port, max_texts=max_texts, max_body=max_body, max_connections=max_connections,
                   timeout=timeout, threads=threads, workers=workers)
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
                answer = rows(model, self.server.batcher.predict(texts, pairs))
            except Exception as exc:  # noqa: BLE001
                self._reply(HTTPStatus.INTERNAL_SERVER_ERROR,
                            {"error": _one_line(f"the model failed on this request: {type(exc).__name__}: {exc}")})
                return
            self._reply(HTTPStatus.OK, {"predictions": answer})

        def log_message(self, format: str, *args: Any) -> None:  # one line per request, on stderr
            if not getattr(self.server, "quiet", False):
                super().log_message(format, *args)

    Handler.timeout = timeout
    try:
        server = ModelServer((host, port), Handler, None, max_connections)  # its model threads start once it is bound
    except OSError as exc:  # an address in use or not of this machine, a host name that does not resolve
        raise ContrastfitError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    if threads is not None and not _runs_onnx(model):
        import torch

        server._torch_threads = torch.get_num_threads()
    try:
        server.batcher = _Batcher(model, batch_size, threads, workers)
    except BaseException:
        server.socket.close()
        raise
    return server
