"""In-graph checks of the serving signatures' inputs: a wrong shape gets one line naming the input.

A SavedModel's signature function does not check the shapes it is fed against its TensorSpecs: a
loaded signature called from Python and TensorFlow Serving (REST or gRPC) both pass any shape into
the graph, where a scalar or a nested list would otherwise fail deep inside the tokenizer or the
encoder (`slice index 0 of dimension 0 out of bounds`, `ConcatOp : Ranks of all input tensors should
match`). So serving/module.py declares its signatures' inputs with unknown rank (a TensorSpec of a
known rank would let these checks fold away while tracing) and checks them here first, at run time.

A failed check raises tf.errors.InvalidArgumentError (its message is what TF Serving returns) with
one line such as

  assertion failed: [serve_text: `question` must be a vector of strings, shape [batch]; got rank 0,
  shape [] (a REST body sends {instances: [{question: ..., context: ...}]} or {inputs: {question:
  [...], context: [...]}})]

(one line in the message; wrapped here). The dtypes stay the signatures' own: a tensor of another
dtype is refused before the graph runs; from Python, a loaded signature says
`cannot compute __inference_signature_wrapper_<n> as input #1(zero-based) was expected to be a
string tensor but is a int32 tensor`, the inputs numbered in alphabetical order of their names.
"""

import tensorflow as tf

# How the two REST bodies of TensorFlow Serving's predict API spell a well-shaped request: the row
# format ("instances", one object per example) and the columnar one ("inputs", one list per input).
# Without quotes: the Assert op C-escapes the strings it reports, and \" would blur the message.
TEXT_REST_BODIES = ("{instances: [{question: ..., context: ...}]} or "
                    "{inputs: {question: [...], context: [...]}}")
FEATURES_REST_BODIES = ("{instances: [{input_word_ids: [...], input_mask: [...], "
                        "input_type_ids: [...]}]} or {inputs: {input_word_ids: [[...]], "
                        "input_mask: [[...]], input_type_ids: [[...]]}}")
EXAMPLES_REST_BODIES = "{instances: [{b64: ...}]} or {inputs: {examples: [{b64: ...}]}}"


def _shape_text(tensor):
  """The tensor's dynamic shape as a string tensor, e.g. "[1, 2]" ("[]" for a scalar)."""
  dims = tf.strings.reduce_join(tf.strings.as_string(tf.shape(tensor)), separator=", ")
  return tf.strings.join(["[", dims, "]"])


def require_rank(tensor, rank, signature, name, expected, rest_bodies):
  """Checks at run time that `tensor` has rank `rank`; returns it with that static rank.

  Args:
    tensor: a signature input of unknown rank.
    rank: the rank it must have (1 for [batch], 2 for [batch, seq_length]).
    signature: the signature's name, first word of the message.
    name: the input's name in the signature.
    expected: what the input must be, e.g. "a vector of strings, shape [batch]".
    rest_bodies: the REST bodies that give the right shape (one of the *_REST_BODIES).

  Returns:
    `tensor`, computed only after the check passed, with static shape [None] * rank.

  Raises:
    tf.errors.InvalidArgumentError (when the graph runs): "<signature>: `<name>` must be
      <expected>; got rank <r>, shape [<dims>] (a REST body sends <rest_bodies>)".
  """
  actual = tf.rank(tensor)
  message = tf.strings.join([
      f"{signature}: `{name}` must be {expected}; got rank ",
      tf.strings.as_string(actual), ", shape ",
      _shape_text(tensor), f" (a REST body sends {rest_bodies})"
  ])
  check = tf.debugging.Assert(tf.equal(actual, rank), [message])
  # The control dependency makes everything computed from the input wait for the check, so a
  # wrong shape fails here and not first in an op that happens to run earlier.
  with tf.control_dependencies([check]):
    checked = tf.identity(tensor)
  # Static only (tf.ensure_shape would add a run-time check with its own message, which TensorFlow
  # may run before this one).
  checked.set_shape([None] * rank)
  return checked


def require_same_shape(tensors, signature, expected):
  """Checks at run time that the named tensors (all of one rank) have one shape; returns them.

  Args:
    tensors: dict {input name: tensor}, in the order the message lists them.
    signature: the signature's name, first word of the message.
    expected: the shape they must share, e.g. "[batch, seq_length]".

  Returns:
    A dict of the same tensors, computed only after the check passed.

  Raises:
    tf.errors.InvalidArgumentError (when the graph runs): "<signature>: `a`, `b` and `c` must have
      one shape <expected>; got [..], [..], [..]".
  """
  names = [f"`{name}`" for name in tensors]
  listed = f"{', '.join(names[:-1])} and {names[-1]}"
  shapes = [tf.shape(t) for t in tensors.values()]
  same = tf.reduce_all([tf.reduce_all(tf.equal(shapes[0], s)) for s in shapes[1:]])
  got = tf.strings.reduce_join([_shape_text(t) for t in tensors.values()], separator=", ")
  message = tf.strings.join([f"{signature}: {listed} must have one shape {expected}; got ", got])
  check = tf.debugging.Assert(same, [message])
  with tf.control_dependencies([check]):
    return {name: tf.identity(t) for name, t in tensors.items()}
