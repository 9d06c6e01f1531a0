"""The last library tracebacks, each now one line naming the file or value (the style of
:mod:`test_errors`: exit status 2, exactly one line on standard error, its fragments):

* a model folder that does not fit itself: an edited ``encoder/config.json`` (another ``hidden_size``),
  a ``contrastfit.json`` naming more labels than the head has rows, an unknown pooling;
* pickled weights (``pytorch_model.bin``) given as a model or an encoder: not loaded, safetensors only;
* ``serve`` options no server runs with (a port above 65535, a negative one, a timeout of 0, ...) and an
  address it cannot listen on;
* a text argument whose bytes are not UTF-8 (Python keeps them as lone surrogates);
* an experiment whose grid is empty: refused when the config is read, naming the key.
"""

from __future__ import annotations

import json
import shutil
import socket
from pathlib import Path

import pytest

from contrastfit.cli import main
from test_errors import Ctx, _one_line, saved  # noqa: F401  (saved: the module's fixture, a tiny saved model)


class Broken(Ctx):
    """:class:`test_errors.Ctx` with copies of the saved model edited in one place."""

    def copy(self, name: str) -> Path:
        run = self.tmp / name
        shutil.copytree(self.run, run)
        return run

    def edited(self, name: str, file: str, **values) -> str:
        """A copy of the saved model whose JSON file ``file`` has ``values`` set."""
        run = self.copy(name)
        path = run / file
        path.write_text(json.dumps({**json.loads(path.read_text(encoding="utf-8")), **values}), encoding="utf-8")
        return str(run)

    def pickled_encoder(self, marker: Path | None = None) -> str:
        """The tiny encoder's folder with its weights as ``pytorch_model.bin`` (a torch pickle) instead of
        ``model.safetensors``; with ``marker``, a pickle whose unpickling creates ``marker``."""
        import torch
        from safetensors.torch import load_file

        folder = self.tmp / "pickled"
        shutil.copytree(self.encoder, folder)
        weights = folder / "model.safetensors"
        state = load_file(str(weights))
        weights.unlink()
        if marker is not None:
            class Payload:
                def __reduce__(self):
                    return exec, (f"open({str(marker)!r}, 'w').close()",)

            state = {**state, "payload": Payload()}
        torch.save(state, folder / "pytorch_model.bin")
        return str(folder)

    def pickled_model(self) -> str:
        """A copy of the saved model whose ``encoder/`` holds ``pytorch_model.bin`` instead of safetensors."""
        import torch
        from safetensors.torch import load_file

        run = self.copy("pickled-run")
        weights = run / "encoder" / "model.safetensors"
        torch.save(load_file(str(weights)), run / "encoder" / "pytorch_model.bin")
        weights.unlink()
        return str(run)

    def experiment(self, **config) -> str:
        return self.write("exp.yaml", json.dumps({
            "data": self.data, "data_options": {"text_column": "sentence", "label_column": "sentiment"},
            "model": str(self.encoder), "output": f"{self.tmp}/exp", "report": False, **config}))

    @property
    def train(self) -> list[str]:
        return [*super().train, "--text-column", "sentence", "--label-column", "sentiment"]


SURROGATES = b"\xed\xa0\x80 film".decode("utf-8", "surrogateescape")  # as Python reads the argument's bytes

