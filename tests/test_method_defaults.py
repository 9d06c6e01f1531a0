"""Every registered method's resolved default hyper-parameters, as they were before the methods
declared them as models (issue #20): the same names, values and types (an int stays an int), for an
unknown training-set size and for sizes on both sides of the size tables' boundaries. Run identities
and the bench numbers depend on them, so a change here must be deliberate (since then: the
label-name hyper-parameters ``label_prior`` and ``label_anchors``, and the ``zero-shot`` method). (Their order is not
compared: a model lists its base classes' fields first, e.g. the head stage's; run identities sort
the names.)"""

from __future__ import annotations

import pytest

from contrastfit.methods import available_methods, get_method

DEFAULTS = {
    'ce': {
        None: {},
        20: {},
        44: {},
        45: {},
        316: {},
        317: {},
        1000: {},
    },
    'ce-projection': {
        None: {'projection_dim': 0, 'projection_layers': 3},
        20: {'projection_dim': 0, 'projection_layers': 3},
        44: {'projection_dim': 0, 'projection_layers': 3},
        45: {'projection_dim': 0, 'projection_layers': 3},
        316: {'projection_dim': 0, 'projection_layers': 3},
        317: {'projection_dim': 0, 'projection_layers': 3},
        1000: {'projection_dim': 0, 'projection_layers': 3},
    },
    'ce-scl': {
        None: {'lambda': 0.9, 'temperature': 0.3},
        20: {'lambda': 0.9, 'temperature': 0.3},
        44: {'lambda': 0.9, 'temperature': 0.3},
        45: {'lambda': 0.9, 'temperature': 0.3},
        316: {'lambda': 0.9, 'temperature': 0.3},
        317: {'lambda': 0.9, 'temperature': 0.3},
        1000: {'lambda': 0.9, 'temperature': 0.3},
    },
    'ce-scl-lr': {
        None: {'lambda': 0.9, 'temperature': 0.3, 'head_C': 1.0, 'label_prior': 1.0, 'label_anchors': True},
        20: {'lambda': 0.9, 'temperature': 0.3, 'head_C': 1.0, 'label_prior': 1.0, 'label_anchors': True},
        44: {'lambda': 0.9, 'temperature': 0.3, 'head_C': 1.0, 'label_prior': 1.0, 'label_anchors': True},
        45: {'lambda': 0.9, 'temperature': 0.3, 'head_C': 1.0, 'label_prior': 1.0, 'label_anchors': True},
        316: {'lambda': 0.9, 'temperature': 0.3, 'head_C': 1.0, 'label_prior': 1.0, 'label_anchors': True},
        317: {'lambda': 0.9, 'temperature': 0.3, 'head_C': 1.0, 'label_prior': 1.0, 'label_anchors': True},
        1000: {'lambda': 0.9, 'temperature': 0.3, 'head_C': 1.0, 'label_prior': 1.0, 'label_anchors': True},
    },
    'ce-softtriple': {
        None: {'beta': 0.8, 'centers_per_class': 2000, 'gamma': 0.1, 'la': 4.0, 'margin': 0.7, 'center_reg': 0.0, 'dml_on': 'tokens', 'centers_learning_rate': 0.01},
        20: {'beta': 0.4, 'centers_per_class': 25, 'gamma': 0.1, 'la': 9.0, 'margin': 0.7, 'center_reg': 0.0, 'dml_on': 'tokens', 'centers_learning_rate': 0.01},
        44: {'beta': 0.4, 'centers_per_class': 25, 'gamma': 0.1, 'la': 9.0, 'margin': 0.7, 'center_reg': 0.0, 'dml_on': 'tokens', 'centers_learning_rate': 0.01},
        45: {'beta': 0.8, 'centers_per_class': 2000, 'gamma': 0.1, 'la': 4.0, 'margin': 0.7, 'center_reg': 0.0, 'dml_on': 'tokens', 'centers_learning_rate': 0.01},
        316: {'beta': 0.8, 'centers_per_class': 2000, 'gamma': 0.1, 'la': 4.0, 'margin': 0.7, 'center_reg': 0.0, 'dml_on': 'tokens', 'centers_learning_rate': 0.01},
        317: {'beta': 0.9, 'centers_per_class': 2000, 'gamma': 0.1, 'la': 7.0, 'margin': 0.9, 'center_reg': 0.0, 'dml_on': 'tokens', 'centers_learning_rate': 0.01},
        1000: {'beta': 0.9, 'centers_per_class': 2000, 'gamma': 0.1, 'la': 7.0, 'margin': 0.9, 'center_reg': 0.0, 'dml_on': 'tokens', 'centers_learning_rate': 0.01},
    },
    'ce-supcon': {
        None: {'beta': 0.9, 'temperature': 0.7},
        20: {'beta': 0.9, 'temperature': 0.6},
        44: {'beta': 0.9, 'temperature': 0.6},
        45: {'beta': 0.9, 'temperature': 0.7},
        316: {'beta': 0.9, 'temperature': 0.7},
        317: {'beta': 0.9, 'temperature': 0.7},
        1000: {'beta': 0.9, 'temperature': 0.7},
    },
    'diffcse': {
        None: {'temperature': 0.05, 'lambda': 0.005, 'mask_ratio': 0.3, 'generator': 'unigram', 'discriminator_layers': 2, 'discriminator_learning_rate': 0.0, 'head_epochs': 100, 'head_learning_rate': 0.001, 'head_batch_size': 32},
        20: {'temperature': 0.05, 'lambda': 0.005, 'mask_ratio': 0.3, 'generator': 'unigram', 'discriminator_layers': 2, 'discriminator_learning_rate': 0.0, 'head_epochs': 100, 'head_learning_rate': 0.001, 'head_batch_size': 32},
        44: {'temperature': 0.05, 'lambda': 0.005, 'mask_ratio': 0.3, 'generator': 'unigram', 'discriminator_layers': 2, 'discriminator_learning_rate': 0.0, 'head_epochs': 100, 'head_learning_rate': 0.001, 'head_batch_size': 32},
        45: {'temperature': 0.05, 'lambda': 0.005, 'mask_ratio': 0.3, 'generator': 'unigram', 'discriminator_layers': 2, 'discriminator_learning_rate': 0.0, 'head_epochs': 100, 'head_learning_rate': 0.001, 'head_batch_size': 32},
        316: {'temperature': 0.05, 'lambda': 0.005, 'mask_ratio': 0.3, 'generator': 'unigram', 'discriminator_layers': 2, 'discriminator_learning_rate': 0.0, 'head_epochs': 100, 'head_learning_rate': 0.001, 'head_batch_size': 32},
        317: {'temperature': 0.05, 'lambda': 0.005, 'mask_ratio': 0.3, 'generator': 'unigram', 'discriminator_layers': 2, 'discriminator_learning_rate': 0.0, 'head_epochs': 100, 'head_learning_rate': 0.001, 'head_batch_size': 32},
        1000: {'temperature': 0.05, 'lambda': 0.005, 'mask_ratio': 0.3, 'generator': 'unigram', 'discriminator_layers': 2, 'discriminator_learning_rate': 0.0, 'head_epochs': 100, 'head_learning_rate': 0.001, 'head_batch_size': 32},
    },
    'distill-cosine': {
        None: {'head_C': 1.0, 'label_prior': 0.0},
        20: {'head_C': 1.0, 'label_prior': 0.0},
        44: {'head_C': 1.0, 'label_prior': 0.0},
        45: {'head_C': 1.0, 'label_prior': 0.0},
        316: {'head_C': 1.0, 'label_prior': 0.0},
        317: {'head_C': 1.0, 'label_prior': 0.0},
        1000: {'head_C': 1.0, 'label_prior': 0.0},
    },
    'distill-kl': {
        None: {'temperature': 1.0},
        20: {'temperature': 1.0},
        44: {'temperature': 1.0},
        45: {'temperature': 1.0},
        316: {'temperature': 1.0},
        317: {'temperature': 1.0},
        1000: {'temperature': 1.0},
    },
    'dropout-augmented-ce': {
        None: {'view_dropouts': (0.0, 0.1, 0.2)},
        20: {'view_dropouts': (0.0, 0.1, 0.2)},
        44: {'view_dropouts': (0.0, 0.1, 0.2)},
        45: {'view_dropouts': (0.0, 0.1, 0.2)},
        316: {'view_dropouts': (0.0, 0.1, 0.2)},
        317: {'view_dropouts': (0.0, 0.1, 0.2)},
        1000: {'view_dropouts': (0.0, 0.1, 0.2)},
    },
    'lacon': {
        None: {'temperature': 0.1, 'heads': 6, 'ler_weight': 0.5, 'icl_weight': 1.0, 'lcl_weight': 1.0, 'projection_dim': 0, 'projection_layers': 3, 'label_learning_rate': 0.0},
        20: {'temperature': 0.1, 'heads': 6, 'ler_weight': 0.5, 'icl_weight': 1.0, 'lcl_weight': 1.0, 'projection_dim': 0, 'projection_layers': 3, 'label_learning_rate': 0.0},
        44: {'temperature': 0.1, 'heads': 6, 'ler_weight': 0.5, 'icl_weight': 1.0, 'lcl_weight': 1.0, 'projection_dim': 0, 'projection_layers': 3, 'label_learning_rate': 0.0},
        45: {'temperature': 0.1, 'heads': 6, 'ler_weight': 0.5, 'icl_weight': 1.0, 'lcl_weight': 1.0, 'projection_dim': 0, 'projection_layers': 3, 'label_learning_rate': 0.0},
        316: {'temperature': 0.1, 'heads': 6, 'ler_weight': 0.5, 'icl_weight': 1.0, 'lcl_weight': 1.0, 'projection_dim': 0, 'projection_layers': 3, 'label_learning_rate': 0.0},
        317: {'temperature': 0.1, 'heads': 6, 'ler_weight': 0.5, 'icl_weight': 1.0, 'lcl_weight': 1.0, 'projection_dim': 0, 'projection_layers': 3, 'label_learning_rate': 0.0},
        1000: {'temperature': 0.1, 'heads': 6, 'ler_weight': 0.5, 'icl_weight': 1.0, 'lcl_weight': 1.0, 'projection_dim': 0, 'projection_layers': 3, 'label_learning_rate': 0.0},
    },
    'lacon-fusion': {
        None: {'temperature': 0.1, 'heads': 6, 'ler_weight': 0.5, 'icl_weight': 1.0, 'lcl_weight': 1.0, 'projection_dim': 0, 'projection_layers': 3, 'label_learning_rate': 0.0, 'fusion_radius': 2},
        20: {'temperature': 0.1, 'heads': 6, 'ler_weight': 0.5, 'icl_weight': 1.0, 'lcl_weight': 1.0, 'projection_dim': 0, 'projection_layers': 3, 'label_learning_rate': 0.0, 'fusion_radius': 2},
        44: {'temperature': 0.1, 'heads': 6, 'ler_weight': 0.5, 'icl_weight': 1.0, 'lcl_weight': 1.0, 'projection_dim': 0, 'projection_layers': 3, 'label_learning_rate': 0.0, 'fusion_radius': 2},
        45: {'temperature': 0.1, 'heads': 6, 'ler_weight': 0.5, 'icl_weight': 1.0, 'lcl_weight': 1.0, 'projection_dim': 0, 'projection_layers': 3, 'label_learning_rate': 0.0, 'fusion_radius': 2},
        316: {'temperature': 0.1, 'heads': 6, 'ler_weight': 0.5, 'icl_weight': 1.0, 'lcl_weight': 1.0, 'projection_dim': 0, 'projection_layers': 3, 'label_learning_rate': 0.0, 'fusion_radius': 2},
        317: {'temperature': 0.1, 'heads': 6, 'ler_weight': 0.5, 'icl_weight': 1.0, 'lcl_weight': 1.0, 'projection_dim': 0, 'projection_layers': 3, 'label_learning_rate': 0.0, 'fusion_radius': 2},
        1000: {'temperature': 0.1, 'heads': 6, 'ler_weight': 0.5, 'icl_weight': 1.0, 'lcl_weight': 1.0, 'projection_dim': 0, 'projection_layers': 3, 'label_learning_rate': 0.0, 'fusion_radius': 2},
    },
    'linear-probe': {
        None: {'head_C': 1.0, 'label_prior': 0.0},
        20: {'head_C': 1.0, 'label_prior': 0.0},
        44: {'head_C': 1.0, 'label_prior': 0.0},
        45: {'head_C': 1.0, 'label_prior': 0.0},
        316: {'head_C': 1.0, 'label_prior': 0.0},
        317: {'head_C': 1.0, 'label_prior': 0.0},
        1000: {'head_C': 1.0, 'label_prior': 0.0},
    },
    'self-supervised-cl': {
        None: {'view_dropouts': (0.0, 0.1, 0.2), 'temperature': 0.05, 'head_epochs': 100, 'head_learning_rate': 0.001, 'head_batch_size': 32},
        20: {'view_dropouts': (0.0, 0.1, 0.2), 'temperature': 0.05, 'head_epochs': 100, 'head_learning_rate': 0.001, 'head_batch_size': 32},
        44: {'view_dropouts': (0.0, 0.1, 0.2), 'temperature': 0.05, 'head_epochs': 100, 'head_learning_rate': 0.001, 'head_batch_size': 32},
        45: {'view_dropouts': (0.0, 0.1, 0.2), 'temperature': 0.05, 'head_epochs': 100, 'head_learning_rate': 0.001, 'head_batch_size': 32},
        316: {'view_dropouts': (0.0, 0.1, 0.2), 'temperature': 0.05, 'head_epochs': 100, 'head_learning_rate': 0.001, 'head_batch_size': 32},
        317: {'view_dropouts': (0.0, 0.1, 0.2), 'temperature': 0.05, 'head_epochs': 100, 'head_learning_rate': 0.001, 'head_batch_size': 32},
        1000: {'view_dropouts': (0.0, 0.1, 0.2), 'temperature': 0.05, 'head_epochs': 100, 'head_learning_rate': 0.001, 'head_batch_size': 32},
    },
    'setfit': {
        None: {'head_C': 1.0, 'label_prior': 0.0},
        20: {'head_C': 1.0, 'label_prior': 0.0},
        44: {'head_C': 1.0, 'label_prior': 0.0},
        45: {'head_C': 1.0, 'label_prior': 0.0},
        316: {'head_C': 1.0, 'label_prior': 0.0},
        317: {'head_C': 1.0, 'label_prior': 0.0},
        1000: {'head_C': 1.0, 'label_prior': 0.0},
    },
    'simcse-sup': {
        None: {'temperature': 0.05, 'hard_negative_weight': 0.0, 'augmented': False, 'head_epochs': 100, 'head_learning_rate': 0.001, 'head_batch_size': 32},
        20: {'temperature': 0.05, 'hard_negative_weight': 0.0, 'augmented': False, 'head_epochs': 100, 'head_learning_rate': 0.001, 'head_batch_size': 32},
        44: {'temperature': 0.05, 'hard_negative_weight': 0.0, 'augmented': False, 'head_epochs': 100, 'head_learning_rate': 0.001, 'head_batch_size': 32},
        45: {'temperature': 0.05, 'hard_negative_weight': 0.0, 'augmented': False, 'head_epochs': 100, 'head_learning_rate': 0.001, 'head_batch_size': 32},
        316: {'temperature': 0.05, 'hard_negative_weight': 0.0, 'augmented': False, 'head_epochs': 100, 'head_learning_rate': 0.001, 'head_batch_size': 32},
        317: {'temperature': 0.05, 'hard_negative_weight': 0.0, 'augmented': False, 'head_epochs': 100, 'head_learning_rate': 0.001, 'head_batch_size': 32},
        1000: {'temperature': 0.05, 'hard_negative_weight': 0.0, 'augmented': False, 'head_epochs': 100, 'head_learning_rate': 0.001, 'head_batch_size': 32},
    },
    'simcse-unsup': {
        None: {'temperature': 0.05, 'head_epochs': 100, 'head_learning_rate': 0.001, 'head_batch_size': 32},
        20: {'temperature': 0.05, 'head_epochs': 100, 'head_learning_rate': 0.001, 'head_batch_size': 32},
        44: {'temperature': 0.05, 'head_epochs': 100, 'head_learning_rate': 0.001, 'head_batch_size': 32},
        45: {'temperature': 0.05, 'head_epochs': 100, 'head_learning_rate': 0.001, 'head_batch_size': 32},
        316: {'temperature': 0.05, 'head_epochs': 100, 'head_learning_rate': 0.001, 'head_batch_size': 32},
        317: {'temperature': 0.05, 'head_epochs': 100, 'head_learning_rate': 0.001, 'head_batch_size': 32},
        1000: {'temperature': 0.05, 'head_epochs': 100, 'head_learning_rate': 0.001, 'head_batch_size': 32},
    },
    'supcl-seq': {
        None: {'view_dropouts': (0.0, 0.1, 0.2), 'temperature': 0.05, 'regression_bin': 0.1, 'head_epochs': 100, 'head_learning_rate': 0.001, 'head_batch_size': 32},
        20: {'view_dropouts': (0.0, 0.1, 0.2), 'temperature': 0.05, 'regression_bin': 0.1, 'head_epochs': 100, 'head_learning_rate': 0.001, 'head_batch_size': 32},
        44: {'view_dropouts': (0.0, 0.1, 0.2), 'temperature': 0.05, 'regression_bin': 0.1, 'head_epochs': 100, 'head_learning_rate': 0.001, 'head_batch_size': 32},
        45: {'view_dropouts': (0.0, 0.1, 0.2), 'temperature': 0.05, 'regression_bin': 0.1, 'head_epochs': 100, 'head_learning_rate': 0.001, 'head_batch_size': 32},
        316: {'view_dropouts': (0.0, 0.1, 0.2), 'temperature': 0.05, 'regression_bin': 0.1, 'head_epochs': 100, 'head_learning_rate': 0.001, 'head_batch_size': 32},
        317: {'view_dropouts': (0.0, 0.1, 0.2), 'temperature': 0.05, 'regression_bin': 0.1, 'head_epochs': 100, 'head_learning_rate': 0.001, 'head_batch_size': 32},
        1000: {'view_dropouts': (0.0, 0.1, 0.2), 'temperature': 0.05, 'regression_bin': 0.1, 'head_epochs': 100, 'head_learning_rate': 0.001, 'head_batch_size': 32},
    },
    'zero-shot': {
        None: {'scale': 20.0},
        20: {'scale': 20.0},
        44: {'scale': 20.0},
        45: {'scale': 20.0},
        316: {'scale': 20.0},
        317: {'scale': 20.0},
        1000: {'scale': 20.0},
    },
}


