"""A saved folder fits sentence-transformers, transformers and the Hub: ``SentenceTransformer(folder)``
gives ``model.embed`` for every pooling, ``pipeline("text-classification")`` on ``encoder/`` does not
score with a random head, and ``contrastfit push`` / ``from_pretrained("owner/name")`` go through
huggingface_hub (a local stand-in of the Hub here, never the network)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from contrastfit import ContrastiveClassifier
from contrastfit.errors import ModelError

TEXTS = ["good fun film", "awful dull plot and the movie was very weak and boring but the actor was fine", "superb",
         "a"]


def _trained_like(tiny_encoder_dir, pooling: str, method: str = "ce", max_length: int = 8,
                  hparams: dict | None = None) -> ContrastiveClassifier:
    """The tiny encoder with its weights moved (as by training), so that no pretrained state hides a bug."""
    torch.manual_seed(3)
    model = ContrastiveClassifier.from_encoder(str(tiny_encoder_dir), method, ["negative", "positive"],
                                               pooling=pooling, max_length=max_length, hparams=hparams)
    with torch.no_grad():
        for p in model.encoder.parameters():
            p.add_(0.05 * torch.randn_like(p))
    return model.eval()


@pytest.mark.parametrize("pooling", ["cls", "pooler", "mean"])
def test_sentence_transformers_loads_the_folder_with_the_models_pooling_length_and_normalisation(
        tmp_path, tiny_encoder_dir, pooling):
    SentenceTransformer = pytest.importorskip("sentence_transformers").SentenceTransformer  # the test extra

    model = _trained_like(tiny_encoder_dir, pooling)
    model.save_pretrained(tmp_path / "run")
    st = SentenceTransformer(str(tmp_path / "run"), device="cpu")
    assert st.max_seq_length == model.max_length == 8  # the second text is longer: truncated the same way
    got = st.encode(TEXTS, convert_to_numpy=True)
    expected = model.embed(TEXTS)  # normalised, the documented default
    np.testing.assert_allclose(got, expected, atol=1e-5)
    np.testing.assert_allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-5)
    record = json.loads((tmp_path / "run" / "contrastfit.json").read_text())["sentence_transformers"]
    assert record["normalize"] is True and record["max_seq_length"] == 8 and record["pooling"] == pooling
    if pooling == "pooler":  # BERT's tanh pooler: CLS pooling then a Dense(tanh) module with its weights
        assert record["modules"] == ["encoder", "encoder/1_Pooling", "encoder/2_Dense", "encoder/3_Normalize"]
        cls = torch.nn.functional.normalize(
            model.encoder(**{k: torch.as_tensor(v) for k, v in model.tokenize(TEXTS[:1]).items()}).token_embeddings[:, 0], dim=-1)
        assert np.abs(cls.detach().numpy() - got[:1]).max() > 0.05  # the Dense module matters
    # the encoder folder alone is a sentence-transformers model with the same modules
    np.testing.assert_allclose(SentenceTransformer(str(tmp_path / "run" / "encoder"), device="cpu").encode(TEXTS),
                               expected, atol=1e-5)
    # the reloaded contrastfit model agrees too
    np.testing.assert_allclose(ContrastiveClassifier.from_pretrained(tmp_path / "run").embed(TEXTS), got, atol=1e-5)


def test_a_method_with_its_own_embedding_space_gets_no_root_sentence_transformers_files(tmp_path, tiny_encoder_dir):
    """LaCon's ``embed`` is its projection g: ``SentenceTransformer(folder)`` refuses the folder, and
    ``SentenceTransformer(folder/encoder)`` gives the encoder's own (pooled, normalised) embedding."""
    SentenceTransformer = pytest.importorskip("sentence_transformers").SentenceTransformer

    folder = tmp_path / "run"
    _trained_like(tiny_encoder_dir, "mean").save_pretrained(folder)
    assert (folder / "modules.json").is_file()
    lacon = _trained_like(tiny_encoder_dir, "cls", method="lacon", hparams={"heads": 2})
    lacon.save_pretrained(folder)  # over the previous model: its root sentence-transformers files go
    assert not (folder / "modules.json").exists() and not (folder / "config_sentence_transformers.json").exists()
    record = json.loads((folder / "contrastfit.json").read_text())["sentence_transformers"]
    assert record["folder"] is False and record["pooling"] == "cls"
    with pytest.raises((OSError, ValueError), match="config.json"):  # no modules.json, and no config.json at the root
        SentenceTransformer(str(folder), device="cpu")
    encoder_only = SentenceTransformer(str(folder / "encoder"), device="cpu").encode(TEXTS)
    inputs = {k: torch.as_tensor(v) for k, v in lacon.tokenize(TEXTS, padding=True).items()}
    with torch.no_grad():
        pooled = torch.nn.functional.normalize(lacon.encoder(**inputs).pooled, dim=-1).numpy()
    np.testing.assert_allclose(encoder_only, pooled, atol=1e-5)
    embedded = lacon.embed(TEXTS)  # what SentenceTransformer(folder) would have had to give
    assert embedded.shape != pooled.shape or np.abs(embedded - pooled).max() > 0.05
    from contrastfit.card import _loading
    from contrastfit.record import ModelConfig

    assert any("refuses the folder (no `modules.json` at its root)" in line
               for line in _loading(ModelConfig(sentence_transformers=record)))


