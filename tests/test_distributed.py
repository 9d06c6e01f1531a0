"""Multi-process (gloo, 2 CPU processes) behaviour of contrastfit.distributed: the global batch, its
gradients and the scaling convention, against one process holding the concatenated batch."""

from __future__ import annotations

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


@pytest.mark.parametrize("sizes", [(3, 3), (3, 2)], ids=["even", "uneven-last-batch"])
def test_gather_concatenates_in_rank_order_and_sums_gradients(tmp_path, sizes):
    out = _spawn(_gather_rows, tmp_path, sizes)
    torch.manual_seed(0)
    full = torch.randn(sum(sizes), 3, dtype=torch.float64)
    weights = torch.arange(1.0, 1.0 + full.numel(), dtype=torch.float64).view_as(full)
    for rank, res in enumerate(out):
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


TEXTS = ["good great film", "bad awful plot", "superb fun story", "dull weak movie",
         "fine good actor", "boring bad story", "great fun plot", "awful dull film"]
LABELS = [1, 0, 1, 0, 1, 0, 1, 0]


def _step(model_dir: str, method: str, rows: list[int], seed: int = 0) -> tuple[float, dict[str, torch.Tensor]]:
    """One training step's loss and parameter gradients of ``method`` on ``rows`` (float64, dropout
    off so that two processes and one see the same embeddings)."""
    from contrastfit import ContrastiveClassifier

    torch.manual_seed(seed)
    model = ContrastiveClassifier.from_encoder(model_dir, method, ["neg", "pos"], pooling="mean").double().eval()
    enc = model.tokenize([TEXTS[i] for i in rows], padding=True)
    inputs = {k: torch.as_tensor(v) for k, v in enc.items()}
    labels = torch.tensor([LABELS[i] for i in rows])
    loss = model.method.training_loss(model, inputs, labels).loss
    loss.backward()
    grads = {n: p.grad.detach().clone() for n, p in model.named_parameters() if p.grad is not None}
    return float(loss.detach()), grads


def _ddp_step(rank: int, model_dir: str, method: str) -> dict:
    half = len(TEXTS) // WORLD
    loss, grads = _step(model_dir, method, list(range(rank * half, (rank + 1) * half)))
    for g in grads.values():  # what DistributedDataParallel does with every gradient: the mean over processes
        dist.all_reduce(g)
        g /= WORLD
    losses = [torch.zeros(1, dtype=torch.float64) for _ in range(WORLD)]
    dist.all_gather(losses, torch.tensor([loss], dtype=torch.float64))
    return {"loss": sum(float(x) for x in losses) / WORLD, "grads": {n: g.tolist() for n, g in grads.items()}}


@pytest.mark.parametrize("method", ["ce-scl", "simcse-unsup", "self-supervised-cl"])
def test_two_process_step_equals_one_process_step_on_the_concatenated_batch(tmp_path, tiny_encoder_dir, method):
    out = _spawn(_ddp_step, tmp_path, str(tiny_encoder_dir), method)
    loss, grads = _step(str(tiny_encoder_dir), method, list(range(len(TEXTS))))
    for res in out:
        assert res["loss"] == pytest.approx(loss, abs=1e-5)
        assert set(res["grads"]) == set(grads)
        for name, g in grads.items():
            assert torch.allclose(torch.tensor(res["grads"][name], dtype=torch.float64), g, atol=1e-5), name


def _local_only(rank: int, model_dir: str) -> dict:
    """The old behaviour (each process's contrastive term on its own rows) differs: a check that the
    test above can fail."""
    from contrastfit.losses import supcon

    torch.manual_seed(1)
    z = torch.randn(8, 4, dtype=torch.float64)
    labels = torch.tensor(LABELS)
    mine = slice(rank * 4, rank * 4 + 4)
    (views,), y = gather_views([z[mine]], labels[mine])
    return {"global": float(supcon(views, y, 0.1)), "local": float(supcon(z[mine], labels[mine], 0.1)),
            "full": float(supcon(z, labels, 0.1))}


def test_the_global_term_is_the_full_batch_term_and_the_local_one_is_not(tmp_path, tiny_encoder_dir):
    for res in _spawn(_local_only, tmp_path, str(tiny_encoder_dir)):
        assert res["global"] == pytest.approx(res["full"], abs=1e-12)
        assert abs(res["local"] - res["full"]) > 1e-3


def test_single_process_is_the_identity():
    x = torch.randn(4, 2, requires_grad=True)
    labels = torch.tensor([0, 1, 0, 1])
    g = gather(x, labels)
    assert g.embeddings is x and g.labels is labels and bool(g.local.all()) and g.offset == 0
    assert world() == (0, 1)
    (v,), y = gather_views([x], labels)
    assert v is x and y is labels


def test_torchrun_two_processes_train_save_once_and_reload(tmp_path, tiny_encoder_dir, sentiment_csv):
    """``torchrun --nproc-per-node 2 -m contrastfit train``: gloo on 2 CPU processes, the global-batch
    SupCon term, one model written by rank 0, which reloads with the predictions the run evaluated."""
    import subprocess
    import sys

    from contrastfit import ContrastiveClassifier
    from contrastfit.evaluation import evaluate_model
    from contrastfit.data import data_hash
    from contrastfit.training import TrainConfig, prepare_data

    out = tmp_path / "run"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
           "-m", "contrastfit", "train", "--data", str(sentiment_csv), "--text-column", "sentence",
           "--label-column", "sentiment", "--model", str(tiny_encoder_dir), "--method", "ce-scl",
           "--batch-size", "8", "--min-steps", "6", "--epochs", "1", "--output", str(out), "--quiet"]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)
    assert proc.returncode == 0, "\n".join(l for l in proc.stderr.splitlines() if "contrastfit" in l or "Error" in l)[-3000:]
    assert proc.stdout.count(f"saved to {out}") == 1  # the first process writes and reports
    record = json.loads((out / "results.json").read_text())
    assert record["training"]["world_size"] == 2
    assert not list(tmp_path.glob(".run.*"))  # no second writer's leftovers
    model = ContrastiveClassifier.from_pretrained(out)
    # the same validation split as the run (the file is split with the run's seed)
    held_out = prepare_data(TrainConfig(data=str(sentiment_csv), text_column="sentence", label_column="sentiment",
                                    model=str(tiny_encoder_dir), method="ce-scl", output=str(tmp_path / "x"))).validation
    assert record["data"]["validation_hash"] == data_hash(held_out)
    again = evaluate_model(model, held_out)
    assert again["accuracy"] == pytest.approx(record["metrics"]["validation"]["accuracy"])
    assert again["confusion_matrix"] == record["metrics"]["validation"]["confusion_matrix"]


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
