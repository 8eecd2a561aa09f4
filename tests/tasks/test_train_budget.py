"""--train_budget: the plan's arithmetic, a planned run on a fake clock (steps, schedule end, the
plan saved and kept on resume, the same training as --max_steps), and the refusals' lines."""

import dataclasses
import json
import logging as std_logging
import shutil

import numpy as np
import pytest
import tensorflow as tf
import tf_keras
from absl import flags

from squad_qa import errors
from squad_qa.flags import command_line
from squad_qa.flags import settings
from squad_qa.model import bert_config as bert_config_lib
from squad_qa.model import span_model
from squad_qa.tasks import model_dir as model_dir_lib
from squad_qa.tasks import optimization
from squad_qa.tasks import question_answering
from squad_qa.tasks import train_and_evaluate
from squad_qa.tasks import train_budget
from squad_qa.tasks import train_config
from tests import testutil

BUDGET = 80


def test_the_plan_is_the_most_steps_that_fit():
  """2 s a step, 1 s a checkpoint (every 250 steps and at the end), 10 s a scoring (every 100
  steps, the final prediction replacing the one at the last step), 50 s already spent, 20 min:
  543 steps take 1086 + 3 + 6 x 10 = 1149 s of the 1150 left; 544 would take 1151."""
  costs = train_budget.Costs(step=2.0, save=1.0, scoring=10.0, elapsed=50.0)
  scored = train_budget.Schedule(eval_every_steps=100, do_predict=True, save_checkpoints_steps=250)
  assert train_budget.planned_steps(1200, costs, scored) == 543
  assert scored.seconds(543, costs) == 1149.0 and scored.seconds(544, costs) == 1151.0
  assert [scored.scorings(n) for n in (99, 100, 101, 200)] == [1, 1, 2, 2]
  unscored = train_budget.Schedule(eval_every_steps=0, do_predict=False, save_checkpoints_steps=250)
  assert train_budget.planned_steps(1200, costs, unscored) == 573  # 1146 + 3 s
  assert train_budget.planned_steps(50, costs, unscored) == 0
  assert train_budget.plan_line(1200, costs, scored, 543) == (
      "train_budget 20m: 2.00 s/step measured over 8 steps -> 543 steps (planned to end at 19 min "
      "59 s, scoring included: 6 scorings of ~10 s; start-up and measuring took 50 s)")


def test_a_budget_without_room_for_a_step_names_the_fix():
  """Scorings that fill the budget are said, with the flags that shrink them."""
  config = train_config.TrainConfig(train_budget=120, eval_every_steps=20,
                                    typed_flags=("train_budget", "eval_every_steps"))
  costs = train_budget.Costs(step=0.5, save=1.0, scoring=252.0, elapsed=35.0)
  with pytest.raises(errors.UsageError) as raised:
    train_budget.plan(config, costs, tf.distribute.get_strategy())
  assert str(raised.value) == (
      "--train_budget=2m leaves no time for a step: 35 s went to starting and measuring, a step "
      "takes 0.5 s and a scoring ~4 min 12 s; give a longer --train_budget, or score fewer "
      "questions (--max_eval_examples) or less often (--eval_every_steps)")


def test_a_final_prediction_on_another_model_is_planned_at_its_own_cost():
  """The same run as above with the final prediction on a float32 copy at 40 s instead of a
  10 s scoring: 528 steps take 1056 + 3 + 5 x 10 + 40 = 1149 s of the 1150 left."""
  costs = train_budget.Costs(step=2.0, save=1.0, scoring=10.0, elapsed=50.0, final=40.0)
  scored = train_budget.Schedule(eval_every_steps=100, do_predict=True, save_checkpoints_steps=250)
  assert train_budget.planned_steps(1200, costs, scored) == 528
  assert scored.seconds(528, costs) == 1149.0 and scored.seconds(529, costs) == 1151.0
  assert scored.seconds_behind(500, costs) == 2 * 1.0 + 5 * 10.0  # scorings during, not the final
  assert train_budget.plan_line(1200, costs, scored, 528).endswith(
      "scoring included: 6 scorings of ~10 s (the final prediction ~40 s); start-up and measuring "
      "took 50 s)")
  unpredicted = train_budget.Schedule(eval_every_steps=100, do_predict=False,
                                      save_checkpoints_steps=250)
  assert unpredicted.seconds(500, costs) == 1000 + 2 + 5 * 10.0


