"""The object export.py saves: the QA model with raw-text, feature and tf.Example signatures.

Signatures, batched along the first axis:
  serve_text (= serving_default): tf.string [B] `question`, `context` -> `answer` tf.string [B],
      `start_char`, `end_char` int32 [B] (code points, end exclusive), `score` float32 [B]
      (the best span's start + end logit, also when SQuAD 2.0's null answer won: null_score -
      score is its margin; -inf without a span, e.g. a question or context without a token),
      `null_score` float32 [B] (SQuAD 2.0's: min over windows of start + end logit at [CLS];
      +inf without a window).
  serve_features: int32 [B, seq] `input_word_ids`, `input_mask`, `input_type_ids` -> float32
      [B, seq] `start_logits`, `end_logits`.
  serve_examples: tf.string [B] serialized tf.train.Example -> `unique_ids` int64 [B] (-1 when
      absent), float32 [B, max_seq_length] logits.
Inputs have unknown rank and are checked in the graph (serving/signature_inputs.py).
"""

import tensorflow as tf

from squad_qa import errors
from squad_qa.base import artifacts
from squad_qa.flags import settings
from squad_qa.model import span_model
from squad_qa.postprocess import span_decoding
from squad_qa.preprocess import features as features_lib
from squad_qa.preprocess import records
from squad_qa.preprocess import wordpiece
from squad_qa.serving import answers
from squad_qa.serving import constant_weights
from squad_qa.serving import export_config
from squad_qa.serving import signature_inputs
from squad_qa.serving import tokenizer as tokenizer_lib
from squad_qa.serving import windows as windows_lib

# The featurization keys of qa_config (assets.extra/qa_config.json) the signatures bake in.
FEATURIZATION_KEYS = artifacts.FEATURIZATION_KEYS
# The decoding settings baked into serve_text, with export.py's defaults.
DECODING_DEFAULTS = {
    **settings.defaults(span_decoding.DecodingSettings), "window_batch_size":
        export_config.ExportConfig.window_batch_size
}


def validate_config(qa_config):
  """Checks a qa_config dict before anything is traced.

  Raises:
    errors.UsageError: a missing key or a value the windowing cannot work with.
  """
  missing = [k for k in FEATURIZATION_KEYS + tuple(DECODING_DEFAULTS) if k not in qa_config]
  if missing:
    raise errors.UsageError(f"qa_config lacks {', '.join(missing)}")
  if qa_config["doc_stride"] <= 0 or qa_config[
      "max_seq_length"] <= qa_config["max_query_length"] + 3:
    raise errors.UsageError(f"need doc_stride > 0 and max_seq_length > max_query_length + 3 (got "
                            f"{qa_config['doc_stride']}, {qa_config['max_seq_length']}, "
                            f"{qa_config['max_query_length']})")
  span_decoding.check_decoding_settings(qa_config["n_best_size"], qa_config["max_answer_length"],
                                        qa_config["null_score_diff_threshold"])
  if qa_config["window_batch_size"] <= 0:
    raise errors.UsageError(f"window_batch_size must be positive (got "
                            f"{qa_config['window_batch_size']})")


def encoder_type_ids(model):
  """The encoder's token type ids (rows of tfm BertEncoder's type embedding); None for a stand-in
  without variables."""
  rows = [int(v.shape[0]) for v in getattr(model, "variables", ()) if "type_embeddings" in v.name]
  return rows[0] if rows else None


def encoder_positions(model):
  """The encoder's positions in tokens (the rows of tfm BertEncoder's position embedding), beyond
  which a window has no position; None for a stand-in without variables."""
  rows = [
      int(v.shape[0]) for v in getattr(model, "variables", ()) if "position_embedding" in v.name
  ]
  return rows[0] if rows else None


