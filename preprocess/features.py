"""Windowed features: google-research/bert `run_squad.py` `convert_examples_to_features` (tfm
`squad_lib.py`), vectorized over many questions with NumPy, on contexts tokenized as a whole.

A feature is `[CLS] question [SEP] window [SEP]` zero-padded to max_seq_length (segment ids 1 from
the window on); windows of at most `max_seq_length - len(question) - 3` context tokens start every
`doc_stride` tokens. A window without the whole answer gets positions 0 and `is_impossible` 1. A
token's max-context window maximizes min(left, right context) + 0.01 * window length
(`_check_is_max_context`). Eval features carry each token's code-point offsets (-1 outside).
"""

import dataclasses
from typing import List, Optional

from absl import logging
import numpy as np

from squad_qa import errors
from squad_qa.flags import settings


@dataclasses.dataclass(frozen=True, kw_only=True)
class VocabFile(settings.Settings):
  """The encoder's WordPiece vocabulary."""
  vocab_file: Optional[str] = settings.setting(
      None, "WordPiece vocab.txt of the encoder: required to make records; training and export "
      "default to the vocab.txt beside --init_checkpoint.")


@dataclasses.dataclass(frozen=True, kw_only=True)
class Tokenization(VocabFile):
  """How text becomes WordPiece tokens: the vocabulary and its casing."""
  do_lower_case: bool = settings.setting(
      True, "Lower-case and strip accents (true for uncased BERT vocabularies).")


@dataclasses.dataclass(frozen=True, kw_only=True)
class Featurization(Tokenization):
  """The windows of a question and its context, in tokens (rules between them: `RecordsConfig`
  and the export's `serving_config`)."""
  max_seq_length: int = settings.setting(
      384, "Tokens per feature: [CLS] question [SEP] context-window [SEP], padded.")
  doc_stride: int = settings.setting(
      128, "Step, in tokens, between the starts of consecutive context windows (as in bert/tfm; "
      "Hugging Face's run_qa.py --doc_stride is the windows' overlap instead); a window holds "
      "max_seq_length - 3 - its question's tokens of context, and a stride above that steps by "
      "the window instead (windows then do not overlap; make_records.py logs it).")
  max_query_length: int = settings.setting(64,
                                           "Question tokens kept; longer questions are truncated.")


def warn_if_stride_clamped(featurization):
  """Logs one warning when `featurization.doc_stride` exceeds the context tokens of some window,
  which then steps by its own length (`doc_spans`); `featurization` has max_seq_length,
  doc_stride and max_query_length (tokens)."""
  shortest = featurization.max_seq_length - 3 - featurization.max_query_length
  if featurization.doc_stride > shortest:
    logging.warning(
        "--doc_stride=%d: a window holds max_seq_length %d - 3 - its question's tokens (up to %d) "
        "= %d or more context tokens, and one holding fewer than %d steps by its own length "
        "instead: such windows do not overlap, and an answer across their boundary lies in no "
        "window", featurization.doc_stride, featurization.max_seq_length,
        featurization.max_query_length, shortest, featurization.doc_stride)


@dataclasses.dataclass
class TokenizedText:
  """WordPiece tokens of one text: int32 [n] `ids`, and `start_chars` / `end_chars`, int32 [n]
  code-point offsets of each token (end exclusive)."""
  ids: np.ndarray
  start_chars: np.ndarray
  end_chars: np.ndarray

  def __len__(self):
    return len(self.ids)


@dataclasses.dataclass
class RaggedTokens:
  """Tokens of many texts, flat, as in `TokenizedText` (int32 [total]); text i owns rows
  `row_splits[i]:row_splits[i + 1]` (int64 [num_texts + 1])."""
  ids: np.ndarray
  start_chars: np.ndarray
  end_chars: np.ndarray
  row_splits: np.ndarray

  def __len__(self):
    return len(self.row_splits) - 1

  def lengths(self):
    return np.diff(self.row_splits)

  def row(self, i):
    """TokenizedText of text i."""
    rows = slice(self.row_splits[i], self.row_splits[i + 1])
    return TokenizedText(self.ids[rows], self.start_chars[rows], self.end_chars[rows])


@dataclasses.dataclass
class Feature:
  """One window of one question; lists of max_seq_length, offsets -1 outside the context."""
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
  is_impossible: int = 0


