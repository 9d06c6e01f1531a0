"""int8 export (``contrastfit export --quantize int8``): size, speed and agreement with PyTorch.

For each data set the default recipe is trained on K examples per class (sample 0, seed 0; or
``--run DATA=FOLDER`` reuses a trained folder), exported to ONNX (float, verified) and to int8 with
the export's defaults (per-channel, 7-bit weights: ``reduce_range``); the other quantisation settings
(per-tensor, 8-bit, MatMul only: the word embeddings stay float; each layer's feed-forward output
MatMul left float, via ``nodes_to_exclude``; 8-bit weights only, ``MatMulNBits``, float activations;
fused attention: ONNX Runtime's BERT fusion of a TorchScript-exported graph, then the export's
quantisation) quantise copies of the float graph: with the export's own function, or (the
feed-forward and fused variants) with ``quantize_dynamic`` and the export's settings, as the export
has no such option. The record names the
CPU's int8 instructions (AVX2, AVX-512 VNNI, AVX-VNNI, AMX), on which the int8 speed-up depends. On the first
``--texts`` test sentences every model's labels are compared with PyTorch's (agreement, largest
probability difference, accuracy); on the first ``--speed-texts`` of them, PyTorch, the float ONNX
model and every int8 variant predict side by side in one process, in turn, ``--repeats`` times
(best time kept), with ONNX Runtime's session options as the export serves them (all graph
optimisations, the default thread count) and, for the default int8 model, with 1 and 2 intra-op
threads and with only the basic graph optimisations.

    python bench/quantize.py --data mr bbc-news --run mr=/tmp/trained-mr
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import numpy as np  # noqa: E402

from contrastfit import ContrastiveClassifier, load_data, train  # noqa: E402
from contrastfit.atomic import write_json_atomic, write_text_atomic  # noqa: E402
from contrastfit.export import TIE_BAND, OnnxClassifier, _quantize, export_onnx  # noqa: E402
from contrastfit.versions import library_versions  # noqa: E402

#: the quantisation settings compared: the export's default first
VARIANTS = {
    "int8": {"per_channel": True, "reduce_range": True},
    "int8 per-tensor 8-bit": {"per_channel": False, "reduce_range": False},
    "int8 per-channel 8-bit": {"per_channel": True, "reduce_range": False},
    "int8 per-tensor 7-bit": {"per_channel": False, "reduce_range": True},
    "int8 MatMul only": {"per_channel": True, "reduce_range": True, "op_types": ["MatMul"]},
    "int8 FFN outputs float": {"per_channel": True, "reduce_range": True, "exclude": "ffn-out"},
    "8-bit weights only": {"weight_only": True},
    "int8 fused attention": {"fused": True},
}


def _ffn_outputs(folder: Path) -> list[str]:
    """The MatMul nodes whose weight has more rows than columns: each layer's feed-forward output
    (intermediate -> hidden), where BERT's activations have their outliers."""
    import onnx

    graph = onnx.load(str(folder / "model.onnx"), load_external_data=False).graph
    shapes = {i.name: tuple(i.dims) for i in graph.initializer}
    return [n.name for n in graph.node if n.op_type == "MatMul" and len(shapes.get(n.input[1], ())) == 2
            and shapes[n.input[1]][0] > shapes[n.input[1]][1]]