class LogitsServingModule(tf.Module):
  """The model (weights loaded) and its vocab asset with serve_features alone (any length).

  `qa_config`: FEATURIZATION_KEYS and DECODING_DEFAULTS' keys, baked into the graph. A model that
  computes in 16 bits is served with its weights as graph constants (serving/constant_weights.py),
  taken when the module is made; otherwise the module holds the model and saves its variables.

  Raises:
    ValueError: from `validate_config` or `wordpiece.read_vocab`.
  """

  def __init__(self, model, vocab_file, qa_config):
    super().__init__()
    validate_config(qa_config)
    # A frozen function of the weights, or None: the model itself, whose variables are saved.
    self._constant_logits = (constant_weights.logits_function(model)
                             if constant_weights.pays_off(model) else None)
    if self._constant_logits is None:
      self.model = model
    self.vocab_file = tf.saved_model.Asset(vocab_file)
    self._config = dict(qa_config)
    wordpiece.read_vocab(vocab_file)  # fails early, with the path, on a file that is not a vocab
    self._max_positions = encoder_positions(model)
    self._type_ids = encoder_type_ids(model)

  def _checked_values(self, signature, input_mask, input_type_ids,
                      names=(span_model.INPUT_MASK, span_model.INPUT_TYPE_IDS)):
    """(input_mask, input_type_ids) checked to hold 0/1 mask values and the encoder's type ids;
    `names`: theirs in `signature`'s inputs."""
    input_mask = signature_inputs.require_values_below(input_mask, 2, signature, names[0],
                                                       "0 (padding) or 1 (a token)")
    if self._type_ids is not None:
      input_type_ids = signature_inputs.require_values_below(
          input_type_ids, self._type_ids, signature, names[1],
          "token type ids (0: question, 1: context)")
    return input_mask, input_type_ids

  def _logits(self, input_word_ids, input_mask, input_type_ids):
    if self._constant_logits is not None:
      start_logits, end_logits = self._constant_logits(input_word_ids, input_mask, input_type_ids)
      return start_logits, end_logits
    return self.model(
        {
            span_model.INPUT_WORD_IDS: input_word_ids,
            span_model.INPUT_MASK: input_mask,
            span_model.INPUT_TYPE_IDS: input_type_ids
        }, training=False)

  # Inputs of any rank, checked in the graph; the signature checks dtypes.
  @tf.function(input_signature=[
      tf.TensorSpec(None, tf.int32, name=span_model.INPUT_WORD_IDS),
      tf.TensorSpec(None, tf.int32, name=span_model.INPUT_MASK),
      tf.TensorSpec(None, tf.int32, name=span_model.INPUT_TYPE_IDS)
  ])
  def serve_features(self, input_word_ids, input_mask, input_type_ids):
    """Token ids int32 [batch, seq] in, float32 [batch, seq] start/end logits out."""
    inputs = {
        span_model.INPUT_WORD_IDS: input_word_ids,
        span_model.INPUT_MASK: input_mask,
        span_model.INPUT_TYPE_IDS: input_type_ids
    }
    inputs = {
        name: signature_inputs.require_rank(
            tensor, 2, "serve_features", name,
            "a matrix of int32 token ids, shape [batch, seq_length]",
            signature_inputs.FEATURES_REST_BODIES) for name, tensor in inputs.items()
    }
    inputs = signature_inputs.require_same_shape(inputs, "serve_features", "[batch, seq_length]")
    seq = tf.shape(inputs[span_model.INPUT_WORD_IDS])[1]
    checks = [
        tf.debugging.Assert(
            seq > 0, ["serve_features: seq_length 0: a window holds at least its [CLS] token"])
    ]
    if self._max_positions is not None:
      checks.append(
          tf.debugging.Assert(seq <= self._max_positions, [
              tf.strings.format(
                  "serve_features: seq_length {} is more than the {} positions of the encoder; "
                  "cut the windows to at most {} tokens",
                  (seq, self._max_positions, self._max_positions))
          ]))
    with tf.control_dependencies(checks):
      inputs = {name: tf.identity(t) for name, t in inputs.items()}
    inputs[span_model.INPUT_MASK], inputs[span_model.INPUT_TYPE_IDS] = self._checked_values(
        "serve_features", inputs[span_model.INPUT_MASK], inputs[span_model.INPUT_TYPE_IDS])
    start_logits, end_logits = self._logits(*(inputs[name] for name in (span_model.INPUT_WORD_IDS,
                                                                        span_model.INPUT_MASK,
                                                                        span_model.INPUT_TYPE_IDS)))
    return {"start_logits": start_logits, "end_logits": end_logits}

  def signatures(self):
    """{signature name: concrete function} for tf.saved_model.save."""
    features = self.serve_features.get_concrete_function()
    return {"serving_default": features, "serve_features": features}


class FeatureServingModule(LogitsServingModule):
  """LogitsServingModule plus serve_examples (records of max_seq_length); core TF ops only."""

  @tf.function(input_signature=[tf.TensorSpec(None, tf.string, name="examples")])
  def serve_examples(self, examples):
    """Serialized tf.train.Example [B] with the TFRecord feature names in, logits out."""
    examples = signature_inputs.require_rank(
        examples, 1, "serve_examples", "examples",
        "a vector of serialized tf.train.Example strings, shape [batch]",
        signature_inputs.EXAMPLES_REST_BODIES)
    seq = self._config["max_seq_length"]
    spec = {k: tf.io.FixedLenFeature([seq], tf.int64) for k in records.MODEL_INPUT_KEYS}
    spec["unique_ids"] = tf.io.FixedLenFeature([], tf.int64, default_value=-1)
    parsed = tf.io.parse_example(examples, spec)
    ids, mask, types = (tf.cast(parsed[k], tf.int32) for k in records.MODEL_INPUT_KEYS)
    mask, types = self._checked_values("serve_examples", mask, types, records.MODEL_INPUT_KEYS[1:])
    start_logits, end_logits = self._logits(ids, mask, types)
    return {
        "unique_ids": parsed["unique_ids"],
        "start_logits": start_logits,
        "end_logits": end_logits
    }

  def signatures(self):
    """{signature name: concrete function} for tf.saved_model.save."""
    return dict(super().signatures(), serve_examples=self.serve_examples.get_concrete_function())


