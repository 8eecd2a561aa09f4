"""A --model_dir's state: where a run starts (`decide_start`, train.py's and export.py's rule),
what its checkpoints hold, and what a resume must keep (the schedule: its length, peak, warm-up,
the --train_budget that planned it and the global batch its steps count; loss scaling).
"""

import dataclasses
import os

import tensorflow as tf
import tf_keras

from squad_qa import errors
from squad_qa.base import artifacts
from squad_qa.flags import settings
from squad_qa.model import checkpoints
from squad_qa.model import hf_checkpoint
from squad_qa.model import named_weights
from squad_qa.tasks import optimization

SCHEDULE_STEPS_KEY = named_weights.SCHEDULE_STEPS_KEY
SCHEDULE_LEARNING_RATE_KEY = named_weights.SCHEDULE_LEARNING_RATE_KEY
SCHEDULE_WARMUP_KEY = named_weights.SCHEDULE_WARMUP_KEY
TRAIN_BUDGET_KEY = named_weights.TRAIN_BUDGET_KEY
GLOBAL_BATCH_KEY = named_weights.GLOBAL_BATCH_KEY
DROPOUT_STATE_KEY = named_weights.DROPOUT_STATE_KEY
# Checkpoint key of a LossScaleOptimizer's scale under make_checkpoint's "optimizer".
LOSS_SCALE_KEY = "optimizer/loss_scale/current_loss_scale/.ATTRIBUTES/VARIABLE_VALUE"


def _canonical(init_checkpoint):
  """An --init_checkpoint as one absolute path: a TF checkpoint's prefix, else the real folder."""
  try:
    prefix = (None if hf_checkpoint.is_hf_folder(init_checkpoint) else
              checkpoints.checkpoint_prefix(init_checkpoint))
  except checkpoints.CheckpointError:
    prefix = None  # not one checkpoint: compared as written (it cannot be loaded anyway)
  return os.path.realpath(prefix or init_checkpoint.rstrip("/"))


@dataclasses.dataclass(frozen=True)
class Start:
  """Where a run's weights come from (see `decide_start`).

  Attributes:
    resume: the --model_dir checkpoint prefix to restore (model and optimizer), or None.
    init_checkpoint: the --init_checkpoint to load when not resuming (None: random weights).
    ignored: when resuming although --init_checkpoint was given, why it is not used (one clause).
    recorded: qa_config.json's record of the start ({"init_checkpoint": absolute path or None},
      or {} when the --model_dir has none).
  """
  resume: str = None
  init_checkpoint: str = None
  ignored: str = None
  recorded: dict = dataclasses.field(default_factory=dict)

  def describe(self, doing, step=None):
    """One log line, e.g. "resumed from model_out/ckpt-4 at step 4; --init_checkpoint=... is
    ignored: ..."."""
    where = self.resume + (f" at step {step}" if step is not None else "")
    return f"{doing} {where}" + (f"; {self.ignored}" if self.ignored else "")


