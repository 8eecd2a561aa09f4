"""Length-grouped training batches (--length_buckets): exact shapes, each feature once per epoch,
determinism, the split of a global batch across replicas, and trimming changes nothing but cost
(logits, loss, gradients)."""

import collections

import numpy as np
import pytest
import tensorflow as tf
import tf_keras

from squad_qa import errors
from squad_qa.flags import settings
from squad_qa.model import bert_config as bert_config_lib
from squad_qa.model import span_model
from squad_qa.preprocess import make_records_job
from squad_qa.preprocess import records
from squad_qa.tasks import optimization
from squad_qa.tasks import question_answering
from squad_qa.tasks import run_plan
from tests import testutil

NUM_QUESTIONS = 160
SEQ, STRIDE, QUERY = 384, 128, 64
BUCKETS = (64, 128, 192, 256, 320, 384)
BATCH = 8


@pytest.fixture(scope="module")
def train_records(tmp_path_factory):
  """Train records of the first real SQuAD questions at 384/128/64; (shard paths, all features)."""
  tmp = tmp_path_factory.mktemp("buckets")
  source = testutil.write_squad_slice(testutil.TRAIN_FILE, tmp / "train.json", NUM_QUESTIONS)
  meta = make_records_job.make_records(
      make_records_job.RecordsConfig(vocab_file=testutil.vocab_file(), do_lower_case=True,
                                     max_seq_length=SEQ, doc_stride=STRIDE, max_query_length=QUERY,
                                     num_shards=2, version_2_with_negative=False, train_file=source,
                                     output_dir=str(tmp / "records"), num_workers=1))
  paths = records.shard_paths(str(tmp / "records"), meta, records.TRAIN_SPLIT)
  return paths, records.read_records(paths, records.TRAIN_SPLIT, SEQ)


def batches(dataset, count=None):
  return [{k: v.numpy() for k, v in b.items()} for b in dataset.take(count or -1)]


def test_default_boundaries_and_errors():
  assert records.length_bucket_boundaries(384) == tuple(range(8, 385, 8))  # 48 shapes
  assert records.length_bucket_boundaries(100) == tuple(range(8, 97, 8)) + (100,)
  assert records.length_bucket_boundaries(384, step=records.XLA_LENGTH_BUCKET_STEP) == BUCKETS
  assert records.length_bucket_boundaries(128, step=records.XLA_LENGTH_BUCKET_STEP) == (64, 128)
  assert records.length_bucket_boundaries(100, step=records.XLA_LENGTH_BUCKET_STEP) == (64, 100)
  assert records.length_bucket_boundaries(384, (100, 200)) == (100, 200, 384)
  assert records.length_bucket_boundaries(384, BUCKETS) == BUCKETS
  with pytest.raises(ValueError, match="length bucket 512 is longer than the records' "
                     "max_seq_length 384"):
    records.length_bucket_boundaries(384, (128, 512))
  with pytest.raises(ValueError, match="not increasing"):
    records.length_bucket_boundaries(384, (128, 128))


def test_flag_forms():
  parser = settings.TokenCountsParser()
  assert parser.parse("auto") == "auto" and parser.parse("true") == "auto"  # bare --length_buckets
  assert parser.parse("false") is None  # --nolength_buckets
  assert parser.parse("64, 128,384") == (64, 128, 384)
  for bad in ("128,64", "0,64", "64,x"):
    with pytest.raises(ValueError):
      parser.parse(bad)


def test_one_epoch_holds_every_feature_once_trimmed_to_a_boundary(train_records):
  paths, features = train_records
  lengths = features["input_mask"].sum(axis=1)
  assert len(lengths) > 3 * BATCH and len(set(np.searchsorted(BUCKETS, lengths))) >= 4
  row_of = {int(u): i for i, u in enumerate(features["unique_ids"])}
  seen = collections.Counter()
  widths, partial = [], 0
  for batch in batches(
      records.train_dataset(paths, SEQ, BATCH, seed=5, length_buckets=BUCKETS, num_epochs=1)):
    seq = batch["input_word_ids"].shape[1]
    rows = [row_of[int(u)] for u in batch["unique_ids"]]
    # Padded to the first boundary that holds the batch's longest window.
    assert seq == BUCKETS[int(np.searchsorted(BUCKETS, lengths[rows].max()))]
    widths.append(seq)
    partial += len(rows) < BATCH
    for key, name in (("input_word_ids", "input_ids"), ("input_mask", "input_mask"),
                      ("input_type_ids", "segment_ids")):
      np.testing.assert_array_equal(batch[key], features[name][rows, :seq])
      assert not features[name][rows, seq:].any()  # only padding was cut
    for key in ("start_positions", "end_positions"):
      np.testing.assert_array_equal(batch[key], features[key][rows])
    seen.update(int(u) for u in batch["unique_ids"])
  assert sorted(seen) == sorted(row_of) and set(seen.values()) == {1}
  assert partial == (len(lengths) % BATCH > 0)  # the pool's last batch (one pool holds all)
  assert len(set(widths)) >= 4
  # Length-grouped: far less padding than random batches of the same windows.
  assert np.mean(widths) < 0.8 * SEQ


