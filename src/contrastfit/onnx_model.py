"""An ONNX export of a trained model (``contrastfit export``), served by ONNX Runtime and the tokenizer
alone: no PyTorch model code. :func:`contrastfit.export.export_onnx` writes the folder (``model.onnx``,
the tokenizer, ``export.json``); :class:`OnnxClassifier` reads it and predicts as
:class:`~contrastfit.modeling.ContrastiveClassifier` does. Below both the exporter and the inference
loader (:mod:`contrastfit.inference`), which is why it is a module of its own.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from .errors import ModelError
from .outputs import FORMS, LABEL_SETS
from .record import ModelData, ModelInfo

__all__ = ["EXPORT_NAME", "ONNX_NAME", "OnnxClassifier"]

ONNX_NAME = "model.onnx"
EXPORT_NAME = "export.json"


def _require_runtime() -> None:
    import importlib.util

    missing = [m for m in ("onnx", "onnxscript", "onnxruntime") if importlib.util.find_spec(m) is None]
    if missing:
        raise ModelError(f"ONNX export needs {', '.join(missing)}: pip install 'contrastfit[export]'")


def _tokenize(tokenizer, texts, pairs, max_length: int, tensors: str, separate: bool = False):
    """The model's inputs: the texts (and pairs) as one sequence each, or, for a head that reads the two
    texts of a pair encoded apart (``separate``), each text on its own with ``*_b`` for the second."""
    kw = dict(truncation=True, max_length=max_length, padding=True, return_tensors=tensors)
    if separate:
        return {**tokenizer(list(texts), **kw), **{f"{k}_b": v for k, v in tokenizer(list(pairs), **kw).items()}}
    return tokenizer(list(texts), list(pairs) if pairs is not None else None, **kw)


class OnnxClassifier:
    """A folder written by :func:`export_onnx`, served by ONNX Runtime and the tokenizer alone."""

    def __init__(self, folder: str | os.PathLike, *, providers: Sequence[str] | None = None,
                 _meta: dict[str, Any] | None = None):
        _require_runtime()
        import onnxruntime
        from transformers import AutoTokenizer

        folder = Path(folder)
        if _meta is None:
            path = folder / EXPORT_NAME
            if not path.is_file():
                raise ModelError(f"{folder} is not an ONNX export of contrastfit (no {EXPORT_NAME}); write one with "
                                 "`contrastfit export`")
            _meta = json.loads(path.read_text(encoding="utf-8"))
        self.meta = _meta
        self.label_names: list[str] | None = _meta["label_names"]
        self.task: str = _meta["task"]
        self.temperature = float(_meta.get("temperature", 1.0))
        #: what the logits mean (exports before the form was recorded: a regression task, label sets, or classes)
        self.outputs = FORMS[_meta.get("outputs") or ("label-sets" if _meta.get("multi_label") else
                                                      "regression" if self.task == "regression" else "classes")]
        #: label sets: per-label thresholds and temperatures
        self.thresholds = _meta.get("thresholds")
        self.temperatures = _meta.get("temperatures")
        self.tokenizer = AutoTokenizer.from_pretrained(str(folder))
        self.session = onnxruntime.InferenceSession(str(folder / ONNX_NAME),
                                                    providers=list(providers or ["CPUExecutionProvider"]))

    @property
    def multi_label(self) -> bool:
        return self.outputs is LABEL_SETS

    @property
    def info(self) -> ModelInfo:
        """What the command line reads of a model's record: whether it takes text pairs."""
        return ModelInfo(data=ModelData(text_pair=bool(self.meta.get("text_pair"))))

    @classmethod
    def from_pretrained(cls, folder: str | os.PathLike, **kwargs) -> "OnnxClassifier":
        return cls(folder, **kwargs)

    def predict_logits(self, texts: Sequence[str], pairs: Sequence[str] | None = None, batch_size: int = 64,
                       progress: bool = False) -> np.ndarray:
        from tqdm.auto import tqdm

        out = []
        order = np.argsort([-len(t) for t in texts], kind="stable")  # similar lengths batch together (less padding)
        for start in tqdm(range(0, len(texts), batch_size), desc="predict", disable=not progress, leave=False):
            idx = order[start:start + batch_size]
            enc = _tokenize(self.tokenizer, [texts[i] for i in idx], [pairs[i] for i in idx] if pairs is not None else None,
                            self.meta["max_length"], "np", bool(self.meta.get("separate_pairs")))
            feed = {k: np.asarray(enc[k], dtype=np.int64) for k in self.meta["inputs"]}
            out.append(self.session.run(["logits"], feed)[0])
        width = 1 if self.task == "regression" else len(self.label_names or [])
        if not out:
            return np.zeros((0, width), np.float32)
        logits = np.concatenate(out)
        result = np.empty_like(logits)
        result[order] = logits
        return result

    def predict_proba(self, texts: Sequence[str], pairs: Sequence[str] | None = None, batch_size: int = 64) -> np.ndarray:
        return self.outputs.probabilities(self, self.predict_logits(texts, pairs, batch_size))

    def predict(self, texts: Sequence[str], pairs: Sequence[str] | None = None, batch_size: int = 64) -> list:
        return self.outputs.predictions(self, self.predict_logits(texts, pairs, batch_size))
