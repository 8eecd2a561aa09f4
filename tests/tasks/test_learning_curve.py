"""The learning curve: dev EM/F1 every --eval_every_steps steps, in a CSV and TensorBoard, with
training time that leaves the scoring out and continues across a resume
(tasks/learning_curve.py)."""

import contextlib
import json
import os

import numpy as np
import pytest
import tensorflow as tf

from squad_qa.tasks import learning_curve
from squad_qa.tasks import train_config
from tests import testutil


class FakeClock:

  def __init__(self):
    self.now = 0.0

  def __call__(self):
    return self.now


class FakeScorer:
  """Scores 40.0 / 50.0, then +10 each time; scoring takes 7 s of the fake clock."""

  def __init__(self, clock, ids=("q1", "q2", "q3"), max_eval_examples=None):
    self.clock, self.calls, self.ids = clock, 0, list(ids)
    self.max_eval_examples, self.total_windows = max_eval_examples, len(ids) + 2

  def score(self, model):
    del model
    self.calls += 1
    self.clock.now += 7.0
    return {"exact_match": 30.0 + 10 * self.calls, "f1": 40.0 + 10 * self.calls}, None


class FakeStrategy:

  def scope(self):
    return contextlib.nullcontext()


def curve_config(tmp_path):
  return train_config.TrainConfig(eval_every_steps=10, model_dir=str(tmp_path))


def run(tmp_path, clock, start_step, steps, seconds_per_step=2.0, final_step=None):
  """Trains `steps` fake steps of batch 16 from `start_step`, the curve scoring every 10."""
  step = tf.Variable(start_step, dtype=tf.int64)
  scorer = FakeScorer(clock)
  curve = learning_curve.LearningCurve(curve_config(tmp_path), scorer, None, FakeStrategy(), step,
                                       clock=clock, final_step=final_step)
  curve.begin(start_step, 16)
  loops = []
  while int(step.numpy()) < start_step + steps:
    n = min(curve.loop_steps(int(step.numpy())), start_step + steps - int(step.numpy()))
    loops.append(n)
    clock.now += n * seconds_per_step
    step.assign_add(n)
    curve({"loss": 1.5})
  return loops, scorer, curve


@pytest.mark.parametrize("questions, max_eval_examples, warned", [(3, None, False),
                                                                  (1001, None, True),
                                                                  (1001, 1001, False)])
def test_a_curve_over_a_large_dev_file_is_warned_of(tmp_path, caplog, questions, max_eval_examples,
                                                    warned):
  """Every point scoring all of dev (10,570 questions of SQuAD v1.1: minutes each on a CPU) is
  said once when training starts, unless --max_eval_examples chose it."""
  scorer = FakeScorer(FakeClock(), [f"q{i}" for i in range(questions)], max_eval_examples)
  learning_curve.LearningCurve(curve_config(tmp_path), scorer, None, FakeStrategy(),
                               tf.Variable(0, dtype=tf.int64))
  expected = ("--eval_every_steps=10 scores all 1001 questions of the dev file at each point "
              "(1003 windows); --max_eval_examples=1000 scores the first 1000")
  assert (expected in caplog.text) == warned


def test_points_every_n_steps_in_the_csv_with_training_time_only(tmp_path):
  clock = FakeClock()
  loops, scorer, _ = run(tmp_path, clock, 0, 25)
  assert loops == [10, 10, 5] and scorer.calls == 2
  rows = learning_curve.read_rows(os.path.join(tmp_path, "learning_curve.csv"))
  assert rows == [{
      "step": 10,
      "examples": 160,
      "train_seconds": 20.0,
      "exact_match": 40.0,
      "f1": 50.0,
      "loss": 1.5
  }, {
      "step": 20,
      "examples": 320,
      "train_seconds": 40.0,
      "exact_match": 50.0,
      "f1": 60.0,
      "loss": 1.5
  }]  # 47 s of wall time, 7 of them scoring
  events = tf.io.gfile.glob(os.path.join(tmp_path, "eval", "events.out.tfevents.*"))
  assert events
  scalars = {}
  for path in events:
    for event in tf.compat.v1.train.summary_iterator(path):
      for value in event.summary.value:
        scalars[(value.tag, event.step)] = float(tf.make_ndarray(value.tensor))
  assert scalars == {
      ("eval/exact_match", 10): 40.0,
      ("eval/f1", 10): 50.0,
      ("eval/exact_match", 20): 50.0,
      ("eval/f1", 20): 60.0
  }