class FakeScorer:
  """A `DevScorer` of 4 batches of 8 windows, 32, 64, 64 and 128 tokens wide, one question a
  window; decoding takes 0.01 s a window on `clock`."""
  WIDTHS = (32, 64, 64, 128)

  def __init__(self, clock):
    self.clock, self.ids = clock, [str(i) for i in range(32)]

  def dataset(self):
    return tf.data.Dataset.from_tensor_slices(list(self.WIDTHS)).map(
        lambda width: {"input_word_ids": tf.zeros(tf.stack([8, width]), tf.int32)})

  def score_windows(self, windows):
    self.clock.now += 0.01 * len(windows)


def test_a_scoring_is_timed_on_its_traced_prediction_step(monkeypatch):
  """`evaluation.predict` on a fake clock: 5 s to trace the model's step (its first call), then
  1 ms per padded token. The probe's 3 batches (1,280 tokens) time 1.28 s once traced; the dev set's
  2,304 tokens then take 2.304 s and decoding its 32 questions 0.32 s: a scoring 2.624 s, the
  tracing 5 s. (A first pass timed as batches would count the tracing as their cost.)"""
  clock = Clock(0.0)
  traced = set()

  def predict(model, batches, what):
    assert what == "train_budget: timing a dev scoring"  # not the final prediction's "predicting"
    if model not in traced:
      traced.add(model)
      clock.now += 5.0
    clock.now += sum(int(tf.size(b["input_word_ids"])) for b in batches) * 1e-3
    return {i: [] for i in range(24)}

  monkeypatch.setattr(train_budget.evaluation, "predict", predict)
  scoring, tracing = train_budget._probe_scoring(  # pylint: disable=protected-access
      FakeScorer(clock), "model", tf.distribute.get_strategy(), clock)
  assert scoring == pytest.approx(2.304 + 0.32)
  assert tracing == pytest.approx(5.0)


def test_the_step_time_is_scaled_to_the_mean_padded_length():
  """Batches 8, 16, 24 and 32 tokens wide; the timed one (the second) is 16, the mean 20."""

  def dataset_fn(context, skip):
    del context, skip
    return tf.data.Dataset.range(6).map(
        lambda i: {"input_word_ids": tf.zeros(tf.stack([2, 8 * (i + 1)]), tf.int32)})

  widths = train_budget.padded_widths(dataset_fn, 4)
  assert widths == [8, 16, 24, 32]
  assert train_budget.width_ratio(widths, timed=1) == 1.25
  assert train_budget.width_ratio(widths, timed=2) == 1.0


def test_each_step_counts_at_its_padded_length():
  """Sampled steps 8, 16, 24 and 32 tokens wide (mean 20) at 2 s a step of 20 tokens: the first
  two take 0.4 + 0.8 of a mean step, the last two 1.2 + 1.6, steps after the sample 1 each; a run
  of 4 unscored steps 8 s, of 6 steps 12 s; 10 s fit 5 steps (the short ones first)."""
  costs = train_budget.Costs(step=2.0, widths=(8, 16, 24, 32))
  works = [costs.work(0, 2), costs.work(2, 4), costs.work(3, 6), costs.work(0, 0)]
  assert works == pytest.approx([1.2, 2.8, 3.6, 0.0])
  unscored = train_budget.Schedule(eval_every_steps=0, do_predict=False, save_checkpoints_steps=100)
  assert unscored.seconds(4, costs) == pytest.approx(8.0)
  assert unscored.seconds(6, costs) == pytest.approx(12.0)
  assert unscored.seconds(4, costs, done=2) == pytest.approx(5.6)
  assert train_budget.planned_steps(10.0, costs, unscored) == 5
  assert train_budget.planned_steps(2.5, costs, unscored) == 2  # 0.8 + 1.6 s; 3 steps: 4.8 s
  assert train_budget.planned_steps(1000.0, costs, unscored) == 500


