"""Every code block in README.md and the documentation runs: docs that cannot drift.

Each page runs in its own temporary working folder, its blocks in page order, with a user's own
files already there (:data:`USER_FILES`): ``my.csv``, ``valid.csv``, ``test.csv``, ``unlabelled.txt``, ``texts.txt``.

* a ``python`` block runs in the page's one namespace (blocks of a page share it, as in a notebook);
* a ``bash`` block is a list of ``contrastfit ...`` command lines (``\\`` continues a line, ``#``
  starts a comment), each run in-process by :func:`contrastfit.cli.main`, which must return 0 (or the
  status of a ``<!-- exits: N -->`` line right above the block);
* a block with a title (```` ```yaml title="grid.yaml" ````) is a file the page shows: its text is
  written to that path in the working folder;
* a ``text`` block right after a run block, under a ``<!-- prints -->`` line, is what that block
  printed (standard output and error, the working folder's path shown as ``.``);
* a block under ``<!-- not run: REASON -->`` is skipped, and the reason may not be empty.

Every built-in encoder name (``minilm-l6``) stands for the tiny BERT of the tests (fine-tuned once on
toy sentiment rows, so that it groups texts as a pretrained encoder would), so a page's training
commands take seconds; the built-in data sets are the real ones.
"""

from __future__ import annotations

import contextlib
import csv
import io
import re
import shlex
from dataclasses import dataclass
from pathlib import Path

import pytest

from contrastfit import encoders
from contrastfit.cli import main

from conftest import sentiment_rows

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
RUN_KINDS = {"python", "bash"}
FENCE = re.compile(r"^(?P<indent> *)```(?P<info>[^`\n]*)$")
MARKER = re.compile(r"^\s*<!-- (not run|exits|prints)(?::\s*(.*?))? -->\s*$")
TITLE = re.compile(r'title="([^"]+)"')


@dataclass
class Block:
    page: Path
    line: int
    kind: str
    title: str | None
    text: str
    marker: tuple[str, str] | None  # ("not run", reason), ("exits", "2"), ("prints", "")

    @property
    def where(self) -> str:
        page = self.page.relative_to(ROOT) if self.page.is_relative_to(ROOT) else self.page
        return f"{page}:{self.line}"


def blocks(page: Path) -> list[Block]:
    """The fenced code blocks of ``page`` with the marker line right above each (if any)."""
    lines = page.read_text(encoding="utf-8").splitlines()
    found, i = [], 0
    while i < len(lines):
        match = FENCE.match(lines[i])
        if not match:
            i += 1
            continue
        indent, info = match["indent"], match["info"].strip()
        end = next((j for j in range(i + 1, len(lines)) if lines[j].strip() == "```"
                    and len(lines[j]) - len(lines[j].lstrip()) <= len(indent)), None)
        assert end is not None, f"{page}:{i + 1}: a code block that is never closed"
        above = next((lines[j] for j in range(i - 1, -1, -1) if lines[j].strip()), "")
        marker = MARKER.match(above)
        title = TITLE.search(info)
        text = "\n".join(line[len(indent):] for line in lines[i + 1:end]) + "\n"
        found.append(Block(page, i + 1, info.split()[0] if info else "", title[1] if title else None, text,
                           (marker[1], (marker[2] or "").strip()) if marker else None))
        i = end + 1
    return found


def write_user_files(folder: Path) -> None:
    """The files a user brings: a small labelled CSV, a test CSV, unlabelled texts, texts to predict."""
    def write_csv(path, rows):
        with open(path, "w", newline="", encoding="utf-8") as fh:
            writer = csv.writer(fh)
            writer.writerow(["text", "label"])
            writer.writerows([r["sentence"], r["sentiment"]] for r in rows)

    write_csv(folder / "my.csv", sentiment_rows(n_per_class=16, seed=0))
    def noisy(rows, every):  # real held-out data has rows no model gets right
        flip = {"negative": "positive", "positive": "negative"}
        return [dict(r, sentiment=flip[r["sentiment"]]) if i % every == 0 else r for i, r in enumerate(rows)]

    write_csv(folder / "valid.csv", noisy(sentiment_rows(n_per_class=10, seed=3), 6))
    write_csv(folder / "test.csv", noisy(sentiment_rows(n_per_class=20, seed=1), 8))
    (folder / "unlabelled.txt").write_text(
        "\n".join(r["sentence"] for r in sentiment_rows(n_per_class=30, seed=2)) + "\n", encoding="utf-8")
    (folder / "texts.txt").write_text("a fine film\nan awful plot\nthe story was very dull\n", encoding="utf-8")


USER_FILES = ("my.csv", "valid.csv", "test.csv", "unlabelled.txt", "texts.txt")


def command_lines(text: str) -> list[str]:
    """The command lines of a bash block: continuations joined, comments and blank lines dropped."""
    joined = re.sub(r"\\\n\s*", " ", text)
    out = []
    for line in joined.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        out.append(line)
    return out


