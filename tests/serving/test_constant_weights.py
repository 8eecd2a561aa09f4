"""serving/constant_weights.py: a 16-bit span model served with its weights as graph constants.

The frozen logits must equal the model's own bit for bit (the same casts of the same values), on
padded windows of several lengths, and a 16-bit export must carry no copy of the weights as
variables while a float32 export keeps them.
"""

import collections

import numpy as np
import pytest
import tensorflow as tf
import tf_keras

from squad_qa.model import bert_config as bert_config_lib
from squad_qa.model import span_model
from squad_qa.serving import constant_weights
from squad_qa.serving import module as serving_module
from tests import numpy_bert
from tests import testutil

QA_CONFIG = dict(max_seq_length=64, doc_stride=32, max_query_length=16, do_lower_case=True,
                 **serving_module.DECODING_DEFAULTS)


def _model(policy):
  config = bert_config_lib.BertConfig.from_dict(testutil.TINY_BERT_CONFIG)
  model, _ = span_model.build_span_model(config, policy)
  return model


def _windows(lengths, width):
  """int32 [len(lengths), width] ids, mask and type ids: real tokens then padding."""
  rng = np.random.default_rng(0)
  mask = (np.arange(width)[None] < np.array(lengths)[:, None]).astype(np.int32)
  ids = rng.integers(1000, 20000, mask.shape).astype(np.int32) * mask
  types = ((np.arange(width)[None] > 5) * mask).astype(np.int32)
  return tuple(tf.constant(x) for x in (ids, mask, types))


def _model_logits(model, windows):
  return model(dict(zip(span_model.MODEL_INPUTS, windows)), training=False)


@pytest.mark.parametrize("policy", ["mixed_bfloat16", "mixed_float16"])
def test_constant_logits_equal_the_models_at_every_shape(policy):
  model = _model(policy)
  frozen = constant_weights.logits_function(model)
  for lengths, width in (([37], 37), ([50, 12, 33], 50), ([9, 64, 64, 20], 64)):
    windows = _windows(lengths, width)
    got, want = frozen(*windows), _model_logits(model, windows)
    for g, w in zip(got, want):
      assert g.dtype == tf.float32 and g.shape == (len(lengths), width)
      np.testing.assert_array_equal(g.numpy(), w.numpy())


@pytest.mark.parametrize("policy,dtype", [("mixed_bfloat16", tf.bfloat16),
                                          ("mixed_float16", tf.float16)])
def test_weights_cast_on_every_call_are_stored_in_the_compute_dtype(policy, dtype):
  """Every 16-bit dense kernel and the word-embedding table are 16-bit constants of the frozen
  graph (not float32 constants cast on each call); the float32 span head stays float32."""
  model = _model(policy)
  graph_def = constant_weights.logits_function(model).graph.as_graph_def()
  stored = collections.Counter((tf.dtypes.as_dtype(node.attr["dtype"].type),
                                tuple(d.size for d in node.attr["value"].tensor.tensor_shape.dim))
                               for node in graph_def.node if node.op == "Const")
  dense = [layer for layer in model.submodules if isinstance(layer, tf_keras.layers.EinsumDense)]
  kernels = collections.Counter(
      tuple(layer.kernel.shape) for layer in dense if layer.compute_dtype == dtype.name)
  assert sum(kernels.values()) >= 6 * testutil.TINY_BERT_CONFIG["num_hidden_layers"]
  table = [v for v in model.variables if "word_embeddings" in v.name]
  assert len(table) == 1
  kernels[tuple(table[0].shape)] += 1
  for shape, count in kernels.items():
    assert stored[(dtype, shape)] >= count, shape
  head = model.labeler.span_labeling  # computes in float32: its kernel is used as stored
  assert head.compute_dtype == "float32"
  head_kernel = [w for w in head.weights if w.shape.rank == 2]
  assert len(head_kernel) == 1
  assert stored[(tf.float32, tuple(head_kernel[0].shape))] >= 1


def test_the_constants_are_the_weights_when_frozen():
  model = _model("mixed_bfloat16")
  frozen = constant_weights.logits_function(model)
  windows = _windows([30, 18], 30)
  before = [x.numpy() for x in frozen(*windows)]
  for variable in model.variables:
    variable.assign(tf.zeros_like(variable))
  np.testing.assert_array_equal(frozen(*windows)[0].numpy(), before[0])
  assert not np.array_equal(_model_logits(model, windows)[0].numpy(), before[0])


