"""The encoder's feed-forward up-projection, bias and GELU as one kernel after the matmul.

tfm's `TransformerEncoderBlock` runs them as an einsum, an add and an `Activation` layer (float32
under mixed_bfloat16, with a cast on either side): four passes over [batch, seq, intermediate]
after the matmul, and as many again backward. `MatMulDense` applies the block's activation itself
(the block's `Activation` layer becomes the identity):
- Outside the train step, as MatMul, BiasAdd and the activation on 2-D tensors, which TensorFlow's
  grappler remapper fuses into one oneDNN matmul with bias and GELU post-ops, computed on the
  float32 accumulator before rounding to the compute dtype (docs/serving.md "The fused
  feed-forward"). Where grappler does not fuse (no oneDNN), the same ops run one by one, and under
  mixed_bfloat16 the GELU then runs in bfloat16.
- In the train step, tfm's einsum, then the bias, the casts and the activation in tfm's dtype as
  one XLA function (`xla_elementwise.bias_activation`) once `xla_elementwise.use_xla_elementwise`
  has switched the model, else tfm's ops. (The oneDNN fusion has no gradient.)
"""

from absl import logging
import tensorflow as tf
import tf_keras
from official.nlp.modeling import layers as tfm_layers

from squad_qa.model import xla_elementwise

# The einsum of tfm's feed-forward dense layers: [batch, seq, in] x [in, out] -> [batch, seq, out].
FEED_FORWARD_EQUATION = "abc,cd->abd"


class MatMulDense(tf_keras.layers.EinsumDense):
  """tf_keras `EinsumDense` for "abc,cd->abd" with a bias on "d" that applies `fused_activation`:
  outside the train step as reshape to [batch * seq, in], MatMul, BiasAdd, activation and reshape
  back (the form grappler fuses); in it as tfm's einsum and bias add with the activation in
  `activation_dtype` (tfm's: float32 under mixed_bfloat16), compiled by XLA when `xla_train_step`
  (with the bias add, except under mixed_float16). The same weights, names and checkpoints.

  Inputs [batch, seq, in]; outputs [batch, seq, out] in the compute dtype.
  """

  fused_activation = None  # the three are set by `use_fused_feed_forward`
  activation_dtype = None
  xla_train_step = None  # False: TensorFlow's ops; set True by xla_elementwise.use_xla_elementwise

  def call(self, inputs):
    if self.fused_activation is None:
      return super().call(inputs)
    if xla_elementwise.in_train_step():
      if self.xla_train_step and self.compute_dtype != "float16":
        # The bias goes in as a tensor: the tape takes a read of a distributed variable (a
        # MirroredStrategy's) as its gradient source, not a variable captured by the function.
        return xla_elementwise.bias_activation(self.fused_activation, self.activation_dtype)(
            tf.einsum(self.equation, inputs, self.kernel), tf.convert_to_tensor(self.bias))
      # Under mixed_float16 the bias add stays an AddV2, which model/float32_gradients.py gives
      # a float32 gradient; XLA would sum the bias gradient in float16.
      activation = self.fused_activation
      if self.xla_train_step:
        activation = xla_elementwise.xla_activation(activation)
      outputs = activation(tf.cast(super().call(inputs), self.activation_dtype))
      return tf.cast(outputs, self.compute_dtype)
    flat = tf.reshape(inputs, [-1, self.kernel.shape[0]])
    outputs = self.fused_activation(tf.nn.bias_add(tf.matmul(flat, self.kernel), self.bias))
    return tf.reshape(outputs, tf.concat([tf.shape(inputs)[:-1], [self.kernel.shape[-1]]], 0))


def _fusable(block):
  # pylint: disable=protected-access
  dense, activation = block._intermediate_dense, block._intermediate_activation_layer
  return (type(dense) is tf_keras.layers.EinsumDense  # pylint: disable=unidiomatic-typecheck
          and dense.equation == FEED_FORWARD_EQUATION and dense.bias is not None and
          dense.activation is tf_keras.activations.linear and
          type(activation) is tf_keras.layers.Activation)  # pylint: disable=unidiomatic-typecheck


def use_fused_feed_forward(network):
  """Switches every tfm `TransformerEncoderBlock` of `network` so that its intermediate dense
  layer (now `MatMulDense`) applies the block's activation, and the block's activation layer is
  the identity; call it before tracing and before `xla_elementwise.use_xla_elementwise`.
  Switching twice changes nothing.

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
      dense = block._intermediate_dense
      dense.__class__ = MatMulDense
      dense.fused_activation, dense.activation_dtype = plain, layer.compute_dtype
      dense.xla_train_step = False
      # autocast=False: the layer passes its input through uncast.
      block._intermediate_activation_layer = tf_keras.layers.Activation(
          "linear", name=layer.name, dtype=layer.dtype_policy, autocast=False)
    switched += isinstance(block._intermediate_dense, MatMulDense)
    # pylint: enable=protected-access
  if not switched:
    logging.warning("No tfm TransformerEncoderBlock in %s: the feed-forward GELU stays unfused.",
                    network.name)
  return switched