def decide_start(model_dir, init_checkpoint):
  """The rule for a --model_dir that may already hold a checkpoint and an --init_checkpoint.

  - No checkpoint in `model_dir`: start from `init_checkpoint` (or random weights).
  - A checkpoint and no `init_checkpoint`: resume it (as tfm's `restore_or_initialize`).
  - A checkpoint, and `init_checkpoint` names this `model_dir`, its latest checkpoint or the
    start qa_config.json records (the same command again): resume, saying why it is ignored.
  - A checkpoint, and `init_checkpoint` names anything else: refuse (either choice would lose
    something the user wants).

  Args:
    model_dir: the --model_dir (str) or None (export.py given only --init_checkpoint).
    init_checkpoint: the --init_checkpoint (str) or None.

  Returns:
    A `Start`.

  Raises:
    CheckpointError: the refusal above, a `checkpoint` state file naming a missing checkpoint, or
      a latest checkpoint with a missing or damaged file (one line each, with the fix).
  """
  latest = checkpoints.latest_checkpoint(model_dir) if model_dir else None
  if latest:
    checkpoints.check_intact(latest, model_dir)
  if not latest:
    return Start(
        init_checkpoint=init_checkpoint,
        recorded={"init_checkpoint": _canonical(init_checkpoint) if init_checkpoint else None})
  saved = artifacts.read_qa_config(model_dir)
  recorded = {"init_checkpoint": saved["init_checkpoint"]} if "init_checkpoint" in saved else {}
  if not init_checkpoint:
    return Start(resume=latest, recorded=recorded)
  named = _canonical(init_checkpoint)
  if named in (os.path.realpath(model_dir), os.path.realpath(latest)):
    return Start(resume=latest, recorded=recorded)
  if recorded and named == recorded["init_checkpoint"]:
    return Start(
        resume=latest, recorded=recorded, ignored=
        (f"--init_checkpoint={init_checkpoint} is ignored: --model_dir={model_dir} started from it "
         f"and holds the training since (pass a new --model_dir to start again from it)"))
  started = ("which started from " + (recorded["init_checkpoint"] or "random weights")
             if recorded else "whose start is not recorded")
  raise checkpoints.CheckpointError(
      f"--model_dir={model_dir} already holds {os.path.basename(latest)}, {started}, and "
      f"--init_checkpoint={init_checkpoint} names another start; pass a new --model_dir to start "
      f"from it, or drop --init_checkpoint to continue {os.path.basename(latest)}")


class ModelDirCheckpointManager(tf.train.CheckpointManager):
  """A `tf.train.CheckpointManager` that calls `before_first_save()` (no arguments) just before
  its first save (train.py writes qa_config.json there)."""

  def __init__(self, checkpoint, directory, before_first_save, **kwargs):
    super().__init__(checkpoint, directory, **kwargs)
    self._before_first_save = before_first_save

  def save(self, *args, **kwargs):
    if self._before_first_save is not None:
      self._before_first_save()
      self._before_first_save = None
    return super().save(*args, **kwargs)


class ScheduleMismatchError(errors.UserError, ValueError):
  """Resuming with another schedule (train steps, --learning_rate, --warmup_proportion,
  --train_budget or global batch) than the checkpoint's was built with."""


class PrecisionMismatchError(errors.UserError, ValueError):
  """Resuming a checkpoint trained without loss scaling under float16, which needs its state."""


def _saved(checkpoint_path, key):
  """The scalar checkpoint value under `key` (a make_checkpoint key), or None (older ones)."""
  reader = tf.train.load_checkpoint(checkpoint_path)
  name = f"{key}/.ATTRIBUTES/VARIABLE_VALUE"
  return reader.get_tensor(name).item() if reader.has_tensor(name) else None


def schedule_steps_in(checkpoint_path):
  """The schedule length saved in a checkpoint of `make_checkpoint`, or None (older checkpoints)."""
  saved = _saved(checkpoint_path, SCHEDULE_STEPS_KEY)
  return None if saved is None else int(saved)


def train_budget_in(checkpoint_path):
  """The --train_budget in seconds that planned a checkpoint's schedule, or None (none, or an
  older checkpoint)."""
  return _saved(checkpoint_path, TRAIN_BUDGET_KEY) or None


def check_schedule(checkpoint_path, num_train_steps):
  """Refuses to resume a run whose schedule was built for another number of steps.

  Raises:
    ScheduleMismatchError: one line with both numbers and the fixes."""
  saved = schedule_steps_in(checkpoint_path)
  if saved is not None and saved != num_train_steps:
    budget = train_budget_in(checkpoint_path)
    resume = (f"--train_budget={settings.format_duration(budget)}, which keeps its plan"
              if budget else f"--max_steps={saved} (and the same batch and epochs)")
    raise ScheduleMismatchError(
        f"{checkpoint_path} was trained on a learning-rate schedule of {saved} steps, this run "
        f"asks for {num_train_steps}; resume with {resume}, or start a new --model_dir")


