"""The HTTP server of a trained model: ``contrastfit serve FOLDER``, on FastAPI and uvicorn.

``FOLDER`` is a ``contrastfit train`` output folder, a multi-task folder with ``--task``, or an ONNX
export (``contrastfit export``; served by ONNX Runtime, no PyTorch model code). The packages are the
``serve`` extra (fastapi, uvicorn, prometheus-client), imported only when serving.

* ``POST /predict`` with ``{"texts": [...]}`` (and ``"pairs": [...]`` for a pair model) answers
  ``{"predictions": [...]}``, the rows ``predict`` writes. The Hugging Face inference payload
  ``{"inputs": "text" | ["text", ...]}`` (a pair: ``{"text": ..., "text_pair": ...}``; ``"parameters":
  {"top_k": K}``) is answered as Hugging Face text-classification inference answers it: one list per
  input of ``{"label", "score"}``, every label, highest score first.
* ``GET /health``, ``GET /metrics`` (Prometheus), and the schema of all of it, from the pydantic models
  below: ``GET /openapi.json`` and ``/docs``.

:func:`make_app` builds the FastAPI application (to mount in an application of your own, or to run
with any ASGI server); :func:`make_server` binds it to a socket with uvicorn (HTTP/1.1, keep-alive).
The settings are :class:`ServeOptions`. Requests waiting together share forward passes, and a large
request runs in chunks with small ones between them (:class:`_Batcher`).

Limits: more than ``max_texts`` texts or ``max_body`` bytes in a request: 413; a body not complete
within ``timeout``: 408 (an idle connection is closed); past ``max_connections``: 503 at once; a
request line or head over 64 KiB: 414 / 431; a chunked body or no Content-Length: 411; another method:
405. Every request the server does not accept gets a 4xx status and ``{"error": "one line"}``; a
failure of the model gets 500 and one line; the server goes on.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import contextlib
import copy
import functools
import importlib.util
import itertools
import json
import re
import socket
import sys
import threading
import time
import typing
from dataclasses import dataclass, field, fields, replace
from http import HTTPStatus
from typing import Annotated, Any, Literal, Optional, Union

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, RootModel, StrictInt, StrictStr, ValidationError

from . import __version__
from .errors import ContrastfitError, DataError
from .inference import rows, takes_pairs
from .inputs import model_inputs
from .settings import setting

__all__ = ["ServeOptions", "make_app", "make_server", "ModelServer", "check_settings", "require_serving"]

#: the longest ``timeout`` / ``keep_alive`` (seconds): a day (a socket cannot wait past about 1e10 seconds)
MAX_TIMEOUT = 86400.0
#: the longest request line, and request line and headers together (bytes): past it 414 / 431
MAX_HEAD = 64 * 1024
#: an oversized body is read and thrown away up to this many bytes before the 413, so that a client
#: that sends all of its body before reading receives the answer instead of a reset connection
DRAIN_LIMIT = 64 * 1024 * 1024
#: how long (seconds) a refused connection (503, or a request h11 cannot read) is kept to let the
#: client read the answer before it is closed
REFUSED_LINGER = 1.0
#: the end of a request head
_BLANK_LINE = re.compile(rb"\n\r?\n")
#: what to install when the serving packages are missing
INSTALL = "pip install 'contrastfit[serve]'"


@dataclass(frozen=True)
class ServeOptions:
    """The settings of the server, declared once (:func:`contrastfit.settings.setting`): ``contrastfit
    serve``'s options are generated from them (:func:`contrastfit.cli.add_config_options`), and
    :func:`make_app` / :func:`make_server` take them (an instance, or the fields as keywords). An
    instance checks its values (:func:`check_settings`), so a bad one is a one-line
    :class:`~contrastfit.errors.ContrastfitError` naming it."""

    host: str = setting("127.0.0.1", "address to listen on (127.0.0.1: this machine only)", group="options",
                        metavar="HOST")
    port: int = setting(8000, "port (0 picks a free one)", group="options", metavar="PORT", ge=0, le=65535)
    threads: int = setting(1, "the model's intra-op threads per worker, PyTorch's or ONNX Runtime's; 0: the "
                              "library's default (one per core); see Benchmarks", group="forward passes",
                           metavar="N", ge=0)
    batch_size: int = setting(8, "most texts per forward pass: requests waiting together share a pass, and a "
                                 "larger request runs in chunks of this size, other requests between them; "
                                 "see Benchmarks", group="forward passes", metavar="N", ge=1)
    max_wait: float = setting(0.002, "seconds a forward pass with room left waits for more requests to join it "
                                     "(0: none)", group="forward passes", metavar="SECONDS", ge=0, le=1)
    workers: int = setting(1, "model threads: forward passes at a time, each with --threads threads, on copies "
                              "of the model that share its weights, in this one process; see Benchmarks",
                           group="forward passes", metavar="N", ge=1)
    max_texts: int = setting(256, "most texts in one request; more: 413", group="limits", metavar="N", ge=1)
    max_body: int = setting(8 * 1024 * 1024, "most bytes in a request body; more: 413", group="limits",
                            metavar="BYTES", ge=1)
    timeout: float = setting(30.0, "seconds a connection may take to send its request: one that sends nothing "
                                   "for that long is closed, a body not complete by then gets 408",
                             group="limits", metavar="SECONDS", gt=0, le=MAX_TIMEOUT)
    keep_alive: float = setting(5.0, "seconds an idle connection is kept open after an answer (HTTP/1.1 "
                                     "keep-alive) for the client's next request", group="limits",
                                metavar="SECONDS", gt=0, le=MAX_TIMEOUT)
    max_connections: int = setting(64, "connections at a time; more get 503 at once", group="limits", metavar="N",
                                   ge=1)

    def __post_init__(self) -> None:
        check_settings(**{f.name: getattr(self, f.name) for f in fields(self)})


#: wordings of a bad value that its bounds do not say
_HINTS = {"port": "give a port from 0 to 65535 (0 picks a free one)",
          "threads": "give 1 or more, or 0 for the library's default (one per core)"}


def _problem(kind: type, bounds: dict[str, Any], value: Any) -> str | None:
    """What is wrong with ``value`` for a field of type ``kind`` with ``bounds``, or None."""
    if kind is str:
        return None if isinstance(value, str) and value else "give a host name or address"
    right = not isinstance(value, bool) and isinstance(value, int if kind is int else (int, float))
    checks = {"ge": lambda v, b: v >= b, "gt": lambda v, b: v > b, "le": lambda v, b: v <= b}
    if right and all(checks[k](value, b) for k, b in bounds.items()):  # (NaN fails every comparison)
        return None
    low, high = bounds.get("gt", bounds.get("ge")), bounds.get("le")
    if high is None:
        return f"give {low:g} or more"
    above, up_to = ("above", "and at most") if "gt" in bounds else ("from", "to")
    return f"give {'a number of seconds ' if kind is float else ''}{above} {low:g} {up_to} {high:g}"


def check_settings(*, cli: bool = False, **values: Any) -> None:
    """Refuse a setting no server runs with, in one line naming it: as the ``serve`` option
    (``--max-texts 0: give 1 or more``) with ``cli``, else as the :class:`ServeOptions` field
    (``max_texts 0: ...``). The allowed values are the fields' declarations; a None value is not
    checked; a name that is no field is a TypeError."""
    hints = typing.get_type_hints(ServeOptions)
    declared = ServeOptions.__dataclass_fields__
    for name, value in values.items():
        if name not in declared:
            raise TypeError(f"{name!r} is no serve setting (settings: {', '.join(declared)})")
        if value is None:
            continue
        problem = _problem(hints[name], declared[name].metadata.get("bounds", {}), value)
        if problem is not None:
            shown = f"--{name.replace('_', '-')} {value}" if cli else f"{name} {value}"
            raise ContrastfitError(f"{shown}: {_HINTS.get(name, problem)}")


def _options(options: ServeOptions | None, settings: dict[str, Any]) -> ServeOptions:
    if settings.get("threads", 0) is None:  # (None: leave the threads as they are, the library's default)
        settings["threads"] = 0
    check_settings(**settings)
    return replace(options or ServeOptions(), **settings)


def require_serving() -> None:
    """Refuse, in one line, to serve without the ``serve`` extra's packages."""
    for module, package in (("fastapi", "fastapi"), ("uvicorn", "uvicorn"), ("prometheus_client", "prometheus-client")):
        try:
            found = importlib.util.find_spec(module) is not None
        except (ImportError, ValueError):  # (a module set to None in sys.modules, or a broken one)
            found = False
        if not found:
            raise ContrastfitError(f"serving needs {package}, which is not installed: {INSTALL}")


