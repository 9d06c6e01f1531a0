"""Bad input gets one line: every command over a table of bad inputs (exit status 2, exactly one line
on standard error, naming the file, column or value), and messy data (labels with white space or in
two cases, a column named twice, empty texts) is cleaned or refused, never silently changed.

A new bad input is one row of ``BAD_INPUTS``: ``(command line, expected fragments)``, where the
command line is a function of :class:`Ctx` returning the arguments (and optionally standard input
as bytes), and a fragment may name ``{tmp}``, ``{run}`` or ``{pair_run}``.
"""

from __future__ import annotations

import io
import json
import shutil
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from contrastfit.cli import main



def _writes_into_read_only_folders() -> bool:
    """True for root (or a process with CAP_DAC_OVERRIDE): a folder's mode does not stop it."""
    import tempfile

    folder = Path(tempfile.mkdtemp())
    try:
        folder.chmod(0o555)
        (folder / "x").write_text("x")
        return True
    except PermissionError:
        return False
    finally:
        folder.chmod(0o755)
        shutil.rmtree(folder)


as_root = pytest.mark.skipif(_writes_into_read_only_folders(),
                             reason="root writes into a read-only folder; the rows under a file cover it")


@pytest.fixture(scope="module")
def saved(tmp_path_factory, tiny_encoder_dir):
    """An untrained single-text model and a pair model saved as `contrastfit train` saves them (no training)."""
    from contrastfit.modeling import ContrastiveClassifier

    folder = tmp_path_factory.mktemp("errors")
    runs = {}
    for name, pairs in (("run", False), ("pair-run", True)):
        model = ContrastiveClassifier.from_encoder(str(tiny_encoder_dir), "ce", ["negative", "positive"])
        if pairs:
            model.info.data = {"text_pair": True}
        model.save_pretrained(folder / name)
        runs[name] = folder / name
    return SimpleNamespace(**{k.replace("-", "_"): v for k, v in runs.items()}, encoder=tiny_encoder_dir)


class Ctx:
    """Paths a row builds its command line from; files are written on first use."""

    def __init__(self, tmp: Path, saved):
        self.tmp, self.run, self.pair_run, self.encoder = tmp, saved.run, saved.pair_run, saved.encoder

    def write(self, name: str, text: str) -> str:
        path = self.tmp / name
        path.write_text(text, encoding="utf-8")
        return str(path)

    @property
    def data(self) -> str:
        """A labelled CSV with columns ``sentence`` and ``sentiment``."""
        from conftest import write_sentiment_csv

        path = self.tmp / "toy.csv"
        return str(path if path.exists() else write_sentiment_csv(path))

    @property
    def train(self) -> list[str]:
        return ["train", "--model", str(self.encoder), "--quiet", "--epochs", "1", "--min-steps", "1",
                "--batch-size", "8"]

    @property
    def a_file(self) -> str:
        return self.write("a-file.txt", "not a folder")

    def read_only(self) -> str:
        folder = self.tmp / "read-only"
        folder.mkdir(exist_ok=True)
        folder.chmod(0o555)
        return str(folder)

    def damaged(self, name: str, keep: int, pairs: bool = False) -> str:
        """A copy of the saved model whose file ``name`` keeps only its first ``keep`` bytes."""
        run = self.tmp / f"damaged-{keep}"
        shutil.copytree(self.pair_run if pairs else self.run, run)
        path = run / name
        path.write_bytes(path.read_bytes()[:keep])
        return str(run)


LONG = "x" * 300  # a file name longer than any file system allows (also for root)
LABELS_IN_TWO_CASES = "text,label\n" + "".join(f"good film {i},pos\nbad film {i},neg\n" for i in range(10)) + "fine film,Pos\n"

