"""tfm's self-attention with the query-key product written query first: the same scores,
faster on CPU.

tf_keras's `MultiHeadAttention` (the attention of tfm's `TransformerEncoderBlock`, hence of
`BertEncoder`) computes the raw scores as `tf.einsum("aecd,abcd->acbe", key, query)`: key
[B, S, N, H] and query [B, T, N, H] to scores [B, N, T, S]. TensorFlow 2.20's oneDNN einsum on the
CPU runs that operand order about 3x slower than the same product written query first,
`tf.einsum("abcd,aecd->acbe", query, key)`, which gives bit-identical scores and gradients
(measured on this 2-core machine, MiniLM's 12 heads of 32: 159 ms against 51 ms for 15 windows of
384; forward + backward at 16 x 192: 63 ms against 41 ms; max |difference| 0.0). In the whole
MiniLM forward pass at 15 x 384 the key-first einsum was 32 % of the op time (profile in
docs/serving.md, "Attention operand order").

`use_query_first_attention` switches the attention layers of a built encoder to
`QueryFirstMultiHeadAttention`, a subclass that overrides only `_compute_attention` (the method
tf_keras documents as the one to override "for customized attention implementation"). The weights,
their names and the checkpoints stay those of tfm's `BertEncoder`.
"""

import math

from absl import logging
import tensorflow as tf
import tf_keras


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


class QueryFirstMultiHeadAttention(tf_keras.layers.MultiHeadAttention):
  """tf_keras `MultiHeadAttention` whose query-key einsum takes the query first.

  `_compute_attention` is tf_keras 2.20's, line for line, except for the operand order of the
  score einsum: query [B, T, N, key_dim] and key [B, S, N, key_dim] (float32 or float16) give
  scores [B, N, T, S] equal to the parent's bit for bit; softmax, dropout and the value product
  are the parent's own.
  """

  def _compute_attention(self, query, key, value, attention_mask=None, training=None):
    query = tf.multiply(query, 1.0 / math.sqrt(float(self._key_dim)))
    attention_scores = tf.einsum(query_first_equation(self._dot_product_equation), query, key)
    attention_scores = self._masked_softmax(attention_scores, attention_mask)
    attention_scores_dropout = self._dropout_layer(attention_scores, training=training)
    attention_output = tf.einsum(self._combine_equation, attention_scores_dropout, value)
    return attention_output, attention_scores


def use_query_first_attention(network):
  """Switches every tf_keras `MultiHeadAttention` inside `network` to the query-first subclass.

  Only layers of exactly that class change (tfm's other attention kinds keep their own code). Call
  it before the network is traced: tf.functions traced earlier keep the key-first einsum.

  Args:
    network: a Keras layer or model, e.g. tfm's `BertEncoder` from `model.span_model`.

  Returns:
    How many attention layers were switched (the number of transformer layers for a BertEncoder);
    0 is logged as a warning (a tfm that no longer uses tf_keras's class: correct, only slower).
  """
  switched = 0
  for layer in network.submodules:
    if type(layer) is tf_keras.layers.MultiHeadAttention:  # pylint: disable=unidiomatic-typecheck
      layer.__class__ = QueryFirstMultiHeadAttention
      switched += 1
  if not switched:
    logging.warning("No tf_keras MultiHeadAttention in %s: the attention keeps its own einsum.",
                    network.name)
  return switched