# -- the request and response models (the OpenAPI schema) --------------------------------------------------


class PredictRequest(BaseModel):
    """contrastfit's payload: the texts, and for a pair model their second texts (or each text
    ``first<TAB>second``)."""

    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [{"texts": ["a fine film"]}]})
    texts: Annotated[list[StrictStr], Field(min_length=1, description="the texts to classify")]
    pairs: Optional[list[StrictStr]] = Field(None, description="a pair model's second texts, one per text")


class TextPair(BaseModel):
    """One input of a pair model in the Hugging Face payload."""

    model_config = ConfigDict(extra="forbid")
    text: StrictStr
    text_pair: StrictStr


class InferenceParameters(BaseModel):
    """The Hugging Face text-classification parameters this server reads."""

    model_config = ConfigDict(extra="forbid")
    top_k: Optional[StrictInt] = Field(None, ge=1, description="answer the K highest-scoring labels (default: all)")
    function_to_apply: Optional[Literal["softmax", "sigmoid", "none"]] = Field(
        None, description="only the model's own: softmax (single label), sigmoid (multi-label), none (regression)")


class InferenceRequest(BaseModel):
    """The Hugging Face inference payload (text classification)."""

    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [{"inputs": "a fine film"}]})
    inputs: Union[StrictStr, TextPair, Annotated[list[StrictStr], Field(min_length=1)],
                  Annotated[list[TextPair], Field(min_length=1)]]
    parameters: Optional[InferenceParameters] = None
    options: Optional[dict[str, Any]] = Field(None, description="accepted and ignored (wait_for_model, use_cache)")


class ClassPrediction(BaseModel):
    label: int | str  # an int where the model was trained on integer labels
    probabilities: dict[str, float]


class MultiLabelPrediction(BaseModel):
    labels: list[str]
    probabilities: dict[str, float]


class RegressionPrediction(BaseModel):
    score: float


class PredictResponse(BaseModel):
    """The answer to ``{"texts": [...]}``: one row per text, in order."""

    predictions: list[Union[ClassPrediction, MultiLabelPrediction, RegressionPrediction]]


class LabelScore(BaseModel):
    label: str
    score: float


class InferenceResponse(RootModel[list[list[LabelScore]]]):
    """The answer to ``{"inputs": ...}``: one list per input, highest score first."""


class Health(BaseModel):
    status: str
    model: str
    task: str
    labels: Optional[list[str]]
    pairs: bool


class ErrorResponse(BaseModel):
    error: str = Field(description="what was wrong, in one line")


# -- reading a request -------------------------------------------------------------------------------


