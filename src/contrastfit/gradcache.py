r"""Gradient caching: contrastive batches larger than the device's memory, for every method's loss.

A contrastive loss couples all the rows of a batch, so it cannot be split into independent
micro-batches (gradient accumulation shrinks the set of negatives and positives instead). Gradient
caching (Gao et al., *Scaling Deep Contrastive Learning Batch Size under Memory Limited Setup*,
RepL4NLP 2021) computes the *exact* gradient of the full-batch loss with the encoder's activation
memory of one chunk:

1. **Embed without a graph.** Every call of the encoder during the method's loss embeds its rows in
   chunks of ``chunk_size`` under ``torch.no_grad()``; the outputs (the pooled embedding *and* the
   token states, every floating-point field of the encoder's output) are concatenated and handed to
   the loss as leaf tensors that require a gradient. Before each chunk the random state (the CPU
   generator, and the accelerator's when the inputs are on one) is saved, together with the
   probability of every dropout site (SupCL-Seq switches it per view), the modules' training flags
   and the autocast state.
2. **Full-batch loss.** The method's whole loss runs unchanged on the full batch of embeddings:
   labels, heads, SoftTriple centres, LaCon label embeddings, DiffCSE's generator and
   discriminator take part exactly as without caching, and the loss is back-propagated by the
   caller (scaled for gradient accumulation and mixed precision as usual). The method's own
   parameters get their gradients here; the leaves get :math:`\partial L / \partial e` for every
   embedding ``e``.
3. **Replay with a graph.** For each recorded call and chunk, the random state, dropout and
   autocast of the first pass are restored, the chunk is re-encoded with a graph and
   ``torch.autograd.backward(outputs, grad_tensors=cached gradients)`` adds its share to the
   encoder's gradients. By the chain rule the sum over chunks is the full-batch gradient; since the
   replay draws the same dropout masks, it is the gradient of the very loss computed in step 2.
   Afterwards the random state is put back where step 2 left it, so the rest of training draws the
   same numbers as it would have.

Multi-process (DDP): cache locally, gather the cached embeddings
    Under ``torch.nn.parallel.DistributedDataParallel`` (what ``torchrun`` / ``accelerate launch``
    give the Trainer) each process embeds its own share in chunks without a graph; the method's loss
    gathers the cached embeddings into the global batch as it gathers live ones
    (:func:`contrastfit.distributed.gather`: the gather's backward hands each process
    ``W x dL/de`` for its own rows, the scaling convention of :mod:`contrastfit.distributed`), so the
    cached gradients are those of the **global** loss. DDP must then all-reduce the gradients once,
    after the last chunk: ``GradientCache(..., ddp=the DDP module)`` runs step 2 (the loss, through
    the DDP forward as the Trainer calls it) and every replayed chunk but the last under
    ``ddp.no_sync()``, so their gradients accumulate locally, and replays the **last** chunk through
    the DDP module's own forward (its ``module.forward`` temporarily bound to the encoder call), so
    that DDP prepares its reducer and the backward of that chunk all-reduces (averages) every
    gradient: the encoder's (the sum over chunks) and those the loss gave the method's parameters
    (DDP's ``find_unused_parameters=True``, the Trainer's setting for this model, reduces
    parameters that a backward did not reach with the gradient they hold). Inside the Trainer's own
    ``no_sync`` (gradient accumulation) the last chunk does not synchronise either, as any
    accumulation step. Tested against one process on the concatenated batch without caching
    (``tests/test_distributed.py``).

Multi-view methods (two SimCSE passes, SupCL-Seq's dropout views, supervised SimCSE's extra view
of unpaired anchors) simply make several calls, each replayed on its own. DiffCSE's masking and
generator sampling happen once, in step 2's loss, outside the encoder; the discriminator reads
the encoder's word embeddings detached, so nothing of it needs replaying. A call of the encoder
made with gradients disabled, or while no encoder parameter is trainable, runs as usual.

Conventions
    * Chunks group rows of similar length: the rows of each call are ordered by their number of
      attended tokens (longest first, ties in batch order) and cut into chunks of ``chunk_size``;
      each chunk is cut to its own longest row (the trailing columns that are padding in every
      row of the chunk are dropped). So a chunk costs what its own sentences need, not what the
      longest sentence of a large batch needs, and the widest chunk comes first (the memory peak
      is reached early, later chunks reuse it). The outputs are put back in batch order, token
      states padded back with zeros to the batch's width (the attention mask is 0 there). Every
      pooling and every method reads token states through the attention mask (pitfall 7), so
      nothing they compute changes: in float64 the gradients equal those of one unchunked pass to
      1e-6 (``tests/test_gradient_cache.py``).
    * The cached gradients have the dtype of the encoder's outputs, as the gradient flowing into
      them does without caching; no dot-product surrogate is formed (the surrogate in reduced
      precision is how cached gradients went silently wrong elsewhere: pitfall 8), the cached
      gradients are passed to autograd as they are.
    * A method whose loss reads the encoder in another way than through ``model.encoder(...)``
      calls declares ``gradient_cache = "the reason"`` (:class:`~contrastfit.methods.Method`) and
      is refused with that reason (:func:`check_gradient_cache`); there is no silent fallback.

:class:`GradientCache` is the mechanism; :func:`cached_backward` runs one batch of a
:class:`~contrastfit.modeling.ContrastiveClassifier` through it;
:class:`~contrastfit.trainer.ContrastfitTrainer` uses it in ``training_step`` when
``gradient_cache_chunk`` is set.
"""

