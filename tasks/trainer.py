"""The training loop: an orbit `StandardTrainer` for the QA task, and the `orbit.Controller` around it.

The controller runs at most `steps_per_loop` steps per call of a compiled loop, saves checkpoints
every `save_checkpoints_steps`, writes TensorBoard summaries (loss, learning rate, examples/s)
after each loop, and shows progress (tasks/train_progress.py) where a loop ends. A checkpoint
holds the model, the optimizer (its `iterations` is the global step) and the schedule's length; the input position is the global step (the task's
pipeline is deterministic and skips the batches already trained). Only the chief writes into
`--model_dir`; other workers write their (identical) checkpoints into a temporary folder that is
removed. A SIGTERM (preemption) saves a checkpoint at the end of the current loop and exits
(tf.distribute.experimental.PreemptionCheckpointHandler, through orbit's
`SaveCheckpointIfPreempted` action).
"""

import contextlib
import math
import os
import re
import shutil
import tempfile
import time

from absl import logging
import orbit
import tensorflow as tf
import tf_keras

from squad_qa import errors
from squad_qa.tasks import optimization
from squad_qa.tasks import question_answering
from squad_qa.tasks import model_dir as model_dir_lib
from squad_qa.tasks import train_progress

SCHEDULE_STEPS_KEY = "schedule_num_train_steps"  # checkpoint key of the schedule's length
DROPOUT_STATE_KEY = "dropout_rng"  # checkpoint key of the dropout layers' generator states
# Checkpoint key of a LossScaleOptimizer's scale under make_checkpoint's "optimizer".
LOSS_SCALE_KEY = "optimizer/loss_scale/current_loss_scale/.ATTRIBUTES/VARIABLE_VALUE"


class LossNotFiniteError(errors.UserError, FloatingPointError):
  """The training loss became NaN or infinite (the message names the step and the fix)."""


class OutOfMemoryError(errors.UserError, RuntimeError):
  """A training step ran out of device memory; the message names the tensor and the last checkpoint."""


class ScheduleMismatchError(errors.UserError, ValueError):
  """Resuming with another number of train steps than the checkpoint's schedule was built for."""


class PrecisionMismatchError(errors.UserError, ValueError):
  """Resuming a checkpoint trained without loss scaling under float16, which needs its state."""


class QATrainer(orbit.StandardTrainer):
  """Runs the task's replica step under a strategy and reports loss, learning rate and rates.

  Args:
    strategy: the tf.distribute strategy the model and optimizer were built under.
    replica_step: batch -> float32 loss share (tasks.question_answering.make_replica_step).
    optimizer: the task's optimizer (its `iterations` is the global step).
    global_batch_size: features per optimizer step over all replicas (for examples/s).
  """

  def __init__(self, strategy, replica_step, optimizer, global_batch_size):
    self.strategy = strategy
    self.optimizer = optimizer
    self.global_batch_size = global_batch_size
    self._replica_step = replica_step
    # Outside the strategy's scope: a plain (not per-replica) metric of the all-reduced loss.
    self.train_loss = tf_keras.metrics.Mean("loss", dtype=tf.float32)
    self._loop_started = None
    self._loop_start_step = 0
    self._loops = 0  # loops run in this process
    self.last_output = {}  # train_loop_end's figures of the last loop
    # The dataset is set after the controller has restored the step (see `train`).
    super().__init__(train_dataset=None,
                     options=orbit.StandardTrainerOptions(use_tf_while_loop=True))

  def train_loop_begin(self):
    self.train_loss.reset_state()
    self._loop_started = time.time()
    self._loop_start_step = int(self.optimizer.iterations.numpy())

  def train_step(self, iterator):
    loss = self.strategy.run(self._replica_step, args=(next(iterator),))
    self.train_loss.update_state(self.strategy.reduce(tf.distribute.ReduceOp.SUM, loss, axis=None))

  def train_loop_end(self):
    loss = float(self.train_loss.result())
    step = int(self.optimizer.iterations.numpy())
    if not math.isfinite(loss):
      raise LossNotFiniteError(f"loss is {loss} at step {step}; lower --learning_rate")
    elapsed = time.time() - self._loop_started
    steps = step - self._loop_start_step
    self.last_output = {
        "loss": loss, "learning_rate": optimization.learning_rate_at(self.optimizer, step - 1)}
    # A process's first loop includes tracing: its rate would measure mostly that.
    if elapsed and self._loops:
      self.last_output["examples_per_second"] = steps * self.global_batch_size / elapsed
    self._loops += 1
    return self.last_output


