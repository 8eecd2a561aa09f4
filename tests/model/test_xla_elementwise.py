"""model/xla_elementwise.py: the training step's layer norms, GELU and dropout under XLA equal
TensorFlow's own ops within float32 rounding, forward and backward; everything outside the train
step traces TensorFlow's own ops."""

import math

import numpy as np
import pytest
import tensorflow as tf
import tf_keras

from squad_qa.model import attention
from squad_qa.model import bert_config as bert_config_lib
from squad_qa.model import fused_feed_forward
from squad_qa.model import span_model
from squad_qa.model import xla_elementwise
from squad_qa.tasks import model_dir
from squad_qa.tasks import optimization
from squad_qa.tasks import question_answering
from tests import testutil


def xla_calls(concrete_function):
  """Names of the calls in `concrete_function`'s graph, and in the functions it holds (loop
  bodies, gradients), that XLA must compile."""
  graph_def = concrete_function.graph.as_graph_def()
  nodes = list(graph_def.node)
  for function in graph_def.library.function:
    nodes += function.node_def
  return [n.name for n in nodes if n.attr["_XlaMustCompile"].b]


def test_layer_norm_and_its_gradients_equal_tf_keras():
  plain = tf_keras.layers.LayerNormalization(epsilon=1e-12)
  switched = tf_keras.layers.LayerNormalization(epsilon=1e-12)
  for layer in (plain, switched):
    layer.build([None, None, 48])
  gamma, beta = np.linspace(0.5, 1.5, 48), np.linspace(-0.2, 0.3, 48)
  plain.set_weights([gamma, beta])
  switched.set_weights([gamma, beta])
  switched.__class__ = xla_elementwise.XlaLayerNormalization
  x = tf.random.stateless_normal([3, 37, 48], seed=[1, 2]) * 4.0 + 1.0
  dy = tf.random.stateless_normal([3, 37, 48], seed=[3, 4])

  def forward_backward(layer):
    with tf.GradientTape() as tape, xla_elementwise.training():
      tape.watch(x)
      y = layer(x)
    return [y] + tape.gradient(y, [x] + layer.trainable_variables, output_gradients=dy)

  step = tf.function(forward_backward)
  assert xla_calls(
      step.get_concrete_function(switched)) and not xla_calls(step.get_concrete_function(plain))
  for expected, got in zip(step(plain), step(switched)):
    np.testing.assert_allclose(got.numpy(), expected.numpy(), rtol=1e-4, atol=2e-5)


@pytest.mark.parametrize("offset_last", [False, True])
def test_recomputing_xla_gradients_equal_tensorflow_s(offset_last):
  """A function of a [2, 5, 6] tensor and two broadcast [6] vectors, the last added to its
  output: forward and gradients (the vectors' summed over the rows outside XLA; with
  `offset_last` the shift's from the upstream gradient itself) equal TensorFlow's plain ones, and
  both passes run as XLA functions."""

  def function(x, scale, shift):
    return tf.math.erf(x * scale) * tf.exp(x) + shift

  compiled = xla_elementwise.recomputing_xla(function, offset_last)
  x = tf.random.stateless_normal([2, 5, 6], seed=[5, 6])
  scale, shift = tf.linspace(0.5, 1.5, 6), tf.linspace(-1.0, 1.0, 6)
  dy = tf.random.stateless_normal([2, 5, 6], seed=[7, 8])

  @tf.function
  def forward_backward(f, x, scale, shift):
    with tf.GradientTape() as tape:
      tape.watch([x, scale, shift])
      y = f(x, scale, shift)
    return [y] + tape.gradient(y, [x, scale, shift], output_gradients=dy)

  expected = forward_backward(function, x, scale, shift)
  got = forward_backward(compiled, x, scale, shift)
  assert [g.shape for g in got] == [(2, 5, 6), (2, 5, 6), (6,), (6,)]
  for e, g in zip(expected, got):
    np.testing.assert_allclose(g.numpy(), e.numpy(), rtol=1e-5, atol=1e-5)
  np.testing.assert_allclose(got[3].numpy(), tf.reduce_sum(dy, [0, 1]).numpy(), rtol=1e-5)
  assert len(xla_calls(forward_backward.get_concrete_function(compiled, x, scale, shift))) == 2


def tiny_config():
  return bert_config_lib.BertConfig.from_dict(
      dict(testutil.TINY_BERT_CONFIG, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0))


