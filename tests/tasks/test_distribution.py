"""tf.distribute, the orbit loop, preemption, resuming and the learning-rate schedule.

Equality runs are separate processes (tests/distributed_run.py): the CPU split into 2 logical
devices and TF_CONFIG must be set before TensorFlow initializes. All of them start at once in a
module fixture and the tests compare their checkpoints. Tiny BERT, real SQuAD train windows of
varying length (length-grouped batches of several widths), dropout off for the equality across
strategies (float32 tolerance) and on for resuming (exact).
"""

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time

import numpy as np
import pytest
import tensorflow as tf
import tf_keras

from squad_qa.flags import command_line
from squad_qa.model import bert_config as bert_config_lib
from squad_qa.model import float32_gradients
from squad_qa.model import span_model
from squad_qa.tasks import distribution
from squad_qa.tasks import optimization
from squad_qa.tasks import question_answering
from squad_qa.tasks import model_dir as model_dir_lib
from tests import testutil

RUN_TIMEOUT = 1800  # seconds for any one process (the CPU is shared)


def tiny_config(**overrides):
  return bert_config_lib.BertConfig.from_dict(dict(testutil.TINY_BERT_CONFIG, **overrides))


def synthetic_batch(batch_size, seq, seed=0):
  rng = np.random.default_rng(seed)
  return {
      "input_word_ids": tf.constant(rng.integers(1000, 30000, (batch_size, seq)), tf.int32),
      "input_mask": tf.ones([batch_size, seq], tf.int32),
      "input_type_ids": tf.zeros([batch_size, seq], tf.int32),
      "start_positions": tf.constant(rng.integers(0, seq, batch_size), tf.int32),
      "end_positions": tf.constant(rng.integers(0, seq, batch_size), tf.int32)
  }


@pytest.mark.parametrize("warmup_proportion,expected",
                         [(0.5, [0, 0.2, 0.4, 0.6, 0.8, 1.0, 0.8, 0.6, 0.4, 0.2, 0.0]),
                          (0.0, [1.0, 0.9, 0.8, 0.7, 0.6, 0.5, 0.4, 0.3, 0.2, 0.1, 0.0])])
def test_schedule_reaches_the_learning_rate_and_decays_to_zero(warmup_proportion, expected):
  """10 real steps of the tiny model: the rate each update uses (the schedule at the optimizer's
  step before it), from --learning_rate=1e-4; the update with rate 0 leaves the weights as they
  were (AdamW's decay is scaled by the rate too)."""
  question_answering.set_precision_policy("float32")
  tf_keras.utils.set_random_seed(2)
  model, _ = span_model.build_span_model(tiny_config())
  optimizer = optimization.create_optimizer(1e-4, 10, warmup_proportion, loss_scale=False)
  step = question_answering.make_train_step(model, optimizer)
  batch = synthetic_batch(4, 16)
  rates = []
  for _ in range(10):
    rates.append(optimization.learning_rate_at(optimizer))
    before = model.get_weights()
    step(batch)
    if rates[-1] == 0.0:
      assert all(np.array_equal(a, b) for a, b in zip(before, model.get_weights()))
  rates.append(optimization.learning_rate_at(optimizer))
  np.testing.assert_allclose(rates, np.array(expected) * 1e-4, rtol=1e-6, atol=1e-12)
  assert max(rates) == pytest.approx(1e-4, rel=1e-6)


def test_resuming_with_another_schedule_length_refuses(tmp_path):
  question_answering.set_precision_policy("float32")
  model, _ = span_model.build_span_model(tiny_config())
  optimizer = optimization.create_optimizer(1e-4, 10, 0.1, loss_scale=False)
  path = model_dir_lib.make_checkpoint(model, optimizer).save(str(tmp_path / "ckpt"))
  assert model_dir_lib.schedule_steps_in(path) == 10
  model_dir_lib.check_schedule(path, 10)  # the same length resumes
  with pytest.raises(model_dir_lib.ScheduleMismatchError) as error:
    model_dir_lib.check_schedule(path, 20)
  assert str(error.value) == (
      f"{path} was trained on a learning-rate schedule of 10 steps, this run asks for 20; "
      f"resume with --max_steps=10 (and the same batch and epochs), or start a new --model_dir")


