"""Nothing the user wrote is moved, changed or deleted: every command that writes refuses an output that
is the current, home or root folder, holds its input, or holds files contrastfit did not write; a folder
of the user's own files is byte-for-byte unchanged afterwards (real folders, real commands)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from contrastfit.atomic import (MARKER, OutputError, atomic_folder, check_output, claim_folder, recover_folder,
                                written_by_contrastfit)
from contrastfit.cli import main


def snapshot(folder: Path) -> dict[str, tuple]:
    """Every entry under ``folder``: files by content, mode and inode, folders by mode and inode."""
    out = {}
    for path in sorted(folder.rglob("*")):
        st = path.lstat()
        key = path.relative_to(folder).as_posix()
        out[key] = (path.read_bytes() if path.is_file() else None, st.st_mode, st.st_ino)
    return out


@pytest.fixture()
def user_folder(tmp_path) -> Path:
    """A folder of the user's own: their training file, notes, a folder named like a model's."""
    from conftest import write_sentiment_csv

    folder = tmp_path / "mine"
    folder.mkdir()
    write_sentiment_csv(folder / "data.csv")
    (folder / "notes.txt").write_text("my notes\n")
    (folder / "encoder").mkdir()
    (folder / "encoder" / "mine.txt").write_text("mine\n")
    return folder


def one_error_line(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert err.startswith("contrastfit: error:") and "\n" not in err, err
    return err


# -- the rule ------------------------------------------------------------------------------------

def test_check_output_refuses_the_folders_that_hold_the_users_files(tmp_path, monkeypatch, user_folder):
    monkeypatch.chdir(user_folder)
    for value, fragment in ((".", "is the current folder"), (str(user_folder), "is the current folder"),
                            ("", "is empty"), ("/", "is the root folder"),
                            (str(tmp_path), "holds the input"), ("encoder", r"contrastfit did not write \(mine.txt\)")):
        with pytest.raises(OutputError, match=fragment):
            check_output(value, inputs=[user_folder / "data.csv"])
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    (tmp_path / "home").mkdir()
    with pytest.raises(OutputError, match="is your home folder"):
        check_output("~")
    # a new folder, an empty one and one contrastfit wrote are fine
    (user_folder / "empty").mkdir()
    for value in ("new/run", "empty"):
        assert check_output(value, inputs=[user_folder / "data.csv"]) == user_folder / value
    claim_folder(user_folder / "ours")
    (user_folder / "ours" / "checkpoints").mkdir()
    assert written_by_contrastfit(user_folder / "ours") and check_output("ours") == user_folder / "ours"


def test_check_output_for_files_refuses_an_input_and_an_existing_file_without_overwrite(user_folder):
    data = user_folder / "data.csv"
    with pytest.raises(OutputError, match="is the input"):
        check_output(data, inputs=[data], folder=False, overwrite=True)
    with pytest.raises(OutputError, match="already exists; give --overwrite"):
        check_output(user_folder / "notes.txt", folder=False)
    assert check_output(user_folder / "notes.txt", folder=False, overwrite=True) == user_folder / "notes.txt"
    (user_folder / "empty.jsonl").touch()
    assert check_output(user_folder / "empty.jsonl", folder=False) == user_folder / "empty.jsonl"


def test_atomic_folder_refuses_a_folder_of_the_users_files_and_leaves_it_as_it_was(user_folder):
    before = snapshot(user_folder)
    with pytest.raises(OutputError, match="contrastfit did not write"):
        with atomic_folder(user_folder) as staging:
            (staging / "data.csv").write_text("replaced")
    assert snapshot(user_folder) == before
    assert not list(user_folder.parent.glob(".mine.*"))


def test_atomic_folder_replaces_only_its_own_entries_and_never_renames_the_others(tmp_path):
    target = tmp_path / "model"
    with atomic_folder(target) as staging:
        (staging / "sub").mkdir()
        (staging / "sub" / "w.bin").write_bytes(b"1")
        (staging / "config.json").write_text("{}")
    assert json.loads((target / MARKER).read_text())["files"] == ["config.json", "sub/w.bin"]
    (target / "notes.txt").write_text("the user's")  # put beside the model afterwards
    (target / "checkpoints").mkdir()
    kept = {name: (target / name).stat().st_ino for name in ("notes.txt", "checkpoints")}
    with atomic_folder(target) as staging:
        (staging / "sub").mkdir()
        (staging / "sub" / "w.bin").write_bytes(b"2")
        (staging / "other.json").write_text("[]")
    assert (target / "sub" / "w.bin").read_bytes() == b"2" and (target / "config.json").read_text() == "{}"
    assert {name: (target / name).stat().st_ino for name in kept} == kept  # never renamed
    assert json.loads((target / MARKER).read_text())["files"] == ["config.json", "other.json", "sub/w.bin"]
    # a file the user put inside an entry that would be replaced: refused, nothing changed
    (target / "sub" / "mine.txt").write_text("mine")
    before = snapshot(target)
    with pytest.raises(OutputError, match="sub/mine.txt was not written by contrastfit"):
        with atomic_folder(target) as staging:
            (staging / "sub").mkdir()
    assert snapshot(target) == before
    assert not list(tmp_path.glob(".model.*"))


@pytest.mark.parametrize("committed", [False, True])
def test_recover_folder_rolls_an_interrupted_replacement_back_or_forward(tmp_path, committed):
    target = tmp_path / "model"
    with atomic_folder(target) as staging:
        (staging / "a.txt").write_text("old a")
        (staging / "b.txt").write_text("old b")
    (target / "notes.txt").write_text("the user's")
    # a kill in the middle: a.txt moved out (and, committed, the new a.txt moved in), b.txt not yet
    old, new = tmp_path / ".model.old-x", tmp_path / ".model.new-x"
    old.mkdir(), new.mkdir()
    (new / "a.txt").write_text("new a")
    (new / "b.txt").write_text("new b")
    os.rename(target / "a.txt", old / "a.txt")
    if committed:
        (old / ".committed").touch()
        os.rename(target / "b.txt", old / "b.txt")
        os.rename(new / "a.txt", target / "a.txt")
    recover_folder(target)
    expected = "new" if committed else "old"
    assert (target / "a.txt").read_text() == f"{expected} a" and (target / "b.txt").read_text() == f"{expected} b"
    assert (target / "notes.txt").read_text() == "the user's"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model"]


# -- every command that writes ---------------------------------------------------------------------

def _train(encoder, data, output, *extra) -> list[str]:
    return ["train", "--model", str(encoder), "--data", str(data), "--text-column", "sentence", "--label-column",
            "sentiment", "--method", "linear-probe", "--quiet", "--output", output, *extra]


@pytest.mark.parametrize("where", [".", "", "the data's folder", "encoder", "a parent of the data"])
def test_train_refuses_a_folder_of_the_users_files_and_changes_nothing(user_folder, tiny_encoder_dir, monkeypatch,
                                                                        capsys, where):
    monkeypatch.chdir(user_folder)
    output = {"the data's folder": str(user_folder), "a parent of the data": str(user_folder.parent)}.get(where, where)
    before = snapshot(user_folder.parent)
    assert main(_train(tiny_encoder_dir, user_folder / "data.csv", output)) == 2
    err = one_error_line(capsys)
    assert any(f in err for f in ("current folder", "is empty", "holds the input", "contrastfit did not write"))
    assert snapshot(user_folder.parent) == before


def test_train_writes_beside_the_users_files_and_marks_its_own_folder(user_folder, tiny_encoder_dir, capsys):
    before = snapshot(user_folder)
    run = user_folder / "runs" / "probe"
    assert main(_train(tiny_encoder_dir, user_folder / "data.csv", str(run))) == 0
    after = snapshot(user_folder)
    assert {k: v for k, v in after.items() if not k.startswith("runs")} == before
    assert written_by_contrastfit(run) and (run / "results.json").is_file()
    listed = set(json.loads((run / MARKER).read_text())["files"])
    assert {"contrastfit.json", "head.safetensors", "encoder/model.safetensors"} <= listed
    # the API refuses the same folders as the command line
    from contrastfit import train

    with pytest.raises(OutputError, match="contrastfit did not write"):
        train(data=str(user_folder / "data.csv"), text_column="sentence", label_column="sentiment",
              method="linear-probe", model=str(tiny_encoder_dir), output=str(user_folder / "encoder"), progress=False)
    assert snapshot(user_folder)["encoder/mine.txt"] == before["encoder/mine.txt"]


@pytest.fixture()
def trained(tmp_path, tiny_encoder_dir):
    from contrastfit.modeling import ContrastiveClassifier

    run = tmp_path / "run"
    ContrastiveClassifier.from_encoder(str(tiny_encoder_dir), "linear-probe", ["negative", "positive"]).save_pretrained(run)
    return run


def test_export_refuses_its_own_model_folder_and_a_folder_of_the_users_files(trained, user_folder, capsys):
    pytest.importorskip("onnxruntime")
    for output, fragment in ((trained, "is the input"), (user_folder, "contrastfit did not write")):
        before = snapshot(output)
        assert main(["export", str(trained), "--output", str(output)]) == 2
        assert fragment in one_error_line(capsys)
        assert snapshot(output) == before


def test_predict_evaluate_explain_never_overwrite_a_users_file_without_overwrite(trained, user_folder, capsys):
    data = str(user_folder / "data.csv")
    table = ["--data", data, "--text-column", "sentence", "--label-column", "sentiment"]
    before = snapshot(user_folder)
    for argv in (["predict", str(trained), "a film", "--output", str(user_folder / "notes.txt")],
                 ["predict", str(trained), "--file", data, "--text-column", "sentence", "--output", data, "--overwrite"],
                 ["evaluate", str(trained), *table, "--json", str(user_folder / "notes.txt")],
                 ["evaluate", str(trained), *table, "--json", data, "--overwrite"],
                 ["explain", str(trained), "a film", "--output", str(user_folder / "notes.txt")]):
        assert main(argv) == 2, argv
        err = one_error_line(capsys)
        assert "already exists; give --overwrite" in err or "is the input" in err
    assert snapshot(user_folder) == before
    # a new file beside them, and --overwrite on a file that is no input
    assert main(["predict", str(trained), "a film", "--output", str(user_folder / "p.jsonl")]) == 0
    assert main(["predict", str(trained), "a film", "--output", str(user_folder / "notes.txt"), "--overwrite"]) == 0
    after = snapshot(user_folder)
    assert json.loads(after["notes.txt"][0])["text"] == "a film"
    assert {k: v for k, v in after.items() if k not in ("p.jsonl", "notes.txt")} == \
        {k: v for k, v in before.items() if k != "notes.txt"}


def test_calibrate_changes_only_the_models_config(trained, user_folder, capsys):
    before, model_before = snapshot(user_folder), snapshot(trained)
    assert main(["calibrate", str(trained), "--data", str(user_folder / "data.csv"), "--text-column", "sentence",
                 "--label-column", "sentiment"]) in (0, 2)
    capsys.readouterr()
    assert snapshot(user_folder) == before
    changed = {k for k, v in snapshot(trained).items() if model_before.get(k) != v}
    assert changed <= {"contrastfit.json"}


def test_experiment_and_pretrain_refuse_a_folder_of_the_users_files(user_folder, tiny_encoder_dir, tmp_path, capsys):
    config = tmp_path / "exp.yaml"
    config.write_text(f"data: {user_folder / 'data.csv'}\ndata_options: {{text_column: sentence, label_column: "
                      f"sentiment}}\nmodel: {tiny_encoder_dir}\nmethods: [linear-probe]\noutput: {user_folder}\n")
    before = snapshot(user_folder)
    assert main(["experiment", str(config)]) == 2
    assert "holds the input" in one_error_line(capsys)
    assert main(["experiment", str(config), "--output", str(user_folder / "encoder")]) == 2
    assert "contrastfit did not write" in one_error_line(capsys)
    assert main(["pretrain", "--data", str(user_folder / "data.csv"), "--model", str(tiny_encoder_dir),
                 "--output", str(user_folder / "encoder"), "--max-steps", "1"]) == 2
    assert "contrastfit did not write" in one_error_line(capsys)
    assert snapshot(user_folder) == before
