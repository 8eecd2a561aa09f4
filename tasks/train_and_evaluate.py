"""train.py's job: fine-tune a BERT encoder for SQuAD span prediction, then predict and score dev.

Check the inputs (run_inputs) -> strategy (distribution) -> precision and plan (run_plan) -> task
(question_answering) -> loop (trainer) -> the chief scores dev (evaluation).
"""

import contextlib
import dataclasses
import os
import time

from absl import logging
import tensorflow as tf
import tf_keras

from squad_qa import errors
from squad_qa.base import artifacts
from squad_qa.base import commands
from squad_qa.base import progress as progress_lib
from squad_qa.base.wording import counted
from squad_qa.flags import settings
from squad_qa.model import checkpoints
from squad_qa.model import precision
from squad_qa.model.memory import diagnose
from squad_qa.postprocess import span_decoding
from squad_qa.preprocess import records
from squad_qa.tasks import distribution
from squad_qa.tasks import evaluation
from squad_qa.tasks import learning_curve
from squad_qa.tasks import model_dir as model_dir_lib
from squad_qa.tasks import question_answering
from squad_qa.tasks import run_inputs
from squad_qa.tasks import optimization
from squad_qa.tasks import run_plan
from squad_qa.tasks import train_budget
from squad_qa.tasks import train_progress
from squad_qa.tasks import trainer as trainer_lib


def _planned_steps(config, plan, start):
  """`plan.num_train_steps`, or for --train_budget resuming a checkpoint, the steps it planned
  (None: to plan after measuring)."""
  if not (config.train_budget and start.resume):
    return plan.num_train_steps
  steps = model_dir_lib.resumed_plan(start.resume, config.train_budget)
  logging.info("train_budget %s: %d steps, as planned when %s began (not measured again)",
               settings.format_duration(config.train_budget), steps, config.model_dir)
  return steps