def test_resuming_with_another_seed_refuses(tmp_path):
  """The train data's shuffled order is the seed's: a resume with another would train some
  examples twice and others never."""
  (tmp_path / "train_config.json").write_text(json.dumps({"seed": 42, "max_steps": 10}))
  path = str(tmp_path / "ckpt-4")
  model_dir_lib.check_seed(str(tmp_path), path, 42)
  with pytest.raises(model_dir_lib.ScheduleMismatchError) as error:
    model_dir_lib.check_seed(str(tmp_path), path, 7)
  assert str(error.value) == (
      f"{path} was trained with --seed=42 (the --model_dir's train_config.json), this run asks "
      f"for --seed=7: the rest of the run would follow another shuffled order and train some "
      f"examples twice, others never; resume with --seed=42, or start a new --model_dir")
  model_dir_lib.check_seed(str(tmp_path / "elsewhere"), path, 7)  # no train_config.json: passes


def test_checkpoints_hold_the_dropout_state(tmp_path):
  """make_checkpoint saves one generator state per dropout layer (tiny BERT: the embeddings' and
  4 per layer); a checkpoint of the earlier layout has none, and resuming it says so."""
  question_answering.set_precision_policy("float32")
  model = question_answering.QuestionAnsweringTask(
      question_answering.QATaskConfig(bert_config=tiny_config(), max_seq_length=16)).build_model()
  optimizer = optimization.create_optimizer(1e-4, 10, 0.1, loss_scale=False)
  assert len(model_dir_lib.dropout_generators(model)) == 1 + 4 * 2
  path = model_dir_lib.make_checkpoint(model, optimizer).save(str(tmp_path / "new"))
  states = [
      n for n, _ in tf.train.list_variables(path)
      if n.startswith(model_dir_lib.DROPOUT_STATE_KEY + "/")
  ]
  assert len(states) == 9 and model_dir_lib.has_dropout_state(path)
  earlier = tf.train.Checkpoint(model=model, optimizer=optimizer).save(str(tmp_path / "earlier"))
  assert not model_dir_lib.has_dropout_state(earlier)


def test_one_device_trains_on_the_input_pipeline_itself():
  """On one device the training input is `dataset_fn`'s dataset, with its options (the records'
  pipeline turns tf.data's autotuning off), built for one pipeline of one replica; on several
  devices the strategy's distributed dataset."""
  options = tf.data.Options()
  options.autotune.enabled = False
  dataset = tf.data.Dataset.range(4).with_options(options)
  contexts = []

  def dataset_fn(context):
    contexts.append(context)
    return dataset

  one = distribution.distribute_inputs(tf.distribute.OneDeviceStrategy("/cpu:0"), dataset_fn)
  assert one is dataset and one.options().autotune.enabled is False
  assert (contexts[0].num_input_pipelines, contexts[0].input_pipeline_id,
          contexts[0].num_replicas_in_sync) == (1, 0, 1)
  mirrored = distribution.distribute_inputs(tf.distribute.MirroredStrategy(["/cpu:0"]), dataset_fn)
  assert isinstance(mirrored, tf.distribute.DistributedDataset)
  assert [int(x) for x in mirrored] == [0, 1, 2, 3]


def test_float32_override_covers_every_weight_read_in_float16(float32_policy_after):
  """The override's coverage, pinned: every kernel and bias of the encoder and the head, and the
  position and type embeddings; not the layer norms (float32 in tfm) nor the word embeddings (a
  gather: per-row gradients, no reduction over the batch)."""
  question_answering.set_precision_policy("float16")
  model, _ = span_model.build_span_model(tiny_config())
  variables = question_answering.trained_variables(model)
  batch = synthetic_batch(2, 16)

  def loss():
    start_logits, end_logits = model(span_model.model_inputs(batch), training=True)
    return tf.reduce_sum(start_logits) + tf.reduce_sum(end_logits)

  covered = float32_gradients.covered_variable_names(loss, variables)
  per_layer = [
      f"transformer/layer_{i}/{part}/{kind}:0" for i in range(2)
      for part in ("intermediate", "output", "self_attention/attention_output",
                   "self_attention/key", "self_attention/query", "self_attention/value")
      for kind in ("bias", "kernel")
  ]
  assert covered == sorted([
      "position_embedding/embeddings:0", "type_embeddings/embeddings:0",
      "predictions/transform/logits/bias:0", "predictions/transform/logits/kernel:0"
  ] + per_layer)
  left = sorted({v.name for v in variables} - set(covered))
  assert left == sorted([
      "word_embeddings/embeddings:0", "embeddings/layer_norm/beta:0",
      "embeddings/layer_norm/gamma:0"
  ] + [
      f"transformer/layer_{i}/{norm}_layer_norm/{kind}:0" for i in range(2)
      for norm in ("output", "self_attention") for kind in ("beta", "gamma")
  ])


