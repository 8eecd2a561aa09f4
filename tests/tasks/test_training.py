"""Training pieces of train.py: loss, the mixed_float16 and mixed_bfloat16 paths (on the CPU),
overfitting real features."""

import json
import math

import numpy as np
import pytest
import tensorflow as tf
import tf_keras

from squad_qa import errors
from squad_qa.base import commands
from squad_qa.model import bert_config as bert_config_lib
from squad_qa.model import precision
from squad_qa.model import span_model
from squad_qa.preprocess import make_records_job
from squad_qa.preprocess import records
from squad_qa.tasks import optimization
from squad_qa.tasks import question_answering
from squad_qa.tasks import run_inputs
from squad_qa.tasks import train_config
from tests import testutil


@pytest.fixture
def float32_policy_after():
  yield
  tf_keras.mixed_precision.set_global_policy("float32")


def test_span_loss_of_uniform_logits_is_log_seq():
  logits = tf.zeros([3, 10])
  loss = question_answering.span_loss(tf.constant([0, 4, 9]), tf.constant([1, 5, 9]), logits,
                                      logits)
  assert float(loss) == pytest.approx(math.log(10), rel=1e-6)
  # A confident right answer costs ~0; the loss averages start and end.
  start = tf.one_hot([2], 10) * 100.0
  end = tf.zeros([1, 10])
  loss = question_answering.span_loss(tf.constant([2]), tf.constant([7]), start, end)
  assert float(loss) == pytest.approx(math.log(10) / 2, rel=1e-5)


def test_mixed_float16_path_on_cpu(float32_policy_after):
  assert question_answering.set_precision_policy("float16") == "mixed_float16"
  tf_keras.utils.set_random_seed(1)
  model, encoder = span_model.build_span_model(
      bert_config_lib.BertConfig.from_dict(testutil.TINY_BERT_CONFIG))
  assert encoder.dtype_policy.name == "mixed_float16"
  batch = testutil.real_train_batch(4)
  # The encoder's projections compute in half precision (tfm keeps its layer norms in float32).
  projections = [l for l in encoder.submodules if isinstance(l, tf_keras.layers.EinsumDense)]
  assert len(projections) >= 2 * 4  # q, k, v, attention output per layer
  assert {l.compute_dtype for l in projections} == {"float16"}
  start_logits, end_logits = model(span_model.model_inputs(batch))
  assert start_logits.dtype == tf.float32 and end_logits.dtype == tf.float32
  optimizer = optimization.create_optimizer(1e-4, 10, 0.1, loss_scale=True)
  assert isinstance(optimizer, tf_keras.mixed_precision.LossScaleOptimizer)
  assert optimizer.dynamic
  assert all(v.dtype == tf.float32 for v in model.trainable_variables)  # float32 master weights
  step = question_answering.make_train_step(model, optimizer)
  losses = [float(step(batch)) for _ in range(3)]
  assert all(math.isfinite(l) for l in losses)
  assert int(optimizer.iterations) == 3
  assert float(optimizer.loss_scale) > 1.0  # dynamic scaling is active (starts at 2**15)


def test_precision_policies_and_unknown_dtype(float32_policy_after):
  assert question_answering.set_precision_policy("bfloat16") == "mixed_bfloat16"
  assert tf_keras.mixed_precision.global_policy().name == "mixed_bfloat16"
  assert question_answering.set_precision_policy("float32") == "float32"
  with pytest.raises(ValueError, match="expected one of float32, float16, bfloat16"):
    question_answering.set_precision_policy("mixed_float16")