from __future__ import annotations

import contextlib
import dataclasses
import inspect
from dataclasses import dataclass, field
from typing import Any, Iterator

import torch
from torch import nn

from .encoders import _dropout_sites
from .errors import ConfigError
from .methods.base import LossOutput

__all__ = ["GradientCache", "cached_backward", "check_gradient_cache"]


def check_gradient_cache(method: nn.Module, chunk_size: Any) -> int:
    """``chunk_size`` as an int, after checking it (>= 1) and that ``method`` supports caching;
    one-line :class:`ConfigError` otherwise."""
    if isinstance(chunk_size, bool) or not isinstance(chunk_size, int) or chunk_size < 1:
        raise ConfigError(f"gradient_cache_chunk (--gradient-cache) must be an integer >= 1 (sentences per chunk), "
                          f"got {chunk_size!r}")
    support = getattr(method, "gradient_cache", True)
    if support is not True:
        name = getattr(method, "registered_name", None) or getattr(method, "name", type(method).__name__)
        reason = support if isinstance(support, str) and support.strip() else "it does not support it"
        raise ConfigError(f"{name} cannot train with gradient caching (--gradient-cache): {reason}")
    return chunk_size


# ---------------------------------------------------------------------------------------------
# Random state of one chunk
# ---------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class _RandomState:
    cpu: torch.Tensor
    device: torch.device
    accelerator: torch.Tensor | None


def _accelerator_module(device: torch.device):
    if device.type == "cpu":
        return None
    module = getattr(torch, device.type, None)
    if module is None or not hasattr(module, "get_rng_state") or not hasattr(module, "set_rng_state"):
        raise ConfigError(f"gradient caching cannot replay dropout on device '{device.type}' "
                          "(torch exposes no random state for it)")
    return module


def _capture_random_state(device: torch.device) -> _RandomState:
    module = _accelerator_module(device)
    accel = None
    if module is not None:
        accel = module.get_rng_state(device) if device.type == "cuda" else module.get_rng_state()
    return _RandomState(torch.get_rng_state(), device, accel)


def _restore_random_state(state: _RandomState) -> None:
    torch.set_rng_state(state.cpu)
    if state.accelerator is not None:
        module = _accelerator_module(state.device)
        if state.device.type == "cuda":
            module.set_rng_state(state.accelerator, state.device)
        else:
            module.set_rng_state(state.accelerator)


# ---------------------------------------------------------------------------------------------
# Trimming a chunk's padding
# ---------------------------------------------------------------------------------------------

def _length_order(mask: torch.Tensor) -> torch.Tensor:
    """Batch indices, longest row first (length = the number of attended tokens; ties in batch
    order), so that each chunk holds rows of similar length."""
    lengths = mask.bool().sum(dim=1)
    return torch.sort(lengths, descending=True, stable=True).indices


