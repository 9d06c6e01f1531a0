"""Peak memory and step time of a training step with and without gradient caching.

For each batch size (32, 256, 1024 real MR training sentences, the same shuffled draw, so each
batch holds the smaller ones) and each mode (no caching; caching in chunks of each of ``--chunks``
sentences), a **fresh Python process** builds the model (``ce-scl`` on MiniLM, ``minilm-l6``),
runs ``--warmup`` untimed steps on its first 8 sentences (one-time costs, AdamW's state) and
``--steps`` timed training steps on the whole batch (forward, backward, AdamW step,
exactly what :class:`contrastfit.trainer.ContrastfitTrainer` does per batch; the cached step is
:func:`contrastfit.gradcache.cached_backward`, the mechanism the Trainer's ``training_step`` uses)
and reports

* ``peak_rss_mb``: the process's resident-set high-water mark (``resource.getrusage(RUSAGE_SELF)
  .ru_maxrss``), i.e. measured, not estimated: model, optimizer state, activations, everything;
* ``setup_rss_mb``: its resident set after building the model and the batch, before the first step
  (so ``peak - setup`` is what training steps add);
* ``step_s``: the median wall time of the timed steps, and per sentence; ``cpu_s``: the process's
  CPU time (``time.process_time``) of the same steps, which a loaded machine disturbs less than the
  wall time (the time goal is checked on both).

The sentences are sent to the workers in a JSON file, so no worker pays for loading the data set.
Results: ``bench/results/gradient_cache.{json,md}`` (written atomically).

    python bench/gradient_cache.py                                 # 32, 256, 1024; chunks 32 and 16
    python bench/gradient_cache.py --batch-sizes 32,256 --steps 1  # quicker
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

GOAL_MEMORY = 1.3  # batch 1024 with caching <= 1.3 x the peak memory of batch 32 without (issue 11)
GOAL_TIME = 2.2  # and <= 2.2 x the uncached step time per sentence
WARMUP_ROWS = 8  # the warm-up steps train on the first 8 sentences of the batch


def _rss_mb() -> float:
    with open("/proc/self/status", encoding="ascii") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def worker(args: argparse.Namespace) -> dict:
    import torch

    from contrastfit import ContrastiveClassifier
    from contrastfit.encoders import default_pooling
    from contrastfit.gradcache import cached_backward

    spec = json.loads(Path(args.worker).read_text(encoding="utf-8"))
    texts, labels = spec["texts"][: args.batch], spec["labels"][: args.batch]
    torch.manual_seed(0)
    model = ContrastiveClassifier.from_encoder(args.model, args.method, spec["label_names"],
                                               pooling=default_pooling(args.model))
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-5)
    enc = model.tokenize(texts, padding=True)
    inputs = {k: torch.tensor(v) for k, v in enc.items()}
    y = torch.tensor(labels)
    setup_rss = _rss_mb()
    small = {k: v[:WARMUP_ROWS] for k, v in inputs.items()}
    times, cpu_times = [], []
    for step in range(args.warmup + args.steps):
        # warm-up steps on a few rows: one-time costs (thread pools, AdamW's state) without the time
        # of a full step; the timed steps then run at steady state, with the optimizer state in memory
        x, t = (small, y[:WARMUP_ROWS]) if step < args.warmup else (inputs, y)
        t0, c0 = time.perf_counter(), time.process_time()
        if args.chunk:
            loss = cached_backward(model, x, t, args.chunk).loss
        else:
            loss = model.method.training_loss(model, x, t).loss
            loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        elapsed, cpu = time.perf_counter() - t0, time.process_time() - c0
        if step >= args.warmup:
            times.append(elapsed)
            cpu_times.append(cpu)
        print(f"  step {step + 1}/{args.warmup + args.steps}: {elapsed:.1f} s ({cpu:.1f} s CPU), "
              f"loss {float(loss.detach()):.4f}", file=sys.stderr, flush=True)
    median = statistics.median(times)
    median_cpu = statistics.median(cpu_times)
    return {"batch": args.batch, "chunk": args.chunk, "width": int(inputs["input_ids"].shape[1]),
            "threads": torch.get_num_threads(), "warmup": args.warmup, "steps": args.steps,
            "step_s": times, "median_step_s": median, "ms_per_sentence": 1000 * median / args.batch,
            "cpu_s": cpu_times, "median_cpu_s": median_cpu, "cpu_ms_per_sentence": 1000 * median_cpu / args.batch,
            "setup_rss_mb": setup_rss, "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}


def _load_sentences(data: str, n: int, seed: int) -> dict:
    from contrastfit.data import load_data

    d = load_data(data)
    order = list(range(len(d.train)))
    random.Random(seed).shuffle(order)
    rows = d.train.select(order[:n])
    return {"texts": list(rows["text"]), "labels": [int(v) for v in rows["label"]], "label_names": d.label_names}


def _table(runs: list[dict], ratios: dict) -> str:
    lines = ["| batch | gradient cache | padded width | peak RSS MB | setup RSS MB | peak - setup MB | step s (wall) "
             "| wall ms / sentence | CPU ms / sentence |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in runs:
        lines.append(f"| {r['batch']} | {('chunks of %d' % r['chunk']) if r['chunk'] else 'off'} | {r['width']} | "
                     f"{r['peak_rss_mb']:.0f} | {r['setup_rss_mb']:.0f} | {r['peak_rss_mb'] - r['setup_rss_mb']:.0f} | "
                     f"{r['median_step_s']:.1f} | {r['ms_per_sentence']:.0f} | {r['cpu_ms_per_sentence']:.0f} |")
    lines.append("")
    for key, value in ratios.items():
        lines.append(f"- {key}: {value:.2f}" if isinstance(value, float) else f"- {key}: {value}")
    return "\n".join(lines) + "\n"


def markdown(result: dict) -> str:
    """The report of a result (``bench/results/gradient_cache.json``): what ran on what machine, the table
    (:func:`_table`) and the configurations not run or failed."""
    first = result["runs"][0] if result["runs"] else {"warmup": "?", "steps": "?"}
    machine = result["machine"]
    table = _table(result["runs"], result["ratios"])
    for row in result.get("not_run", []):
        table += (f"- batch {row['batch']}, gradient cache {row['chunk'] or 'off'}: "
                  f"{'not run (' + row['not_run'] + ')' if 'not_run' in row else 'failed (' + row['failed'] + ')'}\n")
    header = (f"# Gradient caching: peak memory and step time\n\n{result['method']} on {result['model']}, "
              f"{result['data']} training sentences, gradient-cache chunks of {', '.join(map(str, result['chunks']))}; "
              f"{first['warmup']} warm-up step (8 sentences) + {first['steps']} timed steps per row, each row "
              f"a fresh process; {machine['cpus']} CPU cores, load average {machine['load_average_before'][0]:.1f} "
              f"before and {machine['load_average_after'][0]:.1f} after. {result['note']}\n\n")
    return header + table


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--batch-sizes", default="32,256,1024")
    p.add_argument("--chunks", default="32,16", help="gradient-cache chunk sizes (sentences), each a configuration")
    p.add_argument("--model", default="minilm-l6")
    p.add_argument("--method", default="ce-scl")
    p.add_argument("--data", default="mr")
    p.add_argument("--warmup", type=int, default=1, help="untimed steps on 8 sentences per configuration")
    p.add_argument("--steps", type=int, default=1, help="timed steps per configuration")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--output", default="bench/results/gradient_cache")
    p.add_argument("--note", default="", help="recorded with the results (e.g. the machine's load)")
    p.add_argument("--uncached-max-batch", type=int, default=None,
                   help="run the uncached configuration only up to this batch size (memory: MiniLM at batch 1024 "
                        "without caching needs about 17 GB)")
    p.add_argument("--earlier", help="a results JSON of an earlier run of this bench, kept in this one's JSON")
    # worker mode (one configuration in this process)
    p.add_argument("--worker", help=argparse.SUPPRESS)
    p.add_argument("--batch", type=int, help=argparse.SUPPRESS)
    p.add_argument("--chunk", type=int, default=0, help=argparse.SUPPRESS)  # 0: no caching
    args = p.parse_args(argv)
    if args.worker:
        print(json.dumps(worker(args)))
        return 0

    from contrastfit.atomic import write_text_atomic
    from contrastfit.versions import library_versions

    sizes = [int(s) for s in args.batch_sizes.split(",") if s.strip()]
    chunks = [int(c) for c in args.chunks.split(",") if c.strip()]
    spec = _load_sentences(args.data, max(sizes), args.seed)
    runs: list[dict] = []
    skipped: list[dict] = []  # configurations not run or failed
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory() as tmp:
        spec_path = Path(tmp) / "sentences.json"
        spec_path.write_text(json.dumps(spec), encoding="utf-8")
        for batch in sizes:
            for chunk in (0, *chunks):
                if not chunk and args.uncached_max_batch is not None and batch > args.uncached_max_batch:
                    skipped.append({"batch": batch, "chunk": 0, "not_run": f"--uncached-max-batch {args.uncached_max_batch}"})
                    continue
                print(f"batch {batch}, gradient cache {chunk or 'off'}", flush=True)
                cmd = [sys.executable, __file__, "--worker", str(spec_path), "--batch", str(batch), "--chunk", str(chunk),
                       "--model", args.model, "--method", args.method, "--warmup", str(args.warmup),
                       "--steps", str(args.steps)]
                done = subprocess.run(cmd, stdout=subprocess.PIPE, text=True)
                if done.returncode != 0:  # e.g. killed for memory: a result too, recorded as such
                    how = f"signal {-done.returncode}" if done.returncode < 0 else f"exit status {done.returncode}"
                    skipped.append({"batch": batch, "chunk": chunk, "failed": how})
                    print(f"  failed ({how})", flush=True)
                    continue
                runs.append(json.loads(done.stdout.strip().splitlines()[-1]))
    by = {(r["batch"], r["chunk"]): r for r in runs}
    ratios: dict = {}
    small, large = min(sizes), max(sizes)
    base = by.get((small, 0))
    for chunk in chunks:
        big = by.get((large, chunk))
        if base and big:
            ratios[f"peak RSS, batch {large} in chunks of {chunk} / batch {small} uncached (goal <= {GOAL_MEMORY})"] = (
                big["peak_rss_mb"] / base["peak_rss_mb"])
            ratios[f"peak - setup RSS, batch {large} in chunks of {chunk} / batch {small} uncached"] = (
                (big["peak_rss_mb"] - big["setup_rss_mb"]) / (base["peak_rss_mb"] - base["setup_rss_mb"]))
        for batch in sizes:
            cached = by.get((batch, chunk))
            # the uncached step of the same batch, else of the largest batch that ran uncached
            ran = [b for b in sizes if (b, 0) in by and b <= batch]
            if not cached or not ran:
                continue
            plain = by[(max(ran), 0)]
            against = "uncached" if plain["batch"] == batch else f"batch {plain['batch']} uncached"
            for kind, key in (("wall", "ms_per_sentence"), ("CPU", "cpu_ms_per_sentence")):
                ratios[f"{kind} time per sentence, batch {batch} in chunks of {chunk} / {against} "
                       f"(goal <= {GOAL_TIME})"] = cached[key] / plain[key]
    for batch in sizes:  # what a large batch costs per sentence without caching (padding to its longest)
        plain = by.get((batch, 0))
        if base and plain and batch != small:
            ratios[f"CPU time per sentence, batch {batch} uncached / batch {small} uncached"] = (
                plain["cpu_ms_per_sentence"] / base["cpu_ms_per_sentence"])
    import torch

    result = {
        "what": ("one training step (forward, backward, AdamW step) per configuration, each in a fresh process; "
                 "peak_rss_mb = ru_maxrss of that process; median of the timed steps"),
        "model": args.model, "method": args.method, "data": args.data, "chunks": chunks, "seed": args.seed,
        "machine": {"platform": platform.platform(), "processor": platform.processor(), "cpus": os.cpu_count(),
                    "cuda": torch.cuda.is_available(), "load_average_before": load_before,
                    "load_average_after": os.getloadavg()},
        "note": args.note, "versions": library_versions(), "runs": runs, "not_run": skipped, "ratios": ratios,
        "earlier": json.loads(Path(args.earlier).read_text(encoding="utf-8")) if args.earlier else None,
        "measured": time.strftime("%Y-%m-%d %H:%M"),
    }
    out = Path(args.output)
    write_text_atomic(out.with_suffix(".json"), json.dumps(result, indent=2) + "\n")
    text = markdown(result)
    write_text_atomic(out.with_suffix(".md"), text)
    print(text, end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