def test_mixed_bfloat16_gradients_match_float32(float32_policy_after):
  """The same weights and real batch under float32 and mixed_bfloat16 (dropout off), compiled as
  train.py compiles them (XLA for bfloat16 where the CPU has no bfloat16 matmuls): bfloat16
  compute (8-bit mantissa, relative rounding 2^-9) gives gradients pointing the same way, each
  weight's within a few percent, and no loss scaling is involved."""
  config = bert_config_lib.BertConfig.from_dict(
      dict(testutil.TINY_BERT_CONFIG, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0))
  batch = testutil.real_train_batch(8)
  results = {}
  for dtype in ("float32", "bfloat16"):
    question_answering.set_precision_policy(dtype)
    tf_keras.utils.set_random_seed(3)  # the same initial weights under both policies
    model, encoder = span_model.build_span_model(config)
    optimizer = optimization.create_optimizer(1e-4, 10, 0.1, loss_scale=False)
    jit = train_config.TrainConfig(mixed_precision_dtype=dtype).use_xla
    loss, grads = tf.function(question_answering.make_gradient_fn(model, optimizer),
                              jit_compile=jit)(batch)
    results[dtype] = (float(loss), [tf.convert_to_tensor(g).numpy() for g in grads],
                      model.get_weights(), encoder)
  (loss32, grads32, weights32, _), (loss16, grads16, weights16, encoder16) = (results["float32"],
                                                                              results["bfloat16"])
  assert all(np.array_equal(a, b) for a, b in zip(weights32, weights16))
  projections = [l for l in encoder16.submodules if isinstance(l, tf_keras.layers.EinsumDense)]
  assert {l.compute_dtype for l in projections} == {"bfloat16"}
  assert all(g.dtype == np.float32 for g in grads16)
  assert loss16 == pytest.approx(loss32, rel=2e-2)
  flat32, flat16 = np.concatenate([g.ravel() for g in grads32
                                  ]), np.concatenate([g.ravel() for g in grads16])
  cosine = flat32 @ flat16 / (np.linalg.norm(flat32) * np.linalg.norm(flat16))
  assert cosine > 0.999
  # Key biases, the logits' bias and the last layer norm's beta shift every logit of a softmax
  # alike: their true gradient is 0 (float32 leaves ~1e-9 of rounding, bfloat16 more).
  total = np.linalg.norm(flat32)
  zero = [np.linalg.norm(b) for a, b in zip(grads32, grads16) if np.linalg.norm(a) < 1e-7 * total]
  assert len(zero) == 4 and max(zero) < 1e-3 * total  # 2 key biases, beta, logits bias
  relative = [
      np.linalg.norm(a - b) / np.linalg.norm(a) for a, b in zip(grads32, grads16)
      if np.linalg.norm(a) >= 1e-7 * total
  ]
  assert max(relative) < 0.1
  assert np.median(relative) < 0.03


def test_xla_sums_bfloat16_einsums_in_float32():
  """XLA's bfloat16 einsum (as EinsumDense computes it) is off from the exact sum of its bfloat16
  operands by its output rounding only, as tf.matmul is; TensorFlow's own einsum kernel is so too
  where the CPU has bfloat16 matmuls, and far off elsewhere (`precision.bfloat16_needs_xla`)."""
  rng = np.random.default_rng(0)
  inputs = tf.cast(rng.standard_normal((4, 64, 1024)), tf.bfloat16)
  kernel = tf.cast(rng.standard_normal((1024, 64)), tf.bfloat16)
  exact = np.einsum("abc,cd->abd", tf.cast(inputs, tf.float64), tf.cast(kernel, tf.float64))

  def error(result):  # median absolute error over the mean magnitude
    return np.median(np.abs(tf.cast(result, tf.float64).numpy() - exact)) / np.abs(exact).mean()

  einsum = lambda a, b: tf.einsum("abc,cd->abd", a, b)
  rounding = error(tf.matmul(inputs, kernel))
  assert 2**-11 < rounding < 2**-8  # bfloat16 output rounding (2^-9 relative at most)
  assert error(tf.function(einsum, jit_compile=True)(inputs, kernel)) < 1.5 * rounding
  if precision.bfloat16_needs_xla():
    assert error(einsum(inputs, kernel)) > 4 * rounding
  elif precision.cpu_has_native_bfloat16():
    assert error(einsum(inputs, kernel)) < 1.5 * rounding


