"""Progress of long work: Keras' `Progbar` on a terminal; elsewhere (a file, CI) a log line at most
every `interval` seconds and at the end, with the count, rate, elapsed time and ETA.

Imports no TensorFlow until a bar is shown, so a command's Ctrl-C line may end the bar's line
(`end_bar_line`) without loading it.
"""

import dataclasses
import logging as logging_lib
import os
import sys
import time
from typing import Callable, Optional

from absl import logging

LOG_INTERVAL_SECONDS = 30.0


def seconds_since_process_start(stat_file="/proc/self/stat", uptime_file="/proc/uptime"):
  """Seconds since this process started (Linux: its start time in /proc/self/stat against the
  uptime, both since boot, at the kernel's clock-tick resolution), so that a time budget counts
  the interpreter's and TensorFlow's start-up too; 0.0 where those files are unreadable."""
  try:
    with open(stat_file, encoding="ascii") as f:
      fields = f.read().rpartition(")")[2].split()  # after "pid (name)", which may hold spaces
    with open(uptime_file, encoding="ascii") as f:
      uptime = float(f.read().split()[0])
    started = int(fields[19]) / os.sysconf("SC_CLK_TCK")  # field 22, starttime
  except (OSError, ValueError, IndexError):
    return 0.0
  return max(0.0, uptime - started)


def format_seconds(seconds):
  """e.g. "42 s", "3 min 05 s", "1 h 02 min"."""
  seconds = int(round(seconds))
  if seconds < 60:
    return f"{seconds} s"
  if seconds < 3600:
    return f"{seconds // 60} min {seconds % 60:02d} s"
  return f"{seconds // 3600} h {seconds % 3600 // 60:02d} min"


class _EndBarLine(logging_lib.Filter):
  """A filter on absl's handler, after the console's own (base/console.py): a line it prints,
  TensorFlow's too, starts on a line of its own when a progress bar left its line open on the
  terminal (stdout and stderr share it; the bar redraws below). A line the handler drops ends
  nothing."""
  line_open = False

  def filter(self, record):
    end_bar_line()
    return True


def end_bar_line():
  """Ends the line a progress bar left open on the terminal, if it did; for lines printed on stderr
  outside logging (a command's Ctrl-C or SIGTERM line)."""
  if _EndBarLine.line_open:
    _EndBarLine.line_open = False
    sys.stdout.write("\n")
    sys.stdout.flush()


def _end_bar_line_before_logs():
  handler = logging.get_absl_handler()
  if not any(isinstance(f, _EndBarLine) for f in handler.filters):
    handler.addFilter(_EndBarLine())


@dataclasses.dataclass(frozen=True)
class Display:
  """Where progress shows: a bar when `interactive` (None: stdout is a terminal), else a log line
  every `interval` seconds (None: only when `update` is told to, and at the end); `clock` gives
  seconds."""
  interactive: Optional[bool] = None
  interval: Optional[float] = LOG_INTERVAL_SECONDS
  clock: Callable[[], float] = time.monotonic


class Progress:
  """Counts `unit`s (plural name, e.g. "windows") done of `total` (None: unknown) in the work
  `what` (e.g. "predicting") and shows it as `display` says.

  `initial` units were done before this process (a resume; not in the rate); `show_rate` adds
  "<rate> <unit>/s"; `rate_after_first_update` leaves out the time before it (tracing).
  """

  def __init__(self, what, total, unit, display=Display(), initial=0, show_rate=True,
               rate_after_first_update=False):
    clock = display.clock
    self.what, self.total, self.unit = what, total, unit
    self.done = initial
    self.initial = initial
    self.updates = 0  # calls of `update`
    self.figures = {}  # name -> (value, text) of the last update
    self._clock = clock
    self._started = clock()
    self._rate_since = (self._started, initial)  # (time, done) the rate is measured from
    self._rate_after_first_update = rate_after_first_update
    self._last_line = self._started
    self._logged_done = None  # `done` at the last log line
    self._interval = display.interval
    self._show_rate = show_rate
    interactive = sys.stdout.isatty() if display.interactive is None else display.interactive
    self._bar = None
    if interactive:
      import tf_keras  # pylint: disable=g-import-not-at-top
      self._bar = tf_keras.utils.Progbar(None if total is None else total - initial,
                                         unit_name=unit.rstrip("s"))
      _end_bar_line_before_logs()

  def set_total(self, total):
    """Counts to `total` units from now on (the work was planned again)."""
    self.total = total
    if self._bar is not None:
      self._bar.target = total - self.initial

  @property
  def elapsed(self):
    """Seconds since this object was made."""
    return self._clock() - self._started

  def rate(self):
    """Units per second (0.0 before any can be measured)."""
    since, done_then = self._rate_since
    seconds = self._clock() - since
    return (self.done - done_then) / seconds if seconds > 0 else 0.0

  def line(self):
    """The progress as one line, e.g. "predicting: 5,000 of 10,833 windows (46 %), 120 windows/s,
    42 s elapsed, ETA 49 s"."""
    rate = self.rate()
    parts = [
        f"{self.what}: {self.done:,}" + (f" of {self.total:,}" if self.total else "") +
        f" {self.unit}" + (f" ({100 * self.done / self.total:.0f} %)" if self.total else "")
    ]
    parts += [text for _, text in self.figures.values()]
    if self._show_rate:
      parts.append(f"{rate:,.0f} {self.unit}/s")
    parts.append(f"{format_seconds(self.elapsed)} elapsed")
    if self.total and rate > 0 and self.done < self.total:
      parts.append(f"ETA {format_seconds((self.total - self.done) / rate)}")
    return ", ".join(parts)

  def update(self, count, figures=None, log=None):
    """Adds `count` units done and shows the progress when it is time to.

    Args:
      count: units done since the last update.
      figures: {name: (number, text)} shown until the next update (the bar shows the number, a
        log line the text).
      log: True logs a line now, False not, None when `interval` seconds have passed.
    """
    self.done += count
    self.updates += 1
    if self._rate_after_first_update and self.updates == 1:
      self._rate_since = (self._clock(), self.done)
    if figures is not None:
      self.figures = dict(figures)
    if self._bar is not None:
      # Figures are the latest values (a loss, a learning rate), not means over the run.
      self._bar.stateful_metrics.update(self.figures)
      self._bar.update(self.done - self.initial,
                       values=[(name, value) for name, (value, _) in self.figures.items()])
      _EndBarLine.line_open = self.total is None or self.done < self.total
    elif log or (log is None and self._interval is not None and
                 self._clock() - self._last_line >= self._interval):
      self._log()

  def seconds_since_line(self):
    """Seconds since the last log line (or since the start)."""
    return self._clock() - self._last_line

  def _log(self):
    self._last_line, self._logged_done = self._clock(), self.done
    logging.info("%s", self.line())

  def finish(self):
    """Shows the final count (once), and returns it as a line."""
    line = self.line()
    if self._bar is not None:
      if self.total is None or self.done < self.total:  # a bar at its target has ended itself
        self._bar.update(self.done - self.initial, finalize=True)
      _EndBarLine.line_open = False
    elif self._logged_done != self.done:  # not the line just logged again
      self._log()
    return line