def doc_spans(num_tokens, max_tokens_for_doc, doc_stride):
  """Window (start, length) pairs, in tokens, over `num_tokens` context tokens (run_squad.py's);
  empty for an empty context."""
  spans = []
  start = 0
  while start < num_tokens:
    length = min(num_tokens - start, max_tokens_for_doc)
    spans.append((start, length))
    if start + length >= num_tokens:
      break
    start += min(length, doc_stride)
  return spans


def best_windows(num_tokens, spans):
  """int32 [num_tokens]: each context token's max-context window (`_check_is_max_context`'s
  score in float64; the first window wins ties)."""
  best_score = np.full(num_tokens, -1.0)
  best = np.zeros(num_tokens, np.int32)
  for index, (start, length) in enumerate(spans):
    position = np.arange(start, start + length)
    score = np.minimum(position - start, start + length - 1 - position) + 0.01 * length
    better = score > best_score[start:start + length]
    best_score[start:start + length][better] = score[better]
    best[start:start + length][better] = index
  return best


def max_context_flags(spans, span_index):
  """A bool per token of window `span_index`: whether it is the token's max-context window."""
  start, length = spans[span_index]
  num_tokens = max(s + n for s, n in spans)
  return (best_windows(num_tokens, spans)[start:start + length] == span_index).tolist()


@dataclasses.dataclass
class WindowPlan:
  """The windows of many questions, one row per feature, in question order.

  Attributes:
    question: int64 [F] the feature's question; span_index, span_start, span_length: int32 [F]
      window number within it, first context token and context tokens.
    best_offset: int64 [F] start of the question's `best_windows` in `best_window` (int32, all
      concatenated); -1 for a question with a single window.
    num_windows: int64 [Q] features per question (0 for an empty context).
  """
  question: np.ndarray
  span_index: np.ndarray
  span_start: np.ndarray
  span_length: np.ndarray
  best_offset: np.ndarray
  best_window: np.ndarray
  num_windows: np.ndarray

  def __len__(self):
    return len(self.question)

  def rows(self, begin, end):
    """The plan of features begin..end-1 (sharing best_window)."""
    return dataclasses.replace(self, question=self.question[begin:end],
                               span_index=self.span_index[begin:end],
                               span_start=self.span_start[begin:end],
                               span_length=self.span_length[begin:end],
                               best_offset=self.best_offset[begin:end])


def plan_windows(context_lengths, query_lengths, max_seq_length, doc_stride):
  """The WindowPlan of Q questions from int [Q] `context_lengths` and `query_lengths` (kept
  question tokens) and max_seq_length and doc_stride (tokens).

  Raises:
    errors.UsageError: max_seq_length leaves no room for context tokens after some question.
  """
  cache = {}
  best_parts = []
  best_size = 0
  columns = ([], [], [], [], [])
  num_windows = np.zeros(len(context_lengths), np.int64)
  for q, (num_tokens, query_length) in enumerate(
      zip(np.asarray(context_lengths).tolist(),
          np.asarray(query_lengths).tolist())):
    max_tokens_for_doc = max_seq_length - query_length - 3
    key = (num_tokens, max_tokens_for_doc)
    planned = cache.get(key)
    if planned is None:
      if max_tokens_for_doc <= 0:
        raise errors.UsageError(
            f"max_seq_length={max_seq_length} leaves no room for the context after a "
            f"{query_length}-token question; raise it or lower max_query_length")
      spans = doc_spans(num_tokens, max_tokens_for_doc, doc_stride)
      offset = -1
      if len(spans) > 1:
        best_parts.append(best_windows(num_tokens, spans))
        offset = best_size
        best_size += num_tokens
      planned = cache[key] = (spans, offset)
    spans, offset = planned
    num_windows[q] = len(spans)
    for index, (start, length) in enumerate(spans):
      columns[0].append(q)
      columns[1].append(index)
      columns[2].append(start)
      columns[3].append(length)
      columns[4].append(offset)
  return WindowPlan(
      question=np.asarray(columns[0], np.int64), span_index=np.asarray(columns[1], np.int32),
      span_start=np.asarray(columns[2], np.int32), span_length=np.asarray(columns[3], np.int32),
      best_offset=np.asarray(columns[4], np.int64),
      best_window=(np.concatenate(best_parts) if best_parts else np.zeros(0, np.int32)),
      num_windows=num_windows)