@pytest.mark.parametrize("batch_size", [8, 64])
def test_every_epoch_draws_every_window_once(train_records, batch_size):
  """Endless training input, default boundaries: each epoch's worth of batches (records //
  batch_size) holds no window twice and all but records % batch_size of them; the epochs'
  orders differ."""
  paths, features = train_records
  total = len(features["unique_ids"])
  per_epoch = records.steps_per_epoch(total, batch_size)
  assert per_epoch >= 2
  drawn = batches(
      records.train_dataset(paths, SEQ, batch_size, seed=5,
                            length_buckets=records.length_bucket_boundaries(SEQ)), 3 * per_epoch)
  orders = []
  for epoch in range(3):
    ids = np.concatenate(
        [b["unique_ids"] for b in drawn[epoch * per_epoch:(epoch + 1) * per_epoch]])
    repeats = len(ids) - len(set(ids.tolist()))
    assert (len(ids), repeats) == (per_epoch * batch_size, 0)
    assert set(ids.tolist()) <= set(features["unique_ids"].tolist())
    orders.append(ids.tolist())
  assert orders[0] != orders[1] != orders[2]


def test_replicas_split_the_global_batch(train_records):
  """Two input pipelines (workers) of one replica each, and one pipeline of two replicas: each
  replica gets its rows of one device's global batch, at the same width."""
  paths, _ = train_records
  config = question_answering.QATaskConfig(bert_config=None, max_seq_length=SEQ,
                                           train_files=tuple(paths), per_replica_batch_size=4,
                                           seed=5, length_buckets=BUCKETS)
  task = question_answering.QuestionAnsweringTask(config)
  one = batches(
      question_answering.QuestionAnsweringTask(
          question_answering.QATaskConfig(
              **dict(vars(config), per_replica_batch_size=8))).build_inputs(), 6)
  workers = [batches(task.build_inputs(tf.distribute.InputContext(2, i, 2)), 6) for i in range(2)]
  local = batches(task.build_inputs(tf.distribute.InputContext(1, 0, 2)), 12)
  assert len({b["input_word_ids"].shape[1] for b in one}) >= 2
  for step, batch in enumerate(one):
    for replica, part in enumerate((workers[0][step], workers[1][step])):
      for key, value in batch.items():
        np.testing.assert_array_equal(part[key], value[replica * 4:(replica + 1) * 4])
        np.testing.assert_array_equal(local[2 * step + replica][key],
                                      value[replica * 4:(replica + 1) * 4])
  skipped = batches(task.build_inputs(tf.distribute.InputContext(1, 0, 2), skip_steps=2), 2)
  np.testing.assert_array_equal(skipped[0]["unique_ids"], local[4]["unique_ids"])


def test_several_pipelines_need_a_seed(train_records):
  paths, _ = train_records
  task = question_answering.QuestionAnsweringTask(
      question_answering.QATaskConfig(bert_config=None, max_seq_length=SEQ,
                                      train_files=tuple(paths), seed=None))
  with pytest.raises(question_answering.InputError, match="2 input pipelines"):
    task.build_inputs(tf.distribute.InputContext(2, 0, 2))


def test_endless_batches_are_full_and_deterministic_with_a_seed(train_records):
  paths, features = train_records
  count = 3 * len(features["unique_ids"]) // BATCH  # three epochs' worth

  def run(seed):
    return batches(records.train_dataset(paths, SEQ, BATCH, seed=seed, length_buckets=BUCKETS),
                   count)

  first, again, other = run(11), run(11), run(12)
  shapes = {b["input_word_ids"].shape for b in first}
  assert shapes <= {(BATCH, s) for s in BUCKETS} and len(shapes) >= 4  # full batches only
  for a, b in zip(first, again):
    assert a.keys() == b.keys()
    for key in a:
      np.testing.assert_array_equal(a[key], b[key])
  assert [list(b["unique_ids"]) for b in first] != [list(b["unique_ids"]) for b in other]
  padded = batches(records.train_dataset(paths, SEQ, BATCH, seed=11), 2)
  assert {b["input_word_ids"].shape for b in padded} == {(BATCH, SEQ)}  # --nolength_buckets


