"""A training run's plan (`plan_run`): batch, accumulation, steps, padded lengths, precision and
XLA, resolved once from the config, the records and the device, and logged once.
"""

import dataclasses
from typing import Optional, Tuple

from absl import logging
import tensorflow as tf

from squad_qa import errors
from squad_qa.base import commands
from squad_qa.base.wording import counted
from squad_qa.model import precision as precision_lib
from squad_qa.model.memory import device as memory_device
from squad_qa.model.memory import diagnose
from squad_qa.model.memory import plan as memory_plan
from squad_qa.preprocess import records
from squad_qa.tasks import distribution
from squad_qa.tasks import question_answering


@dataclasses.dataclass(frozen=True)
class RunPlan:
  """What a training run does, resolved (see `plan_run`).

  Attributes:
    model_dir: where the chief writes checkpoints and summaries.
    num_train_steps: the optimizer step the run trains to (the schedule's length); None until
      --train_budget has planned it (`tasks.train_budget`).
    save_checkpoints_steps, steps_per_loop: steps between checkpoints, most steps in one loop.
    replicas, micro_batch_size, accumulation_steps: a step is replicas x accumulation_steps
      passes of micro_batch_size features.
    steps_per_epoch: optimizer steps in one pass over the train windows.
    length_buckets: padded lengths of the batches, in tokens (None: all at max_seq_length).
    precision: the compute dtype, "float32", "float16" or "bfloat16".
    xla, xla_reason: whether the step is compiled with XLA, and why.
    memory, device: the planner's `BatchPlan` for one replica, and the `Device` it planned for.
  """
  model_dir: str
  num_train_steps: Optional[int]
  save_checkpoints_steps: int = 1000
  steps_per_loop: int = 100
  replicas: int = 1
  micro_batch_size: int = 32
  accumulation_steps: int = 1
  steps_per_epoch: int = 1
  length_buckets: Optional[Tuple[int, ...]] = None
  precision: str = "float32"
  xla: bool = False
  xla_reason: str = ""
  memory: object = None
  device: object = None

  @property
  def global_batch_size(self):
    """Features per optimizer step over all replicas and accumulated passes."""
    return self.micro_batch_size * self.accumulation_steps * self.replicas

  def summary(self):
    """The figures train_results.json records of the plan (a dict)."""
    return {
        "train_batch_size": self.micro_batch_size * self.replicas,
        "num_replicas": self.replicas,
        "gradient_accumulation_steps": self.accumulation_steps,
        "effective_batch_size": self.global_batch_size,
        "xla": self.xla,
        "mixed_precision_dtype": self.precision,
        "length_buckets": list(self.length_buckets or [])
    }


def plan_run(config, bert_config, meta, strategy, policy):
  """The `RunPlan` of `config` (a `TrainConfig`) for the encoder's `bert_config`, the records'
  `meta` (meta.json's dict), `strategy` and the tf_keras dtype `policy` name; logs it.

  Raises:
    memory_plan.MemoryPlanError, distribution.DistributionError, errors.UsageError: a batch that
      does not fit or divide, too few train windows, length buckets the records cannot take.
  """
  max_seq_length = meta["flags"]["max_seq_length"]
  replicas = strategy.num_replicas_in_sync
  device = memory_device.detect_device(config.device_memory_gb)
  batches = plan_memory(config, bert_config, max_seq_length, policy, device, replicas)
  global_batch = batches.effective_batch_size * replicas
  xla, xla_reason = config.xla_and_reason
  num_features = meta["splits"][records.TRAIN_SPLIT]["num_features"]
  plan = RunPlan(
      model_dir=config.model_dir,
      num_train_steps=num_train_steps_for(config, num_features, global_batch),
      save_checkpoints_steps=config.save_checkpoints_steps,
      steps_per_loop=min(config.steps_per_loop, config.save_checkpoints_steps),
      replicas=replicas,
      micro_batch_size=batches.micro_batch_size,
      accumulation_steps=batches.accumulation_steps,
      steps_per_epoch=records.steps_per_epoch(num_features, global_batch),
      # The planner counts max_seq_length, the largest bucket's length: every batch fits.
      length_buckets=train_length_buckets(
          config.length_buckets, max_seq_length, xla,
          static_shapes=isinstance(strategy, tf.distribute.TPUStrategy)),
      precision=config.precision,
      xla=bool(xla),
      xla_reason=xla_reason,
      memory=batches,
      device=device)
  logging.info(
      "batch: %d features per step = %s x %d features x %d accumulated, %s; "
      "XLA %s (%s); %s; planner: %s", global_batch, counted(replicas, "replica"),
      plan.micro_batch_size, plan.accumulation_steps, policy, "on" if xla else "off", xla_reason,
      f"{plan.num_train_steps} steps"
      if plan.num_train_steps else "steps planned by --train_budget",
      describe_estimate(batches.estimate, device))
  logging.info("padded lengths: %s", describe_lengths(plan.length_buckets or (max_seq_length,)))
  return plan