@pytest.fixture
def float32_policy_after():
  yield
  tf_keras.mixed_precision.set_global_policy("float32")


# ---------------------------------------------------------------------------------------------
# Processes.


def free_ports(n):
  sockets = [socket.socket() for _ in range(n)]
  for s in sockets:
    s.bind(("127.0.0.1", 0))
  ports = [s.getsockname()[1] for s in sockets]
  for s in sockets:
    s.close()
  return ports


def tf_config(ports, index):
  return json.dumps({
      "cluster": {
          "worker": [f"127.0.0.1:{p}" for p in ports]
      },
      "task": {
          "type": "worker",
          "index": index
      }
  })


class Processes:
  """Child processes that are always killed (by their own pid) when the block ends."""

  def __init__(self):
    self.procs = []

  def start(self, command, env=None, log=None):
    out = open(log, "w") if log else subprocess.DEVNULL  # pylint: disable=consider-using-with
    proc = subprocess.Popen(command, cwd=testutil.REPO, stdout=out, stderr=subprocess.STDOUT,
                            env=dict(os.environ, **(env or {})))
    proc.log = log
    self.procs.append(proc)
    return proc

  def wait(self, proc, timeout=RUN_TIMEOUT):
    try:
      returncode = proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
      proc.kill()
      proc.wait()
      raise AssertionError(
          f"{proc.args} took more than {timeout} s: {self.output(proc)[-3000:]}") from None
    return returncode

  @staticmethod
  def output(proc):
    with open(proc.log) as f:
      return f.read()

  def __enter__(self):
    return self

  def __exit__(self, *exc):
    for proc in self.procs:
      if proc.poll() is None:
        proc.kill()
        proc.wait()


@pytest.fixture(scope="module")
def data(tmp_path_factory):
  """Real train windows at 256/128/64 (lengths vary, so length-grouped batches differ in width),
  in 2 shards; a tiny config without dropout (equality) and one with it (the defaults)."""
  tmp = tmp_path_factory.mktemp("distribution")
  records_dir = testutil.make_train_records(tmp, 64, num_shards=2, lengths=(256, 128, 64))
  config = tmp / "tiny.json"
  config.write_text(
      json.dumps(
          dict(testutil.TINY_BERT_CONFIG, hidden_dropout_prob=0.0,
               attention_probs_dropout_prob=0.0)))
  dropout_config = tmp / "tiny_dropout.json"
  dropout_config.write_text(json.dumps(testutil.TINY_BERT_CONFIG))
  return {
      "tmp": tmp,
      "records": records_dir,
      "config": str(config),
      "dropout_config": str(dropout_config)
  }


def run_command(data, model_dir, strategy, *runs, num_cpu_devices=1):
  return [
      sys.executable, "-m", "tests.distributed_run", f"--strategy={strategy}",
      f"--num_cpu_devices={num_cpu_devices}", f"--records_dir={data['records']}",
      f"--config={data['config']}", f"--config=dropout={data['dropout_config']}",
      f"--model_dir={model_dir}"
  ] + [f"--run={r}" for r in runs]


# Every run trains at global batch 8, length buckets on, 3 steps per orbit loop (a tf.while_loop).
# The reduced precisions train 2 steps (of different widths): float16 matmuls on the CPU are about
# 40x slower than float32 and bfloat16 compiles with XLA once per width.
PRECISION_STEPS = 2
PRECISIONS = (f"float16:steps={PRECISION_STEPS},dtype=float16",
              f"bfloat16:steps={PRECISION_STEPS},dtype=bfloat16")
