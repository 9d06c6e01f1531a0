"""Gunel et al. Sec. 5 (transfer): :func:`~.few_shot.few_shot` on the target data set (Gunel: 20 per
class); the runner starts these runs from a source-task model (``source:``, see
:class:`contrastfit.experiments.runner.TransferSources`): by default each method variant gets its own
source model, trained with that variant's method, hyper-parameters and training settings (Gunel et
al. Sec. 5.4: CE -> CE, CE+SCL -> CE+SCL); ``source.method`` (with optional ``source.hparams``)
instead trains one source model that every variant starts from."""

from __future__ import annotations

from typing import Any, Literal, Sequence

from pydantic import Field, NonNegativeInt, PositiveInt, field_validator, model_validator

from ...data.loading import TextData
from ...schema import Schema
from ..fields import PositiveNumber, hparams_of, invalid, method_name
from .base import ProtocolRun, Sampled, one_sample_size, register_protocol
from .few_shot import few_shot


class TransferSource(Schema):
    """A transfer protocol's ``source:``: the data (and sample) the source models train on. Without
    ``method``, each method variant's source trains with that variant's method, hyper-parameters and
    training settings; with it (and ``hparams``), one source model serves every variant."""

    data: str = Field(description="the source data set")
    method: str | None = Field(None, description="one source method for every variant (default: each variant's own)")
    hparams: dict[str, Any] | None = Field(None, description="that method's hyper-parameters")
    shots: PositiveInt | None = Field(None,
        description="source training examples per class (default: the whole training split)")
    train_size: PositiveInt | None = Field(None, description="source training examples in total")
    epochs: PositiveNumber | None = Field(None, description="the source runs' epochs (default: the variant's)")
    seed: NonNegativeInt = Field(0, description="seed of the source's sample and training")

    _method = field_validator("method")(lambda v: v if v is None else method_name(v))

    @model_validator(mode="after")
    def _consistent(self):
        one_sample_size(self.shots, self.train_size)
        if self.method is None:
            if self.hparams:
                raise invalid("hparams needs method (without it, each method variant's source is trained with "
                              "that variant's own hyper-parameters)")
        elif self.hparams:
            hparams_of(self.method, self.hparams)
        return self


class Transfer(Sampled):
    kind: Literal["transfer"]
    source: TransferSource = Field(description="the source models' data and sample")
    order = 70
    no_multi_label = "its source models are single-label runs"


@register_protocol(Transfer)
def transfer_target(
    data: TextData,
    shots: int | Sequence[int] | None = None,
    train_size: int | Sequence[int] | None = None,
    samples: int = 1,
    validation_size: int | None = None,
    seed: int = 0,
) -> list[ProtocolRun]:
    """:func:`~.few_shot.few_shot` on the transfer target (the runner starts them from a source model)."""
    runs = few_shot(data, shots=shots, train_size=train_size, samples=samples, validation_size=validation_size, seed=seed)
    for run in runs:
        run.sampling["protocol"] = "transfer-target"
    return runs
