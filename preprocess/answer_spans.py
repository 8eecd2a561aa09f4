"""Where an answer's characters fall in a context's WordPiece tokens (run_squad.py, tfm
`squad_lib.py`): the tokens of the whitespace words holding its first and last characters,
tightened to the answer's own tokens where they occur inside (`_improve_answer_span`).

Where they do not and a token starts at the answer's first character (the first the tokenizer
keeps), the span starts there (the reference starts it at the word's first token): a character the
tokenizer deletes, such as U+200B in `was\u200bJohn`, glues an answer to the word before it, and
`€27,814` holds the answer `27,814` from its second token on.
"""

import numpy as np

from squad_qa.preprocess import word_alignment


def word_of_chars(contexts):
  """run_squad.py's char_to_word_offset for many contexts at once.

  Returns:
    (word_of_char, char_base, word_base), int64 arrays: the word of character c of context i (-1
    before its first word) is word_of_char[char_base[i] + c] - word_base[i].
  """
  joined = "\n".join(contexts)
  code_points = np.frombuffer(joined.encode("utf-32-le", "surrogatepass"), np.uint32)
  is_space = ((code_points == 32) | (code_points == 9) | (code_points == 13) | (code_points == 10) |
              (code_points == 0x202F))
  starts_word = ~is_space
  starts_word[1:] &= is_space[:-1]
  word_of_char = np.cumsum(starts_word, dtype=np.int64) - 1
  lengths = np.array([len(c) for c in contexts], np.int64)
  char_base = np.concatenate([[0], np.cumsum(lengths + 1)[:-1]]).astype(np.int64)
  word_base = np.where(char_base > 0, word_of_char[np.maximum(char_base - 1, 0)] + 1, 0)
  return word_of_char, char_base, word_base


def answer_token_spans(contexts, context_tokens, paragraph_of_question, answer_starts,
                       answer_lengths, answer_tokens):
  """Context-token spans of many answers (see `answer_token_span`).

  Args:
    contexts: list of str, and `context_tokens` their RaggedTokens.
    paragraph_of_question, answer_starts, answer_lengths: int [Q] (code points; start -1: none).
    answer_tokens: RaggedTokens of the answer texts.

  Returns:
    int64 [Q, 2] (start, end) context-token indices, inclusive; (-1, -1) for unanswerable questions
    and answers without a token.
  """
  word_of_char, char_base, word_base = word_of_chars(contexts)
  splits = context_tokens.row_splits
  paragraph_of_token = np.repeat(np.arange(len(contexts)), np.diff(splits))
  token_words = word_of_char[char_base[paragraph_of_token] + context_tokens.start_chars]
  paragraph = np.asarray(paragraph_of_question, np.int64)
  answer_starts = np.asarray(answer_starts, np.int64)
  answerable = answer_starts >= 0
  first_char = char_base[paragraph] + np.maximum(answer_starts, 0)
  last_char = first_char + np.maximum(np.asarray(answer_lengths, np.int64) - 1, 0)
  # orig_to_tok_index: the first token of a word, or of the next word that has tokens.
  tok_start = np.searchsorted(token_words, word_of_char[first_char], "left") - splits[paragraph]
  tok_end = (np.searchsorted(token_words, word_of_char[last_char] + 1, "left") - 1 -
             splits[paragraph])
  result = np.full((len(paragraph), 2), -1, np.int64)
  found = np.flatnonzero(answerable & (tok_start <= tok_end))
  # _improve_answer_span on the bytes of int32 ids: a 4-aligned byte match is an id match.
  context_bytes = np.ascontiguousarray(context_tokens.ids, np.int32).tobytes()
  answer_bytes = np.ascontiguousarray(answer_tokens.ids, np.int32).tobytes()
  first = (splits[paragraph] + tok_start)[found].tolist()
  last = (splits[paragraph] + tok_end)[found].tolist()
  answer_first = answer_tokens.row_splits[found].tolist()
  answer_last = answer_tokens.row_splits[found + 1].tolist()
  first_chars = [
      _first_kept_char(contexts[p], s, n)
      for p, s, n in zip(paragraph[found].tolist(), answer_starts[found].tolist(),
                         np.asarray(answer_lengths, np.int64)[found].tolist())
  ]
  improved = []
  for a, b, c, d, first_char in zip(first, last, answer_first, answer_last, first_chars):
    shift = _first_occurrence(context_bytes[4 * a:4 * b + 4], answer_bytes[4 * c:4 * d])
    if shift >= 0:
      improved.append((shift, shift + d - c - 1))
    else:
      improved.append((_token_at_answer(context_tokens.start_chars[a:b + 1], first_char), b - a))
  improved = np.asarray(improved, np.int64).reshape(-1, 2)
  result[found, 0] = tok_start[found] + improved[:, 0]
  result[found, 1] = tok_start[found] + improved[:, 1]
  return result


def _first_kept_char(text, start, length):
  """Offset of the first character of text[start:start + length] the tokenizer keeps (`start`
  when it deletes them all): an answer may begin with the deleted character that glues it."""
  end = start + length - 1
  while start < end and word_alignment.is_deleted(text[start]):
    start += 1
  return start


def _token_at_answer(start_chars, first_char):
  """Index of the token of a word span (int [n] start offsets) starting at the answer's first
  character `first_char`, else 0 (the span's first token)."""
  starting = np.flatnonzero(np.asarray(start_chars) == first_char)
  return int(starting[0]) if len(starting) else 0


def _first_occurrence(haystack, needle):
  """Token index of the first occurrence of int32 ids `needle` in `haystack` (both bytes), -1 if
  none or if needle is empty."""
  if not needle:
    return -1
  found = haystack.find(needle)
  while found >= 0 and found % 4:
    found = haystack.find(needle, found + 1)
  return found // 4 if found >= 0 else -1


def answer_token_span(context_tokens, char_to_word, answer_start, answer_text, answer_ids):
  """The answer's token span [start, end] (inclusive) within the context tokens.

  Args:
    context_tokens: features.TokenizedText of the context.
    char_to_word: `squad_reader.char_to_word_offsets`' offsets.
    answer_start: answer offset in characters.
    answer_text: the answer (str).
    answer_ids: WordPiece ids of the answer text.

  Returns:
    (start, end) token indices, or None when the answer holds no token.
  """
  # Word of each token, the counterpart of run_squad.py's tok_to_orig_index.
  token_words = np.asarray(char_to_word, np.int64)[np.asarray(context_tokens.start_chars, np.int64)]
  start_word = char_to_word[answer_start]
  end_word = char_to_word[answer_start + len(answer_text) - 1]
  # orig_to_tok_index[w] = first token of word w (or of the next word holding a token).
  tok_start = int(np.searchsorted(token_words, start_word, "left"))
  tok_end = int(np.searchsorted(token_words, end_word + 1, "left")) - 1
  if tok_start > tok_end:
    return None
  shift = _first_occurrence(
      np.ascontiguousarray(np.asarray(context_tokens.ids)[tok_start:tok_end + 1],
                           np.int32).tobytes(),
      np.ascontiguousarray(answer_ids, np.int32).tobytes())
  if shift >= 0:  # run_squad.py's _improve_answer_span
    return tok_start + shift, tok_start + shift + len(answer_ids) - 1
  first_char = answer_start + _first_kept_char(answer_text, 0, len(answer_text))
  return tok_start + _token_at_answer(context_tokens.start_chars[tok_start:tok_end + 1],
                                      first_char), tok_end
