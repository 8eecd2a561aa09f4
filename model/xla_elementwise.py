"""The encoder's layer norms, feed-forward activation and dropout compiled with XLA in the
training step.

TensorFlow runs a layer norm as about 8 elementwise ops and reductions over [batch, seq, hidden]
float32 (forward and backward), and the exact GELU as about 10 over [batch, seq, intermediate]:
each a pass through memory. XLA fuses each into a few passes; the feed-forward's bias add and the
casts around its float32 GELU (under mixed_bfloat16) go into the same kernels. The matmuls stay
TensorFlow's oneDNN kernels: under XLA the whole step runs slower on the CPU (XLA's dot does not
use them). Measured in docs/benchmarks.md ("Layer norm and GELU under XLA"). A dropout mask
(model/dropout.py's hash of each entry's index) is drawn inside the pass that applies it, and its
gradient draws it again rather than keeping it. The attention's operands are laid out heads first,
and its output back, in passes of their own.

Each function's gradient is a second XLA function that computes the forward again from the inputs
(`recomputing_xla`), rather than TensorFlow's gradient of an XLA function, which reads back every
intermediate the forward wrote for it.

Only what is traced inside `training()` is compiled (the train step's forward and backward pass):
prediction, scoring and export trace the same layers with TensorFlow's own ops, so their outputs
do not depend on this. XLA compiles each function once per input shape (one per padded length,
shared by all layers of that shape).
"""

from absl import logging
import tensorflow as tf
import tf_keras

from squad_qa.model import dropout as dropout_lib
from squad_qa.model import trace_switch

_TRAINING = trace_switch.TraceSwitch()
_COMPILED_ACTIVATIONS = {}
_COMPILED_BIAS_ACTIVATIONS = {}
_COMPILED_LAYER_NORMS = {}


def training():
  """Layers switched by `use_xla_elementwise` trace their XLA functions inside this context."""
  return _TRAINING.on()


def in_train_step():
  """Whether a train step is being traced (inside `training()`)."""
  return bool(_TRAINING)


def _sum_rows(gradient):
  """float32 [..., n] -> [n]: the sum over every axis but the last, as a matrix-vector product
  (oneDNN's) outside XLA."""
  rows = tf.reshape(gradient, [-1, tf.shape(gradient)[-1]])
  return tf.linalg.matvec(rows, tf.ones([tf.shape(rows)[0]], rows.dtype), transpose_a=True)


def recomputing_xla(function, offset_last=False):
  """`function(inputs, *vectors)` as an XLA function whose gradient is a second XLA function that
  runs `function` again under a tape, from the inputs alone.

  `inputs` is a tensor [..., n], each of `vectors` a float32 [n] that `function` broadcasts along
  the rows of `inputs` (a bias, a layer norm's gamma and beta); it returns a tensor. With
  `offset_last`, the last vector is added to the output as it is (a layer norm's beta): its
  gradient is the upstream gradient's row sums, which XLA then neither computes nor copies out.

  TensorFlow's gradient of an XLA function has the forward write every intermediate the gradient
  reads (float32 [batch, seq, 1536] ones for the feed-forward's GELU) for the backward to read
  back; computing them again inside the backward is cheaper than that memory traffic. And XLA's
  CPU sum over rows (a vector's gradient) is slower than handing the gradient out per element,
  broadcast to [..., n], and summing it with a matrix-vector product. Bias and GELU forward and
  backward at [16, 192, 1536], bfloat16 in: 13.9-14.5 ms against 21.3-23.7; layer norm at
  [16, 192, 384]: 3.8-4.2 against 6.7-7.9 (Xeon with AMX; `inputs`' gradient bit for bit, the
  vectors' within float32 rounding of the sum). The forward's output is all it keeps.
  """
  forward = tf.function(function, jit_compile=True, reduce_retracing=True)

  @tf.function(jit_compile=True, reduce_retracing=True)
  def backward(upstream, inputs, *vectors):
    watched = vectors[:-1] if offset_last else vectors
    broadcast = [tf.broadcast_to(v, tf.shape(inputs)) for v in watched]
    with tf.GradientTape() as tape:
      tape.watch([inputs] + broadcast)
      outputs = function(inputs, *broadcast, *vectors[len(watched):])
    return tape.gradient(outputs, [inputs] + broadcast, output_gradients=upstream)

  @tf.custom_gradient
  def compiled(inputs, *vectors):

    def gradient(upstream):
      input_gradient, *vector_gradients = backward(upstream, inputs, *vectors)
      if offset_last:
        vector_gradients.append(upstream)
      return [input_gradient] + [_sum_rows(g) for g in vector_gradients]

    return forward(inputs, *vectors), gradient

  # AutoGraph, converting a caller, would otherwise convert the undecorated function and lose the
  # custom gradient.
  return tf.autograph.experimental.do_not_convert(compiled)


