"""train.py's config: validated once, whichever way it is built (flags or Python)."""

import json

import pytest

from squad_qa import errors
from squad_qa.flags import settings
from squad_qa.preprocess import records_config
from squad_qa.tasks import distribution
from squad_qa.tasks import run_plan
from squad_qa.tasks import train_config
from tests import testutil


@pytest.mark.parametrize("values, message", [
    ({
        "num_train_epochs": 0
    }, "--num_train_epochs must be above 0"),
    ({
        "max_steps": 0
    }, "--max_steps=0: must be at least 1"),
    ({
        "train_batch_size": 0
    }, "--train_batch_size=0: expected a positive integer or 'auto'"),
    ({
        "predict_batch_size": 0
    }, "--predict_batch_size=0: must be at least 1"),
    ({
        "max_eval_examples": -1
    }, "--max_eval_examples=-1: must be at least 1"),
    ({
        "mixed_precision_dtype": "int8"
    }, "--mixed_precision_dtype=int8: expected one of auto, float32, float16, bfloat16"),
    ({
        "log_steps": -1
    }, "--log_steps=-1: must be 0 (about every 30 s) or more"),
    ({
        "steps_per_loop": 0
    }, "--steps_per_loop=0: must be at least 1"),
    ({
        "num_cpu_devices": 0
    }, "--num_cpu_devices=0: must be at least 1"),
    ({
        "seed": -1
    }, "--seed=-1: must be at least 0"),
    ({
        "seed": 2**32
    }, "--seed=4294967296: must be at most 4294967295 (2^32 - 1)"),
    ({
        "max_steps": 2,
        "eval_every_steps": 1000,
        "do_predict": False
    }, "--eval_every_steps=1000 is past --max_steps=2, and --do_predict=false: no point would be "
     "scored; use at most 2, or drop --do_predict=false (the final score is the curve's last "
     "point)"),
    ({
        "do_train": False,
        "eval_every_steps": 100
    },
     "--eval_every_steps=100 applies to training; --do_train=false only predicts: drop one of the "
     "two"),
    ({
        "do_train": False,
        "log_steps": 5
    }, "--log_steps=5 applies to training; --do_train=false only predicts: drop one of the two"),
    ({
        "do_train": False,
        "max_steps": 3
    }, "--max_steps=3 applies to training; --do_train=false only predicts: drop one of the two"),
    ({
        "do_train": False,
        "learning_rate": 1.0,
        "typed_flags": ("do_train", "learning_rate")
    }, "--learning_rate=1.0 applies to training; --do_train=false only predicts: drop one of the "
     "two"),
    ({
        "do_train": False,
        "length_buckets": None
    }, "--nolength_buckets applies to training; --do_train=false only predicts: drop one of the "
     "two"),
    ({
        "do_train": False,
        "xla": True,
        "typed_flags": ("do_train", "xla")
    }, "--xla applies to training; --do_train=false only predicts: drop one of the two"),
    ({
        "do_train": False,
        "seed": 5,
        "typed_flags": ("do_train", "seed")
    }, "--seed=5 applies to training; --do_train=false only predicts: drop one of the two"),
    ({
        "do_train": False,
        "memory_check": False,
        "typed_flags": ("do_train", "memory_check")
    }, "--nomemory_check applies to training; --do_train=false only predicts: drop one of "
     "the two"),
    ({
        "do_train": False,
        "device_memory_gb": 1.0,
        "typed_flags": ("do_train", "device_memory_gb")
    }, "--device_memory_gb=1.0 applies to training; --do_train=false only predicts: drop one of "
     "the two"),
    ({
        "train_batch_size": 4,
        "gradient_accumulation_steps": 2,
        "effective_batch_size": 16,
        "distribution_strategy": "mirrored",
        "num_cpu_devices": 2
    }, "--effective_batch_size=16 is not --train_batch_size=4 x --gradient_accumulation_steps=2; "
     "give two of the three, or --train_batch_size=auto"),
    ({
        "train_batch_size": 4,
        "effective_batch_size": 10,
        "distribution_strategy": "mirrored",
        "num_cpu_devices": 2
    }, "--effective_batch_size=10 is not a multiple of --train_batch_size=4 (a step accumulates "
     "whole batches): use --effective_batch_size=8 or 12, a --train_batch_size that divides 10, "
     "or --train_batch_size=auto"),
    ({
        "do_predict": False,
        "max_eval_examples": 5
    }, "--max_eval_examples=5 applies to scoring; --do_predict=false without --eval_every_steps "
     "scores nothing: drop one of the two"),
    ({
        "do_train": False,
        "do_predict": False
    }, "--do_train=false and --do_predict=false leave nothing to do: drop one of the two"),
    ({
        "do_train": False,
        "float32_weight_gradients": False,
        "typed_flags": ("do_train", "float32_weight_gradients")
    }, "--nofloat32_weight_gradients applies to training; --do_train=false only predicts: drop "
     "one of the two"),
    ({
        "mixed_precision_dtype": "bfloat16",
        "float32_weight_gradients": False,
        "typed_flags": ("float32_weight_gradients",)
    }, "--nofloat32_weight_gradients applies to float16 compute; this run computes in bfloat16 "
     "(--mixed_precision_dtype=bfloat16): drop it"),
    ({
        "length_buckets": (128, 64)
    }, "--length_buckets=(128, 64): expected increasing positive token counts"),
    ({
        "train_file": "train-v1.1.json"
    }, "--train_file=train-v1.1.json applies to making the records: training reads the train "
     "records in --records_dir; drop it"),
    ({
        "learning_rate": -1.0
    }, "--learning_rate must be above 0"),
    ({
        "learning_rate": 0.0
    }, "--learning_rate must be above 0"),
    ({
        "warmup_proportion": 2.0
    }, "--warmup_proportion=2.0: must be from 0 to 1"),
    ({
        "warmup_proportion": -0.1
    }, "--warmup_proportion=-0.1: must be from 0 to 1"),
])
def test_a_value_no_run_can_use_is_one_line(values, message):
  with pytest.raises(errors.UsageError) as error:
    train_config.TrainConfig(**values)
  assert str(error.value) == message