DROPOUT = ("dropout:steps=6,stop_at=3,config=dropout", "dropout:steps=6,config=dropout",
           "dropout_straight:steps=6,config=dropout")


@pytest.fixture(scope="module")
def runs(data):
  """Every equality run, started at once: one device, mirrored over 2 logical CPUs, and 2
  multi_worker_mirrored processes. Returns {run: {"dir", "results"}}."""
  tmp = data["tmp"]
  one, two, workers = tmp / "one_device", tmp / "mirrored", tmp / "multi_worker"
  ports = free_ports(2)
  # The processes' temporary folder, their own: what a run leaves there is its own, whatever else
  # runs on the machine.
  temp = tmp / "tmpdir"
  temp.mkdir()
  with Processes() as processes:
    started = [
        processes.start(
            run_command(data, one, "one_device", "plain:steps=6,stop_at=3", "plain:steps=6",
                        "accumulation:steps=6,accumulation=2", *PRECISIONS, "seed6:steps=3,seed=6",
                        *DROPOUT), env={"TMPDIR": str(temp)}, log=tmp / "one.log"),
        processes.start(
            run_command(data, two, "mirrored", "plain:steps=6",
                        "accumulation:steps=6,accumulation=2,stop_at=3",
                        "accumulation:steps=6,accumulation=2", *PRECISIONS, *DROPOUT,
                        num_cpu_devices=2), env={"TMPDIR": str(temp)}, log=tmp / "two.log")
    ]
    started += [
        processes.start(
            run_command(data, workers, "multi_worker_mirrored", "plain:steps=6",
                        "accumulation:steps=6,accumulation=2", *PRECISIONS), env={
                            "TF_CONFIG": tf_config(ports, i),
                            "TMPDIR": str(temp)
                        }, log=tmp / f"worker{i}.log") for i in range(2)
    ]
    for proc in started:
      assert processes.wait(proc) == 0, processes.output(proc)[-5000:]
    results = {}
    for proc, prefix in zip(started, ("one", "two", "worker0", "worker1")):
      for line in processes.output(proc).splitlines():
        if line.startswith("RESULT "):
          _, name, value = line.split(" ", 2)
          results.setdefault(f"{prefix}/{name}", []).append(json.loads(value))
  return {
      "one": one,
      "two": two,
      "workers": workers,
      "results": results,
      "leftover_temp": sorted(n for n in os.listdir(temp) if n.startswith("squad_qa_worker_"))
  }


def weights(path, slots=True):
  """The model's variables in a checkpoint, with or without their optimizer slots."""
  reader = tf.train.load_checkpoint(str(path))
  return {
      k: reader.get_tensor(k) for k in reader.get_variable_to_shape_map()
      if k.startswith("model/") and (slots or ".OPTIMIZER_SLOT" not in k)
  }


def max_difference(a, b):
  assert set(a) == set(b) and len(a) > 30
  return max(float(np.max(np.abs(a[k] - b[k]))) for k in a)


def first_widths(data, steps=6):
  """Widths of the first global batches of 8 that every run here trains on."""
  from squad_qa.preprocess import records  # pylint: disable=g-import-not-at-top
  meta = records.read_meta(data["records"])
  dataset = records.train_dataset(records.shard_paths(data["records"], meta,
                                                      records.TRAIN_SPLIT), 256, 8, seed=5,
                                  length_buckets=records.length_bucket_boundaries(256))
  return [int(b["input_word_ids"].shape[1]) for b in dataset.take(steps)]


def compared_step(name):
  """The step whose checkpoints test_mirrored_over_2_devices_equals_one_device compares."""
  return PRECISION_STEPS if name in ("float16", "bfloat16") else 3


