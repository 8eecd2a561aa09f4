"""Training's progress lines: when they are due, what they say, and the loop lengths that let
them be printed (tasks/train_progress.py)."""

from absl import logging
import orbit
import tensorflow as tf

from squad_qa.base import console
from squad_qa.tasks import train_progress


class FakeClock:

  def __init__(self):
    self.now = 1000.0

  def __call__(self):
    return self.now


def make(monkeypatch, log_steps=0, fixed_loops=False, num_train_steps=400, steps_per_loop=100):
  """A TrainProgress on a fake clock whose log lines go to a list."""
  lines = []
  monkeypatch.setattr(logging, "info", lambda fmt, *args: lines.append(fmt % args))
  clock = FakeClock()
  step = tf.Variable(0, dtype=tf.int64)
  progress = train_progress.TrainProgress(step, num_train_steps, steps_per_epoch=200,
                                          log_steps=log_steps, steps_per_loop=steps_per_loop,
                                          fixed_loops=fixed_loops, interactive=False, clock=clock)
  return progress, step, clock, lines


def run_loop(progress, step, clock, seconds_per_step, output=None):
  """Runs the loop `progress` asks for at `seconds_per_step` (cut at the last step, as orbit's
  controller does); returns its length."""
  steps = min(progress.loop_steps(int(step.numpy())), progress.num_train_steps - int(step.numpy()))
  clock.now += steps * seconds_per_step
  step.assign_add(steps)
  progress(output or {"loss": 2.5, "learning_rate": 1e-4, "examples_per_second": 32.0})
  return steps


def test_loops_last_at_most_5_seconds_and_lines_come_every_30(monkeypatch):
  progress, step, clock, lines = make(monkeypatch)
  progress.begin(0, 16)
  clock.now += 20  # tracing: the first loop's time is mostly this
  lengths = [run_loop(progress, step, clock, 0.5) for _ in range(21)]
  # 1 step first (no rate yet); then 1 at the rate with tracing (1 step in 20.5 s, for 5 s);
  # then 5 s at 2 steps/s (10 steps) until the line's 30 s, whose last loop ends on it (9 steps:
  # 4.5 s after 46 s), and 6 loops of 10 per line from there on.
  assert lengths == [1, 1] + [10] * 5 + [9] + [10] * 13
  assert max(lengths[1:]) * 0.5 <= train_progress.MAX_LOOP_SECONDS
  assert lines == [
      "training steps 0..400, 16 features per step (2.00 epochs); progress about every 30 s",
      "training: 1 of 400 steps (0 %), epoch 0.01, loss 2.5000, learning rate 1.00e-04, "
      "32.0 examples/s, 20 s elapsed",
      "training: 61 of 400 steps (15 %), epoch 0.30, loss 2.5000, learning rate 1.00e-04, "
      "32.0 examples/s, 50 s elapsed, ETA 2 min 50 s",
      "training: 121 of 400 steps (30 %), epoch 0.60, loss 2.5000, learning rate 1.00e-04, "
      "32.0 examples/s, 1 min 20 s elapsed, ETA 2 min 20 s",
      "training: 181 of 400 steps (45 %), epoch 0.91, loss 2.5000, learning rate 1.00e-04, "
      "32.0 examples/s, 1 min 50 s elapsed, ETA 1 min 50 s"
  ]


def test_slow_steps_loop_one_at_a_time_and_the_end_shows_once(monkeypatch):
  progress, step, clock, lines = make(monkeypatch, num_train_steps=12, steps_per_loop=4)
  progress.begin(0, 8)
  lengths = []
  while int(step.numpy()) < 12:
    lengths.append(run_loop(progress, step, clock, 20.0))  # 20 s per step: a line every 2 steps
  # One step first (a Ctrl-C or SIGTERM waits for no more); then 5 s is a quarter step -> 1.
  assert lengths == [1] * 12
  assert [line.split(",")[0] for line in lines[1:]] == [
      "training: 1 of 12 steps (8 %)", "training: 3 of 12 steps (25 %)",
      "training: 5 of 12 steps (42 %)", "training: 7 of 12 steps (58 %)",
      "training: 9 of 12 steps (75 %)", "training: 11 of 12 steps (92 %)",
      "training: 12 of 12 steps (100 %)"
  ]


def test_log_steps_fixes_the_lines_to_its_multiples(monkeypatch):
  progress, step, clock, lines = make(monkeypatch, log_steps=25, num_train_steps=60)
  progress.begin(10, 8)  # a resumed run: step 10 of 60
  lengths = []
  while int(step.numpy()) < 60:
    if not lengths:
      step.assign(10)
    lengths.append(run_loop(progress, step, clock, 0.1))
  assert lengths == [15, 25, 10]  # to 25, to 50, to the end
  assert lines[0] == ("training steps 10..60, 8 features per step (0.25 epochs); progress every "
                      "25 steps")
  assert [line.split(",")[0] for line in lines[1:]] == [
      "training: 25 of 60 steps (42 %)", "training: 50 of 60 steps (83 %)",
      "training: 60 of 60 steps (100 %)"
  ]


def test_multi_worker_loops_never_follow_a_clock(monkeypatch):
  progress, step, clock, _ = make(monkeypatch, fixed_loops=True, steps_per_loop=40)
  progress.begin(0, 8)
  assert [run_loop(progress, step, clock, seconds) for seconds in (5.0, 0.01, 3.0)] == [40] * 3


def test_orbit_prints_no_line_of_its_own(monkeypatch, capsys):
  monkeypatch.delenv(console.VERBOSE_ENV, raising=False)
  # The private function this replaces exists in the installed orbit.
  assert callable(orbit.controller._log)  # pylint: disable=protected-access
  with train_progress.orbit_lines_to_debug():
    orbit.controller._log("train | step: 2 | output: {}")  # pylint: disable=protected-access
  assert capsys.readouterr().out == ""
  orbit.controller._log("restored")  # pylint: disable=protected-access
  assert capsys.readouterr().out == "restored\n"  # put back on the way out
  monkeypatch.setenv(console.VERBOSE_ENV, "1")
  with train_progress.orbit_lines_to_debug():
    orbit.controller._log("kept")  # pylint: disable=protected-access
  assert capsys.readouterr().out == "kept\n"
