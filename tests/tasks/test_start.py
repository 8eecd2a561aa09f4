"""Where a run starts: --init_checkpoint wins or the command refuses; clean --model_dir outcomes.

Pinned: train.py does not resume a --model_dir, nor export.py export ./model_out, while
--init_checkpoint names something else; a failed run leaves no qa_config.json; a `checkpoint` file
naming a deleted checkpoint is one line; a run with nothing left to train prints no
unrestored-values warnings; one step reports no examples/s.
"""

import dataclasses
import gc
import json
import logging as std_logging
import os
import shutil

import numpy as np
import pytest
import tensorflow as tf
from absl import flags
from absl import logging
from absl.testing import flagsaver

from squad_qa import errors
from squad_qa.base import artifacts
from squad_qa.flags import settings
from squad_qa.model import bert_config as bert_config_lib
from squad_qa.model import checkpoints
from squad_qa.model import span_model
from squad_qa.postprocess import span_decoding
from squad_qa.serving import export_model
from squad_qa.tasks import model_dir as model_dir_lib
from squad_qa.tasks import question_answering
from squad_qa.tasks import run_plan
from squad_qa.tasks import train_and_evaluate
from squad_qa.tasks import trainer as trainer_lib
from tests import testutil

SEQ = 32


def tiny_config(**overrides):
  return bert_config_lib.BertConfig.from_dict(dict(testutil.TINY_BERT_CONFIG, **overrides))


def save_steps(folder, *steps):
  """A --model_dir as tf.train.CheckpointManager leaves it: ckpt-<step> for each step."""
  manager = tf.train.CheckpointManager(tf.train.Checkpoint(v=tf.Variable(1.0)), str(folder),
                                       max_to_keep=None)
  for step in steps:
    manager.save(checkpoint_number=step)
  return str(folder)


def write_qa_config(folder, **entries):
  with open(os.path.join(folder, artifacts.QA_CONFIG_FILE), "w") as f:
    json.dump(entries, f)


@pytest.fixture
def init_and_model_dir(tmp_path):
  """An --init_checkpoint (TF2 folder, latest init/ckpt-7) and a --model_dir that started
  from it."""
  init = save_steps(tmp_path / "init", 7)
  model_dir = save_steps(tmp_path / "model_out", 2, 4)
  write_qa_config(model_dir, init_checkpoint=os.path.realpath(os.path.join(init, "ckpt-7")))
  return init, model_dir


def test_a_new_model_dir_starts_from_the_init_checkpoint(tmp_path, init_and_model_dir):
  init, _ = init_and_model_dir
  expected = model_dir_lib.Start(
      init_checkpoint=init,
      recorded={"init_checkpoint": os.path.realpath(os.path.join(init, "ckpt-7"))})
  assert model_dir_lib.decide_start(str(tmp_path / "new"), init) == expected
  assert model_dir_lib.decide_start(None,
                                    init) == expected  # export.py given only --init_checkpoint
  assert model_dir_lib.decide_start(str(tmp_path / "new"),
                                    None) == model_dir_lib.Start(recorded={"init_checkpoint": None})
  # An HF folder is recorded as the real folder.
  assert model_dir_lib.decide_start(str(tmp_path / "new"),
                                    testutil.minilm_dir() + "/").recorded == {
                                        "init_checkpoint": os.path.realpath(testutil.minilm_dir())
                                    }