def answers_in_windows(plan, answer_spans):
  """bool [Q]: whether some window of question q in `plan` holds its whole answer (int [Q, 2]
  inclusive context-token span, -1: none, which no window holds)."""
  spans = np.asarray(answer_spans, np.int64).reshape(-1, 2)
  row_spans = spans[plan.question]
  holds = ((row_spans[:, 0] >= 0) & (row_spans[:, 0] >= plan.span_start) &
           (row_spans[:, 1] < plan.span_start.astype(np.int64) + plan.span_length))
  return np.bincount(plan.question[holds], minlength=len(spans)) > 0


def safe_doc_stride(window_tokens, answer_tokens):
  """The largest doc_stride that puts every answer whole in some window (int), or None without an
  answer: windows of W context tokens start every s tokens, so an answer of L <= W tokens lies
  whole in one when s <= W - L + 1, wherever it starts. int [n] `window_tokens`, `answer_tokens`
  (answers longer than their window are left out: no stride helps them)."""
  margin = np.asarray(window_tokens, np.int64) - np.asarray(answer_tokens, np.int64) + 1
  margin = margin[margin >= 1]
  return int(margin.min()) if len(margin) else None


@dataclasses.dataclass
class FeatureArrays:
  """Features of F windows, as the records store them: example_index int64 [F], doc_span_index,
  start_positions, end_positions int32 [F], is_impossible int8 [F], input_ids int32 [F, seq],
  input_mask and segment_ids int8 [F, seq]; for eval (else None) token_start_char, token_end_char
  int32 [F, seq] (-1 outside the context) and token_is_max_context int8 [F, seq]."""
  example_index: np.ndarray
  doc_span_index: np.ndarray
  input_ids: np.ndarray
  input_mask: np.ndarray
  segment_ids: np.ndarray
  start_positions: np.ndarray
  end_positions: np.ndarray
  is_impossible: np.ndarray
  token_start_char: Optional[np.ndarray] = None
  token_end_char: Optional[np.ndarray] = None
  token_is_max_context: Optional[np.ndarray] = None

  def __len__(self):
    return len(self.example_index)


@dataclasses.dataclass
class Questions:
  """The questions whose windows `build_features` makes: flat int32 token `ids`; per question,
  int [Q], the `starts` of its ids, the `lengths` kept and its `paragraph` (context row); and
  `answer_spans`, int [Q, 2] inclusive context-token spans (-1: none), or None (eval)."""
  ids: np.ndarray
  starts: np.ndarray
  lengths: np.ndarray
  paragraph: np.ndarray
  answer_spans: Optional[np.ndarray] = None


