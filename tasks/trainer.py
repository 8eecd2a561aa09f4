"""The training loop: `QATrainer` runs the task's step, an `orbit.Controller` runs it to a
`tasks.run_plan.RunPlan`: compiled loops of at most `steps_per_loop` steps, checkpoints
(tasks/model_dir.py) and TensorBoard summaries, progress between loops, a checkpoint on SIGTERM.
The global step is the input position (the task's pipeline skips the batches trained). Only the
chief writes `--model_dir`; other workers write into a temporary folder that is removed.
"""

import contextlib
import math
import os
import re
import shutil
import signal
import sys
import tempfile
import time

from absl import logging
import orbit
import tensorflow as tf
import tf_keras

from squad_qa import errors
from squad_qa.base import artifacts
from squad_qa.base import progress
from squad_qa.flags import command_line
from squad_qa.tasks import distribution
from squad_qa.tasks import model_dir as model_dir_lib
from squad_qa.tasks import optimization
from squad_qa.tasks import train_progress


class OutOfMemoryError(errors.UserError, RuntimeError):
  """A training step ran out of device memory (the message names the tensor and last checkpoint)."""


class LossNotFiniteError(errors.UserError, FloatingPointError):
  """The training loss became NaN or infinite (the message names the step and the fix)."""


class QATrainer(orbit.StandardTrainer):
  """Runs the task's replica step under a strategy; reports loss, learning rate and examples/s.

  Args:
    strategy: the tf.distribute strategy the model and optimizer were built under.
    replica_step: batch -> float32 loss share (`question_answering.make_replica_step`).
    optimizer: the task's optimizer (its `iterations` is the global step).
    global_batch_size: features per optimizer step over all replicas.
  """

  def __init__(self, strategy, replica_step, optimizer, global_batch_size):
    self.strategy = strategy
    self.optimizer = optimizer
    self.global_batch_size = global_batch_size
    self._replica_step = replica_step
    # Built outside the strategy's scope: a plain metric of the all-reduced loss.
    self.train_loss = tf_keras.metrics.Mean("loss", dtype=tf.float32)
    self._loop_started = None
    self._loop_start_step = 0
    self._loops = 0  # loops run in this process
    self.last_output = {}  # train_loop_end's figures of the last loop
    self.loss_steps = (0, 0)  # the first and last step of the last loop (its loss is their mean)
    # `train` sets the dataset once the step is restored.
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
        "loss": loss,
        "learning_rate": optimization.learning_rate_at(self.optimizer, step - 1)
    }
    self.loss_steps = (self._loop_start_step + 1, step)  # the steps `loss` is the mean of
    # A process's first loop is mostly tracing.
    if elapsed and self._loops:
      self.last_output["examples_per_second"] = steps * self.global_batch_size / elapsed
    self._loops += 1
    return self.last_output


# oneDNN's status 1 is dnnl_out_of_memory (dnnl_types.h); TensorFlow raises it as an AbortedError,
# e.g. "Status: 1, message: could not create a primitive, in file .../mkl_softmax_op.cc:290".
_ONEDNN_OUT_OF_MEMORY = re.compile(r"Status: 1, message: ([^,\n]*)")
# How a ResourceExhaustedError's message names the allocation that failed: TensorFlow's allocator
# ("OOM when allocating tensor with shape[...]"), XLA's inside a compiled function ("Out of memory
# while trying to allocate N bytes.").
_ALLOCATION_FAILED = ("OOM when allocating", "Out of memory while trying to allocate")


def _out_of_memory_summary(error):
  """What ran out of memory, in one line, if `error` (a tf.errors.OpError or a MemoryError) is
  out-of-memory.

  Returns:
    A ResourceExhaustedError's "OOM when allocating tensor with shape[...]" line without device
    and allocator, or XLA's "Out of memory while trying to allocate N bytes."; for oneDNN's
    status, "oneDNN out of memory (<its message>) in <op>"; for a MemoryError (a host allocation
    that failed outside TensorFlow's allocator, e.g. while TensorFlow built the message of its own
    out-of-memory error), "a host allocation failed: <its message>"; else None.
  """
  if isinstance(error, MemoryError):
    return f"a host allocation failed: {error}"
  lines = [l.strip() for l in error.message.splitlines() if l.strip()]
  if isinstance(error, tf.errors.ResourceExhaustedError):
    line = next((l for l in lines if l.startswith(_ALLOCATION_FAILED)), lines[0] if lines else "")
    return line.split(" on /job:")[0][:300]
  found = _ONEDNN_OUT_OF_MEMORY.search(error.message)
  if not found:
    return None
  node = re.search(r"\[\[\{\{node ([^}]*)\}\}\]\]", error.message)
  where = f" in {node.group(1).rsplit('/', 1)[-1]}" if node else ""
  return f"oneDNN out of memory ({found.group(1).strip()}){where}"