def test_rerunning_the_same_command_resumes_and_says_the_flag_is_ignored(init_and_model_dir):
  init, model_dir = init_and_model_dir
  latest = os.path.join(model_dir, "ckpt-4")
  recorded = {"init_checkpoint": os.path.realpath(os.path.join(init, "ckpt-7"))}
  for named in (init, init + "/", os.path.join(init, "ckpt-7"), os.path.join(init, "ckpt-7.index")):
    start = model_dir_lib.decide_start(model_dir, named)
    assert start == model_dir_lib.Start(
        resume=latest, recorded=recorded, ignored=
        (f"--init_checkpoint={named} is ignored: --model_dir={model_dir} started from it and holds "
         f"the training since (pass a new --model_dir to start again from it)"))
  assert start.describe(
      "resumed from",
      4) == (f"resumed from {latest} at step 4; --init_checkpoint={named} is ignored: "
             f"--model_dir={model_dir} started from it and holds the training since (pass a new "
             f"--model_dir to start again from it)")
  # Without --init_checkpoint, or naming the --model_dir itself: resume, nothing ignored.
  for named in (None, model_dir, latest):
    assert model_dir_lib.decide_start(model_dir,
                                      named) == model_dir_lib.Start(resume=latest,
                                                                    recorded=recorded)


def test_another_init_checkpoint_is_refused_in_one_line(tmp_path, init_and_model_dir):
  init, model_dir = init_and_model_dir
  other = save_steps(tmp_path / "other", 1)
  with pytest.raises(checkpoints.CheckpointError) as error:
    model_dir_lib.decide_start(model_dir, other)
  assert str(error.value) == (
      f"--model_dir={model_dir} already holds ckpt-4, which started from "
      f"{os.path.realpath(init)}/ckpt-7, and --init_checkpoint={other} names another start; pass "
      f"a new --model_dir to start from it, or drop --init_checkpoint to continue ckpt-4")
  # An older checkpoint of the same --model_dir is another start too.
  with pytest.raises(checkpoints.CheckpointError, match="names another start"):
    model_dir_lib.decide_start(model_dir, os.path.join(model_dir, "ckpt-2"))
  write_qa_config(model_dir, init_checkpoint=None)
  with pytest.raises(checkpoints.CheckpointError, match=", which started from random weights, "):
    model_dir_lib.decide_start(model_dir, init)
  os.remove(os.path.join(model_dir, artifacts.QA_CONFIG_FILE))  # a --model_dir of an older version
  with pytest.raises(checkpoints.CheckpointError) as error:
    model_dir_lib.decide_start(model_dir, init)
  assert str(error.value).startswith(
      f"--model_dir={model_dir} already holds ckpt-4, whose start is not recorded, and "
      f"--init_checkpoint={init} names another start")


def test_a_checkpoint_file_naming_a_deleted_checkpoint_is_one_line(init_and_model_dir):
  _, model_dir = init_and_model_dir
  for name in os.listdir(model_dir):
    if name.startswith("ckpt-4."):
      os.remove(os.path.join(model_dir, name))
  message = (f"--model_dir={model_dir}: its 'checkpoint' file names ckpt-4, whose files are gone "
             f"(ckpt-2 still there); delete {model_dir}/checkpoint to start afresh, or edit it to "
             f"name a checkpoint that exists")
  with pytest.raises(checkpoints.CheckpointError) as error:
    model_dir_lib.decide_start(model_dir, None)
  assert str(error.value) == message
  with pytest.raises(checkpoints.CheckpointError) as error:  # the same folder as --init_checkpoint
    checkpoints.checkpoint_prefix(model_dir)
  assert str(error.value) == message.replace("--model_dir=", "--init_checkpoint=")


def test_manager_calls_before_first_save_once_before_the_first_checkpoint(tmp_path):
  calls = []

  def before_first_save():
    calls.append(tf.train.latest_checkpoint(str(tmp_path)))

  manager = model_dir_lib.ModelDirCheckpointManager(tf.train.Checkpoint(v=tf.Variable(1.0)),
                                                    str(tmp_path), before_first_save, max_to_keep=3)
  manager.save(checkpoint_number=1)
  manager.save(checkpoint_number=2)
  assert calls == [None]
  assert tf.train.latest_checkpoint(str(tmp_path)).endswith("ckpt-2")