def check_schedule_settings(checkpoint_path, learning_rate, warmup_proportion):
  """Refuses to resume with another --learning_rate or --warmup_proportion than the checkpoint's
  schedule has (older checkpoints do not say: they pass).

  Raises:
    ScheduleMismatchError: one line naming both values and the fixes."""
  for key, flag, value in ((SCHEDULE_LEARNING_RATE_KEY, "learning_rate", learning_rate),
                           (SCHEDULE_WARMUP_KEY, "warmup_proportion", warmup_proportion)):
    saved = _saved(checkpoint_path, key)
    if saved is not None and saved != value:
      raise ScheduleMismatchError(
          f"{checkpoint_path} was trained with --{flag}={saved:g}, this run asks for "
          f"--{flag}={value:g}; resume with --{flag}={saved:g}, or start a new --model_dir to "
          f"train with {value:g}")


def resumed_plan(checkpoint_path, train_budget):
  """The planned steps a --train_budget run resumes: the checkpoint's, when the same budget
  planned them (a resume does not plan again).

  Args:
    checkpoint_path: the checkpoint resumed.
    train_budget: this run's --train_budget, in seconds.

  Raises:
    ScheduleMismatchError: the checkpoint was planned by another budget, or by none (one line,
      with the fixes).
  """
  steps, saved = schedule_steps_in(checkpoint_path), train_budget_in(checkpoint_path)
  asked = settings.format_duration(train_budget)
  if saved is None:
    keep = f"--max_steps={steps} instead" if steps else "its settings"
    raise ScheduleMismatchError(
        f"{checkpoint_path} was not planned by --train_budget, and --train_budget={asked} would "
        f"plan its schedule anew; resume with {keep}, or start a new --model_dir")
  if saved != train_budget:
    raise ScheduleMismatchError(
        f"{checkpoint_path} was planned by --train_budget={settings.format_duration(saved)} "
        f"({steps} steps), this run asks for --train_budget={asked}; resume with "
        f"--train_budget={settings.format_duration(saved)}, or start a new --model_dir")
  return steps


def check_global_batch(checkpoint_path, global_batch_size):
  """Refuses to resume with another global batch (features per optimizer step: --train_batch_size
  x --gradient_accumulation_steps x replicas) than the checkpoint's: its step count says how far
  into the shuffled train data it is, and the schedule was planned for its batch. The same global
  batch split otherwise (a smaller --train_batch_size, more accumulation) resumes. Checkpoints
  that do not record it pass.

  Raises:
    ScheduleMismatchError: one line naming both batches and the fixes.
  """
  saved = int(_saved(checkpoint_path, GLOBAL_BATCH_KEY) or 0)
  if saved and global_batch_size and saved != global_batch_size:
    raise ScheduleMismatchError(
        f"{checkpoint_path} was trained on {saved} features a step and this run's batch is "
        f"{global_batch_size} (--train_batch_size x --gradient_accumulation_steps x replicas): "
        f"its steps would count other data and another schedule; resume with the batch flags it "
        f"was trained with (the --model_dir's {artifacts.TRAIN_CONFIG_FILE} records them), or "
        f"start a new --model_dir")


def check_seed(model_dir, checkpoint_path, seed):
  """Refuses to resume `checkpoint_path` with another --seed than the run's train_config.json
  records: the train data's shuffled order is the seed's, and a resume skips the batches already
  trained in that order. A --model_dir without the file passes.

  Raises:
    ScheduleMismatchError: one line naming both seeds and the fixes.
  """
  saved = artifacts.read_train_config(model_dir).get("seed")
  if saved is not None and saved != seed:
    raise ScheduleMismatchError(
        f"{checkpoint_path} was trained with --seed={saved} (the --model_dir's "
        f"{artifacts.TRAIN_CONFIG_FILE}), this run asks for --seed={seed}: the rest of the run "
        f"would follow another shuffled order and train some examples twice, others never; "
        f"resume with --seed={saved}, or start a new --model_dir")


