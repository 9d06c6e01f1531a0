"""``contrastfit.hyperparameter_search``: an Optuna study over a method's hyper-parameters and training
settings from Python, on the experiment ``search:``'s space parser and objective (tiny model, 2-3 trials)."""

from __future__ import annotations

import pytest

import contrastfit
from contrastfit.errors import ConfigError

from conftest import sentiment_rows

optuna = pytest.importorskip("optuna")  # the test extra


def _rows():
    rows = sentiment_rows()
    return [r["sentence"] for r in rows], [r["sentiment"] for r in rows]


def _fast(tiny_encoder_dir, **kw):
    return dict(dict(model=str(tiny_encoder_dir), epochs=1, batch_size=8, learning_rate=1e-3, progress=False), **kw)


def test_the_search_returns_the_best_settings_and_the_study(tiny_encoder_dir, monkeypatch, capfd):
    """Three trials of ce-scl over its temperature (a float range) and the batch size (choices): every
    trial trains on the same held-out validation rows, never scores test, keeps no model; the result's
    values are the best trial's, its config trains with them, and the study holds every trial."""
    import contrastfit.training as training

    seen, real_train = [], training.train

    def spy(config, **kwargs):
        result = real_train(config, **kwargs)
        seen.append((config, kwargs["text_data"], result))
        return result

    monkeypatch.setattr(training, "train", spy)
    texts, labels = _rows()
    capfd.readouterr()
    result = contrastfit.hyperparameter_search(
        texts=texts, labels=labels, method="ce-scl", n_trials=3,
        space={"temperature": {"low": 0.1, "high": 0.5}, "batch_size": [4, 8]}, **_fast(tiny_encoder_dir))
    assert capfd.readouterr() == ("", "")  # progress=False: no trial lines, no bars, no summaries
    assert isinstance(result, contrastfit.SearchResult) and isinstance(result.study, optuna.Study)
    assert len(result.study.trials) == 3 and len(seen) == 3
    assert result.metric == "validation accuracy" and result.value == pytest.approx(result.study.best_value)
    assert set(result.params) == {"temperature", "batch_size"} and 0.1 <= result.params["temperature"] <= 0.5
    for config, data, trained in seen:
        assert config.method == "ce-scl" and config.evaluate_test is False and config.save_model is False
        assert config.output is None and data is seen[0][1]  # loaded once: the same validation rows every trial
        assert trained["data"]["validation_size"] == 3 and "test" not in trained.metrics
        assert config.batch_size in (4, 8) and 0.1 <= config.hparams["temperature"] <= 0.5
    scores = [trained.metrics["validation"]["accuracy"] for *_, trained in seen]
    assert result.value == pytest.approx(max(scores))
    best = result.config
    assert best.method == "ce-scl" and best.hparams == {"temperature": result.params["temperature"]}
    assert best.batch_size == result.params["batch_size"] and best.data == (texts, labels)
    final = real_train(best)  # the settings train as they are
    assert final.model.method.hparams["temperature"] == pytest.approx(result.params["temperature"])


def test_a_space_function_seeds_and_a_chosen_metric(tiny_encoder_dir):
    """SetFit-style: a function asks the trial; each trial averages the given seeds; the metric is chosen
    (nll: minimised by default)."""
    texts, labels = _rows()

    def space(trial):
        return {"learning_rate": trial.suggest_float("learning_rate", 1e-4, 1e-2, log=True)}

    result = contrastfit.hyperparameter_search((texts, labels), method="ce", space=space, n_trials=2, seeds=[0, 1],
                                               metric="nll", **_fast(tiny_encoder_dir))
    assert result.metric == "validation nll" and result.study.direction == optuna.study.StudyDirection.MINIMIZE
    assert result.value == pytest.approx(min(t.value for t in result.study.trials))
    assert set(result.params) == {"learning_rate"} and result.config.learning_rate == result.params["learning_rate"]


@pytest.mark.parametrize("kwargs, message", [
    (dict(space={"temperature": [0.1]}), r"^hyperparameter_search\(\) needs training data"),
    (dict(data="x.csv", method="ce-scl", space={"no_such": [1, 2]}),
     r"^space: 'no_such' is neither a hyper-parameter of ce-scl \(lambda, temperature\) nor a training setting"),
    (dict(data="x.csv", method="ce-scl", space={"temperature": {"low": 0.5, "high": 0.1}}),
     r"^space\.temperature: low \(0\.5\) is above high \(0\.1\)"),
    (dict(data="x.csv", method="ce-scl", space={"temperature": [-1.0, 0.5]}), r"temperature must be > 0, got -1.0"),
    (dict(data="x.csv", space={}), r"^space must be a non-empty mapping"),
    (dict(data="x.csv", space={"lr": [1]}, n_trials=0), r"^n_trials must be at least 1"),
])
def test_bad_searches_are_one_line(tmp_path, kwargs, message, monkeypatch):
    from conftest import write_sentiment_csv

    monkeypatch.chdir(tmp_path)
    write_sentiment_csv(tmp_path / "x.csv")
    with pytest.raises(ConfigError, match=message) as err:
        contrastfit.hyperparameter_search(label_column="sentiment", text_column="sentence", progress=False, **kwargs)
    assert "\n" not in str(err.value)