def synthetic_dataset(config, batch_size):
  rng = np.random.default_rng(0)
  batch = {
      "input_word_ids": rng.integers(1000, config.vocab_size, (batch_size, SEQ)).astype(np.int32),
      "input_mask": np.ones((batch_size, SEQ), np.int32),
      "input_type_ids": np.repeat([[0] * 8 + [1] * (SEQ - 8)], batch_size, 0).astype(np.int32),
      "start_positions": rng.integers(8, SEQ, batch_size).astype(np.int32),
      "end_positions": rng.integers(8, SEQ, batch_size).astype(np.int32)
  }
  return tf.data.Dataset.from_tensors(batch).repeat()


def make_task(config, steps):
  question_answering.set_precision_policy("float32")
  tf.keras.utils.set_random_seed(3)
  return question_answering.QuestionAnsweringTask(
      question_answering.QATaskConfig(bert_config=config, max_seq_length=SEQ,
                                      per_replica_batch_size=4, learning_rate=1e-3,
                                      num_train_steps=steps, warmup_proportion=0.0))


def run_trainer(config, model_dir, steps, start, qa_config, replica_step=None, watchers=()):
  """train.py's train() on one device with a synthetic batch: initialize as `start` says, then
  the orbit loop writing `qa_config` with the first checkpoint (and `watchers` after each loop)."""
  strategy = tf.distribute.OneDeviceStrategy("/cpu:0")
  task = make_task(config, steps)
  with strategy.scope():
    model = task.build_model()
    optimizer = task.create_optimizer()
    checkpoint = model_dir_lib.make_checkpoint(model, optimizer)
  if not start.resume and start.init_checkpoint:
    checkpoints.initialize_from(model, start.init_checkpoint)
  trainer = trainer_lib.QATrainer(strategy, replica_step or task.replica_step(model, optimizer),
                                  optimizer, 4)
  return trainer_lib.train(
      trainer, checkpoint, lambda context, skip: synthetic_dataset(config, 4).skip(skip),
      run_plan.RunPlan(model_dir=model_dir, num_train_steps=steps, save_checkpoints_steps=1,
                       steps_per_loop=1), start=start,
      before_first_save=lambda: artifacts.write_json(
          os.path.join(model_dir, artifacts.QA_CONFIG_FILE), qa_config), watchers=watchers)


@pytest.fixture
def tiny_init(tmp_path):
  """A TF2 checkpoint of the tiny span model (what a --model_dir of this tool holds)."""
  config = tiny_config()
  model = make_task(config, 1).build_model()
  prefix = tf.train.Checkpoint(model=model).save(str(tmp_path / "init" / "ckpt"))
  return config, str(tmp_path / "init"), prefix


def test_train_one_step_then_nothing_left_to_train(tiny_init, tmp_path, caplog):
  config, init, prefix = tiny_init
  model_dir = str(tmp_path / "model_out")
  start = model_dir_lib.decide_start(model_dir, init)
  # absl's logger level follows --verbosity once flags are parsed (WARNING): set it too.
  with caplog.at_level(std_logging.INFO), caplog.at_level(std_logging.INFO, logger="absl"):
    stats = run_trainer(config, model_dir, 1, start, {"max_seq_length": SEQ, **start.recorded})
  assert stats["steps"] == 1 and stats["last_loop_examples_per_second"] is None
  # The run's rate: 1 step of run_trainer's 4 features over the whole training time.
  assert stats["examples_per_second"] == pytest.approx(4 / stats["train_seconds"], rel=1e-6)
  assert "trained steps 0..1: loss " in caplog.text and "(mean of steps 1..1)" in caplog.text
  assert "speed n/a (one loop, whose time includes tracing)" in caplog.text
  assert "examples/s" not in caplog.text
  assert artifacts.read_qa_config(model_dir) == {
      "max_seq_length": SEQ,
      "init_checkpoint": os.path.realpath(prefix)
  }
  caplog.clear()
  # The same command again: nothing left to train, and TensorFlow has nothing to warn about.
  start = model_dir_lib.decide_start(model_dir, init)
  with caplog.at_level(std_logging.INFO), caplog.at_level(std_logging.INFO, logger="absl"):
    stats = run_trainer(config, model_dir, 1, start, {"max_seq_length": 999, **start.recorded})
    gc.collect()  # the checkpoint's deferred restorations warn when collected
  assert stats == {"steps": 0, "start_step": 1, "end_step": 1}
  assert (f"resumed from {model_dir}/ckpt-1 at step 1; --init_checkpoint={init} is ignored: "
          f"--model_dir={model_dir} started from it") in caplog.text
  assert "already trained 1 of 1 steps" in caplog.text
  assert "unrestored" not in caplog.text and "could not be found" not in caplog.text
  assert artifacts.read_qa_config(model_dir)["max_seq_length"] == SEQ  # no new checkpoint


