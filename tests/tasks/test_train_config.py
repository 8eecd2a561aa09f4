"""train.py's config: validated once, whichever way it is built (flags or Python)."""

import pytest

from squad_qa import errors
from squad_qa.tasks import train_config


@pytest.mark.parametrize("values, message", [
    ({"num_train_epochs": 0}, "--num_train_epochs must be above 0"),
    ({"max_steps": 0}, "--max_steps=0: must be at least 1"),
    ({"train_batch_size": 0}, "--train_batch_size=0: expected a positive integer or 'auto'"),
    ({"mixed_precision_dtype": "int8"},
     "--mixed_precision_dtype=int8: expected one of float32, float16, bfloat16"),
    ({"length_buckets": (128, 64)},
     "--length_buckets=(128, 64): expected increasing positive token counts"),
])
def test_a_value_no_run_can_use_is_one_line(values, message):
  with pytest.raises(errors.UsageError) as error:
    train_config.TrainConfig(**values)
  assert str(error.value) == message


def test_precision_follows_the_gpu_unless_named():
  assert train_config.TrainConfig().precision == "float32"
  assert train_config.TrainConfig(gpu=True).precision == "float16"
  assert train_config.TrainConfig(gpu=True, mixed_precision_dtype="bfloat16").precision == "bfloat16"
  assert train_config.TrainConfig(train_batch_size="auto").train_batch_size == "auto"