def test_new_lengths_are_costed_where_the_run_first_meets_them():
  """The tracing step at 64 and 3 timed steps at 32, 64, 96: the first pass (10 s) compiled 32 and
  96, the second (8 s) nothing: 1 s a length. After them, 128 comes first at step 5 and 16 at 7."""
  widths = [64, 32, 64, 96, 32, 128, 96, 16, 128]
  assert train_budget.new_length_steps(widths, timed=3) == (5, 7)
  assert train_budget.compile_seconds(widths, 10.0, 8.0, timed=3) == 1.0
  assert train_budget.compile_seconds(widths, 8.0, 8.5, timed=3) == 0.0  # noise: not negative
  assert train_budget.compile_seconds([64] * 9, 10.0, 8.0, timed=3) == 0.0  # one length: none
  costs = train_budget.Costs(step=2.0, compile=1.0, new_lengths=(5, 7))
  assert [costs.compiling(n) for n in (5, 6, 7, 8, 100)] == [0.0, 1.0, 1.0, 2.0, 2.0]
  unscored = train_budget.Schedule(eval_every_steps=0, do_predict=False, save_checkpoints_steps=100)
  assert unscored.seconds(8, costs) == 8 * 2.0 + 2 * 1.0
  assert unscored.seconds(8, costs, done=6) == 2 * 2.0 + 1.0  # the length at step 5 is behind
  assert unscored.seconds_behind(6, costs) == 1.0
  assert train_budget.planned_steps(20.0, costs, unscored) == 9  # 18 + 2 s; 10 steps: 22 s
  assert train_budget.plan_line(20.0, costs, unscored, 9) == (
      "train_budget 20s: 2.00 s/step measured over 8 steps, 2 new padded lengths compiling ~1 s "
      "each -> 9 steps (planned to end at 20 s, no scoring; start-up and measuring took 0 s)")


class Clock:
  """A clock reading `now` (seconds), moved by the test."""

  def __init__(self, now):
    self.now = now

  def __call__(self):
    return self.now


def replanner(clock, budget=1200, eval_every_steps=100, warmup_proportion=0.1, steps=543):
  """The first test's plan (543 steps of 2 s planned at 50 s into 20 min), its training begun at
  `clock`'s time."""
  config = train_config.TrainConfig(train_budget=budget, eval_every_steps=eval_every_steps,
                                    save_checkpoints_steps=250)
  schedule = optimization.LinearWarmupDecay(5e-5, steps, warmup_proportion)
  costs = train_budget.Costs(step=2.0, save=1.0, scoring=10.0, elapsed=50.0)
  return train_budget.Replanner(config, costs, tf.distribute.get_strategy(), schedule, clock)


def test_a_plan_of_many_epochs_is_warned_of(caplog):
  train_budget.warn_of_many_epochs(600, 50, 10)  # 5 epochs: at the limit, said nothing
  assert not caplog.text
  train_budget.warn_of_many_epochs(36000, 1260, 10)
  assert ("train_budget 10h plans 126 epochs of the train records (1260 steps of 10 an epoch); "
          "SQuAD fine-tuning recipes take 2 to 3") in caplog.text


def test_a_slower_run_is_planned_again_to_end_in_the_budget(caplog):
  """The check after 2 x 543 // 8 = 134 steps: they took 2.5 s each, and a scoring (at step 100,
  10 s) is behind. From 395 s, 439 steps fit the 1200: 305 x 2.5 + 2 checkpoints + 4 scorings
  (200, 300, 400 and the final) = 804.5 s of the 805 left; 543 would end at 1,075 s over."""
  clock = Clock(50.0)
  replan = replanner(clock)
  assert [replan.next_check(s, 543) for s in (0, 133, 134, 135, 201, 536)
         ] == [134, 134, 201, 201, 268, 543]
  clock.now = 50.0 + 134 * 2.5 + 10.0
  caplog.set_level(std_logging.INFO)
  assert replan.replan(134, 543) == 439
  assert int(replan.learning_rate.num_train_steps.numpy()) == 439
  assert float(replan.learning_rate(439)) == 0.0 and float(replan.learning_rate(438)) > 0.0
  assert ("train_budget 20m: 439 steps instead of 543, planned again at step 134: 2.50 s/step so "
          "far against 2.00 measured (6 min 35 s since the start)") in caplog.text


def test_a_run_near_its_plan_keeps_it_and_a_faster_one_trains_longer():
  """At 2.02 s a step the run would end 9.9 s late, within 2 % of 20 min: the plan stays. At 1.5 s
  a step, from 261 s: 711 steps, 577 x 1.5 + 3 checkpoints + 7 scorings = 938.5 s of the 939 left.
  At 0.1 s a step, the most that keeps the warm-up (10 %) behind step 134: 1340."""
  clock = Clock(50.0)
  replan = replanner(clock)
  clock.now = 50.0 + 134 * 2.02 + 10.0
  assert replan.replan(134, 543) == 543
  clock.now = 50.0 + 134 * 1.5 + 10.0
  assert replan.replan(134, 543) == 711
  clock.now = 50.0 + 134 * 0.1 + 10.0
  assert replan.replan(134, 543) == 1340


