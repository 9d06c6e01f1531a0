"""WiSE-FT (``--wise-ft A``): the fine-tuned encoder's weights mixed with the pretrained ones
(Wortsman et al. 2022, Eq. 1), then the head fitted on the result; on the tiny encoder."""

from __future__ import annotations

import pytest
import torch

from contrastfit import ContrastiveClassifier, train
from contrastfit.errors import ConfigError
from contrastfit.pipeline import WeightInterpolation


def _train(tmp_path, tiny_encoder_dir, data, name, **kw):
    return train(method=kw.pop("method", "ce-scl-lr"), data=str(data), output=str(tmp_path / name),
                 model=str(tiny_encoder_dir), epochs=2, batch_size=8, learning_rate=1e-3, progress=False,
                 label_column="sentiment", seed=0, **kw)


def _encoder_state(folder):
    model = ContrastiveClassifier.from_pretrained(folder)
    return {k: v.clone() for k, v in model.encoder.state_dict().items()}


def test_the_interpolation_is_the_papers_equation():
    torch.manual_seed(0)
    module = torch.nn.Linear(4, 3)
    module.register_buffer("ids", torch.arange(3))  # an integer buffer is not a weight: left as it is
    start = {k: v.clone() for k, v in module.state_dict().items()}
    mix = WeightInterpolation(module, 0.25)
    with torch.no_grad():
        module.weight.add_(1.0)
        module.bias.mul_(-2.0)
        module.ids.add_(5)
    tuned = {k: v.clone() for k, v in module.state_dict().items()}
    info = mix.apply(module)
    for name in ("weight", "bias"):
        assert torch.allclose(module.state_dict()[name], 0.25 * tuned[name] + 0.75 * start[name], atol=1e-7)
    assert torch.equal(module.ids, tuned["ids"])
    assert info["alpha"] == 0.25 and info["tensors"] == 2


def test_a_run_mixes_the_fine_tuned_and_the_pretrained_encoder(tmp_path, tiny_encoder_dir, sentiment_csv):
    pretrained = {k: v.clone() for k, v in
                  ContrastiveClassifier.from_encoder(str(tiny_encoder_dir), "ce-scl-lr", ["negative", "positive"])
                  .encoder.state_dict().items()}
    tuned_run = _train(tmp_path, tiny_encoder_dir, sentiment_csv, "tuned", wise_ft=1.0)  # the recipe turned off
    assert tuned_run["training"]["wise_ft"] == {"alpha": 1.0, "tensors": 0, "rule": tuned_run["training"]["wise_ft"]["rule"]}
    tuned = _encoder_state(tuned_run.output)
    half = _train(tmp_path, tiny_encoder_dir, sentiment_csv, "half")  # ce-scl-lr's own default: 0.5
    mixed = _encoder_state(half.output)
    moved = [k for k, v in pretrained.items() if v.is_floating_point() and not torch.allclose(v, tuned[k])]
    assert moved, "fine-tuning changed no encoder weight: the test would prove nothing"
    for k in moved:
        assert torch.allclose(mixed[k], 0.5 * tuned[k] + 0.5 * pretrained[k], atol=1e-6), k
    assert half["training"]["wise_ft"]["alpha"] == 0.5
    # what the benches read back from a record: the weight, or None for a run without the interpolation
    assert WeightInterpolation.recorded_alpha(half["training"]) == 0.5
    assert WeightInterpolation.recorded_alpha(tuned_run["training"]) == 1.0
    assert WeightInterpolation.recorded_alpha({"wise_ft": None}) is None
    assert WeightInterpolation.recorded_alpha({}) is None and WeightInterpolation.recorded_alpha(None) is None
    # alpha 0 gives back the pretrained encoder, and its head is then a probe of it
    zero = _encoder_state(_train(tmp_path, tiny_encoder_dir, sentiment_csv, "zero", wise_ft=0.0).output)
    assert all(torch.equal(zero[k], v) for k, v in pretrained.items())


def test_a_method_with_no_head_fitted_after_its_encoder_is_refused(tmp_path, tiny_encoder_dir, sentiment_csv):
    with pytest.raises(ConfigError, match=r"^--wise-ft: ce fits no head after its encoder; give it to a two-stage"):
        _train(tmp_path, tiny_encoder_dir, sentiment_csv, "ce", method="ce", wise_ft=0.5)
    # with --refit-head the head is a logistic regression on the mixed encoder
    run = _train(tmp_path, tiny_encoder_dir, sentiment_csv, "refit", method="ce", wise_ft=0.5, refit_head=True)
    assert run["training"]["wise_ft"]["alpha"] == 0.5
    with pytest.raises(ConfigError, match="wise_ft"):
        _train(tmp_path, tiny_encoder_dir, sentiment_csv, "big", wise_ft=1.5)
    # 1 keeps the fine-tuned weights: nothing to refuse, and methods without a default leave it out
    assert _train(tmp_path, tiny_encoder_dir, sentiment_csv, "one", method="ce", wise_ft=1.0)["training"]["wise_ft"]["alpha"] == 1
    assert _train(tmp_path, tiny_encoder_dir, sentiment_csv, "plain", method="ce")["training"]["wise_ft"] is None


def test_the_default_recipe_declares_its_weight_and_the_user_overrides_it():
    from contrastfit.trainer import method_schedule, with_method_defaults
    from contrastfit.methods import get_method
    from contrastfit.methods import multilabel_methods
    from contrastfit.shapes import DEFAULT_METHOD
    from contrastfit.config import TrainConfig

    assert method_schedule(get_method(DEFAULT_METHOD).cls)["wise_ft"] == 0.5
    assert with_method_defaults(TrainConfig(method=DEFAULT_METHOD)).wise_ft == 0.5
    assert with_method_defaults(TrainConfig(method=DEFAULT_METHOD, wise_ft=0.8)).wise_ft == 0.8
    assert with_method_defaults(TrainConfig(method="ce")).wise_ft is None
    # the multi-label form was not measured with it: no interpolation unless asked for
    assert with_method_defaults(TrainConfig(method=DEFAULT_METHOD, multi_label=True),
                                multilabel_methods()[DEFAULT_METHOD]).wise_ft is None


def test_label_sets_mix_the_encoder_too(tiny_encoder_dir):
    """The multi-label job applies the same interpolation: alpha 0 keeps the pretrained encoder."""
    words = {"sport": ["match", "goal", "team"], "money": ["bank", "price", "market"], "law": ["court", "judge", "ruling"]}
    texts, labels = [], []
    for i in range(36):
        tags = [list(words)[i % 3]] + ([list(words)[(i + 1) % 3]] if i % 4 == 0 else [])
        texts.append(" ".join(words[t][(i + j) % 3] for j, t in enumerate(tags * 2)) + f" item {i}")
        labels.append(tags)
    pretrained = ContrastiveClassifier.from_encoder(str(tiny_encoder_dir), "ce-scl-lr", ["a", "b"]).encoder.state_dict()
    result = train(texts=texts, labels=labels, multi_label=True,
                   model=str(tiny_encoder_dir), epochs=2, batch_size=8, learning_rate=1e-3, progress=False,
                   wise_ft=0.0)
    assert result["training"]["wise_ft"]["alpha"] == 0.0
    assert all(torch.equal(result.model.encoder.state_dict()[k], v) for k, v in pretrained.items())
