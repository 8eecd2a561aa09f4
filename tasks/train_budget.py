"""--train_budget: the number of steps that ends training and its scoring within a wall time.

What is measured, on this run's model, device and batches (`measure`):
- the step: one loop traces it, then `MEASURE_STEPS` steps on the run's next batches are timed;
  then the input starts again and the same 1 + `MEASURE_STEPS` steps run once more, the same
  steps timed, and the faster pass counts. One pass alone once measured MiniLM's step at 3.76 s
  where the run then trained at 1.95 s a step, planning half the budget; two passes agreeing is
  the usual case (15.5 and 16.1 s). With length buckets a step's time follows its padded length
  (MiniLM at batch 16: 0.22 s at 80 tokens, 0.62 at 216, 1.19 at 384), and 25 steps' mean length
  moves by a quarter about the run's. So the padded lengths of the run's first `SAMPLE_BATCHES`
  batches are read from the input (not trained): the step time is scaled by their mean over the
  timed steps', and each step of the plan counts at its own length over that mean (`Costs.work`);
- a new padded length: a step at a length not met before compiles its kernels for it (XLA's layer
  norms and GELU on the CPU, the whole step under --xla): ~0.3 s a length on MiniLM at batch 16,
  about 40 lengths in the demo's first 2,000 steps, most in the first 300. Uncounted, the first
  check below reads those seconds as a slower step. The first pass's timed steps compile the
  lengths the tracing step did not meet, the second pass's none: their difference over those
  lengths is the seconds a length costs, counted at the steps where the sampled batches meet a
  length the measuring did not train;
- a checkpoint save: the time to write the state to a temporary checkpoint;
- a dev scoring (the chief, when the run scores): the first `PROBE_BATCHES` eval batches are
  predicted twice as a scoring does, the first pass tracing the model's prediction step (once a
  run: `evaluation.predict_step` keeps it for every scoring), the second timed; a scoring costs
  reading the eval records (timed), the timed pass's seconds per padded token times the padded
  tokens of the windows scored, and the decoding per question times the questions. A measured
  forward rate rather than a ratio to the training step: the scoring pads to other lengths, and
  may run in another precision;
- the final prediction, when it runs another model (a float32 copy of a 16-bit model, what
  export.py serves): building that copy, its tracing and its scoring, measured the same way on a
  copy made for the probe.

The plan (`planned_steps`) is the most steps whose training, new lengths, checkpoints,
--eval_every_steps scorings and final prediction (--do_predict) fit in what is left of the budget,
counted from the command's start, after measuring. A budget that start-up, or start-up and the
tracing step, already fill is refused then, not after the timed steps.

A shared host's speed drifts: the same batches trained at 1.8 s and, another hour, at 2.1 s a
step, and a 16-minute plan then ran 2 minutes over. So a `Replanner` checks the run a quarter of
the way in and every eighth of the plan after: the step time so far (the time since the plan, less
the measured costs of its checkpoints, scorings and new lengths, over the steps trained, each at
its padded length) plans what is left of the budget again, when the run would otherwise end more
than REPLAN_TOLERANCE of the budget early or late. The decay then ends at the new last step: the
learning rate of the next step moves by the ratio of the remaining steps (e.g. ~9 % up when 10 %
more steps fit half way).

Design: the schedule's length is a variable (`optimization.LinearWarmupDecay`), so the traced step
follows the planned length without tracing again. Before measuring, the model, the optimizer (its
slots created first, and the loss scale), the schedule and the dropout generators are written to a
temporary checkpoint; after, they are read back and the input starts again from the first batch.
So the measuring steps change nothing, the warm-up and decay end exactly at the planned step, and
a budgeted run trains bit for bit as --max_steps=<the planned steps> does. The plan is saved in
the checkpoints (`model_dir.make_checkpoint`): a resume keeps it (`model_dir.resumed_plan`).
"""

import bisect
import dataclasses
import functools
import os
import shutil
import tempfile
import time

from absl import logging
import tensorflow as tf

from squad_qa import errors
from squad_qa.base import progress as progress_lib
from squad_qa.flags import settings
from squad_qa.tasks import distribution
from squad_qa.tasks import evaluation
from squad_qa.tasks import optimization
from squad_qa.tasks import question_answering

MEASURE_STEPS = 8  # timed training steps, after the loop that traces
REPLAN_TOLERANCE = 0.02  # of the budget: a projected end closer than this keeps the plan
REPLAN_CHECKS = 8  # a check every 1/REPLAN_CHECKS of the planned steps, from twice that far in
PROBE_BATCHES = 3  # eval batches a scoring's time is measured on (predicted twice)
SAMPLE_BATCHES = 2000  # train batches whose padded lengths weigh the steps (0.5 s to read)
# Epochs above which a plan is warned of: SQuAD fine-tuning recipes take 2 to 3 (google-research/
# bert's README: 2; Hugging Face TrainingArguments' default: 3).
MANY_EPOCHS = 5


