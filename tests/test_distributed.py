"""Multi-process (gloo, 2 CPU processes) behaviour of contrastfit.distributed: the global batch, its
gradients and the scaling convention, against one process holding the concatenated batch; gradient
caching through a real DistributedDataParallel; the cross-batch memory on every process.

Starting a process costs far more than what it computes here (imports), so every 2-process check of
this module runs in **one** spawn (:func:`two_processes`, module-scoped), and each test asserts on
its part of the result (CI budget)."""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from contrastfit.distributed import gather, gather_views, world

WORLD = 2


def _spawn(fn, tmp_path: Path, *args) -> list[dict]:
    """Run ``fn(rank, tmp_path, *args)`` in 2 gloo processes; each returns a JSON-able dict."""
    mp.spawn(_entry, args=(fn, str(tmp_path), args), nprocs=WORLD, join=True)
    return [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(WORLD)]


def _entry(rank: int, fn, folder: str, args) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{folder}/pg", rank=rank, world_size=WORLD)
    try:
        out = fn(rank, *args)
    finally:
        dist.destroy_process_group()
    Path(folder, f"rank{rank}.json").write_text(json.dumps(out))


TEXTS = ["good great film", "bad awful plot", "superb fun story", "dull weak movie",
         "fine good actor", "boring bad story", "great fun plot", "awful dull film", "a very good story"]
LABELS = [1, 0, 1, 0, 1, 0, 1, 0, 1]

#: (id, method, hyper-parameters, rows per process): the 2-process step against the 1-process step on
#: the concatenated rows. Methods with a per-process cross-entropy term need equal shares (DDP's mean of
#: the processes' means is then the global mean); the others also run on uneven shares (4 + 5).
STEP_CASES = [
    ("ce-scl", "ce-scl", {}, (4, 4)),
    ("simcse-unsup", "simcse-unsup", {}, (4, 4)),
    ("self-supervised-cl", "self-supervised-cl", {}, (4, 5)),
    ("supcl-seq", "supcl-seq", {}, (4, 5)),
    ("simcse-sup", "simcse-sup", {}, (4, 4)),
    # class 1 has 5 rows: its unpaired anchor (row 8) is on process 1 only; process 0 re-encodes nothing
    ("simcse-sup-augmented", "simcse-sup", {"augmented": True}, (4, 5)),
    ("lacon", "lacon", {"heads": 4}, (4, 5)),
    ("lacon-fusion", "lacon-fusion", {"heads": 4}, (4, 4)),
    ("ce-supcon", "ce-supcon", {}, (4, 4)),
    ("ce-softtriple-pooled", "ce-softtriple", {"centers_per_class": 3, "dml_on": "pooled"}, (4, 4)),
]
#: Gradient caching under a real DistributedDataParallel, chunks of 3 (which divide neither share).
CACHE_CHUNK = 3
CACHED_CASES = [
    ("ce-scl", "ce-scl", {}, (4, 4)),
    ("lacon-fusion", "lacon-fusion", {"heads": 4}, (4, 5)),  # token states cached, label embeddings
    ("simcse-sup-augmented", "simcse-sup", {"augmented": True}, (4, 5)),  # an extra call on one process only
]
#: Gradient accumulation over two batches with caching under DDP, as the Trainer runs it (the first
#: batch inside ``ddp.no_sync()``): rows of each global batch, split evenly between the processes.
ACCUMULATED = [list(range(8)), [1, 2, 5, 6]]
#: The cross-batch memory: three global batches (two rows per process), a memory of 6 rows that is
#: full from the third batch on.
MEMORY_SIZE = 6
MEMORY_BATCHES = [[0, 1, 2, 3], [4, 5, 6, 7], [1, 2, 5, 6]]


def _shares(sizes: tuple[int, int]) -> list[list[int]]:
    return [list(range(sum(sizes[:r]), sum(sizes[:r + 1]))) for r in range(WORLD)]