def train(config, strategy, bert_config, meta, start, write_qa_config, scorer=None,
          budget_clock=(time.monotonic, None)):
  """Fine-tunes under `strategy` from `start` (a `tasks.model_dir.Start`): plan, task, loop, under
  the dtype policy `run_plan.set_precision` set.

  `write_qa_config` (the planned steps, or None) runs just before the first checkpoint is saved;
  `scorer` (a `tasks.evaluation.DevScorer`, or None) draws the learning curve and, on the chief,
  times a scoring for --train_budget (`tasks.train_budget`), which plans on `budget_clock`: (a
  function returning seconds, its value at the command's start or None: now).

  Returns:
    (the model, trained or restored; the run's figures as a dict for train_results.json; the
    `tasks.learning_curve.LearningCurve` or None, whose last point the final score completes).

  Raises:
    model_dir.ScheduleMismatchError: resuming with another --seed (`model_dir.check_seed`), or
      schedule (`model_dir.check_resumable`).
  """
  if start.resume:
    model_dir_lib.check_seed(config.model_dir, start.resume, config.seed)
  policy = precision.POLICIES[config.precision]
  plan = run_plan.plan_run(config, bert_config, meta, strategy, policy)
  plan = dataclasses.replace(plan, num_train_steps=_planned_steps(config, plan, start))
  task = question_answering.QuestionAnsweringTask(
      question_answering.QATaskConfig(
          bert_config=bert_config, max_seq_length=meta["flags"]["max_seq_length"],
          train_files=tuple(records.shard_paths(config.records_dir, meta, records.TRAIN_SPLIT)),
          per_replica_batch_size=plan.micro_batch_size, accumulation_steps=plan.accumulation_steps,
          learning_rate=config.learning_rate, num_train_steps=plan.num_train_steps or 1,
          warmup_proportion=config.warmup_proportion, mixed_precision_dtype=plan.precision,
          jit_compile=plan.xla, float32_weight_gradients=config.float32_weight_gradients,
          seed=config.seed, length_buckets=plan.length_buckets))
  with strategy.scope():
    model = task.build_model()
    optimizer = task.create_optimizer()
    checkpoint = model_dir_lib.make_checkpoint(model, optimizer, config.train_budget,
                                               plan.global_batch_size)
  if not start.resume:
    if start.init_checkpoint:
      logging.info("initialized from %s", checkpoints.initialize_from(model, start.init_checkpoint))
    else:
      logging.warning("no --init_checkpoint: the encoder starts from random weights")
  trainer = trainer_lib.QATrainer(strategy, task.replica_step(model, optimizer), optimizer,
                                  plan.global_batch_size)
  is_chief = distribution.is_chief(strategy)
  schedule = optimization.schedule_of(optimizer)
  replanner = None
  if not plan.num_train_steps:
    final_model = final_copy(model, bert_config) if config.do_predict else None
    costs = train_budget.measure(trainer, checkpoint, task.build_inputs, model,
                                 scorer if is_chief else None, *budget_clock,
                                 final_model=final_model, budget=config.train_budget)
    plan = dataclasses.replace(plan, num_train_steps=train_budget.plan(config, costs, strategy))
    if is_chief:
      train_budget.warn_of_many_epochs(config.train_budget, plan.num_train_steps,
                                       plan.steps_per_epoch)
    schedule.set_num_train_steps(plan.num_train_steps)

    def record_new_plan(steps):  # once the first checkpoint's save has written the files
      if os.path.exists(os.path.join(config.model_dir, artifacts.TRAIN_CONFIG_FILE)):
        write_qa_config(steps)

    replanner = train_budget.Replanner(config, costs, strategy, schedule, budget_clock[0],
                                       on_replan=write_qa_config and record_new_plan)
  watchers = [
      train_progress.TrainProgress(optimizer.iterations, plan.num_train_steps, plan.steps_per_epoch,
                                   config.log_steps, config.steps_per_loop,
                                   fixed_loops=distribution.is_multi_worker(strategy),
                                   show=is_chief)
  ]
  curve = learning_curve.LearningCurve(
      config, scorer, model, strategy, optimizer.iterations, score=is_chief,
      final_step=plan.num_train_steps if config.do_predict else None) if (
          scorer and config.eval_every_steps) else None
  try:
    stats = trainer_lib.train(
        trainer, checkpoint, task.build_inputs, plan, start=start,
        before_first_save=write_qa_config and (lambda: write_qa_config(
            int(schedule.num_train_steps.numpy()) if config.train_budget else None)),
        watchers=watchers + ([curve] if curve else []), replanner=replanner)
  except trainer_lib.OutOfMemoryError as e:
    raise trainer_lib.OutOfMemoryError(
        f"{e}\n" +
        diagnose.diagnosis(bert_config, meta["flags"]["max_seq_length"], plan.micro_batch_size,
                           policy, plan.device, plan.accumulation_steps, headline="out of memory",
                           replicas=plan.replicas, predicts=config.do_predict)) from None
  if curve and stats["steps"]:
    # The learning curve's scorings ran between the loops: training time and rate leave them out,
    # as learning_curve.csv's train_seconds does.
    scoring = curve.scoring_seconds
    train_seconds = max(stats["train_seconds"] - scoring, 1e-9)
    stats.update(train_seconds=train_seconds, scoring_seconds=scoring,
                 examples_per_second=stats["steps"] * plan.global_batch_size / train_seconds)
  stats.update(plan.summary(), distribution_strategy=type(strategy).__name__,
               learning_curve=bool(curve), num_train_steps=stats.get("num_train_steps",
                                                                     plan.num_train_steps))
  return model, stats, curve


def restore_for_prediction(config, bert_config, start):
  """The span model with the weights `start` (a `tasks.model_dir.Start`) names.

  Raises:
    errors.UsageError: neither a checkpoint in `model_dir` nor an `init_checkpoint`.
  """
  model = question_answering.QuestionAnsweringTask(
      question_answering.QATaskConfig(bert_config=bert_config, max_seq_length=0)).build_model()
  if start.resume:
    tf.train.Checkpoint(model=model).read(start.resume).expect_partial()
    logging.info("%s", start.describe("predicting with"))
  elif start.init_checkpoint:
    report = checkpoints.initialize_from(model, start.init_checkpoint)
    logging.info("predicting with %s", report)
    if not report.head_restored:
      logging.warning("%s", checkpoints.UNTRAINED_HEAD)
  else:
    raise errors.UsageError(f"--do_train=false needs a checkpoint in --model_dir="
                            f"{config.model_dir} or an --init_checkpoint")
  return model