class SaveAtMultiples:
  """An orbit train action: a checkpoint when the global step is a multiple of `interval` or
  reaches `last_step`."""

  def __init__(self, manager, global_step, interval, last_step):
    self.manager, self.global_step = manager, global_step
    self.interval, self.last_step = interval, last_step

  def set_num_train_steps(self, steps):
    self.last_step = steps

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
  """Restores the checkpoint `latest` (a path, or None) into `checkpoint`, not from a non-chief
  worker's empty folder as the controller would; returns (the status or None, the step)."""
  restored = checkpoint.restore(latest) if latest else None
  start_step = int(global_step.numpy())
  if latest:
    logging.info("%s", start.describe("resumed from", start_step))
  return restored, start_step


def _check_restored(restored, latest):
  """Asserts that `restored` (a restore status or None) matched the whole checkpoint; one saved by
  an earlier version (`model_dir.missing_state`) restores the rest, with a warning."""
  missing = model_dir_lib.missing_state(latest) if restored else []
  if restored and not missing:
    restored.assert_existing_objects_matched()
  elif restored:
    restored.expect_partial()
    if "dropout random state" in missing:
      logging.warning(
          "%s holds no dropout random state (saved by an earlier version): dropout "
          "continues from a new random stream", latest)


class _SigtermDuringWork(Exception):
  """Raised by `SaveAndStopOnSigterm`'s handler inside its `interruptible` work."""


class SaveAndStopOnSigterm:
  """orbit action: after a SIGTERM (a preemption), saves a checkpoint at the current step, says so
  in one line and exits with `command_line.PREEMPTED_EXIT_STATUS` (orbit's
  SaveCheckpointIfPreempted, through tf.distribute.experimental.PreemptionCheckpointHandler, with
  our exit line).

  On `one_worker` (no cluster to agree on a step with) it saves at the first check after the
  signal; TF's handler, which every worker of a cluster goes through, saves one loop later.
  With `summary_dir` (the chief's orbit summary folder) it first writes the stopped loop's output
  there, which orbit would write only after its train actions."""

  def __init__(self, cluster_resolver, manager, global_step, one_worker=True, summary_dir=None):
    self._manager, self._global_step = manager, global_step
    self.one_worker = one_worker
    self._summary_dir = summary_dir
    self._output = None  # the last loop's train output (`__call__`)
    self._command_handler = signal.getsignal(signal.SIGTERM)
    self._handler = tf.distribute.experimental.PreemptionCheckpointHandler(
        cluster_resolver, manager,
        termination_config=tf.distribute.experimental.TerminationConfig(exit_fn=self._exit))
    self.received = False
    self._interruptible = False  # inside `interruptible`: a SIGTERM stops the work at once
    tf_handler = signal.getsignal(signal.SIGTERM)
    if callable(tf_handler):  # TF's handler only flags the signal for the next check: note it too

      def on_sigterm(signum, frame):
        self.received = True
        tf_handler(signum, frame)
        if self._interruptible:
          self._interruptible = False
          raise _SigtermDuringWork()

      signal.signal(signal.SIGTERM, on_sigterm)

  @contextlib.contextmanager
  def interruptible(self):
    """Within (work between loops on one worker, e.g. a learning-curve scoring: a minute on all of
    dev), a SIGTERM stops that work at once: the checkpoint of the current step is saved and the
    command exits as a SIGTERM between loops does, instead of after the work and the next loop."""
    self._interruptible = True
    try:
      yield
    except _SigtermDuringWork:
      self._save_and_exit()  # the weights are this step's
    finally:
      self._interruptible = False

  @contextlib.contextmanager
  def handling(self):
    """Within: training, SIGTERM saves and stops (`__call__`). On leaving, SIGTERM is the
    command's again (`flags.command_line.run`'s handler); a SIGTERM that came after the last check
    (during the final loop's save) and was not acted on is then, as the command's would be.

    Raises:
      command_line.Terminated: on a normal exit, a SIGTERM came and was not acted on (the last
        checkpoint is kept).
    """
    try:
      yield
    finally:
      signal.signal(signal.SIGTERM, self._command_handler)
    if self.received:
      raise command_line.Terminated()

  def __call__(self, output):
    self._output = output
    if self.received and self.one_worker:  # TF's handler would train one more loop first
      self._save_and_exit()
    self._handler.save_checkpoint_if_preempted(checkpoint_number=self._global_step,
                                               check_interval=False)

  def _save_and_exit(self):
    """Saves the checkpoint of the current step and exits as TF's handler does (`_exit`)."""
    self._manager.save(checkpoint_number=self._global_step)
    self._exit()

  def _exit(self):
    if self._summary_dir and self._output:
      summaries = orbit.utils.SummaryManager(self._summary_dir, tf.summary.scalar,
                                             global_step=self._global_step)
      summaries.write_summaries(tf.nest.map_structure(orbit.utils.get_value, self._output))
      summaries.flush()
    progress.end_bar_line()
    print(
        f"{command_line.program_name()}: stopped by SIGTERM at step "
        f"{int(self._global_step.numpy())}: saved {self._manager.latest_checkpoint}; the same "
        f"command resumes from it", file=sys.stderr, flush=True)
    sys.exit(command_line.PREEMPTED_EXIT_STATUS)