def _model(model_dir: str, method: str, hparams: dict, *, train: bool = False, seed: int = 0):
    """A float64 model with the same initial weights in every process. ``train``: training mode with
    every dropout at 0 (so that two processes and one compute the same thing); else eval mode."""
    from contrastfit import ContrastiveClassifier
    from contrastfit.encoders import _dropout_sites

    torch.manual_seed(seed)
    model = ContrastiveClassifier.from_encoder(model_dir, method, ["neg", "pos"], hparams=hparams, pooling="mean")
    model.double()
    if not train:
        return model.eval()
    for module, attr in _dropout_sites(model):
        setattr(module, attr, 0.0)
    return model.train()


def _inputs(model, rows: list[int]):
    enc = model.tokenize([TEXTS[i] for i in rows], padding=True)
    return {k: torch.as_tensor(v) for k, v in enc.items()}, torch.tensor([LABELS[i] for i in rows])


def _grads(model) -> dict[str, torch.Tensor]:
    return {n: p.grad.detach().clone() for n, p in model.named_parameters() if p.grad is not None}


def _step(model_dir: str, method: str, hparams: dict, rows: list[int], *, train: bool = False):
    """One training step's loss and parameter gradients of ``method`` on ``rows``, uncached."""
    model = _model(model_dir, method, hparams, train=train)
    inputs, labels = _inputs(model, rows)
    loss = model.method.training_loss(model, inputs, labels).loss
    loss.backward()
    return float(loss.detach()), _grads(model)


def _mean_over_processes(value: float) -> float:
    values = [torch.zeros(1, dtype=torch.float64) for _ in range(WORLD)]
    dist.all_gather(values, torch.tensor([value], dtype=torch.float64))
    return sum(float(v) for v in values) / WORLD


def _ddp_step(rank: int, model_dir: str, method: str, hparams: dict, sizes) -> dict:
    loss, grads = _step(model_dir, method, hparams, _shares(sizes)[rank])
    for g in grads.values():  # what DistributedDataParallel does with every gradient: the mean over processes
        dist.all_reduce(g)
        g /= WORLD
    return {"loss": _mean_over_processes(loss), "grads": {n: g.tolist() for n, g in grads.items()}}


def _cached_ddp_step(rank: int, model_dir: str, method: str, hparams: dict, sizes) -> dict:
    """A real ``DistributedDataParallel`` (``find_unused_parameters=True``, as the Trainer wraps this
    model) and a gradient-cached step (``contrastfit.gradcache.cached_backward``): DDP averages."""
    from torch.nn.parallel import DistributedDataParallel

    from contrastfit.gradcache import cached_backward

    model = _model(model_dir, method, hparams, train=True)
    ddp = DistributedDataParallel(model, find_unused_parameters=True)
    inputs, labels = _inputs(model, _shares(sizes)[rank])
    out = cached_backward(model, inputs, labels, CACHE_CHUNK, ddp=ddp)
    return {"loss": _mean_over_processes(float(out.loss)), "grads": {n: g.tolist() for n, g in _grads(model).items()}}


