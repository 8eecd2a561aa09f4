"""Progress lines a person reads at a glance: done of total, rate, elapsed, ETA, at an interval."""

import logging as std_logging
import os

from absl import logging

from squad_qa.base import progress as progress_lib
from squad_qa.preprocess import records
from tests import testutil


class FakeClock:

  def __init__(self):
    self.now = 100.0

  def __call__(self):
    return self.now


def test_log_lines_at_the_interval_and_once_at_the_end(monkeypatch):
  lines = []
  monkeypatch.setattr(logging, "info", lambda fmt, *args: lines.append(fmt % args))
  clock = FakeClock()
  progress = progress_lib.Progress(
      "predicting", 10_833, "windows",
      progress_lib.Display(interactive=False, interval=30, clock=clock))
  clock.now += 10
  progress.update(1_000)  # 10 s: not yet
  clock.now += 25
  progress.update(3_000)  # 35 s: a line
  clock.now += 5
  progress.update(1_000)  # 5 s after the line: not yet
  clock.now += 45
  progress.update(5_833)
  assert progress.finish() == ("predicting: 10,833 of 10,833 windows (100 %), 127 windows/s, "
                               "1 min 25 s elapsed")
  assert lines == [
      "predicting: 4,000 of 10,833 windows (37 %), 114 windows/s, 35 s elapsed, ETA 1 min 00 s",
      "predicting: 10,833 of 10,833 windows (100 %), 127 windows/s, 1 min 25 s elapsed"
  ]


def test_an_unknown_total_gives_counts_and_rate_only():
  clock = FakeClock()
  progress = progress_lib.Progress("reading", None, "records",
                                   progress_lib.Display(interactive=False, clock=clock))
  clock.now += 4
  progress.update(10)
  assert progress.line() == "reading: 10 records, 2 records/s, 4 s elapsed"
  lines = []
  progress._log = lambda: lines.append(progress.line())  # pylint: disable=protected-access
  progress.finish()  # the end is shown once, with nothing logged before
  assert lines == ["reading: 10 records, 2 records/s, 4 s elapsed"]


def test_format_seconds():
  assert [progress_lib.format_seconds(s) for s in (0.4, 59.6, 61, 3599, 3720)
         ] == ["0 s", "1 min 00 s", "1 min 01 s", "59 min 59 s", "1 h 02 min"]


def test_the_known_total_is_what_prediction_reads(tmp_path):
  dev = testutil.write_squad_slice(testutil.DEV_FILE, tmp_path / "dev.json", 40)
  testutil.run_cli("preprocess/make_records.py", f"--predict_file={dev}",
                   f"--vocab_file={testutil.vocab_file()}", "--max_seq_length=64",
                   "--doc_stride=32", "--max_query_length=16", f"--output_dir={tmp_path / 'r'}",
                   "--num_shards=2")
  meta = records.read_meta(str(tmp_path / "r"))
  paths = records.shard_paths(str(tmp_path / "r"), meta, records.EVAL_SPLIT)
  assert records.count_eval_windows(paths) == meta["splits"]["eval"]["num_features"]
  for limit in (1, 17):
    windows = sum(
        int(batch["example_index"].shape[0])
        for batch in records.eval_dataset(paths, 64, 8, max_examples=limit))
    assert records.count_eval_windows(paths, limit) == windows > 0


def test_a_log_line_never_runs_into_the_bar(capsys):
  """On a terminal the bar redraws its line without a newline; a line printed through absl's
  handler (stderr, the same terminal), TensorFlow's too, first ends it, so "examples/s:
  4.2590I1203 ... saved checkpoint" cannot happen; a line the console drops ends nothing."""
  from squad_qa.base import console  # noqa: F401  (a command's handler and filter)
  progress = progress_lib.Progress("training", 10, "steps", progress_lib.Display(interactive=True))
  progress.update(3)
  before = capsys.readouterr().out
  assert before and not before.endswith("\n")  # the bar's line is open
  std_logging.getLogger("tensorflow").info("a library's notice")  # dropped by the console
  assert capsys.readouterr().out == ""
  std_logging.getLogger("tensorflow").warning("a library's warning")
  assert capsys.readouterr().out == "\n"  # ended before the log line
  progress.update(1)
  capsys.readouterr()
  logging.warning("saved checkpoint ckpt-4")
  assert capsys.readouterr().out == "\n"
  logging.warning("a second line")
  assert capsys.readouterr().out == ""  # nothing open: no blank line
  progress.update(1)
  capsys.readouterr()
  progress_lib.end_bar_line()  # e.g. before the Ctrl-C line
  progress_lib.end_bar_line()
  assert capsys.readouterr().out == "\n"
  progress.update(5)
  progress.finish()
  assert capsys.readouterr().out.endswith("\n")  # a finished bar ends its line itself
  logging.warning("after the bar")
  assert capsys.readouterr().out == ""


def test_seconds_since_process_start(tmp_path):
  """A budget counts the command's start-up: the process's start (clock ticks since boot, field 22
  of /proc/self/stat, after a name that may hold spaces and parentheses) against the uptime."""
  tick = os.sysconf("SC_CLK_TCK")
  stat = tmp_path / "stat"
  fields = ["S"] + ["0"] * 18 + [str(100 * tick)] + ["0"] * 20  # fields 3..; 22 is the 20th
  stat.write_text("4242 (python (a) b) " + " ".join(fields))
  uptime = tmp_path / "uptime"
  uptime.write_text("104.50 200.00\n")
  assert progress_lib.seconds_since_process_start(str(stat), str(uptime)) == 4.5
  assert progress_lib.seconds_since_process_start(str(tmp_path / "none"), str(uptime)) == 0.0
  assert 0.0 < progress_lib.seconds_since_process_start() < 24 * 3600  # this process, on Linux