def _train_actions(manager, trainer, plan, watchers, start_step, summary_dir=None):
  """orbit's train actions, a function global step -> steps of the next loop, ending where an
  action is due (the controller's checkpoint_interval counts from the first loop), and one that
  moves the actions' last step (a new plan).

  In order: a checkpoint on SIGTERM (saved before anything else runs), the `watchers` (so a
  loop's progress shows before its checkpoint's line, and a terminal's bar completes before the
  last one), checkpoints at multiples of `plan.save_checkpoints_steps` and at the end. A SIGTERM's
  stop writes its loop's summaries to `summary_dir` (the chief's; None: none).
  """
  global_step = trainer.optimizer.iterations
  every = plan.save_checkpoints_steps
  actions = [
      SaveAndStopOnSigterm(
          getattr(trainer.strategy, "cluster_resolver", None) or
          tf.distribute.cluster_resolver.TFConfigClusterResolver(), manager, global_step,
          one_worker=not distribution.is_multi_worker(trainer.strategy), summary_dir=summary_dir)
  ]
  for watcher in watchers:
    actions.append(watcher)
    if hasattr(watcher, "work_context") and actions[0].one_worker:
      watcher.work_context = actions[0].interruptible  # other workers wait in a collective
    watcher.begin(start_step, trainer.global_batch_size)
  save = SaveAtMultiples(manager, global_step, every, plan.num_train_steps)
  actions.append(save)

  def loop_steps(step):
    return min([
        plan.steps_per_loop, every - step % every,
        *(watcher.loop_steps(step) for watcher in watchers)
    ])

  def set_num_train_steps(steps):
    for action in [*watchers, save]:
      action.set_num_train_steps(steps)

  return actions, loop_steps, set_num_train_steps


# A checkpoint's files while and once written: <prefix>-<step>_temp/, .index, .data-*.
_CHECKPOINT_FILE = re.compile(r"^(.+-\d+)(_temp|\.index|\.data-\d+-of-\d+)$")


def _no_space_error(manager, step):
  """Removes what a save that filled the disk left in `manager`'s folder (the files of checkpoints
  it does not list); returns the `errors.NoSpaceError` saying so."""
  folder = manager.directory
  kept = {os.path.basename(path) for path in manager.checkpoints}
  for name in tf.io.gfile.listdir(folder) if tf.io.gfile.isdir(folder) else []:
    found = _CHECKPOINT_FILE.match(name.rstrip("/"))
    if found and found.group(1) not in kept:
      path = os.path.join(folder, name.rstrip("/"))
      if tf.io.gfile.isdir(path):
        tf.io.gfile.rmtree(path)
      else:
        tf.io.gfile.remove(path)
  latest = manager.latest_checkpoint
  return errors.NoSpaceError(
      f"--model_dir={folder}: no space left on the device while saving the checkpoint of step "
      f"{step} (its partial files are removed); " +
      (f"the last checkpoint {latest} is intact: free space (or pass another --model_dir) and the "
       f"same command resumes from it"
       if latest else "no checkpoint was saved yet: free space or pass another --model_dir"))


@contextlib.contextmanager
def _out_of_memory_as_error(trainer, manager):
  """Within: an out-of-memory error of a step raises `OutOfMemoryError` naming the last checkpoint
  (`manager`'s); a full disk `errors.NoSpaceError`, the partial checkpoint removed; other errors
  pass. Out of memory is what `_out_of_memory_summary` recognizes."""
  try:
    yield
  except (tf.errors.ResourceExhaustedError, tf.errors.AbortedError, MemoryError, OSError) as e:
    if artifacts.is_no_space(e) and not isinstance(e, errors.UserError):
      raise _no_space_error(manager, int(trainer.optimizer.iterations.numpy())) from None
    if isinstance(e, OSError):
      raise
    summary = _out_of_memory_summary(e)
    if summary is None:
      raise
    raise OutOfMemoryError(
        f"step {int(trainer.optimizer.iterations.numpy()) + 1} ran out of memory "
        f"({summary}); the last checkpoint is "
        f"{manager.latest_checkpoint or 'none (nothing saved yet)'}, unchanged") from None