def _accumulated(model_dir: str, rank: int | None) -> dict:
    """``ce-scl``, two batches of :data:`ACCUMULATED` accumulated into one step (each loss scaled by 1/2,
    the Trainer's rule). ``rank`` None: one process, uncached, whole batches. Otherwise a real
    ``DistributedDataParallel`` and gradient caching (chunks of 3), the first batch under the DDP
    module's ``no_sync()`` as the Trainer's accumulation runs it: only the second batch's last chunk
    synchronises, and it must average what both batches accumulated."""
    from torch.nn.parallel import DistributedDataParallel

    from contrastfit.gradcache import cached_backward

    model = _model(model_dir, "ce-scl", {}, train=True)
    ddp = None if rank is None else DistributedDataParallel(model, find_unused_parameters=True)
    loss = 0.0
    for k, rows in enumerate(ACCUMULATED):
        share = rows if rank is None else rows[rank * len(rows) // 2:(rank + 1) * len(rows) // 2]
        inputs, labels = _inputs(model, share)
        if ddp is None:
            step = model.method.training_loss(model, inputs, labels).loss / len(ACCUMULATED)
            step.backward()
            loss += float(step.detach())
            continue
        with ddp.no_sync() if k < len(ACCUMULATED) - 1 else contextlib.nullcontext():
            out = cached_backward(model, inputs, labels, CACHE_CHUNK, scale=1 / len(ACCUMULATED), ddp=ddp)
        loss += float(out.loss) / len(ACCUMULATED)
    return {"loss": loss if rank is None else _mean_over_processes(loss), "grads": _grads(model)}


def _memory_steps(model_dir: str, rank: int | None) -> dict:
    """``ce-scl`` with a cross-batch memory over :data:`MEMORY_BATCHES`: each step's loss (the mean over
    processes) and the rows the memory holds after it. ``rank`` None: one process, whole batches."""
    from contrastfit.memory import attach_memory

    model = _model(model_dir, "ce-scl", {})
    memory = attach_memory(model, MEMORY_SIZE)
    losses, held = [], []
    for batch in MEMORY_BATCHES:
        rows = batch if rank is None else batch[rank * 2:rank * 2 + 2]
        inputs, labels = _inputs(model, rows)
        with torch.no_grad():
            loss = float(model.method.training_loss(model, inputs, labels).loss)
        losses.append(loss if rank is None else _mean_over_processes(loss))
        embeddings, ys = memory.held()
        held.append({"embeddings": embeddings.tolist(), "labels": ys.tolist(), "full": memory.full})
    return {"losses": losses, "held": held}


def _gather_rows(rank: int, sizes: tuple[int, int]) -> dict:
    torch.manual_seed(0)
    full = torch.randn(sum(sizes), 3, dtype=torch.float64)
    labels = torch.arange(sum(sizes)) % 3
    start = sum(sizes[:rank])
    mine = slice(start, start + sizes[rank])
    x = full[mine].clone().requires_grad_(True)
    g = gather(x, labels[mine])
    weights = torch.arange(1.0, 1.0 + full.numel(), dtype=torch.float64).view_as(full)
    # each rank: a term on its own rows of the global batch, and one on every row
    loss = (g.embeddings * weights)[g.local].sum() + 0.5 * (g.embeddings ** 2).sum()
    loss.backward()
    return {"emb": g.embeddings.tolist(), "labels": g.labels.tolist(), "local": g.local.tolist(),
            "offset": g.offset, "grad": x.grad.tolist(), "world": list(world())}


def _local_only(rank: int) -> dict:
    """The old behaviour (each process's contrastive term on its own rows) differs: a check that the
    step tests can fail."""
    from contrastfit.losses import supcon

    torch.manual_seed(1)
    z = torch.randn(8, 4, dtype=torch.float64)
    labels = torch.tensor(LABELS[:8])
    mine = slice(rank * 4, rank * 4 + 4)
    (views,), y = gather_views([z[mine]], labels[mine])
    return {"global": float(supcon(views, y, 0.1)), "local": float(supcon(z[mine], labels[mine], 0.1)),
            "full": float(supcon(z, labels, 0.1))}


GATHER_SIZES = {"even": (3, 3), "uneven-last-batch": (3, 2)}


def _suite(rank: int, model_dir: str) -> dict:
    """Everything this module checks on 2 processes, in one spawn."""
    return {
        "gather": {name: _gather_rows(rank, sizes) for name, sizes in GATHER_SIZES.items()},
        "global_local": _local_only(rank),
        "steps": {case: _ddp_step(rank, model_dir, method, hp, sizes) for case, method, hp, sizes in STEP_CASES},
        "cached": {case: _cached_ddp_step(rank, model_dir, method, hp, sizes)
                   for case, method, hp, sizes in CACHED_CASES},
        "accumulated": {k: ({n: g.tolist() for n, g in v.items()} if k == "grads" else v)
                        for k, v in _accumulated(model_dir, rank).items()},
        "memory": _memory_steps(model_dir, rank),
    }


@pytest.fixture(scope="module")
def two_processes(tmp_path_factory, tiny_encoder_dir) -> list[dict]:
    return _spawn(_suite, tmp_path_factory.mktemp("two-processes"), str(tiny_encoder_dir))


@pytest.mark.parametrize("name", list(GATHER_SIZES))
def test_gather_concatenates_in_rank_order_and_sums_gradients(two_processes, name):
    sizes = GATHER_SIZES[name]
    torch.manual_seed(0)
    full = torch.randn(sum(sizes), 3, dtype=torch.float64)
    weights = torch.arange(1.0, 1.0 + full.numel(), dtype=torch.float64).view_as(full)
    for rank, res in enumerate(r["gather"][name] for r in two_processes):
        assert res["world"] == [rank, WORLD]
        # the padding of the shorter share is gone: exactly the concatenated batch
        assert torch.allclose(torch.tensor(res["emb"], dtype=torch.float64), full)
        assert res["labels"] == (torch.arange(sum(sizes)) % 3).tolist()
        start = sum(sizes[:rank])
        assert res["offset"] == start
        assert res["local"] == [start <= i < start + sizes[rank] for i in range(sum(sizes))]
        # d/dx of (own-rows term on the owner) + (0.5 |e|^2 on each of the 2 ranks): summed to the owner
        rows = slice(start, start + sizes[rank])
        expected = weights[rows] + WORLD * full[rows]
        assert torch.allclose(torch.tensor(res["grad"], dtype=torch.float64), expected)


def _assert_equal_step(res: dict, loss: float, grads: dict[str, torch.Tensor]) -> None:
    assert res["loss"] == pytest.approx(loss, abs=1e-5)
    assert set(res["grads"]) == set(grads)
    for name, g in grads.items():
        assert torch.allclose(torch.tensor(res["grads"][name], dtype=torch.float64), g, atol=1e-5), name


@pytest.mark.parametrize("case,method,hparams,sizes", STEP_CASES, ids=[c[0] for c in STEP_CASES])
def test_two_process_step_equals_one_process_step_on_the_concatenated_batch(two_processes, tiny_encoder_dir,
                                                                            case, method, hparams, sizes):
    """Loss (mean over processes) and every parameter's gradient (averaged as DDP does) of a 2-process
    step equal those of one process on the concatenated rows, to 1e-5."""
    loss, grads = _step(str(tiny_encoder_dir), method, hparams, list(range(sum(sizes))))
    assert any(n.startswith("encoder.") for n in grads)
    for res in two_processes:
        _assert_equal_step(res["steps"][case], loss, grads)


@pytest.mark.parametrize("case,method,hparams,sizes", CACHED_CASES, ids=[c[0] for c in CACHED_CASES])
def test_cached_two_process_step_equals_uncached_one_process_step(two_processes, tiny_encoder_dir,
                                                                  case, method, hparams, sizes):
    """Gradient caching under DistributedDataParallel (cache locally, gather the cached embeddings,
    all-reduce once with the last chunk), chunks that divide neither share: the same loss and
    gradients as one uncached process on the concatenated batch. Without DDP's synchronisation each
    process would keep its own (different) gradients, and the two would not both match."""
    loss, grads = _step(str(tiny_encoder_dir), method, hparams, list(range(sum(sizes))), train=True)
    for res in two_processes:
        _assert_equal_step(res["cached"][case], loss, grads)


def test_cached_two_process_steps_accumulate_like_one_process(two_processes, tiny_encoder_dir):
    """Gradient accumulation (the Trainer's ``no_sync`` around all batches but the last) composes with
    caching under DDP: one synchronisation, with the last batch's last chunk, averages the gradients
    of both batches."""
    expected = _accumulated(str(tiny_encoder_dir), None)
    for res in two_processes:
        _assert_equal_step(res["accumulated"], expected["loss"], expected["grads"])


def test_the_global_term_is_the_full_batch_term_and_the_local_one_is_not(two_processes):
    for res in (r["global_local"] for r in two_processes):
        assert res["global"] == pytest.approx(res["full"], abs=1e-12)
        assert abs(res["local"] - res["full"]) > 1e-3


def test_two_process_memories_stay_equal_and_match_one_process(two_processes, tiny_encoder_dir):
    """Every process enqueues the gathered global batch: the memories are equal row for row on both
    processes and to the memory of one process fed the concatenated batches; so are the losses,
    including the step that contrasts with the (full) memory."""
    one = _memory_steps(str(tiny_encoder_dir), None)
    first, second = (r["memory"] for r in two_processes)
    assert [h["full"] for h in one["held"]] == [False, True, True]
    for step, expected in enumerate(one["held"]):
        assert first["held"][step] == second["held"][step]  # identical, not merely close
        assert first["held"][step]["labels"] == expected["labels"]
        assert torch.allclose(torch.tensor(first["held"][step]["embeddings"]), torch.tensor(expected["embeddings"]),
                              atol=1e-10)
    # (the cross-entropy term computes in float32: Method.task_loss)
    assert first["losses"] == pytest.approx(one["losses"], abs=1e-6)
    assert second["losses"] == pytest.approx(one["losses"], abs=1e-6)


def test_single_process_is_the_identity():
    x = torch.randn(4, 2, requires_grad=True)
    labels = torch.tensor([0, 1, 0, 1])
    g = gather(x, labels)
    assert g.embeddings is x and g.labels is labels and bool(g.local.all()) and g.offset == 0
    assert world() == (0, 1)
    (v,), y = gather_views([x], labels)
    assert v is x and y is labels


#: The torchrun runs' training options besides the data, model and output. ``trained``: a kept model that
#: has moved from the pretrained one (every step kept, no warm-up, a rate that moves the tiny encoder in 4
#: steps: with model selection this toy set's best step is often the first, taken at the warm-up's
#: learning rate of 0), the rows still split for validation; ``cached-memory``: one epoch with model
#: selection (the Trainer loads the best checkpoint on every process), gradient caching and a memory.
TORCHRUN_RUNS = {
    "trained": ["--min-steps", "4", "--warmup-ratio", "0", "--learning-rate", "1e-3", "--no-select-best",
                "--validation-split", "0.1"],
    "cached-memory": ["--epochs", "1", "--min-steps", "6", "--gradient-cache", "3", "--memory-size", "16"],
}


def _torchrun_train(launches: list[list[str]], data: Path, model_dir: Path, out: Path, options: list[str],
                    timeout: float = 600) -> list[tuple[int, str, str]]:
    """``torchrun LAUNCH -m contrastfit train ...`` (``ce-scl``, 8 rows a process, on the CPU), one launch
    per item of ``launches`` (the launcher's options), all started at once (the nodes of one run):
    ``(returncode, stdout, stderr)`` of each."""
    import subprocess
    import sys

    train = ["-m", "contrastfit", "train", "--data", str(data), "--text-column", "sentence", "--label-column",
             "sentiment", "--model", str(model_dir), "--method", "ce-scl", "--batch-size", "8", "--output", str(out),
             "--quiet", "--cpu", *options]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    procs = [subprocess.Popen([sys.executable, "-m", "torch.distributed.run", *launch, *train], env=env, text=True,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE) for launch in launches]
    try:
        outputs = [proc.communicate(timeout=timeout) for proc in procs]
    finally:
        for proc in procs:  # a launch left waiting for its peer (the other failed) is not left behind
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
    return [(proc.returncode, *output) for proc, output in zip(procs, outputs)]


def _failure(stderr: str) -> str:
    return "\n".join(l for l in stderr.splitlines() if "contrastfit" in l or "Error" in l)[-3000:]


@pytest.fixture(scope="module")
def toy_csv(tmp_path_factory) -> Path:
    from conftest import write_sentiment_csv

    return write_sentiment_csv(tmp_path_factory.mktemp("toy") / "toy.csv")


@pytest.fixture(scope="module")
def one_node_run(tmp_path_factory, tiny_encoder_dir, toy_csv) -> tuple[Path, int, str, str]:
    """``torchrun --standalone --nproc-per-node 2`` of the ``trained`` options, once for the module: the
    run the save-and-reload test checks and the one the two-node run must equal."""
    out = tmp_path_factory.mktemp("one-node") / "run"
    (result,) = _torchrun_train([["--standalone", "--nproc-per-node", "2"]], toy_csv, tiny_encoder_dir, out,
                                TORCHRUN_RUNS["trained"])
    return (out, *result)


@pytest.mark.parametrize("case", list(TORCHRUN_RUNS))
def test_torchrun_two_processes_train_save_once_and_reload(request, tmp_path, tiny_encoder_dir, toy_csv, case):
    """``torchrun --nproc-per-node 2 -m contrastfit train``: gloo on 2 CPU processes, the global-batch
    SupCon term, as users run it, and with gradient caching (the Trainer's DDP wrapping, ``no_sync`` and the last chunk
    through the DDP forward) and a cross-batch memory (attached while training, on every process);
    one model written by rank 0, without the memory, which reloads with the predictions the run
    evaluated."""
    from contrastfit import ContrastiveClassifier
    from contrastfit.evaluation import evaluate_model
    from contrastfit.data import data_hash
    from contrastfit.config import TrainConfig, prepare_data

    if case == "trained":
        out, returncode, stdout, stderr = request.getfixturevalue("one_node_run")
    else:
        out = tmp_path / "run"
        ((returncode, stdout, stderr),) = _torchrun_train([["--standalone", "--nproc-per-node", "2"]], toy_csv,
                                                          tiny_encoder_dir, out, TORCHRUN_RUNS[case])
    assert returncode == 0, _failure(stderr)
    assert stdout.count(f"saved to {out}") == 1  # the first process writes and reports
    record = json.loads((out / "results.json").read_text())
    assert record["training"]["world_size"] == 2  # from the Trainer: each process alone would say 1
    if case == "cached-memory":
        assert record["training"]["gradient_cache_chunk"] == 3 and record["training"]["memory_size"] == 16
        assert record["training"]["steps"] >= 2  # the memory (16 = one global batch) was used from step 2 on
    assert not list(out.parent.glob(".run.*"))  # no second writer's leftovers
    from safetensors.torch import load_file

    assert not [k for k in load_file(str(out / "head.safetensors")) if "memory" in k]
    model = ContrastiveClassifier.from_pretrained(out)
    # the same validation split as the run (the file is split with the run's seed)
    held_out = prepare_data(TrainConfig(data=str(toy_csv), text_column="sentence", label_column="sentiment",
                                    model=str(tiny_encoder_dir), method="ce-scl", output=str(tmp_path / "x"))).validation
    assert record["data"]["validation_hash"] == data_hash(held_out)
    again = evaluate_model(model, held_out)
    assert again["accuracy"] == pytest.approx(record["metrics"]["validation"]["accuracy"])
    assert again["confusion_matrix"] == record["metrics"]["validation"]["confusion_matrix"]


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_torchrun_two_nodes_train_the_one_node_model(tmp_path, tiny_encoder_dir, toy_csv, one_node_run):
    """Two "nodes" on this machine: two torchrun launches (``--nnodes 2 --nproc-per-node 1``, the c10d
    rendezvous at 127.0.0.1, gloo between them), as docs/how-to/gpus.md shows for two machines. The global batch
    is the one of one node with two processes (the sampler's batches go to global ranks 0 and 1 in turn),
    and so is everything computed on it: the SupCon term over the rows gathered across the nodes, DDP's
    average of the gradients. So the model equals the one-node run's, weight for weight (to 1e-6), and
    has moved from the pretrained encoder (the equality is not that of two untrained models); exactly one
    process of the two launches writes it. (That a 2-process step equals one process's step on the
    concatenated batch is the step tests' part, above.)"""
    from safetensors.torch import load_file

    one_out, returncode, _, stderr = one_node_run
    assert returncode == 0, _failure(stderr)
    port = _free_port()
    launch = ["--nnodes", "2", "--nproc-per-node", "1", "--rdzv-backend", "c10d", "--rdzv-endpoint",
              f"127.0.0.1:{port}", "--rdzv-id", "two-nodes", "--local-addr", "127.0.0.1"]
    # which launch hosts the rendezvous store: said here, as both run on the endpoint's host (on two
    # machines, torchrun infers it from the endpoint's address)
    out = tmp_path / "run"
    results = _torchrun_train([[*launch, "--rdzv-conf", f"is_host={int(node == 0)}"] for node in range(2)],
                              toy_csv, tiny_encoder_dir, out, TORCHRUN_RUNS["trained"])
    for node, (code, _, err) in enumerate(results):
        assert code == 0, f"node {node}: {_failure(err)}"
    assert sum(stdout.count(f"saved to {out}") for _, stdout, _ in results) == 1  # global rank 0 alone writes
    one, two = (json.loads((folder / "results.json").read_text())["training"] for folder in (one_out, out))
    assert two["world_size"] == one["world_size"] == 2 and two["steps"] == one["steps"] >= 4
    assert two["train_loss"] == pytest.approx(one["train_loss"], abs=1e-6)
    pretrained = load_file(str(tiny_encoder_dir / "model.safetensors"))
    for name in ("encoder/model.safetensors", "head.safetensors"):
        expected, got = load_file(str(one_out / name)), load_file(str(out / name))
        assert set(got) == set(expected), name
        for key, weight in expected.items():
            assert torch.allclose(got[key], weight, rtol=0, atol=1e-6), f"{name}: {key}"
    trained = load_file(str(out / "encoder/model.safetensors"))
    assert max(float((trained[k] - pretrained[k]).abs().max()) for k in pretrained) > 1e-3


def test_experiments_refuse_a_multi_process_launch(monkeypatch, tmp_path):
    from contrastfit.errors import ConfigError
    from contrastfit.experiments.config import load_config
    from contrastfit.experiments.runner import run_experiment

    cfg = tmp_path / "exp.yaml"
    cfg.write_text(f"name: x\ndata: mr\nmethods: [ce]\noutput: {tmp_path / 'out'}\n")
    monkeypatch.setenv("WORLD_SIZE", "2")
    with pytest.raises(ConfigError, match="experiments run in one process"):
        run_experiment(load_config(cfg))
    assert not (tmp_path / "out").exists()


def test_balanced_batches_shard_into_distinct_valid_shares_per_process():
    """Under DDP the Trainer's ``accelerator.prepare`` hands whole batches of our sampler to the processes
    in turn (accelerate's ``BatchSamplerShard``): each process's share is one of the sampler's batches,
    so it has positives, the shares of one global batch are disjoint, and everything repeats per seed
    and epoch."""
    from accelerate.data_loader import BatchSamplerShard

    from contrastfit.data import ClassBalancedBatchSampler

    labels = [0] * 40 + [1] * 20 + [2] * 12
    def shares(epoch: int) -> list[list[list[int]]]:
        sampler = ClassBalancedBatchSampler(labels, 8, seed=3)
        sampler.set_epoch(epoch)
        return [list(BatchSamplerShard(sampler, num_processes=WORLD, process_index=r)) for r in range(WORLD)]

    first = shares(0)
    assert first == shares(0) and first != shares(1)
    for step in range(min(len(s) for s in first)):
        rows = [first[r][step] for r in range(WORLD)]
        assert not set(rows[0]) & set(rows[1])  # distinct shares of the global batch
        for share in rows:  # each share alone has a positive pair
            ys = [labels[i] for i in share]
            assert len(set(ys)) < len(ys)


def test_more_processes_than_gpus_is_a_one_line_error(monkeypatch):
    """Two processes on one GPU fail inside NCCL's first collective ("invalid usage"): refused up front,
    naming both counts; with --cpu (or without CUDA) they run on gloo."""
    from contrastfit.distributed import cpu_processes
    from contrastfit.errors import ConfigError

    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    with pytest.raises(ConfigError, match=r"^2 processes were launched but only 1 GPU\(s\) are visible.*--cpu") as err:
        cpu_processes(False)
    assert "\n" not in str(err.value)
    assert cpu_processes(True) is True
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    assert cpu_processes(False) is False
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert cpu_processes(False) is True


def test_a_multi_node_launch_needs_a_gpu_per_process_of_each_machine(monkeypatch):
    """``torchrun --nnodes 2 --nproc-per-node 4`` on two machines of 4 GPUs: 8 processes in all
    (``WORLD_SIZE``), 4 on each machine (``LOCAL_WORLD_SIZE``): NCCL, one GPU each, not refused for
    having fewer GPUs than the whole run has processes; 4 processes on a machine of 2 GPUs are."""
    from contrastfit.distributed import cpu_processes, local_processes
    from contrastfit.errors import ConfigError

    monkeypatch.setenv("WORLD_SIZE", "8")
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "4")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 4)
    assert local_processes() == 4 and cpu_processes(False) is False
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    with pytest.raises(ConfigError, match=r"^4 processes were launched but only 2 GPU\(s\) are visible"):
        cpu_processes(False)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert cpu_processes(False) is True  # gloo across the machines