def test_new_lengths_behind_a_check_are_not_read_as_slower_steps():
  """The first test's plan with 40 new lengths at 0.3 s each in its first 134 steps (12 s), so
  planned at 537 steps (12 s, 6 steps, fewer). At the check after step 134 the steps took their
  measured 2 s: the plan stays; without counting the lengths, it would read 2.09 s a step."""
  clock = Clock(50.0)
  replan = replanner(clock, steps=537)
  replan.costs = train_budget.Costs(step=2.0, save=1.0, scoring=10.0, elapsed=50.0, compile=0.3,
                                    new_lengths=tuple(range(1, 121, 3)))
  scored = train_budget.Schedule(eval_every_steps=100, do_predict=True, save_checkpoints_steps=250)
  assert train_budget.planned_steps(1200, replan.costs, scored) == 537
  clock.now = 50.0 + 134 * 2.0 + 10.0 + 40 * 0.3
  assert replan.replan(134, 537) == 537
  replan.costs = dataclasses.replace(replan.costs, compile=0.0)
  assert replan.replan(134, 537) == 520


def test_a_check_weighs_the_steps_behind_it_by_their_padded_lengths():
  """The first test's costs, the run's first 134 steps at 90 tokens and the next 866 sampled at
  101.5 (mean 99.96): 550 steps fit the 20 minutes, 7 more than at one length. At the check after
  134 steps they took 1.8 s each, 2.0 s at the mean length as measured: the plan stays. Without
  the lengths they read as steps 10 % faster, and 600 are planned."""
  clock = Clock(50.0)
  replan = replanner(clock, steps=550)
  replan.costs = dataclasses.replace(replan.costs, widths=(90,) * 134 + (101.5,) * 866)
  scored = train_budget.Schedule(eval_every_steps=100, do_predict=True, save_checkpoints_steps=250)
  assert train_budget.planned_steps(1200, replan.costs, scored) == 550
  clock.now = 50.0 + 134 * 1.8 + 10.0
  assert replan.replan(134, 550) == 550
  replan.costs = dataclasses.replace(replan.costs, widths=())
  assert replan.replan(134, 550) == 600


class ScriptedClock:
  """A clock giving `values` in turn: in train_and_evaluate's order, the command's start, a
  checkpoint write (1 s), the tracing loop, 8 timed steps, one step and the 8 timed again (16 s
  each: 2 s a step), reading the eval records (0 s), the probe's pass that traces (3 s; the dev set
  is one batch), its timed pass (1 s) and decoding (1 s: a scoring is 2 s), then the time spent
  once measured (60 s); after it, each call `then` seconds later."""
  PLAN = (0, 10, 11, 11, 20, 20, 36, 36, 38, 38, 54, 54, 54, 54, 57, 57, 58, 58, 59, 60)

  def __init__(self, values=PLAN, then=0.0):
    self.values = list(values)
    self.then = then

  def __call__(self):
    if len(self.values) > 1:
      return self.values.pop(0)
    value = self.values[0]
    self.values[0] += self.then
    return value


# 80 s - 60 s = 20 s: 8 steps of 2 s, one checkpoint (1 s) and the final prediction (2 s) = 19 s.
PLANNED = 8


@pytest.fixture(scope="module")
def records(tmp_path_factory):
  tmp = tmp_path_factory.mktemp("budget")
  return tmp, testutil.make_train_records(tmp, 24, dev_questions=8)


def config_for(records, model_dir, **overrides):
  tmp, records_dir = records
  return train_config.TrainConfig(
      records_dir=records_dir, model_dir=str(model_dir),
      train_batch_size=overrides.pop("train_batch_size",
                                     8), length_buckets=overrides.pop("length_buckets", None),
      mixed_precision_dtype=overrides.pop("mixed_precision_dtype", "float32"),
      bert_config_file=testutil.write_tiny_config(tmp / "bert_config.json"),
      predict_file=str(tmp / "dev.json"), **overrides)


def read_json(path):
  with open(path, encoding="utf-8") as f:
    return json.load(f)


