"""model/fused_feed_forward.py: outside the train step every block's feed-forward traces MatMul,
BiasAdd and the GELU (the form oneDNN fuses) and gives tfm's logits on the same weights; the train
step still traces tfm's einsum, with the same loss and gradients."""

from unittest import mock

import numpy as np
import pytest
import tensorflow as tf
import tf_keras

from squad_qa.model import bert_config as bert_config_lib
from squad_qa.model import fused_feed_forward
from squad_qa.model import span_model
from squad_qa.tasks import optimization
from squad_qa.tasks import question_answering
from tests import testutil

CONFIGS = {  # google-research's tanh GELU and Hugging Face's exact one
    "tanh": dict(testutil.TINY_BERT_CONFIG, hidden_dropout_prob=0.0,
                 attention_probs_dropout_prob=0.0),
    "exact": dict(testutil.TINY_BERT_CONFIG, model_type="bert", hidden_dropout_prob=0.0,
                  attention_probs_dropout_prob=0.0),
}


def plain_and_fused(config, encoder_policy=None):
  """Two span models with the same (seeded) weights: tfm's feed-forward, and the switched one."""
  tf_keras.utils.set_random_seed(5)
  with mock.patch.object(fused_feed_forward, "use_fused_feed_forward", lambda network: 0):
    plain, _ = span_model.build_span_model(config, encoder_policy)
  fused, _ = span_model.build_span_model(config, encoder_policy)
  fused.set_weights(plain.get_weights())
  return plain, fused


def intermediate_op_types(model, inputs):
  """Op types traced under the blocks' "intermediate" scope by a prediction call."""
  graph = tf.function(lambda x: model(x, training=False)).get_concrete_function(inputs).graph
  return {op.type for op in graph.get_operations() if "/intermediate/" in op.name}


@pytest.mark.parametrize("gelu", sorted(CONFIGS))
def test_prediction_traces_matmul_and_equals_tfm(gelu):
  config = bert_config_lib.BertConfig.from_dict(CONFIGS[gelu])
  assert config.exact_gelu == (gelu == "exact")
  plain, fused = plain_and_fused(config)
  blocks = [l for l in fused.submodules if isinstance(l, fused_feed_forward.MatMulDense)]
  assert len(blocks) == config.num_hidden_layers
  assert fused_feed_forward.use_fused_feed_forward(fused.labeler.checkpoint_items["encoder"]) == 2
  batch = span_model.model_inputs(testutil.real_train_batch(8, max_seq_length=256))
  assert len(set(np.sum(batch["input_mask"].numpy(), axis=1))) > 1  # padding varies
  assert {"MatMul", "BiasAdd"} <= intermediate_op_types(fused, batch)
  assert "Einsum" not in intermediate_op_types(fused, batch)
  assert "Einsum" in intermediate_op_types(plain, batch)
  for expected, got in zip(plain(batch, training=False), fused(batch, training=False)):
    np.testing.assert_allclose(got.numpy(), expected.numpy(), rtol=1e-5, atol=1e-5)
    assert np.abs(expected.numpy()).max() > 0.05  # real logits were compared


@pytest.mark.parametrize("policy", ["mixed_bfloat16", "mixed_float16"])
def test_16_bit_prediction_is_as_close_to_float32_as_tfm(policy):
  """Under mixed_bfloat16 the fused GELU runs in bfloat16 (or on oneDNN's float32 accumulator)
  where tfm's runs in float32; under mixed_float16 both run it in float16 (the GPU's path). The
  logits stay as close to float32's as tfm's, within 20 %."""
  config = bert_config_lib.BertConfig.from_dict(CONFIGS["exact"])
  reference, _ = plain_and_fused(config)
  plain, fused = plain_and_fused(config, policy)
  plain.set_weights(reference.get_weights())
  fused.set_weights(reference.get_weights())
  batch = span_model.model_inputs(testutil.real_train_batch(8, max_seq_length=256))
  expected = reference(batch, training=False)[0].numpy()
  plain_error = np.abs(plain(batch, training=False)[0].numpy() - expected).max()
  fused_error = np.abs(fused(batch, training=False)[0].numpy() - expected).max()
  assert 0 < fused_error <= 1.2 * plain_error < 0.05


def test_train_step_is_tfm_s():
  config = bert_config_lib.BertConfig.from_dict(CONFIGS["exact"])
  batch = testutil.real_train_batch(8, max_seq_length=256)
  results = []
  for model in plain_and_fused(config):
    optimizer = optimization.create_optimizer(1e-4, 10, 0.1, loss_scale=False)
    step = tf.function(question_answering.make_gradient_fn(model, optimizer))
    graph = step.get_concrete_function(batch).graph
    assert "Einsum" in {op.type for op in graph.get_operations() if "/intermediate/" in op.name}
    loss, grads = step(batch)
    results.append((float(loss), [tf.convert_to_tensor(g).numpy() for g in grads]))
  (plain_loss, plain_grads), (loss, grads) = results
  assert loss == plain_loss
  assert len(grads) == len(plain_grads) > 4 * config.num_hidden_layers
  for expected, got in zip(plain_grads, grads):
    np.testing.assert_array_equal(got, expected)