class StepWatcher:
  """A train watcher that logs a line after each loop."""

  def begin(self, start_step, global_batch_size):
    del start_step, global_batch_size

  def loop_steps(self, step):
    del step
    return 1

  def __call__(self, output):
    del output
    logging.info("watched a loop")


def test_a_loop_s_progress_shows_before_its_checkpoint_line(tiny_init, tmp_path, caplog):
  """The watchers (the progress line or bar) run before the checkpoint action: the last step's
  line or complete bar comes before "saved checkpoint", which would otherwise cut the bar."""
  config, init, _ = tiny_init
  model_dir = str(tmp_path / "model_out")
  start = model_dir_lib.decide_start(model_dir, init)
  with caplog.at_level(std_logging.INFO), caplog.at_level(std_logging.INFO, logger="absl"):
    run_trainer(config, model_dir, 2, start, {"max_seq_length": SEQ}, watchers=[StepWatcher()])
  lines = [
      r.getMessage() for r in caplog.records
      if r.getMessage() == "watched a loop" or r.getMessage().startswith("saved checkpoint")
  ]
  assert lines == [
      "watched a loop", f"saved checkpoint {model_dir}/ckpt-1", "watched a loop",
      f"saved checkpoint {model_dir}/ckpt-2"
  ]


def test_failed_runs_leave_no_qa_config(tiny_init, tmp_path):
  config, init, _ = tiny_init
  # A starting checkpoint that does not fit the model.
  model_dir = str(tmp_path / "mismatch")
  with pytest.raises(checkpoints.CheckpointError, match=r"needs \(96,\)"):
    run_trainer(tiny_config(intermediate_size=96), model_dir, 2,
                model_dir_lib.decide_start(model_dir, init), {"max_seq_length": SEQ})
  assert not os.path.exists(os.path.join(model_dir, artifacts.QA_CONFIG_FILE))
  # Out of memory in the first step.
  model_dir = str(tmp_path / "oom")

  def out_of_memory_step(unused_batch):
    raise tf.errors.ResourceExhaustedError(None, None, "OOM when allocating tensor")

  with pytest.raises(trainer_lib.OutOfMemoryError, match="none \\(nothing saved yet\\)"):
    run_trainer(config, model_dir, 2, model_dir_lib.decide_start(model_dir, init),
                {"max_seq_length": SEQ}, replica_step=out_of_memory_step)
  assert not os.path.exists(os.path.join(model_dir, artifacts.QA_CONFIG_FILE))
  assert not tf.train.latest_checkpoint(model_dir)


# What TensorFlow raised on a CPU whose oneDNN kernels failed to allocate (address space capped).
ONEDNN_OUT_OF_MEMORY = (
    "Graph execution error:\n\nDetected at node while/body/_1/bert_span_model/bert_span_labeler/"
    "bert_encoder/transformer/layer_0/self_attention/softmax/Softmax defined at (most recent call "
    "last):\n<stack traces unavailable>\nOperation received an exception:Status: 1, message: could "
    "not create a primitive, in file tensorflow/core/kernels/mkl/mkl_softmax_op.cc:290\n\t "
    "[[{{node while/body/_1/bert_span_model/bert_span_labeler/bert_encoder/transformer/layer_0/"
    "self_attention/softmax/Softmax}}]] [Op:__inference_loop_fn_7979]")


