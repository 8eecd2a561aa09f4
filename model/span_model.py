"""The QA model: tf-models-official `BertEncoder` + `BertSpanLabeler` (per-token start/end logits).

The head is one Dense(2) per token (Devlin et al., 2019, section 4.2), independent of sequence
length.
"""

import functools

import tensorflow as tf
import tf_keras
from official.nlp.modeling import models
from official.nlp.modeling import networks

from squad_qa.model import attention
from squad_qa.model import fused_feed_forward
from squad_qa.model import precision

# Input names of tfm's BertEncoder, used by the model and by the serving signatures.
INPUT_WORD_IDS = "input_word_ids"
INPUT_MASK = "input_mask"
INPUT_TYPE_IDS = "input_type_ids"
MODEL_INPUTS = (INPUT_WORD_IDS, INPUT_MASK, INPUT_TYPE_IDS)


def input_signature(shape=(None, None)):
  """The encoder's inputs as a tf.function input_signature: an int32 [batch, seq] TensorSpec of
  `shape` (default: any batch and length) per name of MODEL_INPUTS, in that order and so named."""
  return [tf.TensorSpec(shape, tf.int32, name=name) for name in MODEL_INPUTS]


def model_inputs(batch):
  """The three encoder inputs (int32 [batch, seq] each) of a batch dict that may hold more keys."""
  return {k: batch[k] for k in MODEL_INPUTS}


@tf_keras.utils.register_keras_serializable(package="squad_qa")
def gelu_exact(x):
  """GELU with the erf CDF (Hendrycks & Gimpel, 2016): Hugging Face BERT's "gelu".

  In float32 as PyTorch computes it, x / 2 * (1 + erf(x / sqrt(2))): `tf.nn.gelu` writes it with
  erfc, whose CPU kernel is 1.4-2.5x slower than erf's (forward, [16, 384, 1536]); the two forms
  differ by at most ~1e-6 (tests/model/test_span_model.py). In 16-bit types `tf.nn.gelu`'s erfc
  form stays: there 1 + erf(x) would round away GELU's small negative tail.
  """
  x = tf.convert_to_tensor(x)
  if x.dtype != tf.float32:
    return tf_keras.activations.gelu(x, approximate=False)
  return 0.5 * x * (1.0 + tf.math.erf(x * 0.7071067811865476))


@tf_keras.utils.register_keras_serializable(package="squad_qa")
def gelu_tanh(x):
  """GELU with the tanh approximation: google-research/bert modeling.py's "gelu"."""
  return tf_keras.activations.gelu(x, approximate=True)


def build_encoder(config):
  """A tfm `BertEncoder` for a `model.bert_config.BertConfig`, with query-first attention and,
  outside the train step, the fused feed-forward (model/fused_feed_forward.py).

  Inputs int32 [batch, seq] `input_word_ids`, `input_mask`, `input_type_ids`; `sequence_output`
  [batch, seq, hidden] in the global policy's compute dtype.
  """
  if config.hidden_act != "gelu":
    activation = config.hidden_act
  else:
    activation = gelu_exact if config.exact_gelu else gelu_tanh
  encoder = networks.BertEncoder(
      vocab_size=config.vocab_size, hidden_size=config.hidden_size,
      num_layers=config.num_hidden_layers, num_attention_heads=config.num_attention_heads,
      inner_dim=config.intermediate_size, inner_activation=activation,
      output_dropout=config.hidden_dropout_prob,
      attention_dropout=config.attention_probs_dropout_prob,
      max_sequence_length=config.max_position_embeddings, type_vocab_size=config.type_vocab_size,
      initializer=tf_keras.initializers.TruncatedNormal(stddev=config.initializer_range))
  attention.use_query_first_attention(encoder)
  fused_feed_forward.use_fused_feed_forward(encoder)
  return encoder


def build_span_model(config, encoder_policy=None):
  """(model, encoder): the encoder and the QA model around it.

  `model` maps a dict of int32 [batch, seq] encoder inputs to float32 [batch, seq] (start_logits,
  end_logits). `encoder_policy` None: every layer takes the global tf_keras policy; a policy name
  (e.g. "mixed_bfloat16"): the encoder is built under it, the span head under float32. Variables
  are float32 either way.
  """
  with precision.global_policy(encoder_policy):
    encoder = build_encoder(config)  # tfm's BertEncoder creates all its layers here
  with precision.global_policy(None if encoder_policy is None else "float32"):
    labeler = models.BertSpanLabeler(
        network=encoder,
        initializer=tf_keras.initializers.TruncatedNormal(stddev=config.initializer_range))
    inputs = {
        name: tf_keras.Input(shape=(None,), dtype=tf.int32, name=name) for name in MODEL_INPUTS
    }
    start_logits, end_logits = labeler(inputs)
    to_float32 = functools.partial(tf_keras.layers.Activation, "linear", dtype="float32")
    outputs = (to_float32(name="start_logits")(start_logits),
               to_float32(name="end_logits")(end_logits))
    model = tf_keras.Model(inputs=inputs, outputs=outputs, name="bert_span_model")
  model.labeler = labeler
  return model, encoder


def encoder_compute_dtype(model):
  """The dtype the encoder of a `build_span_model` model computes in ("float32", ...)."""
  return model.labeler.checkpoint_items["encoder"].compute_dtype