def test_a_training_model_switches_every_layer_norm_and_the_gelu():
  config = tiny_config()
  model = question_answering.QuestionAnsweringTask(
      question_answering.QATaskConfig(bert_config=config, max_seq_length=128)).build_model()
  layer_norms = [l for l in model.submodules if isinstance(l, tf_keras.layers.LayerNormalization)]
  # The embeddings' layer norm and two per layer (after the attention, after the feed-forward).
  assert len(layer_norms) == 1 + 2 * config.num_hidden_layers
  assert {type(l) for l in layer_norms} == {xla_elementwise.XlaLayerNormalization}
  gelu = span_model.gelu_exact if config.exact_gelu else span_model.gelu_tanh
  # The feed-forward's dense layer applies the GELU, with its bias, in one XLA function
  # (model/fused_feed_forward.py).
  feed_forward = [l for l in model.submodules if isinstance(l, fused_feed_forward.MatMulDense)]
  assert [(l.fused_activation, l.xla_train_step) for l in feed_forward
         ] == [(gelu, True)] * config.num_hidden_layers
  # The attention's dropout takes the softmax's gradient in one XLA function (model/attention.py).
  attention_layers = [
      l for l in model.submodules if isinstance(l, attention.QueryFirstMultiHeadAttention)
  ]
  assert [l.xla_train_step for l in attention_layers] == [True] * config.num_hidden_layers
  # Every dropout layer's mask is drawn and applied in one XLA function (model/dropout.py): the
  # embeddings' and four per layer, rate 0 or not.
  dropouts = [
      l for l in model.submodules
      if hasattr(getattr(getattr(l, "_random_generator", None), "dropout", None), "plain")
  ]
  assert len(dropouts) == 1 + 4 * config.num_hidden_layers
  assert xla_elementwise.use_xla_elementwise(model) == 2 + 8 * config.num_hidden_layers  # again


@pytest.mark.parametrize("accumulation_steps", [1, 2])
def test_train_step_gradients_equal_the_plain_model(accumulation_steps):
  """The same weights and real batch (windows of up to 256 tokens, padded) through a switched
  and a plain model: the loss and every gradient agree within float32 rounding, and only the
  switched model's step compiles with XLA; its prediction does not."""
  config = tiny_config()
  batch = testutil.real_train_batch(8, max_seq_length=256)
  assert len(set(np.sum(batch["input_mask"].numpy(), axis=1))) > 1  # padding varies
  results, steps = [], []
  for switch in (False, True):
    tf_keras.utils.set_random_seed(3)
    model = question_answering.QuestionAnsweringTask(
        question_answering.QATaskConfig(bert_config=config, max_seq_length=256,
                                        xla_elementwise=switch)).build_model()
    optimizer = optimization.create_optimizer(1e-4, 10, 0.1, loss_scale=False)
    step = tf.function(question_answering.make_gradient_fn(model, optimizer, accumulation_steps))
    loss, grads = step(batch)
    results.append((float(loss), [tf.convert_to_tensor(g).numpy() for g in grads]))
    steps.append(step.get_concrete_function(batch))
    predict = tf.function(lambda inputs, m=model: m(inputs, training=False))
    assert not xla_calls(predict.get_concrete_function(span_model.model_inputs(batch)))
  assert not xla_calls(steps[0]) and xla_calls(steps[1])
  (plain_loss, plain_grads), (loss, grads) = results
  assert loss == pytest.approx(plain_loss, rel=1e-5)
  assert len(grads) == len(plain_grads)
  # Gradients that are 0 in exact arithmetic (e.g. the key biases) hold float32 rounding noise.
  largest = max(np.abs(g).max() for g in plain_grads)
  for expected, got in zip(plain_grads, grads):
    np.testing.assert_allclose(got, expected, rtol=1e-3, atol=1e-5 * largest)


def test_dropout_under_xla_draws_the_plain_masks_and_gradients():
  """With dropout (0.2 on the hidden states and the attention probabilities), the same weights,
  generator states and real batch through a switched and a plain model: the same masks, so the
  loss and every gradient agree within float32 rounding, and both differ from a step without
  dropout by far more."""
  config = bert_config_lib.BertConfig.from_dict(
      dict(testutil.TINY_BERT_CONFIG, hidden_dropout_prob=0.2, attention_probs_dropout_prob=0.2))
  batch = testutil.real_train_batch(8, max_seq_length=256)
  models = [
      question_answering.QuestionAnsweringTask(
          question_answering.QATaskConfig(bert_config=config, max_seq_length=256,
                                          xla_elementwise=switch)).build_model()
      for switch in (False, True)
  ]
  models[1].set_weights(models[0].get_weights())
  states = [np.array(g.state.numpy()) for g in model_dir.dropout_generators(models[0])]

  def loss_and_gradients(model):
    for generator, state in zip(model_dir.dropout_generators(model), states):
      generator.reset(state)
    optimizer = optimization.create_optimizer(1e-4, 10, 0.1, loss_scale=False)
    loss, grads = tf.function(question_answering.make_gradient_fn(model, optimizer))(batch)
    return [float(loss)] + [tf.convert_to_tensor(g).numpy() for g in grads]

  plain, switched = loss_and_gradients(models[0]), loss_and_gradients(models[1])
  for layer in models[0].submodules:
    if isinstance(layer, tf_keras.layers.Dropout):
      layer.rate = 0.0
  undropped = loss_and_gradients(models[0])
  largest = max(np.abs(g).max() for g in plain[1:])
  assert max(np.abs(a - b).max() for a, b in zip(undropped[1:], plain[1:])) > 1e-2 * largest
  assert switched[0] == pytest.approx(plain[0], rel=1e-5)
  for expected, got in zip(plain[1:], switched[1:]):
    np.testing.assert_allclose(got, expected, rtol=1e-3, atol=1e-5 * largest)