# Largest weight difference allowed after 3 steps (6 with accumulation), over the weights and
# their Adam slots. Measured: float32 2e-7 to 4e-7, mixed_float16 1.7e-6 (the same in every run;
# the weights alone 5.6e-7). Under mixed_bfloat16 each replica's weight gradients (a reduction
# over its half of the batch) are rounded to bfloat16 before the float32 all-reduce (float16 has
# a float32 override; bfloat16 has none): 3.0e-5 on the weights, against 2.2e-3 between float32
# and bfloat16 on one device and 4e-2 between two input orders. Its Adam slots, near 0 where
# gradients round to 0, are left out. After the reduced precisions' 2 steps (compared_step):
# mixed_float16 5.1e-7 with the slots, mixed_bfloat16 5.0e-5 on the weights.
TOLERANCE = {"plain": 2e-6, "accumulation": 2e-6, "float16": 2e-6, "bfloat16": 2e-4}


def same_weights(a, b, name):
  """Whether checkpoints `a` and `b` of run `name` agree to its TOLERANCE."""
  slots = name != "bfloat16"
  return max_difference(weights(a, slots), weights(b, slots)) < TOLERANCE[name]


@pytest.mark.slow
def test_mirrored_over_2_devices_equals_one_device(runs, data):
  """After 3 steps of length-grouped batches of different widths (global batch 8: 4 per
  replica), also with 2 accumulated passes, and after 2 steps of different widths under
  mixed_float16 and mixed_bfloat16: the weights of MirroredStrategy on 2 logical CPUs equal one
  device's."""
  widths = first_widths(data)
  assert len(set(widths)) >= 3 and len(set(widths[:PRECISION_STEPS])) == PRECISION_STEPS, widths
  for name in TOLERANCE:
    ckpt = f"ckpt-{compared_step(name)}"
    assert same_weights(runs["one"] / name / ckpt, runs["two"] / name / ckpt, name), name
  # Sensitivity: another input order gives other weights, far beyond the tolerance.
  assert max_difference(weights(runs["one"] / "plain" / "ckpt-3"),
                        weights(runs["one"] / "seed6" / "ckpt-3")) > 1e-3
  assert runs["results"]["one/plain"][0]["end_step"] == 3


@pytest.mark.slow
def test_stopped_and_resumed_equals_uninterrupted(runs):
  """Dropout off: stopped at step 3 and resumed (new model and optimizer objects, restored, input
  skipped to step 3) to step 6 gives the uninterrupted run's weights: one device against mirrored
  uninterrupted, mirrored (with accumulation) against one device uninterrupted."""
  assert max_difference(weights(runs["one"] / "plain" / "ckpt-6"),
                        weights(runs["two"] / "plain" / "ckpt-6")) < 2e-6
  assert max_difference(weights(runs["one"] / "accumulation" / "ckpt-6"),
                        weights(runs["two"] / "accumulation" / "ckpt-6")) < 2e-6
  assert [r["start_step"] for r in runs["results"]["one/plain"]] == [0, 3]
  assert [r["start_step"] for r in runs["results"]["two/accumulation"]] == [0, 3]
  assert [r["start_step"] for r in runs["results"]["two/plain"]] == [0]


@pytest.mark.slow
def test_resumed_with_dropout_equals_uninterrupted(runs):
  """Dropout on: the checkpoint holds the dropout generators' states, so 3 steps, a restart and
  3 more end with exactly the weights of 6 uninterrupted steps, on one device and on 2 replicas
  (each drawing its own masks)."""
  for device in ("one", "two"):
    assert max_difference(weights(runs[device] / "dropout" / "ckpt-6"),
                          weights(runs[device] / "dropout_straight" / "ckpt-6")) == 0.0, device
    assert [r["start_step"] for r in runs["results"][f"{device}/dropout"]] == [0, 3]
  # Sensitivity: dropout is on (the same data and seed without it end elsewhere).
  assert max_difference(weights(runs["one"] / "plain" / "ckpt-6"),
                        weights(runs["one"] / "dropout_straight" / "ckpt-6")) > 1e-3