BAD_INPUTS = [
    # -- outputs that cannot be written (§6) -----------------------------------------------------
    pytest.param(lambda c: [*c.train, "--data", c.data, "--text-column", "sentence", "--label-column", "sentiment",
                            "--output", f"{c.read_only()}/run"], ["read-only/run", "permission"],
                 marks=as_root, id="train-output-read-only"),
    pytest.param(lambda c: [*c.train, "--data", c.data, "--text-column", "sentence", "--label-column", "sentiment",
                            "--output", f"{c.tmp}/{LONG}"], [LONG[:20], "longer than"], id="train-output-name-too-long"),
    pytest.param(lambda c: ["predict", str(c.run), "a film", "--output", f"{c.read_only()}/p.jsonl"],
                 ["read-only/p.jsonl", "permission"], marks=as_root, id="predict-output-read-only"),
    pytest.param(lambda c: ["predict", str(c.run), "a film", "--output", f"{c.a_file}/p.jsonl"],
                 ["a-file.txt/p.jsonl", "which is a file"], id="predict-output-under-a-file"),
    pytest.param(lambda c: ["predict", str(c.run), "a film", "--output", str(c.tmp)], ["output {tmp} is a folder", "--output takes a file name"],
                 id="predict-output-is-a-folder"),
    pytest.param(lambda c: ["evaluate", str(c.run), "--data", c.data, "--text-column", "sentence", "--label-column",
                            "sentiment", "--json", f"{c.read_only()}/m.json"], ["read-only/m.json", "permission"],
                 marks=as_root, id="evaluate-json-read-only"),
    pytest.param(lambda c: ["evaluate", str(c.run), "--data", c.data, "--text-column", "sentence", "--label-column",
                            "sentiment", "--json", f"{c.a_file}/m.json"], ["a-file.txt/m.json", "which is a file"],
                 id="evaluate-json-under-a-file"),
    pytest.param(lambda c: ["explain", str(c.run), "a film", "--output", f"{c.a_file}/e.jsonl"],
                 ["a-file.txt/e.jsonl", "which is a file"], id="explain-output-under-a-file"),
    pytest.param(lambda c: ["export", str(c.run), "--output", c.a_file], ["a-file.txt", "is a file"],
                 id="export-output-is-a-file"),
    # -- a damaged model folder (§6) ---------------------------------------------------------------
    pytest.param(lambda c: ["predict", c.damaged("head.safetensors", 0), "a film"],
                 ["head.safetensors", "not a complete safetensors file"], id="predict-empty-head"),
    pytest.param(lambda c: ["evaluate", c.damaged("encoder/model.safetensors", 1000), "--data", c.data,
                            "--text-column", "sentence", "--label-column", "sentiment"],
                 ["encoder/model.safetensors", "not a complete safetensors file"], id="evaluate-truncated-encoder"),
    pytest.param(lambda c: ["explain", str(c.run), "a film", "--samples", "0"], ["samples must be >= 1, got 0"],
                 id="explain-no-orderings"),
    pytest.param(lambda c: ["explain", c.damaged("head.safetensors", 20), "a film"],
                 ["head.safetensors", "not a complete safetensors file"], id="explain-truncated-head"),
    pytest.param(lambda c: ["calibrate", c.damaged("encoder/model.safetensors", 0), "--data", c.data],
                 ["encoder/model.safetensors", "not a complete safetensors file"], id="calibrate-empty-encoder"),
    pytest.param(lambda c: ["export", c.damaged("head.safetensors", 0), "--output", f"{c.tmp}/onnx"],
                 ["head.safetensors", "not a complete safetensors file"], id="export-empty-head"),
    pytest.param(lambda c: ["serve", c.damaged("head.safetensors", 0), "--port", "0"],
                 ["head.safetensors", "not a complete safetensors file"], id="serve-empty-head"),
    pytest.param(lambda c: ["card", f"{c.tmp}/no-run"], ["no-run"], id="card-missing-folder"),
    # -- the other commands' inputs ----------------------------------------------------------------
    pytest.param(lambda c: ["pretrain", "--data", c.write("corpus.txt", "a film\n"), "--model", str(c.encoder),
                            "--output", f"{c.a_file}/encoder"], ["a-file.txt/encoder", "which is a file"],
                 id="pretrain-output-under-a-file"),
    pytest.param(lambda c: ["experiment", f"{c.tmp}/no-such.yaml"], ["no-such.yaml"], id="experiment-missing-config"),
    pytest.param(lambda c: ["report", f"{c.tmp}/no-experiment"], ["no-experiment"], id="report-missing-folder"),
    pytest.param(lambda c: ["compare", f"{c.tmp}/no-a", f"{c.tmp}/no-b"], ["no-a"], id="compare-missing-folders"),
    # -- values argparse lets through (§6) ----------------------------------------------------------
    pytest.param(lambda c: ["evaluate", str(c.run), "--data", c.data, "--text-column", "sentence", "--label-column",
                            "sentiment", "--batch-size", "0"], ["--batch-size", "0"], id="evaluate-batch-size-0"),
    pytest.param(lambda c: ["predict", str(c.run), "a film", "--batch-size", "0"], ["--batch-size", "0"],
                 id="predict-batch-size-0"),
    pytest.param(lambda c: ["calibrate", str(c.run), "--data", c.data, "--text-column", "sentence", "--label-column",
                            "sentiment", "--batch-size", "-1"], ["--batch-size", "-1"], id="calibrate-batch-size-negative"),
    pytest.param(lambda c: [*c.train, "--data", c.data, "--label-separator", ";", "--output", f"{c.tmp}/run"],
                 ["--label-separator", "--multi-label"], id="train-label-separator-without-multi-label"),
    # -- standard input (§6) -------------------------------------------------------------------------
    pytest.param(lambda c: (["predict", str(c.run)], "a fine film\ncaf\xe9 cr\xe8me\n".encode("latin-1")),
                 ["standard input", "UTF-8", "line 2", "0xe9"], id="predict-stdin-not-utf8"),
    pytest.param(lambda c: (["explain", str(c.run)], b"\xff\xfe a film\n"), ["standard input", "UTF-8", "0xff"],
                 id="explain-stdin-not-utf8"),
    # -- columns (§6, §4) ------------------------------------------------------------------------------
    pytest.param(lambda c: [*c.train, "--data", c.data, "--text-column", "sentence", "--label-column", "sentence",
                            "--output", f"{c.tmp}/run"], ["toy.csv", "'sentence'", "text column", "label column"],
                 id="train-label-column-is-the-text-column"),
    pytest.param(lambda c: [*c.train, "--data", c.data, "--label-column", "sentence", "--output", f"{c.tmp}/run"],
                 ["toy.csv", "'sentence'", "text column", "label column"], id="train-label-column-is-the-guessed-text-column"),
    pytest.param(lambda c: ["evaluate", str(c.run), "--data", c.data, "--text-column", "sentiment", "--label-column",
                            "sentiment"], ["toy.csv", "'sentiment'", "text column", "label column"],
                 id="evaluate-label-column-is-the-text-column"),
    pytest.param(lambda c: [*c.train, "--data", c.write("twice.csv", "text,label,label\n" + "good film,pos,neg\n" * 30),
                            "--output", f"{c.tmp}/run"], ["twice.csv", "column 'label' appears twice"],
                 id="train-column-named-twice"),
    pytest.param(lambda c: ["predict", str(c.run), "--file", c.write("twice.jsonl", '{"text": "a", "text": "b"}\n')],
                 ["twice.jsonl", "column 'text' appears twice", "line 1"], id="predict-json-key-twice"),
    # -- labels and texts (§4) ----------------------------------------------------------------------------
    pytest.param(lambda c: [*c.train, "--data", c.write("cases.csv", LABELS_IN_TWO_CASES), "--output", f"{c.tmp}/run"],
                 ["cases.csv", "column 'label'", "'Pos' (1 row)", "'pos' (10 rows)", "differ only in case"],
                 id="train-labels-differ-in-case"),
    pytest.param(lambda c: [*c.train, "--data", c.write("blank.csv", "text,label\ngood film,pos\n   ,neg\nbad film,neg\n"),
                            "--output", f"{c.tmp}/run"], ["blank.csv", "column 'text'", "empty", "row 2"],
                 id="train-white-space-text"),
    pytest.param(lambda c: ["evaluate", str(c.run), "--data", c.write("blank.jsonl", '{"text": "good", "label": "positive"}\n'
                                                                                     '{"text": "", "label": "negative"}\n')],
                 ["blank.jsonl", "column 'text'", "empty", "row 2"], id="evaluate-empty-text"),
    pytest.param(lambda c: ["predict", str(c.pair_run), "--file", c.write("half.txt", "good film\tgreat plot\nno tab here\n")],
                 ["{pair_run} classifies text pairs", "text 2 has no tab"], id="predict-pair-model-line-without-tab"),
    pytest.param(lambda c: ["predict", str(c.run), "--file", c.write("pairs.csv", "sentence1,sentence2\na,b\nc,d\n")],
                 ["{run} classifies single texts", "--text-pair-column"], id="predict-single-model-given-pairs"),
]