def test_a_pooler_that_is_not_dense_plus_tanh_gets_no_sentence_transformers_files(tmp_path, tiny_encoder_dir):
    """ALBERT-style: the pooler is a bare Linear with the activation elsewhere; a Dense(tanh) module
    would not be it for sure, so nothing is written and sentence-transformers refuses the folder."""
    from contrastfit.hub import sentence_transformers_layout

    model = _trained_like(tiny_encoder_dir, "pooler")
    assert sentence_transformers_layout(model)[0] == "cls" and sentence_transformers_layout(model)[1] is not None
    model.encoder.backbone.pooler = torch.nn.Linear(32, 32)
    assert sentence_transformers_layout(model) is None
    model.save_pretrained(tmp_path / "run")
    assert not (tmp_path / "run" / "modules.json").exists() and not (tmp_path / "run" / "encoder" / "modules.json").exists()
    assert json.loads((tmp_path / "run" / "contrastfit.json").read_text())["sentence_transformers"] is None
    assert sentence_transformers_layout(_trained_like(tiny_encoder_dir, "mean")) == ("mean", None)


def test_pipeline_on_the_encoder_folder_does_not_score_with_a_random_head(tmp_path, tiny_encoder_dir):
    from transformers import AutoModel, pipeline

    model = _trained_like(tiny_encoder_dir, "cls")
    model.save_pretrained(tmp_path / "run")
    encoder = tmp_path / "run" / "encoder"
    config = json.loads((encoder / "config.json").read_text())
    assert config["architectures"] == ["BertModel"] and config["id2label"] == {}
    classify = pipeline("text-classification", model=str(encoder))
    assert classify.model.config.num_labels == 0
    with pytest.raises(ValueError):
        classify(["good fun film"])
    # the encoder itself still loads, with the trained weights
    backbone = AutoModel.from_pretrained(str(encoder))
    for name, value in model.encoder.backbone.state_dict().items():
        torch.testing.assert_close(backbone.state_dict()[name], value)


class _LocalHub:
    """A stand-in for the Hub: repositories are folders under ``root``."""

    def __init__(self, root: Path):
        self.root = root
        self.calls: list[tuple] = []

    def api(self, hub):
        class Api:
            def __init__(self, token=None, **_):
                pass

            def create_repo(self, repo_id, repo_type=None, private=False, exist_ok=False, **_):
                hub.calls.append(("create_repo", repo_id, repo_type, private))
                (hub.root / repo_id).mkdir(parents=True, exist_ok=exist_ok)
                return f"https://huggingface.co/{repo_id}"

            def upload_folder(self, repo_id, folder_path, repo_type=None, commit_message=None, **_):
                hub.calls.append(("upload_folder", repo_id, repo_type, commit_message))
                shutil.copytree(folder_path, hub.root / repo_id, dirs_exist_ok=True)

        return Api

    def snapshot_download(self, repo_id, repo_type=None, **_):
        if not (self.root / repo_id).is_dir():  # (the real client raises RepositoryNotFoundError, an OSError)
            raise OSError(f"404 Client Error. Repository Not Found for url: https://huggingface.co/api/models/{repo_id}."
                          "\nMore text")
        cache = self.root.parent / "cache" / repo_id
        shutil.copytree(self.root / repo_id, cache, dirs_exist_ok=True)
        return str(cache)


