"""tfm's self-attention with the query-key einsum written query first, and the padding mask added
by that einsum. Weights, their names and checkpoints stay those of tfm's `BertEncoder`.

- Query first: bit-identical scores and gradients, about 3x faster with TensorFlow's oneDNN einsum
  on the CPU (docs/serving.md "Attention operand order").
- The mask: tf_keras adds a [batch, 1, seq, seq] mask to the [batch, heads, seq, seq] scores, a
  broadcast add as slow as the einsum itself. BertEncoder's mask is the same for every query
  (tfm's `SelfAttentionMask` repeats `input_mask`), so it is one value per key: a feature of 1 on
  every query and of 0 or -1e9 on every key makes the einsum add it (docs/serving.md "The padding
  mask inside the score einsum").
- Dropout in training: the probabilities times the dropout layer's keep mask, and the values
  product times 1 / (1 - rate): tf_keras's value with one pass over [batch, heads, seq, seq] less.
  Once `xla_elementwise.use_xla_elementwise` has switched the model, the train step draws the
  dropout's mask (model/dropout.py) and applies it to the probabilities in one XLA function and
  takes the dropout's and the softmax's gradients together in another, drawing the mask again;
  and lays the query, key and value out heads first (with the mask feature and the query's scale)
  in one XLA function, for two batched matmuls without the einsums' transposes, and the output
  back heads last in another.
- Unpadded inputs: a model traced inside `unpadded_inputs()` adds no mask at all (int8 exports'
  signature for a window that fills max_seq_length).
"""

import math
import numbers

from absl import logging
import tensorflow as tf
import tf_keras

from squad_qa.model import dropout as dropout_lib
from squad_qa.model import trace_switch
from squad_qa.model import xla_elementwise

_UNPADDED = trace_switch.TraceSwitch()


def unpadded_inputs():
  """Within (while tracing a model whose `input_mask` is all ones): query-first attention ignores
  its mask. Adding a mask of zeros is a pass over the [batch, heads, seq, seq] scores for nothing:
  15 % of an int8 window of 384 tokens on LiteRT (docs/serving.md "The unpadded window")."""
  return _UNPADDED.on()


def query_first_equation(dot_product_equation):
  """"key,query->scores" -> "query,key->scores": the same contraction with the operands swapped.

  Raises:
    ValueError: the equation is not of the form "<key>,<query>-><scores>".
  """
  operands, arrow, scores = dot_product_equation.partition("->")
  key, comma, query = operands.partition(",")
  if not (arrow and comma and key and query and scores):
    raise ValueError(f"not a two-operand einsum equation: {dot_product_equation!r}")
  return f"{query},{key}->{scores}"


def masked_out_score(dtype):
  """What tf_keras's `Softmax` adds to a masked score: -1e9, or half float16's minimum in float16
  (tf_keras/src/layers/activation/softmax.py)."""
  return tf.float16.min / 2.0 if dtype == tf.float16 else -1e9


def with_key_mask_feature(query, key, attention_mask):
  """(query, key) with one more feature, so that their dot product adds the key padding mask.

  Args:
    query: [B, T, N, H], already scaled.
    key: [B, S, N, H], the dtype of `query`.
    attention_mask: [B, T, S], 1 where a query attends to a key; every row the same.
  Returns:
    query [B, T, N, H + 1] with a last feature of 1, and key [B, S, N, H + 1] with a last feature
    of 0 where attended and `masked_out_score` where masked.
  """
  keep = tf.cast(attention_mask[:, 0, :], query.dtype)  # [B, S]: the rows are equal
  added = (1.0 - keep) * masked_out_score(query.dtype)
  # expand_dims, not [:, :, None, None]: LiteRT (int8 exports) has no StridedSlice new axes.
  added = tf.expand_dims(tf.expand_dims(added, -1), -1)  # [B, S, 1, 1]
  key_feature = tf.broadcast_to(added, tf.concat([tf.shape(key)[:-1], [1]], 0))
  query_feature = tf.ones(tf.concat([tf.shape(query)[:-1], [1]], 0), query.dtype)
  return tf.concat([query, query_feature], -1), tf.concat([key, key_feature], -1)