def layer_norm(inputs, gamma, beta, epsilon):
  """tf_keras LayerNormalization's unfused computation over the last axis, as one XLA function
  (one per `epsilon`; `recomputing_xla`).

  Args:
    inputs: float32 [..., hidden].
    gamma, beta: float32 [hidden].
    epsilon: a Python float added to the variance.
  Returns:
    float32, the shape of `inputs`.
  """
  if epsilon not in _COMPILED_LAYER_NORMS:

    def normalize(inputs, gamma, beta):
      mean, variance = tf.nn.moments(inputs, [-1], keepdims=True)
      return tf.nn.batch_normalization(inputs, mean, variance, offset=beta, scale=gamma,
                                       variance_epsilon=epsilon)

    _COMPILED_LAYER_NORMS[epsilon] = recomputing_xla(normalize, offset_last=True)
  return _COMPILED_LAYER_NORMS[epsilon](inputs, gamma, beta)


class XlaLayerNormalization(tf_keras.layers.LayerNormalization):
  """tf_keras `LayerNormalization` that runs `layer_norm` inside `training()`; the same weights,
  names and checkpoints. Other configurations (several axes, no gamma or beta, a compute dtype
  other than float32) run the parent's call."""

  def call(self, inputs):
    if not (in_train_step() and self.axis == [inputs.shape.rank - 1] and self.center and
            self.scale and self.compute_dtype == "float32"):
      return super().call(inputs)
    # The weights go in as tensors: the tape takes a read of a distributed variable (a
    # MirroredStrategy's) as its gradient source, not a variable captured by the function.
    return layer_norm(tf.cast(inputs, tf.float32), tf.convert_to_tensor(self.gamma),
                      tf.convert_to_tensor(self.beta), self.epsilon)


def xla_activation(function):
  """`function` (a Keras activation) compiled by XLA inside `training()` (`recomputing_xla`), as it
  is outside."""
  if function not in _COMPILED_ACTIVATIONS:  # one tf.function per activation: shared traces
    _COMPILED_ACTIVATIONS[function] = recomputing_xla(function)
  compiled = _COMPILED_ACTIVATIONS[function]

  def activation(inputs):
    return compiled(inputs) if in_train_step() else function(inputs)

  activation.plain = function
  return activation


def bias_activation(function, dtype):
  """`function` (a Keras activation) of a dense layer's pre-activation plus its bias, computed in
  `dtype`, as one XLA function (one per `function` and `dtype`, shared by the layers).

  The returned function takes x [..., units] in the compute dtype and bias [units] (any float
  dtype) and returns `function(x + bias)` [..., units] in x's dtype: the bias add, the casts and
  the activation, forward and backward (the bias gradient's sum over tokens included), in a few
  passes instead of TensorFlow's one per op (`recomputing_xla`).
  """
  key = (function, tf.as_dtype(dtype))
  if key not in _COMPILED_BIAS_ACTIVATIONS:

    def apply(x, bias):
      return tf.cast(function(tf.cast(x, dtype) + tf.cast(bias, dtype)), x.dtype)

    _COMPILED_BIAS_ACTIVATIONS[key] = recomputing_xla(apply)
  return _COMPILED_BIAS_ACTIVATIONS[key]


@tf.function(jit_compile=True, reduce_retracing=True)
def _dropped(inputs, key, rate, scale):
  """`inputs` where kept (model/dropout.py's `keep_mask` under `key`), times `scale` in their
  dtype, else 0: the draws, the compare and the select in one pass (TensorFlow: the draws, then
  three passes).

  Args:
    inputs: any shape and float dtype.
    key: uint32 [2], the call's key.
    rate: a Python float, the dropout rate.
    scale: a Python float, or None for none.
  Returns:
    Their shape and dtype.
  """
  keep = dropout_lib.keep_mask(key, tf.shape(inputs), rate)
  if scale is not None:
    inputs = inputs * tf.constant(scale, inputs.dtype)
  return tf.where(keep, inputs, tf.zeros([], inputs.dtype))