@pytest.fixture()
def local_hub(tmp_path, monkeypatch):
    import huggingface_hub

    hub = _LocalHub(tmp_path / "hub")
    monkeypatch.setattr(huggingface_hub, "HfApi", hub.api(hub))
    monkeypatch.setattr(huggingface_hub, "snapshot_download", hub.snapshot_download)
    return hub


def _run_folder(tmp_path, tiny_encoder_dir) -> tuple[Path, ContrastiveClassifier]:
    from contrastfit.card import write_model_card

    folder = tmp_path / "runs" / "a"
    model = _trained_like(tiny_encoder_dir, "mean")
    model.info.update(model=str(tiny_encoder_dir), seed=0,
                      data={"name": "my", "source": {"kind": "local", "path": str(tmp_path / "data" / "my.csv")},
                            "train_size": 10})
    model.save_pretrained(folder)
    record = {"method": "ce", "model": str(tiny_encoder_dir), "seed": 0, "data": model.info.data.to_dict(),
              "metrics": {"test": {"accuracy": 0.75, "f1": 0.7}}}
    (folder / "results.json").write_text(json.dumps(record))
    (folder / "checkpoints" / "checkpoint-2").mkdir(parents=True)
    write_model_card(folder)
    return folder, model


def test_push_uploads_the_folder_with_its_card_and_from_pretrained_loads_it_from_the_hub(
        tmp_path, tiny_encoder_dir, local_hub, capsys):
    from contrastfit.cli import main

    folder, model = _run_folder(tmp_path, tiny_encoder_dir)
    assert main(["push", str(folder), "--repo", "me/tiny-mr", "--private"]) == 0
    assert "https://huggingface.co/me/tiny-mr" in capsys.readouterr().out
    assert [c[0] for c in local_hub.calls] == ["create_repo", "upload_folder"]
    assert local_hub.calls[0] == ("create_repo", "me/tiny-mr", "model", True)
    repo = local_hub.root / "me" / "tiny-mr"
    assert {p.name for p in repo.iterdir()} == {"README.md", "contrastfit.json", "results.json", "head.safetensors",
                                                "encoder", "modules.json", "config_sentence_transformers.json"}
    assert (repo / "encoder" / "modules.json").is_file() and (repo / "encoder" / "2_Normalize" / "config.json").is_file()
    assert not (repo / "checkpoints").exists()
    for path in repo.rglob("*"):  # no absolute local path of this machine goes to the Hub
        if path.is_file() and path.suffix in (".json", ".md"):
            assert str(tmp_path) not in path.read_text(encoding="utf-8"), path
    assert json.loads((repo / "contrastfit.json").read_text())["data"]["source"]["path"] == "my.csv"
    assert json.loads((folder / "contrastfit.json").read_text())["data"]["source"]["path"] == str(tmp_path / "data" / "my.csv")

    loaded = ContrastiveClassifier.from_pretrained("me/tiny-mr")
    np.testing.assert_allclose(loaded.predict_logits(TEXTS), model.predict_logits(TEXTS), atol=1e-6)

    # and from Python, for a model in memory
    url = model.push_to_hub("me/other")
    assert url == "https://huggingface.co/me/other" and (local_hub.root / "me" / "other" / "README.md").is_file()
    np.testing.assert_allclose(ContrastiveClassifier.from_pretrained("me/other").embed(TEXTS), model.embed(TEXTS), atol=1e-6)


def test_push_leaves_the_folder_byte_for_byte_as_it_was(tmp_path, tiny_encoder_dir, local_hub, capsys):
    """push stages a copy (hard links where it can) whose records it rewrites: the folder pushed, and a
    file of the user's in it, are unchanged afterwards (content, mode, inode)."""
    from contrastfit.cli import main

    folder, _ = _run_folder(tmp_path, tiny_encoder_dir)
    (folder / "notes.txt").write_text("the user's own\n")

    def snapshot() -> dict:
        return {p.relative_to(folder).as_posix(): (p.read_bytes() if p.is_file() else None, p.stat().st_mode,
                                                   p.stat().st_ino) for p in sorted(folder.rglob("*"))}

    before = snapshot()
    assert main(["push", str(folder), "--repo", "me/kept"]) == 0
    capsys.readouterr()
    assert snapshot() == before
    assert (local_hub.root / "me" / "kept" / "notes.txt").read_text() == "the user's own\n"


