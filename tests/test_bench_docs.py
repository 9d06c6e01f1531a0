"""docs/benchmarks.md shows the committed records, not copies of them: every table is a
`<!-- bench: RECORD [VIEW] -->` marker that docs/hooks_bench.py renders at build time with the bench script's
own renderer; a marker with no record, or one no bench renders, fails the build in one line."""

from __future__ import annotations

import fnmatch
import json
import re
from pathlib import Path

import numpy as np
import pytest
import yaml
from mkdocs.exceptions import PluginError

from conftest import load_bench, load_script

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "benchmarks.md"
RESULTS = ROOT / "bench" / "results"


@pytest.fixture(scope="module")
def hooks():
    return load_script("docs", "hooks_bench")


@pytest.fixture(scope="module")
def page() -> str:
    return PAGE.read_text(encoding="utf-8")


@pytest.fixture(scope="module")
def generated(hooks, page) -> dict[str, str]:
    """Each marker of the page -> what it renders (the records as committed)."""
    return {m.group(0): hooks.render(m.group(1), m.group(2)) for m in hooks.MARKER.finditer(page)}


def _raw_fewshot(name: str) -> dict[tuple, dict[int, dict]]:
    """(data, K, system) -> sample -> the last finished record, read straight from the JSON lines."""
    cells: dict[tuple, dict[int, dict]] = {}
    for line in (RESULTS / f"{name}_runs.jsonl").read_text(encoding="utf-8").splitlines():
        if line.strip():
            r = json.loads(line)
            if "accuracy" in r:
                cells.setdefault((r["data"], r["shots"], r["system"]), {})[r["sample"]] = r
    return cells


def test_the_hook_is_registered_and_kept_out_of_the_pages():
    config = yaml.load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"), Loader=yaml.BaseLoader)
    assert "docs/hooks_bench.py" in config["hooks"]
    assert "hooks_bench.py" in config["exclude_docs"].split()


def test_every_marker_of_the_page_renders_and_none_is_left(hooks, page, generated):
    assert len(generated) >= 20
    for marker in ("<!-- bench: fewshot goal -->", "<!-- bench: fewshot kinds -->", "<!-- bench: fewshot misses -->",
                   "<!-- bench: datasets -->", "<!-- bench: heldout_kinds goal -->", "<!-- bench: step_time -->",
                   "<!-- bench: shipping -->", "<!-- bench: serve_load_fastapi -->", "<!-- bench: multilabel -->",
                   "<!-- bench: distill -->", "<!-- bench: executors -->", "<!-- bench: fewshot_gpu_h200 goal -->"):
        assert marker in generated, marker
    text = hooks.replace_markers(page, "benchmarks.md")
    assert not re.search(r"^<!-- bench:", text, re.MULTILINE)
    assert not re.search(r"^#", "".join(generated.values()), re.MULTILINE)  # a bench's headings become bold lines


def test_the_few_shot_table_holds_the_means_and_stds_of_the_raw_records(generated):
    table = generated["<!-- bench: fewshot goal -->"]
    cells = _raw_fewshot("fewshot")
    checked = 0
    for (data, shots, system), runs in cells.items():
        if system not in ("default", "linear-probe") or shots is None:
            continue
        acc = np.array([r["accuracy"] for r in runs.values()]) * 100
        (row,) = [line for line in table.splitlines() if line.startswith(f"| {data} | {shots} |")]
        assert f"{acc.mean():.1f} ± {acc.std(ddof=1):.1f}" in row, (data, shots, system, row)
        checked += 1
    assert checked == 30  # the default and the probe in 5 data sets x 3 K
    # the default's margin over the probe, paired by sample
    d, p = cells[("mr", 16, "default")], cells[("mr", 16, "linear-probe")]
    diff = np.mean([d[s]["accuracy"] - p[s]["accuracy"] for s in d]) * 100
    (row,) = [line for line in table.splitlines() if line.startswith("| mr | 16 |")]
    assert f"{diff:+.1f} (p=" in row