@pytest.mark.slow
def test_multi_worker_equals_one_process_and_only_the_chief_writes(runs):
  """2 worker processes (TF_CONFIG on 127.0.0.1), each reading every shard and taking its half
  of each global batch: the chief's checkpoints equal one device's (float32, accumulation,
  mixed_float16, mixed_bfloat16); only the chief wrote --model_dir and the other worker's
  temporary folder is gone."""
  for name in TOLERANCE:
    step = PRECISION_STEPS if name in ("float16", "bfloat16") else 6
    assert same_weights(runs["workers"] / name / f"ckpt-{step}",
                        runs["one"] / name / f"ckpt-{step}", name), name
  assert sorted(os.listdir(runs["workers"])) == sorted(TOLERANCE)
  assert sorted(n for n in os.listdir(runs["workers"] / "plain") if n.startswith("ckpt-")) == [
      "ckpt-3.data-00000-of-00001", "ckpt-3.index", "ckpt-6.data-00000-of-00001", "ckpt-6.index"
  ]
  assert runs["results"]["worker0/plain"][0]["end_step"] == 6
  assert runs["results"]["worker1/plain"][0]["end_step"] == 6
  assert runs["leftover_temp"] == []


# ---------------------------------------------------------------------------------------------
# Faults, through train.py.


def train_command(data, model_dir, *args):
  """train.py with its defaults (length buckets, dropout, 100 steps per loop) on the records of
  varying length, without prediction."""
  return [
      sys.executable, "train.py", f"--records_dir={data['records']}", f"--model_dir={model_dir}",
      f"--bert_config_file={data['dropout_config']}", f"--vocab_file={testutil.vocab_file()}",
      "--do_predict=false", "--train_batch_size=4", *args
  ]


@pytest.mark.slow
def test_train_py_under_mirrored_trains_hundreds_of_steps_on_real_lengths(data):
  """The command that used to stop at the first step whose replicas (or steps) differed in
  width: 2 replicas, 200 steps in 2 loops of 100 (the second loop runs the traced loop again on
  other widths), every default. One epoch of these records is about 10 steps, so each loop goes
  through every width of the data many times."""
  model_dir = data["tmp"] / "mirrored_200"
  testutil.run_cli(
      *train_command(data, model_dir, "--distribution_strategy=mirrored", "--num_cpu_devices=2",
                     "--train_batch_size=8", "--max_steps=200")[1:])
  with open(model_dir / "train_results.json") as f:
    results = json.load(f)
  assert (results["start_step"], results["end_step"], results["num_replicas"]) == (0, 200, 2)
  assert results["length_buckets"] == list(range(8, 257, 8))
  assert latest_step(model_dir) == 200


def latest_step(model_dir):
  latest = tf.train.latest_checkpoint(str(model_dir))
  if not latest:
    return None
  step = tf.train.load_checkpoint(latest).get_tensor("optimizer/iter/.ATTRIBUTES/VARIABLE_VALUE")
  assert latest.endswith(f"ckpt-{step}")
  return int(step)


def wait_for(condition, timeout=RUN_TIMEOUT, procs=()):
  deadline = time.time() + timeout
  while time.time() < deadline:
    if condition():
      return
    for proc in procs:
      assert proc.poll() is None, f"{proc.args} exited early with {proc.returncode}"
    time.sleep(0.05)
  raise AssertionError("timed out")


@pytest.mark.slow
def test_sigterm_saves_a_checkpoint_at_the_current_step(data):
  model_dir = data["tmp"] / "sigterm"
  with Processes() as processes:
    proc = processes.start(
        train_command(data, model_dir, "--max_steps=100000", "--save_checkpoints_steps=100000",
                      "--steps_per_loop=1", "--log_steps=1"), log=data["tmp"] / "sigterm.log")
    wait_for(lambda: "training: 2 of 100,000 steps" in Processes.output(proc), procs=[proc])
    assert latest_step(model_dir) is None  # no periodic checkpoint before 100000
    proc.send_signal(signal.SIGTERM)
    returncode = processes.wait(proc)
  output = Processes.output(proc)
  step = latest_step(model_dir)
  assert step is not None and 2 <= step < 100000, output[-3000:]
  last_logged = max(
      int(m.group(1).replace(",", ""))
      for m in re.finditer(r"training: ([\d,]+) of 100,000 steps", output))
  # The loop that noticed the signal saved (the preemption action runs before the progress
  # action) and exited: the checkpoint is at the step training had reached, one past the last
  # logged loop.
  assert step == last_logged + 1
  assert returncode == command_line.PREEMPTED_EXIT_STATUS  # stopped, not finished
  assert (f"train.py: stopped by SIGTERM at step {step}: saved {model_dir}/ckpt-{step}; the same "
          f"command resumes from it") in output.splitlines()
  restored, _ = span_model.build_span_model(tiny_config())
  tf.train.Checkpoint(model=restored).read(tf.train.latest_checkpoint(str(model_dir))) \
      .expect_partial().assert_existing_objects_matched()