@dataclasses.dataclass(frozen=True)
class Costs:
  """Measured seconds: `step` per training step at the mean padded length of `widths` (scaled by
  `width_ratio`, that mean over the timed steps'), `save` per checkpoint, `scoring` per dev scoring
  (0: the run does not score), `final` for the final prediction when it runs another model (None:
  a `scoring`), `compile` per padded length the run meets first at the steps `new_lengths`
  (0-based, increasing), and `elapsed` since the command started, once measured. `widths`: the
  padded lengths (tokens) of the run's first batches, step by step (empty: all one length)."""
  step: float
  save: float = 0.0
  scoring: float = 0.0
  elapsed: float = 0.0
  width_ratio: float = 1.0
  final: float | None = None
  compile: float = 0.0
  new_lengths: tuple = ()
  widths: tuple = ()

  @functools.cached_property
  def _mean_width(self):
    return sum(self.widths) / len(self.widths) if self.widths else 1.0

  def work(self, start, end):
    """Steps `start` to `end` (0-based, end excluded) in steps of the mean padded length: each
    sampled step at its length over the mean, one after the sample."""
    if not self.widths:
      return float(end - start)
    inside = self.widths[start:end]
    return sum(inside) / self._mean_width + max(0, end - max(start, len(self.widths)))

  def cheapest_step(self):
    """Seconds of the shortest step: at the narrowest sampled length."""
    return self.step * (min(self.widths) / self._mean_width if self.widths else 1.0)

  @property
  def final_prediction(self):
    """Seconds of the final prediction."""
    return self.scoring if self.final is None else self.final

  def compiling(self, steps):
    """Seconds the first `steps` steps spend compiling new padded lengths."""
    return self.compile * bisect.bisect_left(self.new_lengths, steps)


