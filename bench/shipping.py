"""Shipping a model: calibration by temperature scaling, and the ONNX export's accuracy and speed.

For each data set (binary MR and five-class BBC News by default) the default recipe is trained on K
examples per class (sample 0, seed 0), the temperature is fitted on the data set's validation split,
and the test split's NLL and expected calibration error are measured before and after (accuracy
does not change). The first model is then exported to ONNX (verified), and PyTorch and ONNX Runtime
predict the same test sentences side by side in one process: the ratio of their times, and the
largest logit difference.

    python bench/shipping.py --data mr bbc-news --shots 16
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import numpy as np  # noqa: E402

from contrastfit import ContrastiveClassifier, load_data, train  # noqa: E402
from contrastfit.atomic import write_json_atomic, write_text_atomic  # noqa: E402
from contrastfit.evaluation.metrics import probability_metrics  # noqa: E402
from contrastfit.export import OnnxClassifier, export_onnx  # noqa: E402
from contrastfit.versions import library_versions  # noqa: E402


def _best_time(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times)


def markdown(record: dict) -> str:
    """The report of a record (``bench/results/shipping.json``): the calibration table and the export's line."""
    repeats = record.get("repeats", 3)  # records before the field: the script's default then
    lines = [f"# Shipping: calibration and ONNX export ({record['model']}, default recipe, K = {record['shots']}, "
             "sample 0, seed 0)", "",
             "Temperature fitted on the validation split; NLL (nats) and ECE (15 bins) on the test split. "
             "Accuracy is the same before and after.", "",
             "| data | classes | temperature | test accuracy | NLL before | NLL after | ECE before | ECE after |",
             "|---|---|---|---|---|---|---|---|"]
    for r in record["calibration"]:
        lines.append(f"| {r['data']} | {r['classes']} | {r['temperature']:.3f} | {100 * r['test_accuracy']:.1f} | "
                     f"{r['test_nll_before']:.3f} | {r['test_nll_after']:.3f} | {r['test_ece_before']:.3f} | "
                     f"{r['test_ece_after']:.3f} |")
    if record.get("export"):
        e = record["export"]
        lines += ["", f"ONNX export of the {e['data']} model: {e['export_s']:.1f} s including the verification "
                      f"(largest logit difference {e['verification']['max_abs_diff']:.1e}). On {e['texts']} test "
                      f"sentences in batches of {e['batch_size']}, best of {repeats}: PyTorch {e['pytorch_s']:.2f} s, "
                      f"ONNX Runtime {e['onnxruntime_s']:.2f} s (x{e['speedup']:.2f}); largest logit difference "
                      f"{e['max_abs_diff_test']:.1e}, same predictions: {e['same_predictions_test']}.",
                  "", f"{record['cpu_threads']} CPU threads; torch {record['versions'].get('torch')}."]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", nargs="+", default=["mr", "bbc-news"])
    p.add_argument("--model", default="minilm-l6")
    p.add_argument("--shots", type=int, default=16)
    p.add_argument("--speed-texts", type=int, default=512)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--output", default="bench/results/shipping")
    args = p.parse_args(argv)

    rows, export_row = [], None
    with tempfile.TemporaryDirectory() as tmp:
        for i, name in enumerate(args.data):
            data = load_data(name)
            run = Path(tmp) / name
            t0 = time.perf_counter()
            result = train(data=name, model=args.model, shots=args.shots, seed=0, output=str(run), progress=False)
            train_s = time.perf_counter() - t0
            model = ContrastiveClassifier.from_pretrained(run)
            val, test = data.split("validation"), data.split("test")
            calibration = model.calibrate(val["text"], val["label"])
            logits = model.predict_logits(test["text"])
            before = probability_metrics(logits, test["label"])
            after = probability_metrics(logits, test["label"], calibration["temperature"])
            accuracy = float((logits.argmax(1) == np.asarray(test["label"])).mean())
            rows.append({"data": name, "classes": len(data.label_names), "method": result["method"], "train_s": train_s,
                         "temperature": calibration["temperature"], "validation_rows": len(val), "test_rows": len(test),
                         "test_accuracy": accuracy, "test_nll_before": before["nll"], "test_nll_after": after["nll"],
                         "test_ece_before": before["ece"], "test_ece_after": after["ece"]})
            print(json.dumps(rows[-1]), file=sys.stderr)
            if i == 0:
                t0 = time.perf_counter()
                meta = export_onnx(run, Path(tmp) / "onnx")
                export_s = time.perf_counter() - t0
                served = OnnxClassifier(Path(tmp) / "onnx")
                texts = list(test["text"])[:args.speed_texts]
                torch_s = _best_time(lambda: model.predict_logits(texts, batch_size=args.batch_size), args.repeats)
                onnx_s = _best_time(lambda: served.predict_logits(texts, batch_size=args.batch_size), args.repeats)
                diff = float(np.abs(served.predict_logits(texts) - model.predict_logits(texts)).max())
                same = served.predict(texts) == model.predict(texts)
                export_row = {"data": name, "export_s": export_s, "verification": meta["verification"],
                              "texts": len(texts), "batch_size": args.batch_size, "pytorch_s": torch_s,
                              "onnxruntime_s": onnx_s, "speedup": torch_s / onnx_s, "max_abs_diff_test": diff,
                              "same_predictions_test": same}
                print(json.dumps(export_row), file=sys.stderr)

    out = Path(args.output)
    record = {"calibration": rows, "export": export_row, "shots": args.shots, "model": args.model,
              "repeats": args.repeats, "versions": library_versions(),
              "cpu_threads": __import__("torch").get_num_threads()}
    write_json_atomic(out.with_suffix(".json"), record)
    text = markdown(record)
    write_text_atomic(out.with_suffix(".md"), text)
    print(text, end="")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