@pytest.mark.parametrize(
    "message, out_of_memory",
    [
        (ONEDNN_OUT_OF_MEMORY, True),
        # Another oneDNN status (2: invalid arguments) is not out of memory: it is raised as it is.
        (ONEDNN_OUT_OF_MEMORY.replace("Status: 1,", "Status: 2,"), False)
    ])
def test_onednn_out_of_memory_is_reported_as_out_of_memory(tiny_init, tmp_path, message,
                                                           out_of_memory):
  config, init, _ = tiny_init
  model_dir = str(tmp_path / "onednn")

  def failing_step(unused_batch):
    raise tf.errors.AbortedError(None, None, message)

  expected = ((trainer_lib.OutOfMemoryError,
               r"step 1 ran out of memory \(oneDNN out of memory \(could not create a primitive\) "
               r"in Softmax\); the last checkpoint is none") if out_of_memory else
              (tf.errors.AbortedError, "Status: 2, message: could not create a primitive"))
  with pytest.raises(expected[0], match=expected[1]):
    run_trainer(config, model_dir, 2, model_dir_lib.decide_start(model_dir, init),
                {"max_seq_length": SEQ}, replica_step=failing_step)
  assert not tf.train.latest_checkpoint(model_dir)


# What TensorFlow raised when XLA's allocator failed inside a compiled attention function
# (address space capped; the traceback's lines cut).
XLA_OUT_OF_MEMORY = (
    "Graph execution error:\n\nDetected at node bert_span_model/bert_span_labeler/bert_encoder/"
    "transformer/layer_0/self_attention/PartitionedCall defined at (most recent call last):\n"
    "  File \"train.py\", line 62, in <module>\n\nOut of memory while trying to allocate 536870912 "
    "bytes.\n\t [[{{node bert_span_model/bert_span_labeler/bert_encoder/transformer/layer_0/"
    "self_attention/PartitionedCall}}]]\nHint: If you want to see a list of allocated tensors when "
    "OOM happens, add report_tensor_allocations_upon_oom to RunOptions for current allocation "
    "info. This isn't available when running in Eager mode.\n [Op:__inference_loop_fn_5679]")


def test_xla_out_of_memory_is_reported_by_its_allocation(tiny_init, tmp_path):
  config, init, _ = tiny_init
  model_dir = str(tmp_path / "xla")

  def failing_step(unused_batch):
    raise tf.errors.ResourceExhaustedError(None, None, XLA_OUT_OF_MEMORY)

  with pytest.raises(
      trainer_lib.OutOfMemoryError,
      match=r"^step 1 ran out of memory \(Out of memory while trying to allocate "
      r"536870912 bytes\.\); the last checkpoint is none"):
    run_trainer(config, model_dir, 2, model_dir_lib.decide_start(model_dir, init),
                {"max_seq_length": SEQ}, replica_step=failing_step)
  assert not tf.train.latest_checkpoint(model_dir)


@pytest.mark.parametrize("with_head", [False, True])
def test_predicting_from_an_encoder_checkpoint_warns_of_its_random_head(
    tmp_path, caplog, with_head):
  """--do_train=false --init_checkpoint=<an encoder without a SQuAD head> scores a random span
  head: warned of, as export warns; a checkpoint with the head is not."""
  config = tiny_config()
  if with_head:
    model = make_task(config, 1).build_model()
    tf.train.Checkpoint(model=model).save(str(tmp_path / "init" / "ckpt"))
  else:
    encoder = span_model.build_encoder(config)
    tf.train.Checkpoint(encoder=encoder).save(str(tmp_path / "init" / "bert_model.ckpt"))
  start = model_dir_lib.decide_start(str(tmp_path / "model_out"), str(tmp_path / "init"))
  with caplog.at_level(std_logging.INFO, logger="absl"):
    train_and_evaluate.restore_for_prediction(None, config, start)
  warned = [r for r in caplog.records if r.levelno == std_logging.WARNING]
  assert [r.getMessage() for r in warned] == ([] if with_head else [checkpoints.UNTRAINED_HEAD])