@pytest.fixture(scope="module")
def budget_run(records):
  """A budgeted run with checkpoints at steps 4 and 8."""
  model_dir = records[0] / "budget"
  train_and_evaluate.train_and_evaluate(
      config_for(records, model_dir, train_budget=BUDGET, save_checkpoints_steps=4),
      clock=ScriptedClock())
  return model_dir


@pytest.mark.parametrize(
    "budget, spent, readings",
    [
        (10, "11 s went to starting", 3),  # the command's start and the checkpoint write's two
        (15, "20 s went to starting and tracing the step", 5),  # and the tracing loop's two
    ])
def test_a_budget_spent_before_measuring_is_refused_before_the_timed_steps(
    records, tmp_path, budget, spent, readings):
  """Start-up (11 s on ScriptedClock), or start-up and tracing (20 s), that fill the budget are
  refused at once, not after the 16 timed steps and the scoring's probe."""
  clock = ScriptedClock()
  with pytest.raises(errors.UsageError) as raised:
    train_and_evaluate.train_and_evaluate(
        config_for(records, tmp_path / "model", train_budget=budget), clock=clock)
  assert str(raised.value) == (f"--train_budget={budget}s leaves no time for a step: {spent}; "
                               "give a longer --train_budget")
  assert len(clock.values) == len(ScriptedClock.PLAN) - readings


@pytest.mark.slow
def test_a_budget_plans_the_steps_and_ends_the_schedule_there(budget_run):
  results = read_json(budget_run / "train_results.json")
  assert (results["end_step"], results["num_train_steps"]) == (PLANNED, PLANNED)
  saved = read_json(budget_run / "train_config.json")
  assert (saved["train_budget"], saved["planned_train_steps"]) == (BUDGET, PLANNED)
  latest = tf.train.latest_checkpoint(str(budget_run))
  assert latest.endswith(f"ckpt-{PLANNED}")
  assert model_dir_lib.schedule_steps_in(latest) == PLANNED
  assert model_dir_lib.train_budget_in(latest) == BUDGET
  # The last update used lr(7) = 5e-5 x 1 / 8 (no warm-up step: int(8 x 0.1) = 0); lr(8) is 0.
  schedule = optimization.LinearWarmupDecay(5e-5, PLANNED, 0.1)
  assert results["learning_rate"] == float(schedule(PLANNED - 1)) == pytest.approx(5e-5 / 8)
  assert float(schedule(PLANNED)) == 0.0 and float(schedule(PLANNED + 5)) == 0.0


@pytest.mark.slow
def test_a_budgeted_run_trains_as_max_steps_of_its_plan(records, budget_run):
  """Measuring leaves nothing behind: the same weights, optimizer slots and predictions, bit for
  bit, as --max_steps=8."""
  model_dir = records[0] / "max_steps"
  train_and_evaluate.train_and_evaluate(
      config_for(records, model_dir, max_steps=PLANNED, save_checkpoints_steps=4))
  budget = tf.train.load_checkpoint(tf.train.latest_checkpoint(str(budget_run)))
  fixed = tf.train.load_checkpoint(tf.train.latest_checkpoint(str(model_dir)))
  names = [n for n in budget.get_variable_to_shape_map() if n.startswith(("model/", "optimizer/"))]
  assert len(names) > 50
  for name in names:
    np.testing.assert_array_equal(budget.get_tensor(name), fixed.get_tensor(name), err_msg=name)
  assert (read_json(budget_run / "predictions.json") == read_json(model_dir / "predictions.json"))


@pytest.mark.slow
def test_a_bfloat16_run_plans_its_final_prediction_on_a_float32_copy(records, tmp_path, caplog):
  """After the scoring's probe (2 s), the float32 copy the final prediction runs: built in 2 s,
  its probe's tracing pass 3 s and timed pass 1 s, decoding 1 s: 2 s of tracing, 6 s in all.
  Measured at 70 s, 1 step fits the 80 (2 s, a checkpoint, 6 s); as a 2 s scoring, 3 would."""
  clock = ScriptedClock(ScriptedClock.PLAN[:-1] + (59, 61, 61, 61, 61, 64, 64, 65, 65, 66, 70))
  caplog.set_level(std_logging.INFO)
  train_and_evaluate.train_and_evaluate(
      config_for(records, tmp_path / "bfloat16", train_budget=BUDGET, save_checkpoints_steps=4,
                 mixed_precision_dtype="bfloat16"), clock=clock)
  assert ("-> 1 steps (planned to end at 1 min 19 s, scoring included: 1 scoring of ~2 s (the "
          "final prediction ~6 s); start-up and measuring took 1 min 10 s)") in caplog.text
  assert read_json(tmp_path / "bfloat16" / "train_results.json")["end_step"] == 1
  assert tf_keras.mixed_precision.global_policy().name == "float32"  # the final prediction's