def float32_model(model, bert_config):
  """`model`, or a float32 copy of its weights when it computes in float16 or bfloat16: what
  export.py serves by default (docs/training.md "bfloat16 training on the CPU"). Sets the global
  policy to float32."""
  if model.dtype_policy.compute_dtype == "float32":
    return model
  logging.info("predicting with a float32 copy of the %s model (what %s serves)",
               model.dtype_policy.name, commands.command("squad-qa-export"))
  question_answering.set_precision_policy("float32")
  copy = question_answering.QuestionAnsweringTask(
      question_answering.QATaskConfig(bert_config=bert_config, max_seq_length=0)).build_model()
  copy.set_weights(model.get_weights())
  return copy


def final_copy(model, bert_config):
  """A function returning a new copy of `model` for its final prediction (`float32_model`, the
  global policy left as it was), or None when that prediction runs `model` itself (float32)."""
  if model.dtype_policy.compute_dtype == "float32":
    return None

  def copy():
    policy = tf_keras.mixed_precision.global_policy()
    try:
      return float32_model(model, bert_config)
    finally:
      tf_keras.mixed_precision.set_global_policy(policy)

  return copy


def score_line(results, predict_file, version_2):
  """The one line train.py prints with the official scores of `results`."""
  if version_2:
    return (
        f"SQuAD v2.0 on {results['total']} questions of {predict_file}: "
        f"exact = {results['exact']:.2f}, f1 = {results['f1']:.2f}; " +
        ", ".join(f"{k} = {results[k]:.2f}"
                  for k in ("HasAns_exact", "HasAns_f1", "NoAns_exact", "NoAns_f1", "best_exact",
                            "best_exact_thresh", "best_f1", "best_f1_thresh") if k in results))
  return (f"SQuAD v1.1 on {results['num_questions']} questions of {predict_file}: "
          f"exact_match = {results['exact_match']:.2f}, f1 = {results['f1']:.2f}")


def summary_line(seconds, stats, results, model_dir):
  """What train.py did, in one line: time, steps and rate, scores and where the outputs are.

  Args:
    seconds: the whole command's wall time.
    stats: `train`'s figures (None without training).
    results: the eval results (None without prediction).
    model_dir: the --model_dir; its outputs are named when they are there.
  """
  parts = [f"done in {progress_lib.format_seconds(seconds)}"]
  if stats and stats["steps"]:
    rate = stats["steps"] * stats["effective_batch_size"] / stats["train_seconds"]
    parts.append(f"trained steps {stats['start_step']}..{stats['end_step']} in "
                 f"{progress_lib.format_seconds(stats['train_seconds'])} ({rate:.1f} examples/s, "
                 f"loss {stats['loss']:.4f} over steps {stats['loss_steps'][0]}.."
                 f"{stats['loss_steps'][1]})")
    if stats.get("scoring_seconds"):
      parts[-1] += (f" and {progress_lib.format_seconds(stats['scoring_seconds'])} scoring the "
                    f"learning curve")
  if results and "exact_match" in results:
    parts.append(f"EM {results['exact_match']:.2f} / F1 {results['f1']:.2f} on "
                 f"{results['num_questions']:,} questions")
  elif results:
    parts.append(f"exact {results['exact']:.2f} / F1 {results['f1']:.2f} on "
                 f"{results['total']:,} questions")
  outputs = ["checkpoints", artifacts.QA_CONFIG_FILE]
  if results:
    outputs += [
        artifacts.PREDICTIONS_FILE, artifacts.NBEST_PREDICTIONS_FILE, artifacts.EVAL_RESULTS_FILE
    ]
  if stats and stats.get("learning_curve"):
    outputs.append(artifacts.LEARNING_CURVE_FILE)
  # Only what is there: predicting from --init_checkpoint writes no checkpoint, a finished run
  # started again no learning curve.
  on_disk = {"checkpoints": "checkpoint"}  # the checkpoints' state file
  outputs = [
      name for name in outputs
      if tf.io.gfile.exists(os.path.join(model_dir, on_disk.get(name, name)))
  ]
  if stats:
    outputs.append(f"TensorBoard logs (tensorboard --logdir={model_dir})")
  if outputs:
    parts.append(f"in {model_dir}: " + ", ".join(outputs))
  return "; ".join(parts)


