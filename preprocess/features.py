"""Windowed features for extractive QA: the core of this tool.

The algorithm is google-research/bert `run_squad.py` `convert_examples_to_features` (the same in
tf-models-official `official/nlp/data/squad_lib.py`), applied to a context tokenized once as a whole with
character offsets instead of word by word:

  * the question keeps its first `max_query_length` WordPiece tokens;
  * the context tokens are cut into windows of at most `max_seq_length - len(question) - 3` tokens, a
    new window starting every `doc_stride` tokens (a step, as in bert/tfm) until one reaches the end;
  * each feature is `[CLS] question [SEP] window [SEP]`, zero-padded to `max_seq_length`, with
    segment ids 0 for `[CLS] question [SEP]` and 1 for `window [SEP]`;
  * training positions are token indices into the feature; a window that does not hold the whole answer
    gets start = end = 0 (the `[CLS]` token), as bert/tfm do;
  * the answer's token span is first the tokens of the words holding it, then tightened to the tokens
    of the answer text when they occur inside (`_improve_answer_span`);
  * a token's "max context" window is the one where min(left, right context) + 0.01 * window length is
    largest (`_check_is_max_context`); prediction only starts answers in that window.

Eval features also carry, per position, the character offsets of the token in the original context
(-1 outside the context), so an answer is an exact substring of the context.
"""

import bisect
import dataclasses
from typing import List, Optional

import numpy as np


@dataclasses.dataclass
class TokenizedText:
  """WordPiece tokens of one text with their character offsets.

  Attributes:
    ids: int32 [n] vocabulary ids.
    start_chars: int32 [n] offset of each token's first character, in code points.
    end_chars: int32 [n] offset one past each token's last character, in code points.
  """
  ids: np.ndarray
  start_chars: np.ndarray
  end_chars: np.ndarray

  def __len__(self):
    return len(self.ids)


@dataclasses.dataclass
class Feature:
  """One window of one question, ready to serialize.

  Lists have length max_seq_length. `token_start_char`/`token_end_char` are code-point offsets into
  the context (end exclusive), -1 at non-context positions; `token_is_max_context` is 1 where the window
  is the token's max-context window.
  """
  unique_id: int
  example_index: int
  doc_span_index: int
  input_ids: List[int]
  input_mask: List[int]
  segment_ids: List[int]
  start_position: int
  end_position: int
  token_start_char: List[int]
  token_end_char: List[int]
  token_is_max_context: List[int]


def doc_spans(num_tokens, max_tokens_for_doc, doc_stride):
  """Window (start, length) pairs over `num_tokens` context tokens, as run_squad.py makes them.

  Returns:
    A list of (start, length) tuples in tokens; empty for an empty context (no feature, as in
    run_squad.py).
  """
  spans = []
  start = 0
  while start < num_tokens:
    length = min(num_tokens - start, max_tokens_for_doc)
    spans.append((start, length))
    if start + length >= num_tokens:
      break
    start += min(length, doc_stride)
  return spans


def max_context_flags(spans, span_index):
  """Per token of window `span_index`, whether that window is the token's max-context window.

  Same score as run_squad.py `_check_is_max_context`: min(left, right) + 0.01 * length, first window
  wins ties.

  Returns:
    A list of bool, one per token of the window.
  """
  start, length = spans[span_index]
  flags = []
  for position in range(start, start + length):
    best_score, best_index = None, None
    for index, (s, n) in enumerate(spans):
      end = s + n - 1
      if position < s or position > end:
        continue
      score = min(position - s, end - position) + 0.01 * n
      if best_score is None or score > best_score:
        best_score, best_index = score, index
    flags.append(best_index == span_index)
  return flags


