"""The training loop: the `orbit.Controller` around the task's trainer
(`tasks.question_answering.QATrainer`), run to a `tasks.run_plan.RunPlan`.

The controller runs at most `steps_per_loop` steps per call of a compiled loop, saves checkpoints
every `save_checkpoints_steps`, writes TensorBoard summaries (loss, learning rate, examples/s)
after each loop, and shows progress (tasks/train_progress.py) where a loop ends. A checkpoint
holds the model, the optimizer (its `iterations` is the global step) and the schedule's length
(tasks/model_dir.py); the input position is the global step (the task's pipeline is
deterministic and skips the batches already trained). Only the chief writes into
`--model_dir`; other workers write their (identical) checkpoints into a temporary folder that is
removed. A SIGTERM (preemption) saves a checkpoint at the end of the current loop and exits
(tf.distribute.experimental.PreemptionCheckpointHandler, through orbit's
`SaveCheckpointIfPreempted` action).
"""

import contextlib
import os
import re
import shutil
import tempfile
import time

from absl import logging
import orbit
import tensorflow as tf

from squad_qa import errors
from squad_qa.tasks import distribution
from squad_qa.tasks import model_dir as model_dir_lib
from squad_qa.tasks import train_progress


class OutOfMemoryError(errors.UserError, RuntimeError):
  """A training step ran out of device memory; the message names the tensor and the last
  checkpoint."""


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


def _restore(checkpoint, latest, start, global_step):
  """Restores the checkpoint `latest` (a path, or None) into `checkpoint`.

  Restored here, not by the controller: on other workers it restores from their temporary folder,
  which is empty, and with nothing left to train the optimizer's slots are never built, so the
  restore must be marked partial to keep TensorFlow from warning about unrestored values.

  Returns:
    (the restore status or None, the global step restored: 0 without a checkpoint).
  """
  restored = checkpoint.restore(latest) if latest else None
  start_step = int(global_step.numpy())
  if latest:
    logging.info("%s", start.describe("resumed from", start_step))
  return restored, start_step


def _check_restored(restored, latest):
  """Asserts that `restored` (a restore status or None) matched every object of the checkpoint;
  one saved without the dropout generators' states restores the rest, with a warning."""
  if restored and model_dir_lib.has_dropout_state(latest):
    restored.assert_existing_objects_matched()
  elif restored:
    restored.expect_partial()
    logging.warning(
        "%s holds no dropout random state (saved by an earlier version): dropout "
        "continues from a new random stream", latest)


def _train_actions(manager, trainer, plan, watchers, start_step):
  """orbit's train actions (checkpoints at multiples of `plan.save_checkpoints_steps` and at the
  end, one on SIGTERM, then the `watchers`) and the loop length: each loop ends where the next
  action needs to run.

  No checkpoint_interval for the controller: it would save after the first loop and then every
  interval from there.

  Returns:
    (the list of actions, a function global step -> steps of the next loop).
  """
  global_step = trainer.optimizer.iterations
  every = plan.save_checkpoints_steps
  actions = [
      SaveAtMultiples(manager, global_step, every, plan.num_train_steps),
      orbit.actions.SaveCheckpointIfPreempted(
          getattr(trainer.strategy, "cluster_resolver", None) or
          tf.distribute.cluster_resolver.TFConfigClusterResolver(), manager,
          checkpoint_number=global_step)
  ]
  for watcher in watchers:
    actions.append(watcher)
    watcher.begin(start_step, trainer.global_batch_size)

  def loop_steps(step):
    return min([
        plan.steps_per_loop, every - step % every,
        *(watcher.loop_steps(step) for watcher in watchers)
    ])

  return actions, loop_steps


def train(trainer, checkpoint, dataset_fn, plan, start=None, before_first_save=None, watchers=()):
  """Trains to `plan.num_train_steps` with orbit, resuming from --model_dir's latest checkpoint.

  Args:
    trainer: a `tasks.question_answering.QATrainer` (its strategy runs the steps).
    checkpoint: `tasks.model_dir.make_checkpoint(...)` for the trainer's model and optimizer.
    dataset_fn: (input_context, skip_steps) -> per-pipeline dataset (the task's build_inputs).
    plan: the `tasks.run_plan.RunPlan`: model_dir (where the chief writes checkpoints and
      summaries; other workers a temporary folder), num_train_steps, save_checkpoints_steps and
      steps_per_loop (progress, summaries and SIGTERM checks happen between loops).
    start: the `tasks.model_dir.Start` decided for this run (for the log line: which flag a
      resume ignores); default: resume --model_dir's latest checkpoint. A resume must keep the
      checkpoint's schedule length and loss scaling (`model_dir.check_resumable`).
    before_first_save: a function of no arguments run just before the first checkpoint is saved
      (train.py writes qa_config.json there, so a run failing before leaves none).
    watchers: more train actions, run after the checkpoint actions at the end of each loop, e.g.
      `tasks.train_progress.TrainProgress`, `tasks.learning_curve.LearningCurve`. Each is called
      with the loop's output, and its `begin(start_step, global_batch_size)` once before the first
      step; the loops are cut to end at its `loop_steps(step)` (steps until it next needs to run).

  Returns:
    {"steps": steps run now, "start_step", "end_step", "train_seconds" (wall time of the steps,
    tracing included)} plus the last loop's "loss", "learning_rate" and "examples_per_second"
    (None when that loop was this process's first: its time is mostly tracing).

  Raises:
    OutOfMemoryError: a step raised tf.errors.ResourceExhaustedError, or oneDNN's out-of-memory
      status (an AbortedError on the CPU); the last checkpoint is left as it was.
    model_dir.ScheduleMismatchError, model_dir.PrecisionMismatchError: a resume that would change
      the schedule or lacks the loss-scale state.
  """
  strategy = trainer.strategy
  is_chief = distribution.is_chief(strategy)
  model_dir, num_train_steps = plan.model_dir, plan.num_train_steps
  steps_per_loop = plan.steps_per_loop
  start = start or model_dir_lib.decide_start(model_dir, None)
  latest = start.resume
  if latest:
    model_dir_lib.check_resumable(latest, checkpoint)
  with worker_dir(model_dir, is_chief) as write_dir:
    restored, start_step = _restore(checkpoint, latest, start, trainer.optimizer.iterations)
    if start_step >= num_train_steps:
      if restored:
        restored.expect_partial()
      logging.info("already trained %d of %d steps", start_step, num_train_steps)
      return {"steps": 0, "start_step": start_step, "end_step": start_step}
    _check_restored(restored, latest)
    manager = model_dir_lib.ModelDirCheckpointManager(checkpoint, write_dir, before_first_save,
                                                      max_to_keep=3)
    global_step = trainer.optimizer.iterations
    actions, loop_steps = _train_actions(manager, trainer, plan, watchers, start_step)
    started = time.time()
    try:
      with train_progress.orbit_lines_to_debug():
        controller = orbit.Controller(
            strategy=strategy, trainer=trainer, global_step=global_step, steps_per_loop=loop_steps,
            checkpoint_manager=manager, train_actions=actions,
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
    logging.info(
        "trained steps %d..%d: final loss %.4f, %s", start_step, end_step,
        trainer.last_output.get("loss", float("nan")),
        "speed n/a (one loop, whose time includes tracing)"
        if rate is None else f"{rate:.2f} examples/s (last loop)")
  return {
      "steps": end_step - start_step,
      "start_step": start_step,
      "end_step": end_step,
      "train_seconds": time.time() - started,
      "examples_per_second": None,
      **trainer.last_output
  }