def decoding_settings(config, meta):
  """`config`'s `span_decoding.DecodingSettings`, SQuAD 2.0 also when the records (`meta`) are.
  Scoring a trained --model_dir alone (--do_train=false), a setting not typed is the one its
  qa_config.json records: what export.py serves."""
  values = settings.values(config, span_decoding.DecodingSettings)
  if not config.do_train:
    recorded = artifacts.read_qa_config(config.model_dir)
    taken = {
        name: recorded[name] for name in values
        if name in recorded and name != "version_2_with_negative" and not config.given(name)
    }
    unlike_flags = {name: value for name, value in taken.items() if value != values[name]}
    if unlike_flags:
      logging.info("scoring with %s's %s, as %s serves (a flag names another)",
                   artifacts.QA_CONFIG_FILE,
                   ", ".join(f"{name}={value}" for name, value in unlike_flags.items()),
                   commands.command("squad-qa-export"))
    values.update(taken)
  values["version_2_with_negative"] = bool(config.version_2_with_negative or
                                           meta["flags"].get("version_2_with_negative", False))
  return span_decoding.DecodingSettings(**values)


def record_decoding(model_dir, decoding):
  """After scoring a trained `model_dir` alone: its qa_config.json records the settings of
  `decoding` (a `span_decoding.DecodingSettings`) the dev set was scored with, which export.py
  then serves; logs what changed. Nothing without a qa_config.json."""
  recorded = artifacts.read_qa_config(model_dir)
  changed = {
      name: value
      for name, value in settings.values(decoding, span_decoding.DecodingSettings).items()
      if name in recorded and recorded[name] != value
  }
  if not changed:
    return
  artifacts.write_json(os.path.join(model_dir, artifacts.QA_CONFIG_FILE), {**recorded, **changed})
  logging.info(
      "%s: %s, as this scoring (what %s serves from now on)", artifacts.QA_CONFIG_FILE,
      ", ".join(f"{name}={value} (was {recorded[name]})" for name, value in changed.items()),
      commands.command("squad-qa-export"))


def _qa_config_writer(config, config_file, bert_config, meta, decoding, start):
  """A function writing --model_dir's qa_config.json and train_config.json, the latter with the
  steps --train_budget planned (its argument, or None)."""

  def write_qa_config(planned_train_steps=None):
    artifacts.write_qa_config(config.model_dir, config_file, bert_config, meta,
                              settings.values(decoding, span_decoding.DecodingSettings),
                              start.recorded)
    artifacts.write_json(
        os.path.join(config.model_dir, artifacts.TRAIN_CONFIG_FILE),
        dataclasses.asdict(dataclasses.replace(config, planned_train_steps=planned_train_steps)))

  return write_qa_config


@contextlib.contextmanager
def _output_errors(config, meta):
  """Within: a damaged records shard (read by training or scoring) raises one line naming it; a
  full disk under --model_dir (outside a checkpoint save, which says more) `errors.NoSpaceError`."""
  try:
    yield
  except tf.errors.DataLossError:
    damaged = records.damaged_shard_error(config.records_dir, meta)
    if damaged is None:
      raise
    raise damaged from None
  except (tf.errors.OpError, OSError) as e:
    if isinstance(e, errors.UserError) or not artifacts.is_no_space(e):
      raise
    raise errors.NoSpaceError(
        f"--model_dir={config.model_dir}: no space left on the device; free space (or pass "
        f"another --model_dir) and run the same command again") from None