class QAServingModule(FeatureServingModule):
  """FeatureServingModule plus the WordPiece tokenizer and the raw-text serve_text signature."""

  def __init__(self, model, vocab_file, qa_config):
    super().__init__(model, vocab_file, qa_config)
    vocab = wordpiece.read_vocab(vocab_file)
    self._cls_id = vocab.index("[CLS]")
    self._sep_id = vocab.index("[SEP]")
    self.tokenizer = tokenizer_lib.BertTextTokenizer(vocab, qa_config["do_lower_case"])

  def window_logits(self, windows):
    """(start_logits, end_logits) float32 [W, S] of the model over `windows`; -inf beyond a chunk.

    Over `window_batch_size` windows, they run sorted by length that many at a time (bounding
    memory), each chunk cut to its longest window.
    """
    ids, mask, types = windows.input_word_ids, windows.input_mask, windows.input_type_ids
    chunk = self._config["window_batch_size"]
    total = tf.shape(ids)[0]
    width = tf.shape(ids)[1]

    def all_at_once():  # `windows` are already as wide as their longest
      return self._logits(ids, mask, types)

    def in_chunks():
      lengths = tf.reduce_sum(mask, axis=1)
      order = tf.argsort(lengths, stable=True)
      sorted_lengths = tf.gather(lengths, order)
      num_chunks = (total + chunk - 1) // chunk

      def body(i, starts, ends):
        rows = order[i * chunk:tf.minimum((i + 1) * chunk, total)]
        length = tf.reduce_max(sorted_lengths[i * chunk:tf.minimum((i + 1) * chunk, total)])
        cut = lambda x: tf.gather(x, rows)[:, :length]
        pad = lambda x: tf.pad(x, [[0, 0], [0, width - length]], constant_values=-float("inf"))
        start, end = self._logits(cut(ids), cut(mask), cut(types))
        return i + 1, starts.write(i, pad(start)), ends.write(i, pad(end))

      empty = lambda: tf.TensorArray(tf.float32, size=num_chunks, infer_shape=False, element_shape=
                                     tf.TensorShape([None, None]))
      _, starts, ends = tf.while_loop(lambda i, *_: i < num_chunks, body,
                                      (tf.constant(0), empty(), empty()))
      unsort = tf.math.invert_permutation(order)
      return tf.gather(starts.concat(), unsort), tf.gather(ends.concat(), unsort)

    return tf.cond(total <= chunk, all_at_once, in_chunks)

  def make_windows(self, question, context):
    """serving.windows.Windows of string [B] questions and contexts; offsets in code points."""
    batch_size = tf.shape(question)[0]
    with tf.name_scope("tokenize"):
      # One tokenizer pass over questions and contexts: its ops cost more per call than per string.
      ids, starts, ends = self.tokenizer.tokenize_with_offsets(tf.concat([question, context], 0))
    with tf.name_scope("windows"):
      featurization = features_lib.Featurization(
          **{k: self._config[k] for k in ("max_seq_length", "doc_stride", "max_query_length")})
      # A question without a token asks nothing: its context is dropped, so it gets no window and
      # is answered "" as a context without a token is.
      context_ids = ids[batch_size:]
      asked = tf.ones_like(context_ids, tf.bool) & (ids[:batch_size].row_lengths() > 0)[:, None]
      context_ids, starts, ends = (
          tf.ragged.boolean_mask(x[batch_size:], asked) for x in (ids, starts, ends))
      return windows_lib.make_windows(ids[:batch_size], context_ids, starts, ends, self._cls_id,
                                      self._sep_id, featurization)

  def answer(self, question, context):
    """serve_text's computation (callable eagerly too); see the module docstring."""
    windows = self.make_windows(question, context)
    with tf.name_scope("encoder"):
      start_logits, end_logits = self.window_logits(windows)
    with tf.name_scope("decode"):
      spans = answers.best_spans(start_logits, end_logits, windows,
                                 tf.shape(question)[0], self._config["n_best_size"],
                                 self._config["max_answer_length"],
                                 self._config["version_2_with_negative"],
                                 self._config["null_score_diff_threshold"])
      text, start_char, end_char = answers.char_span_to_text(context, spans.start, spans.end)
    return {
        "answer": text,
        "start_char": start_char,
        "end_char": end_char,
        "score": tf.cast(spans.score, tf.float32),
        "null_score": tf.cast(spans.null_score, tf.float32)
    }

  @tf.function(input_signature=[
      tf.TensorSpec(None, tf.string, name="question"),
      tf.TensorSpec(None, tf.string, name="context")
  ])
  def serve_text(self, question, context):
    """Raw question and context strings [B] in, answers out (module docstring)."""
    question, context = (signature_inputs.require_rank(tensor, 1, "serve_text", name,
                                                       "a vector of strings, shape [batch]",
                                                       signature_inputs.TEXT_REST_BODIES)
                         for name, tensor in (("question", question), ("context", context)))
    check = tf.debugging.assert_equal(
        tf.shape(question), tf.shape(context),
        message="serve_text: `question` and `context` need the same batch size")
    with tf.control_dependencies([check]):
      return self.answer(tf.identity(question), context)

  def signatures(self):
    """{signature name: concrete function} for tf.saved_model.save; serving_default = serve_text."""
    text = self.serve_text.get_concrete_function()
    return dict(super().signatures(), serving_default=text, serve_text=text)