class RequestError(ValueError):
    """A request the server does not accept: its HTTP status, a one-line message, and whether to close the
    connection (a body not read, or not all of it: no next request on it)."""

    def __init__(self, message: str, status: int = HTTPStatus.BAD_REQUEST, close: bool = False):
        super().__init__(message)
        self.status, self.close = int(status), close


def _one_line(text: str, limit: int = 300) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[:limit - 3] + "..."


_SEND_TEXTS = 'send {"texts": [...]} (and "pairs": [...] for a pair model), or {"inputs": ...}'
_SEND_INPUTS = ('"inputs" must be a text or a non-empty list of texts (for a pair model: {"text": ..., '
                '"text_pair": ...} or a list of them)')
_CHUNKED = "send the body with a Content-Length (a chunked body is not read)"


@dataclass
class _Request:
    """A request read: the texts (and pairs) the model runs on, and how to answer (``form``: which
    payload it came in; ``top_k``: the Hugging Face parameter)."""

    texts: list[str]
    pairs: list[str] | None
    form: str = "texts"
    top_k: int | None = None


def _invalid(errors: list[dict[str, Any]], form: str) -> str:
    """The one line answering a payload of ``form`` ("texts" or "inputs") that pydantic refused."""
    if any(e["type"] == "extra_forbidden" and len(e["loc"]) == 1 for e in errors):
        return _SEND_TEXTS if form == "texts" else 'send {"inputs": "text" or [...]} (and "parameters": {"top_k": K})'
    first = errors[0]
    name = first["loc"][0]
    if form == "inputs":
        if name != "parameters":
            return _SEND_INPUTS
        where = ".".join(f'"{part}"' for part in first["loc"] if isinstance(part, str))
        return _one_line(f"{where}: {first['msg']}")
    if first["type"] in ("too_short", "missing") or (len(first["loc"]) == 1 and first.get("input") is None):
        return f'"{name}" must be a non-empty list of strings'
    return f'"{name}" must be a list of strings'


