"""train.py's settings as one frozen config: what the flags say, validated once."""

import dataclasses
from typing import Optional, Tuple, Union

from squad_qa import errors
from squad_qa.model import precision as precision_lib
from squad_qa.postprocess import span_decoding

PRECISIONS = ("float32", "float16", "bfloat16")
AUTO = "auto"  # --mixed_precision_dtype's default: chosen by the device (`TrainConfig.precision`)


@dataclasses.dataclass(frozen=True)
class TrainConfig:
  """Everything train.py does, as its flags name it (flags/definitions.py says what each means).

  Defaults are the flags' defaults (tests/flags/test_command_line.py checks that they agree).
  Token counts are in WordPiece tokens; `device_memory_gb` in GiB.

  Raises (on construction):
    errors.UsageError: a value no run can use (a non-positive epoch count or batch, an unknown
      precision, length buckets that are not increasing positive token counts).
  """
  records_dir: str = "records"
  model_dir: str = "model_out"
  init_checkpoint: Optional[str] = None
  bert_config_file: Optional[str] = None
  vocab_file: Optional[str] = None
  predict_file: Optional[str] = None
  do_train: bool = True
  do_predict: bool = True
  train_batch_size: Union[int, str] = 32  # global, or "auto" (the memory planner)
  effective_batch_size: Optional[int] = None
  gradient_accumulation_steps: int = 1
  length_buckets: Union[None, str, Tuple[int, ...]] = "auto"
  predict_batch_size: int = 64
  learning_rate: float = 5e-5
  num_train_epochs: float = 2.0
  max_steps: Optional[int] = None
  warmup_proportion: float = 0.1
  save_checkpoints_steps: int = 1000
  max_eval_examples: Optional[int] = None
  gpu: bool = False
  mixed_precision_dtype: str = AUTO  # see `precision`
  xla: Optional[bool] = None  # see `use_xla`
  float32_weight_gradients: bool = True
  memory_check: bool = True
  device_memory_gb: Optional[float] = None
  seed: int = 42
  version_2_with_negative: bool = False
  n_best_size: int = 20
  max_answer_length: int = 30
  null_score_diff_threshold: float = 0.0
  distribution_strategy: Optional[str] = None
  num_gpus: Optional[int] = None
  all_reduce_alg: Optional[str] = None
  tpu: Optional[str] = None
  num_cpu_devices: int = 1
  steps_per_loop: int = 100
  log_steps: int = 0
  eval_every_steps: int = 0

  def __post_init__(self):
    span_decoding.check_decoding_settings(self.n_best_size, self.max_answer_length,
                                          self.null_score_diff_threshold)
    if self.num_train_epochs <= 0:
      raise errors.UsageError("--num_train_epochs must be above 0")
    for name in ("steps_per_loop", "save_checkpoints_steps"):
      if getattr(self, name) < 1:
        raise errors.UsageError(f"--{name}={getattr(self, name)}: must be at least 1")
    if self.eval_every_steps < 0:
      raise errors.UsageError(f"--eval_every_steps={self.eval_every_steps}: must be 0 (off) or "
                              f"more")
    if self.log_steps < 0:
      raise errors.UsageError(f"--log_steps={self.log_steps}: must be 0 (about every 30 s) or "
                              f"more")
    if not self.do_train:  # both shape training only: refuse rather than ignore them
      for name in ("eval_every_steps", "log_steps"):
        if getattr(self, name):
          raise errors.UsageError(f"--{name}={getattr(self, name)} applies to training; "
                                  f"--do_train=false only predicts: drop one of the two")
    if self.max_steps is not None and self.max_steps < 1:
      raise errors.UsageError(f"--max_steps={self.max_steps}: must be at least 1")
    if self.train_batch_size != "auto" and (
        not isinstance(self.train_batch_size, int) or self.train_batch_size < 1):
      raise errors.UsageError(f"--train_batch_size={self.train_batch_size}: expected a positive "
                              f"integer or 'auto'")
    if self.mixed_precision_dtype not in (AUTO, *PRECISIONS):
      raise errors.UsageError(f"--mixed_precision_dtype={self.mixed_precision_dtype}: expected "
                              f"one of {', '.join((AUTO, *PRECISIONS))}")
    if isinstance(self.length_buckets, tuple) and (
        any(v < 1 for v in self.length_buckets) or
        any(a >= b for a, b in zip(self.length_buckets, self.length_buckets[1:]))):
      raise errors.UsageError(f"--length_buckets={self.length_buckets}: expected increasing "
                              f"positive token counts")

  @property
  def use_xla(self):
    """Whether the training step is compiled with XLA: `xla`, or by default on with `gpu` and
    under bfloat16 on a CPU without bfloat16 matmuls (`precision.bfloat16_needs_xla`: TensorFlow's
    own einsum sums in bfloat16 there), otherwise off."""
    return self.xla_and_reason[0]

  @property
  def xla_and_reason(self):
    """(`use_xla`, why in a few words, e.g. "default with --gpu")."""
    if self.xla is not None:
      return self.xla, "--xla" if self.xla else "--noxla"
    if self.gpu:
      return True, "default with --gpu"
    if self.precision == "bfloat16" and precision_lib.bfloat16_needs_xla():
      return True, "default for bfloat16 on a CPU without bfloat16 matmuls"
    return False, "default on the CPU"

  @property
  def precision(self):
    """The training compute dtype: `mixed_precision_dtype`, or for "auto": float16 with `gpu`, on
    the CPU bfloat16 where it has bfloat16 matmuls (AVX512-BF16 or AMX: 1.3x float32's training
    speed on an AMD Zen 4, docs/training.md "bfloat16 training on the CPU"), else float32."""
    return self.precision_and_reason[0]

  @property
  def precision_and_reason(self):
    """(`precision`, why in a few words, e.g. "auto: this CPU has bfloat16 matmuls")."""
    if self.mixed_precision_dtype != AUTO:
      return self.mixed_precision_dtype, f"--mixed_precision_dtype={self.mixed_precision_dtype}"
    if self.gpu:
      return "float16", "auto: --gpu"
    native = precision_lib.cpu_has_native_bfloat16()
    if native:
      return "bfloat16", "auto: this CPU has bfloat16 matmuls (AVX512-BF16 or AMX)"
    return "float32", ("auto: this CPU has no bfloat16 matmuls (AVX512-BF16 or AMX)" if native is
                       False else "auto: bfloat16 matmuls of this CPU unknown")