def test_float32_weight_gradients_is_taken_under_float16():
  """The float16 override's switch is taken under float16, refused where it would change nothing
  (above), and says nothing when left at its default."""
  config = train_config.TrainConfig(mixed_precision_dtype="float16", float32_weight_gradients=False,
                                    typed_flags=("float32_weight_gradients",))
  assert config.precision == "float16" and not config.float32_weight_gradients
  assert train_config.TrainConfig(mixed_precision_dtype="bfloat16").float32_weight_gradients


def test_predicting_alone_accepts_the_settings_it_uses():
  """--do_train=false with prediction's own settings typed is a valid run, and so is a scoring
  setting with --do_predict=false when --eval_every_steps scores."""
  config = train_config.TrainConfig(
      do_train=False, predict_batch_size=8, max_eval_examples=5,
      typed_flags=("do_train", "predict_batch_size", "max_eval_examples"))
  assert (config.do_train, config.predict_batch_size, config.max_eval_examples) == (False, 8, 5)
  curve = train_config.TrainConfig(do_predict=False, eval_every_steps=100, max_eval_examples=5)
  assert curve.max_eval_examples == 5  # the learning curve's scorings use it


@pytest.mark.parametrize("native, expected, reason", [
    (True, "bfloat16", "auto: this CPU has bfloat16 matmuls (AVX512-BF16 or AMX)"),
    (False, "float32", "auto: this CPU has no bfloat16 matmuls (AVX512-BF16 or AMX)"),
    (None, "float32", "auto: bfloat16 matmuls of this CPU unknown"),
])
def test_auto_precision_follows_the_device_unless_named(monkeypatch, native, expected, reason):
  monkeypatch.setattr(train_config.precision_lib, "cpu_has_native_bfloat16", lambda: native)
  assert train_config.TrainConfig().mixed_precision_dtype == "auto"
  assert train_config.TrainConfig().precision_and_reason == (expected, reason)
  assert train_config.TrainConfig(gpu=True).precision_and_reason == ("float16", "auto: --gpu")
  assert train_config.TrainConfig(
      mixed_precision_dtype="float32").precision_and_reason == ("float32",
                                                                "--mixed_precision_dtype=float32")
  assert train_config.TrainConfig(gpu=True,
                                  mixed_precision_dtype="bfloat16").precision == "bfloat16"
  assert train_config.TrainConfig(train_batch_size="auto").train_batch_size == "auto"