@dataclasses.dataclass(frozen=True)
class Schedule:
  """What else a run of n steps does: a scoring every `eval_every_steps` (0: none), the final
  prediction (`do_predict`: it replaces the scoring at the last step), a checkpoint every
  `save_checkpoints_steps` and at the end."""
  eval_every_steps: int = 0
  do_predict: bool = True
  save_checkpoints_steps: int = 1000

  def scorings(self, steps):
    """Dev scorings of a run of `steps` steps, the final prediction included."""
    during = steps // self.eval_every_steps if self.eval_every_steps else 0
    if self.do_predict and self.eval_every_steps and steps % self.eval_every_steps == 0:
      during -= 1
    return during + int(self.do_predict)

  def saves(self, steps):
    """Checkpoints a run of `steps` steps writes."""
    return -(-steps // self.save_checkpoints_steps)

  def seconds_behind(self, done, costs):
    """The seconds of the checkpoints, scorings and compiled lengths a run has behind it at step
    `done` (its steps aside), under `costs`."""
    during = done // self.eval_every_steps if self.eval_every_steps else 0
    return (done // self.save_checkpoints_steps * costs.save + during * costs.scoring +
            costs.compiling(done))

  def seconds(self, steps, costs, done=0):
    """The seconds of a run of `steps` steps after the measuring (after step `done`, whose
    scorings and checkpoints are behind), under `costs`."""
    final = int(self.do_predict)
    return (costs.work(done, steps) * costs.step + self.saves(steps) * costs.save +
            (self.scorings(steps) - final) * costs.scoring + final * costs.final_prediction +
            costs.compiling(steps) - self.seconds_behind(done, costs))


def planned_steps(budget, costs, schedule, done=0):
  """The most steps whose run (`Schedule.seconds` after step `done`) fits in `budget` seconds
  minus `costs.elapsed` (`done` if none does)."""
  left = budget - costs.elapsed
  low, high = done, done + max(0, int(left / costs.cheapest_step())) + 1
  while high - low > 1:  # schedule.seconds grows with the steps
    middle = (low + high) // 2
    fits = schedule.seconds(middle, costs, done) <= left
    low, high = (middle, high) if fits else (low, middle)
  return low


def plan_line(budget, costs, schedule, steps):
  """The plan in one log line, e.g. "train_budget 20m: 1.93 s/step measured over 8 steps -> 540
  steps (planned to end at 19 min 10 s, scoring included: 3 scorings of ~19 s)"."""
  end = costs.elapsed + schedule.seconds(steps, costs)
  scorings = schedule.scorings(steps)
  scoring = (f"scoring included: {scorings} scoring{'s' if scorings != 1 else ''} of "
             f"~{progress_lib.format_seconds(costs.scoring)}" if scorings else "no scoring")
  if scorings and schedule.do_predict and costs.final is not None:
    scoring += f" (the final prediction ~{progress_lib.format_seconds(costs.final)})"
  scaled = (f" x {costs.width_ratio:.2f} for the mean padded length"
            if costs.width_ratio != 1 else "")
  lengths = bisect.bisect_left(costs.new_lengths, steps)
  if costs.compile and lengths:
    scaled += (f", {lengths} new padded length{'s' if lengths != 1 else ''} compiling "
               f"~{costs.compile:.2g} s each")
  return (
      f"train_budget {settings.format_duration(budget)}: {costs.step:#.3g} s/step measured over "
      f"{MEASURE_STEPS} steps{scaled} -> {steps} steps (planned to end at "
      f"{progress_lib.format_seconds(end)}, {scoring}; start-up and measuring took "
      f"{progress_lib.format_seconds(costs.elapsed)})")


def warn_of_many_epochs(budget, steps, steps_per_epoch):
  """Logs a warning when `steps` (the budget's plan) pass over the train windows more than
  `MANY_EPOCHS` times: past a few epochs fine-tuning overfits, and the budget buys no F1."""
  epochs = steps / max(1, steps_per_epoch)
  if epochs > MANY_EPOCHS:
    logging.warning(
        "train_budget %s plans %.0f epochs of the train records (%d steps of %d an epoch); "
        "SQuAD fine-tuning recipes take 2 to 3, and past a few the model overfits: a shorter "
        "--train_budget reaches the same F1, or train on more questions",
        settings.format_duration(budget), epochs, steps, steps_per_epoch)


def _time_steps(trainer, steps, clock):
  """(seconds of `steps` training steps through the trainer's (traced) loop, `clock()` after)."""
  began = clock()
  trainer.train(tf.constant(steps, tf.int32))
  ended = clock()
  return ended - began, ended


def _probe_scoring(scorer, model, strategy, clock):
  """(seconds of one dev scoring of `model` by `scorer` (a `evaluation.DevScorer`), seconds its
  first scoring spends tracing), estimated from its first PROBE_BATCHES batches (module
  docstring): `evaluation.predict` of them twice, the first pass tracing, the second timed."""
  batches = list(scorer.dataset().take(PROBE_BATCHES))
  if not batches:
    return 0.0, 0.0
  widths = [int(tf.size(b["input_word_ids"])) for b in batches]
  began = clock()
  tokens = sum(int(tf.size(b["input_word_ids"])) for b in scorer.dataset())
  read = clock() - began  # a pass reads the eval records too

  def predict():  # evaluation.predict iterates the batches: a list of them serves
    began = clock()
    windows = evaluation.predict(model, batches, what="train_budget: timing a dev scoring")
    return windows, clock() - began

  with strategy.scope():
    _, first = predict()  # traces the model's prediction step
    windows, timed = predict()
  decode_began = clock()
  scorer.score_windows(windows)
  decode = clock() - decode_began
  scoring = read + timed / sum(widths) * tokens + decode / max(1, len(windows)) * len(scorer.ids)
  return scoring, max(0.0, first - timed)


def padded_widths(dataset_fn, batches):
  """The padded lengths (tokens) of the input's first `batches` batches, read without training."""
  return [int(b["input_word_ids"].shape[1]) for b in dataset_fn(None, 0).take(batches)]


def width_ratio(widths, timed=MEASURE_STEPS):
  """The mean of `widths` (the input's batches' padded lengths) over that of batches 2 to
  `timed` + 1 (the timed steps'): 1.0 when every batch has one length."""
  timed_widths = widths[1:1 + timed]
  if not timed_widths:
    return 1.0
  return (sum(widths) / len(widths)) / (sum(timed_widths) / len(timed_widths))


def new_length_steps(widths, timed=MEASURE_STEPS):
  """The steps (0-based) whose batch, of `widths` (the input's padded lengths), is the first at a
  length that the measuring steps (the first `timed` + 1) did not train."""
  seen = set(widths[:1 + timed])
  steps = []
  for step, width in enumerate(widths):
    if width not in seen:
      seen.add(width)
      steps.append(step)
  return tuple(steps)


def compile_seconds(widths, first_pass, second_pass, timed=MEASURE_STEPS):
  """Seconds a new padded length costs: the first timed pass over batches 2 to `timed` + 1 of
  `widths` compiled the lengths the tracing step (batch 1) had not, the second pass none; their
  difference over those lengths (0.0 without one, or when the first pass was not slower)."""
  compiled = len(set(widths[1:1 + timed]) - {widths[0]}) if widths else 0
  return max(0.0, first_pass - second_pass) / compiled if compiled else 0.0


def _snapshot(checkpoint, folder, clock):
  """Writes `checkpoint` into `folder`; returns (its path, the seconds it took, `clock()` after)."""
  began = clock()
  path = checkpoint.write(os.path.join(folder, "state"))
  ended = clock()
  return path, ended - began, ended


def _chief_value(strategy, value):
  """`value` (a float) as the chief computed it, on every worker (an all-reduce)."""

  def replica_value():
    context = tf.distribute.get_replica_context()
    mine = tf.constant(value, tf.float32) * tf.cast(tf.equal(context.replica_id_in_sync_group, 0),
                                                    tf.float32)
    return context.all_reduce(tf.distribute.ReduceOp.SUM, mine)

  return float(strategy.experimental_local_results(strategy.run(replica_value))[0])


def _no_time_for_a_step(budget, spent, what):
  """The head of the one-line refusal of a `budget` (seconds) with no room for a step, `spent`
  seconds having gone to `what`."""
  return (f"--train_budget={settings.format_duration(budget)} leaves no time for a step: "
          f"{progress_lib.format_seconds(spent)} went to {what}")


def _refuse_a_spent_budget(budget, spent, strategy, what):
  """Raises errors.UsageError when `spent` seconds (the chief's), gone to `what`, already fill
  `budget` (seconds; None: no check): no step can fit, so the timed steps would be wasted."""
  if budget is None:
    return
  if distribution.is_multi_worker(strategy):
    spent = _chief_value(strategy, spent)
  if spent >= budget:
    raise errors.UsageError(
        f"{_no_time_for_a_step(budget, spent, what)}; give a longer --train_budget")


def measure(trainer, checkpoint, dataset_fn, model, scorer=None, clock=time.monotonic, started=None,
            final_model=None, budget=None):
  """The `Costs` of this run (module docstring), leaving every variable of `checkpoint` (a
  `model_dir.make_checkpoint`) as it was.

  Args:
    trainer: the `trainer.QATrainer`; its dataset is replaced (the run sets its own).
    dataset_fn: (input_context, skip_steps) -> per-pipeline dataset (the task's build_inputs).
    model: the model being trained.
    scorer: the `evaluation.DevScorer` of the run's scorings (the chief's), or None.
    clock: a function returning seconds.
    started: `clock()` at the command's start (default: now).
    final_model: with `scorer`, a function returning a new copy of `model` that the final
      prediction runs (a float32 copy of a 16-bit model), or None: it runs `model`.
    budget: the run's --train_budget (seconds), or None.

  Raises:
    errors.UsageError: starting, or starting and tracing the step, took `budget` or more.
  """
  strategy = trainer.strategy
  started = clock() if started is None else started
  logging.info("train_budget: timing %d training steps twice%s before planning (undone after)",
               MEASURE_STEPS,
               ", a checkpoint save and a dev scoring" if scorer else " and a checkpoint save")
  with strategy.scope():
    optimization.create_slots(trainer.optimizer, question_answering.trained_variables(model))
  folder = tempfile.mkdtemp(prefix="squad_qa_budget_")
  try:
    path, save, saved = _snapshot(checkpoint, folder, clock)
    _refuse_a_spent_budget(budget, saved - started, strategy, "starting")
    passes = []
    for attempt in range(2):  # the same batches twice; the faster pass counts
      trainer.train_dataset = distribution.distribute_inputs(strategy,
                                                             lambda context: dataset_fn(context, 0))
      # Untimed: traces (the first time), fills the input's buffers.
      _, traced = _time_steps(trainer, 1, clock)
      if not attempt:
        _refuse_a_spent_budget(budget, traced - started, strategy, "starting and tracing the step")
      passes.append(_time_steps(trainer, MEASURE_STEPS, clock)[0])
    step = min(passes) / MEASURE_STEPS
    widths = padded_widths(dataset_fn, SAMPLE_BATCHES)
    ratio = width_ratio(widths)
    scoring, final = 0.0, None
    if scorer:
      scoring, _ = _probe_scoring(scorer, model, strategy, clock)
    if scorer and final_model:
      began = clock()
      with strategy.scope():
        copy = final_model()
      built = clock() - began
      copy_scoring, tracing = _probe_scoring(scorer, copy, strategy, clock)
      final = built + tracing + copy_scoring
    checkpoint.read(path).assert_consumed()
  finally:
    shutil.rmtree(folder, ignore_errors=True)
  trainer.train_dataset = None
  return Costs(step=step * ratio, save=save, scoring=scoring, elapsed=clock() - started,
               width_ratio=ratio, final=final, compile=compile_seconds(widths, *passes),
               new_lengths=new_length_steps(widths),
               widths=tuple(widths) if len(set(widths)) > 1 else ())


class Replanner:
  """Plans a budgeted run's steps again as it trains (module docstring), on every worker the
  chief's plan. For a run from step 0, made when the plan is set.

  Args:
    config: the `TrainConfig` (train_budget, eval_every_steps, do_predict, save_checkpoints_steps).
    costs: the measured `Costs`: their checkpoint and scoring seconds stay, the step's is the run's.
    strategy: the run's tf.distribute strategy.
    schedule: the optimizer's `optimization.LinearWarmupDecay`; a new plan sets its length.
    clock: `measure`'s clock (seconds).
    on_replan: a function of the new planned steps, run after each new plan (or None).
  """

  def __init__(self, config, costs, strategy, schedule, clock, on_replan=None):
    self.budget = config.train_budget
    self.schedule = Schedule(config.eval_every_steps, config.do_predict,
                             config.save_checkpoints_steps)
    self.costs, self.strategy, self.learning_rate = costs, strategy, schedule
    self.clock, self.on_replan = clock, on_replan
    self.planned_at = clock()  # training's start (step 0)
    self.started = self.planned_at - costs.elapsed  # the command's

  @staticmethod
  def next_check(step, steps):
    """The global step of the next check after `step` in a run of `steps` steps (`steps`: none
    left before the end)."""
    every = max(1, steps // REPLAN_CHECKS)
    return min(steps, max(2 * every, (step // every + 1) * every))

  def replan(self, step, steps):
    """The steps of the run, planned again at global step `step` of `steps` (module docstring):
    `steps` when its projected end is within REPLAN_TOLERANCE of the budget, else the most steps
    that fit (at least `step` + 1, and no more than leaves warm-up behind `step`). Sets the
    schedule's length and logs one line when that changes."""
    now = self.clock()
    schedule = self.schedule
    trained = now - self.planned_at - schedule.seconds_behind(step, self.costs)
    new = steps
    so_far = self.costs.work(0, step)
    if step > 0 and trained > 0:
      costs = dataclasses.replace(self.costs, step=trained / so_far, elapsed=now - self.started)
      end = costs.elapsed + schedule.seconds(steps, costs, step)
      if abs(end - self.budget) > REPLAN_TOLERANCE * self.budget:
        new = max(step + 1, planned_steps(self.budget, costs, schedule, step))
        warmup = float(self.learning_rate.warmup_proportion.numpy())
        if warmup:  # warm-up steps follow the length: keep them behind this step
          new = max(step + 1, min(new, int(step / warmup)))
    if distribution.is_multi_worker(self.strategy):
      new = int(_chief_value(self.strategy, new))
    if new != steps:
      self.learning_rate.set_num_train_steps(new)
      logging.info(
          "train_budget %s: %d steps instead of %d, planned again at step %d: %#.3g s/step so far "
          "against %#.3g measured (%s since the start)", settings.format_duration(self.budget), new,
          steps, step, trained / so_far, self.costs.step,
          progress_lib.format_seconds(now - self.started))
      if self.on_replan:
        self.on_replan(new)
    return new


def plan(config, costs, strategy):
  """The planned steps of `config` (a `TrainConfig` with `train_budget`) under `costs`, the same on
  every worker (the chief's); logs the plan in one line.

  Raises:
    errors.UsageError: the budget leaves no time for one step.
  """
  schedule = Schedule(config.eval_every_steps, config.do_predict, config.save_checkpoints_steps)
  steps = planned_steps(config.train_budget, costs, schedule)
  if distribution.is_multi_worker(strategy):
    steps = int(_chief_value(strategy, steps))
  if not steps:
    raise errors.UsageError(
        f"{_no_time_for_a_step(config.train_budget, costs.elapsed, 'starting and measuring')}, a "
        f"step takes {costs.step:.3g} s and a scoring ~{progress_lib.format_seconds(costs.scoring)}"
        f"; give a longer --train_budget" +
        (", or score fewer questions (--max_eval_examples) or less often (--eval_every_steps)"
         if costs.scoring and costs.scoring > costs.step and
         (config.eval_every_steps or config.do_predict) else ""))
  logging.info("%s", plan_line(config.train_budget, costs, schedule, steps))
  return steps
