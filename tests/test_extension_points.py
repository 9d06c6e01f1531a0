"""Every extension point is one file that registers itself: a new method file in ``contrastfit/methods``
or a new protocol file in ``contrastfit/experiments/protocols`` is found with no list to extend, and
shows in ``contrastfit methods``, ``train --method`` (with its hyper-parameters' options) and the
experiment config schema."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import contrastfit
from contrastfit.errors import ConfigError
from contrastfit.experiments import parse_config
from contrastfit.config import TrainConfig

METHOD = '''
from contrastfit.methods.base import Hparams, LossOutput, Method, hparam, register_method


@register_method
class Toy(Method):
    name = "toy-method"
    description = "a method from a file of its own"
    reference = "nobody (2026)"

    class Hparams(Hparams):
        weight: float = hparam(0.5, "weight of the loss", gt=0, flag="W")

    def training_loss(self, model, inputs, labels):
        logits = model.head(model.encoder(**inputs).pooled)
        return LossOutput(self.hparams["weight"] * self.task_loss(logits, labels), logits)
'''

PROTOCOL = '''
import dataclasses
from typing import Literal

from pydantic import PositiveInt

from contrastfit.experiments.protocols.base import ProtocolOptions, ProtocolRun, register_protocol


class Halves(ProtocolOptions):
    kind: Literal["halves"]
    parts: PositiveInt = 2


@register_protocol(Halves)
def halves(data, parts=2, seed=0):
    """One run per consecutive part of the training split."""
    n = len(data.train)
    return [ProtocolRun(f"part={i}", 0, {"part": i},
                        dataclasses.replace(data, train=data.train.select(range(i * n // parts, (i + 1) * n // parts))))
            for i in range(parts)]
'''

SCRIPT = '''
import contextlib, io, json
import datasets
import contrastfit
from contrastfit.cli import build_parser, main
from contrastfit.data import TextData
from contrastfit.errors import ConfigError
from contrastfit.experiments import parse_config
from contrastfit.experiments.plan import protocol_runs
from contrastfit.config import TrainConfig

out = io.StringIO()
with contextlib.redirect_stdout(out):
    main(["methods", "--json"])
listed = json.loads(out.getvalue())

args = build_parser().parse_args(["train", "--data", "mr", "--output", "x", "--method", "toy-method", "--weight", "0.2"])
TrainConfig(method=args.method, hparams={"weight": args.hp_weight}).validate()

split = datasets.Dataset.from_dict({"text": [f"t{i}" for i in range(6)], "label": [i % 2 for i in range(6)]})
data = TextData("toy", split, split, split, ["neg", "pos"], {})
config = parse_config({"data": "mr", "methods": [{"name": "toy-method", "weight": 0.1}],
                       "protocol": {"kind": "halves", "parts": 3}, "output": "x"}, "exp.yaml")
runs = protocol_runs(config, data)
try:
    parse_config({"data": "mr", "methods": ["ce"], "protocol": {"kind": "halves", "pieces": 3}, "output": "x"}, "exp.yaml")
    error = None
except ConfigError as exc:
    error = str(exc)
print(json.dumps({"package": contrastfit.__file__, "methods": listed, "flag": args.hp_weight, "protocol": type(config.protocol).__name__,
                  "variants": [v.label for v in config.methods],
                  "runs": [[r.setting, len(r.data.train)] for r in runs], "error": error}))
'''


@pytest.fixture(scope="module")
def extended(tmp_path_factory) -> dict:
    """What a copy of the package with one new method file and one new protocol file reports."""
    src = tmp_path_factory.mktemp("src")
    package = src / "contrastfit"
    shutil.copytree(Path(contrastfit.__file__).parent, package, ignore=shutil.ignore_patterns("__pycache__"))
    (package / "methods" / "toy_method.py").write_text(METHOD, encoding="utf-8")
    (package / "experiments" / "protocols" / "halves.py").write_text(PROTOCOL, encoding="utf-8")
    # the copy first, then whatever the caller's path held (packages installed outside site-packages)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(src), os.environ.get("PYTHONPATH")])),
           "HF_HUB_OFFLINE": "1"}
    done = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert Path(report["package"]).is_relative_to(package)
    return report


def test_the_new_files_are_unknown_without_them():
    with pytest.raises(ConfigError, match="unknown method 'toy-method'"):
        TrainConfig(method="toy-method").validate()
    with pytest.raises(ConfigError, match="unknown protocol kind 'halves'"):
        parse_config({"data": "mr", "methods": ["ce"], "protocol": "halves", "output": "x"}, "exp.yaml")


def test_a_new_method_file_is_listed_and_accepted(extended):
    assert extended["methods"]["toy-method"] == {"description": "a method from a file of its own",
                                                 "reference": "nobody (2026)", "defaults": {"weight": 0.5},
                                                 "training_defaults": {"learning_rate": 5e-5, "min_steps": 60}}
    assert {"ce", "ce-scl", "lacon"} <= set(extended["methods"])  # the others are still there
    assert extended["flag"] == 0.2  # its hyper-parameter declared with a flag is a `train` option
    assert extended["variants"] == ["toy-method[weight=0.1]"]


def test_a_new_protocol_file_is_in_the_schema_and_the_plan(extended):
    assert extended["protocol"] == "Halves"
    assert extended["runs"] == [["part=0", 2], ["part=1", 2], ["part=2", 2]]
    assert extended["error"] == "exp.yaml: protocol: unknown key 'pieces' (allowed: kind, parts, seed)"