def build_features(plan, questions, context, cls_id, sep_id, max_seq_length, with_offsets=False):
  """The features of the windows in `plan`, vectorized over windows.

  Args:
    plan: WindowPlan (or a `rows` slice of one).
    questions: Questions.
    context: the paragraphs' RaggedTokens.
    cls_id, sep_id: ids of [CLS] and [SEP].
    max_seq_length: in tokens.
    with_offsets: also make the offsets and max-context flags (eval).

  Returns:
    FeatureArrays.
  """
  # int32 index arithmetic: counts stay far below 2**31, and it halves the memory traffic.
  q = plan.question
  start = plan.span_start.astype(np.int32)[:, None]
  length = plan.span_length.astype(np.int32)[:, None]
  query_length = np.asarray(questions.lengths, np.int32)[q][:, None]
  j = np.arange(max_seq_length, dtype=np.int32)[None, :]
  doc_offset = query_length + 2
  in_query = (j >= 1) & (j <= query_length)
  context_position = j - doc_offset  # index within the window
  in_context = (context_position >= 0) & (context_position < length)
  real = j < doc_offset + length + 1
  query_index = np.where(in_query, np.asarray(questions.starts, np.int32)[q][:, None] + j - 1, 0)
  paragraph = np.asarray(questions.paragraph, np.int64)[q]
  token_index = np.where(
      in_context,
      np.asarray(context.row_splits, np.int32)[paragraph][:, None] + start + context_position, 0)
  input_ids = np.where(in_context, context.ids[token_index] if len(context.ids) else 0, 0)
  if len(questions.ids):
    input_ids = np.where(in_query, questions.ids[query_index], input_ids)
  input_ids = np.where((j == query_length + 1) | (j == doc_offset + length), sep_id, input_ids)
  input_ids[:, 0] = cls_id
  input_ids = np.where(real, input_ids, 0).astype(np.int32)
  segment_ids = ((j >= doc_offset) & real).astype(np.int8)
  num = len(q)
  start_positions = np.zeros(num, np.int32)
  end_positions = np.zeros(num, np.int32)
  is_impossible = np.ones(num, np.int8)
  if questions.answer_spans is not None:
    spans = np.asarray(questions.answer_spans, np.int64)[q]
    window_start, window_end = start[:, 0], start[:, 0] + length[:, 0] - 1
    contains = (spans[:, 0] >= 0) & (spans[:, 0] >= window_start) & (spans[:, 1] <= window_end)
    start_positions = np.where(contains, spans[:, 0] - window_start + doc_offset[:, 0], 0)
    end_positions = np.where(contains, spans[:, 1] - window_start + doc_offset[:, 0], 0)
    start_positions, end_positions = start_positions.astype(np.int32), end_positions.astype(
        np.int32)
    is_impossible = (~contains).astype(np.int8)
  features = FeatureArrays(example_index=q, doc_span_index=plan.span_index.copy(),
                           input_ids=input_ids, input_mask=real.astype(np.int8),
                           segment_ids=segment_ids, start_positions=start_positions,
                           end_positions=end_positions, is_impossible=is_impossible)
  if with_offsets:
    starts = context.start_chars[token_index] if len(
        context.start_chars) else np.zeros_like(token_index)
    ends = context.end_chars[token_index] if len(context.end_chars) else np.zeros_like(token_index)
    features.token_start_char = np.where(in_context, starts, -1).astype(np.int32)
    features.token_end_char = np.where(in_context, ends, -1).astype(np.int32)
    multi = plan.best_offset >= 0
    is_max = in_context.copy()
    if multi.any() and len(plan.best_window):
      best_index = np.where(
          in_context[multi], plan.best_offset[multi].astype(np.int32)[:, None] + start[multi] +
          context_position[multi], 0)
      is_max[multi] &= plan.best_window[best_index] == plan.span_index[multi][:, None]
    features.token_is_max_context = is_max.astype(np.int8)
  return features


def make_features(example_index, first_unique_id, query_ids, context_tokens, cls_id, sep_id,
                  featurization, answer_span=None):
  """All windows of one question.

  Args:
    example_index: index of the question in its split (int).
    first_unique_id: unique_id of the first window; the others follow.
    query_ids: WordPiece ids of the question.
    context_tokens: TokenizedText of the context.
    cls_id, sep_id: ids of [CLS] and [SEP].
    featurization: a `Featurization` (its token counts).
    answer_span: (start, end) context-token indices of the answer (training), or None.

  Returns:
    A list of Feature, one per window.

  Raises:
    errors.UsageError: max_seq_length leaves no room for context tokens.
  """
  query_ids = np.asarray(query_ids, np.int32)[:featurization.max_query_length]
  plan = plan_windows([len(context_tokens)], [len(query_ids)], featurization.max_seq_length,
                      featurization.doc_stride)
  questions = Questions(ids=query_ids, starts=np.zeros(1, np.int64), lengths=[len(query_ids)],
                        paragraph=[0], answer_spans=None if answer_span is None else [answer_span])
  context = RaggedTokens(np.asarray(context_tokens.ids, np.int32),
                         np.asarray(context_tokens.start_chars, np.int32),
                         np.asarray(context_tokens.end_chars, np.int32),
                         np.array([0, len(context_tokens)]))
  arrays = build_features(plan, questions, context, cls_id, sep_id, featurization.max_seq_length,
                          with_offsets=True)
  return [
      Feature(unique_id=first_unique_id + f, example_index=example_index,
              doc_span_index=int(arrays.doc_span_index[f]), input_ids=arrays.input_ids[f].tolist(),
              input_mask=arrays.input_mask[f].tolist(), segment_ids=arrays.segment_ids[f].tolist(),
              start_position=int(arrays.start_positions[f]), end_position=int(
                  arrays.end_positions[f]), token_start_char=arrays.token_start_char[f].tolist(),
              token_end_char=arrays.token_end_char[f].tolist(),
              token_is_max_context=arrays.token_is_max_context[f].tolist(),
              is_impossible=int(arrays.is_impossible[f])) for f in range(len(arrays))
  ]
