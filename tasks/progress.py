"""Progress of long work for a person: a bar on a terminal, plain log lines in a file or CI.

A bar redrawn in place is what a person at a terminal reads at a glance (Keras' `Progbar`, which
`fit` and `predict` draw). Written to a file or a CI log, the same bar is a run-on line of
carriage returns, so there the progress is a log line at most every `interval` seconds and at the
end, each printed once: what was done of the known total, the rate, elapsed time and an ETA.
"""

import sys
import time

from absl import logging
import tf_keras

# Seconds between two log lines when the output is not a terminal.
LOG_INTERVAL_SECONDS = 30.0


def format_seconds(seconds):
  """e.g. "42 s", "3 min 05 s", "1 h 02 min"."""
  seconds = int(round(seconds))
  if seconds < 60:
    return f"{seconds} s"
  if seconds < 3600:
    return f"{seconds // 60} min {seconds % 60:02d} s"
  return f"{seconds // 3600} h {seconds % 3600 // 60:02d} min"


class Progress:
  """Counts `unit`s done of `total` and shows it: a bar on a terminal, else log lines.

  Args:
    what: what is being done, e.g. "predicting" (starts each log line).
    total: how many units the work has (int), or None when unknown (no percentage or ETA).
    unit: the unit's name, plural, e.g. "windows".
    interactive: draw a bar (default: whether stdout is a terminal).
    interval: seconds between log lines when not interactive.
    clock: a function returning seconds (time.monotonic; tests pass their own).
  """

  def __init__(self, what, total, unit, interactive=None, interval=LOG_INTERVAL_SECONDS,
               clock=time.monotonic):
    self.what, self.total, self.unit = what, total, unit
    self.done = 0
    self._clock = clock
    self._started = clock()
    self._last_line = self._started
    self._logged_done = None  # `done` at the last log line
    self._interval = interval
    interactive = sys.stdout.isatty() if interactive is None else interactive
    self._bar = tf_keras.utils.Progbar(total, unit_name=unit.rstrip("s")) if interactive else None

  def line(self):
    """The progress as one line, e.g. "predicting: 5,000 of 10,833 windows (46 %), 120 windows/s,
    42 s elapsed, ETA 49 s"."""
    elapsed = self._clock() - self._started
    rate = self.done / elapsed if elapsed > 0 else 0.0
    parts = [f"{self.what}: {self.done:,}" + (f" of {self.total:,}" if self.total else "")
             + f" {self.unit}" + (f" ({100 * self.done / self.total:.0f} %)" if self.total else ""),
             f"{rate:,.0f} {self.unit}/s", f"{format_seconds(elapsed)} elapsed"]
    if self.total and rate > 0 and self.done < self.total:
      parts.append(f"ETA {format_seconds((self.total - self.done) / rate)}")
    return ", ".join(parts)

  def update(self, count):
    """Adds `count` units done; shows the progress when it is time to."""
    self.done += count
    if self._bar is not None:
      self._bar.update(self.done)
    elif self._clock() - self._last_line >= self._interval:
      self._log()

  def _log(self):
    self._last_line, self._logged_done = self._clock(), self.done
    logging.info("%s", self.line())

  def finish(self):
    """Shows the final count (once), and returns it as a line."""
    line = self.line()
    if self._bar is not None:
      self._bar.update(self.done, finalize=True)
    elif self._logged_done != self.done:  # not the line just logged again
      self._log()
    return line