def _log_trained(trainer, start_step, end_step):
  rate = trainer.last_output.get("examples_per_second")
  logging.info(
      "trained steps %d..%d: loss %.4f (mean of steps %d..%d), %s", start_step, end_step,
      trainer.last_output.get("loss", float("nan")), *trainer.loss_steps,
      "speed n/a (one loop, whose time includes tracing)"
      if rate is None else f"{rate:.2f} examples/s (last loop)")


def train(trainer, checkpoint, dataset_fn, plan, start=None, before_first_save=None, watchers=(),
          replanner=None):
  """Trains to `plan.num_train_steps` with orbit, resuming from --model_dir's latest checkpoint.

  Args:
    trainer: a `QATrainer` (its strategy runs the steps).
    checkpoint: `tasks.model_dir.make_checkpoint(...)` for the trainer's model and optimizer.
    dataset_fn: (input_context, skip_steps) -> per-pipeline dataset (the task's build_inputs).
    plan: the `tasks.run_plan.RunPlan`.
    start: the `tasks.model_dir.Start` of this run; default: resume --model_dir's latest.
    before_first_save: a function of no arguments run just before the first checkpoint is saved.
    watchers: more train actions run after each loop (e.g. `train_progress.TrainProgress`,
      `learning_curve.LearningCurve`): each has `begin(start_step, global_batch_size)`, called
      once, `loop_steps(step)`, the steps until it next needs to run, and
      `set_num_train_steps(steps)`, called when a new plan changes the last step.
    replanner: a `tasks.train_budget.Replanner` (--train_budget), which may plan the steps again
      at its checks; None: `plan.num_train_steps` stays.

  Returns:
    {"steps": steps run now, "start_step", "end_step", "num_train_steps" (as planned at the end),
    "train_seconds" (tracing included), "examples_per_second" (the run's: steps x global batch /
    train_seconds)} plus the last loop's "loss", "learning_rate" and
    "last_loop_examples_per_second" (None after one loop, whose time includes tracing).

  Raises:
    OutOfMemoryError: a step ran out of memory; the last checkpoint is left as it was.
    errors.NoSpaceError: the disk filled up while saving; the last complete checkpoint is kept.
    model_dir.ScheduleMismatchError, model_dir.PrecisionMismatchError: as `check_resumable`.
  """
  strategy = trainer.strategy
  is_chief = distribution.is_chief(strategy)
  model_dir, num_train_steps = plan.model_dir, plan.num_train_steps
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
    summary_dir = os.path.join(write_dir, "train") if is_chief else None
    actions, loop_steps, set_num_train_steps = _train_actions(manager, trainer, plan, watchers,
                                                              start_step, summary_dir)
    sigterm = actions[0]
    started = time.time()
    with _out_of_memory_as_error(
        trainer, manager), train_progress.orbit_lines_to_debug(), (sigterm.handling()):
      controller = orbit.Controller(strategy=strategy, trainer=trainer,
                                    global_step=trainer.optimizer.iterations,
                                    steps_per_loop=loop_steps, checkpoint_manager=manager,
                                    train_actions=actions, summary_dir=summary_dir,
                                    summary_interval=plan.steps_per_loop if is_chief else None)
      trainer.train_dataset = distribution.distribute_inputs(
          strategy, lambda context: dataset_fn(context, start_step))
      step = start_step
      while step < num_train_steps:
        stop = replanner.next_check(step, num_train_steps) if replanner else num_train_steps
        controller.train(steps=stop, checkpoint_at_completion=False)
        step = int(trainer.optimizer.iterations.numpy())
        if replanner and step < num_train_steps:
          num_train_steps = replanner.replan(step, num_train_steps)
          set_num_train_steps(num_train_steps)
    end_step = int(trainer.optimizer.iterations.numpy())
    _log_trained(trainer, start_step, end_step)
  train_seconds = time.time() - started
  last_loop = dict(trainer.last_output)
  last_loop_rate = last_loop.pop("examples_per_second", None)
  return {
      "steps": end_step - start_step,
      "start_step": start_step,
      "end_step": end_step,
      "num_train_steps": num_train_steps,
      "train_seconds": train_seconds,
      **last_loop,
      # The run's rate (tracing and checkpoints included), as the summary line gives it.
      "examples_per_second": (end_step - start_step) * trainer.global_batch_size / train_seconds,
      "loss_steps": list(trainer.loss_steps),
      "last_loop_examples_per_second": last_loop_rate,
  }
