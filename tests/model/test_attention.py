"""model/attention.py: tfm's attention with the query-first score einsum is in every model we
build, and computes what tf_keras's own MultiHeadAttention computes (logits and gradients)."""

import numpy as np
import pytest
import tensorflow as tf
import tf_keras

from squad_qa.model import attention
from squad_qa.model import bert_config as bert_config_lib
from squad_qa.model import span_model
from squad_qa.tasks import model_dir
from squad_qa.tasks import optimization
from squad_qa.tasks import question_answering
from tests import testutil

KEY_FIRST = "aecd,abcd->acbe"  # tf_keras 2.20's score equation for [B, seq, heads, size] inputs
QUERY_FIRST = "abcd,aecd->acbe"


def test_query_first_equation_swaps_the_operands():
  assert attention.query_first_equation(KEY_FIRST) == QUERY_FIRST
  with pytest.raises(ValueError, match="two-operand"):
    attention.query_first_equation("abc->acb")


@pytest.mark.parametrize("dtype", [tf.float32, tf.bfloat16, tf.float16])
def test_the_key_mask_feature_adds_tf_keras_mask_to_the_scores(dtype):
  """The einsum of the extended query and key equals tf_keras's scores plus its mask adder, bit for
  bit, with keys padded differently in each row. On kept keys the feature adds an exact zero: the
  scores equal, bit for bit in every dtype, those of the query and key widened by a zero feature.
  float16 einsums accumulate in float16 on some CPUs (AVX-512 without AVX512-FP16): there the
  ninth term, even a zero, moves the partial sums' rounding against the 8-wide einsum, and the
  scores agree with tf_keras's within two float16 ulps, the softmax within 2^-10."""
  rng = np.random.default_rng(1)
  query = tf.constant(rng.normal(size=(2, 5, 3, 8)), dtype)
  key = tf.constant(rng.normal(size=(2, 6, 3, 8)), dtype)
  keep = np.array([[1, 1, 1, 1, 0, 0], [1, 1, 1, 1, 1, 0]], np.int32)
  mask = tf.constant(np.repeat(keep[:, None, :], 5, axis=1))  # [B, T, S], as SelfAttentionMask's
  softmax = tf_keras.layers.Softmax(dtype=dtype)
  scores = tf.einsum(QUERY_FIRST, query, key)
  expected = softmax(scores, tf.expand_dims(mask, 1))
  extended_query, extended_key = attention.with_key_mask_feature(query, key, mask)
  assert extended_query.shape == (2, 5, 3, 9) and extended_key.shape == (2, 6, 3, 9)
  folded = tf.einsum(QUERY_FIRST, extended_query, extended_key)
  widened = tf.einsum(QUERY_FIRST,
                      *(tf.pad(t, [[0, 0], [0, 0], [0, 0], [0, 1]]) for t in (query, key)))
  for row in (0, 1):
    np.testing.assert_array_equal(folded.numpy()[row][..., keep[row] == 1],
                                  widened.numpy()[row][..., keep[row] == 1])
  kept, kept_scores = folded.numpy()[..., keep[0] == 1][0], scores.numpy()[..., keep[0] == 1][0]
  if dtype == tf.float16:
    ulp = float(np.spacing(np.abs(kept_scores).max()))
    np.testing.assert_allclose(kept.astype(np.float32), kept_scores.astype(np.float32), rtol=0,
                               atol=2 * ulp)
    np.testing.assert_allclose(
        softmax(folded).numpy().astype(np.float32),
        expected.numpy().astype(np.float32), rtol=0, atol=2**-10)
  else:
    np.testing.assert_array_equal(kept, kept_scores)
    np.testing.assert_array_equal(softmax(folded).numpy(), expected.numpy())
  assert float(tf.reduce_max(folded[0, :, :, 4:])) <= attention.masked_out_score(dtype) / 2
  assert float(tf.reduce_max(expected[0, :, :, 4:])) == 0.0 < float(
      tf.reduce_min(expected[0, :, :, :4]))


def _score_equations(model, inputs):
  graph = tf.function(lambda x: model(x, training=False)).get_concrete_function(inputs).graph
  return sorted({
      op.get_attr("equation").decode() for op in graph.get_operations()
      if op.type == "Einsum" and "self_attention/einsum/" in op.name
  })


def _logits_and_gradients(model, inputs, positions):

  @tf.function
  def run(x):
    with tf.GradientTape() as tape:
      start, end = model(x, training=False)
      loss = tf.reduce_sum(
          tf.nn.sparse_softmax_cross_entropy_with_logits(positions, start) +
          tf.nn.sparse_softmax_cross_entropy_with_logits(positions, end))
    gradients = tape.gradient(loss, model.trainable_variables)
    return start, end, [tf.convert_to_tensor(g) for g in gradients if g is not None]  # no pooler

  start, end, gradients = run(inputs)
  return [start.numpy(), end.numpy()] + [g.numpy() for g in gradients]