def test_only_a_model_cast_at_each_call_and_small_enough_is_frozen(monkeypatch, caplog):
  bfloat16_model = _model("mixed_bfloat16")
  assert constant_weights.pays_off(bfloat16_model)
  assert not constant_weights.pays_off(_model("float32"))
  weights = sum(int(np.prod(v.shape)) for v in bfloat16_model.variables)
  assert constant_weights.weight_bytes(bfloat16_model) == 4 * weights  # float32 variables
  monkeypatch.setattr(constant_weights, "MAX_CONSTANT_BYTES", 4 * weights - 1)
  with caplog.at_level("INFO"):
    assert not constant_weights.pays_off(bfloat16_model)
  assert f"the weights ({4 * weights / 1e6:,.0f} MB) stay variables" in caplog.text


@pytest.mark.parametrize("policy,saves_weights", [("float32", True), ("mixed_bfloat16", False)])
def test_an_export_keeps_variables_only_in_float32(policy, saves_weights, tmp_path):
  model = _model(policy)
  module = serving_module.LogitsServingModule(model, testutil.vocab_file(), QA_CONFIG)
  tf.saved_model.save(module, str(tmp_path), signatures=module.signatures())
  reader = tf.train.load_checkpoint(str(tmp_path / "variables" / "variables"))
  shapes = reader.get_variable_to_shape_map()
  # Float variables only: a dropout layer's random generator, when another test in the process
  # turned tf_keras's tf.random generators on, saves an int64 state that is not a weight.
  saved = sum(
      int(np.prod(shapes[name])) for name, dtype in reader.get_variable_to_dtype_map().items()
      if dtype.is_floating)
  loaded = tf.saved_model.load(str(tmp_path))
  assert saved == (sum(int(np.prod(v.shape)) for v in model.variables) if saves_weights else 0)
  windows = _windows([41, 7], 41)
  outputs = loaded.signatures["serve_features"](**dict(zip(span_model.MODEL_INPUTS, windows)))
  for name, want in zip(("start_logits", "end_logits"), _model_logits(model, windows)):
    # The saved graph and the eager model may order float sums differently (grappler's fusions).
    np.testing.assert_allclose(outputs[name].numpy(), want.numpy(), rtol=0, atol=1e-5)


def _layer_norm():
  """A tf_keras layer norm of epsilon 1e-12 over 64 features, random gamma and beta."""
  layer = tf_keras.layers.LayerNormalization(epsilon=1e-12)
  layer.build([None, None, 64])
  rng = np.random.default_rng(0)
  layer.set_weights([rng.normal(0, 1, 64).astype(np.float32) for _ in range(2)])
  return layer


def _formula(layer, x):
  """The layer norm in float64 (tests/numpy_bert.py's, of the same epsilon)."""
  assert layer.epsilon == numpy_bert.LAYER_NORM_EPSILON
  return numpy_bert.layer_norm(np.asarray(x, np.float64), *layer.get_weights())


def test_frozen_layer_norms_keep_their_epsilon():
  """A frozen layer norm on rows of variance 0.01 matches the float64 formula: fused by TensorFlow's
  oneDNN optimizer, it computed with epsilon 1e-3 (0.34 off)."""
  layer = _layer_norm()
  concrete = tf.function(layer).get_concrete_function(tf.TensorSpec([None, None, 64]))
  frozen = constant_weights.frozen_function(concrete)
  x = np.random.default_rng(1).normal(10, 0.1, [2, 7, 64]).astype(np.float32)
  (got,) = frozen(tf.constant(x))
  np.testing.assert_array_equal(got.numpy(), layer(x).numpy())  # the layer's own ops, unfused
  assert np.abs(got.numpy() - _formula(layer, x)).max() < 1e-3


def test_frozen_layer_norms_of_bfloat16_inputs_keep_their_epsilon():
  """A layer norm of a bfloat16 input (the attention's and embeddings' under mixed_bfloat16) gets
  that input times 2^16, so that TensorFlow fuses it: still within float32 rounding of the
  formula."""
  layer = _layer_norm()
  normalize = tf.function(lambda x: layer(tf.cast(x, tf.float32)))
  frozen = constant_weights.frozen_function(
      normalize.get_concrete_function(tf.TensorSpec([None, None, 64], tf.bfloat16)))
  graph = frozen.graph.as_graph_def()
  assert [node.op for node in graph.node if node.name.endswith("/scaled_input")] == ["Mul"]
  x = tf.cast(np.random.default_rng(1).normal(10, 0.1, [2, 7, 64]), tf.bfloat16)
  (got,) = frozen(x)
  assert np.abs(got.numpy() - _formula(layer, tf.cast(x, tf.float64).numpy())).max() < 1e-3