def test_attention_operands_and_heads_last_equal_tensorflow_s_transposes():
  """The heads-first query, key and value with model/attention.py's mask feature, the heads-last
  output and the gradients of both equal TensorFlow's scale, concat and transposes bit for bit
  (bfloat16, 7 tokens, a padded key in each row)."""
  rng = np.random.default_rng(0)
  batch, length, heads, size = 2, 7, 3, 4
  query, key, value = [
      tf.constant(rng.normal(size=(batch, length, heads, size)), tf.bfloat16) for _ in range(3)
  ]
  keep = np.ones((batch, length), np.int32)
  keep[0, 5:], keep[1, 2] = 0, 0
  mask = tf.constant(np.repeat(keep[:, None, :], length, axis=1))  # [B, T, S], rows equal
  scale = 1 / math.sqrt(size)
  upstream = [
      tf.constant(rng.normal(size=s), tf.bfloat16)
      for s in [(batch, heads, length, size + 1)] * 2 + [(batch, heads, length, size)]
  ]
  heads_first = lambda x: tf.transpose(x, [0, 2, 1, 3])

  def expected_operands(query, key, value):
    query, key = attention.with_key_mask_feature(query * tf.constant(scale, tf.bfloat16), key, mask)
    return heads_first(query), heads_first(key), heads_first(value)

  def compiled_operands(query, key, value):
    return xla_elementwise.attention_operands(query, key, value, mask, scale,
                                              attention.with_key_mask_feature)

  results = []
  for operands in (expected_operands, compiled_operands):
    with tf.GradientTape() as tape:
      tape.watch([query, key, value])
      outputs = operands(query, key, value)
    results.append([o.numpy() for o in outputs] +
                   [g.numpy() for g in tape.gradient(outputs, [query, key, value], upstream)])
  masked = float(tf.cast(attention.masked_out_score(tf.bfloat16), tf.bfloat16))
  assert results[1][1][1, :, 2, -1].tolist() == [masked] * heads  # [B, N, S, H + 1]: key 2 masked
  for expected, got in zip(*results):
    np.testing.assert_array_equal(got.astype(np.float32), expected.astype(np.float32))

  output = tf.constant(rng.normal(size=(batch, heads, length, size)), tf.bfloat16)
  output_upstream = tf.constant(rng.normal(size=(batch, length, heads, size)), tf.bfloat16)
  with tf.GradientTape(persistent=True) as tape:
    tape.watch(output)
    expected = heads_first(output) * tf.constant(1 / 0.9, tf.bfloat16)
    got = xla_elementwise.heads_last(output, 1 / 0.9)
  np.testing.assert_array_equal(got.numpy().astype(np.float32), expected.numpy().astype(np.float32))
  np.testing.assert_array_equal(
      tape.gradient(got, output, output_upstream).numpy().astype(np.float32),
      tape.gradient(expected, output, output_upstream).numpy().astype(np.float32))


@pytest.fixture
def float32_policy_after():
  yield
  tf_keras.mixed_precision.set_global_policy("float32")


def test_bfloat16_train_step_is_as_close_to_float32_as_the_plain_model(float32_policy_after):
  """Under mixed_bfloat16 the switched step adds the feed-forward bias in float32 inside XLA
  where tfm adds it in bfloat16: on the same weights (biases not 0) and batch, its loss and
  gradients stay as close to float32's as the plain step's (within 20 %)."""
  config = tiny_config()
  batch = testutil.real_train_batch(8, max_seq_length=256)
  weights, results = None, {}
  for policy, switch in (("float32", False), ("mixed_bfloat16", False), ("mixed_bfloat16", True)):
    tf_keras.mixed_precision.set_global_policy(policy)
    model = question_answering.QuestionAnsweringTask(
        question_answering.QATaskConfig(bert_config=config, max_seq_length=256,
                                        xla_elementwise=switch)).build_model()
    if weights is None:
      rng = np.random.default_rng(4)
      weights = [
          w + rng.normal(0, 0.1, w.shape) if v.name.endswith("bias:0") else w
          for v, w in zip(model.weights, model.get_weights())
      ]
    model.set_weights(weights)
    optimizer = optimization.create_optimizer(1e-4, 10, 0.1, loss_scale=False)
    loss, grads = tf.function(question_answering.make_gradient_fn(model, optimizer))(batch)
    values = [[float(loss)]] + [tf.convert_to_tensor(g).numpy().ravel() for g in grads]
    results[policy, switch] = np.concatenate(values)
  reference = results["float32", False]
  plain_error = np.linalg.norm(results["mixed_bfloat16", False] - reference)
  switched_error = np.linalg.norm(results["mixed_bfloat16", True] - reference)
  assert 0 < switched_error <= 1.2 * plain_error < 0.05 * np.linalg.norm(reference)