def test_every_method_is_in_the_snapshot():
    assert set(available_methods()) == set(DEFAULTS)


@pytest.mark.parametrize("name", sorted(DEFAULTS))
def test_resolved_defaults_are_unchanged(name):
    spec = get_method(name)
    for n_train, want in DEFAULTS[name].items():
        assert _typed(spec.defaults_for(n_train)) == _typed(want), n_train
    created = spec.create(3, 24).hparams  # what a method built with no hyper-parameters given holds
    assert _typed(created) == _typed(DEFAULTS[name][None])


def _typed(hparams: dict) -> dict:
    return {k: (type(v), v) for k, v in hparams.items()}


def test_a_preset_s_defaults_are_checked_and_resolved_over_its_base_s(monkeypatch):
    from contrastfit.errors import ConfigError
    from contrastfit.methods import base

    monkeypatch.setattr(base, "_REGISTRY", dict(base._REGISTRY))  # the presets below stay in this test
    base.register_preset("ce-scl-cold", "ce-scl", {"temperature": 0.1}, "ce-scl, colder", "nobody",
                         size_table=lambda n: {"temperature": 0.05} if n < 50 else {})
    spec = get_method("ce-scl-cold")
    assert _typed(spec.defaults) == _typed({"lambda": 0.9, "temperature": 0.1})
    assert spec.defaults_for(20)["temperature"] == 0.05 and spec.defaults_for(500)["temperature"] == 0.1
    assert spec.resolve({"lambda": "0.5", "temperature": None}) == {"lambda": 0.5, "temperature": 0.1}
    assert spec.create(3, 24).hparams == {"lambda": 0.9, "temperature": 0.1}
    with pytest.raises(ConfigError, match=r"^method 'ce-scl-hot': temperature must be > 0, got 0$"):
        base.register_preset("ce-scl-hot", "ce-scl", {"temperature": 0}, "", "")
    with pytest.raises(ConfigError, match=r"^method 'ce-scl-hot' has no hyper-parameter 'tau'"):
        base.register_preset("ce-scl-hot", "ce-scl", {"tau": 1}, "", "")
