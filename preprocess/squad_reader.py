"""Reads SQuAD JSON into questions that point at their (shared) paragraph.

The layout is the official one (Rajpurkar et al., 2016):
`{"data": [{"title", "paragraphs": [{"context", "qas": [{"id", "question", "answers": [{"text",
"answer_start"}]}]}]}]}`. Offsets (`answer_start`) are in Unicode code points (Python `str` indices).

The answer-position rule follows google-research/bert `run_squad.py` `read_squad_examples` (also
tf-models-official `official/nlp/data/squad_lib.py`): the answer's first and last characters are mapped to
whitespace-separated words of the context, and a training question whose words do not contain the
answer text is skipped (counted under `answer_text_mismatch`).
"""

import collections
import dataclasses
import json
from typing import Dict, List, Optional


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
  """
  qas_id: str
  question_text: str
  paragraph_index: int
  answer_text: str = ""
  answer_start: int = -1


@dataclasses.dataclass
class SquadFile:
  """A read SQuAD file: the distinct paragraph contexts and the questions about them."""
  path: str
  contexts: List[str]
  examples: List[SquadExample]
  skipped: Dict[str, int]


def _is_bert_whitespace(c):
  # run_squad.py's is_whitespace: ASCII whitespace and U+202F (narrow no-break space).
  return c in (" ", "\t", "\r", "\n") or ord(c) == 0x202F


def char_to_word_offsets(context):
  """Maps each character of `context` to the index of its whitespace-separated word.

  Returns:
    (words, offsets): words is a list of str; offsets a list of int, one per character (whitespace
    maps to the preceding word, -1 before the first word), as in run_squad.py.
  """
  words = []
  offsets = []
  prev_is_whitespace = True
  for c in context:
    if _is_bert_whitespace(c):
      prev_is_whitespace = True
    else:
      if prev_is_whitespace:
        words.append(c)
      else:
        words[-1] += c
      prev_is_whitespace = False
    offsets.append(len(words) - 1)
  return words, offsets


def _answer_matches_words(answer_text, answer_start, words, offsets):
  """run_squad.py's check: the words spanned by the answer contain its whitespace-normalized text."""
  end = answer_start + len(answer_text) - 1
  if answer_start < 0 or end >= len(offsets) or end < answer_start:
    return False
  start_word, end_word = offsets[answer_start], offsets[end]
  if start_word < 0:
    return False
  actual_text = " ".join(words[start_word:end_word + 1])
  cleaned_answer_text = " ".join(answer_text.split())
  return bool(cleaned_answer_text) and actual_text.find(cleaned_answer_text) != -1


def load_json(path):
  """Loads a SQuAD JSON file and returns its `data` list.

  Raises:
    SquadInputError: the file is missing, not JSON, or has no `data` list.
  """
  try:
    with open(path, "r", encoding="utf-8-sig") as f:
      dataset = json.load(f)
  except FileNotFoundError:
    raise SquadInputError(f"{path}: no such file") from None
  except (json.JSONDecodeError, UnicodeDecodeError) as e:
    raise SquadInputError(
        f"{path}: not valid UTF-8 JSON ({e}); re-download or re-export the file") from None
  if not isinstance(dataset, dict) or not isinstance(dataset.get("data"), list):
    raise SquadInputError(f"{path}: top level has no 'data' list; is this a SQuAD file?")
  return dataset["data"]


def read_squad(path, is_training, max_examples=None):
  """Reads a SQuAD v1.1 file.

  Args:
    path: the JSON file.
    is_training: keep only the first answer of each question, and skip (and count) questions whose
      answer does not line up with the context as run_squad.py does.
    max_examples: stop after this many questions (None: all).

  Returns:
    A `SquadFile`. `skipped` counts skipped questions by reason.

  Raises:
    SquadInputError: a structural problem (names the article, paragraph and question).
  """
  contexts = []
  examples = []
  skipped = collections.Counter()
  seen_ids = set()
  for a, article in enumerate(load_json(path)):
    paragraphs = article.get("paragraphs") if isinstance(article, dict) else None
    if not isinstance(paragraphs, list):
      raise SquadInputError(f"{path}: article {a} has no 'paragraphs' list")
    for p, paragraph in enumerate(paragraphs):
      where = f"{path}: article {a} paragraph {p}"
      context = paragraph.get("context") if isinstance(paragraph, dict) else None
      if not isinstance(context, str):
        raise SquadInputError(f"{where}: no 'context' string")
      qas = paragraph.get("qas", [])
      if not context.strip():
        skipped["empty_context"] += len(qas)
        continue
      words = offsets = None
      paragraph_index = len(contexts)
      contexts.append(context)
      if not isinstance(qas, list) or not all(isinstance(qa, dict) for qa in qas):
        raise SquadInputError(f"{where}: 'qas' must be a list of question objects")
      for q, qa in enumerate(qas):
        qas_id, question = qa.get("id"), qa.get("question")
        if not isinstance(qas_id, str) or not isinstance(question, str):
          raise SquadInputError(f"{where} question {q}: needs string 'id' and 'question'")
        if qas_id in seen_ids:
          raise SquadInputError(f"{where} question {q}: duplicate id {qas_id!r}")
        seen_ids.add(qas_id)
        example = SquadExample(qas_id, question, paragraph_index)
        if is_training:
          answers = qa.get("answers") or []
          if not answers:
            skipped["no_answer"] += 1
            continue
          answer_text = answers[0].get("text") if isinstance(answers[0], dict) else None
          answer_start = answers[0].get("answer_start") if isinstance(answers[0], dict) else None
          if not isinstance(answer_text, str) or type(answer_start) is not int:
            raise SquadInputError(f"{where} question {q} ({qas_id}): first answer needs a string "
                                  f"'text' and an integer 'answer_start'")
          if words is None:
            words, offsets = char_to_word_offsets(context)
          if not _answer_matches_words(answer_text, answer_start, words, offsets):
            skipped["answer_text_mismatch"] += 1
            continue
          example.answer_text, example.answer_start = answer_text, answer_start
        examples.append(example)
        if max_examples is not None and len(examples) >= max_examples:
          return SquadFile(path, contexts, examples, dict(skipped))
  return SquadFile(path, contexts, examples, dict(skipped))
