"""postprocess/span_decoding.py's answer choice as TensorFlow ops, and the answer text.

Per window, the `n_best_size` largest start and end logits of its real positions are paired
(`tf.math.top_k` breaks ties by lower index, as span_decoding's stable argsort); kept pairs are
scored in float64 and the first best in (window, start rank, end rank) order wins, the order
span_decoding.decode_answer visits. SQuAD 2.0 follows run_squad.py's `write_predictions`.
"""

from typing import NamedTuple

import tensorflow as tf

NO_SPAN = -1  # start/end offset of a question without a kept span


class Spans(NamedTuple):
  """Chosen span per question (batch B).

  Attributes:
    start, end: int64 [B] offsets in the windows' token-offset units, end exclusive; NO_SPAN when
      there is no span (no window, no kept pair, or the null answer won).
    score: float64 [B] the best span's start_logit + end_logit, also when the null answer won
      (null_score - score is its margin, the reference's null_odds); -inf without a kept pair.
    null_score: float64 [B] SQuAD 2.0's null score, the min over the question's windows of
      start_logits[0] + end_logits[0] (computed for SQuAD 1.1 too); +inf without a window.
  """
  start: tf.Tensor
  end: tf.Tensor
  score: tf.Tensor
  null_score: tf.Tensor


def best_spans(start_logits, end_logits, windows, batch_size, n_best_size, max_answer_length,
               version_2_with_negative=False, null_score_diff_threshold=0.0):
  """A `Spans` tuple: each question's answer span over all its windows.

  Args:
    start_logits, end_logits: float32 [W, S] model outputs for `windows`.
    windows: a serving.windows.Windows of the batch.
    batch_size: int32 scalar tensor B.
    n_best_size, max_answer_length: Python ints (candidates per window; tokens).
    version_2_with_negative: Python bool, allow the null answer.
    null_score_diff_threshold: Python float, the null answer's margin.
  """
  # Padding is never a candidate, so the answer does not depend on how far a window was padded.
  real = windows.input_mask > 0
  no_logit = tf.constant(-float("inf"), tf.float32)
  k = tf.minimum(n_best_size, tf.shape(start_logits)[1])
  start_top, start_idx = tf.math.top_k(tf.where(real, start_logits, no_logit), k)  # [W, k]
  end_top, end_idx = tf.math.top_k(tf.where(real, end_logits, no_logit), k)
  in_context = windows.token_start >= 0
  start_ok = tf.gather(in_context & windows.token_is_max_context, start_idx, batch_dims=1)
  end_ok = tf.gather(in_context, end_idx, batch_dims=1)
  s, e = start_idx[:, :, None], end_idx[:, None, :]
  kept = start_ok[:, :, None] & end_ok[:, None, :] & (e >= s) & (e - s + 1 <= max_answer_length)
  pair_score = (tf.cast(start_top, tf.float64)[:, :, None] +
                tf.cast(end_top, tf.float64)[:, None, :])
  pair_score = tf.where(kept, pair_score, tf.constant(-float("inf"), tf.float64))
  num_windows = tf.shape(pair_score)[0]
  pair_score = tf.reshape(pair_score, [num_windows, -1])  # start-rank major, end-rank minor

  # Best pair per window: the first pair reaching the window's maximum.
  window_best = tf.reduce_max(pair_score, axis=1)
  pair_rank = tf.range(tf.shape(pair_score)[1])[None, :]
  window_pair = tf.reduce_min(
      tf.where(tf.equal(pair_score, window_best[:, None]), pair_rank, tf.int32.max), axis=1)
  # Best window per question: the first window reaching the question's maximum.
  example = windows.example_index
  question_best = tf.math.unsorted_segment_max(window_best, example, batch_size)
  window_id = tf.range(num_windows)
  is_best = (window_best > -float("inf")) & tf.equal(window_best, tf.gather(question_best, example))
  best_window = tf.math.unsorted_segment_min(tf.where(is_best, window_id, tf.int32.max), example,
                                             batch_size)
  found = best_window < tf.int32.max

  # Read the chosen pair's offsets; rows without a span read an appended row of zeros instead.
  pad_row = lambda x: tf.concat([x, tf.zeros(tf.concat([[1], tf.shape(x)[1:]], 0), x.dtype)], 0)
  row = tf.where(found, best_window, num_windows)
  pair = tf.gather(pad_row(window_pair), row)
  start_pos = tf.gather(tf.gather(pad_row(start_idx), row), pair // k, batch_dims=1)
  end_pos = tf.gather(tf.gather(pad_row(end_idx), row), pair % k, batch_dims=1)
  start = tf.gather(tf.gather(pad_row(windows.token_start), row), start_pos, batch_dims=1)
  end = tf.gather(tf.gather(pad_row(windows.token_end), row), end_pos, batch_dims=1)
  no_span = tf.constant(NO_SPAN, tf.int64)
  start = tf.where(found, start, no_span)
  end = tf.where(found, end, no_span)
  score = tf.where(found, question_best, tf.constant(-float("inf"), tf.float64))

  null = tf.cast(start_logits[:, 0], tf.float64) + tf.cast(end_logits[:, 0], tf.float64)
  has_window = tf.math.unsorted_segment_max(tf.ones_like(example), example, batch_size) > 0
  # An empty segment's min is float64's largest value: +inf says "no window" as decoding does.
  null_score = tf.where(has_window, tf.math.unsorted_segment_min(null, example, batch_size),
                        tf.constant(float("inf"), tf.float64))
  if version_2_with_negative:
    # A question with windows but no kept pair has best = -inf, so the null answer wins.
    use_null = has_window & (null_score - score > null_score_diff_threshold)
    start = tf.where(use_null, no_span, start)
    end = tf.where(use_null, no_span, end)
  return Spans(start, end, score, null_score)


def char_span_to_text(text, start_char, end_char):
  """(answer string [B], start_char int32 [B], end_char int32 [B]): context[start_char:end_char]
  of UTF-8 string [B] for int64 [B] code-point offsets; "", 0, 0 where the span is NO_SPAN."""
  found = start_char >= 0
  char_starts = tf.strings.unicode_decode_with_offsets(
      text, "UTF-8", errors="replace")[1]  # int64 [B, (chars)] byte offset of each character
  num_bytes = tf.cast(tf.strings.length(text, unit="BYTE"), tf.int64)
  # char index -> byte offset, the string's end included.
  bounds = tf.concat([char_starts, num_bytes[:, None]], axis=1).to_tensor()
  start_char = tf.where(found, start_char, 0)
  end_char = tf.where(found, end_char, 0)
  first_byte = tf.gather(bounds, start_char, batch_dims=1)
  last_byte = tf.gather(bounds, end_char, batch_dims=1)
  answer = tf.strings.substr(text, first_byte, last_byte - first_byte, unit="BYTE")
  answer = tf.where(found, answer, "")
  return answer, tf.cast(start_char, tf.int32), tf.cast(end_char, tf.int32)