@tf.function(jit_compile=True, reduce_retracing=True)
def _dropped_softmax_gradient(probabilities, key, rate, gradient, output=None,
                              output_gradient=None):
  """d loss / d scores of `probabilities * keep` where probabilities = softmax(scores) over the
  last axis and keep is `_dropped`'s mask, drawn again: (g - sum(g * p)) * p with g = gradient
  where kept, else 0 (the softmax's Jacobian times the dropout's), computed in float32.

  Given the values product output = (probabilities * keep) @ value and its gradient, the row sums
  sum(g * p) equal sum(output_gradient * output) over the head's features (FlashAttention's
  D = rowsum(dO * O), Dao et al. 2022): a reduction over [..., seq, head_size] instead of a
  second pass over [..., seq, seq], which XLA's CPU reduction is slow at.

  Args:
    probabilities: [..., seq], any float dtype.
    key, rate: the forward's (`_dropped`).
    gradient: d loss / d (probabilities * keep), their shape and dtype.
    output, output_gradient: None, or [..., head_size] each: the values product and its gradient.
  Returns:
    [..., seq] in the probabilities' dtype.
  """
  keep = dropout_lib.keep_mask(key, tf.shape(probabilities), rate)
  p = tf.cast(probabilities, tf.float32)
  g = tf.where(keep, tf.cast(gradient, tf.float32), 0.0)
  if output is None:
    rows = tf.reduce_sum(g * p, -1, keepdims=True)
  else:
    rows = tf.reduce_sum(
        tf.cast(output_gradient, tf.float32) * tf.cast(output, tf.float32), -1, keepdims=True)
  return tf.cast((g - rows) * p, probabilities.dtype)


def dropped_softmax(scores, probabilities, key, rate):
  """The attention dropout of softmax probabilities without its 1 / (1 - rate) scale, forward
  (`_dropped`) and gradient to `scores` (`_dropped_softmax_gradient`) each one XLA function
  instead of TensorFlow's four and five ops, each a pass over the tensor.

  Args:
    scores: [..., seq], the softmax's input.
    probabilities: softmax(scores) over the last axis, the dtype of `scores`.
    key: uint32 [2], the call's dropout key (model/dropout.py).
    rate: a Python float, the dropout rate.
  Returns:
    The probabilities where kept, else 0, in their dtype; no gradient flows to `probabilities`
    or `key`. The gradient draws the mask again from the key: no mask is kept.
  """

  @tf.custom_gradient
  def dropped(scores):
    del scores  # the gradient needs the probabilities alone

    def gradient(upstream):
      return _dropped_softmax_gradient(probabilities, key, rate, upstream)

    return _dropped(probabilities, key, rate, None), gradient

  return dropped(scores)


def dropped_attention(scores, probabilities, value, key, rate):
  """The attention's values product of the dropped probabilities (`_dropped`, without the
  dropout's 1 / (1 - rate) scale), with its gradients to `scores` and `value`: the dropout's and
  the softmax's gradients in one XLA function whose row sums come from the product
  (`_dropped_softmax_gradient` with `output`).

  Args:
    scores: [B, N, T, S], the softmax's input.
    probabilities: softmax(scores) over the last axis, the dtype of `scores`.
    value: [B, N, S, H] in that dtype.
    key: uint32 [2], the call's dropout key (model/dropout.py).
    rate: a Python float, the dropout rate.
  Returns:
    [B, N, T, H]: (probabilities where kept, else 0) @ value. No gradient flows to
    `probabilities` or `key`; the gradient draws the mask again from the key.
  """

  @tf.custom_gradient
  def attend(scores, value):
    del scores  # the gradient needs the probabilities alone
    dropped = _dropped(probabilities, key, rate, None)
    output = tf.matmul(dropped, value)
    scope = tf.get_current_name_scope()

    def gradient(upstream):
      # The forward's scope (absolute: a trailing "/"), as TensorFlow names a gradient's ops.
      with tf.name_scope(scope + "/" if scope else ""):
        scores_gradient = _dropped_softmax_gradient(probabilities, key, rate,
                                                    tf.matmul(upstream, value, transpose_b=True),
                                                    output, upstream)
        return scores_gradient, tf.matmul(dropped, upstream, transpose_a=True)

    return output, gradient

  return attend(scores, value)


def _heads_first(x):
  """[B, T, N, H] -> [B, N, T, H], and back: the permutation is its own inverse."""
  return tf.transpose(x, [0, 2, 1, 3])


@tf.function(jit_compile=True, reduce_retracing=True)
def _attention_operands(query, key, value, attention_mask, scale, mask_feature):
  """`attention_operands`' forward: the scale, the mask feature and the three transposes in one
  XLA function."""
  query, key = mask_feature(query * tf.constant(scale, query.dtype), key, attention_mask)
  return _heads_first(query), _heads_first(key), _heads_first(value)


@tf.function(jit_compile=True, reduce_retracing=True)
def _attention_operands_gradient(query, key, value, scale):
  """`attention_operands`' gradient: the mask features dropped, heads last, the query's scaled."""
  return (_heads_first(query[..., :-1]) * tf.constant(scale, query.dtype),
          _heads_first(key[..., :-1]), _heads_first(value))