def describe_estimate(est, device):
  """The planner's count against `device` in a few words: "1.91 GiB of CPU with 16.0 GiB of RAM
  available (the process's 1.45 GiB included)", "... (2 replicas sharing it and the process's
  ...)" for CPU devices, "... and the float32 prediction copy's 86.6 MiB included)" after mixed
  precision, "3.10 GiB of 16 GiB GPU (14.9 GiB usable) per replica" on a GPU."""
  size = memory_device.format_bytes
  if not est.process:  # a GPU: each replica has its own
    return f"{size(est.total)} of {device.description} per replica"
  shared = f"{est.replicas} replicas sharing it and " if est.replicas > 1 else ""
  copy = (f" and the float32 prediction copy's {size(est.prediction_copy)}"
          if est.prediction_copy else "")
  return (f"{size(est.total)} of {device.description} ({shared}the process's "
          f"{size(est.process)}{copy} included)")


def set_precision(config):
  """Sets the global tf_keras dtype policy the model is built under, logs it, and returns its name:
  `config.precision` for training, float32 for prediction alone (export.py's default)."""
  if config.do_train:
    policy = question_answering.set_precision_policy(config.precision)
    logging.info("precision: %s (%s)", policy, config.precision_and_reason[1])
    warn_if_slow_on_this_cpu(config.precision, config.gpu, config.use_xla)
    return policy
  if config.mixed_precision_dtype not in (precision_lib.AUTO, "float32"):
    logging.warning(
        "--mixed_precision_dtype=%s is the training dtype; --do_train=false "
        "predicts in float32", config.mixed_precision_dtype)
  return question_answering.set_precision_policy("float32")


def warn_if_slow_on_this_cpu(dtype, has_gpu, xla):
  """Logs one warning when `dtype` has no fast kernels on this CPU and no GPU is in use: float16
  on any CPU; bfloat16 without AVX512-BF16 or AMX (docs/training.md "bfloat16 training on the
  CPU")."""
  if has_gpu or dtype == "float32":
    return
  if dtype == "float16":
    logging.warning(
        "--mixed_precision_dtype=float16 without a GPU: this CPU has no float16 matmuls, so "
        "float16 runs slower than float32 (%s)",
        "under --xla too" if xla else "about 40x without --xla")
    return
  if not precision_lib.bfloat16_needs_xla():
    return
  if xla:
    logging.warning("--mixed_precision_dtype=bfloat16: this CPU has neither AVX512-BF16 nor AMX, "
                    "so bfloat16 runs under XLA and may be slower than float32 here")
  else:
    logging.warning("--mixed_precision_dtype=bfloat16 with --noxla: this CPU has neither "
                    "AVX512-BF16 nor AMX, and TensorFlow's einsum sums in bfloat16 here (gradients "
                    "~10x less exact, steps ~10x slower than under XLA); drop --noxla")