def _read_request(body: bytes, pair_model: bool, max_texts: int | None, function: str = "softmax") -> _Request:
    """The request in ``body``: either payload (see the module docstring); RequestError else."""
    try:
        request = json.loads(body.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:  # JSONDecodeError, and an integer too long to convert
        raise RequestError(_one_line(f"the body is not UTF-8 JSON ({exc})")) from None
    except RecursionError:
        raise RequestError("the body is not UTF-8 JSON (nested too deeply)") from None
    if not isinstance(request, dict):
        raise RequestError(_SEND_TEXTS)
    form = "inputs" if "inputs" in request else "texts"
    try:
        parsed = (InferenceRequest if form == "inputs" else PredictRequest).model_validate(request)
    except ValidationError as exc:
        raise RequestError(_invalid(exc.errors(include_url=False), form)) from None
    if form == "texts":
        texts, pairs, names, parameters = parsed.texts, parsed.pairs, ('"texts"', '"pairs"'), InferenceParameters()
    else:
        items = parsed.inputs if isinstance(parsed.inputs, list) else [parsed.inputs]
        texts = [i if isinstance(i, str) else i.text for i in items]
        pairs = None if isinstance(items[0], str) else [i.text_pair for i in items]
        names, parameters = ('"inputs"', '"text_pair"'), parsed.parameters or InferenceParameters()
    if max_texts is not None and len(texts) > max_texts:
        raise RequestError(f"{len(texts)} texts in one request; this server takes at most {max_texts}: send them in "
                           "several requests", HTTPStatus.REQUEST_ENTITY_TOO_LARGE)
    for name, values in zip(names, (texts, pairs or [])):
        for i, text in enumerate(values):
            try:
                text.encode("utf-8")
            except UnicodeEncodeError as exc:  # "\ud800" is valid JSON but no Unicode text
                raise RequestError(f"{name}[{i}] holds a lone surrogate ({ascii(text[exc.start])}): "
                                   "send Unicode text") from None
    if parameters.function_to_apply not in (None, function):
        raise RequestError(f'"parameters"."function_to_apply" {parameters.function_to_apply!r}: this model answers '
                           f"its own probabilities ({function})")
    try:
        texts, pairs = model_inputs(texts, pairs, pair_model, "this model", names[1])
    except DataError as exc:
        raise RequestError(str(exc)) from None
    return _Request(texts, pairs, form, parameters.top_k)


def _parse(body: bytes, pair_model: bool, max_texts: int | None = None) -> tuple[list[str], list[str] | None]:
    """The texts (and pairs) of a request body, as the model reads them; RequestError else."""
    request = _read_request(body, pair_model, max_texts)
    return request.texts, request.pairs


def _answer(model, request: _Request, scores) -> Any:
    if request.form == "texts":
        return {"predictions": rows(model, scores)}
    if model.task == "regression":  # (Hugging Face's name of a model's one output without a label name)
        return [[{"label": "LABEL_0", "score": float(s[0])}] for s in scores]
    names = model.label_names
    return [[{"label": names[j], "score": round(float(s[j]), 6)}
             for j in sorted(range(len(names)), key=lambda j: -float(s[j]))[:request.top_k]] for s in scores]


# -- the model threads ------------------------------------------------------------------------------


@dataclass(eq=False)
class _Job:
    """One request's texts in the model threads' queue."""

    texts: list[str]
    pairs: list[str] | None
    next: int = 0  # the first text not yet taken
    running: int = 0  # passes over some of its texts in progress
    parts: dict[int, Any] = field(default_factory=dict)  # start -> scores of texts[start:start + len(scores)]
    error: BaseException | None = None
    finished: bool = False
    future: concurrent.futures.Future = field(default_factory=concurrent.futures.Future)

    def start(self) -> bool:
        """Whether the job is still wanted (its future not cancelled), when a worker first takes it."""
        return self.next > 0 or self.future.set_running_or_notify_cancel()

    def finish(self) -> None:
        with contextlib.suppress(concurrent.futures.InvalidStateError):  # cancelled while it waited in the queue
            if self.error is not None:
                self.future.set_exception(self.error)
            else:
                self.future.set_result(np.concatenate([self.parts[start] for start in sorted(self.parts)]))


class _Batcher:
    """The threads that run the model, ``workers`` of them, each one forward pass at a time over up to
    ``batch_size`` texts: the next ``batch_size`` of the request first in the queue, and whole requests
    behind it that fit in the room left (so that a small request is not slowed down by a large one's
    texts); a pass with room left and nothing else queued waits up to ``max_wait`` seconds for requests
    that fit. A request with texts left goes to the back of the queue once its pass is over; while the
    queue is empty, an idle worker takes the next chunk of a request whose pass is still running, so that
    a large request alone runs on all the workers (PyTorch and ONNX Runtime release the GIL in their
    kernels; each worker has its own copy of the model object, :func:`_worker_model`). A pass that fails
    fails its requests only. ``on_pass(texts, seconds)`` is called after each pass."""

    def __init__(self, model, batch_size: int = 8, threads: int | None = None, workers: int = 1, *,
                 max_wait: float = 0.0, on_pass=None):
        if batch_size < 1:
            raise ContrastfitError(f"batch size {batch_size}: give 1 or more")
        if workers < 1:
            raise ContrastfitError(f"workers {workers}: give 1 or more")
        self.model, self.batch_size, self.threads, self.max_wait = model, batch_size, threads, max_wait
        self.on_pass = on_pass
        self._pending: collections.deque[_Job] = collections.deque()
        self._busy: list[_Job] = []  # requests with texts left and a pass in progress, out of the queue
        self._cond = threading.Condition()
        self._closed = self._warned = False
        self._torch_threads = None
        if threads is not None and _runs_onnx(model):  # a new session, once, that the workers' copies share
            self._set_threads(model)
        elif threads is not None:  # PyTorch's threads are the process's: given back by close()
            import torch

            self._torch_threads = torch.get_num_threads()
        self.models = [model, *(_worker_model(model) for _ in range(workers - 1))]
        self._threads = [threading.Thread(target=self._run, args=(m,), name=f"contrastfit-serve-model-{i}",
                                          daemon=True) for i, m in enumerate(self.models, 1)]
        for thread in self._threads:
            thread.start()

    def submit(self, texts: list[str], pairs: list[str] | None = None) -> concurrent.futures.Future:
        """A future of the scores of ``texts`` (and ``pairs``), set once the model threads have run all
        of them (a cancelled one is dropped from the queue)."""
        job = _Job(texts, pairs)
        with self._cond:
            if not self._closed:
                self._pending.append(job)
                self._cond.notify()
                return job.future
        job.future.set_exception(RuntimeError("the server is stopping"))
        return job.future

    def close(self) -> None:
        """Stop taking requests (those still queued get "the server is stopping"); each worker ends
        after its pass in progress; PyTorch's threads are set back as they were."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        deadline = time.monotonic() + 60
        for thread in self._threads:
            if thread is not threading.current_thread():
                thread.join(timeout=max(0.0, deadline - time.monotonic()))
        if self._torch_threads is not None:  # leave the process as it was (tests run servers in-process)
            import torch

            torch.set_num_threads(self._torch_threads)
            self._torch_threads = None

    def _take(self) -> list[tuple[_Job, int, int]] | None:
        """The next pass, (job, start, end) chunks (waiting for one), or None once closed."""
        with self._cond:
            while not self._closed:
                if self._pending:
                    first = self._pending.popleft()
                    if first.start():  # (else cancelled while queued)
                        return self._batch(first)
                    continue
                # nothing queued: help with a request whose pass is running (several workers only)
                first = next((j for j in self._busy if not j.finished and j.next < len(j.texts)), None)
                if first is not None:
                    return self._batch(first)
                self._cond.wait()
            stopped, self._pending = self._pending, collections.deque()
            for job in stopped:
                job.error, job.finished = RuntimeError("the server is stopping"), True
        for job in stopped:
            job.finish()
        return None

    def _batch(self, first: _Job) -> list[tuple[_Job, int, int]]:
        """A pass starting with the next chunk of ``first`` (holding the lock)."""
        n = min(self.batch_size, len(first.texts) - first.next)
        batch = [(first, first.next, first.next + n)]
        first.next += n
        first.running += 1
        room = self._join(batch, self.batch_size - n)
        if first.next < len(first.texts):  # back to the queue when its passes are over (_done), behind the
            if first not in self._busy:  # requests that arrive meanwhile; an idle worker may take its next
                self._busy.append(first)  # chunk before then
            self._cond.notify()
        elif room > 0 and self.max_wait > 0 and not self._pending:
            deadline = time.monotonic() + self.max_wait  # room left: wait a little for requests that fit
            while room > 0 and not self._pending and not self._closed:
                if not self._cond.wait_for(lambda: self._pending or self._closed, deadline - time.monotonic()):
                    break
                room = self._join(batch, room)
        return batch

    def _join(self, batch: list[tuple[_Job, int, int]], room: int) -> int:
        """Whole requests of the queue that fit in ``room`` join ``batch`` (in queue order); the others
        stay queued. The room left."""
        waiting: collections.deque[_Job] = collections.deque()
        for job in self._pending:
            left = len(job.texts) - job.next
            if left <= room and job.start():
                batch.append((job, job.next, len(job.texts)))
                job.next, room = len(job.texts), room - left
                job.running += 1
            elif left > room:
                waiting.append(job)
        self._pending = waiting
        return room

    def _done(self, batch: list[tuple[_Job, int, int]], scores, error: BaseException | None) -> None:
        finished: list[_Job] = []
        with self._cond:
            at = 0
            for job, a, b in batch:
                job.running -= 1
                if not job.finished:
                    if error is None:
                        job.parts[a] = scores[at:at + b - a]
                    else:
                        job.error = error  # a request whose chunk failed gets no more passes
                    if error is not None or (job.running == 0 and job.next == len(job.texts)):
                        job.finished = True
                        finished.append(job)
                at += b - a
                if job.running == 0 and job in self._busy:
                    self._busy.remove(job)
                    if not job.finished and job.next < len(job.texts):
                        self._pending.append(job)
                        self._cond.notify()
        for job in finished:
            job.finish()

    def _run(self, model) -> None:
        if self.threads is not None and not _runs_onnx(model):  # PyTorch's threads, for this thread
            self._set_threads(model)
        while (batch := self._take()) is not None:
            start = time.perf_counter()
            try:
                texts = [t for job, a, b in batch for t in job.texts[a:b]]
                pairs = None if batch[0][0].pairs is None else [p for job, a, b in batch for p in job.pairs[a:b]]
                scores = model.predict_proba(texts, pairs, batch_size=len(texts))
                if len(scores) != len(texts):
                    raise RuntimeError(f"{len(scores)} rows of scores for {len(texts)} texts")
            except BaseException as exc:  # noqa: BLE001 (the requests get a 500 with the reason, the server goes on)
                self._done(batch, None, exc)
                continue
            if self.on_pass is not None:
                self.on_pass(len(texts), time.perf_counter() - start)
            self._done(batch, scores, None)

    def _set_threads(self, model) -> None:
        """``self.threads`` intra-op threads for ``model``: PyTorch's (of the calling thread), or a new ONNX
        Runtime session's; the library's default, with a warning, where that fails."""
        try:
            session = getattr(model, "session", None)
            if not _runs_onnx(model):
                import torch

                torch.set_num_threads(self.threads)
            elif getattr(session, "_model_path", None) is not None:
                import onnxruntime

                options = onnxruntime.SessionOptions()
                options.intra_op_num_threads, options.inter_op_num_threads = self.threads, 1
                model.session = onnxruntime.InferenceSession(session._model_path, sess_options=options,
                                                             providers=session.get_providers())
        except Exception as exc:  # noqa: BLE001 (serve with the library's threads rather than not at all)
            with self._cond:
                warned, self._warned = self._warned, True
            if not warned:
                print(f"contrastfit serve: could not set {self.threads} threads ({exc}); serving with the "
                      "library's default", file=sys.stderr)


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


# -- metrics -----------------------------------------------------------------------------------------


class _Metrics:
    """The Prometheus metrics of one application, in a registry of its own (so that several
    applications live in one process): requests by path and status, their latency, and the texts and
    time of each forward pass."""

    def __init__(self):
        from prometheus_client import CollectorRegistry, Counter, Histogram, ProcessCollector

        self.registry = CollectorRegistry(auto_describe=True)
        ProcessCollector(registry=self.registry)
        self.requests = Counter("contrastfit_http_requests", "HTTP requests answered, by path (\"other\": a path "
                                "the server does not have, or a request it could not read) and status",
                                ["path", "status"], registry=self.registry)
        self.latency = Histogram("contrastfit_http_request_duration_seconds",
                                 "seconds from a request's head to the end of its answer, by path", ["path"],
                                 buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60),
                                 registry=self.registry)
        self.batch_size = Histogram("contrastfit_batch_size", "texts per forward pass of the model",
                                    buckets=(1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024), registry=self.registry)
        self.forward = Histogram("contrastfit_forward_pass_duration_seconds", "seconds per forward pass of the model",
                                 buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
                                 registry=self.registry)

    def request(self, path: str, status: int | str, seconds: float | None = None) -> None:
        self.requests.labels(path=path, status=str(status)).inc()
        if seconds is not None:
            self.latency.labels(path=path).observe(seconds)

    def forward_pass(self, texts: int, seconds: float) -> None:
        self.batch_size.observe(texts)
        self.forward.observe(seconds)


# -- the application ---------------------------------------------------------------------------------


def _json(payload: Any, status: int = 200, headers: dict[str, str] | None = None):
    from starlette.responses import Response

    body = json.dumps(payload, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
    return Response(body, status_code=status, headers=headers, media_type="application/json; charset=utf-8")


def _error(exc: RequestError):
    return _json({"error": str(exc)}, exc.status, {"connection": "close"} if exc.close else None)


def _raw_response(status: int, message: str) -> bytes:
    """A whole HTTP/1.1 error response that closes the connection, for answering outside the
    application (a request h11 cannot read, a connection past the limit)."""
    response = _json({"error": message}, status, {"connection": "close"})
    head = "".join(f"{name.decode()}: {value.decode()}\r\n" for name, value in response.raw_headers)
    return f"HTTP/1.1 {status} {HTTPStatus(status).phrase}\r\n{head}\r\n".encode("latin-1") + response.body


class _ClientGone(Exception):
    pass


class _Limits:
    """ASGI middleware: the limits of a ``POST /predict`` body (Content-Length required, at most
    ``max_body`` bytes, all of it within ``timeout`` seconds), read here whole before the application
    sees it, and the request metrics of every request. A path with a trailing slash is the path
    without it."""

    def __init__(self, app, options: ServeOptions, metrics: _Metrics, paths: frozenset[str]):
        self.app, self.options, self.metrics, self.paths = app, options, metrics, paths

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        path, root = scope["path"], scope.get("root_path", "")
        if root and path.startswith(root):  # (mounted in another application: the path below the mount)
            path = path[len(root):] or "/"
        if len(path) > 1 and path.endswith("/"):
            path = path.rstrip("/") or "/"
            scope = {**scope, "path": scope["path"].rstrip("/")}
        start, status = time.perf_counter(), [499]  # (499: the client went away before an answer)

        async def sending(message):
            if message["type"] == "http.response.start":
                status[0] = message["status"]
            await send(message)

        try:
            if scope["method"] == "POST" and path == "/predict":
                try:
                    receive = await self._body(scope, receive)
                except RequestError as exc:
                    return await _error(exc)(scope, receive, sending)
                except _ClientGone:
                    return
            await self.app(scope, receive, sending)
        except BaseException:
            status[0] = 500
            raise
        finally:
            self.metrics.request(path if path in self.paths else "other", status[0], time.perf_counter() - start)

    async def _body(self, scope, receive):
        """A ``receive`` that gives the whole body at once; RequestError for a body this server does not
        take, _ClientGone when the client went away."""
        o = self.options
        headers = dict(scope["headers"])
        if b"transfer-encoding" in headers:
            raise RequestError(_CHUNKED, 411, close=True)
        send_length = f"send a JSON body of 1 to {o.max_body} bytes with its Content-Length"
        if b"content-length" not in headers:
            raise RequestError(send_length, 411)
        length = int(headers[b"content-length"])  # (h11 refuses one that is not a number)
        deadline = time.monotonic() + o.timeout
        if length > o.max_body:  # read and dropped first (DRAIN_LIMIT), unless the client waits for "100 Continue"
            if headers.get(b"expect", b"").lower() != b"100-continue" and length <= DRAIN_LIMIT:
                with contextlib.suppress(TimeoutError, _ClientGone, OSError):
                    await self._read(receive, length, deadline, keep=False)
            raise RequestError(f"a body of {length} bytes; this server reads at most {o.max_body}", 413, close=True)
        if length == 0:
            raise RequestError(send_length)
        try:
            body = await self._read(receive, length, deadline)
        except TimeoutError:
            raise RequestError(f"the body did not arrive within {o.timeout:g} s", 408, close=True) from None
        if len(body) < length:  # the client stopped sending (half-closed the connection)
            raise RequestError(f"the body ended after {len(body)} of its {length} bytes (Content-Length)", close=True)
        messages = iter([{"type": "http.request", "body": body, "more_body": False}])

        async def replay():
            return next(messages, None) or await receive()

        return replay

    @staticmethod
    async def _read(receive, length: int, deadline: float, keep: bool = True) -> bytes:
        """Up to ``length`` bytes of body (fewer when it ends early); TimeoutError at ``deadline``."""
        chunks, got = [], 0
        while got < length:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError
            try:
                message = await asyncio.wait_for(receive(), left)
            except asyncio.TimeoutError:  # (TimeoutError itself from Python 3.11)
                raise TimeoutError from None
            if message["type"] == "http.disconnect":
                raise _ClientGone
            chunk = message.get("body", b"")
            got += len(chunk)
            if keep:
                chunks.append(chunk)
            if not message.get("more_body", False):
                break
        return b"".join(chunks)


_PATHS = "GET /health, /metrics, /docs or /openapi.json; POST /predict"
_ERRORS = {status: {"model": ErrorResponse, "description": text} for status, text in (
    (400, "not JSON, wrong types, a lone surrogate, pairs for a single-text model, ..."),
    (408, "the body did not arrive within --timeout"), (411, "no Content-Length, or a chunked body"),
    (413, "more than --max-texts texts, or a body over --max-body bytes"),
    (500, "the model failed on this request"))}


def make_app(model, options: ServeOptions | None = None, *, name: str = "", **settings: Any):
    """The FastAPI application that serves ``model`` (any :func:`contrastfit.inference.load_for_inference`
    gives: a trained model, a multi-task folder's task, an ONNX export), with ``options`` (a
    :class:`ServeOptions`; its fields also as keywords, over it). ``name`` is the model's name in
    ``/health``. Its model threads start now and stop when the application's lifespan ends (the
    server's shutdown); the host, port and connection settings are :func:`make_server`'s."""
    require_serving()
    options = _options(options, settings)
    # lazy: the serve extra's packages (require_serving has checked them)
    from fastapi import FastAPI, Request
    from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
    from starlette.concurrency import run_in_threadpool
    from starlette.responses import Response

    pair_model = takes_pairs(model)
    function = model.outputs.activation or "none"  # its scores' function, in Hugging Face's words
    metrics = _Metrics()
    batcher = _Batcher(model, options.batch_size, options.threads or None, options.workers,
                       max_wait=options.max_wait, on_pass=metrics.forward_pass)
    health = {"status": "ok", "model": name, "task": model.task, "labels": model.label_names, "pairs": pair_model}

    @contextlib.asynccontextmanager
    async def lifespan(app):
        try:
            yield
        finally:
            await run_in_threadpool(batcher.close)

    app = FastAPI(title="contrastfit", version=__version__, lifespan=lifespan, redirect_slashes=False,
                  summary=f"a contrastfit model{f': {name}' if name else ''} ({model.task}, labels "
                          f"{', '.join(map(str, model.label_names or []))})")
    app.state.model, app.state.options, app.state.batcher, app.state.metrics = model, options, batcher, metrics

    @app.get("/health", response_model=Health, summary="the model's task and labels")
    async def get_health():
        return _json(health)

    async def predict(request):
        body = await request.body()  # (whole and within the limits: _Limits)
        read = functools.partial(_read_request, body, pair_model, options.max_texts, function)
        try:  # (a large body is parsed off the event loop)
            parsed = read() if len(body) < 65536 else await run_in_threadpool(read)
        except RequestError as exc:
            return _error(exc)
        try:
            scores = await asyncio.wrap_future(batcher.submit(parsed.texts, parsed.pairs))
        except Exception as exc:  # noqa: BLE001
            return _json({"error": _one_line(f"the model failed on this request: {type(exc).__name__}: {exc}")}, 500)
        return _json(_answer(model, parsed, scores))

    predict.__annotations__ = {"request": Request}  # (a class, not the string this module's annotations are)
    app.post("/predict", response_model=Union[PredictResponse, InferenceResponse], responses=_ERRORS,
             summary="classify texts",
             description='`{"texts": [...]}` (and `"pairs"`) answers `{"predictions": [...]}`, the rows '
                         '`contrastfit predict` writes; the Hugging Face payload `{"inputs": ...}` answers as '
                         "Hugging Face text-classification inference does: one list of `{label, score}` per input, "
                         "highest score first.")(predict)

    @app.get("/metrics", summary="Prometheus metrics", response_class=Response,
             responses={200: {"content": {"text/plain": {}}, "description": "the Prometheus text format"}})
    async def get_metrics():
        return Response(generate_latest(metrics.registry), media_type=CONTENT_TYPE_LATEST)

    _add_error_handlers(app)
    _document_predict_payloads(app)
    app.add_middleware(_Limits, options=options, metrics=metrics, paths=frozenset(r.path for r in app.routes))
    return app


def _add_error_handlers(app) -> None:
    """Every error the application answers is a one-line JSON ``{"error": ...}``: an unknown path or
    method, a request FastAPI cannot validate, and a failure of the server itself."""
    from fastapi.exceptions import RequestValidationError
    from starlette.exceptions import HTTPException

    def close_if_body(request, headers=None) -> dict[str, str]:
        headers = dict(headers or {})
        if request.headers.get("content-length", "0") != "0" or "transfer-encoding" in request.headers:
            headers["connection"] = "close"  # a body not read: no next request on this connection
        return headers

    async def http_error(request, exc):
        if exc.status_code == 404:
            message = "POST /predict" if request.method == "POST" else _PATHS
        elif exc.status_code == 405:
            message = f"{request.method} {request.url.path}: not allowed here ({_PATHS})"
        else:
            message = _one_line(exc.detail)
        return _json({"error": message}, exc.status_code, close_if_body(request, exc.headers))

    async def invalid(request, exc):
        return _json({"error": _one_line(f"a bad request: {exc.errors()}")}, 400, close_if_body(request))

    async def failed(request, exc):
        return _json({"error": _one_line(f"the server failed on this request: {type(exc).__name__}: {exc}")}, 500)

    app.add_exception_handler(HTTPException, http_error)
    app.add_exception_handler(RequestValidationError, invalid)
    app.add_exception_handler(Exception, failed)


def _document_predict_payloads(app) -> None:
    """FastAPI's schema, with the two request payloads of ``POST /predict`` (read by the server
    itself, for its one-line errors, so not from the signature)."""
    base_openapi = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            schema = base_openapi()
            components = schema.setdefault("components", {}).setdefault("schemas", {})
            refs = []
            for payload in (PredictRequest, InferenceRequest):
                spec = payload.model_json_schema(ref_template="#/components/schemas/{model}")
                components.update(spec.pop("$defs", {}))
                components[payload.__name__] = spec
                refs.append({"$ref": f"#/components/schemas/{payload.__name__}"})
            schema["paths"]["/predict"]["post"]["requestBody"] = {
                "required": True, "content": {"application/json": {"schema": {"oneOf": refs}}}}
        return app.openapi_schema

    app.openapi = openapi


# -- the server --------------------------------------------------------------------------------------


def _protocol(options: ServeOptions, metrics: _Metrics):
    """uvicorn's h11 protocol with what it does not do itself: a deadline for a connection to send its
    request (uvicorn waits without one until the first byte), the connection limit answered with a
    JSON 503 at once (uvicorn's ``limit_concurrency`` answers in plain text, and counts the new
    connection), a JSON answer, with 414 / 431 as h11 hints, to a request h11 cannot read, and the
    answer to a request whose client half-closed the connection (asyncio closes it at once else)."""
    import h11
    from uvicorn.protocols.http.h11_impl import H11Protocol

    Connection = _h11_connection(h11)

    class Protocol(H11Protocol):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self.conn = Connection(h11.SERVER, MAX_HEAD)
            self.eof = self.refused = False

        def connection_made(self, transport) -> None:
            super().connection_made(transport)
            if len(self.connections) > options.max_connections:
                self.connections.discard(self)  # (not counted while it lingers)
                self._refuse(503, f"{options.max_connections} connections are open; try again shortly")
            else:
                self._wait_for_request()

        def _wait_for_request(self) -> None:
            self._unset_keepalive_if_required()
            self.timeout_keep_alive_task = self.loop.call_later(options.timeout, self.timeout_keep_alive_handler)

        def _refuse(self, status: int, message: str) -> None:
            """Answer ``status`` and close: after the client closes its side, or REFUSED_LINGER seconds
            (what it sends meanwhile is dropped; closing with it unread would reset the connection,
            and the client could lose the answer)."""
            self.refused = True
            self._unset_keepalive_if_required()
            metrics.request("other", status)
            self.transport.write(_raw_response(status, message))
            if self.transport.can_write_eof():
                self.transport.write_eof()
            self.loop.call_later(REFUSED_LINGER, self.transport.close)

        def data_received(self, data: bytes) -> None:
            if self.refused:
                return
            super().data_received(data)
            if (not self.refused and (self.cycle is None or self.cycle.response_complete)
                    and self.timeout_keep_alive_task is None and not self.transport.is_closing()):
                self._wait_for_request()  # part of a request: the rest within the timeout

        def send_400_response(self, msg: str) -> None:
            self._refuse(*self.conn.refusal(msg))

        def eof_received(self):
            cycle = self.cycle
            if self.refused or cycle is None or cycle.response_complete:
                return None  # (closed)
            self.eof = True  # a request in progress: answered, then closed
            if cycle.more_body:  # its body ends here, short of its Content-Length (_Limits answers 400)
                cycle.more_body = False
                cycle.message_event.set()
            return True

        def on_response_complete(self) -> None:
            super().on_response_complete()
            if self.eof and not self.transport.is_closing():
                self.transport.close()

    return Protocol


def _h11_connection(h11):
    class Connection(h11.Connection):
        """h11's connection, keeping the error of a request it could not read, and refusing a request
        head over MAX_HEAD bytes also when it arrived whole (h11 refuses one only while incomplete)."""

        error: Exception | None = None

        def next_event(self):
            try:
                if self.their_state is h11.IDLE:
                    data, _ = self.trailing_data
                    end = _BLANK_LINE.search(data)  # (h11 takes "\n" line ends too)
                    if (end.start() if end else len(data)) > MAX_HEAD:
                        raise h11.RemoteProtocolError("Receive buffer too long", error_status_hint=431)
                return super().next_event()
            except h11.RemoteProtocolError as exc:
                self.error = exc
                raise

        def refusal(self, msg: str) -> tuple[int, str]:
            """The status and message answering the request it could not read (``msg``: uvicorn's words)."""
            hint = getattr(self.error, "error_status_hint", 400)
            if hint == 431:
                head, _ = self.trailing_data
                if not 0 <= head.find(b"\n") <= MAX_HEAD:
                    return 414, f"the request line is longer than {MAX_HEAD} bytes"
                return 431, f"the request line and headers are longer than {MAX_HEAD} bytes"
            if hint == 501:  # a Transfer-Encoding h11 does not read
                return 411, _CHUNKED
            return 400, _one_line(f"a malformed request: {self.error or msg}")

    return Connection


def _listen(host: str, port: int) -> socket.socket:
    sock = None
    try:
        family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM,
                                                             flags=socket.AI_PASSIVE)[0]
        sock = socket.socket(family, kind, proto)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen(128)  # a burst of clients waits instead of being refused
    except OSError as exc:  # a host name that does not resolve, an address in use or not of this machine
        if sock is not None:
            sock.close()
        raise ContrastfitError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    return sock


