"""The reference's WordPiece tokens with code-point offsets, as TensorFlow ops (for serve_text).

tfm's `BasicTokenizer` normalization (tensorflow-text's `FastBertTokenizer` differs: "ß" -> "ss")
done per character with string ops, then FastWordpiece as preprocess/wordpiece.py builds it; byte
offsets are mapped back to input code points. Known limit: FastWordpiece counts the word-length
limit in bytes, FullTokenizer in characters (one non-ASCII word over 400 bytes can differ).
"""

import tensorflow as tf
import tensorflow_text as tf_text

from squad_qa.preprocess import wordpiece

# tfm tokenization.py _is_control (Cc, Cf, except \t \n \r) plus the NUL and U+FFFD of _clean_text.
_DELETED = r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\x{fffd}\p{Cf}]"
# _is_whitespace (" \t\n\r", Zs) and the other characters Python's str.split() splits at.
_SPACE = r"[ \t\n\r\p{Zs}\x{2028}\x{2029}]"
# tfm tokenization.py _is_chinese_char.
_CJK = (r"[\x{4e00}-\x{9fff}\x{3400}-\x{4dbf}\x{20000}-\x{2a6df}\x{2a700}-\x{2b73f}"
        r"\x{2b740}-\x{2b81f}\x{2b820}-\x{2ceaf}\x{f900}-\x{faff}\x{2f800}-\x{2fa1f}]")


def _exclusive_cumsum_per_row(lengths):
  """For a RaggedTensor of lengths [B, (n)], each row's exclusive cumulative sum (same shape)."""
  flat = lengths.flat_values
  total = tf.cumsum(flat, exclusive=True)
  # Sum of all earlier rows, read at each row's first element (a zero appended for empty tails).
  row_start = tf.gather(tf.concat([total, tf.zeros([1], total.dtype)], 0), lengths.row_starts())
  return lengths.with_flat_values(total - tf.repeat(row_start, lengths.row_lengths()))


class BertTextTokenizer(tf.Module):
  """BERT WordPiece tokenization of strings with code-point offsets, in the graph.

  Args:
    vocab: list of token strings (wordpiece.read_vocab).
    do_lower_case: lower-case and strip accents, for uncased vocabularies.
  """

  def __init__(self, vocab, do_lower_case=True):
    super().__init__()
    self._do_lower_case = do_lower_case
    self._wordpiece = tf_text.FastWordpieceTokenizer(
        model_buffer=wordpiece.wordpiece_model(tuple(vocab)), token_out_type=tf.int32)

  def normalize(self, text):
    """(normalized string [B], piece_start int64 RaggedTensor [B, (input characters)]):
    BasicTokenizer's normalization of `text` and the byte where each character's replacement starts.
    """
    normalized, piece_start, _, _ = self._normalize_with_pieces(text)
    return normalized, piece_start

  def _normalize_with_pieces(self, text):
    """`normalize`, plus each input character's replacement (string RaggedTensor [B, (chars)]) and
    whether normalization deleted it (bool [total chars], the flat values' order)."""
    chars = tf.strings.unicode_split(text, "UTF-8", errors="replace")
    flat = chars.flat_values
    piece = flat
    if self._do_lower_case:
      piece = tf.strings.regex_replace(
          tf_text.normalize_utf8(tf.strings.lower(piece, encoding="utf-8"), "NFD"), r"\p{Mn}", "")
    # Spaces around the normalized CJK character: NFD maps the compatibility ideographs
    # (U+F900-FAFF, U+2F800-2FA1F) to unified ones, as BasicTokenizer's per-word NFD does.
    piece = tf.where(tf.strings.regex_full_match(flat, _CJK), " " + piece + " ", piece)
    piece = tf.where(tf.strings.regex_full_match(flat, _SPACE), " ", piece)
    deleted = tf.strings.regex_full_match(flat, _DELETED)
    piece = tf.where(deleted, "", piece)
    pieces = chars.with_flat_values(piece)
    normalized = tf.strings.reduce_join(pieces, axis=1)
    piece_start = _exclusive_cumsum_per_row(
        chars.with_flat_values(tf.strings.length(piece, unit="BYTE")))
    return normalized, tf.cast(piece_start, tf.int64), pieces, deleted

  def tokenize_with_offsets(self, text):
    """(ids int32, start_chars int64, end_chars int64) RaggedTensors [B, (tokens)] of string [B];
    offsets in code points of the input, end exclusive."""
    normalized, piece_start, pieces, deleted = self._normalize_with_pieces(text)
    ids, starts, ends = self._wordpiece.tokenize_with_offsets(normalized)
    # Character holding byte b of the normalized text: the last piece starting at or before b.
    sorted_starts = piece_start.to_tensor(default_value=tf.int64.max)
    locate = lambda b: tf.searchsorted(sorted_starts, b.to_tensor(default_value=0), side="right",
                                       out_type=tf.int64) - 1
    start_chars = tf.RaggedTensor.from_tensor(locate(starts), lengths=starts.row_lengths())
    end_chars = tf.RaggedTensor.from_tensor(locate(ends - 1) + 1, lengths=ends.row_lengths())
    start_chars, end_chars = _widen_over_removed(pieces, deleted, start_chars, end_chars)
    return ids, start_chars, end_chars


def _widen_over_removed(pieces, deleted, start_chars, end_chars):
  """Token offsets widened over the combining marks normalization stripped next to them.

  preprocess/word_alignment.py's rule: a stripped mark belongs to the token before it, or, after a
  space, a deleted character or the text's start, to the token after it; deleted characters
  (`deleted`: bool [total chars]) belong to no token. `pieces`: string RaggedTensor [B,
  (characters)], each character's replacement; offsets: int64 RaggedTensors [B, (tokens)], code
  points.
  """
  flat = pieces.flat_values
  # The characters a token's offsets stop at: all but the stripped marks.
  kept = tf.where((tf.strings.length(flat, unit="BYTE") > 0) | deleted)[:, 0]  # int64 [K], sorted
  is_boundary = tf.equal(flat, " ") | deleted
  token_row = start_chars.value_rowids()
  base = tf.gather(pieces.row_starts(), token_row)  # the row's first character, as a flat index
  row_end = base + tf.gather(pieces.row_lengths(), token_row)
  start, end = start_chars.flat_values + base, end_chars.flat_values + base
  total = tf.shape(flat, out_type=tf.int64)[:1]
  # End: the first kept character at or after it (at most the row's end).
  next_kept = tf.gather(tf.concat([kept, total], 0), tf.searchsorted(kept, end, side="left"))
  end = tf.minimum(next_kept, row_end)
  # Start: just after the last kept character before it, when that one is a space or deleted, or
  # is missing.
  previous = tf.gather(tf.concat([[-1], kept], 0), tf.searchsorted(kept, start, side="left"))
  at_boundary = (previous < base) | tf.gather(is_boundary, tf.maximum(previous, 0))
  start = tf.where(at_boundary, tf.maximum(previous + 1, base), start)
  return start_chars.with_flat_values(start - base), end_chars.with_flat_values(end - base)