@pytest.mark.slow
def test_a_bucketed_run_costs_each_step_at_its_length_and_each_new_length(tmp_path, monkeypatch):
  """Windows of 256 tokens (real lengths vary) in length buckets: `measure` reads the widths of the
  run's first 2,000 batches, and the first timed pass, 4 s slower than the second, gives each
  length its 8 timed steps met beyond the tracing step's 4 s over their number; the lengths met
  after measuring are costed where each first comes."""
  records_dir = testutil.make_train_records(tmp_path, 24, lengths=(256, 128, 64), dev_questions=8)
  read, planned = [], {}
  padded_widths = train_budget.padded_widths

  def reading(dataset_fn, batches):
    read.extend(padded_widths(dataset_fn, batches))
    return list(read)

  def plan(config, costs, strategy):
    del config, strategy
    planned["costs"] = costs
    return 1

  monkeypatch.setattr(train_budget, "padded_widths", reading)
  monkeypatch.setattr(train_budget, "plan", plan)
  clock = ScriptedClock(
      (0, 10, 11, 11, 20, 20, 40, 40, 42, 42, 58, 58, 58, 58, 61, 61, 62, 62, 63, 64))
  train_and_evaluate.train_and_evaluate(
      config_for((tmp_path, records_dir), tmp_path / "bucketed", train_budget=BUDGET,
                 length_buckets="auto"), clock=clock)
  compiled = len(set(read[1:9]) - {read[0]})
  first_seen = {}
  for step, width in enumerate(read):
    first_seen.setdefault(width, step)
  later = tuple(sorted(step for step in first_seen.values() if step > 8))
  assert len(read) == 2000 and compiled and later  # lengths compiled in each pass and after
  costs = planned["costs"]
  assert costs.widths == tuple(read)
  assert costs.compile == pytest.approx(4.0 / compiled)
  assert costs.new_lengths == later
  assert costs.width_ratio == pytest.approx(np.mean(read) / np.mean(read[1:9]))
  assert costs.step == pytest.approx(2.0 * costs.width_ratio)


@pytest.mark.slow
def test_a_run_slower_than_measured_is_planned_again(records, tmp_path, caplog):
  """The clock moves 8 s between its reads once measured: training starts at 68 s, and at the
  check after step 2 the steps took 4 s each, not 2. From 76 s, 4 steps fit the 80: 2 x 4 s, a
  checkpoint and the final prediction = 11 s. The schedule ends at step 4, where training ends,
  the plan saved in the checkpoint and train_config.json."""
  model_dir = tmp_path / "replanned"
  caplog.set_level(std_logging.INFO)
  train_and_evaluate.train_and_evaluate(
      config_for(records, model_dir, train_budget=BUDGET, save_checkpoints_steps=4),
      clock=ScriptedClock(then=8.0))
  assert ("train_budget 1m20s: 4 steps instead of 8, planned again at step 2: 4.00 s/step so far "
          "against 2.00 measured (1 min 08 s since the start)") in caplog.text
  results = read_json(model_dir / "train_results.json")
  assert (results["end_step"], results["num_train_steps"]) == (4, 4)
  assert results["learning_rate"] == pytest.approx(5e-5 / 4)  # lr(3) of 4 steps, no warm-up
  assert model_dir_lib.schedule_steps_in(str(model_dir / "ckpt-4")) == 4
  assert read_json(model_dir / "train_config.json")["planned_train_steps"] == 4


def stopped_at_step_4(budget_run, model_dir):
  """A copy of budget_run in `model_dir` as if stopped after its checkpoint at step 4."""
  shutil.copytree(budget_run, model_dir)
  for path in model_dir.glob(f"ckpt-{PLANNED}.*"):
    path.unlink()
  (model_dir / "checkpoint").write_text('model_checkpoint_path: "ckpt-4"\n'
                                        'all_model_checkpoint_paths: "ckpt-4"\n')
  return model_dir