class ModelServer:
    """An application of :func:`make_app` on a bound socket, served by uvicorn: ``serve_forever()`` runs it
    (in the calling thread; in the main thread, SIGINT and SIGTERM stop it gracefully and are raised
    again after), ``shutdown()`` (from another thread) stops it after the requests in progress,
    ``server_close()`` closes the socket and stops the model threads. ``server_address`` is (host,
    port); ``url`` its ``http://`` address."""

    def __init__(self, app, options: ServeOptions, sock: socket.socket, log: bool = False):
        self.app, self.options, self.socket, self.log = app, options, sock, log
        self.server_address = sock.getsockname()[:2]
        self._server = None
        self._served = threading.Event()
        self._served.set()

    @property
    def batcher(self) -> _Batcher:
        return self.app.state.batcher

    @property
    def url(self) -> str:
        host, port = self.server_address
        return f"http://{f'[{host}]' if ':' in host else host}:{port}"

    def serve_forever(self) -> None:
        import uvicorn
        from uvicorn.config import LOGGING_CONFIG

        o, log_config = self.options, copy.deepcopy(LOGGING_CONFIG)
        log_config["handlers"]["access"]["stream"] = "ext://sys.stderr"  # (a line per request, on stderr)
        self._server = uvicorn.Server(uvicorn.Config(
            self.app, http=_protocol(o, self.app.state.metrics), loop="asyncio", ws="none", lifespan="on",
            timeout_keep_alive=o.keep_alive, timeout_graceful_shutdown=o.timeout,
            h11_max_incomplete_event_size=MAX_HEAD, server_header=False, backlog=128,
            log_config=log_config if self.log else None, log_level="info" if self.log else None))
        self._served.clear()
        try:
            self._server.run(sockets=[self.socket])
        finally:
            self._served.set()

    def shutdown(self, timeout: float | None = None) -> None:
        """Stop ``serve_forever`` (the requests in progress are answered first) and wait for it."""
        if self._server is not None:
            self._server.should_exit = True
        self._served.wait(timeout)

    def server_close(self) -> None:
        self.socket.close()
        self.batcher.close()


def make_server(model, options: ServeOptions | None = None, *, name: str = "", log: bool = False,
                **settings: Any) -> ModelServer:
    """A server of ``model`` on ``options.host:options.port`` (bound now; ``port=0`` picks a free port;
    not started: call ``serve_forever``) with :func:`make_app`'s application; ``options`` and the
    keywords as :func:`make_app`'s. ``log``: uvicorn's log lines (startup, one per request) on stderr."""
    require_serving()
    options = _options(options, settings)
    sock = _listen(options.host, options.port)
    try:
        app = make_app(model, options, name=name)
    except BaseException:
        sock.close()
        raise
    return ModelServer(app, options, sock, log)