def test_the_other_tables_hold_numbers_of_their_records(generated):
    shipping = json.loads((RESULTS / "shipping.json").read_text(encoding="utf-8"))
    for r in shipping["calibration"]:
        assert f"| {r['data']} | {r['classes']} | {r['temperature']:.3f} |" in generated["<!-- bench: shipping -->"]
    steps = json.loads((RESULTS / "step_time.json").read_text(encoding="utf-8"))
    assert (f"| ce-scl-lr | {1000 * steps['median_s']['ce-scl-lr']:.0f} | "
            f"{steps['ratio_to_reference']['ce-scl-lr']:.2f} |") in generated["<!-- bench: step_time -->"]
    distill = json.loads((RESULTS / "distill.json").read_text(encoding="utf-8"))
    accuracy = distill["table"]["distill-cosine"]["accuracy"]
    assert f"{np.mean(accuracy['values']):.3f} ± {np.std(accuracy['values']):.3f}" in generated["<!-- bench: distill -->"]


def test_a_marker_whose_record_is_missing_fails_the_build_in_one_line(hooks, monkeypatch, tmp_path):
    monkeypatch.setattr(hooks, "RESULTS", tmp_path)
    for marker, file in (("<!-- bench: fewshot goal -->", "fewshot_runs.jsonl"), ("<!-- bench: shipping -->", "shipping.json"),
                         ("<!-- bench: serve_load md -->", "serve_load.md"), ("<!-- bench: datasets -->", "_runs.jsonl")):
        with pytest.raises(PluginError) as err:
            hooks.replace_markers(f"# Page\n\n{marker}\n", "benchmarks.md")
        message = str(err.value)
        assert "\n" not in message and message.startswith(f"benchmarks.md: {marker}: ") and file in message, message
    (tmp_path / "fewshot_runs.jsonl").write_text('{"data": "mr", "shots": 4, "sample": 0, "system": "setfit-lib", '
                                                 '"skipped": "not installed"}\n', encoding="utf-8")
    with pytest.raises(PluginError, match="holds no finished run"):
        hooks.replace_markers("<!-- bench: fewshot -->\n")


def test_an_unknown_record_or_view_or_a_malformed_marker_fails(hooks):
    for marker, says in (("<!-- bench: nonsense -->", "no bench renders a record named 'nonsense'"),
                         ("<!-- bench: fewshot everything -->", "views are goal, kinds, misses, systems"),
                         ("<!-- bench: shipping goal -->", "shipping has one view"),
                         ("<!-- bench: datasets kinds -->", "`datasets` has no views"),
                         ("<!-- bench: fewshot goal extra -->", "is not a bench marker"),
                         ("<!-- bench:fewshot -->", "is not a bench marker")):
        with pytest.raises(PluginError, match=re.escape(says)):
            hooks.replace_markers(f"text\n{marker}\n", "benchmarks.md")
    assert hooks.replace_markers("a `<!-- bench: RECORD -->` in a sentence\n") == "a `<!-- bench: RECORD -->` in a sentence\n"


def test_the_page_writes_no_few_shot_number_by_hand(page, generated):
    """No hand-written table holds a mean ± std, no hand-written row names a data set and K, and every
    mean ± std the prose quotes is one the records render on the page."""
    hand_rows = [line for line in page.splitlines() if line.startswith("|")]
    assert not [line for line in hand_rows if "±" in line]
    sets = ("mr", "imdb", "bbc-news", "boolq", "medmcqa-subject", "trec", "sms-spam", "crowdflower-tweets", "mcid")
    assert not [line for line in hand_rows if re.match(rf"\| ({'|'.join(sets)}) \| \d+ \|", line)]
    rendered = "".join(generated.values())
    quoted = re.findall(r"\d+\.\d+ ± \d+\.\d+", page)
    assert all(q in rendered for q in quoted), [q for q in quoted if q not in rendered]


def test_the_page_has_no_dates_and_keeps_the_anchors_other_pages_link_to(page):
    prose = re.sub(r"`[^`]*`|<!-- bench: [^>]*-->", "", page)  # a record's file name may hold its date
    assert not re.findall(r"\b20\d\d-\d\d(-\d\d)?\b", prose)
    headings = re.findall(r"^##+ (.+)$", page, re.MULTILINE)
    for heading in ("Few-shot accuracy", "Other kinds of task", "Training time",
                    "Step time of every method", "Shipping", "Serving", "Experiment executors", "Multi-label",
                    "Distillation", "Studies behind the default recipe", "Data sets", "Running the benches"):
        assert heading in headings, heading