@pytest.mark.parametrize(
    "values, native, expected",
    [
        ({}, False, (False, "default on the CPU")),  # auto: float32 here
        ({
            "mixed_precision_dtype": "bfloat16"
        }, False, (True, "default for bfloat16 on a CPU without bfloat16 matmuls")),
        ({
            "mixed_precision_dtype": "bfloat16"
        }, True, (False, "default on the CPU")),
        ({
            "mixed_precision_dtype": "bfloat16"
        }, None, (False, "default on the CPU")),
        ({}, True, (False, "default on the CPU")),  # auto: bfloat16 with native matmuls
        ({
            "gpu": True
        }, False, (True, "default with --gpu")),
        ({
            "mixed_precision_dtype": "bfloat16",
            "xla": False
        }, False, (False, "--noxla")),
        ({
            "xla": True
        }, True, (True, "--xla")),
    ])
def test_xla_by_default_with_a_gpu_and_for_bfloat16_without_bfloat16_matmuls(
    monkeypatch, values, native, expected):
  """TensorFlow's einsum sums in bfloat16 on a CPU without bfloat16 matmuls; XLA sums in float32."""
  monkeypatch.setattr(train_config.precision_lib, "cpu_has_native_bfloat16",
                      lambda cpuinfo=None: native)
  assert train_config.TrainConfig(**values).xla_and_reason == expected
  assert train_config.TrainConfig(**values).use_xla == expected[0]


def test_records_need_a_worker():
  with pytest.raises(errors.UsageError) as error:
    records_config.RecordsConfig(vocab_file=testutil.vocab_file(), num_workers=0)
  assert str(error.value) == "--num_workers=0: must be at least 1"


def test_a_casing_other_than_the_records_is_refused(tmp_path):
  """Training tokenizes nothing: it reads the records, so --do_lower_case can only disagree."""
  # pylint: disable=g-import-not-at-top  (TensorFlow, unlike the configs above)
  from squad_qa.preprocess import records
  from squad_qa.tasks import run_inputs
  (tmp_path / records.META_FILE).write_text(
      json.dumps({
          "format_version": records.FORMAT_VERSION,
          "splits": {
              records.TRAIN_SPLIT: {}
          },
          "flags": {
              "do_lower_case": True
          }
      }))
  with pytest.raises(errors.UsageError) as error:
    run_inputs.bert_config_and_meta(
        train_config.TrainConfig(records_dir=str(tmp_path), do_lower_case=False))
  assert str(error.value) == (
      f"--do_lower_case=false: the records in {tmp_path} were made with do_lower_case=true, and "
      f"training tokenizes as they were made; drop the flag, or make the records again with it")


def test_the_conversion_has_no_setting_it_would_ignore():
  # No --model_dir (it reads --init_checkpoint, which may be one) and no --do_lower_case (it copies
  # the vocab and does not tokenize): --help does not offer them, and typed they are unknown flags.
  from squad_qa.model import convert_checkpoint  # pylint: disable=g-import-not-at-top
  assert sorted(settings.names(convert_checkpoint.ConvertConfig)) == [
      "bert_config_file", "init_checkpoint", "output", "vocab_file"
  ]
  with pytest.raises(errors.UsageError, match=r"^--init_checkpoint and --output are required$"):
    convert_checkpoint.ConvertConfig(output="out")
  # Its --help says so, not what training does without --init_checkpoint.
  help_text = settings.spec_of(
      convert_checkpoint.ConvertConfig.__dataclass_fields__["init_checkpoint"]).help
  assert help_text.startswith(
      "The checkpoint to convert (required): ") and "random" not in help_text


def test_an_effective_batch_the_replicas_do_not_divide_names_the_nearest_that_do():
  config = train_config.TrainConfig(train_batch_size="auto", effective_batch_size=32)
  with pytest.raises(distribution.DistributionError) as error:
    run_plan.plan_memory(config, None, 128, None, None, num_replicas=3)
  assert str(error.value) == ("--effective_batch_size=32 must be a multiple of the 3 replicas; use "
                              "30 or 33")