def _tiny_model():
  config = bert_config_lib.BertConfig.from_dict(
      dict(testutil.TINY_BERT_CONFIG, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0))
  tf_keras.utils.set_random_seed(3)
  model, _ = span_model.build_span_model(config)
  return model


def test_trimming_changes_nothing_but_cost(train_records):
  """One real batch trimmed to its bucket vs the same batch padded to 384: same logits on real
  tokens, loss and gradients (float32, dropout off), one pass and two accumulated passes."""
  question_answering.set_precision_policy("float32")
  paths, _ = train_records
  trimmed = next(b for b in records.train_dataset(paths, SEQ, BATCH, seed=5, length_buckets=BUCKETS)
                 if b["input_word_ids"].shape[1] <= SEQ // 2)
  seq = trimmed["input_word_ids"].shape[1]
  padded = {
      k: tf.pad(v, [[0, 0], [0, SEQ - seq]]) if v.shape.rank == 2 else v
      for k, v in trimmed.items()
  }
  model = _tiny_model()
  real = trimmed["input_mask"].numpy() > 0
  for short, full in zip(model(span_model.model_inputs(trimmed)),
                         model(span_model.model_inputs(padded))):
    np.testing.assert_allclose(short.numpy()[real],
                               full.numpy()[:, :seq][real], rtol=1e-5, atol=1e-5)
  optimizer = optimization.create_optimizer(1e-4, 10, 0.1, loss_scale=False)
  for steps in (1, 2):
    gradient_fn = tf.function(question_answering.make_gradient_fn(model, optimizer, steps),
                              reduce_retracing=True)
    loss_short, grads_short = gradient_fn(trimmed)
    loss_full, grads_full = gradient_fn(padded)
    assert float(loss_short) == pytest.approx(float(loss_full), rel=1e-6)
    assert float(loss_short) > 1.0  # a real loss, not a degenerate one
    grads_short = [tf.convert_to_tensor(g).numpy() for g in grads_short]
    grads_full = [tf.convert_to_tensor(g).numpy() for g in grads_full]
    # Some gradients are 0 in exact arithmetic (e.g. the key bias: softmax ignores a constant)
    # and only rounding noise here, so every tolerance is relative to the largest gradient.
    scale = max(np.abs(g).max() for g in grads_full)
    for variable, short, full in zip(question_answering.trained_variables(model), grads_short,
                                     grads_full):
      if "position_embedding" in variable.name:  # positions >= seq get exactly nothing
        assert not full[seq:].any()
        short, full = short[:seq], full[:seq]
      np.testing.assert_allclose(short, full, rtol=1e-4, atol=1e-6 * scale, err_msg=variable.name)


def test_train_step_traces_no_more_after_two_bucket_shapes(train_records):
  question_answering.set_precision_policy("float32")
  paths, _ = train_records
  model = _tiny_model()
  optimizer = optimization.create_optimizer(1e-4, 10, 0.1, loss_scale=False)
  step = question_answering.make_train_step(model, optimizer, accumulation_steps=2)
  shapes, traces = set(), None
  for batch in records.train_dataset(paths, SEQ, BATCH, seed=5, length_buckets=BUCKETS):
    loss = float(step(batch))
    assert np.isfinite(loss)
    shapes.add(batch["input_word_ids"].shape[1])
    if len(shapes) == 2 and traces is None:
      traces = step.experimental_get_tracing_count()  # the first shape, then seq None
    if len(shapes) == 4:
      break
  assert step.experimental_get_tracing_count() == traces  # no trace for the later shapes
  assert int(optimizer.iterations) >= 4


def test_auto_buckets_are_coarse_under_xla():
  """`auto` is every 8 tokens, but every 64 under XLA, which compiles the step once per length."""
  assert run_plan.train_length_buckets("auto", 384, xla=False) == tuple(range(8, 385, 8))
  assert run_plan.train_length_buckets("auto", 384, xla=True) == BUCKETS
  # Named boundaries: as typed, XLA or not.
  assert run_plan.train_length_buckets((100, 200), 384, xla=True) == (100, 200, 384)
  assert run_plan.train_length_buckets(None, 384, xla=False) is None  # --nolength_buckets


def test_tpu_trains_one_static_shape():
  """Under TPUStrategy (static_shapes) `auto` is off and named boundaries are one line."""
  assert run_plan.train_length_buckets("auto", 384, xla=True, static_shapes=True) is None
  with pytest.raises(errors.UsageError, match="a TPU compiles one static batch shape; use "
                     "--nolength_buckets"):
    run_plan.train_length_buckets((100, 200), 384, xla=True, static_shapes=True)
