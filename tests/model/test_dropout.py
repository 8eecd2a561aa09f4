"""model/dropout.py: dropout masks hashed from keys that each layer's tf.random.Generator draws
are the hash's values under XLA and TensorFlow alike, drop at the asked rate independently per
entry and per call, scale what they keep, follow the generator's state, and are in every training
model."""

import numpy as np
import pytest
import tensorflow as tf
import tf_keras

from squad_qa.model import bert_config as bert_config_lib
from squad_qa.model import dropout
from squad_qa.tasks import model_dir
from squad_qa.tasks import question_answering
from tests import testutil


def lowbias32(x):
  """Wellons' lowbias32 over a uint32 NumPy array, from its published C."""
  x = x ^ (x >> np.uint32(16))
  x = x * np.uint32(0x7feb352d)
  x = x ^ (x >> np.uint32(15))
  x = x * np.uint32(0x846ca68b)
  return x ^ (x >> np.uint32(16))


def test_the_threshold_is_the_rate_in_32_bit_steps():
  assert dropout.drop_threshold(0.1) == 429496730  # a drop rate of 0.1 + 4.7e-11
  assert dropout.drop_threshold(0.0) == 0
  assert dropout.drop_threshold(1 - 2**-40) == 2**32 - 1  # the largest uint32
  with pytest.raises(ValueError, match="not in"):
    dropout.drop_threshold(1.0)


def test_draws_are_the_keyed_hash_of_each_index_with_and_without_xla():
  key = np.array([0x12345678, 0x9abcdef0], np.uint32)
  index = np.arange(3 * 5 * 7, dtype=np.uint32)
  with np.errstate(over="ignore"):
    expected = lowbias32(lowbias32(index ^ key[0]) + key[1]).reshape([3, 5, 7])
  np.testing.assert_array_equal(dropout.hashed_draws(tf.constant(key), [3, 5, 7]).numpy(), expected)
  xla = tf.function(lambda k, x: dropout.hashed_draws(k, tf.shape(x)), jit_compile=True)
  np.testing.assert_array_equal(xla(tf.constant(key), tf.zeros([3, 5, 7])).numpy(), expected)


def test_draws_are_uniform_and_independent_across_entries_and_keys():
  shape = [16, 12, 64, 64]  # 786,432 entries
  first = dropout.hashed_draws(tf.constant([1, 2], tf.uint32), shape).numpy().ravel()
  second = dropout.hashed_draws(tf.constant([1, 3], tf.uint32), shape).numpy().ravel()
  # Each of 64 equal ranges holds 1/64 of the draws (12,288 each: ~0.9 % per standard deviation).
  counts = np.bincount(first >> np.uint32(26), minlength=64)
  assert np.abs(counts / (first.size / 64) - 1).max() < 0.05
  drop = np.uint32(dropout.drop_threshold(0.5))
  kept, kept_too = first >= drop, second >= drop
  assert abs(kept.mean() - 0.5) < 0.003  # ~5 standard deviations
  # Neighbouring entries, and one entry under two keys differing in one bit, are kept together a
  # quarter of the time, as independent draws are.
  assert abs((kept[1:] & kept[:-1]).mean() - 0.25) < 0.003
  assert abs((kept & kept_too).mean() - 0.25) < 0.003


@pytest.mark.parametrize("dtype", [tf.float32, tf.bfloat16])
def test_masks_drop_at_the_rate_and_scale_what_they_keep(dtype):
  drop = dropout.generator_dropout(tf.random.Generator.from_seed(7))
  out = drop(tf.ones([999, 1001], dtype), 0.1).numpy().astype(np.float32)  # an odd size
  kept = out != 0
  assert abs(kept.mean() - 0.9) < 0.002  # ~7 standard deviations of 1M draws
  assert np.all(out[kept] == np.float32(tf.constant(1 / 0.9, dtype).numpy()))


def test_the_generator_state_decides_the_mask():
  generator = tf.random.Generator.from_seed(3)
  drop = dropout.generator_dropout(generator)
  x = tf.random.normal([4, 7, 9])
  state = np.array(generator.state.numpy())
  first = drop(x, 0.1).numpy()
  second = drop(x, 0.1).numpy()
  assert not np.array_equal(first != 0, second != 0)
  generator.reset(state)  # as a checkpoint restore does
  np.testing.assert_array_equal(drop(x, 0.1).numpy(), first)


def test_the_gradient_is_the_mask_times_the_scale():
  drop = dropout.generator_dropout(tf.random.Generator.from_seed(5))
  x = tf.random.normal([16, 33])
  with tf.GradientTape() as tape:
    tape.watch(x)
    out = drop(x, 0.25)
  gradient = tape.gradient(out, x).numpy()
  np.testing.assert_allclose(gradient, (out.numpy() != 0) / 0.75, rtol=1e-6)


@pytest.fixture
def generator_dropout_switch_restored():
  enabled = tf_keras.backend.experimental.is_tf_random_generator_enabled()
  yield
  if not enabled:
    tf_keras.backend.experimental.disable_tf_random_generator()


def test_every_dropout_layer_of_a_training_model_draws_hashed_masks(
    generator_dropout_switch_restored):
  del generator_dropout_switch_restored
  config = bert_config_lib.BertConfig.from_dict(testutil.TINY_BERT_CONFIG)
  task = question_answering.QuestionAnsweringTask(
      question_answering.QATaskConfig(bert_config=config, max_seq_length=64))
  model = task.build_model()
  generators = model_dir.dropout_generators(model)
  # The embeddings' dropout, then per layer four: on the attention probabilities, after the
  # attention, after the feed-forward's activation and after its output.
  assert len(generators) == 1 + 4 * config.num_hidden_layers
  draws = [
      l._random_generator.dropout  # pylint: disable=protected-access
      for l in model.submodules if isinstance(
          getattr(getattr(l, "_random_generator", None), "_generator", None), tf.random.Generator)
  ]
  # Each runs under XLA in the train step (model/xla_elementwise.py), the same masks elsewhere.
  assert [
      (d.__qualname__, d.plain.__qualname__) for d in draws
  ] == [("xla_dropout.<locals>.apply", "generator_dropout.<locals>.dropout")] * len(generators)
  inputs = {
      "input_word_ids": tf.constant([[101, 2054, 102, 3000, 102, 0]] * 2),
      "input_mask": tf.constant([[1, 1, 1, 1, 1, 0]] * 2),
      "input_type_ids": tf.constant([[0, 0, 0, 1, 1, 0]] * 2),
  }
  states = [np.array(g.state.numpy()) for g in generators]
  first = model(inputs, training=True)[0].numpy()
  for generator, state in zip(generators, states):
    generator.reset(state)
  np.testing.assert_array_equal(model(inputs, training=True)[0].numpy(), first)
  assert not np.allclose(model(inputs, training=False)[0].numpy(), first)