def _trimmed_width(mask: torch.Tensor) -> int:
    """The width of a chunk without its trailing all-padding columns (at least 1)."""
    used = torch.nonzero(mask.bool().any(dim=0))
    return int(used[-1]) + 1 if used.numel() else 1


def _per_token(value: torch.Tensor, width: int | None) -> bool:
    """Whether an output field has a sequence dimension: token states (batch, width, hidden), or an
    integer (batch, width) field such as the attention mask. A floating-point 2-D field is a
    per-sentence one (the pooled embedding), whatever its width."""
    if width is None or value.dim() < 2 or value.shape[1] != width:
        return False
    return value.dim() >= 3 or not value.is_floating_point()


# ---------------------------------------------------------------------------------------------
# The cache
# ---------------------------------------------------------------------------------------------

@dataclass
class _Call:
    """One call of the encoder in the first pass: enough to replay it chunk by chunk."""

    pieces: list[dict[str, Any]]  # the inputs of each chunk (its rows, trailing padding trimmed)
    spans: list[tuple[torch.Tensor, int | None]]  # the rows (batch indices) of each chunk, its width
    states: list[_RandomState]  # the random state before each chunk
    dropout: list[Any]  # the value of every dropout site at the call
    training: list[bool]  # every module's training flag at the call
    autocast: tuple[str, bool, torch.dtype]  # (device type, enabled, dtype) at the call
    leaves: dict[str, torch.Tensor] = field(default_factory=dict)  # output field -> full-batch leaf
    per_token: set[str] = field(default_factory=set)  # output fields with a sequence dimension