def test_hub_failures_are_one_line_errors(tmp_path, tiny_encoder_dir, local_hub, monkeypatch, capsys):
    from contrastfit.cli import main

    with pytest.raises(ModelError, match=r"^me/missing: no such local folder, and downloading it from the Hugging Face "
                                         r"Hub failed: 404 Client Error") as err:
        ContrastiveClassifier.from_pretrained("me/missing")
    assert "\n" not in str(err.value)
    folder, _ = _run_folder(tmp_path, tiny_encoder_dir)
    capsys.readouterr()  # what building the folder printed (transformers' loading bars, where its version shows them)
    assert main(["push", str(folder), "--repo", "not a repo id"]) == 2
    assert capsys.readouterr().err == "contrastfit: error: --repo 'not a repo id' is not a Hub repository id (owner/name)\n"

    def offline(self, repo_id, **_):
        raise ConnectionError("Offline mode is enabled.\nmore")

    import huggingface_hub

    api = local_hub.api(local_hub)
    api.create_repo = offline
    monkeypatch.setattr(huggingface_hub, "HfApi", api)
    assert main(["push", str(folder), "--repo", "me/x"]) == 2
    err = capsys.readouterr().err
    assert err == f"contrastfit: error: pushing {folder} to the Hugging Face Hub as me/x failed: Offline mode is enabled.\n"


def test_from_pretrained_offline_with_the_real_client_is_one_line(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ModelError, match="downloading it from the Hugging Face Hub failed") as err:
        ContrastiveClassifier.from_pretrained("contrastfit-nobody/no-such-model")
    assert "\n" not in str(err.value)


def test_push_sets_the_cards_license_language_and_datasets(tmp_path, tiny_encoder_dir, local_hub, capsys):
    """``push --license --language --dataset`` (repeatable): the uploaded card's metadata has them (read
    back with huggingface_hub), as does the uploaded contrastfit.json; the folder's own card is kept
    otherwise (an edited body stays) and the folder is left as it was."""
    from huggingface_hub import ModelCard, metadata_load

    from contrastfit.cli import main

    folder, _ = _run_folder(tmp_path, tiny_encoder_dir)
    card = (folder / "README.md").read_text(encoding="utf-8")
    (folder / "README.md").write_text(card.replace("## Limitations", "My own notes.\n\n## Limitations"), encoding="utf-8")
    before = (folder / "README.md").read_bytes(), (folder / "contrastfit.json").read_bytes()
    assert main(["push", str(folder), "--repo", "me/carded", "--license", "mit", "--language", "en",
                 "--language", "de", "--dataset", "me/reviews", "--dataset", "stanfordnlp/imdb"]) == 0
    capsys.readouterr()
    repo = local_hub.root / "me" / "carded"
    meta = metadata_load(repo / "README.md")
    assert (meta["license"], meta["language"], meta["datasets"]) == ("mit", ["en", "de"], ["me/reviews", "stanfordnlp/imdb"])
    assert meta["library_name"] == "contrastfit" and meta["pipeline_tag"] == "text-classification"
    assert "My own notes." in ModelCard.load(repo / "README.md").text
    assert json.loads((repo / "contrastfit.json").read_text())["card"]["license"] == "mit"
    assert ((folder / "README.md").read_bytes(), (folder / "contrastfit.json").read_bytes()) == before
    # without a card in the folder, the one written from the records has them
    (folder / "README.md").unlink()
    assert main(["push", str(folder), "--repo", "me/fresh", "--license", "apache-2.0", "--dataset", "me/reviews"]) == 0
    meta = metadata_load(local_hub.root / "me" / "fresh" / "README.md")
    assert (meta["license"], meta["datasets"]) == ("apache-2.0", ["me/reviews"]) and "language" not in meta
    # and from Python
    _, model = _run_folder(tmp_path / "again", tiny_encoder_dir)
    model.push_to_hub("me/py", license="mit", language="fr")
    assert metadata_load(local_hub.root / "me" / "py" / "README.md")["language"] == ["fr"]
    capsys.readouterr()
    assert main(["push", str(folder), "--repo", "me/x", "--language", "English"]) == 2
    assert capsys.readouterr().err == "contrastfit: error: --language 'English' is not a language code (e.g. en, de, pt-BR)\n"
    assert not (local_hub.root / "me" / "x").exists()