@pytest.mark.slow
def test_train_py_trains_and_predicts_under_bfloat16(tmp_path):
  """train.py --mixed_precision_dtype=bfloat16 on the CPU: mixed_bfloat16 is what trains (the log's
  batch line, train_results.json), no loss scale is checkpointed, and the prediction after training
  is the float32 model's: the same predictions.json as a float32 prediction-only run."""
  records_dir = testutil.make_train_records(tmp_path, 24, num_shards=None, dev_questions=8)
  dev_file, model_dir = tmp_path / "dev.json", tmp_path / "model"
  _, log = testutil.run_cli(
      "train.py", f"--records_dir={records_dir}", f"--model_dir={model_dir}",
      f"--bert_config_file={testutil.write_tiny_config(tmp_path / 'bert_config.json')}",
      "--mixed_precision_dtype=bfloat16", "--max_steps=2", "--train_batch_size=8",
      f"--predict_file={dev_file}")
  assert "accumulated, mixed_bfloat16;" in log
  with open(model_dir / "train_results.json") as f:
    assert json.load(f)["mixed_precision_dtype"] == "bfloat16"
  with open(model_dir / "train_config.json") as f:  # the run's TrainConfig, beside the model
    saved = json.load(f)
  assert saved["mixed_precision_dtype"] == "bfloat16" and saved["max_steps"] == 2
  assert saved["records_dir"] == str(records_dir) and saved["learning_rate"] == 5e-5
  assert train_config.TrainConfig(**{**saved, "length_buckets": "auto"}).train_batch_size == 8
  names = [name for name, _ in tf.train.list_variables(tf.train.latest_checkpoint(model_dir))]
  assert not [name for name in names if "loss_scale" in name]
  assert any(name.startswith("optimizer/") for name in names)
  with open(model_dir / "eval_results.json") as f:
    results = json.load(f)
  assert results["num_questions"] == 8 and 0.0 <= results["f1"] <= 100.0
  # The command as it was started: from a clone, its file.
  assert ("predicting with a float32 copy of the mixed_bfloat16 model (what python export.py "
          "serves)") in log
  with open(model_dir / "predictions.json") as f:
    after_training = json.load(f)
  _, log = testutil.run_cli("train.py", f"--records_dir={records_dir}", f"--model_dir={model_dir}",
                            "--do_train=false", f"--predict_file={dev_file}",
                            "--mixed_precision_dtype=bfloat16")
  assert "float32 copy" not in log
  assert ("--mixed_precision_dtype=bfloat16 is the training dtype; --do_train=false predicts in "
          "float32" in log)
  with open(model_dir / "predictions.json") as f:
    assert json.load(f) == after_training
  assert len(after_training) == 8


@pytest.mark.slow
def test_gpu_flag_without_gpu_is_a_clear_error():
  returncode, output = testutil.run_cli("train.py", "--gpu", "--records_dir=/nonexistent",
                                        expect_ok=False)
  assert returncode != 0
  assert "--gpu: TensorFlow sees no GPU" in output
  assert "Traceback" not in output


def test_tiny_model_memorizes_8_real_features():
  question_answering.set_precision_policy("float32")
  tf_keras.utils.set_random_seed(7)
  config = bert_config_lib.BertConfig.from_dict(
      dict(testutil.TINY_BERT_CONFIG, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0))
  model, _ = span_model.build_span_model(config)
  batch = testutil.real_train_batch(8)
  steps = 150
  optimizer = optimization.create_optimizer(2e-3, steps, 0.1, loss_scale=False)
  step = question_answering.make_train_step(model, optimizer)
  first = float(step(batch))
  for _ in range(steps - 1):
    last = float(step(batch))
  start_logits, end_logits = model(span_model.model_inputs(batch), training=False)
  start_accuracy = np.mean(np.argmax(start_logits, -1) == batch["start_positions"].numpy())
  end_accuracy = np.mean(np.argmax(end_logits, -1) == batch["end_positions"].numpy())
  assert first > 4.0  # ~log(128) at random init
  assert last < 0.1 * first
  assert start_accuracy >= 0.9 and end_accuracy >= 0.9