class GradientCache:
    """Gradient caching for every call of ``encoder`` made inside :meth:`caching`; :meth:`backward`
    then adds the encoder's gradients. Use once per batch::

        cache = GradientCache(model.encoder, chunk_size=64)
        with cache.caching():
            loss = model.method.training_loss(model, inputs, labels).loss
        loss.backward()      # the method's own parameters, and the cached embedding gradients
        cache.backward()     # the encoder's parameters, chunk by chunk

    ``encoder`` must return a dataclass (such as :class:`~contrastfit.encoders.EncoderOutput`):
    every tensor field whose first dimension is the batch is concatenated over the chunks, and every
    floating-point one becomes a leaf that requires a gradient.

    ``ddp``: the ``DistributedDataParallel`` module wrapping the model that holds ``encoder``, in a
    multi-process run: :meth:`caching` then also turns DDP's gradient synchronisation off (the loss
    inside it must run through ``ddp``'s forward, as the Trainer's ``compute_loss`` does), and
    :meth:`backward` synchronises once, with the last chunk (the module docstring, "Multi-process").
    """

    def __init__(self, encoder: nn.Module, chunk_size: int, ddp: nn.Module | None = None):
        if isinstance(chunk_size, bool) or not isinstance(chunk_size, int) or chunk_size < 1:
            raise ConfigError(f"gradient cache chunk size must be an integer >= 1, got {chunk_size!r}")
        if ddp is not None:
            if not any(m is encoder for m in ddp.module.modules()):
                raise ValueError("the DistributedDataParallel module given does not wrap this encoder")
            if not getattr(ddp, "find_unused_parameters", False):
                raise ConfigError("gradient caching under DDP needs DistributedDataParallel(find_unused_parameters=True) "
                                  "(the Trainer's setting for this model): the last chunk's backward does not reach "
                                  "the method's parameters, whose gradients DDP must still average")
        self.encoder = encoder
        self.chunk_size = chunk_size
        self.ddp = ddp
        self.calls: list[_Call] = []
        self._sites = list(_dropout_sites(encoder))
        self._modules = list(encoder.modules())
        self._real = None
        self._signature = None

    # -- pass 1 ----------------------------------------------------------------------------------
    @contextlib.contextmanager
    def caching(self) -> Iterator["GradientCache"]:
        """Within the block, calls of the encoder are embedded in chunks without a graph and
        recorded; the encoder is restored on exit, even after an exception. With ``ddp``, the block
        runs under ``ddp.no_sync()`` (the loss's backward accumulates locally)."""
        if "forward" in self.encoder.__dict__:
            raise RuntimeError("the encoder's forward is already replaced (nested gradient caches?)")
        self._real = self.encoder.forward
        self._signature = inspect.signature(self._real)
        self.encoder.forward = self._cached_forward
        try:
            with self.ddp.no_sync() if self.ddp is not None else contextlib.nullcontext():
                yield self
        finally:
            del self.encoder.forward

    def _cached_forward(self, *args: Any, **kwargs: Any):
        inputs = dict(self._signature.bind(*args, **kwargs).arguments)
        tensors = [v for v in inputs.values() if torch.is_tensor(v) and v.dim() > 0]
        if not tensors:
            raise TypeError("gradient caching needs tensor inputs with a batch dimension")
        rows, device = tensors[0].shape[0], tensors[0].device
        if not torch.is_grad_enabled() or rows == 0 or not any(p.requires_grad for p in self.encoder.parameters()):
            return self._real(**inputs)  # no graph wanted: nothing to cache or replay
        mask = inputs.get("attention_mask")
        full = int(mask.shape[1]) if torch.is_tensor(mask) and mask.dim() == 2 and mask.shape[0] == rows else None
        call = _Call(pieces=[], spans=[], states=[],
                     dropout=[getattr(module, attr) for module, attr in self._sites],
                     training=[m.training for m in self._modules],
                     autocast=(device.type, torch.is_autocast_enabled(device.type), torch.get_autocast_dtype(device.type)))
        order = _length_order(mask) if full is not None else torch.arange(rows, device=device)
        template, buffers = None, {}
        for start in range(0, rows, self.chunk_size):
            idx = order[start:start + self.chunk_size]
            width = _trimmed_width(mask[idx]) if full is not None else None
            piece = {}
            for key, value in inputs.items():
                if torch.is_tensor(value) and value.dim() > 0 and value.shape[0] == rows:
                    value = value[idx]
                    if width is not None and value.dim() >= 2 and value.shape[1] == full:
                        value = value[:, :width]
                piece[key] = value
            call.pieces.append(piece)
            call.spans.append((idx, width or full))
            call.states.append(_capture_random_state(device))
            with torch.no_grad():
                out = self._real(**piece)
            if template is None:
                if not dataclasses.is_dataclass(out):
                    raise TypeError(f"gradient caching needs the encoder to return a dataclass, got {type(out).__name__}")
                template = out
                for f in dataclasses.fields(out):
                    value = getattr(out, f.name)
                    if torch.is_tensor(value) and value.dim() > 0 and value.shape[0] == len(idx):
                        if full is not None and _per_token(value, width):
                            call.per_token.add(f.name)
                            buffers[f.name] = value.new_zeros((rows, full, *value.shape[2:]))
                        else:
                            buffers[f.name] = value.new_empty((rows, *value.shape[1:]))
            for name, buffer in buffers.items():
                value = getattr(out, name)
                if name in call.per_token:
                    buffer[idx, :value.shape[1]] = value
                else:
                    buffer[idx] = value
            del out
        for name, buffer in buffers.items():
            if buffer.is_floating_point():
                buffer.requires_grad_(True)
                call.leaves[name] = buffer
        self.calls.append(call)
        return dataclasses.replace(template, **buffers)

    # -- pass 2 ----------------------------------------------------------------------------------
    def _set_state(self, dropout: list[Any], training: list[bool]) -> None:
        for (module, attr), value in zip(self._sites, dropout):
            setattr(module, attr, value)
        for module, flag in zip(self._modules, training):
            module.training = flag

    def backward(self) -> None:
        """Re-encode every recorded chunk with a graph and back-propagate its cached gradients
        (call after the loss's own backward). Leaves without a gradient (outputs the loss did not
        read) are skipped, and a call none of whose outputs was read is not re-encoded. With
        ``ddp``: every chunk but the last under ``ddp.no_sync()``, the last through ``ddp``'s
        forward, so that its backward all-reduces every gradient once."""
        if not self.calls:
            return
        end_state = _capture_random_state(self.calls[0].states[0].device)  # where the first pass left it
        now_dropout = [getattr(module, attr) for module, attr in self._sites]
        now_training = [m.training for m in self._modules]
        ddp = self.ddp
        syncing = ddp is not None and bool(getattr(ddp, "require_backward_grad_sync", True))
        try:
            work = []  # (call, its cached gradients by output field, chunk number)
            for call in self.calls:
                grads = {name: leaf.grad for name, leaf in call.leaves.items() if leaf.grad is not None}
                call.leaves = {}  # release the full-batch embeddings before re-encoding
                if grads:
                    work += [(call, grads, k) for k in range(len(call.pieces))]
            if not work and syncing:
                _average_gradients(ddp)  # nothing to replay: DDP never saw a synchronising backward
            current = None
            with torch.enable_grad():
                for i, (call, grads, k) in enumerate(work):
                    if call is not current:
                        self._set_state(call.dropout, call.training)
                        current = call
                    (idx, width), piece = call.spans[k], call.pieces[k]
                    names = list(grads)
                    _restore_random_state(call.states[k])
                    device_type, enabled, dtype = call.autocast
                    last = i == len(work) - 1
                    with ddp.no_sync() if ddp is not None and not last else contextlib.nullcontext():
                        with torch.autocast(device_type, dtype=dtype, enabled=enabled):
                            if ddp is not None and last:
                                outputs = self._through_ddp(piece, names)
                            else:
                                out = self.encoder(**piece)
                                outputs = [getattr(out, name) for name in names]
                                del out
                        pairs = [(t, grads[name][idx, :width] if name in call.per_token else grads[name][idx])
                                 for name, t in zip(names, outputs)]
                        pairs = [(t, g) for t, g in pairs if t.requires_grad]
                        if pairs:
                            torch.autograd.backward([t for t, _ in pairs], grad_tensors=[g for _, g in pairs])
                    del outputs, pairs
        finally:
            self._set_state(now_dropout, now_training)
            _restore_random_state(end_state)
            self.calls = []

    def _through_ddp(self, piece: dict[str, Any], names: list[str]) -> tuple[torch.Tensor, ...]:
        """The encoder's ``names`` outputs for ``piece``, computed by a call of the DDP module whose
        wrapped module's ``forward`` is, for this call, the encoder call: DDP prepares its reducer
        (unless inside ``no_sync``) and the backward of these outputs synchronises the gradients."""
        module = self.ddp.module
        saved = module.__dict__.get("forward")  # e.g. accelerate's mixed-precision wrapper
        encoder = self.encoder
        module.forward = lambda **kw: tuple(getattr(encoder(**kw), name) for name in names)
        try:
            return self.ddp(**piece)
        finally:
            if saved is None:
                del module.forward
            else:
                module.forward = saved