@pytest.mark.slow
def test_kill_9_one_worker_then_rerun_resumes(data):
  """multi_worker_mirrored with 2 processes: kill -9 worker 1 after the first checkpoint; the
  chief, stuck in an all-reduce, is killed too (as a job scheduler would); the same two commands
  again resume from the last checkpoint and finish 60 steps with a loadable checkpoint (the
  first run is killed with 40 steps still to go)."""
  model_dir = data["tmp"] / "kill9"
  total, every = 60, 20
  args = (f"--max_steps={total}", f"--save_checkpoints_steps={every}",
          "--distribution_strategy=multi_worker_mirrored")
  ports = free_ports(2)
  with Processes() as processes:
    workers = [
        processes.start(train_command(data, model_dir, *args),
                        env={"TF_CONFIG": tf_config(ports, i)}, log=data["tmp"] / f"kill9_{i}.log")
        for i in range(2)
    ]
    wait_for(lambda: (latest_step(model_dir) or 0) >= every, procs=workers)
    os.kill(workers[1].pid, signal.SIGKILL)
    workers[1].wait()
    time.sleep(1)
    os.kill(workers[0].pid, signal.SIGKILL)
    workers[0].wait()
  resumed_from = latest_step(model_dir)
  assert every <= resumed_from < total, Processes.output(workers[0])[-3000:]
  ports = free_ports(2)
  with Processes() as processes:
    workers = [
        processes.start(train_command(data, model_dir, *args),
                        env={"TF_CONFIG": tf_config(ports, i)}, log=data["tmp"] / f"rerun_{i}.log")
        for i in range(2)
    ]
    for proc in workers:
      assert processes.wait(proc) == 0, Processes.output(proc)[-3000:]
  with open(model_dir / "train_results.json") as f:
    results = json.load(f)
  assert (results["start_step"], results["end_step"], results["steps"]) == (resumed_from, total,
                                                                            total - resumed_from)
  assert results["num_replicas"] == 2 and results["effective_batch_size"] == 4
  assert latest_step(model_dir) == total
  restored, _ = span_model.build_span_model(tiny_config())
  tf.train.Checkpoint(model=restored).read(tf.train.latest_checkpoint(str(model_dir))) \
      .expect_partial().assert_existing_objects_matched()


@pytest.mark.parametrize("options, line", [
    ({
        "tpu": "grpc://10.0.0.2:8470"
    }, "--tpu=grpc://10.0.0.2:8470 applies to --distribution_strategy=tpu, and this run is "
     "one_device: add that strategy or drop --tpu"),
    ({
        "distribution_strategy": "one_device",
        "all_reduce_alg": "nccl"
    },
     "--all_reduce_alg=nccl applies to the mirrored and multi_worker_mirrored strategies, and this "
     "run is one_device: drop it"),
    ({
        "num_cpu_devices": 2
    }, "--num_cpu_devices=2 applies to --distribution_strategy=mirrored, and this run is "
     "one_device or mirrored over GPUs (the default): add --distribution_strategy=mirrored or "
     "drop it"),
    ({
        "distribution_strategy": "one_device",
        "num_cpu_devices": 2
    }, "--num_cpu_devices=2 applies to --distribution_strategy=mirrored, and this run is "
     "one_device: add --distribution_strategy=mirrored or drop it"),
    ({
        "distribution_strategy": "mirrored",
        "num_cpu_devices": 2,
        "all_reduce_alg": "ring"
    }, "--all_reduce_alg=ring chooses how GPUs or workers reduce, and this run's 2 logical CPU "
     "devices reduce in host memory: drop it"),
])
def test_a_flag_the_strategy_does_not_use_is_refused(options, line):
  with pytest.raises(distribution.DistributionError) as error:
    distribution.make_strategy(**options)
  assert str(error.value) == line


