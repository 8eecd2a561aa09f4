"""tasks/evaluation.py's prediction step: one tf.function per model, traced once for every batch
shape and reused by every `predict` of that model, which does not keep the model alive."""

import gc
import weakref

import numpy as np
import tensorflow as tf

from squad_qa.model import bert_config as bert_config_lib
from squad_qa.model import span_model
from squad_qa.tasks import evaluation
from tests import testutil


def _inputs(batch, width):
  rng = np.random.default_rng(width)
  return {
      span_model.INPUT_WORD_IDS: tf.constant(rng.integers(1000, 20000, (batch, width)), tf.int32),
      span_model.INPUT_MASK: tf.ones((batch, width), tf.int32),
      span_model.INPUT_TYPE_IDS: tf.zeros((batch, width), tf.int32)
  }


def test_one_step_per_model_traced_once_for_all_widths():
  config = bert_config_lib.BertConfig.from_dict(testutil.TINY_BERT_CONFIG)
  model, _ = span_model.build_span_model(config)
  other, _ = span_model.build_span_model(config)
  step = evaluation.predict_step(model)
  assert evaluation.predict_step(model) is step and evaluation.predict_step(other) is not step
  for batch, width in ((4, 37), (3, 64), (4, 50)):  # an evaluation: widths vary
    start, _ = step(_inputs(batch, width))
    expected, _ = model(_inputs(batch, width), training=False)
    np.testing.assert_allclose(start.numpy(), expected.numpy(), rtol=1e-5, atol=1e-6)
  for batch, width in ((2, 90), (4, 37)):  # the next evaluation of the same model
    evaluation.predict_step(model)(_inputs(batch, width))
  assert evaluation.predict_step(model).experimental_get_tracing_count() == 1

  held = weakref.ref(model)
  del model, step
  gc.collect()
  assert held() is None  # the cached step does not keep its model