@pytest.mark.parametrize("case", ["missing", "other"])
def test_a_predict_file_that_cannot_score_stops_train_py_before_training(tmp_path, case):
  """The dev file is checked before the first step, not after the training it would score: that
  it is there, and that it is the file the eval records were made from (its SHA-256 against
  meta.json's)."""
  records_dir = testutil.make_train_records(tmp_path, 24, num_shards=None, dev_questions=4)
  model_dir = tmp_path / "model"
  if case == "missing":
    predict_file = tmp_path / "nowhere" / "dev-v1.1.json"
    expected = (f"--predict_file: no file at '{predict_file}'. SQuAD v1.1 is published at "
                f"https://rajpurkar.github.io/SQuAD-explorer/ (train-v1.1.json, dev-v1.1.json); "
                f"download it and set SQUAD_DIR=<folder holding it> or pass "
                f"--predict_file=<path>.")
  else:
    predict_file = testutil.write_squad_slice(testutil.DEV_FILE, tmp_path / "other.json", 6)
    expected = (f"--predict_file={predict_file} is not the file the eval records were made from "
                f"({tmp_path / 'dev.json'}); pass that file or make the records again with python "
                f"preprocess/make_records.py")
  code, log = testutil.run_cli(
      "train.py", f"--records_dir={records_dir}", f"--model_dir={model_dir}",
      f"--bert_config_file={testutil.write_tiny_config(tmp_path / 'bert_config.json')}",
      "--max_steps=2", "--train_batch_size=8", f"--predict_file={predict_file}", expect_ok=False)
  assert code != 0 and "Traceback" not in log
  assert log.strip().splitlines()[-1] == f"train.py: {expected}"
  assert "training steps" not in log and not model_dir.exists()  # refused before it is made


def test_the_default_predict_file_names_the_records_source_when_it_is_gone_or_changed(tmp_path):
  """A source edited since the records is named as changed (typed or not); without --predict_file,
  a source gone is named, with the fix."""
  records_dir = testutil.make_train_records(tmp_path, 4, dev_questions=3)
  meta, source = records.read_meta(records_dir), tmp_path / "dev.json"
  remake = commands.command("squad-qa-records")
  run_inputs.check_predict_file(str(source), meta, records_dir, typed=False)  # as made: no error
  source.write_text(source.read_text() + " ")
  with pytest.raises(errors.UsageError) as changed:
    run_inputs.check_predict_file(str(source), meta, records_dir, typed=False)
  assert str(changed.value) == (
      f"{source} changed since the eval records in {records_dir} were made from it: make the "
      f"records again with {remake}, or pass --predict_file=<the file as it was>")
  with pytest.raises(errors.UsageError) as typed:  # the same path typed: still "changed"
    run_inputs.check_predict_file(str(source), meta, records_dir, typed=True)
  assert str(typed.value) == str(changed.value)
  source.unlink()
  with pytest.raises(errors.UsageError) as gone:
    run_inputs.check_predict_file(str(tmp_path / "squad" / "dev-v1.1.json"), meta, records_dir,
                                  typed=False)
  assert str(gone.value) == (
      f"the eval records in {records_dir} were made from {source}, which is no longer there: "
      f"pass --predict_file=<that file> or make the records again with {remake}")


