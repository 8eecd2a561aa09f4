"""Reads SQuAD JSON into questions that point at their (shared) paragraph.

The layout is the official one (Rajpurkar et al., 2016):
`{"data": [{"title", "paragraphs": [{"context", "qas": [{"id", "question", "answers": [{"text",
"answer_start"}]}]}]}]}`. Offsets (`answer_start`) are in Unicode code points (Python `str` indices).

The answer-position rule follows google-research/bert `run_squad.py` `read_squad_examples` (also
tf-models-official `official/nlp/data/squad_lib.py`): the answer's first and last characters are mapped to
whitespace-separated words of the context, and a training question whose words do not contain the
answer text is skipped (counted under `answer_text_mismatch`).
"""

import bisect
import collections
import dataclasses
import json
from typing import Dict, List, Optional

import numpy as np


class SquadInputError(ValueError):
  """A SQuAD file that cannot be read; the message is one line naming file, place and fix."""


@dataclasses.dataclass
class SquadExample:
  """One question about one paragraph.

  Attributes:
    qas_id: the question's `id` (str).
    question_text: the question (str).
    paragraph_index: index into the `contexts` list returned with it.
    answer_text: first gold answer (str, "" for eval or unanswerable questions).
    answer_start: its offset in the context, in characters (-1 when there is none).
    is_impossible: SQuAD 2.0 unanswerable question (read with version_2_with_negative).
  """
  qas_id: str
  question_text: str
  paragraph_index: int
  answer_text: str = ""
  answer_start: int = -1
  is_impossible: bool = False


@dataclasses.dataclass
class SquadFile:
  """A read SQuAD file: the distinct paragraph contexts and the questions about them."""
  path: str
  contexts: List[str]
  examples: List[SquadExample]
  skipped: Dict[str, int]
  notes: Dict[str, int] = dataclasses.field(default_factory=dict)


class ContextWords:
  """The whitespace-separated words of a context, as run_squad.py splits them.

  Words are maximal runs without run_squad.py's whitespace (space, \t, \r, \n, U+202F), found with
  NumPy on the code points.

  Attributes:
    starts, ends: lists of int, character offsets where each word starts / ends (exclusive).
  """

  def __init__(self, context):
    self.context = context
    code_points = np.frombuffer(context.encode("utf-32-le", "surrogatepass"), np.uint32)
    space = ((code_points == 32) | (code_points == 9) | (code_points == 10) | (code_points == 13) |
             (code_points == 0x202F))
    word = ~space
    self.starts = np.flatnonzero(word & np.concatenate([[True], space[:-1]])).tolist()
    self.ends = (np.flatnonzero(word & np.concatenate([space[1:], [True]])) + 1).tolist()

  def word_of(self, char_index):
    """run_squad.py's char_to_word_offset[char_index]: the word holding the character, or for
    whitespace the word before it (-1 before the first word)."""
    return bisect.bisect_right(self.starts, char_index) - 1

  def words(self, first=0, last=None):
    """The words first..last (inclusive; default all) as str."""
    last = len(self.starts) - 1 if last is None else last
    return [self.context[self.starts[w]:self.ends[w]] for w in range(first, last + 1)]


def char_to_word_offsets(context):
  """Maps each character of `context` to the index of its whitespace-separated word.

  Returns:
    (words, offsets): words is a list of str; offsets a list of int, one per character (whitespace
    maps to the preceding word, -1 before the first word), as in run_squad.py.
  """
  words = ContextWords(context)
  starts = np.asarray(words.starts, np.int64)
  offsets = np.searchsorted(starts, np.arange(len(context)), side="right") - 1
  return words.words(), offsets.tolist()


def _answer_matches_words(answer_text, answer_start, context_words):
  """run_squad.py's check: the words spanned by the answer contain its whitespace-normalized text."""
  start_word = context_words.word_of(answer_start)
  end_word = context_words.word_of(answer_start + len(answer_text) - 1)
  if start_word < 0:
    return False
  actual_text = " ".join(context_words.words(start_word, end_word))
  cleaned_answer_text = " ".join(answer_text.split())
  return bool(cleaned_answer_text) and actual_text.find(cleaned_answer_text) != -1


def load_json(path):
  """Loads a SQuAD JSON file and returns its `data` list.

  A UTF-8 byte-order mark is accepted.

  Raises:
    SquadInputError: the file is missing, not UTF-8, not (complete) JSON, or has no `data` list.
  """
  try:
    with open(path, "r", encoding="utf-8-sig") as f:
      dataset = json.load(f)
  except FileNotFoundError:
    raise SquadInputError(f"{path}: no such file") from None
  except IsADirectoryError:
    raise SquadInputError(f"{path}: is a directory, not a SQuAD JSON file") from None
  except UnicodeDecodeError as e:
    raise SquadInputError(f"{path}: not UTF-8 text (byte {e.start}: {e.reason}); "
                          f"re-export the file as UTF-8") from None
  except json.JSONDecodeError as e:
    raise SquadInputError(f"{path}: not valid JSON (line {e.lineno} column {e.colno}: {e.msg}); "
                          f"the file may be truncated, re-download or re-export it") from None
  if not isinstance(dataset, dict) or not isinstance(dataset.get("data"), list):
    raise SquadInputError(f"{path}: top level has no 'data' list; is this a SQuAD file?")
  return dataset["data"]