def test_a_tf_config_that_is_not_json_is_named_in_one_line(monkeypatch):
  monkeypatch.setenv("TF_CONFIG", "{bad")
  with pytest.raises(distribution.DistributionError) as error:
    distribution.make_strategy("multi_worker_mirrored")
  assert str(error.value).startswith(
      "$TF_CONFIG is not valid JSON (Expecting property name enclosed in double quotes: line 1 "
      "column 2 (char 1)); set it to the cluster and this task, e.g. '{\"cluster\": ")
  monkeypatch.setenv("TF_CONFIG", "[1]")
  with pytest.raises(distribution.DistributionError) as error:
    distribution.make_strategy("multi_worker_mirrored")
  assert str(error.value) == "$TF_CONFIG is not a JSON object: [1]"
  with pytest.raises(distribution.DistributionError) as error:
    distribution.make_strategy()  # one_device reads it too (the chief's check)
  assert str(error.value) == "$TF_CONFIG is not a JSON object: [1]"
  monkeypatch.setenv(
      "TF_CONFIG", '{"cluster": {"worker": ["localhost:23456"]}, "task": {"type": "worker", '
      '"index": 3}}')
  with pytest.raises(distribution.DistributionError) as error:
    distribution.make_strategy("multi_worker_mirrored")
  assert str(error.value) == ("$TF_CONFIG's task is worker 3, but its cluster has 1 worker task "
                              "(index 0 to 0): give this process's index among them")


@pytest.mark.parametrize("cluster, task, waiting", [
    ({
        "worker": ["a:1", "b:2", "c:3"]
    }, ("worker", 0), "waiting for the other 2 tasks of TF_CONFIG's cluster to connect (worker 1 "
     "at b:2, worker 2 at c:3)"),
    ({
        "chief": ["a:1"],
        "worker": ["b:2"]
    }, ("worker", 0), "waiting for the other 1 task of TF_CONFIG's cluster to connect (chief 0 at "
     "a:1)"),
    ({
        "worker": ["a:1"]
    }, ("worker", 0), None),
])
def test_a_worker_says_which_tasks_it_waits_for(monkeypatch, cluster, task, waiting):
  monkeypatch.setenv("TF_CONFIG",
                     json.dumps({
                         "cluster": cluster,
                         "task": {
                             "type": task[0],
                             "index": task[1]
                         }
                     }))
  assert distribution._waiting_for_workers(  # pylint: disable=protected-access
      distribution._tf_config()) == waiting  # pylint: disable=protected-access


@pytest.mark.slow
def test_ctrl_c_ends_a_worker_waiting_for_its_cluster_at_once(tmp_path):
  """TensorFlow waits for a missing worker without a timeout, holding Python's lock (no Python
  signal handler runs): the worker says what it waits for, and Ctrl-C ends it at once, before it
  wrote anything."""
  records_dir = testutil.make_train_records(tmp_path, 8)
  [port, missing] = free_ports(2)
  env = {
      **os.environ, "TF_CONFIG": json.dumps({
          "cluster": {
              "worker": [f"localhost:{port}", f"localhost:{missing}"]
          },
          "task": {
              "type": "worker",
              "index": 0
          }
      })
  }
  proc = subprocess.Popen([
      sys.executable, "train.py", f"--records_dir={records_dir}",
      f"--model_dir={tmp_path / 'model'}", "--distribution_strategy=multi_worker_mirrored",
      f"--bert_config_file={testutil.write_tiny_config(tmp_path / 'bert_config.json')}",
      "--max_steps=1", "--nodo_predict", "--train_batch_size=4"
  ], cwd=testutil.REPO, env=env, stderr=subprocess.PIPE, text=True)
  try:
    for line in proc.stderr:
      if "multi_worker_mirrored: waiting for the other 1 task" in line:
        break
    assert f"(worker 1 at localhost:{missing}), without a timeout" in line
    time.sleep(2)  # well inside TensorFlow's wait
    started = time.monotonic()
    proc.send_signal(signal.SIGINT)
    assert proc.wait(timeout=30) == -signal.SIGINT
    assert time.monotonic() - started < 10
  finally:
    proc.kill()
    proc.wait()
  assert not (tmp_path / "model").exists()