def _one_line(code: int, err: str, fragments) -> None:
    lines = err.strip().splitlines()
    assert code == 2, err
    assert len(lines) == 1 and lines[0].startswith("contrastfit: error: "), err
    for fragment in fragments:
        assert fragment in lines[0], lines[0]


@pytest.mark.parametrize("build, fragments", BAD_INPUTS)
def test_every_command_answers_bad_input_in_one_line(build, fragments, saved, tmp_path, capsys, monkeypatch):
    built = build(Ctx(tmp_path, saved))
    argv, stdin = built if isinstance(built, tuple) else (built, None)
    if stdin is not None:  # as Python reads a pipe in the C locale: undecodable bytes kept as surrogates
        monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(stdin), encoding="utf-8",
                                                           errors="surrogateescape"))
    try:
        code = main(argv)
    finally:
        for folder in tmp_path.glob("read-only"):
            folder.chmod(0o755)  # so that pytest can clean up
    names = {"tmp": tmp_path, "run": saved.run, "pair_run": saved.pair_run}
    _one_line(code, capsys.readouterr().err, [f.format(**names) for f in fragments])
    assert not (tmp_path / "run").exists() and not (tmp_path / "onnx").exists()  # nothing was written


# -- messy data (§4): labels, columns, texts ------------------------------------------------------------