@pytest.mark.parametrize("final_step", [25, 20])
def test_the_last_point_is_the_final_score_not_a_second_scoring(tmp_path, final_step):
  """A final evaluation follows training: the last step is not scored during training (on or off
  the every-10 grid); its point is the final score, at the training time the last step ended."""
  clock = FakeClock()
  _, scorer, curve = run(tmp_path, clock, 0, final_step, final_step=final_step)
  assert scorer.calls == (2 if final_step == 25 else 1)
  clock.now += 30.0  # the final evaluation's time is not training time
  curve.add_final_score({"exact_match": 71.0, "f1": 80.5})
  rows = learning_curve.read_rows(os.path.join(tmp_path, "learning_curve.csv"))
  assert rows[-1] == {
      "step": final_step,
      "examples": 16 * final_step,
      "train_seconds": 2.0 * final_step,
      "exact_match": 71.0,
      "f1": 80.5,
      "loss": 1.5
  }
  assert [r["step"] for r in rows
         ] == [10, 20, 25][:len(rows)] and len(rows) == final_step // 10 + (final_step % 10 > 0)
  curve.add_final_score({"exact_match": 0.0, "f1": 0.0})  # written once
  assert len(learning_curve.read_rows(os.path.join(tmp_path, "learning_curve.csv"))) == len(rows)


def test_a_resume_continues_the_time_axis_from_the_last_row(tmp_path):
  clock = FakeClock()
  run(tmp_path, clock, 0, 20)
  run(tmp_path, clock, 20, 10, seconds_per_step=3.0)
  rows = learning_curve.read_rows(os.path.join(tmp_path, "learning_curve.csv"))
  assert [(r["step"], r["train_seconds"]) for r in rows] == [(10, 20.0), (20, 40.0), (30, 70.0)]


def test_a_resume_that_scores_other_questions_is_warned_of(tmp_path, caplog):
  """Points scored on other questions than the run resumed scored (its train_config.json's
  --max_eval_examples or --predict_file) are not comparable: said once, when the curve begins."""
  run(tmp_path, FakeClock(), 0, 20)
  (tmp_path / "train_config.json").write_text(json.dumps({"max_eval_examples": None}))
  run(tmp_path, FakeClock(), 20, 10)  # the same questions: nothing said
  assert "the curve compares" not in caplog.text
  (tmp_path / "train_config.json").write_text(json.dumps({"max_eval_examples": 100}))
  run(tmp_path, FakeClock(), 30, 10)
  assert caplog.text.count("the curve compares") == 1
  assert ("learning_curve.csv: the points up to step 30 scored with --max_eval_examples=100, the "
          "next ones with --max_eval_examples=None: the curve compares scores of other questions"
          in caplog.text)


def test_other_workers_only_end_their_loops_on_the_same_steps(tmp_path):
  step = tf.Variable(0, dtype=tf.int64)
  scorer = FakeScorer(FakeClock())
  curve = learning_curve.LearningCurve(curve_config(tmp_path), scorer, None, FakeStrategy(), step,
                                       score=False)
  curve.begin(0, 16)
  assert curve.loop_steps(3) == 7
  step.assign(10)
  curve({"loss": 1.0})
  assert scorer.calls == 0 and not os.path.exists(os.path.join(tmp_path, "learning_curve.csv"))