def test_records_without_a_train_split_say_to_only_predict(tmp_path):
  """Records made from a dev file alone cannot train: train.py's default --do_train says to pass
  --do_train=false in one line, not a KeyError traceback."""
  dev_file = testutil.write_squad_slice(testutil.DEV_FILE, tmp_path / "dev.json", 4)
  make_records_job.make_records(  # make_records.py's job, in-process; train.py is the command here
      make_records_job.RecordsConfig(predict_file=dev_file, vocab_file=testutil.vocab_file(),
                                     max_seq_length=64, doc_stride=32, max_query_length=16,
                                     output_dir=str(tmp_path / "records"), num_workers=1))
  code, log = testutil.run_cli(
      "train.py", f"--records_dir={tmp_path / 'records'}", f"--model_dir={tmp_path / 'model'}",
      f"--bert_config_file={testutil.write_tiny_config(tmp_path / 'bert_config.json')}",
      f"--predict_file={dev_file}", expect_ok=False)
  assert code != 0 and "Traceback" not in log
  assert log.strip().splitlines()[-1] == (
      f"train.py: the records in {tmp_path / 'records'} hold no train split (python "
      f"preprocess/make_records.py was given no --train_file): pass --do_train=false to only "
      f"predict, or make the records again with a --train_file")


def test_records_without_an_eval_split_say_to_train_only(tmp_path):
  """Records made without --predict_file cannot be scored: train.py says to pass
  --do_predict=false, not to download a dev file, before training."""
  records_dir = testutil.make_train_records(tmp_path, 24, num_shards=None)
  model_dir = tmp_path / "model"
  code, log = testutil.run_cli(
      "train.py", f"--records_dir={records_dir}", f"--model_dir={model_dir}",
      f"--bert_config_file={testutil.write_tiny_config(tmp_path / 'bert_config.json')}",
      "--max_steps=2", "--train_batch_size=8", expect_ok=False)
  assert code != 0 and "Traceback" not in log
  assert log.strip().splitlines()[-1] == (
      f"train.py: the records in {records_dir} hold no eval split (python "
      f"preprocess/make_records.py was given no --predict_file): pass --do_predict=false to train "
      f"only, or make the records again with a --predict_file")
  assert not tf.train.latest_checkpoint(str(model_dir))


def test_train_py_scores_against_the_file_the_eval_records_were_made_from(tmp_path, monkeypatch):
  """No --predict_file: the eval records' own source while it exists, else $SQUAD_DIR's dev file."""
  monkeypatch.setenv("SQUAD_DIR", str(tmp_path / "squad"))
  source = tmp_path / "dev_slice.json"
  source.write_text("{}")
  meta = {"splits": {"eval": {"input_file": str(source)}}}
  assert run_inputs.default_predict_file(meta) == str(source)
  source.unlink()
  assert run_inputs.default_predict_file(meta) == str(tmp_path / "squad" / "dev-v1.1.json")
  assert (run_inputs.default_predict_file({"splits": {}
                                          }) == str(tmp_path / "squad" / "dev-v1.1.json"))


def test_a_sigterm_after_the_last_check_stops_the_command_once_training_ends(tmp_path):
  """TF's preemption handler only flags a SIGTERM for the next check between loops; one that comes
  after the last check is acted on when training ends (the command's Terminated), and SIGTERM is
  the command's handler again either way."""
  import os  # pylint: disable=g-import-not-at-top
  import signal  # pylint: disable=g-import-not-at-top
  import time  # pylint: disable=g-import-not-at-top
  from squad_qa.flags import command_line  # pylint: disable=g-import-not-at-top
  from squad_qa.tasks import trainer as trainer_lib  # pylint: disable=g-import-not-at-top
  step = tf.Variable(0, dtype=tf.int64)
  manager = tf.train.CheckpointManager(tf.train.Checkpoint(step=step), str(tmp_path), 1)
  command_handler = signal.getsignal(signal.SIGTERM)

  def handler():
    return trainer_lib.SaveAndStopOnSigterm(
        tf.distribute.cluster_resolver.TFConfigClusterResolver(), manager, step)

  quiet = handler()
  with quiet.handling():
    assert signal.getsignal(signal.SIGTERM) is not command_handler  # TF's, noted
  assert signal.getsignal(signal.SIGTERM) is command_handler and not quiet.received
  late = handler()
  with pytest.raises(command_line.Terminated):
    with late.handling():
      os.kill(os.getpid(), signal.SIGTERM)
      time.sleep(0.2)  # the handler runs; training would have no check left
  assert signal.getsignal(signal.SIGTERM) is command_handler
  failing = handler()
  with pytest.raises(ValueError):  # an error on the way out is not replaced by the SIGTERM
    with failing.handling():
      os.kill(os.getpid(), signal.SIGTERM)
      time.sleep(0.2)
      raise ValueError("out of memory")
  assert signal.getsignal(signal.SIGTERM) is command_handler