def test_labels_are_stripped_of_white_space_wherever_they_are_loaded(tmp_path):
    """`pos` and `pos ` are one class: in a file (quoted, so the CSV reader keeps the space), a folder
    laid out like a Hub data set, a ClassLabel feature, and a TextData built in Python."""
    import datasets

    from contrastfit.data import TextData, load_data
    from contrastfit.data.loading import normalise_columns

    rows = "".join(f'good film {i},"pos "\nbad film {i}, neg\ngreat film {i},pos\n' for i in range(10))
    (tmp_path / "messy.csv").write_text("text,label\n" + rows, encoding="utf-8")
    data = load_data(str(tmp_path / "messy.csv"), validation_split=0)
    assert data.label_names == ["neg", "pos"]
    assert data.train["label"][:3] == [1, 0, 1]
    folder = tmp_path / "hub-like"
    folder.mkdir()
    (folder / "train.csv").write_text("text,label\n" + rows, encoding="utf-8")
    (folder / "test.csv").write_text('text,label\na film,"pos "\nthe plot,neg \n', encoding="utf-8")
    data = load_data(str(folder))
    assert data.label_names == ["neg", "pos"] and data.test["label"] == [1, 0]
    feature = datasets.ClassLabel(names=["neg", " pos"])
    ds = datasets.Dataset.from_dict({"text": ["a", "b"], "label": [0, 1]},
                                    features=datasets.Features({"text": datasets.Value("string"), "label": feature}))
    _, names = normalise_columns(ds, "hub", None, None, None)
    assert names == ["neg", "pos"]
    assert TextData("mine", ds, None, None, ["neg ", "pos"]).label_names == ["neg", "pos"]


def test_labels_that_differ_only_in_case_or_white_space_are_refused_everywhere():
    import datasets

    from contrastfit.data import TextData
    from contrastfit.data.loading import normalise_columns
    from contrastfit.errors import DataError

    ds = datasets.Dataset.from_dict({"text": ["a", "b"], "label": [0, 1]}, features=datasets.Features(
        {"text": datasets.Value("string"), "label": datasets.ClassLabel(names=["pos", "Pos"])}))
    with pytest.raises(DataError, match=r"hub, column 'label': labels 'pos' and 'Pos' differ only in case"):
        normalise_columns(ds, "hub", None, None, None)
    with pytest.raises(DataError, match=r"data set 'mine': labels 'neg' and 'NEG' differ only in case"):
        TextData("mine", ds, None, None, ["neg", "NEG"])
    with pytest.raises(DataError, match=r"data set 'mine': the label 'pos' is there twice \('pos', 'pos '\)"):
        TextData("mine", ds, None, None, ["pos", "pos "])