class QueryFirstMultiHeadAttention(tf_keras.layers.MultiHeadAttention):
  """tf_keras `MultiHeadAttention` whose score einsum takes query [B, T, N, key_dim] first and,
  given a [B, T, S] mask whose rows are equal (BertEncoder's), adds the mask as it multiplies;
  in training, with model/dropout.py's masks, it scales the values product by the dropout's
  1 / (1 - rate) instead of the probabilities.

  `_compute_attention` is tf_keras 2.20's but for those changes: the scores [B, N, T, S]
  equal the parent's (bit for bit without a mask), the output the parent's within rounding.
  """

  xla_train_step = None  # False: TensorFlow's ops; set True by xla_elementwise.use_xla_elementwise

  def _compute_attention(self, query, key, value, attention_mask=None, training=None):
    if _UNPADDED:
      attention_mask = None  # all ones (`unpadded_inputs`)
    dropout = self._generator_dropout(training)
    if (self.xla_train_step and xla_elementwise.in_train_step() and dropout is not None and
        attention_mask is not None and attention_mask.shape.rank == 3 and query.shape.rank == 4 and
        tuple(self._attention_axes) == (1,)):
      return self._heads_first_attention(query, key, value, attention_mask, dropout)
    query = tf.multiply(query, 1.0 / math.sqrt(float(self._key_dim)))
    if attention_mask is not None and attention_mask.shape.rank == 3 and query.shape.rank == 4:
      query, key = with_key_mask_feature(query, key, attention_mask)
      attention_mask = None
    scores = tf.einsum(query_first_equation(self._dot_product_equation), query, key)
    attention_scores = self._masked_softmax(scores, attention_mask)
    if dropout is None:
      attention_scores_dropout = self._dropout_layer(attention_scores, training=training)
      return tf.einsum(self._combine_equation, attention_scores_dropout, value), attention_scores
    # The dropout's 1 / (1 - rate) scales the [B, T, N, H] product, not the [B, N, T, S]
    # probabilities: the same value with a pass over a tensor seq / head_size times smaller.
    rate = self._dropout_layer.rate
    if (self.xla_train_step and xla_elementwise.in_train_step() and attention_mask is None and
        len(self._attention_axes) == 1):  # the softmax is over the last axis
      dropped = xla_elementwise.dropped_softmax(scores, attention_scores, dropout.key(), rate)
    else:
      keep = dropout_lib.keep_mask(dropout.key(), tf.shape(attention_scores), rate)
      dropped = attention_scores * tf.cast(keep, attention_scores.dtype)
    attention_output = tf.einsum(self._combine_equation, dropped, value)
    return attention_output * tf.constant(1 / (1 - rate), attention_output.dtype), attention_scores

  def _heads_first_attention(self, query, key, value, attention_mask, dropout):
    """The train step's attention under XLA: query, key and value laid out heads first with the
    mask feature by one XLA function (`xla_elementwise.attention_operands`), two batched matmuls,
    the dropout with `dropped_attention`, and the output heads last times 1 / (1 - rate) by
    another.
    TensorFlow's einsums transpose each operand inside every product, forward and backward."""
    rate = self._dropout_layer.rate
    query, key, value = xla_elementwise.attention_operands(query, key, value, attention_mask,
                                                           1.0 / math.sqrt(float(self._key_dim)),
                                                           with_key_mask_feature)
    scores = tf.matmul(query, key, transpose_b=True)  # [B, N, T, S]
    attention_scores = self._masked_softmax(scores, None)
    output = xla_elementwise.dropped_attention(scores, attention_scores, value, dropout.key(), rate)
    return xla_elementwise.heads_last(output, 1 / (1 - rate)), attention_scores

  def _generator_dropout(self, training):
    """The dropout layer's `generator_dropout` function (model/dropout.py), with its `key`, when
    it drops in this call (training is True, the rate above 0) and draws its masks with it; else
    None. Reads the private `Dropout._random_generator` (BUILD.md lists it)."""
    layer = self._dropout_layer
    if not (training is True and isinstance(layer.rate, numbers.Real) and layer.rate > 0 and
            layer.noise_shape is None):
      return None
    dropout = getattr(getattr(layer, "_random_generator", None), "dropout", None)
    return dropout if hasattr(dropout, "key") else None


def use_query_first_attention(network):
  """Switches every layer of exactly tf_keras `MultiHeadAttention` class in `network` (a Keras
  layer or model) to the query-first subclass; call it before tracing.

  Returns:
    How many layers were switched; 0 is logged as a warning (correct, only slower).
  """
  switched = 0
  for layer in network.submodules:
    if type(layer) is tf_keras.layers.MultiHeadAttention:  # pylint: disable=unidiomatic-typecheck
      layer.__class__ = QueryFirstMultiHeadAttention
      layer.xla_train_step = False
      switched += 1
  if not switched:
    logging.warning("No tf_keras MultiHeadAttention in %s: the attention keeps its own einsum.",
                    network.name)
  return switched