def test_a_sigterm_stop_writes_its_loop_summaries_first(tmp_path):
  """orbit writes a loop's summaries after its train actions, so the action that saves and exits
  on a SIGTERM writes them itself: TensorBoard's train curve reaches the saved step."""
  import os  # pylint: disable=g-import-not-at-top
  from squad_qa.flags import command_line  # pylint: disable=g-import-not-at-top
  from squad_qa.tasks import trainer as trainer_lib  # pylint: disable=g-import-not-at-top
  step = tf.Variable(14, dtype=tf.int64)
  manager = tf.train.CheckpointManager(tf.train.Checkpoint(step=step), str(tmp_path), 1)
  summary_dir = str(tmp_path / "train")
  sigterm = trainer_lib.SaveAndStopOnSigterm(
      tf.distribute.cluster_resolver.TFConfigClusterResolver(), manager, step,
      summary_dir=summary_dir)
  with sigterm.handling():
    sigterm({"loss": tf.constant(2.5), "learning_rate": 1e-4})  # no signal yet: nothing written
    assert not os.path.exists(summary_dir)
    sigterm.received = True  # as the handler notes a SIGTERM
    with pytest.raises(SystemExit) as exited:
      sigterm({"loss": tf.constant(1.25), "learning_rate": 2e-4})
    sigterm.received = False
  assert exited.value.code == command_line.PREEMPTED_EXIT_STATUS
  assert manager.latest_checkpoint == os.path.join(str(tmp_path), "ckpt-14")
  scalars = {}
  for path in tf.io.gfile.glob(os.path.join(summary_dir, "events.out.tfevents.*")):
    for event in tf.compat.v1.train.summary_iterator(path):
      for value in event.summary.value:
        scalars[(value.tag, event.step)] = float(tf.make_ndarray(value.tensor))
  assert scalars == {("loss", 14): 1.25, ("learning_rate", 14): pytest.approx(2e-4)}


def test_a_sigterm_during_a_scoring_between_loops_saves_this_step_and_stops(tmp_path, capsys):
  """A learning-curve scoring (`interruptible` work) is stopped by a SIGTERM at once: the
  checkpoint of the current step is saved and the command exits as after a SIGTERM between loops
  (TF's handler would save only after the scoring and one more loop)."""
  import os  # pylint: disable=g-import-not-at-top
  import signal  # pylint: disable=g-import-not-at-top
  import time  # pylint: disable=g-import-not-at-top
  from squad_qa.flags import command_line  # pylint: disable=g-import-not-at-top
  from squad_qa.tasks import trainer as trainer_lib  # pylint: disable=g-import-not-at-top
  step = tf.Variable(20, dtype=tf.int64)
  manager = tf.train.CheckpointManager(tf.train.Checkpoint(step=step), str(tmp_path), 1)
  command_handler = signal.getsignal(signal.SIGTERM)
  sigterm = trainer_lib.SaveAndStopOnSigterm(
      tf.distribute.cluster_resolver.TFConfigClusterResolver(), manager, step)
  scored = []
  with pytest.raises(SystemExit) as exited:
    with sigterm.handling():
      with sigterm.interruptible():  # no signal: the work runs to its end
        scored.append("step 10")
      with sigterm.interruptible():
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(5)  # a long scoring: the handler stops it
        scored.append("step 20")
  assert exited.value.code == command_line.PREEMPTED_EXIT_STATUS and scored == ["step 10"]
  assert manager.latest_checkpoint == os.path.join(str(tmp_path), "ckpt-20")
  assert "stopped by SIGTERM at step 20: saved " in capsys.readouterr().err
  assert signal.getsignal(signal.SIGTERM) is command_handler
