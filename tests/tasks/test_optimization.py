"""tasks/optimization.py's AdamWeightDecay: tfm's update, with its weight decay under XLA."""

import numpy as np
import tensorflow as tf
import tf_keras
from official.modeling.optimization import legacy_adamw

from squad_qa.model import bert_config as bert_config_lib
from squad_qa.model import span_model
from squad_qa.tasks import optimization
from tests import testutil


def test_weight_decay_under_xla_equals_tfm_s():
  """Three updates of the tiny model's weights from real batches' gradients, the word embeddings
  copy-on-read after the forward's gather: the weights equal tfm's AdamWeightDecay's within float32
  rounding, and differ from an update without decay by far more (so the decay ran); the weights
  tfm excludes from decay (layer norms, biases) equal its own bit for bit."""
  tf_keras.utils.set_random_seed(4)
  model, _ = span_model.build_span_model(
      bert_config_lib.BertConfig.from_dict(testutil.TINY_BERT_CONFIG))
  initial = model.get_weights()
  questions = testutil.real_train_batch(12, max_seq_length=128)
  gradients = []
  for i in range(3):
    batch = {k: v[4 * i:4 * i + 4] for k, v in questions.items()}
    with tf.GradientTape() as tape:
      start, end = model(span_model.model_inputs(batch), training=False)
      loss = tf.reduce_mean(
          tf_keras.losses.sparse_categorical_crossentropy(batch["start_positions"], start, True) +
          tf_keras.losses.sparse_categorical_crossentropy(batch["end_positions"], end, True))
    gradients.append(tape.gradient(loss, model.trainable_variables))
  # The encoder's pooler is not on the span head's path: no gradient.
  trained = [v for v, g in zip(model.trainable_variables, gradients[0]) if g is not None]
  gradients = [[tf.convert_to_tensor(g) for g in grads if g is not None] for grads in gradients]

  def updated(optimizer_class, weight_decay_rate=optimization.WEIGHT_DECAY_RATE):
    model.set_weights(initial)
    optimizer = optimizer_class(learning_rate=1e-2, weight_decay_rate=weight_decay_rate,
                                epsilon=1e-6,
                                exclude_from_weight_decay=optimization.EXCLUDE_FROM_WEIGHT_DECAY)

    @tf.function
    def step(g):
      optimizer.apply_gradients(zip(g, trained))

    for g in gradients:
      step(g)
    return {v.name: v.numpy() for v in trained}

  tfm, ours = updated(legacy_adamw.AdamWeightDecay), updated(optimization.AdamWeightDecay)
  undecayed = updated(legacy_adamw.AdamWeightDecay, weight_decay_rate=0.0)
  decayed = [n for n in tfm if not any(e in n for e in optimization.EXCLUDE_FROM_WEIGHT_DECAY)]
  assert any("word_embeddings" in n for n in decayed) and len(decayed) < len(tfm)
  for name, expected in tfm.items():
    if name in decayed:
      # The decay moved each weight by 3e-4 of itself, 1,000 times the tolerance.
      assert np.abs(undecayed[name] - expected).max() > 1e-4 * np.abs(expected).max()
      np.testing.assert_allclose(ours[name], expected, rtol=3e-7,
                                 atol=1e-7 * np.abs(expected).max())
    else:
      np.testing.assert_array_equal(ours[name], expected)