# oneDNN (TensorFlow's CPU kernels) reports a failed allocation inside an op as its status 1,
# dnnl_out_of_memory (oneDNN's dnnl_types.h), and TensorFlow raises it as an AbortedError, e.g.
# "Status: 1, message: could not create a primitive, in file .../mkl_softmax_op.cc:290".
_ONEDNN_OUT_OF_MEMORY = re.compile(r"Status: 1, message: ([^,\n]*)")


def _out_of_memory_summary(error):
  """What ran out of memory, in one line, if `error` is an out-of-memory error; else None.

  Args:
    error: a tf.errors.OpError raised by a training step.

  Returns:
    For a ResourceExhaustedError, its "OOM when allocating tensor with shape[...]" line (TF puts
    "Graph execution error:" and the Python stack first) without the device and allocator; for
    oneDNN's out-of-memory status, "oneDNN out of memory (<its message>) in <op>"; None otherwise.
  """
  lines = [l.strip() for l in error.message.splitlines() if l.strip()]
  if isinstance(error, tf.errors.ResourceExhaustedError):
    line = next((l for l in lines if l.startswith("OOM when allocating")),
                lines[0] if lines else "")
    return line.split(" on /job:")[0][:300]
  found = _ONEDNN_OUT_OF_MEMORY.search(error.message)
  if not found:
    return None
  node = re.search(r"\[\[\{\{node ([^}]*)\}\}\]\]", error.message)
  where = f" in {node.group(1).rsplit('/', 1)[-1]}" if node else ""
  return f"oneDNN out of memory ({found.group(1).strip()}){where}"


class SaveAtMultiples:
  """An orbit train action: a checkpoint when the global step is a multiple of `interval` or
  `last_step` (tf.estimator's and the previous loop's rule)."""

  def __init__(self, manager, global_step, interval, last_step):
    self.manager, self.global_step = manager, global_step
    self.interval, self.last_step = interval, last_step

  def __call__(self, output):
    del output
    step = int(self.global_step.numpy())
    if step % self.interval == 0 or step >= self.last_step:
      logging.info("saved checkpoint %s", self.manager.save(checkpoint_number=step))


def schedule_steps_in(checkpoint_path):
  """The schedule length saved in a checkpoint of `make_checkpoint`, or None (older checkpoints)."""
  reader = tf.train.load_checkpoint(checkpoint_path)
  key = f"{SCHEDULE_STEPS_KEY}/.ATTRIBUTES/VARIABLE_VALUE"
  return int(reader.get_tensor(key)) if reader.has_tensor(key) else None


def check_schedule(checkpoint_path, num_train_steps):
  """Refuses to resume a run whose schedule was built for another number of steps.

  Raises:
    ScheduleMismatchError: one line with both numbers and the fixes.
  """
  saved = schedule_steps_in(checkpoint_path)
  if saved is not None and saved != num_train_steps:
    raise ScheduleMismatchError(
        f"{checkpoint_path} was trained on a learning-rate schedule of {saved} steps, this run "
        f"asks for {num_train_steps}; resume with --max_steps={saved} (and the same batch and "
        f"epochs), or start a new --model_dir")