def test_export_sets_the_windows_of_a_checkpoint_trained_elsewhere_only(tmp_path):
  """--max_seq_length / --max_query_length serve an outside --init_checkpoint (a run_squad.py
  model trained at other lengths) at the lengths given; a model that records its own (a
  --model_dir of this tool) is refused the flag in one line, as are lengths beyond the encoder's
  positions or leaving no context token."""
  config = tiny_config()
  encoder = span_model.build_encoder(config)
  tf.train.Checkpoint(encoder=encoder).save(str(tmp_path / "init" / "bert_model.ckpt"))
  testutil.write_tiny_config(tmp_path / "init" / "bert_config.json")
  shutil.copy(testutil.vocab_file(), tmp_path / "init" / "vocab.txt")
  init = str(tmp_path / "init")
  start = model_dir_lib.decide_start(None, init)

  def lengths(**typed):
    export = export_model.ExportConfig(init_checkpoint=init, typed_flags=tuple(typed), **typed)
    qa_config = export_model.model_settings(export, start, None)[2]
    return qa_config["max_seq_length"], qa_config["max_query_length"], qa_config["doc_stride"]

  assert lengths() == (384, 64, 128)
  assert lengths(max_seq_length=48, max_query_length=12) == (48, 12, 128)
  with pytest.raises(errors.UsageError) as raised:
    lengths(max_seq_length=config.max_position_embeddings + 1)
  assert str(raised.value) == (
      f"--max_seq_length={config.max_position_embeddings + 1}: the encoder has "
      f"{config.max_position_embeddings} positions (max_position_embeddings); use at most that")
  with pytest.raises(
      errors.UsageError, match="max_seq_length=40 with max_query_length=64 leaves "
      "a window no context token"):
    lengths(max_seq_length=40)
  trained = make_task(config, 1).build_model()
  model_dir = testutil.write_model_dir(
      tmp_path / "model_out", trained,
      dict(max_seq_length=64, doc_stride=32, max_query_length=16, do_lower_case=True,
           **settings.defaults(span_decoding.DecodingSettings)))
  export = export_model.ExportConfig(model_dir=model_dir, max_seq_length=128,
                                     typed_flags=("model_dir", "max_seq_length"))
  with pytest.raises(errors.UsageError) as raised:
    export_model.model_settings(export, model_dir_lib.decide_start(model_dir, None), model_dir)
  assert str(raised.value) == (
      f"--max_seq_length=128: the model of --model_dir={model_dir} was trained on windows of "
      f"max_seq_length=64 (qa_config.json) and is served so; drop the flag")