def train_and_evaluate(config, clock=time.monotonic, started_seconds_ago=0.0):
  """Fine-tunes (`do_train`), then predicts and scores dev (`do_predict`) on the chief, which
  holds --model_dir's lock (`base.artifacts.folder_lock`) meanwhile.

  Args:
    config: a `tasks.train_config.TrainConfig`.
    clock: a function returning seconds, which --train_budget plans on.
    started_seconds_ago: seconds the command ran before this call (its start-up: train.py passes
      `progress.seconds_since_process_start`), counted in the budget and the summary's time.

  Returns:
    The eval results (a dict, also in model_dir/eval_results.json), or None without prediction
    or on a worker that is not the chief.

  Raises:
    errors.UserError: anything the user can fix (one line; several for a memory diagnosis),
      among them another process training into --model_dir, a --model_dir that is not writable,
      a full disk and a damaged shard.
  """
  started, budget_started = time.time() - started_seconds_ago, clock() - started_seconds_ago
  if config.gpu and not tf.config.list_physical_devices("GPU"):
    raise errors.UsageError(
        "--gpu: TensorFlow sees no GPU (tf.config.list_physical_devices('GPU') is empty); install "
        "a CUDA build of TensorFlow or drop --gpu to train on the CPU")
  bert_config, config_file, meta = run_inputs.bert_config_and_meta(config)
  predict_file = config.predict_file or run_inputs.default_predict_file(meta)
  # Before any other TensorFlow work: multi-worker collectives are set up here.
  strategy = distribution.make_strategy(config.distribution_strategy, config.num_gpus,
                                        config.all_reduce_alg, config.tpu, config.num_cpu_devices)
  is_chief = distribution.is_chief(strategy)
  if (config.do_predict and is_chief) or (config.do_train and config.eval_every_steps):
    # Now, not after training, and before --model_dir is made.
    typed = config.predict_file is not None
    run_inputs.check_predict_file(predict_file, meta, config.records_dir, typed)
  lock = (artifacts.folder_lock("model_dir", config.model_dir, commands.command("squad-qa-train"))
          if is_chief else contextlib.nullcontext())
  with lock, _output_errors(config, meta):
    return _train_and_score(config, strategy, (bert_config, config_file, meta, predict_file),
                            started, (clock, budget_started))


def _train_and_score(config, strategy, inputs, started, budget_clock):
  """`train_and_evaluate` once the strategy is made and --model_dir locked; `inputs` is
  (BertConfig, its file, the records' meta, the dev file), `started` the command's start time
  (time.time()), `budget_clock` (the clock --train_budget plans on, its reading at the start)."""
  bert_config, config_file, meta, predict_file = inputs
  decoding = decoding_settings(config, meta)
  is_chief = distribution.is_chief(strategy)
  logging.info("strategy: %s, %s%s",
               type(strategy).__name__, counted(strategy.num_replicas_in_sync, "replica"),
               "" if is_chief else " (not the chief)")
  run_plan.set_precision(config)
  tf_keras.utils.set_random_seed(config.seed)
  start = model_dir_lib.decide_start(config.model_dir, config.init_checkpoint)

  write_qa_config = _qa_config_writer(config, config_file, bert_config, meta, decoding, start)

  def dev_scorer():  # reads the dev files once, for the learning curve and the score
    return evaluation.DevScorer(config.records_dir, meta, predict_file, config.predict_batch_size,
                                decoding, config.max_eval_examples)

  # --train_budget times a scoring (the chief) before training.
  scores = config.eval_every_steps or (config.train_budget and config.do_predict and is_chief)
  scorer = dev_scorer() if config.do_train and scores else None
  stats = curve = None
  if config.do_train:
    model, stats, curve = train(config, strategy, bert_config, meta, start,
                                write_qa_config if is_chief else None, scorer, budget_clock)
    # The trainer begins its watchers only when it trains: a run already at its last step
    # begins the curve here (its final point may be missing).
    if curve and not stats["steps"] and stats["end_step"] == curve.final_step:
      curve.begin(stats["end_step"], stats["effective_batch_size"])
    results_file = os.path.join(config.model_dir, artifacts.TRAIN_RESULTS_FILE)
    # A finished run started again trains nothing and keeps the results of its training.
    if is_chief and (stats["steps"] or not tf.io.gfile.exists(results_file)):
      artifacts.write_json(results_file, stats)
  else:
    with strategy.scope():
      model = restore_for_prediction(config, bert_config, start)
  if not config.do_predict or not is_chief:
    if is_chief:
      print(summary_line(time.time() - started, stats, None, config.model_dir))
    return None
  with strategy.scope():
    model = float32_model(model, bert_config)
  scorer = scorer or dev_scorer()
  with strategy.scope():
    results = evaluation.score_and_write(scorer, model, config.model_dir)
  if not config.do_train:
    record_decoding(config.model_dir, decoding)
  if curve:
    curve.add_final_score(results)
  print(score_line(results, predict_file, decoding.version_2_with_negative))
  print(summary_line(time.time() - started, stats, results, config.model_dir))
  return results
