"""Per-step cost of each method against `ce`, and against a plain `transformers` CE step.

Every variant trains the same encoder on the same batch (MR sentences, dynamic padding) with the
same optimizer (AdamW); one "step" is forward + backward + optimizer step + zero_grad, the work the
Trainer does per batch. The variants are timed round-robin (one step of each in turn, repeated), so
that drift in the machine's speed hits all of them alike, and the medians are compared as ratios
within this one run.

    python bench/step_time.py                       # ce, ce-scl and the plain Trainer model
    python bench/step_time.py --methods ce,ce-scl,supcl-seq --steps 30 --batch-size 32

Writes ``bench/results/step_time.json`` (machine, versions, medians, ratios) and prints a table.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import torch  # noqa: E402
from transformers import AutoModelForSequenceClassification  # noqa: E402

from contrastfit import ContrastiveClassifier  # noqa: E402
from contrastfit.data import load_data, sample_per_class  # noqa: E402
from contrastfit.encoders import default_pooling, resolve_model  # noqa: E402
from contrastfit.atomic import write_json_atomic  # noqa: E402
from contrastfit.trainer import tokenize_dataset  # noqa: E402
from contrastfit.versions import library_versions  # noqa: E402

PLAIN = "transformers-ce"


def make_batch(model: ContrastiveClassifier, texts: list[str], labels: list[int]) -> dict[str, torch.Tensor]:
    enc = model.tokenize(texts, padding=True)
    batch = {k: torch.tensor(v) for k, v in enc.items()}
    batch["labels"] = torch.tensor(labels)
    return batch


def build(variant: str, model_name: str, label_names: list[str], hparams: dict) -> torch.nn.Module:
    if variant == PLAIN:
        path, local = resolve_model(model_name)
        return AutoModelForSequenceClassification.from_pretrained(path, num_labels=len(label_names), local_files_only=local)
    return ContrastiveClassifier.from_encoder(model_name, variant, label_names, hparams=hparams.get(variant),
                                              pooling=default_pooling(model_name))


def one_step(model: torch.nn.Module, optimizer: torch.optim.Optimizer, batch: dict[str, torch.Tensor]) -> float:
    t0 = time.perf_counter()
    loss = model(**batch).loss
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return time.perf_counter() - t0


def markdown(result: dict) -> str:
    """The table of a result (``bench/results/step_time*.json``): each variant's median milliseconds a step
    and its ratio to the reference method and, where it ran, to the plain transformers CE step."""
    base, plain = result["reference"], "ratio_to_plain" in result
    lines = [f"| variant | median ms/step | vs {base} |" + (f" vs {PLAIN} |" if plain else ""),
             "|---|---|---|" + ("---|" if plain else "")]
    for v, median in result["median_s"].items():
        line = f"| {v} | {1000 * median:.0f} | {result['ratio_to_reference'][v]:.2f} |"
        if plain:
            line += f" {result['ratio_to_plain'][v]:.2f} |"
        lines.append(line)
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--methods", default="ce,ce-scl", help="comma-separated contrastfit methods (the first is the reference); 'all' for every method")
    p.add_argument("--no-plain", action="store_true", help=f"leave out the plain {PLAIN} model")
    p.add_argument("--model", default="minilm-l6")
    p.add_argument("--data", default="mr")
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--steps", type=int, default=20, help="timed steps per variant (after 3 warm-up steps)")
    p.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's choice)")
    p.add_argument("--output", default="bench/results/step_time.json")
    args = p.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)

    data = load_data(args.data)
    per_class = max(1, args.batch_size // len(data.label_names))
    rows = sample_per_class(data.train, per_class, seed=0)
    texts, labels = list(rows["text"]), [int(v) for v in rows["label"]]

    if args.methods == "all":
        from contrastfit.methods import available_methods, get_method

        # every method with an encoder training step (the linear probe has none: nothing to time)
        trained = [m for m in available_methods() if m != "ce" and get_method(m).cls.trains_encoder]
        args.methods = ",".join(["ce"] + trained)
    variants = [m.strip() for m in args.methods.split(",") if m.strip()]
    if not args.no_plain:
        variants.append(PLAIN)
    torch.manual_seed(0)
    models = {v: build(v, args.model, data.label_names, {}) for v in variants}
    for v, m in models.items():
        if isinstance(m, ContrastiveClassifier):  # e.g. DiffCSE builds its unigram generator here
            m.method.prepare(m, tokenize_dataset(rows, m.tokenizer, m.max_length))
    reference = next(m for m in models.values() if isinstance(m, ContrastiveClassifier))
    batch = make_batch(reference, texts, labels)
    optimizers = {}
    for v, m in models.items():
        m.train()
        optimizers[v] = torch.optim.AdamW(m.parameters(), lr=1e-5)
        if v == PLAIN:
            m.config.problem_type = "single_label_classification"

    times: dict[str, list[float]] = {v: [] for v in variants}
    print(f"{len(variants)} variants, batch {batch['input_ids'].shape[0]} x {batch['input_ids'].shape[1]} tokens, "
          f"{args.steps} timed steps each, {torch.get_num_threads()} threads", flush=True)
    for step in range(3 + args.steps):
        # rotate the order each round so that no variant always runs first (cache, allocator state)
        for v in variants[step % len(variants):] + variants[:step % len(variants)]:
            elapsed = one_step(models[v], optimizers[v], batch)
            if step >= 3:
                times[v].append(elapsed)
        print(f"\rstep {step + 1}/{3 + args.steps}", end="", flush=True)
    print()

    base = variants[0]
    medians = {v: statistics.median(t) for v, t in times.items()}
    result = {
        "what": "median seconds per training step (forward+backward+AdamW step), round-robin in one process, order rotated each round",
        "model": args.model, "data": args.data, "batch_shape": list(batch["input_ids"].shape),
        "steps": args.steps, "threads": torch.get_num_threads(), "reference": base,
        "machine": {"platform": platform.platform(), "processor": platform.processor(), "cpus": os.cpu_count(),
                    "cuda": torch.cuda.is_available()},
        "versions": library_versions(),
        "median_s": medians, "ratio_to_reference": {v: medians[v] / medians[base] for v in variants},
    }
    if PLAIN in medians:
        result["ratio_to_plain"] = {v: medians[v] / medians[PLAIN] for v in variants}
    print("\n" + markdown(result), end="")
    out = Path(args.output)
    out.parent.mkdir(parents=True, exist_ok=True)
    write_json_atomic(out, result)
    print(f"\nwritten to {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