def test_export_init_checkpoint_wins_over_the_default_model_dir(tmp_path, monkeypatch, caplog):
  from squad_qa import export  # pylint: disable=g-import-not-at-top
  config = tiny_config()
  config_file = testutil.write_tiny_config(tmp_path / "bert_config.json")
  # ./model_out: a trained --model_dir (featurized at seq 64); init/: a tfm encoder checkpoint.
  trained = make_task(config, 1).build_model()
  tf.train.CheckpointManager(tf.train.Checkpoint(model=trained), str(tmp_path / "model_out"),
                             max_to_keep=1).save(checkpoint_number=3)
  write_qa_config(str(tmp_path / "model_out"), bert_config_file=config_file,
                  bert_config=config.to_dict(), vocab_file=testutil.vocab_file(),
                  do_lower_case=True, max_seq_length=64, doc_stride=32, max_query_length=16)
  tf.keras.utils.set_random_seed(11)
  encoder = span_model.build_encoder(config)
  tf.train.Checkpoint(encoder=encoder).save(str(tmp_path / "init" / "bert_model.ckpt"))
  shutil.copy(config_file, tmp_path / "init" / "bert_config.json")
  shutil.copy(testutil.vocab_file(), tmp_path / "init" / "vocab.txt")
  monkeypatch.chdir(tmp_path)
  testutil.use_flag_defaults()
  with flagsaver.flagsaver(init_checkpoint=str(tmp_path / "init"), export_dir="export",
                           serve_text=False):
    flags.FLAGS["model_dir"].using_default_value = True  # as when --model_dir is not typed
    assert flags.FLAGS.model_dir == "model_out"
    with caplog.at_level(std_logging.INFO, logger="absl"):
      export.main(["export.py"])
  assert (f"exporting --init_checkpoint={tmp_path}/init, not the default --model_dir=model_out"
          in caplog.text)
  assert "the span head is untrained" in caplog.text
  with open(tmp_path / "export" / "assets.extra" / "qa_config.json") as f:
    assert json.load(f)["max_seq_length"] == 384  # make_records.py's default, not model_out's 64
  # The exported encoder is init's, not model_out's.
  exported = tf.train.load_checkpoint(str(tmp_path / "export" / "variables" / "variables"))
  word_embeddings = exported.get_tensor("model/variables/0/.ATTRIBUTES/VARIABLE_VALUE")
  np.testing.assert_array_equal(word_embeddings, encoder.get_embedding_table().numpy())
  assert not np.array_equal(word_embeddings,
                            trained.labeler.checkpoint_items["encoder"].get_embedding_table())
  # A --model_dir given as --init_checkpoint keeps its recorded featurization.
  config = export_model.ExportConfig(export_dir="export",
                                     init_checkpoint=str(tmp_path / "model_out"))
  start = model_dir_lib.decide_start(None, config.init_checkpoint)
  _, vocab_file, qa_config, recorded = export_model.model_settings(config, start, None)
  assert (qa_config["max_seq_length"], vocab_file) == (64, testutil.vocab_file())
  with open(tmp_path / "model_out" / "qa_config.json") as f:
    assert recorded == json.load(f)
  # So does its conversion (model.convert_checkpoint copies the qa_config.json beside it).
  from squad_qa.model import convert_checkpoint  # pylint: disable=g-import-not-at-top
  convert_checkpoint.convert(str(tmp_path / "model_out"), str(tmp_path / "converted"))
  config = export_model.ExportConfig(export_dir="export",
                                     init_checkpoint=str(tmp_path / "converted"))
  assert export_model.model_settings(config,
                                     model_dir_lib.decide_start(None, config.init_checkpoint),
                                     None)[3] == recorded
  # A casing against the trained one is refused in one line, not served as training's.
  model_out = str(tmp_path / "model_out")
  config = export_model.ExportConfig(export_dir="export", model_dir=model_out, do_lower_case=False)
  with pytest.raises(errors.UsageError) as raised:
    export_model.model_settings(config, model_dir_lib.decide_start(model_out, None), model_out)
  assert str(raised.value) == (
      f"--do_lower_case=false: the model in {model_out} was trained with do_lower_case=true "
      f"(qa_config.json), and serving must tokenize as training did; drop the flag")
  # A vocab other than the one beside an --init_checkpoint: refused (its ids are other words).
  shuffled = tmp_path / "shuffled_vocab.txt"
  lines = (tmp_path / "init" / "vocab.txt").read_text(encoding="utf-8").splitlines()
  lines[1000], lines[1001] = lines[1001], lines[1000]
  shuffled.write_text("\n".join(lines) + "\n", encoding="utf-8")
  config = export_model.ExportConfig(export_dir="export", init_checkpoint=str(tmp_path / "init"),
                                     vocab_file=str(shuffled))
  with pytest.raises(errors.UsageError) as raised:
    export_model.model_settings(config, model_dir_lib.decide_start(None, config.init_checkpoint),
                                None)
  assert str(raised.value) == (
      f"--vocab_file={shuffled} is not the vocab of --init_checkpoint={tmp_path / 'init'} "
      f"({tmp_path / 'init' / 'vocab.txt'}, other tokens): its token ids mean other words to "
      f"the encoder; drop --vocab_file to use the checkpoint's")
  same = tmp_path / "copied_vocab.txt"
  shutil.copy(tmp_path / "init" / "vocab.txt", same)
  config = dataclasses.replace(config, vocab_file=str(same))
  assert export_model.model_settings(config,
                                     model_dir_lib.decide_start(None, config.init_checkpoint),
                                     None)[1] == str(same)  # the same file elsewhere: taken
  # So is an encoder config: the trained one is exported (a typed one was ignored).
  config = export_model.ExportConfig(export_dir="export", model_dir=model_out,
                                     bert_config_file="other/bert_config.json")
  with pytest.raises(errors.UsageError) as raised:
    export_model.model_settings(config, model_dir_lib.decide_start(model_out, None), model_out)
  assert str(raised.value) == (
      f"--bert_config_file=other/bert_config.json: the model in {model_out} is exported with the "
      f"encoder it trained (qa_config.json records its config); drop the flag")
  # Both typed, and the --model_dir holds a checkpoint that did not start there: refused.
  with flagsaver.flagsaver(init_checkpoint=str(tmp_path / "init"), model_dir="model_out",
                           export_dir="export3"):
    with pytest.raises(checkpoints.CheckpointError, match="names another start"):
      export.main(["export.py"])
  assert not os.path.exists(tmp_path / "export3")
  # The training folder as --export_dir: refused before any work, nothing in it deleted (an
  # export replaces only an earlier export).
  kept = sorted(os.listdir(tmp_path / "model_out"))
  with flagsaver.flagsaver(model_dir="model_out", export_dir="model_out"):
    with pytest.raises(errors.OutputExistsError, match="folder that holds no export"):
      export.main(["export.py"])
  assert sorted(os.listdir(tmp_path / "model_out")) == kept and "qa_config.json" in kept
  assert not os.path.exists(tmp_path / "model_out.tmp-export")