def _quantize_excluding(folder: Path, nodes: list[str]) -> None:
    """As the export's ``_quantize`` (per channel, 7-bit), leaving ``nodes`` in float."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    graph = folder / "model.onnx"
    floats = [p for p in folder.iterdir() if p.name.startswith("model.onnx")]
    quantize_dynamic(graph, folder / "int8.onnx", per_channel=True, reduce_range=True, nodes_to_exclude=nodes,
                     weight_type=QuantType.QInt8, extra_options={"DefaultTensorType": 1})  # 1: float, for fused ops' outputs
    for f in floats:
        f.unlink()
    (folder / "int8.onnx").replace(graph)


def _fused_float(model, folder: Path, texts: list[str]) -> None:
    """Replace ``folder``'s float graph by one ONNX Runtime's BERT optimiser fuses (Attention,
    SkipLayerNormalization, EmbedLayerNormalization, BiasGelu), which its int8 quantiser then turns into
    QAttention. The fusion needs the TorchScript exporter's graph of the eager attention (the
    ``torch.export`` graph the export writes, or SDPA attention, fuses only the Gelu and the layer
    norms), so this is a bench variant, not an export option: that exporter is deprecated."""
    import warnings

    import torch
    from onnxruntime.transformers.optimizer import optimize_model

    backbone = model.encoder.backbone
    previous = backbone.config._attn_implementation
    backbone.set_attn_implementation("eager")
    names = list(model.tokenizer(texts[:1]).keys())

    class Logits(torch.nn.Module):
        def __init__(self, inner):
            super().__init__()
            self.inner = inner

        def forward(self, *args):
            return self.inner(**dict(zip(names, args))).logits.float()

    example = model.tokenizer(texts[:2], padding=True, truncation=True, max_length=model.max_length, return_tensors="pt")
    for f in [p for p in folder.iterdir() if p.name.startswith("model.onnx")]:
        f.unlink()
    graph = folder / "model.onnx"
    try:
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch.onnx.export(Logits(model), tuple(example[k] for k in names), str(graph), input_names=names,
                              output_names=["logits"], dynamic_axes={k: {0: "batch", 1: "sequence"} for k in names},
                              opset_version=17, dynamo=False)
    finally:
        backbone.set_attn_implementation(previous)
    config = backbone.config
    fused = optimize_model(str(graph), model_type="bert", num_heads=config.num_attention_heads,
                           hidden_size=config.hidden_size)
    graph.unlink()
    fused.save_model_to_file(str(graph))


def _quantize_weights_only(folder: Path, block_size: int = 32) -> None:
    """Weight-only 8-bit (ONNX Runtime's ``MatMulNBits``, symmetric blocks of ``block_size``): the
    activations stay float, so it is the closest int8 can get to the float model's outputs."""
    import onnx
    from onnxruntime.quantization.matmul_nbits_quantizer import MatMulNBitsQuantizer

    graph = folder / "model.onnx"
    quantizer = MatMulNBitsQuantizer(onnx.load(str(graph)), bits=8, block_size=block_size, is_symmetric=True)
    quantizer.process()
    for f in [p for p in folder.iterdir() if p.name.startswith("model.onnx")]:
        f.unlink()
    quantizer.model.save_model_to_file(str(graph), use_external_data_format=False)


def _session(folder: Path, threads: int = 0, level: str = "all"):
    import onnxruntime

    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = threads
    options.graph_optimization_level = {"all": onnxruntime.GraphOptimizationLevel.ORT_ENABLE_ALL,
                                        "basic": onnxruntime.GraphOptimizationLevel.ORT_ENABLE_BASIC}[level]
    return onnxruntime.InferenceSession(str(folder / "model.onnx"), options, providers=["CPUExecutionProvider"])


def cpu_features() -> dict[str, Any]:
    """The CPU's name and the vector instructions int8 matrix products use where present (AVX2's
    multiply-add of u8 x s8; AVX-512 VNNI, AVX-VNNI and AMX do it in one instruction): the int8
    speed-up depends on them more than on anything the export chooses."""
    info = {"model": platform.processor() or platform.machine(), "flags": []}
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return info
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "model name":
            info["model"] = value.strip()
        elif key.strip() == "flags":
            flags = set(value.split())
            info["flags"] = sorted(f for f in flags if f in {"avx2", "avx512f", "avx512_vnni", "avx_vnni", "amx_int8"})
            break
    return info


def _size(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.iterdir() if p.name.startswith("model.onnx"))


def markdown(record: dict[str, Any]) -> str:
    """The report of a record (``bench/results/quantize*.json``): a table per data set (every model's size,
    agreement with PyTorch, overall and away from near ties where the record has it, largest probability
    difference, test accuracy and speed) and a line on the machine."""
    r0 = record["rows"][0]
    lines = [f"# int8 export ({record['model']}, default recipe, K = {record['shots']}, sample 0, seed 0)", "",
             "Agreement: labels of the ONNX model vs PyTorch's on each set's first test sentences (their count "
             f"beside its name); time: the first {r0['speed_texts']} of them in batches of {record['batch_size']}, "
             f"best of {record['repeats']}, every model in turn in one process.", ""]
    for r in record["rows"]:
        ties = any("decisive_agreement" in q for q in r["quality"].values())  # records before the field: none
        lines += [f"## {r['data']} ({r['classes']} classes, {r['texts']} test sentences)", "",
                  "| model | MB | agreement with PyTorch | " + ("away from ties | " if ties else "")
                  + "largest prob. difference | test accuracy | seconds | x PyTorch | x float ONNX |",
                  "|---|---|---|---|---|---|---|---|" + ("---|" if ties else "")]
        for label, sec in r["seconds"].items():
            q = r["quality"].get(label.split(",")[0], {}) if "," in label else r["quality"].get(label, {})
            mb = f"{q['bytes'] / 1e6:.1f}" if "bytes" in q else "–"
            agree = f"{100 * q['agreement']:.1f}%" if "agreement" in q else "–"
            decisive = (f"{100 * q['decisive_agreement']:.1f}% ({q['near_ties']} ties)" if "decisive_agreement" in q
                        else "–")
            diff = f"{q['max_prob_diff']:.3f}" if "max_prob_diff" in q else "–"
            acc = f"{100 * q['accuracy']:.1f}" if "accuracy" in q else "–"
            lines.append(f"| {label} | {mb} | {agree} | " + (f"{decisive} | " if ties else "")
                         + f"{diff} | {acc} | {sec:.2f} | "
                         f"x{r['speedup_vs_pytorch'][label]:.2f} | x{r['speedup_vs_float_onnx'][label]:.2f} |")
        lines.append("")
    cpu = record.get("cpu")  # records before the field name no CPU
    about = f"{cpu['model']}; {', '.join(cpu['flags']) or 'no AVX2'}; shared, " if cpu else "shared; "
    lines.append(f"{record['cpus']} CPUs ({about}load average {record['load_average'][0]:.1f} at the end), "
                 f"torch {record['torch_threads']} threads, torch {record['versions'].get('torch')}, "
                 f"onnxruntime {record['onnxruntime']}.")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", nargs="+", default=["mr", "bbc-news"])
    p.add_argument("--model", default="minilm-l6")
    p.add_argument("--shots", type=int, default=16)
    p.add_argument("--run", action="append", default=[], help="DATA=FOLDER: a trained folder to reuse")
    p.add_argument("--texts", type=int, default=1000, help="test sentences for the agreement")
    p.add_argument("--speed-texts", type=int, default=256)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--output", default="bench/results/quantize")
    args = p.parse_args(argv)
    runs = dict(r.split("=", 1) for r in args.run)

    import torch

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        for name in args.data:
            test = load_data(name).split("test")
            texts = list(test["text"])[:args.texts]
            gold = np.asarray(test["label"])[:args.texts]
            run = Path(runs[name]) if name in runs else tmp / name
            if name not in runs:
                train(data=name, model=args.model, shots=args.shots, seed=0, output=str(run), progress=False)
            model = ContrastiveClassifier.from_pretrained(run).eval()
            folders = {"float": tmp / f"{name}-float"}
            export_onnx(run, folders["float"])
            t0 = time.perf_counter()
            # thresholds open: the bench reports the numbers the export would refuse on
            meta = export_onnx(run, tmp / f"{name}-int8", quantize="int8", max_prob_diff=1.0, min_agreement=0.0)
            export_s = time.perf_counter() - t0
            folders["int8"] = tmp / f"{name}-int8"
            for label, options in VARIANTS.items():
                if label != "int8":
                    folders[label] = tmp / f"{name}-{label.replace(' ', '-')}"
                    shutil.copytree(folders["float"], folders[label])
                    if options.get("fused"):
                        _fused_float(model, folders[label], texts)
                        _quantize_excluding(folders[label], [])
                    elif options.get("weight_only"):
                        _quantize_weights_only(folders[label])
                    elif options.get("exclude") == "ffn-out":
                        _quantize_excluding(folders[label], _ffn_outputs(folders[label]))
                    else:
                        _quantize(folders[label], "int8", options["per_channel"], options["reduce_range"],
                                  options.get("op_types"))
            served = {label: OnnxClassifier(f) for label, f in folders.items()}
            reference = model.predict_proba(texts, batch_size=args.batch_size)
            quality = {"pytorch": {"accuracy": float((reference.argmax(1) == gold).mean())}}
            # the export's check counts agreement where PyTorch is not within TIE_BAND of a tie; both are kept
            top2 = np.sort(reference, axis=1)[:, -2:]
            tie = top2[:, 1] - top2[:, 0] < 2 * TIE_BAND
            for label, s in served.items():
                probs = s.predict_proba(texts, batch_size=args.batch_size)
                same = probs.argmax(1) == reference.argmax(1)
                quality[label] = {"accuracy": float((probs.argmax(1) == gold).mean()),
                                  "agreement": float(same.mean()), "near_ties": int(tie.sum()),
                                  "decisive_agreement": float(same[~tie].mean()) if (~tie).any() else 1.0,
                                  "max_prob_diff": float(np.abs(probs - reference).max()),
                                  "bytes": _size(folders[label])}
            # speed: every model in turn, repeated, best time kept
            speed_texts = texts[:args.speed_texts]
            timed = {"pytorch": lambda: model.predict_logits(speed_texts, batch_size=args.batch_size)}
            for label, s in served.items():
                timed[label] = (lambda s=s: s.predict_logits(speed_texts, batch_size=args.batch_size))
            extra = {"int8, 1 thread": {"threads": 1}, "int8, 2 threads": {"threads": 2},
                     "int8, basic graph optimisations": {"level": "basic"},
                     "float, basic graph optimisations": {"level": "basic", "base": "float"}}
            for label, opts in extra.items():
                s = OnnxClassifier(folders[opts.get("base", "int8")])
                s.session = _session(folders[opts.get("base", "int8")], opts.get("threads", 0), opts.get("level", "all"))
                timed[label] = (lambda s=s: s.predict_logits(speed_texts, batch_size=args.batch_size))
            for fn in timed.values():  # warm-up
                fn()
            times = {label: [] for label in timed}
            for _ in range(args.repeats):
                for label, fn in timed.items():
                    t = time.perf_counter()
                    fn()
                    times[label].append(time.perf_counter() - t)
            best = {label: min(v) for label, v in times.items()}
            row = {"data": name, "classes": len(model.label_names), "texts": len(texts), "speed_texts": len(speed_texts),
                   "export_int8_s": export_s, "export_verification": meta["verification"],
                   "quality": quality, "seconds": best,
                   "speedup_vs_pytorch": {k: best["pytorch"] / v for k, v in best.items()},
                   "speedup_vs_float_onnx": {k: best["float"] / v for k, v in best.items()}}
            rows.append(row)
            print(json.dumps(row), file=sys.stderr, flush=True)

    out = Path(args.output)
    record = {"rows": rows, "model": args.model, "shots": args.shots, "batch_size": args.batch_size,
              "repeats": args.repeats, "torch_threads": torch.get_num_threads(), "cpus": os.cpu_count(),
              "load_average": os.getloadavg(), "cpu": cpu_features(), "versions": library_versions(),
              "onnxruntime": __import__("onnxruntime").__version__}
    write_json_atomic(out.with_suffix(".json"), record)
    text = markdown(record)
    write_text_atomic(out.with_suffix(".md"), text)
    print(text, end="")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