def attention_operands(query, key, value, attention_mask, scale, mask_feature):
  """The attention's operands heads first for batched matmuls, with model/attention.py's padding
  mask feature: one XLA function forward and one backward, where TensorFlow's einsums would
  transpose each operand inside the product and the scale and features take a pass each.

  Args:
    query: [B, T, N, H]; key, value: [B, S, N, H]; all in one dtype.
    attention_mask: [B, T, S], 1 where a query attends to a key; every row the same.
    scale: a Python float the query is multiplied by (1 / sqrt(H)).
    mask_feature: model/attention.py's `with_key_mask_feature` (passed in: that module imports
      this one), traced inside the XLA function.
  Returns:
    query [B, N, T, H + 1] (scaled, last feature 1), key [B, N, S, H + 1] (last feature 0 where
    attended, else the masked-out score) and value [B, N, S, H]. No gradient flows to
    `attention_mask`.
  """

  @tf.custom_gradient
  def operands(query, key, value):

    def gradient(query_gradient, key_gradient, value_gradient):
      return _attention_operands_gradient(query_gradient, key_gradient, value_gradient, scale)

    return _attention_operands(query, key, value, attention_mask, scale, mask_feature), gradient

  return operands(query, key, value)


@tf.function(jit_compile=True, reduce_retracing=True)
def _heads_last(x, scale):
  """[B, N, T, H] -> [B, T, N, H] times `scale` (a Python float) in x's dtype."""
  return _heads_first(x) * tf.constant(scale, x.dtype)


def heads_last(x, scale):
  """The attention's output [B, N, T, H] as [B, T, N, H] times `scale` (a Python float: the
  dropout's 1 / (1 - rate)), in one XLA function forward and its same function backward."""

  @tf.custom_gradient
  def transposed(x):

    def gradient(upstream):
      return _heads_last(upstream, scale)

    return _heads_last(x, scale), gradient

  return transposed(x)


def xla_dropout(dropout):
  """`dropout` (model/dropout.py's `generator_dropout` function) with its calls inside
  `training()` as one XLA function forward (`_dropped`) and one backward (the same function of the
  upstream gradient: the mask drawn again from the call's key, none kept). The same masks and
  values as `dropout` from the same generator state; a `noise_shape` runs `dropout`."""

  def apply(inputs, rate, noise_shape=None):
    if noise_shape is not None or not in_train_step():
      return dropout(inputs, rate, noise_shape)
    key = dropout.key()
    scale = 1 / (1 - rate)

    @tf.custom_gradient
    def dropped(inputs):

      def gradient(upstream):
        return _dropped(upstream, key, rate, scale)

      return _dropped(inputs, key, rate, scale), gradient

    return dropped(inputs)

  apply.key = dropout.key
  apply.plain = dropout
  return apply


def use_xla_elementwise(model):
  """Switches `model`'s tf_keras LayerNormalization layers to `XlaLayerNormalization`, its
  Activation layers other than "linear" to `xla_activation`, the dropout of its layers switched
  by model/dropout.py's `use_generator_dropout` (call that first) to `xla_dropout`, and sets
  `xla_train_step` on the layers that have it (model/fused_feed_forward.py's `MatMulDense`, which
  then applies its bias and GELU with `bias_activation`; model/attention.py's attention, whose
  dropout then runs with `dropped_attention`, or `dropped_softmax` off its heads-first path); call
  it before tracing. Switching twice changes nothing.

  Returns:
    How many layers run under XLA in the train step; 0 is logged as a warning (correct, only
    slower).
  """
  switched = 0
  for layer in model.submodules:
    # A tf_keras dropout layer's private RandomGenerator (BUILD.md lists it).
    random_generator = getattr(layer, "_random_generator", None)
    if type(layer) is tf_keras.layers.LayerNormalization:  # pylint: disable=unidiomatic-typecheck
      layer.__class__ = XlaLayerNormalization
    elif (hasattr(getattr(random_generator, "dropout", None), "key") and
          not hasattr(random_generator.dropout, "plain")):
      random_generator.dropout = xla_dropout(random_generator.dropout)
    elif (type(layer) is tf_keras.layers.Activation and  # pylint: disable=unidiomatic-typecheck
          layer.activation is not tf_keras.activations.linear
          and not hasattr(layer.activation, "plain")):
      layer.activation = xla_activation(layer.activation)
    elif getattr(layer, "xla_train_step", None) is False:
      layer.xla_train_step = True
    switched += (isinstance(layer, XlaLayerNormalization) or
                 hasattr(getattr(layer, "activation", None), "plain") or
                 hasattr(getattr(random_generator, "dropout", None), "plain") or
                 getattr(layer, "xla_train_step", False))
  if not switched:
    logging.warning("No layer norm or activation layer in %s: nothing compiled by XLA.", model.name)
  return switched