def test_the_held_out_sets_are_named_and_scored_once_by_the_default_only(page):
    """The held-out sets are in no study: only ``heldout_runs.jsonl`` names them, and there the only
    contrastfit recipe is the default's (with the systems it is compared with: no variant was tried)."""
    fewshot = load_bench("fewshot")
    assert fewshot.HELD_OUT == ("hwu64", "20newsgroups", "disaster-tweets", "election-tweets", "yahoo-answers")
    for name in fewshot.HELD_OUT:
        assert f"`{name}`" in page
    for path in RESULTS.glob("*_runs.jsonl"):
        records = [r for r in fewshot.read_records(path) if isinstance(r.get("data"), str)]
        used = {fewshot.base_data(r["data"]) for r in records}
        if path.name == fewshot.HELD_OUT_RECORDS:
            assert used <= set(fewshot.HELD_OUT)
            assert {r["system"] for r in records} <= set(fewshot.HELD_OUT_SYSTEMS)
            recipes = {json.dumps({k: r[k] for k in ("method", "hparams")}, sort_keys=True)
                       for r in records if r["system"] == "default" and "accuracy" in r}
            assert len(recipes) <= 1  # scored once: one recipe, no default changed in between
        else:
            assert not used & set(fewshot.HELD_OUT), path.name


def test_the_renderers_write_what_the_committed_md_files_hold(hooks):
    """A bench writes its .md with the renderer the page calls: from the committed JSON they give the
    committed .md (the int8 records' tables; their first line now counts the sentences each record scored)."""
    for name in ("shipping", "executors", "distill", "gradient_cache", "serve_load_fastapi", "head_c", "loso_recipes_k8",
                 "quantize", "quantize_run1", "quantize_vnni", "quantize_2026-11-27"):
        script, how = next((s, h) for pattern, s, h in hooks.JSON_RECORDS if pattern.match(name))
        text = how(hooks.bench(script), json.loads((RESULTS / f"{name}.json").read_text(encoding="utf-8")))
        committed = (RESULTS / f"{name}.md").read_text(encoding="utf-8")
        if name.startswith("quantize"):
            text, committed = ([line for line in t.splitlines() if line.startswith("|")] for t in (text, committed))
        assert text == committed, name


def test_the_figure_is_drawn_from_the_records_committed_and_shown(tmp_path, page):
    fewshot = load_bench("fewshot")
    summaries = [fewshot.summarise(fewshot.read_records(RESULTS / f"{n}_runs.jsonl")) for n in fewshot.README_RECORDS]
    fewshot.accuracy_figure(summaries, tmp_path / "figure.png")
    assert (tmp_path / "figure.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    committed = RESULTS / fewshot.FIGURE
    assert committed.is_file() and committed.stat().st_size < 300_000
    assert f"](bench/results/{fewshot.FIGURE})" in page and "make bench-figures" in page
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    assert re.search(r"^bench-figures:.*\n\t.*bench/fewshot\.py --figure", makefile, re.MULTILINE)


def test_every_committed_record_is_named_on_the_page(hooks, page):
    """Nothing in bench/results is orphaned: each record is rendered by a marker or named (a name ending in
    * covers every record it begins)."""
    named = {m.group(1) for m in hooks.MARKER.finditer(page)}
    for token in re.findall(r"`([^`\s]+)`", page):
        base = token.rsplit("/", 1)[-1]
        base = re.sub(r"(_runs\.jsonl|\.\{[\w,]+\}|\.\*|\.jsonl|\.json|\.md|\.png)$", "", base)
        named.add(base)
    stems = {re.sub(r"(_runs)?\.(jsonl|json|md|png)$", "", p.name) for p in RESULTS.iterdir() if p.is_file()}
    orphans = [s for s in sorted(stems)
               if not any(s == n or (n.endswith("*") and fnmatch.fnmatch(s, n)) for n in named)]
    assert not orphans, orphans


def test_the_readme_table_is_the_one_the_records_give():
    """`python bench/fewshot.py --readme` writes it; a number typed into the README by hand fails here."""
    fewshot = load_bench("fewshot")
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    start, end = readme.index(fewshot.README_START), readme.index(fewshot.README_END)
    table = readme[start + len(fewshot.README_START):end].strip()
    summaries = [fewshot.summarise(fewshot.read_records(fewshot.RESULTS / f"{n}_runs.jsonl"))
                 for n in fewshot.README_RECORDS]
    assert table == fewshot.readme_markdown(summaries).strip()
    assert "| trec | question type | chose | 5 | 53.7 | **76.5** | 72.1 (n=1) | 75.4 |" in table
