"""The learning curve: dev EM/F1 every `eval_every_steps` steps while training.

The chief scores the model in its training precision on the first `max_eval_examples` dev
questions and writes each point to TensorBoard (`<model_dir>/eval`) and as a row of
`<model_dir>/learning_curve.csv`:

  step,examples,train_seconds,exact_match,f1,loss

`train_seconds` leaves the scoring out and continues across resumes from the file's last row.
When train.py scores dev after training, that final score is the last point (scored once).

A point's row is written with its step, time and loss before it is scored, its exact_match and f1
nan until then: a run stopped while scoring (a SIGTERM) leaves that row, and the run resuming at
its step scores it (the final point: when the same command predicts again), keeping the stopped
run's time and loss.
"""

import math

import contextlib
import csv
import os
import time

from absl import logging
import tensorflow as tf

from squad_qa.base import artifacts
from squad_qa.base import progress as progress_lib

CSV_FIELDS = ("step", "examples", "train_seconds", "exact_match", "f1", "loss")
# Dev questions a learning-curve point scores without a word (the demo's --max_eval_examples).
MANY_QUESTIONS = 1000

INT_FIELDS = ("step", "examples")  # read back as floats (`read_rows`), written as ints
# The settings that choose the questions a point scores (a resume that changes them is warned of).
SCORED_WITH = ("predict_file", "max_eval_examples")


def _csv_row(row):
  """`row` (a dict of CSV_FIELDS) as written: INT_FIELDS as ints."""
  return {k: int(v) if k in INT_FIELDS else v for k, v in row.items()}


def _write_rows(path, rows):
  """Writes learning_curve.csv with `rows` (dicts of CSV_FIELDS) in place of its rows, via a
  temporary file (a kill leaves the old file or the new one)."""
  with open(path + ".tmp", "w", encoding="utf-8", newline="") as f:
    writer = csv.DictWriter(f, CSV_FIELDS)
    writer.writeheader()
    for row in rows:
      writer.writerow(_csv_row(row))
  os.replace(path + ".tmp", path)


def is_unscored(row):
  """Whether a row of `read_rows` is a point not scored yet (its f1 nan)."""
  return math.isnan(row["f1"])


def read_rows(path):
  """The rows of a learning_curve.csv as dicts of floats ([] when there is no file); an unscored
  point's exact_match and f1 are nan."""
  if not os.path.exists(path):
    return []
  with open(path, encoding="utf-8", newline="") as f:
    return [{k: float(v) for k, v in row.items()} for row in csv.DictReader(f)]


