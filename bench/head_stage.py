"""Stage 2 of the two-stage methods: head training on cached embeddings vs re-encoding every epoch.

SupCL-Seq, self-supervised CL, SimCSE and DiffCSE freeze the encoder after stage 1 and train only
the head. ``contrastfit.head_stage.train_head`` encodes the training set once and trains on the
cached features; the alternative re-runs the frozen encoder on every mini-batch of every epoch.
Both are run here on the same model, data and seed, and their times compared as a ratio (the two
heads come out identical: the features are the same, only where they come from differs).

    python bench/head_stage.py --train-size 256 --epochs 10
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import torch  # noqa: E402
from transformers import DataCollatorWithPadding  # noqa: E402

from contrastfit import ContrastiveClassifier  # noqa: E402
from contrastfit.data import load_data, sample_stratified  # noqa: E402
from contrastfit.encoders import default_pooling  # noqa: E402
from contrastfit.atomic import write_json_atomic  # noqa: E402
from contrastfit.head_stage import train_head  # noqa: E402
from contrastfit.trainer import tokenize_dataset  # noqa: E402
from contrastfit.versions import library_versions  # noqa: E402


def markdown(result: dict) -> str:
    """The table of a result (``bench/results/head_stage.json``): the head's training seconds with cached
    features and re-encoding every epoch, and the speed-up."""
    lines = [f"| head training ({result['epochs']} epochs, {result['train_size']} examples) | seconds |", "|---|---|"]
    lines += [f"| {k} | {v:.1f} |" for k, v in result["seconds"].items()]
    lines += ["", f"speed-up of caching: {result['speedup']:.1f}x; largest head weight difference "
                  f"{result['max_head_weight_difference']:.2e}"]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--method", default="supcl-seq")
    p.add_argument("--model", default="minilm-l6")
    p.add_argument("--data", default="mr")
    p.add_argument("--train-size", type=int, default=256)
    p.add_argument("--epochs", type=int, default=10)
    p.add_argument("--output", default="bench/results/head_stage.json")
    args = p.parse_args(argv)

    data = load_data(args.data)
    train = sample_stratified(data.train, args.train_size, seed=0)
    timings, heads = {}, {}
    for cache in (True, False):
        torch.manual_seed(0)
        model = ContrastiveClassifier.from_encoder(args.model, args.method, data.label_names,
                                                   pooling=default_pooling(args.model))
        ds = tokenize_dataset(train, model.tokenizer, model.max_length)
        t0 = time.perf_counter()
        info = train_head(model, ds, DataCollatorWithPadding(model.tokenizer), seed=0, cache=cache,
                          epochs=args.epochs, progress=True)
        timings["cached" if cache else "re-encoded"] = time.perf_counter() - t0
        heads[cache] = [p.detach().clone() for p in model.head.parameters()]
        print(f"cache={cache}: {timings['cached' if cache else 're-encoded']:.1f}s (encode {info['encode_s']:.1f}s)", flush=True)
    max_diff = max(float((a - b).abs().max()) for a, b in zip(heads[True], heads[False]))
    result = {
        "what": "seconds to train the stage-2 head (frozen encoder), cached features vs re-encoding every epoch",
        "method": args.method, "model": args.model, "data": args.data, "train_size": args.train_size,
        "epochs": args.epochs, "threads": torch.get_num_threads(), "seconds": timings,
        "speedup": timings["re-encoded"] / timings["cached"], "max_head_weight_difference": max_diff,
        "versions": library_versions(),
    }
    print("\n" + markdown(result), end="")
    out = Path(args.output)
    out.parent.mkdir(parents=True, exist_ok=True)
    write_json_atomic(out, result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