def check_loss_scale(checkpoint_path, loss_scaled):
  """Refuses to resume under float16 (loss-scaled) from a checkpoint saved without a loss scale.

  A float32 or bfloat16 run saves no loss-scale state, and restoring it into a
  LossScaleOptimizer leaves the scale's variables unmatched. The other way round (a float16
  checkpoint resumed in float32 or bfloat16) restores everything the run uses and is allowed.

  Raises:
    PrecisionMismatchError: one line naming the checkpoint and the fixes.
  """
  reader = tf.train.load_checkpoint(checkpoint_path)
  if loss_scaled and not reader.has_tensor(LOSS_SCALE_KEY):
    raise PrecisionMismatchError(
        f"{checkpoint_path} was trained without loss scaling (float32 or bfloat16) and float16 "
        f"(--mixed_precision_dtype=float16, the --gpu default) needs its state; resume with "
        f"--mixed_precision_dtype=float32 or bfloat16, or start a new --model_dir")


def make_checkpoint(model, optimizer, num_train_steps):
  """What a --model_dir checkpoint holds: the model, the optimizer, the schedule's length and the
  dropout layers' random-generator states (`question_answering.dropout_generators`)."""
  return tf.train.Checkpoint(
      model=model, optimizer=optimizer,
      **{SCHEDULE_STEPS_KEY: tf.Variable(num_train_steps, dtype=tf.int64, trainable=False),
         DROPOUT_STATE_KEY: question_answering.dropout_generators(model)})


def has_dropout_state(checkpoint_path):
  """Whether a checkpoint holds the dropout generators' states (older ones do not)."""
  return any(name.startswith(DROPOUT_STATE_KEY + "/")
             for name, _ in tf.train.list_variables(checkpoint_path))


@contextlib.contextmanager
def worker_dir(model_dir, is_chief):
  """`model_dir` on the chief; elsewhere a temporary folder, removed on exit."""
  if is_chief:
    yield model_dir
    return
  temp = tempfile.mkdtemp(prefix="squad_qa_worker_")
  try:
    yield temp
  finally:
    shutil.rmtree(temp, ignore_errors=True)