class LearningCurve:
  """An orbit train action that scores the model every `config.eval_every_steps` (> 0) steps.

  Args:
    config: the `tasks.train_config.TrainConfig` (eval_every_steps, model_dir).
    scorer: a `tasks.evaluation.DevScorer`.
    model, strategy: the model being trained and its tf.distribute strategy.
    global_step: the optimizer's `iterations` variable.
    score: whether to score (the chief); other workers only end their loops on the same steps.
    clock: a function returning seconds.
    final_step: the step whose point `add_final_score` writes (None: no final evaluation).
  """

  def __init__(self, config, scorer, model, strategy, global_step, score=True, clock=time.monotonic,
               final_step=None):
    model_dir = config.model_dir
    self.every_steps = config.eval_every_steps
    self.score = score
    self.scorer, self.model, self.strategy = scorer, model, strategy
    self.global_step = global_step
    self.global_batch_size = None  # set by `begin`
    self.path = os.path.join(model_dir, artifacts.LEARNING_CURVE_FILE)
    self.summary_dir = os.path.join(model_dir, "eval")
    self._clock = clock
    self._started = None
    self._scoring_seconds = 0.0
    self._offset = 0.0  # training seconds of earlier runs (the file's last row)
    self.final_step = final_step
    self._final = None  # step of the final point, once training reached it (its row unscored)
    self._model_dir = model_dir
    self._scored_with = {name: getattr(config, name) for name in SCORED_WITH}
    # Entered around a scoring: the trainer's, which lets a SIGTERM stop it (`trainer`).
    self.work_context = contextlib.nullcontext
    if score and scorer.max_eval_examples is None and len(scorer.ids) > MANY_QUESTIONS:
      logging.warning(
          "--eval_every_steps=%d scores all %d questions of the dev file at each point (%d "
          "windows); --max_eval_examples=%d scores the first %d", self.every_steps, len(scorer.ids),
          scorer.total_windows, MANY_QUESTIONS, MANY_QUESTIONS)

  def begin(self, start_step, global_batch_size):
    """Starts the training clock at global step `start_step`; `global_batch_size` (features per
    optimizer step) gives the examples column."""
    self.global_batch_size = global_batch_size
    found = read_rows(self.path)
    rows = [r for r in found if r["step"] <= start_step]
    if self.score and len(rows) < len(found):  # points past the checkpoint resumed: trained again
      _write_rows(self.path, rows)
    self._offset = rows[-1]["train_seconds"] if rows else 0.0
    if self.score and rows:
      self._warn_if_scored_otherwise(int(rows[-1]["step"]))
    here = [r for r in rows if r["step"] == start_step]
    is_point = self.score and start_step and (start_step == self.final_step or
                                              not start_step % self.every_steps)
    if is_point and not here:
      # Its run stopped before writing the row (an older version wrote it once scored): the time
      # as of the last row, the loss unknown.
      self._write_row(start_step, self._offset, float("nan"))
    if is_point and (not here or is_unscored(here[0])):
      if start_step == self.final_step:
        # Already trained to the last step (nothing trains; train.py begins the curve itself) by
        # a run stopped in its final prediction: this run's final score is the point.
        self._final = start_step
      else:
        # The run that saved this checkpoint stopped while scoring it (a SIGTERM): its point now,
        # from the restored weights.
        self._add_score(start_step, self._score(), " (scored on resuming)")
    self._started = self._clock()

  def _warn_if_scored_otherwise(self, last_step):
    """Warns when the points up to `last_step` (written by the run resumed) scored other questions
    than this run will: its train_config.json's SCORED_WITH settings against this run's."""
    earlier = artifacts.read_train_config(self._model_dir)
    changed = [n for n in SCORED_WITH if n in earlier and earlier[n] != self._scored_with[n]]
    if changed:
      logging.warning(
          "%s: the points up to step %d scored with %s, the next ones with %s: the curve "
          "compares scores of other questions", artifacts.LEARNING_CURVE_FILE, last_step,
          ", ".join(f"--{n}={earlier[n]}" for n in changed),
          ", ".join(f"--{n}={self._scored_with[n]}" for n in changed))

  @property
  def scoring_seconds(self):
    """Seconds this run spent scoring points between training loops (not those scored on
    resuming, before training starts)."""
    return self._scoring_seconds

  def set_num_train_steps(self, steps):
    """The final point is at `steps` (planned again), when there is one."""
    if self.final_step is not None:
      self.final_step = steps

  def loop_steps(self, step):
    """Steps to the next point from global step `step`."""
    return self.every_steps - step % self.every_steps

  def __call__(self, output):
    step = int(self.global_step.numpy())
    if not self.score or (step % self.every_steps and step != self.final_step):
      return
    train_seconds = self._offset + self._clock() - self._started - self._scoring_seconds
    self._write_row(step, train_seconds, float(output.get("loss", float("nan"))))
    if step == self.final_step:
      self._final = step
      return
    scoring_started = self._clock()
    results = self._score()
    self._scoring_seconds += self._clock() - scoring_started
    self._add_score(step, results, "")

  def _score(self):
    """The scorer's results for the model now, within `work_context`."""
    with self.work_context(), self.strategy.scope():
      results, _ = self.scorer.score(self.model)
    return results

  def add_final_score(self, results):
    """Writes the final evaluation's `results` as the point at `final_step`, if this run reached
    it."""
    if self._final is not None:
      self._add_score(self._final, results, " (the final score)")
      self._final = None

  def _write_row(self, step, train_seconds, loss):
    """Appends the unscored row of the point at `step` (exact_match and f1 nan)."""
    row = {
        "step": step,
        "examples": step * self.global_batch_size,
        "train_seconds": round(train_seconds, 1),
        "exact_match": float("nan"),
        "f1": float("nan"),
        "loss": round(loss, 4)
    }
    new_file = not os.path.exists(self.path)
    with open(self.path, "a", encoding="utf-8", newline="") as f:
      writer = csv.DictWriter(f, CSV_FIELDS)
      if new_file:
        writer.writeheader()
      writer.writerow(_csv_row(row))

  def _add_score(self, step, results, note):
    """Fills in the scores of the point at `step` (its row, written unscored) and writes them to
    TensorBoard."""
    rows = read_rows(self.path)
    row = next((r for r in reversed(rows) if r["step"] == step), None)
    if row is None:  # the file was removed meanwhile: the point's time and loss are lost
      row = dict.fromkeys(CSV_FIELDS, float("nan"))
      rows.append(row)
      row.update(step=step, examples=step * self.global_batch_size)
    exact = results.get("exact_match", results.get("exact"))
    row.update(exact_match=round(exact, 2), f1=round(results["f1"], 2))
    _write_rows(self.path, rows)
    with tf.summary.create_file_writer(self.summary_dir).as_default():
      tf.summary.scalar("eval/exact_match", exact, step=step)
      tf.summary.scalar("eval/f1", results["f1"], step=step)
    logging.info("dev at step %d (%s of training): EM %.2f / F1 %.2f on %d questions%s", step,
                 progress_lib.format_seconds(row["train_seconds"]), exact, results["f1"],
                 len(self.scorer.ids), note)