def answer_token_span(context_tokens, char_to_word, answer_start, answer_text, answer_ids):
  """The answer's token span [start, end] (inclusive) within the context tokens.

  Args:
    context_tokens: TokenizedText of the context.
    char_to_word: per context character, its whitespace-word index (squad_reader.char_to_word_offsets).
    answer_start: answer offset in characters.
    answer_text: the answer (str).
    answer_ids: WordPiece ids of the answer text, for run_squad.py's `_improve_answer_span`.

  Returns:
    (start, end) token indices, or None when the answer holds no token.
  """
  # Word of each token, the counterpart of run_squad.py's tok_to_orig_index.
  token_words = [char_to_word[c] for c in context_tokens.start_chars]
  start_word = char_to_word[answer_start]
  end_word = char_to_word[answer_start + len(answer_text) - 1]
  # orig_to_tok_index[w] = first token of word w (or of the next word holding a token).
  tok_start = bisect.bisect_left(token_words, start_word)
  tok_end = bisect.bisect_left(token_words, end_word + 1) - 1
  if tok_start > tok_end:
    return None
  return _improve_answer_span(context_tokens.ids, tok_start, tok_end, answer_ids)


def _improve_answer_span(doc_ids, start, end, answer_ids):
  # run_squad.py: the smallest sub-span of [start, end] whose tokens equal the answer's tokens.
  answer = list(answer_ids)
  n = len(answer)
  for new_start in range(start, end + 1):
    for new_end in range(end, new_start - 1, -1):
      if new_end - new_start + 1 == n and list(doc_ids[new_start:new_end + 1]) == answer:
        return new_start, new_end
  return start, end


def make_features(example_index, first_unique_id, query_ids, context_tokens, cls_id, sep_id,
                  max_seq_length, doc_stride, max_query_length, answer_span=None):
  """All windows of one question.

  Args:
    example_index: index of the question in its split (int).
    first_unique_id: unique_id of the first window; the others follow consecutively.
    query_ids: WordPiece ids of the question (truncated here to max_query_length).
    context_tokens: TokenizedText of the context.
    cls_id, sep_id: ids of [CLS] and [SEP].
    max_seq_length, doc_stride, max_query_length: in tokens.
    answer_span: (start, end) context-token indices of the answer (training), or None.

  Returns:
    A list of Feature, one per window.

  Raises:
    ValueError: max_seq_length leaves no room for context tokens.
  """
  query_ids = list(query_ids[:max_query_length])
  max_tokens_for_doc = max_seq_length - len(query_ids) - 3
  if max_tokens_for_doc <= 0:
    raise ValueError(f"max_seq_length={max_seq_length} leaves no room for the context after a "
                     f"{len(query_ids)}-token question; raise it or lower max_query_length")
  spans = doc_spans(len(context_tokens), max_tokens_for_doc, doc_stride)
  doc_offset = len(query_ids) + 2
  features = []
  for span_index, (start, length) in enumerate(spans):
    window = slice(start, start + length)
    input_ids = [cls_id] + query_ids + [sep_id] + list(context_tokens.ids[window]) + [sep_id]
    segment_ids = [0] * doc_offset + [1] * (length + 1)
    token_start_char = [-1] * doc_offset + list(context_tokens.start_chars[window]) + [-1]
    token_end_char = [-1] * doc_offset + list(context_tokens.end_chars[window]) + [-1]
    is_max = [0] * doc_offset + [int(f) for f in max_context_flags(spans, span_index)] + [0]
    start_position = end_position = 0
    if answer_span is not None:
      tok_start, tok_end = answer_span
      if tok_start >= start and tok_end <= start + length - 1:
        start_position = tok_start - start + doc_offset
        end_position = tok_end - start + doc_offset
    pad = max_seq_length - len(input_ids)
    features.append(Feature(
        unique_id=first_unique_id + span_index,
        example_index=example_index,
        doc_span_index=span_index,
        input_ids=input_ids + [0] * pad,
        input_mask=[1] * len(input_ids) + [0] * pad,
        segment_ids=segment_ids + [0] * pad,
        start_position=start_position,
        end_position=end_position,
        token_start_char=[int(c) for c in token_start_char] + [-1] * pad,
        token_end_char=[int(c) for c in token_end_char] + [-1] * pad,
        token_is_max_context=is_max + [0] * pad))
  return features