def test_from_pretrained_passes_revision_and_token_to_snapshot_download(tmp_path, tiny_encoder_dir, monkeypatch):
    """A Hub id is downloaded with ``huggingface_hub.snapshot_download(revision=..., token=...)`` (a stand-in
    here that records its arguments and returns a local folder); a revision for a local folder is one line."""
    import huggingface_hub

    from contrastfit.multitask import MultiTaskModel

    folder, model = _run_folder(tmp_path, tiny_encoder_dir)
    calls = []

    def snapshot_download(repo_id, **kwargs):
        calls.append({"repo_id": repo_id, **kwargs})
        return str(folder)

    monkeypatch.setattr(huggingface_hub, "snapshot_download", snapshot_download)
    loaded = ContrastiveClassifier.from_pretrained("me/tiny", revision="v1.0", token="hf_secret")
    assert calls == [{"repo_id": "me/tiny", "repo_type": "model", "revision": "v1.0", "token": "hf_secret"}]
    np.testing.assert_allclose(loaded.predict_logits(TEXTS), model.predict_logits(TEXTS), atol=1e-6)
    ContrastiveClassifier.from_pretrained("me/tiny")
    assert calls[-1] == {"repo_id": "me/tiny", "repo_type": "model", "revision": None, "token": None}
    with pytest.raises(ModelError, match=r"holds a single-task model"):  # the same download path for multi-task
        MultiTaskModel.from_pretrained("me/tiny", revision="abc123")
    assert calls[-1]["revision"] == "abc123"
    with pytest.raises(ModelError, match=r"is a local folder, not a Hub id: revision='v1.0' applies") as err:
        ContrastiveClassifier.from_pretrained(folder, revision="v1.0")
    assert "\n" not in str(err.value)

    def missing(repo_id, **kwargs):
        raise OSError("404 Client Error. Revision Not Found for url: https://huggingface.co/api/models/me/tiny.\nmore")

    monkeypatch.setattr(huggingface_hub, "snapshot_download", missing)
    with pytest.raises(ModelError, match=r"^me/tiny: no such local folder, and downloading it at revision v9 from the "
                                         r"Hugging Face Hub failed: 404 Client Error. Revision Not Found"):
        ContrastiveClassifier.from_pretrained("me/tiny", revision="v9")


def test_progress_false_silences_save_load_and_push(tmp_path, tiny_encoder_dir, local_hub, capfd):
    """``progress=False`` on save_pretrained, from_pretrained (a folder or a Hub id) and push_to_hub: nothing
    on stdout or stderr (transformers' writing and loading bars, the Hub client's); the libraries'
    settings are back afterwards. The default still shows the bars."""
    import datasets
    from huggingface_hub.utils import are_progress_bars_disabled
    from transformers.utils import logging as hf_logging

    from contrastfit.multitask import MultiTaskModel

    datasets.enable_progress_bars()  # whatever an earlier test (the CLI's quiet mode) left
    hf_logging.enable_progress_bar()
    model = _trained_like(tiny_encoder_dir, "mean")
    capfd.readouterr()
    folder = model.save_pretrained(tmp_path / "run", progress=False)
    loaded = ContrastiveClassifier.from_pretrained(folder, progress=False)
    model.push_to_hub("me/quiet", progress=False)
    ContrastiveClassifier.from_pretrained("me/quiet", progress=False)
    assert capfd.readouterr() == ("", "")
    assert hf_logging.is_progress_bar_enabled() and datasets.is_progress_bar_enabled() and not are_progress_bars_disabled()
    np.testing.assert_allclose(loaded.predict_logits(TEXTS), model.predict_logits(TEXTS), atol=1e-6)
    with pytest.raises(ModelError):  # the flag reaches the multi-task class too (this folder is single-task)
        MultiTaskModel.from_pretrained(folder, progress=False)
    assert capfd.readouterr() == ("", "")
    model.save_pretrained(tmp_path / "loud")
    ContrastiveClassifier.from_pretrained(tmp_path / "loud")
    err = capfd.readouterr().err
    assert "Loading weights" in err and "Writing" in err
