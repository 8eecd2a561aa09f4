"""Training pieces of train.py: loss, the mixed_float16 path (on the CPU), overfitting real features."""

import math

import numpy as np
import pytest
import tensorflow as tf
import tf_keras

from model import bert_config as bert_config_lib
from model import span_model
from preprocess import features as features_lib
from preprocess import squad_reader
from preprocess import wordpiece
from tasks import optimization
from tasks import question_answering
from tests import testutil

SEQ = 128


@pytest.fixture
def float32_policy_after():
  yield
  tf_keras.mixed_precision.set_global_policy("float32")


def real_train_batch(num_questions, max_seq_length=SEQ):
  """Features of the first real training questions whose answer lies in their first window."""
  squad = squad_reader.read_squad(str(testutil.TRAIN_FILE), is_training=True,
                                  max_examples=4 * num_questions)
  tokenizer = wordpiece.WordPieceTokenizer(testutil.vocab_file())
  contexts = tokenizer.tokenize(squad.contexts)
  batch = []
  for index, example in enumerate(squad.examples):
    question, answer = tokenizer.tokenize([example.question_text, example.answer_text])
    words = squad_reader.char_to_word_offsets(squad.contexts[example.paragraph_index])[1]
    span = features_lib.answer_token_span(contexts[example.paragraph_index], words,
                                          example.answer_start, example.answer_text, answer.ids)
    feature = features_lib.make_features(index, index, question.ids,
                                         contexts[example.paragraph_index], tokenizer.cls_id,
                                         tokenizer.sep_id, max_seq_length, 64, 32, span)[0]
    if feature.start_position > 0:
      batch.append(feature)
    if len(batch) == num_questions:
      break
  return {
      "input_word_ids": tf.constant([f.input_ids for f in batch], tf.int32),
      "input_mask": tf.constant([f.input_mask for f in batch], tf.int32),
      "input_type_ids": tf.constant([f.segment_ids for f in batch], tf.int32),
      "start_positions": tf.constant([f.start_position for f in batch], tf.int32),
      "end_positions": tf.constant([f.end_position for f in batch], tf.int32),
  }


def test_span_loss_of_uniform_logits_is_log_seq():
  logits = tf.zeros([3, 10])
  loss = question_answering.span_loss(tf.constant([0, 4, 9]), tf.constant([1, 5, 9]), logits, logits)
  assert float(loss) == pytest.approx(math.log(10), rel=1e-6)
  # A confident right answer costs ~0; the loss averages start and end.
  start = tf.one_hot([2], 10) * 100.0
  end = tf.zeros([1, 10])
  loss = question_answering.span_loss(tf.constant([2]), tf.constant([7]), start, end)
  assert float(loss) == pytest.approx(math.log(10) / 2, rel=1e-5)


def test_mixed_float16_path_on_cpu(float32_policy_after):
  assert question_answering.set_precision_policy(mixed=True) == "mixed_float16"
  tf_keras.utils.set_random_seed(1)
  model, encoder = span_model.build_span_model(
      bert_config_lib.BertConfig.from_dict(testutil.TINY_BERT_CONFIG))
  assert encoder.dtype_policy.name == "mixed_float16"
  batch = real_train_batch(4)
  # The encoder's projections compute in half precision (tfm keeps its layer norms in float32).
  projections = [l for l in encoder.submodules if isinstance(l, tf_keras.layers.EinsumDense)]
  assert len(projections) >= 2 * 4  # q, k, v, attention output per layer
  assert {l.compute_dtype for l in projections} == {"float16"}
  start_logits, end_logits = model(span_model.model_inputs(batch))
  assert start_logits.dtype == tf.float32 and end_logits.dtype == tf.float32
  optimizer = optimization.create_optimizer(1e-4, 10, 0.1, mixed=True)
  assert isinstance(optimizer, tf_keras.mixed_precision.LossScaleOptimizer)
  assert optimizer.dynamic
  assert all(v.dtype == tf.float32 for v in model.trainable_variables)  # float32 master weights
  step = question_answering.make_train_step(model, optimizer)
  losses = [float(step(batch)) for _ in range(3)]
  assert all(math.isfinite(l) for l in losses)
  assert int(optimizer.iterations) == 3
  assert float(optimizer.loss_scale) > 1.0  # dynamic scaling is active (starts at 2**15)


def test_gpu_flag_without_gpu_is_a_clear_error():
  returncode, output = testutil.run_cli("train.py", "--gpu", "--records_dir=/nonexistent",
                                        expect_ok=False)
  assert returncode != 0
  assert "--gpu: TensorFlow sees no GPU" in output
  assert "Traceback" not in output


def test_tiny_model_memorizes_8_real_features():
  question_answering.set_precision_policy(mixed=False)
  tf_keras.utils.set_random_seed(7)
  config = bert_config_lib.BertConfig.from_dict(dict(
      testutil.TINY_BERT_CONFIG, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0))
  model, _ = span_model.build_span_model(config)
  batch = real_train_batch(8)
  steps = 150
  optimizer = optimization.create_optimizer(2e-3, steps, 0.1, mixed=False)
  step = question_answering.make_train_step(model, optimizer)
  first = float(step(batch))
  for _ in range(steps - 1):
    last = float(step(batch))
  start_logits, end_logits = model(span_model.model_inputs(batch), training=False)
  start_accuracy = np.mean(np.argmax(start_logits, -1) == batch["start_positions"].numpy())
  end_accuracy = np.mean(np.argmax(end_logits, -1) == batch["end_positions"].numpy())
  assert first > 4.0  # ~log(128) at random init
  assert last < 0.1 * first
  assert start_accuracy >= 0.9 and end_accuracy >= 0.9