BAD_INPUTS = [
    # -- a saved model that does not fit itself ----------------------------------------------------
    pytest.param(lambda c: ["predict", c.edited("wide", "encoder/config.json", hidden_size=64), "a film"],
                 ["wide/encoder/config.json", "model.safetensors", "[32]", "[64]"], id="predict-edited-hidden-size"),
    pytest.param(lambda c: [*c.train, "--data", c.data, "--output", f"{c.tmp}/run",
                            "--model", c.edited("wide", "encoder/config.json", hidden_size=64) + "/encoder"],
                 ["wide/encoder/config.json", "model.safetensors", "[32]", "[64]"], id="train-edited-hidden-size"),
    pytest.param(lambda c: ["predict", c.edited("three", "contrastfit.json", label_names=["a", "b", "c"]), "a film"],
                 ["three/head.safetensors", "contrastfit.json", "3 labels", "the head has 2 rows"],
                 id="predict-more-labels-than-head-rows"),
    pytest.param(lambda c: ["evaluate", c.edited("three", "contrastfit.json", label_names=["a", "b", "c"]),
                            "--data", c.data], ["three/head.safetensors", "3 labels", "2 rows"],
                 id="evaluate-more-labels-than-head-rows"),
    pytest.param(lambda c: ["predict", c.edited("weird", "contrastfit.json", pooling="weird"), "a film"],
                 ["weird/contrastfit.json", "pooling 'weird'", "cls, pooler, mean"], id="predict-unknown-pooling"),
    pytest.param(lambda c: ["serve", c.edited("weird", "contrastfit.json", pooling="weird"), "--port", "0"],
                 ["weird/contrastfit.json", "pooling 'weird'", "cls, pooler, mean"], id="serve-unknown-pooling"),
    # -- pickled weights ---------------------------------------------------------------------------------
    pytest.param(lambda c: [*c.train, "--data", c.data, "--output", f"{c.tmp}/run", "--model", c.pickled_encoder()],
                 ["pickled/pytorch_model.bin", "pickled PyTorch weights are not loaded", "safetensors only"],
                 id="train-pickled-encoder"),
    pytest.param(lambda c: ["predict", c.pickled_model(), "a film"],
                 ["pickled-run/encoder/pytorch_model.bin", "safetensors only"], id="predict-pickled-model"),
    # -- serve's numbers ---------------------------------------------------------------------------------
    pytest.param(lambda c: ["serve", str(c.run), "--port", "70000"], ["--port 70000", "0 to 65535"], id="serve-port-70000"),
    pytest.param(lambda c: ["serve", str(c.run), "--port", "-1"], ["--port -1", "0 to 65535"], id="serve-port-negative"),
    pytest.param(lambda c: ["serve", str(c.run), "--port", "0", "--timeout", "0"], ["--timeout 0", "above 0"],
                 id="serve-timeout-0"),
    pytest.param(lambda c: ["serve", str(c.run), "--port", "0", "--max-texts", "0"], ["--max-texts 0", "1 or more"],
                 id="serve-max-texts-0"),
    pytest.param(lambda c: ["serve", str(c.run), "--port", "0", "--threads", "-1"], ["--threads -1", "0 for"],
                 id="serve-threads-negative"),
    # -- text arguments that are not UTF-8 ----------------------------------------------------------------
    pytest.param(lambda c: ["predict", str(c.run), SURROGATES], ["text argument 1", "not valid UTF-8", "byte 0xed"],
                 id="predict-argument-not-utf8"),
    pytest.param(lambda c: ["explain", str(c.run), "a film", b"caf\xe9".decode("utf-8", "surrogateescape")],
                 ["text argument 2", r"'caf\xe9'", "not valid UTF-8", "byte 0xe9"], id="explain-argument-not-utf8"),
    # -- an experiment with an empty grid -------------------------------------------------------------------
    pytest.param(lambda c: ["experiment", c.experiment(methods=[{"name": "ce-scl", "temperature": []}])],
                 ["exp.yaml", "methods[0] (ce-scl)", "temperature: []", "grid empty"], id="experiment-empty-grid"),
]


@pytest.mark.parametrize("build, fragments", BAD_INPUTS)
def test_no_traceback_is_left(build, fragments, saved, tmp_path, capsys):  # noqa: F811
    code = main(build(Broken(tmp_path, saved)))
    _one_line(code, capsys.readouterr().err, [f.format(tmp=tmp_path) for f in fragments])
    assert not list(tmp_path.glob("run/*.json")) and not (tmp_path / "exp").exists()  # no model, no experiment


def test_a_pickle_that_would_run_code_is_not_opened(saved, tmp_path, capsys):  # noqa: F811
    """The weights are refused before torch reads them: a payload in them never runs."""
    marker, c = tmp_path / "code-ran", Broken(tmp_path, saved)
    code = main([*c.train, "--data", c.data, "--model", c.pickled_encoder(marker), "--output", str(tmp_path / "run")])
    _one_line(code, capsys.readouterr().err, ["pytorch_model.bin", "safetensors only"])
    assert not marker.exists() and not list(tmp_path.glob("run/*.json"))


def test_a_protocol_that_draws_no_runs_is_refused_before_training(saved, tmp_path, capsys, monkeypatch):  # noqa: F811
    """A protocol (a user's own, say) that draws no runs stops the experiment before any run, in one line
    naming the protocol, not at the summary with "no finished runs"."""
    from contrastfit.experiments.protocols.few_shot import FewShot

    monkeypatch.setattr(FewShot, "function", staticmethod(lambda data, **options: []))
    config = Broken(tmp_path, saved).experiment(methods=["ce"], protocol={"kind": "few-shot", "shots": 2})
    code = main(["experiment", config, "--quiet"])
    _one_line(code, capsys.readouterr().err, ["protocol 'few-shot' drew no runs", "'shots': [2]"])
    assert not list((tmp_path / "exp").glob("runs/*"))


def test_make_server_names_a_bad_port_and_an_address_in_use(saved):  # noqa: F811
    from contrastfit.errors import ContrastfitError
    from contrastfit.modeling import ContrastiveClassifier
    from contrastfit.serve import make_server

    model = ContrastiveClassifier.from_pretrained(saved.run)
    with pytest.raises(ContrastfitError, match=r"^port 70000: give a port from 0 to 65535"):
        make_server(model, port=70000)
    for timeout in (float("nan"), float("inf"), 0):  # (a socket cannot wait past about 1e10 s)
        with pytest.raises(ContrastfitError, match=rf"^timeout {timeout}: give a number of seconds above 0 and at most"):
            make_server(model, port=0, timeout=timeout)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(ContrastfitError, match=rf"^cannot listen on 127.0.0.1:{port}: "):
            make_server(model, port=port)


def test_a_stdin_line_kept_as_surrogates_is_refused(saved, monkeypatch, capsys):  # noqa: F811
    """A standard input without a byte buffer (its text already decoded, undecodable bytes kept as
    surrogates) gets the same one line, naming the line."""
    import io
    import sys

    monkeypatch.setattr(sys, "stdin", io.StringIO("a film\n" + SURROGATES + "\n"))
    _one_line(main(["predict", str(saved.run)]), capsys.readouterr().err,
              ["standard input: line 2", "not valid UTF-8", "byte 0xed"])
