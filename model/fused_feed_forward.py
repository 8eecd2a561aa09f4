"""The encoder's feed-forward up-projection, bias and GELU as one oneDNN matmul outside training.

tfm's `TransformerEncoderBlock` runs them as an einsum, an add and an `Activation` layer (float32
under mixed_bfloat16, with a cast on either side): four passes over [batch, seq, intermediate]
after the matmul. Written as MatMul, BiasAdd and the activation on 2-D tensors, TensorFlow's
grappler remapper fuses the three into one oneDNN matmul with bias and GELU post-ops, computed on
the float32 accumulator before rounding to the compute dtype (docs/serving.md "The fused
feed-forward"). Where grappler does not fuse (no oneDNN), the same ops run one by one, and under
mixed_bfloat16 the GELU then runs in bfloat16.

The train step (traced inside `xla_elementwise.training()`) keeps tfm's computation: the fused
kernel would need the GELU's input for the gradient, and tfm keeps that GELU in float32.
"""

from absl import logging
import tensorflow as tf
import tf_keras
from official.nlp.modeling import layers as tfm_layers

from squad_qa.model import xla_elementwise

# The einsum of tfm's feed-forward dense layers: [batch, seq, in] x [in, out] -> [batch, seq, out].
FEED_FORWARD_EQUATION = "abc,cd->abd"


class MatMulDense(tf_keras.layers.EinsumDense):
  """tf_keras `EinsumDense` for "abc,cd->abd" with a bias on "d" that, outside the train step,
  applies `fused_activation` and computes as reshape to [batch * seq, in], MatMul, BiasAdd,
  activation and reshape back: the form grappler fuses. The same weights, names and checkpoints.

  Inputs [batch, seq, in]; outputs [batch, seq, out] in the compute dtype.
  """

  fused_activation = None  # set by `use_fused_feed_forward`

  def call(self, inputs):
    if xla_elementwise.in_train_step() or self.fused_activation is None:
      return super().call(inputs)
    flat = tf.reshape(inputs, [-1, self.kernel.shape[0]])
    outputs = self.fused_activation(tf.nn.bias_add(tf.matmul(flat, self.kernel), self.bias))
    return tf.reshape(outputs, tf.concat([tf.shape(inputs)[:-1], [self.kernel.shape[-1]]], 0))


def _train_step_activation(activation, compute_dtype):
  """The block's activation in the train step, in `compute_dtype` as before; the identity
  elsewhere, where `MatMulDense` has applied it."""

  def apply(inputs):
    if not xla_elementwise.in_train_step():
      return inputs
    return activation(tf.cast(inputs, compute_dtype))

  apply.activation = activation
  return apply


def _fusable(block):
  # pylint: disable=protected-access
  dense, activation = block._intermediate_dense, block._intermediate_activation_layer
  return (type(dense) is tf_keras.layers.EinsumDense  # pylint: disable=unidiomatic-typecheck
          and dense.equation == FEED_FORWARD_EQUATION and dense.bias is not None and
          dense.activation is tf_keras.activations.linear and
          type(activation) is tf_keras.layers.Activation)  # pylint: disable=unidiomatic-typecheck


def use_fused_feed_forward(network):
  """Switches every tfm `TransformerEncoderBlock` of `network` so that, outside the train step,
  its intermediate dense layer (now `MatMulDense`) applies the block's activation in its own
  compute dtype, with no casts around it; call it before tracing, before or after
  `xla_elementwise.use_xla_elementwise`. Switching twice changes nothing.

  Returns:
    How many blocks were switched; 0 is logged as a warning (correct, only slower).
  """
  switched = 0
  for block in network.submodules:
    if not isinstance(block, tfm_layers.TransformerEncoderBlock):
      continue
    # pylint: disable=protected-access
    if _fusable(block):
      layer = block._intermediate_activation_layer
      plain = getattr(layer.activation, "plain", layer.activation)  # not the XLA-compiled one
      block._intermediate_dense.__class__ = MatMulDense
      block._intermediate_dense.fused_activation = plain
      # autocast=False: outside the train step the layer passes its input through uncast.
      block._intermediate_activation_layer = tf_keras.layers.Activation(
          _train_step_activation(layer.activation, layer.compute_dtype), name=layer.name,
          dtype=layer.dtype_policy, autocast=False)
    switched += isinstance(block._intermediate_dense, MatMulDense)
    # pylint: enable=protected-access
  if not switched:
    logging.warning("No tfm TransformerEncoderBlock in %s: the feed-forward GELU stays unfused.",
                    network.name)
  return switched