def plan_memory(config, bert_config, max_seq_length, policy, device, num_replicas):
  """Resolves the global batch settings into one replica's plan, and runs the pre-flight check:
  on a GPU each of the `num_replicas` has its own memory; on the CPU they share the RAM with the
  process (`estimate.estimate`'s `replicas`), and with the float32 copy that predicts after
  mixed-precision training when `config.do_predict` (`estimate.estimate`'s `predicts`).

  Returns:
    A `memory_plan.BatchPlan` for one replica (micro_batch_size, accumulation_steps); its estimate
    is what `device` must hold.

  Raises:
    memory_plan.MemoryPlanError: inconsistent batch settings, or (unless `memory_check` is off) the
      planner estimates that the micro-batch does not fit `device`; the message is the diagnosis.
    distribution.DistributionError: a global batch that the replicas do not divide.
  """
  try:  # the split squad-qa-memory --num_cpu_devices counts too
    per_replica, effective = memory_plan.per_replica_batches(config.train_batch_size,
                                                             config.effective_batch_size,
                                                             num_replicas)
  except memory_plan.MemoryPlanError as e:
    raise distribution.DistributionError(str(e)) from None
  plan = memory_plan.plan_batches(bert_config, max_seq_length, policy, device, per_replica,
                                  config.gradient_accumulation_steps, effective, num_replicas,
                                  config.do_predict)
  if per_replica == "auto":
    hint = memory_plan.auto_split_hint(bert_config, max_seq_length, policy, device, plan,
                                       num_replicas, config.do_predict)
    if hint:
      logging.warning("--train_batch_size=auto: %s", hint)
  if plan.estimate.total > device.usable_bytes:
    message = diagnose.diagnosis(bert_config, max_seq_length, plan.micro_batch_size, policy, device,
                                 plan.accumulation_steps,
                                 headline="the planner estimates that this batch does not fit",
                                 replicas=num_replicas, predicts=config.do_predict)
    if config.memory_check:
      raise memory_plan.MemoryPlanError(message + "\n  - or --nomemory_check to try anyway")
    logging.warning("--nomemory_check: training anyway although %s", message)
  return plan


def num_train_steps_for(config, num_features, batch_size):
  """`max_steps` if given, None with `train_budget` (planned later), else epochs x full global
  batches per epoch (at least 1).

  Raises:
    errors.UsageError: fewer train windows than one global batch.
  """
  per_epoch = records.steps_per_epoch(num_features, batch_size)
  if not per_epoch:
    raise errors.UsageError(
        f"the train records in {config.records_dir} hold {num_features} windows, fewer than one "
        f"global batch of {batch_size}; lower --train_batch_size (or "
        f"--gradient_accumulation_steps)")
  if config.max_steps:
    if config.given("num_train_epochs"):  # as in run_qa.py: the steps win; said, not silent
      logging.info("--max_steps=%d sets the length of training; --num_train_epochs=%g is not used",
                   config.max_steps, config.num_train_epochs)
    return config.max_steps
  if config.train_budget:
    return None
  return max(1, int(per_epoch * config.num_train_epochs))


def train_length_buckets(length_buckets, max_seq_length, xla, static_shapes=False):
  """The `length_buckets` setting resolved for the records: a tuple of padded lengths, or None.

  Args:
    length_buckets: None (off), "auto" (multiples of records.LENGTH_BUCKET_STEP tokens, or
      XLA_LENGTH_BUCKET_STEP under XLA; off with `static_shapes`), or increasing token counts.
    max_seq_length: the records' window length, in tokens (always the last boundary).
    xla: whether the step is compiled with XLA.
    static_shapes: whether the strategy compiles one static shape (TPUs).

  Raises:
    errors.UsageError: a boundary above the records' max_seq_length; boundaries with
      `static_shapes`.
  """
  if length_buckets is None:
    return None
  if static_shapes:
    if length_buckets == "auto":
      logging.info("length buckets off: a TPU compiles one static batch shape")
      return None
    raise errors.UsageError("--length_buckets: a TPU compiles one static batch shape; use "
                            "--nolength_buckets (the default under --distribution_strategy=tpu)")
  try:
    return records.length_bucket_boundaries(
        max_seq_length, None if length_buckets == "auto" else length_buckets,
        step=records.XLA_LENGTH_BUCKET_STEP if xla else records.LENGTH_BUCKET_STEP)
  except ValueError as e:
    raise errors.UsageError(
        f"--length_buckets: {e}; the records were made with "
        f"{commands.command('squad-qa-records')} --max_seq_length={max_seq_length}") from None


def describe_lengths(lengths):
  """The padded lengths (increasing token counts) in a few words: "384 tokens", "8, 16 and 24
  tokens", or "48 buckets, 8..384 tokens in steps of 8"."""
  lengths = list(lengths)
  if len(lengths) == 1:
    return f"{lengths[0]} tokens"
  if len(lengths) <= 3:
    return f"{', '.join(map(str, lengths[:-1]))} and {lengths[-1]} tokens"
  steps = {b - a for a, b in zip(lengths, lengths[1:])}
  step = f" in steps of {steps.pop()}" if len(steps) == 1 else ""
  return f"{len(lengths)} buckets, {lengths[0]}..{lengths[-1]} tokens{step}"