@pytest.mark.slow
def test_a_resume_keeps_the_plan(records, budget_run, tmp_path, caplog):
  """The budgeted run as if stopped after its checkpoint at step 4: the same command resumes to
  the planned step 8 without measuring again (this clock, 1 s a step, would plan more), and ends
  with the same weights."""
  model_dir = stopped_at_step_4(budget_run, tmp_path / "resumed")
  caplog.set_level(std_logging.INFO)
  train_and_evaluate.train_and_evaluate(
      config_for(records, model_dir, train_budget=BUDGET, save_checkpoints_steps=4),
      clock=ScriptedClock((0, 1, 2, 3, 4, 5, 6)))
  assert f"train_budget 1m20s: {PLANNED} steps, as planned when {model_dir} began" in caplog.text
  assert "measured over" not in caplog.text
  results = read_json(model_dir / "train_results.json")
  assert (results["start_step"], results["end_step"]) == (4, PLANNED)
  assert read_json(model_dir / "train_config.json")["planned_train_steps"] == PLANNED
  resumed = tf.train.load_checkpoint(str(model_dir / f"ckpt-{PLANNED}"))
  whole = tf.train.load_checkpoint(str(budget_run / f"ckpt-{PLANNED}"))
  names = [n for n in whole.get_variable_to_shape_map() if n.startswith("model/")]
  assert len(names) > 50
  for name in names:
    np.testing.assert_array_equal(resumed.get_tensor(name), whole.get_tensor(name), err_msg=name)


def saved_checkpoint(tmp_path, learning_rate=1e-4, warmup_proportion=0.1, steps=10, budget=None):
  question_answering.set_precision_policy("float32")
  model, _ = span_model.build_span_model(
      bert_config_lib.BertConfig.from_dict(testutil.TINY_BERT_CONFIG))
  optimizer = optimization.create_optimizer(learning_rate, steps, warmup_proportion, False)
  checkpoint = model_dir_lib.make_checkpoint(model, optimizer, budget)
  return checkpoint.save(str(tmp_path / "ckpt")), model, optimizer


def test_resuming_with_another_learning_rate_or_warmup_refuses(tmp_path):
  path, model, _ = saved_checkpoint(tmp_path)
  model_dir_lib.check_resumable(
      path, model_dir_lib.make_checkpoint(model,
                                          optimization.create_optimizer(1e-4, 10, 0.1, False)))
  with pytest.raises(model_dir_lib.ScheduleMismatchError) as error:
    model_dir_lib.check_resumable(
        path,
        model_dir_lib.make_checkpoint(model, optimization.create_optimizer(2e-4, 10, 0.1, False)))
  assert str(error.value) == (
      f"{path} was trained with --learning_rate=0.0001, this run asks for --learning_rate=0.0002; "
      f"resume with --learning_rate=0.0001, or start a new --model_dir to train with 0.0002")
  with pytest.raises(model_dir_lib.ScheduleMismatchError) as error:
    model_dir_lib.check_resumable(
        path,
        model_dir_lib.make_checkpoint(model, optimization.create_optimizer(1e-4, 10, 0.2, False)))
  assert str(error.value) == (
      f"{path} was trained with --warmup_proportion=0.1, this run asks for "
      f"--warmup_proportion=0.2; resume with --warmup_proportion=0.1, or start a new --model_dir "
      f"to train with 0.2")


def test_resuming_with_another_global_batch_refuses(records, budget_run, tmp_path):
  """budget_run, as if stopped after its checkpoint at step 4, trained 8 features a step
  (--train_batch_size=8): the same command with 4 a step is refused before it trains; 4 x 2
  accumulated is the same global batch and resumes to the planned step."""
  model_dir = stopped_at_step_4(budget_run, tmp_path / "resumed")
  with pytest.raises(model_dir_lib.ScheduleMismatchError) as error:
    train_and_evaluate.train_and_evaluate(
        config_for(records, model_dir, train_budget=BUDGET, train_batch_size=4),
        clock=ScriptedClock())
  assert str(error.value) == (
      f"{model_dir / 'ckpt-4'} was trained on 8 features a step and this run's batch is 4 "
      f"(--train_batch_size x --gradient_accumulation_steps x replicas): its steps would count "
      f"other data and another schedule; resume with the batch flags it was trained with (the "
      f"--model_dir's train_config.json records them), or start a new --model_dir")
  assert not list(model_dir.glob(f"ckpt-{PLANNED}.*"))
  train_and_evaluate.train_and_evaluate(
      config_for(records, model_dir, train_budget=BUDGET, train_batch_size=4,
                 gradient_accumulation_steps=2), clock=ScriptedClock((0, 1, 2, 3, 4, 5, 6)))
  results = read_json(model_dir / "train_results.json")
  assert (results["start_step"], results["end_step"],
          results["effective_batch_size"]) == (4, PLANNED, 8)