def _average_gradients(ddp: nn.Module) -> None:
    """DDP's average of every trainable parameter's gradient over the processes, by hand (for a batch
    whose loss read no cached embedding, so that no chunk was replayed through DDP)."""
    import torch.distributed as dist

    world = dist.get_world_size()
    for param in ddp.module.parameters():
        if param.requires_grad:
            grad = param.grad if param.grad is not None else torch.zeros_like(param)
            dist.all_reduce(grad)
            param.grad = grad.div_(world)


def cached_backward(model: nn.Module, inputs: dict[str, torch.Tensor], labels: torch.Tensor, chunk_size: int,
                    *, scale: float = 1.0, ddp: nn.Module | None = None):
    """Back-propagate ``scale`` times the method's loss on one batch of ``model`` (a
    :class:`~contrastfit.modeling.ContrastiveClassifier` in training mode) with gradient caching in
    chunks of ``chunk_size`` rows; gradients accumulate in ``.grad`` as ``loss.backward()`` would
    leave them. With ``ddp`` (a ``DistributedDataParallel`` wrapping ``model``, with
    ``find_unused_parameters=True``), the loss runs through ``ddp``'s forward and the gradients are
    averaged over the processes once, as DDP does for an uncached step. Returns the method's
    :class:`~contrastfit.methods.LossOutput` (its loss detached)."""
    check_gradient_cache(model.method, chunk_size)
    cache = GradientCache(model.encoder, chunk_size, ddp=ddp)
    with cache.caching():
        if ddp is None:
            out = model.method.training_loss(model, inputs, labels)
        else:
            res = ddp(**inputs, labels=labels)
            out = LossOutput(loss=res.loss, logits=res.logits, parts=dict(res.loss_parts or {}))
    (out.loss * scale).backward()
    cache.backward()
    out.loss = out.loss.detach()
    return out