@pytest.mark.parametrize("name, content", [
    ("twice.json", '[{"text": "a", "label": "x", "label": "y"}]'),
    ("twice.jsonl", '{"text": "a", "label": "x"}\n{"text": "b", "label": "y", "label": "z"}\n'),
    ("twice.tsv", "text\tlabel\tlabel\na\tx\ty\n"),
    ("twice.parquet", None),
])
def test_a_column_named_twice_is_refused(tmp_path, name, content):
    """pandas renames the second `label` to `label.1`, Python's json keeps the last: never silently."""
    from contrastfit.data.loading import read_table
    from contrastfit.errors import DataError

    path = tmp_path / name
    if content is None:
        import pyarrow as pa
        import pyarrow.parquet as pq

        pq.write_table(pa.table([pa.array(["a"]), pa.array(["x"]), pa.array(["y"])], names=["text", "label", "label"]), path)
    else:
        path.write_text(content, encoding="utf-8")
    with pytest.raises(DataError, match=f"{name}: column 'label' appears twice"):
        read_table(path)


# -- one rule for a tab: predict and serve (§4) ---------------------------------------------------------

def test_a_tab_splits_a_pair_only_for_a_pair_model(saved, tmp_path, capsys):
    """A single-text model reads a line with a tab whole (as the server reads such a text); a pair model
    splits it at the first tab, in predict and in the server alike."""
    from contrastfit.modeling import ContrastiveClassifier
    from contrastfit.serve import _parse

    lines = tmp_path / "lines.txt"
    lines.write_text("good film\tgreat plot\n", encoding="utf-8")
    assert main(["predict", str(saved.run), "--file", str(lines)]) == 0
    (row,) = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert row["text"] == "good film\tgreat plot" and "text_pair" not in row
    expected = ContrastiveClassifier.from_pretrained(saved.run).predict_proba(["good film\tgreat plot"])[0]
    assert list(row["probabilities"].values()) == pytest.approx(expected.tolist(), abs=1e-5)
    assert _parse(json.dumps({"texts": ["good film\tgreat plot"]}).encode(), False) == (["good film\tgreat plot"], None)

    assert main(["predict", str(saved.pair_run), "--file", str(lines)]) == 0
    (row,) = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert (row["text"], row["text_pair"]) == ("good film", "great plot")
    assert _parse(json.dumps({"texts": ["good film\tgreat plot"]}).encode(), True) == (["good film"], ["great plot"])
    with pytest.raises(ValueError, match='this model classifies single texts: leave "pairs" out'):
        _parse(json.dumps({"texts": ["a"], "pairs": ["b"]}).encode(), False)


def test_standard_input_is_read_as_utf8_bytes(saved, monkeypatch, capsys):
    """Not the locale's decoding: a text with non-ASCII characters arrives as it was sent."""
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO("café crème\n".encode("utf-8")), encoding="ascii",
                                                       errors="surrogateescape"))
    assert main(["predict", str(saved.run)]) == 0
    assert json.loads(capsys.readouterr().out)["text"] == "café crème"


def test_a_line_ends_at_a_newline_only(saved, tmp_path, capsys):
    """A form feed or U+2028 inside a line is part of its text (str.splitlines would cut it in two)."""
    lines = tmp_path / "lines.txt"
    lines.write_text("good\u2028film\r\nbad\x0cplot\n", encoding="utf-8")
    assert main(["predict", str(saved.run), "--file", str(lines)]) == 0
    out = capsys.readouterr().out.strip("\n").split("\n")  # (the JSON lines hold U+2028 as it is)
    assert [json.loads(line)["text"] for line in out] == ["good\u2028film", "bad\x0cplot"]