def train(strategy, trainer, checkpoint, model_dir, num_train_steps, dataset_fn,
          save_checkpoints_steps, steps_per_loop, is_chief, cluster_resolver=None,
          restore_fn=None, start=None, before_first_save=None, watchers=()):
  """Trains to `num_train_steps` with orbit, resuming from --model_dir's latest checkpoint.

  Args:
    strategy, trainer: the strategy and a `QATrainer`.
    checkpoint: `make_checkpoint(...)` for the trainer's model and optimizer.
    model_dir: where the chief writes checkpoints and summaries (others: a temporary folder).
    num_train_steps: the global step to train to.
    dataset_fn: (input_context, skip_steps) -> per-pipeline dataset (the task's build_inputs).
    save_checkpoints_steps: steps between checkpoints.
    steps_per_loop: steps per compiled loop (progress, summaries and SIGTERM checks happen
      between loops).
    is_chief: whether this worker writes --model_dir.
    cluster_resolver: for the preemption handler (multi-worker); default: this process alone.
    restore_fn: called with the checkpoint path when resuming (before the controller restores),
      e.g. to check the schedule; may raise.
    start: the `tasks.model_dir.Start` decided for this run (for the log line: which flag a
      resume ignores); default: resume --model_dir's latest checkpoint.
    before_first_save: a function of no arguments run just before the first checkpoint is saved
      (train.py writes qa_config.json there, so a run failing before leaves none).
    watchers: more train actions, run after the checkpoint actions at the end of each loop, e.g.
      `tasks.train_progress.TrainProgress`, `tasks.learning_curve.LearningCurve`. Each is called
      with the loop's output, and its `begin(start_step, global_batch_size)` once before the first
      step; the loops are cut to end at its `loop_steps(step)` (steps until it next needs to run).

  Returns:
    {"steps": steps run now, "start_step", "end_step", "train_seconds" (wall time of the steps,
    tracing included)} plus the last loop's "loss",
    "learning_rate" and "examples_per_second" (None when that loop was this process's first: its
    time is mostly tracing).

  Raises:
    OutOfMemoryError: a step raised tf.errors.ResourceExhaustedError, or oneDNN's out-of-memory
      status (an AbortedError on the CPU); the last checkpoint is left as it was.
  """
  start = start or model_dir_lib.decide_start(model_dir, None)
  latest = start.resume
  if latest and restore_fn:
    restore_fn(latest)
  with worker_dir(model_dir, is_chief) as write_dir:
    # Restored here, not by the controller: on other workers it restores from write_dir, which is
    # empty, and with nothing left to train the optimizer's slots are never built, so the restore
    # must be marked partial to keep TensorFlow from warning about unrestored values.
    restored = checkpoint.restore(latest) if latest else None
    start_step = int(trainer.optimizer.iterations.numpy())
    if latest:
      logging.info("%s", start.describe("resumed from", start_step))
    if start_step >= num_train_steps:
      if restored:
        restored.expect_partial()
      logging.info("already trained %d of %d steps", start_step, num_train_steps)
      return {"steps": 0, "start_step": start_step, "end_step": start_step}
    if restored and has_dropout_state(latest):
      restored.assert_existing_objects_matched()
    elif restored:
      restored.expect_partial()
      logging.warning("%s holds no dropout random state (saved by an earlier version): dropout "
                      "continues from a new random stream", latest)
    # No checkpoint_interval: the controller would save after the first loop and then every
    # interval from there; SaveAtMultiples saves at multiples of save_checkpoints_steps and at the
    # end, and the loops are cut to end on those steps.
    manager = model_dir_lib.ModelDirCheckpointManager(checkpoint, write_dir, before_first_save,
                                                    max_to_keep=3)
    global_step = trainer.optimizer.iterations
    actions = [
        SaveAtMultiples(manager, global_step, save_checkpoints_steps, num_train_steps),
        orbit.actions.SaveCheckpointIfPreempted(
            cluster_resolver or tf.distribute.cluster_resolver.TFConfigClusterResolver(), manager,
            checkpoint_number=global_step)]
    for watcher in watchers:
      actions.append(watcher)
      watcher.begin(start_step, trainer.global_batch_size)

    def loop_steps(step):
      return min([steps_per_loop, save_checkpoints_steps - step % save_checkpoints_steps,
                  *(watcher.loop_steps(step) for watcher in watchers)])

    started = time.time()
    try:
      with train_progress.orbit_lines_to_debug():
        controller = orbit.Controller(
            strategy=strategy, trainer=trainer, global_step=global_step,
            steps_per_loop=loop_steps, checkpoint_manager=manager, train_actions=actions,
            summary_dir=os.path.join(write_dir, "train") if is_chief else None,
            summary_interval=steps_per_loop if is_chief else None)
        trainer.train_dataset = strategy.distribute_datasets_from_function(
            lambda context: dataset_fn(context, start_step))
        controller.train(steps=num_train_steps, checkpoint_at_completion=False)
    except (tf.errors.ResourceExhaustedError, tf.errors.AbortedError) as e:
      summary = _out_of_memory_summary(e)
      if summary is None:
        raise
      raise OutOfMemoryError(
          f"step {int(trainer.optimizer.iterations.numpy()) + 1} ran out of memory "
          f"({summary}); the last checkpoint is "
          f"{manager.latest_checkpoint or 'none (nothing saved yet)'}, unchanged") from None
    end_step = int(trainer.optimizer.iterations.numpy())
    rate = trainer.last_output.get("examples_per_second")
    logging.info("trained steps %d..%d: final loss %.4f, %s", start_step, end_step,
                 trainer.last_output.get("loss", float("nan")),
                 "speed n/a (one loop, whose time includes tracing)" if rate is None
                 else f"{rate:.2f} examples/s (last loop)")
  return {"steps": end_step - start_step, "start_step": start_step, "end_step": end_step,
          "train_seconds": time.time() - started, "examples_per_second": None,
          **trainer.last_output}