@pytest.mark.slow
def test_train_py_writes_the_curve_and_its_last_point_is_the_final_score(tmp_path):
  """train.py --eval_every_steps=3 on a tiny float32 model, 6 steps, 6 dev questions of several
  lengths: two points, and the one at the last step scores what the final evaluation scores (the
  same float32 weights on the same questions); run again with that row unscored (a run stopped in
  its final prediction), it trains nothing and scores it."""
  records_dir = testutil.make_train_records(tmp_path, 40, num_shards=None, lengths=(128, 64, 32),
                                            dev_questions=30)
  dev_file, model_dir = tmp_path / "dev.json", tmp_path / "model"
  args = ("train.py", f"--records_dir={records_dir}", f"--model_dir={model_dir}",
          f"--bert_config_file={testutil.write_tiny_config(tmp_path / 'bert_config.json')}",
          "--mixed_precision_dtype=float32", "--max_steps=6", "--train_batch_size=8",
          "--learning_rate=1e-3", "--eval_every_steps=3", "--max_eval_examples=6",
          f"--predict_file={dev_file}")
  _, log = testutil.run_cli(*args)
  rows = learning_curve.read_rows(os.path.join(model_dir, "learning_curve.csv"))
  assert [(r["step"], r["examples"]) for r in rows] == [(3, 24), (6, 48)]
  assert 0 < rows[0]["train_seconds"] < rows[1]["train_seconds"]
  with open(model_dir / "eval_results.json") as f:
    final = json.load(f)
  assert final["num_questions"] == 6
  # The run's training time and rate leave the scoring at step 3 out, as the curve does.
  with open(model_dir / "train_results.json") as f:
    trained = json.load(f)
  assert trained["scoring_seconds"] > 0
  assert trained["examples_per_second"] == pytest.approx(6 * 8 / trained["train_seconds"])
  assert (rows[1]["exact_match"], rows[1]["f1"]) == (round(final["exact_match"],
                                                           2), round(final["f1"], 2))
  assert "dev at step 3 (" in log and "on 6 questions" in log
  assert "on 6 questions (the final score)" in log
  assert "eval_results.json, learning_curve.csv, TensorBoard logs" in log
  # A run stopped in its final prediction leaves the last row unscored: the same command trains
  # nothing, predicts, and scores it.
  path = os.path.join(model_dir, "learning_curve.csv")
  with open(path, encoding="utf-8") as f:
    lines = f.read().splitlines()
  step, examples, seconds, _, _, loss = lines[-1].split(",")
  with open(path, "w", encoding="utf-8") as f:
    f.write("\n".join(lines[:-1] + [f"{step},{examples},{seconds},nan,nan,{loss}"]) + "\n")
  _, log = testutil.run_cli(*args)
  assert learning_curve.read_rows(path) == rows
  assert "already trained 6 of 6 steps" in log and "(the final score)" in log


def test_points_past_the_resumed_checkpoint_are_replaced_not_doubled(tmp_path):
  """A killed run leaves points past its last checkpoint: the run resuming there (or starting
  over without one) trains those steps again and writes their points once."""
  clock = FakeClock()
  run(tmp_path, clock, 0, 30)  # points at 10, 20, 30; say the last checkpoint was at step 20
  path = os.path.join(tmp_path, "learning_curve.csv")
  run(tmp_path, FakeClock(), 20, 20)  # resumed at 20: 30 and 40 scored anew
  assert [r["step"] for r in learning_curve.read_rows(path)] == [10, 20, 30, 40]
  run(tmp_path, FakeClock(), 0, 10)  # no checkpoint: started over
  rows = learning_curve.read_rows(path)
  assert [r["step"] for r in rows] == [10] and rows[0]["examples"] == 160
  with open(path, encoding="utf-8") as f:
    assert f.read().splitlines()[1].startswith("10,160,")  # ints written as ints


class Terminated(Exception):
  """What a SIGTERM raises in the scoring."""


class StoppedScorer(FakeScorer):
  """A FakeScorer whose scoring is stopped by a SIGTERM."""

  def score(self, model):
    raise Terminated()