def read_squad(path, is_training, max_examples=None, version_2_with_negative=False):
  """Reads a SQuAD v1.1 or v2.0 file.

  Args:
    path: the JSON file.
    is_training: keep only the first answer of each question, and skip (and count) questions whose
      answer does not line up with the context as run_squad.py does.
    max_examples: stop after this many questions (None: all).
    version_2_with_negative: SQuAD 2.0: questions with `"is_impossible": true` are kept as
      unanswerable (training: no answer needed, positions 0).

  Returns:
    A `SquadFile`. `skipped` counts skipped questions by reason: empty_context, no_answer,
    answer_empty (only whitespace), answer_start_out_of_range, answer_text_mismatch;
    `notes` counts kept questions worth knowing about: first_of_several_answers (training uses the
    first), unanswerable (SQuAD 2.0).

  Raises:
    SquadInputError: a structural problem (one line naming the file, article, paragraph, question).
  """
  contexts = []
  examples = []
  skipped = collections.Counter()
  notes = collections.Counter()
  seen_ids = {}
  for a, article in enumerate(load_json(path)):
    paragraphs = article.get("paragraphs") if isinstance(article, dict) else None
    if not isinstance(paragraphs, list):
      title = article.get("title") if isinstance(article, dict) else None
      named = f" ({title!r})" if isinstance(title, str) else ""
      raise SquadInputError(f"{path}: article {a}{named} has no 'paragraphs' list")
    for p, paragraph in enumerate(paragraphs):
      where = f"{path}: article {a} paragraph {p}"
      context = paragraph.get("context") if isinstance(paragraph, dict) else None
      if not isinstance(context, str):
        raise SquadInputError(f"{where}: no 'context' string")
      qas = paragraph.get("qas", [])
      if not isinstance(qas, list) or not all(isinstance(qa, dict) for qa in qas):
        raise SquadInputError(f"{where}: 'qas' must be a list of question objects")
      empty_context = not context.strip()
      words = None
      paragraph_index = len(contexts)
      if not empty_context:
        contexts.append(context)
      for q, qa in enumerate(qas):
        qas_id, question = qa.get("id"), qa.get("question")
        if not isinstance(qas_id, str) or not isinstance(question, str):
          raise SquadInputError(f"{where} question {q}: needs string 'id' and 'question'")
        if qas_id in seen_ids:
          raise SquadInputError(f"{where} question {q}: duplicate id {qas_id!r} (first at "
                                f"{seen_ids[qas_id]}); question ids must be unique")
        seen_ids[qas_id] = f"article {a} paragraph {p} question {q}"
        is_impossible = qa.get("is_impossible", False)
        if not isinstance(is_impossible, bool):
          raise SquadInputError(f"{where} question {q} ({qas_id}): 'is_impossible' must be true or "
                                f"false")
        if empty_context:
          skipped["empty_context"] += 1
          continue
        example = SquadExample(qas_id, question, paragraph_index)
        if version_2_with_negative and is_impossible:
          example.is_impossible = True
          notes["unanswerable"] += 1
        elif is_training:
          answers = qa.get("answers", [])
          if not isinstance(answers, list):
            raise SquadInputError(f"{where} question {q} ({qas_id}): 'answers' must be a list")
          if not answers:
            skipped["unanswerable_needs_version_2" if is_impossible else "no_answer"] += 1
            continue
          if len(answers) > 1:
            notes["first_of_several_answers"] += 1
          answer_text = answers[0].get("text") if isinstance(answers[0], dict) else None
          answer_start = answers[0].get("answer_start") if isinstance(answers[0], dict) else None
          if not isinstance(answer_text, str) or type(answer_start) is not int:
            raise SquadInputError(f"{where} question {q} ({qas_id}): first answer needs a string "
                                  f"'text' and an integer 'answer_start'")
          if not answer_text.strip():
            skipped["answer_empty"] += 1
            continue
          if answer_start < 0 or answer_start + len(answer_text) > len(context):
            skipped["answer_start_out_of_range"] += 1
            continue
          if words is None:
            words = ContextWords(context)
          if not _answer_matches_words(answer_text, answer_start, words):
            skipped["answer_text_mismatch"] += 1
            continue
          example.answer_text, example.answer_start = answer_text, answer_start
        examples.append(example)
        if max_examples is not None and len(examples) >= max_examples:
          return SquadFile(path, contexts, examples, dict(skipped), dict(notes))
  return SquadFile(path, contexts, examples, dict(skipped), dict(notes))