def test_a_resume_on_other_records_warns_once_and_goes_on(tmp_path, caplog):
  """A moved folder of the same records resumes without a word; records made otherwise, or from
  another train file, are named in one warning."""
  from squad_qa.tasks import run_inputs  # pylint: disable=g-import-not-at-top
  from squad_qa.tasks import train_config  # pylint: disable=g-import-not-at-top
  (tmp_path / "a").mkdir()
  (tmp_path / "b").mkdir()
  made = testutil.make_train_records(tmp_path / "a", 3, lengths=(64, 32, 16))
  other = testutil.make_train_records(tmp_path / "b", 4, lengths=(128, 32, 16))
  moved = shutil.copytree(made, tmp_path / "moved")
  config_file = testutil.write_tiny_config(tmp_path / "bert_config.json")
  model_dir = tmp_path / "model"
  model_dir.mkdir()
  artifacts.write_qa_config(str(model_dir), config_file, tiny_config(),
                            artifacts.read_json(os.path.join(made, "meta.json")), {})

  def warnings(records_dir):
    caplog.clear()
    with caplog.at_level(std_logging.WARNING, logger="absl"):
      run_inputs.bert_config_and_meta(
          train_config.TrainConfig(records_dir=str(records_dir), model_dir=str(model_dir),
                                   bert_config_file=config_file, do_predict=False))
    return [r.getMessage() for r in caplog.records if r.levelno >= std_logging.WARNING]

  assert warnings(moved) == []
  train_file = str(tmp_path / "a" / "train.json")
  assert warnings(other) == [
      f"--records_dir={other} holds other records than those --model_dir={model_dir} trained on "
      f"so far (max_seq_length 64 -> 128; train file {train_file} -> "
      f"{tmp_path / 'b' / 'train.json'})"
  ]