def check_loss_scale(checkpoint_path, loss_scaled):
  """Refuses to resume under float16 (loss-scaled) from a checkpoint without loss-scale state
  (float32 or bfloat16); the other way round restores all the run uses.

  Raises:
    PrecisionMismatchError: one line naming the checkpoint and the fixes.
  """
  reader = tf.train.load_checkpoint(checkpoint_path)
  if loss_scaled and not reader.has_tensor(LOSS_SCALE_KEY):
    raise PrecisionMismatchError(
        f"{checkpoint_path} was trained without loss scaling (float32 or bfloat16) and float16 "
        f"(--mixed_precision_dtype=float16, the --gpu default) needs its state; resume with "
        f"--mixed_precision_dtype=float32 or bfloat16, or start a new --model_dir")


def make_checkpoint(model, optimizer, train_budget=None, global_batch_size=None):
  """What a --model_dir checkpoint holds: the model, the optimizer, its schedule's length, peak and
  warm-up (`optimization.LinearWarmupDecay`'s variables), the --train_budget in seconds that
  planned it (0: none), the global batch (features per optimizer step; 0: not given) and the
  dropout layers' random-generator states (`dropout_generators`). Call it under the strategy's
  scope."""
  schedule = optimization.schedule_of(optimizer)
  return tf.train.Checkpoint(
      model=model, optimizer=optimizer, **{
          SCHEDULE_STEPS_KEY: schedule.num_train_steps,
          SCHEDULE_LEARNING_RATE_KEY: schedule.learning_rate,
          SCHEDULE_WARMUP_KEY: schedule.warmup_proportion,
          TRAIN_BUDGET_KEY: tf.Variable(float(train_budget or 0), dtype=tf.float64,
                                        trainable=False),
          GLOBAL_BATCH_KEY: tf.Variable(int(global_batch_size or 0), dtype=tf.int64,
                                        trainable=False),
          DROPOUT_STATE_KEY: dropout_generators(model)
      })


def has_dropout_state(checkpoint_path):
  """Whether a checkpoint holds the dropout generators' states (older ones do not)."""
  return any(
      name.startswith(DROPOUT_STATE_KEY + "/")
      for name, _ in tf.train.list_variables(checkpoint_path))


def dropout_generators(model):
  """The tf.random.Generator of every dropout layer of a model built by `build_model`.

  tf_keras leaves them out of checkpoints; this reads the private `_random_generator._generator`
  (BUILD.md lists it). Layers on TensorFlow's legacy random ops have none.

  Returns:
    A list of tf.random.Generator, in `model.submodules` order (the same for the same config).
  """
  generators = []
  for layer in model.submodules:
    generator = getattr(getattr(layer, "_random_generator", None), "_generator", None)
    if isinstance(generator, tf.random.Generator):
      generators.append(generator)
  return generators


def check_resumable(checkpoint_path, checkpoint):
  """`check_schedule`, `check_global_batch`, `check_schedule_settings` and `check_loss_scale` of
  `checkpoint_path` for `checkpoint` (a `make_checkpoint`); raises their errors."""
  check_schedule(checkpoint_path, int(getattr(checkpoint, SCHEDULE_STEPS_KEY).numpy()))
  check_global_batch(checkpoint_path, int(getattr(checkpoint, GLOBAL_BATCH_KEY).numpy()))
  # .numpy(): a strategy's variables (MirroredVariable) do not convert with float().
  check_schedule_settings(checkpoint_path,
                          float(getattr(checkpoint, SCHEDULE_LEARNING_RATE_KEY).numpy()),
                          float(getattr(checkpoint, SCHEDULE_WARMUP_KEY).numpy()))
  check_loss_scale(checkpoint_path,
                   isinstance(checkpoint.optimizer, tf_keras.mixed_precision.LossScaleOptimizer))


def missing_state(checkpoint_path):
  """What `make_checkpoint` saves that an older checkpoint lacks: a list of "dropout random
  state" and "schedule settings" (restoring leaves this run's values there)."""
  names = {name for name, _ in tf.train.list_variables(checkpoint_path)}
  missing = []
  if not any(name.startswith(DROPOUT_STATE_KEY + "/") for name in names):
    missing.append("dropout random state")
  if f"{SCHEDULE_LEARNING_RATE_KEY}/.ATTRIBUTES/VARIABLE_VALUE" not in names:
    missing.append("schedule settings")
  return missing