def run_bash(block: Block, folder: Path) -> tuple[int, str]:
    printed, status = [], 0
    for line in command_lines(block.text):
        args = shlex.split(line, comments=True)
        assert args and args[0] == "contrastfit", (
            f"{block.where}: `{line}` is not a contrastfit command: run it here or mark the block "
            "<!-- not run: REASON -->")
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                status = main(args[1:])
            except SystemExit as exit_:  # argparse's --help and usage errors
                status = exit_.code if isinstance(exit_.code, int) else 1
        printed.append(out.getvalue() + err.getvalue())
        expected = int(block.marker[1]) if block.marker and block.marker[0] == "exits" else 0
        assert status == expected, f"{block.where}: `{line}` exited {status}, not {expected}:\n{printed[-1][-3000:]}"
    return status, "".join(printed)


def run_python(block: Block, namespace: dict) -> str:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        exec(compile(block.text, block.where, "exec"), namespace)
    return out.getvalue() + err.getvalue()


def normalise(text: str, folder: Path) -> str:
    text = text.replace(str(folder.resolve()), ".").replace(str(folder), ".")
    return "\n".join(line.rstrip() for line in text.strip().splitlines())


def run_page(page: Path, folder: Path) -> None:
    namespace: dict = {"__name__": "__main__"}
    printed: str | None = None
    for block in blocks(page):
        if block.marker and block.marker[0] == "not run":
            assert block.marker[1], f"{block.where}: <!-- not run: --> needs its reason"
            printed = None
            continue
        if block.marker and block.marker[0] == "prints":
            assert printed is not None, f"{block.where}: <!-- prints --> follows no block that ran"
            assert normalise(printed, folder) == normalise(block.text, folder), (
                f"{block.where}: the page shows\n{block.text}\nbut the block above printed\n{printed}")
            printed = None
            continue
        if block.title:
            target = folder / block.title
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(block.text, encoding="utf-8")
            printed = None
        elif block.kind == "bash":
            printed = run_bash(block, folder)[1]
        elif block.kind == "python":
            printed = run_python(block, namespace)
        else:
            assert block.kind not in RUN_KINDS
            printed = None


def _page_id(page: Path) -> str:
    return page.relative_to(ROOT).with_suffix("").as_posix()


def _runs_something(page: Path) -> bool:
    return any(b.kind in RUN_KINDS or b.title for b in blocks(page))


@pytest.fixture(scope="session")
def doc_encoder_dir(tiny_encoder_dir, tmp_path_factory) -> Path:
    """The tiny BERT fine-tuned once on the toy sentiment rows, so that, like MiniLM, it comes to a
    page already grouping texts by sentiment: a page's few default steps then give a model whose
    probabilities a calibration, an export check or an int8 check can work with."""
    from contrastfit import train

    rows = sentiment_rows(n_per_class=24, seed=5)
    result = train(texts=[r["sentence"] for r in rows], labels=[r["sentiment"] for r in rows],
                   model=str(tiny_encoder_dir), method="ce", learning_rate=1e-3, min_steps=60, progress=False)
    folder = result.model.save_pretrained(tmp_path_factory.mktemp("doc-encoder") / "model", progress=False)
    return Path(folder) / "encoder"


@pytest.fixture()
def doc_folder(tmp_path, monkeypatch, doc_encoder_dir):
    monkeypatch.setattr(encoders, "builtin_model_path", lambda name: doc_encoder_dir)
    monkeypatch.chdir(tmp_path)
    write_user_files(tmp_path)
    return tmp_path


@pytest.mark.parametrize("page", [p for p in PAGES if _runs_something(p)], ids=_page_id)
def test_every_code_block_of_the_page_runs(page, doc_folder):
    run_page(page, doc_folder)


def test_every_block_is_a_kind_the_runner_knows_or_says_why_not():
    """A ``bash``/``python`` block runs; any other kind of block is a file (with a title), output
    (``text``/``json`` shown as a result) or marked not run; an untitled ``yaml``/``csv`` block would
    show a file the page never uses."""
    loose = [b.where for p in PAGES for b in blocks(p)
             if b.kind in {"yaml", "csv", "toml", "tsv", "jsonl"} and not b.title and not b.marker]
    assert not loose, f"blocks that are neither a titled file nor marked <!-- not run: ... -->: {loose}"


def test_the_runner_catches_a_block_that_stops_working(tmp_path, doc_folder):
    page = tmp_path / "page.md"
    page.write_text("```bash\ncontrastfit train --data nowhere.csv --output runs/x\n```\n", encoding="utf-8")
    with pytest.raises(AssertionError, match="exited 2, not 0"):
        run_page(page, doc_folder)
    page.write_text("```python\nprint(1 + 1)\n```\n<!-- prints -->\n```text\n3\n```\n", encoding="utf-8")
    with pytest.raises(AssertionError, match="the page shows"):
        run_page(page, doc_folder)
    page.write_text("<!-- not run: -->\n```bash\nmake demo\n```\n", encoding="utf-8")
    with pytest.raises(AssertionError, match="needs its reason"):
        run_page(page, doc_folder)
    page.write_text("```bash\nmake demo\n```\n", encoding="utf-8")
    with pytest.raises(AssertionError, match="not a contrastfit command"):
        run_page(page, doc_folder)
