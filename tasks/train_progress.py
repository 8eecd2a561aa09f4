"""Training's progress line, every ~30 s of work or every `log_steps` steps, e.g.

  training: 80 of 320 steps (25 %), epoch 0.29, loss 4.2086, learning rate 1.67e-04,
  16.1 examples/s, 1 min 20 s elapsed, ETA 4 min 00 s

(a Keras progress bar on a terminal). Python only runs between orbit's compiled loops, so loops
are cut to end where a line is due, and after at most MAX_LOOP_SECONDS of steps; on a multi-worker
cluster, whose loops must have one length, at multiples of `log_steps` (default `steps_per_loop`).
`orbit_lines_to_debug` moves orbit's own per-loop lines to absl's debug level.
"""

import contextlib
import math

from absl import logging
import orbit.controller

from squad_qa.base import console
from squad_qa.base import progress as progress_lib

# Steps of the first loop, before any rate is known: one, so the first line shows early and Ctrl-C
# or a SIGTERM (acted on between loops) waits for one step however slow (float16 on a CPU: minutes).
FIRST_LOOP_STEPS = 1
# Seconds of steps in one loop at most, once the rate is known. A SIGTERM is acted on between
# loops (its checkpoint, then exit), and a preempted cloud VM is killed about 30 s after its
# SIGTERM (Compute Engine's shutdown period), so a loop must leave time for the save. The cost is
# a few milliseconds of Python per loop.
MAX_LOOP_SECONDS = 5.0


class TrainProgress:
  """An orbit train action that shows training's progress, and the loop length that lets it.

  Args:
    global_step: the optimizer's `iterations` variable.
    num_train_steps: the global step training ends at.
    steps_per_epoch: optimizer steps in one epoch, for the epoch figure.
    log_steps: a line every this many steps (0: about every `interval` seconds).
    steps_per_loop: the most steps in one compiled loop.
    fixed_loops: multi-worker: loops end at multiples of `log_steps` (or `steps_per_loop`).
    show: whether to show anything (False on workers other than the chief).
    interval: seconds between lines without `log_steps`.
    **progress_options: `interactive`, `clock`: as `progress.Progress`'s.
  """

  def __init__(self, global_step, num_train_steps, steps_per_epoch, log_steps, steps_per_loop,
               fixed_loops=False, show=True, interval=progress_lib.LOG_INTERVAL_SECONDS,
               **progress_options):
    self.global_step = global_step
    self.num_train_steps = num_train_steps
    self.steps_per_epoch = steps_per_epoch
    self.log_steps = log_steps or (steps_per_loop if fixed_loops else 0)
    self.steps_per_loop = steps_per_loop
    self.show = show
    self.interval = interval
    self._progress_options = progress_options
    self.progress = None  # made by `begin`

  def begin(self, start_step, global_batch_size):
    """Starts counting at global step `start_step` and shows what will be trained
    (`global_batch_size` features per step) and how often progress shows."""
    options = {**self._progress_options, **({} if self.show else {"interactive": False})}
    self.progress = progress_lib.Progress("training", self.num_train_steps, "steps",
                                          progress_lib.Display(interval=None,
                                                               **options), initial=start_step,
                                          show_rate=False, rate_after_first_update=True)
    if not self.show:
      return
    every = (f"every {self.log_steps} steps"
             if self.log_steps else f"about every {progress_lib.format_seconds(self.interval)}")
    logging.info("training steps %d..%d, %d features per step (%.2f epochs); progress %s",
                 start_step, self.num_train_steps, global_batch_size,
                 (self.num_train_steps - start_step) / self.steps_per_epoch, every)

  def set_num_train_steps(self, steps):
    """Counts to `steps` (planned again) from now on."""
    self.num_train_steps = steps
    self.progress.set_total(steps)

  def loop_steps(self, step):
    """Steps of the next compiled loop from global step `step`: at most `steps_per_loop` and about
    MAX_LOOP_SECONDS, ending where the next progress line is due."""
    steps = self.steps_per_loop
    if self.log_steps:
      steps = min(steps, self.log_steps - step % self.log_steps)
    elif not self.progress.updates:
      steps = min(steps, FIRST_LOOP_STEPS)
    else:
      # After the first loop alone, the rate includes tracing: too low, so loops end early.
      rate = self.progress.rate() or ((self.progress.done - self.progress.initial) /
                                      max(self.progress.elapsed, 1e-9))
      if rate > 0:
        seconds_left = max(self.interval - self.progress.seconds_since_line(), 0.0)
        steps = min(steps, max(1, math.ceil(min(seconds_left, MAX_LOOP_SECONDS) * rate)))
    return max(1, steps)

  def figures(self, output):
    """The line's figures from a loop's output (tasks.trainer.QATrainer.train_loop_end)."""
    step = int(self.global_step.numpy())
    figures = {"epoch": (step / self.steps_per_epoch, f"epoch {step / self.steps_per_epoch:.2f}")}
    if "loss" in output:
      figures["loss"] = (output["loss"], f"loss {output['loss']:.4f}")
    if "learning_rate" in output:
      figures["learning_rate"] = (output["learning_rate"],
                                  f"learning rate {output['learning_rate']:.2e}")
    if output.get("examples_per_second"):
      rate = output["examples_per_second"]
      figures["examples/s"] = (rate, f"{rate:.1f} examples/s")
    return figures

  def __call__(self, output):
    """Counts the loop that just ended; shows a line when one is due (and at the last step)."""
    step = int(self.global_step.numpy())
    if self.log_steps:
      due = step % self.log_steps == 0
    else:  # the loop was cut to end near the interval: a little early is on time
      early = min(0.2 * self.interval, MAX_LOOP_SECONDS / 2)
      due = not self.progress.updates or self.progress.seconds_since_line() >= self.interval - early
    self.progress.update(step - self.progress.done, self.figures(output), log=due and self.show)
    if step >= self.num_train_steps and self.show:
      self.progress.finish()


@contextlib.contextmanager
def orbit_lines_to_debug():
  """Within: orbit's controller logs its lines at debug level instead of printing them (unless
  SQUAD_QA_VERBOSE is set).

  Replaces the private `orbit.controller._log` (BUILD.md lists it; orbit has no option for this);
  if orbit renames it, the lines show as before.
  """
  original = getattr(orbit.controller, "_log", None)
  if original is None or console.verbose_from_environment():
    yield
    return
  # pylint: disable-next=protected-access
  orbit.controller._log = lambda message: logging.vlog(1, "%s", message)
  try:
    yield
  finally:
    orbit.controller._log = original  # pylint: disable=protected-access