def test_built_models_use_query_first_attention_with_the_same_results():
  config = bert_config_lib.BertConfig.from_dict(testutil.TINY_BERT_CONFIG)
  model, _ = span_model.build_span_model(config)
  layers = [l for l in model.submodules if isinstance(l, tf_keras.layers.MultiHeadAttention)]
  assert len(layers) == config.num_hidden_layers
  assert all(type(l) is attention.QueryFirstMultiHeadAttention for l in layers)  # pylint: disable=unidiomatic-typecheck

  rng = np.random.default_rng(0)
  lengths = np.array([40, 64, 23])  # padding in two of the three rows exercises the mask
  mask = (np.arange(64)[None, :] < lengths[:, None]).astype(np.int32)
  inputs = {
      "input_word_ids": tf.constant(rng.integers(1000, 20000, (3, 64)) * mask, tf.int32),
      "input_mask": tf.constant(mask),
      "input_type_ids": tf.constant((np.arange(64)[None, :] > 10) * mask, tf.int32)
  }
  positions = tf.constant([5, 30, 12])
  assert _score_equations(model, inputs) == [QUERY_FIRST]
  ours = _logits_and_gradients(model, inputs, positions)

  for layer in layers:  # back to tf_keras's own class, same weights
    layer.__class__ = tf_keras.layers.MultiHeadAttention
  assert _score_equations(model, inputs) == [KEY_FIRST]
  theirs = _logits_and_gradients(model, inputs, positions)
  assert len(ours) == len(theirs) > 2 + 4 * config.num_hidden_layers
  for a, b in zip(ours, theirs):
    np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6)
  assert np.abs(ours[0]).max() > 0.01 and np.abs(ours[-1]).max() > 0  # real values were compared


def test_a_model_traced_unpadded_adds_no_mask():
  """Inside `unpadded_inputs()` the attention adds no mask: equal to the masked model where the
  mask is all ones; where it is not, equal to a model that attends every token."""
  config = bert_config_lib.BertConfig.from_dict(testutil.TINY_BERT_CONFIG)
  model, _ = span_model.build_span_model(config)
  rng = np.random.default_rng(0)
  ids = tf.constant(rng.integers(1000, 20000, (2, 48)), tf.int32)
  types = tf.constant(np.repeat((np.arange(48) > 10)[None], 2, 0), tf.int32)
  padded = tf.constant((np.arange(48)[None] < np.array([[48], [30]])).astype(np.int32))

  def logits(mask, unpadded):

    @tf.function
    def run(ids, mask, types):
      return model({"input_word_ids": ids, "input_mask": mask, "input_type_ids": types})

    if unpadded:
      with attention.unpadded_inputs():
        run = run.get_concrete_function(ids, mask, types)
    return np.stack([x.numpy() for x in run(ids, mask, types)])

  ones = tf.ones_like(ids)
  np.testing.assert_allclose(logits(ones, True), logits(ones, False), rtol=1e-6, atol=1e-6)
  np.testing.assert_allclose(
      logits(padded, True)[:, 1],
      logits(ones, False)[:, 1], rtol=1e-6, atol=1e-6)
  # The masked model's row 1 differs from the unmasked one's (by ~1e-3 on the untrained model,
  # 1,000 times the tolerance) where the mask hides keys.
  assert np.abs(logits(padded, False)[:, 1, :30] - logits(ones, False)[:, 1, :30]).max() > 1e-4
  assert not attention._UNPADDED  # pylint: disable=protected-access


def test_training_attention_applies_the_dropout_layer_s_masks_and_scale(monkeypatch):
  """A train step's attention drops with the dropout layer's own hashed masks, scales the values
  product by 1 / (1 - rate) and takes the softmax's and the dropout's gradients in one XLA
  function: on biases that are not 0, the loss and every gradient equal tf_keras's dropout of the
  probabilities from the same generator states within float32 rounding, and differ from those
  without dropout."""
  config = bert_config_lib.BertConfig.from_dict(
      dict(testutil.TINY_BERT_CONFIG, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.2))
  tf_keras.utils.set_random_seed(2)
  model = question_answering.QuestionAnsweringTask(
      question_answering.QATaskConfig(bert_config=config, max_seq_length=256)).build_model()
  rng = np.random.default_rng(2)
  model.set_weights([
      w + rng.normal(0, 0.1, w.shape) if v.name.endswith("bias:0") else w
      for v, w in zip(model.weights, model.get_weights())
  ])
  layers = [l for l in model.submodules if isinstance(l, attention.QueryFirstMultiHeadAttention)]
  assert len(layers) == config.num_hidden_layers
  assert all(l.xla_train_step and l._generator_dropout(True) for l in layers)  # pylint: disable=protected-access
  generators = model_dir.dropout_generators(model)
  states = [np.array(g.state.numpy()) for g in generators]
  batch = testutil.real_train_batch(6, max_seq_length=256)
  optimizer = optimization.create_optimizer(1e-4, 10, 0.1, loss_scale=False)

  def loss_and_gradients():
    for generator, state in zip(generators, states):
      generator.reset(state)
    step = tf.function(question_answering.make_gradient_fn(model, optimizer))
    loss, gradients = step(batch)
    return [float(loss)] + [tf.convert_to_tensor(g).numpy() for g in gradients]

  fused = loss_and_gradients()
  monkeypatch.setattr(attention.QueryFirstMultiHeadAttention, "_generator_dropout",
                      lambda self, training: None)
  plain = loss_and_gradients()
  for layer in model.submodules:
    if isinstance(layer, tf_keras.layers.Dropout):
      monkeypatch.setattr(layer, "rate", 0.0)
  undropped = loss_and_gradients()
  largest = max(np.abs(g).max() for g in plain[1:])
  # Dropout moved the gradients (14 % of the largest), far beyond the tolerance below.
  assert max(np.abs(a - b).max() for a, b in zip(undropped[1:], plain[1:])) > 1e-3 * largest
  assert fused[0] == pytest.approx(plain[0], rel=1e-5)
  for expected, got in zip(plain[1:], fused[1:]):
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-6 * largest)