def test_a_run_stopped_while_scoring_leaves_the_point_unscored_for_the_resume(tmp_path):
  """A SIGTERM in the scoring at step 20 (ckpt-20 saved): its row holds step 20's training time
  (3 s a step, the scoring at 10 left out) and loss with nan scores; the run resuming at 20
  scores it before training, keeping them, and its later points continue the stopped run's
  time."""
  path = os.path.join(tmp_path, "learning_curve.csv")
  clock, step = FakeClock(), tf.Variable(0, dtype=tf.int64)
  curve = learning_curve.LearningCurve(curve_config(tmp_path), FakeScorer(clock), None,
                                       FakeStrategy(), step, clock=clock)
  curve.begin(0, 16)
  for loss in (2.5, 2.0):
    clock.now += 10 * 3.0
    step.assign_add(10)
    curve.scorer = StoppedScorer(clock) if loss == 2.0 else curve.scorer
    with contextlib.ExitStack() as stack:
      if loss == 2.0:
        stack.enter_context(pytest.raises(Terminated))
      curve({"loss": loss})
  stopped = learning_curve.read_rows(path)
  assert [(r["step"], r["train_seconds"], r["loss"]) for r in stopped] == [(10, 30.0, 2.5),
                                                                           (20, 60.0, 2.0)]
  assert not learning_curve.is_unscored(stopped[0]) and learning_curve.is_unscored(stopped[1])
  _, scorer, _ = run(tmp_path, FakeClock(), 20, 10)  # 2 s a step from here
  rows = learning_curve.read_rows(path)
  assert [(r["step"], r["train_seconds"], r["loss"], r["f1"]) for r in rows] == [
      (10, 30.0, 2.5, 50.0), (20, 60.0, 2.0, 50.0), (30, 80.0, 1.5, 60.0)
  ] and scorer.calls == 2


def test_a_resumed_step_whose_point_is_missing_is_scored_first(tmp_path):
  """A run of an older version, which wrote a point's row once scored, stopped in the scoring at
  step 20 (ckpt-20 saved) without its row: the run resuming there scores it before training
  (its time as of the last row, its loss unknown: nan), then goes on every 10 steps."""
  run(tmp_path, FakeClock(), 0, 15)  # the point at 10; the run stopped in step 20's scoring
  _, scorer, _ = run(tmp_path, FakeClock(), 20, 10)
  rows = learning_curve.read_rows(os.path.join(tmp_path, "learning_curve.csv"))
  assert [r["step"] for r in rows] == [10, 20, 30] and scorer.calls == 2
  assert np.isnan(rows[1]["loss"]) and rows[2]["loss"] == 1.5
  assert rows[1]["train_seconds"] == rows[0]["train_seconds"]  # the clock as of the last point
  _, scorer, _ = run(tmp_path, FakeClock(), 30, 10)  # its point is there: not scored again
  assert scorer.calls == 1


def test_a_run_stopped_in_its_final_prediction_gets_its_final_point_on_the_rerun(tmp_path):
  """Training reached step 25 (the last) and the run was stopped while predicting: the same
  command trains nothing and predicts; its score is the point at 25, with the stopped run's time
  and loss, once."""
  path = os.path.join(tmp_path, "learning_curve.csv")
  run(tmp_path, FakeClock(), 0, 25, final_step=25)  # points at 10 and 20; no final score

  def rerun(results):
    curve = learning_curve.LearningCurve(curve_config(tmp_path), FakeScorer(FakeClock()), None,
                                         FakeStrategy(), tf.Variable(25, dtype=tf.int64),
                                         final_step=25)
    curve.begin(25, 16)  # as train.py calls it when nothing trains
    curve.add_final_score(results)
    return learning_curve.read_rows(path)

  assert learning_curve.is_unscored(learning_curve.read_rows(path)[-1])
  rows = rerun({"exact_match": 71.0, "f1": 80.5})
  assert [r["step"] for r in rows] == [10, 20, 25]
  # train_seconds: 25 steps of 2 s, as the stopped run wrote them with its loss.
  assert rows[2] == {
      "step": 25,
      "examples": 400,
      "train_seconds": 50.0,
      "exact_match": 71.0,
      "f1": 80.5,
      "loss": 1.5
  }
  assert [r["f1"] for r in rerun({"exact_match": 1.0, "f1": 1.0})] == [50.0, 60.0, 80.5]