def test_checkpoints_without_a_recorded_batch_resume_with_any(tmp_path):
  path, model, _ = saved_checkpoint(tmp_path)  # make_checkpoint without a global batch: 0
  model_dir_lib.check_global_batch(path, 16)
  optimizer = optimization.create_optimizer(1e-4, 10, 0.1, False)
  model_dir_lib.check_resumable(
      path, model_dir_lib.make_checkpoint(model, optimizer, global_batch_size=16))


def test_a_budget_resumes_only_its_own_plan(tmp_path):
  unplanned, _, _ = saved_checkpoint(tmp_path / "a")
  with pytest.raises(model_dir_lib.ScheduleMismatchError) as error:
    model_dir_lib.resumed_plan(unplanned, 1200)
  assert str(error.value) == (
      f"{unplanned} was not planned by --train_budget, and --train_budget=20m would plan its "
      f"schedule anew; resume with --max_steps=10 instead, or start a new --model_dir")
  planned, _, _ = saved_checkpoint(tmp_path / "b", steps=540, budget=1200)
  assert model_dir_lib.resumed_plan(planned, 1200) == 540
  with pytest.raises(model_dir_lib.ScheduleMismatchError) as error:
    model_dir_lib.resumed_plan(planned, 5400)
  assert str(error.value) == (
      f"{planned} was planned by --train_budget=20m (540 steps), this run asks for "
      f"--train_budget=1h30m; resume with --train_budget=20m, or start a new --model_dir")
  with pytest.raises(model_dir_lib.ScheduleMismatchError) as error:
    model_dir_lib.check_schedule(planned, 1000)
  assert str(error.value) == (
      f"{planned} was trained on a learning-rate schedule of 540 steps, this run asks for 1000; "
      f"resume with --train_budget=20m, which keeps its plan, or start a new --model_dir")


@pytest.mark.parametrize("values, message", [
    ({
        "train_budget": 1200,
        "max_steps": 1000
    }, "--train_budget=20m and --max_steps=1000 both set the length of training: drop one of the "
     "two"),
    ({
        "train_budget": 5400,
        "num_train_epochs": 2.0,
        "typed_flags": ("num_train_epochs", "train_budget")
    }, "--train_budget=1h30m and --num_train_epochs=2.0 both set the length of training: drop one "
     "of the two"),
    ({
        "train_budget": 90,
        "do_train": False
    }, "--train_budget=1m30s applies to training; --do_train=false only predicts: drop one of the "
     "two"),
    ({
        "train_budget": 0
    }, "--train_budget=0: must be a duration above 0 like 90s, 20m, 1h or 1h30m"),
])
def test_settings_a_budget_excludes_are_one_line(values, message):
  with pytest.raises(errors.UsageError) as error:
    train_config.TrainConfig(**values)
  assert str(error.value) == message


def test_durations_and_the_bad_duration_line():
  flag_values = flags.FlagValues()
  settings.define_flags(train_config.TrainConfig, flag_values)
  parse = settings.DurationParser().parse
  assert [parse(t) for t in ("90s", "20m", "1h", "1h30m", "1h2m3s", "5M")
         ] == [90, 1200, 3600, 5400, 3723, 300]
  assert [settings.format_duration(s) for s in (90, 1200, 5400)] == ["1m30s", "20m", "1h30m"]
  for bad in ("20", "1m1h", "0m", "1.5h"):
    with pytest.raises(SystemExit) as stop:
      command_line.parse_flags(["train.py", f"--train_budget={bad}"], flag_values)
    assert stop.value.code == (
        f"train.py: flag --train_budget={bad}: expected a duration above 0 like 90s, 20m, 1h or "
        f"1h30m (hours h, minutes m, seconds s, in that order), got '{bad}' (--helpfull lists the "
        f"flags)")
  command_line.parse_flags(["train.py", "--train_budget=20m"], flag_values)
  config = command_line.config_from_flags(train_config.TrainConfig, flag_values)
  assert (config.train_budget, config.typed_flags) == (1200, ("train_budget",))
