"""Reads SQuAD JSON (official layout, code-point `answer_start`) into questions that point at their
shared paragraph, with run_squad.py's `read_squad_examples` answer rule: a training question whose
context words do not contain its answer text is skipped.

`load_dataset` normalizes what is unambiguous, counted in meta.json `notes`: integer ids become
strings (`id_number_as_string`), decimal-string offsets integers (`answer_start_string_as_int`),
and an answer equal to the context only under NFC takes the context's characters
(`answer_text_in_context_form`); the answers of an `"is_impossible": true` question become its
`plausible_answers`, as SQuAD 2.0's files write them (`unanswerable_answers_ignored`). Other
mistyped fields are refused with one line. Hugging Face `datasets` rows (run_qa.py's
`{"data": [rows]}`, a JSON list of them, or JSON Lines) are grouped into SQuAD's articles and
paragraphs (`hugging_face_rows_grouped`).
"""

import collections
import dataclasses
import json
import os
import re
import unicodedata
from typing import Dict, List, Optional

import numpy as np

from squad_qa import errors
from squad_qa.base import artifacts
from squad_qa.flags import settings


class SquadInputError(errors.UserError, ValueError):
  """A SQuAD file that cannot be read; one line naming the file, the place and the fix."""


SQUAD_URL = "https://rajpurkar.github.io/SQuAD-explorer/"

# SQuAD file names inside $SQUAD_DIR, in order of preference.
TRAIN_FILE_NAMES = ("train-v1.1.json", "train-v1.1.reconstructed.json")
PREDICT_FILE_NAMES = ("dev-v1.1.json",)


@dataclasses.dataclass(frozen=True, kw_only=True)
class SquadVersion(settings.Settings):
  """The SQuAD version setting of make_records.py, train.py and export.py."""
  version_2_with_negative: bool = settings.setting(
      False,
      "SQuAD 2.0: questions with \"is_impossible\": true have no answer; training targets [CLS] "
      "for them and prediction (and an export's serve_text) answers \"\" when the null score "
      "beats the best span by more than the null-score threshold (train.py's and export.py's "
      "--null_score_diff_threshold; they also take this setting from the records / the "
      "model_dir's qa_config.json).")


@dataclasses.dataclass(frozen=True, kw_only=True)
class SquadFiles(SquadVersion):
  """The SQuAD JSON inputs (None: the defaults under $SQUAD_DIR, `default_squad_file`), and the
  version, unset (None) unless given: the records decide it for train.py."""
  version_2_with_negative: Optional[bool] = settings.variant(
      SquadVersion, "version_2_with_negative", default=None,
      help="SQuAD 2.0 (unset: as the records were made, which decide; "
      "--noversion_2_with_negative on SQuAD 2.0 records is refused): questions with "
      "\"is_impossible\": true have no answer, and prediction answers \"\" when the null score "
      "beats the best span by more than --null_score_diff_threshold.")
  train_file: Optional[str] = settings.setting(
      None, "SQuAD JSON for training. Default: $SQUAD_DIR/train-v1.1.json (or "
      "train-v1.1.reconstructed.json there).")
  predict_file: Optional[str] = settings.setting(
      None, "SQuAD JSON for evaluation (its gold answers score the predictions). Default: "
      "$SQUAD_DIR/dev-v1.1.json; in training, the file the eval records were made from "
      "(meta.json) while it exists.")


def squad_dir():
  """`$SQUAD_DIR`, or `data/squad` when it is unset."""
  return os.environ.get("SQUAD_DIR", os.path.join("data", "squad"))


def default_squad_file(names):
  """The path of the first of `names` that exists in `squad_dir()`, else of the first name."""
  for name in names:
    path = os.path.join(squad_dir(), name)
    if os.path.exists(path):
      return path
  return os.path.join(squad_dir(), names[0])


def missing_squad_file_message(flag_name, path):
  """One line saying where SQuAD is published and how to point this tool at a copy."""
  return (f"--{flag_name}: no file at {path!r}. SQuAD v1.1 is published at {SQUAD_URL} "
          f"(train-v1.1.json, dev-v1.1.json); download it and set SQUAD_DIR=<folder holding it> "
          f"or pass --{flag_name}=<path>.")


@dataclasses.dataclass
class SquadExample:
  """One question about paragraph `paragraph_index` of its file's `contexts`; `answer_text` is
  the first gold answer ("" for eval), `answer_start` its code-point offset (-1 without one)."""
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
  # reason -> where its first skipped question is ("article a paragraph p question q (id)", or
  # "row r (id)" in Hugging Face rows).
  first_skipped: Dict[str, str] = dataclasses.field(default_factory=dict)


class ContextWords:
  """The words of a context split at run_squad.py's whitespace (space, \t, \r, \n, U+202F):
  `starts`, `ends` are lists of character offsets (end exclusive)."""

  def __init__(self, context):
    self.context = context
    code_points = np.frombuffer(context.encode("utf-32-le", "surrogatepass"), np.uint32)
    space = ((code_points == 32) | (code_points == 9) | (code_points == 10) | (code_points == 13) |
             (code_points == 0x202F))
    word = ~space
    self.starts = np.flatnonzero(word & np.concatenate([[True], space[:-1]])).tolist()
    self.ends = (np.flatnonzero(word & np.concatenate([space[1:], [True]])) + 1).tolist()

  def words(self, first=0, last=None):
    """The words first..last (inclusive; default all) as str."""
    last = len(self.starts) - 1 if last is None else last
    return [self.context[self.starts[w]:self.ends[w]] for w in range(first, last + 1)]


def char_to_word_offsets(context):
  """(words, offsets): the context's words (str) and, per character, its word's index (whitespace
  maps to the word before, -1 before the first), as run_squad.py's char_to_word_offset."""
  words = ContextWords(context)
  starts = np.asarray(words.starts, np.int64)
  offsets = np.searchsorted(starts, np.arange(len(context)), side="right") - 1
  return words.words(), offsets.tolist()


_SPACE = frozenset(" \t\r\n\u202f")  # run_squad.py's is_whitespace
_WORD = re.compile("[^ \t\r\n\u202f]+")


def _answer_matches_words(answer_text, answer_start, context):
  """run_squad.py's check: the words spanned by the answer contain its whitespace-normalized text
  (found by scanning outwards from the answer, not by splitting the whole context)."""
  first = answer_start
  while first >= 0 and context[first] in _SPACE:  # whitespace: the word before it
    first -= 1
  if first < 0:  # before the first word (-1 in run_squad.py)
    return False
  while first > 0 and context[first - 1] not in _SPACE:
    first -= 1
  last = answer_start + len(answer_text) - 1
  while context[last] in _SPACE:  # >= the start word's last character, which is not whitespace
    last -= 1
  while last + 1 < len(context) and context[last + 1] not in _SPACE:
    last += 1
  actual_text = " ".join(_WORD.findall(context, first, last + 1))
  # run_squad.py splits the answer at every str.split() space; a space the context's words keep
  # (U+00A0 and other Zs characters) then never matches, so the context's split is tried too.
  cleaned = {" ".join(answer_text.split()), " ".join(_WORD.findall(answer_text))}
  return any(c and actual_text.find(c) != -1 for c in cleaned)


def _is_row(item):
  """Whether `item` looks like a Hugging Face `datasets` SQuAD row (a question with its context,
  no 'paragraphs')."""
  return isinstance(item, dict) and "context" in item and "question" in item and ("paragraphs"
                                                                                  not in item)


_ROW_KEYS = "'id', 'context', 'question', 'answers'"


def _json_lines_rows(path, text):
  """The Hugging Face SQuAD rows of JSON Lines `text`, or None when its first line is not JSON.

  Raises:
    SquadInputError: naming the line that is not JSON or not such a row (a file of one JSON value
      a line whose first line is not a row: SQuAD documents or articles a line).
  """
  rows = []
  for number, line in enumerate(text.splitlines(), 1):
    if not line.strip():
      continue
    try:
      row = json.loads(line)
    except json.JSONDecodeError as e:
      if not rows:
        return None
      raise SquadInputError(
          f"{path}: line {number} of these JSON Lines is not valid JSON (column {e.colno}: "
          f"{e.msg}); the file may be truncated, re-download or re-export it") from None
    if not _is_row(row):
      what = (f"line {number} is not a Hugging Face SQuAD row like line 1 ({_ROW_KEYS})"
              if rows else f"line {number} is not a Hugging Face SQuAD row ({_ROW_KEYS})")
      raise SquadInputError(
          f"{path}: one JSON value a line (JSON Lines), but {what}; give one SQuAD JSON document "
          f"({{\"data\": [articles]}}) or JSON Lines of such rows")
    rows.append(row)
  return rows


def _from_rows(path, rows):
  """SQuAD's nesting of Hugging Face `datasets` rows (`id`, `title`, `context`, `question`,
  `answers: {text: [...], answer_start: [...]}`, as run_qa.py reads them): consecutive rows of
  one title make an article, of one context a paragraph; a row without answers is
  `"is_impossible": true` (SQuAD 2.0's rows have no such field).

  Raises:
    SquadInputError: a row that is not such a row, or whose answer lists differ in length.
  """
  data = []
  for i, row in enumerate(rows):
    answers = row.get("answers") if isinstance(row, dict) else None
    answers = {"text": [], "answer_start": []} if answers is None else answers
    if not _is_row(row) or not isinstance(answers, dict) or not isinstance(
        answers.get("text"), list) or len(answers["text"]) != len(answers.get("answer_start", ())):
      raise SquadInputError(
          f"{path}: row {i} is not a Hugging Face SQuAD row like the first ('id', 'context', "
          f"'question', 'answers': {{'text': [...], 'answer_start': [...]}} of equal lengths)")
    title = row.get("title", "")
    if not data or data[-1]["title"] != title:
      data.append({"title": title, "paragraphs": []})
    paragraphs = data[-1]["paragraphs"]
    if not paragraphs or paragraphs[-1]["context"] != row["context"]:
      paragraphs.append({"context": row["context"], "qas": []})
    qa = {
        "id": row.get("id"),
        "question": row["question"],
        "answers": [{
            "text": t,
            "answer_start": a
        } for t, a in zip(answers["text"], answers.get("answer_start", []))]
    }
    if not qa["answers"]:
      qa["is_impossible"] = True
    paragraphs[-1]["qas"].append(qa)
  return {"data": data}


def _load(path):
  """(the parsed JSON of a SQuAD file, a dict with a `data` list; the number of Hugging Face rows
  it was grouped from, 0 for SQuAD's own layout); errors as in `load_json`."""
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
    if not e.doc.strip():
      raise SquadInputError(f"{path}: the file is empty; re-download or re-export it") from None
    rows = _json_lines_rows(path, e.doc) if e.msg == "Extra data" else None
    if rows is None:
      raise SquadInputError(
          artifacts.not_valid_json(
              path, e, "the file may be truncated, re-download or re-export it")) from None
    return _from_rows(path, rows), len(rows)  # JSON Lines (`datasets`' to_json)
  rows = dataset.get("data") if isinstance(dataset, dict) else dataset
  if isinstance(rows, list) and rows and _is_row(rows[0]):  # run_qa.py's {"data": [rows]}
    return _from_rows(path, rows), len(rows)
  if not isinstance(dataset, dict) or not isinstance(dataset.get("data"), list):
    raise SquadInputError(f"{path}: top level has no 'data' list; is this a SQuAD file?")
  return dataset, 0


_DECIMAL = re.compile(r"[0-9]+")


def _context_form(context, start, text):
  """The context's characters from `start` that equal `text` under NFC, or None."""
  target = unicodedata.normalize("NFC", text)
  # NFC and NFD forms of a text differ in length by at most a few marks per character.
  for end in range(start + 1, min(len(context), start + 4 * len(text) + 4) + 1):
    candidate = context[start:end]
    if unicodedata.normalize("NFC", candidate) == target:
      return candidate
  return None


def _normalize(data):
  """Normalizes a `data` list in place (module docstring); returns a Counter of what changed."""
  normalized = collections.Counter()
  for article in data:
    paragraphs = article.get("paragraphs") if isinstance(article, dict) else None
    for paragraph in paragraphs if isinstance(paragraphs, list) else []:
      context = paragraph.get("context") if isinstance(paragraph, dict) else None
      if isinstance(paragraph, dict) and "qas" not in paragraph:
        paragraph["qas"] = []  # the scorers read every paragraph's 'qas'; counted when read
      qas = paragraph.get("qas") if isinstance(paragraph, dict) else None
      for qa in qas if isinstance(qas, list) else []:
        if not isinstance(qa, dict):
          continue
        if type(qa.get("id")) is int:  # not bool, not float
          qa["id"] = str(qa["id"])
          normalized["id_number_as_string"] += 1
        if qa.get("is_impossible") is True and qa.get("answers"):
          # run_squad.py trains [CLS] for them; the official v2.0 scorer would read the answers and
          # score the question as answerable: both read it as unanswerable, as SQuAD 2.0's own
          # files write it (answers [], the span in plausible_answers).
          qa.setdefault("plausible_answers", qa["answers"])
          qa["answers"] = []
          normalized["unanswerable_answers_ignored"] += 1
        answers = qa.get("answers")
        for answer in answers if isinstance(answers, list) else []:
          if not isinstance(answer, dict):
            continue
          start = answer.get("answer_start")
          if isinstance(start, str) and _DECIMAL.fullmatch(start):
            answer["answer_start"] = start = int(start)
            normalized["answer_start_string_as_int"] += 1
          text = answer.get("text")
          if (isinstance(context, str) and isinstance(text, str) and text and type(start) is int and
              0 <= start < len(context) and context[start:start + len(text)] != text):
            in_context = _context_form(context, start, text)
            if in_context is not None and in_context != text:
              answer["text"] = in_context
              normalized["answer_text_in_context_form"] += 1
  return normalized


def load_dataset(path):
  """(the `data` list, Counter of what was normalized) of a SQuAD JSON file (a BOM is accepted).

  Raises:
    SquadInputError: the file is missing, not UTF-8, not (complete) JSON, or has no `data` list.
  """
  dataset, rows = _load(path)
  normalized = _normalize(dataset["data"])
  if rows:
    normalized["hugging_face_rows_grouped"] = rows
  return dataset["data"], normalized


def load_json(path):
  """The `data` list of `load_dataset` (what the scorers take, so ids match the reader's).

  Raises:
    SquadInputError: as `load_dataset`.
  """
  return load_dataset(path)[0]


def read_squad(path, is_training, max_examples=None, version_2_with_negative=False, scored=False):
  """Reads a SQuAD v1.1 or v2.0 file.

  Args:
    path: the JSON file.
    is_training: keep the first answer, and skip questions whose answer does not line up.
    max_examples: stop after this many questions (None: all).
    version_2_with_negative: keep `"is_impossible": true` questions, and training questions with
      neither answers nor that field, as unanswerable (else they are skipped, as
      unanswerable_needs_version_2 and no_answer).
    scored: the questions will be scored (an eval file): under SQuAD 1.1, whose scorer compares
      a prediction with the gold answers, a question without answers is an error.

  Returns:
    A `SquadFile`; `skipped` and `notes` count questions by reason (e.g. answer_text_mismatch,
    unanswerable_needs_version_2, first_of_several_answers), and `skipped` the paragraphs without
    a question (paragraph_without_questions); `first_skipped` says where the first question
    skipped for each reason is.

  Raises:
    SquadInputError: a structural problem, or a `scored` SQuAD 1.1 question without answers
      (naming the file, article, paragraph, question).
  """
  contexts = []
  examples = []
  skipped = collections.Counter()
  data, notes = load_dataset(path)
  seen_ids, first_skipped = {}, {}

  def skip(reason, place):
    skipped[reason] += 1
    first_skipped.setdefault(reason, place)

  # Questions of Hugging Face rows are named by their row (the grouping keeps the rows' order).
  rows = notes.get("hugging_face_rows_grouped", 0)
  row = 0

  for a, article in enumerate(data):
    for p, paragraph in enumerate(_paragraphs(path, a, article)):
      where = f"{path}: article {a} paragraph {p}"
      context, qas = _context_and_questions(where, paragraph)
      empty_context = not context.strip()
      paragraph_index = len(contexts)
      if not empty_context:
        contexts.append(context)
      if not qas:
        skipped["paragraph_without_questions"] += 1
      for q, qa in enumerate(qas):
        at = f"row {row}" if rows else f"article {a} paragraph {p} question {q}"
        row += 1
        qas_id, question, is_impossible = _question(f"{path}: {at}", qa, seen_ids)
        seen_ids[qas_id] = at
        place = f"{at} ({qas_id})"
        if not is_training:
          _check_gold_answers(f"{path}: {place}", qa, notes)
        if empty_context:
          skip("empty_context", place)
          continue
        if (is_training and version_2_with_negative and "is_impossible" not in qa and
            qa.get("answers", []) == []):
          # SQuAD 2.0 data written without the flag (as Hugging Face rows are): no answers means
          # unanswerable, as the official scorer reads it.
          is_impossible = True
          notes["no_answers_trained_as_unanswerable"] += 1
        example = SquadExample(qas_id, question, paragraph_index)
        if is_impossible and not version_2_with_negative:
          skip("unanswerable_needs_version_2", place)
          continue
        if is_impossible:
          example.is_impossible = True
          notes["unanswerable"] += 1
        elif not is_training and version_2_with_negative and not qa.get("answers"):
          # The official v2.0 scorer reads the answers, not the flag: gold "".
          notes["answerable_without_answers_scored_as_unanswerable"] += 1
        elif scored and not is_training and not qa.get("answers"):
          raise SquadInputError(
              f"{path}: {place}: no answers, and SQuAD 1.1 scores every question "
              f"against its answers; add them or remove the question (unanswerable questions: "
              f"\"is_impossible\": true, and --version_2_with_negative)")
        elif is_training:
          answer = _training_answer(f"{path}: {place}", qa, context, notes)
          if isinstance(answer, str):
            skip(answer, place)
            continue
          example.answer_text, example.answer_start = answer
        examples.append(example)
        if max_examples is not None and len(examples) >= max_examples:
          return SquadFile(path, contexts, examples, dict(skipped), dict(notes), first_skipped)
  return SquadFile(path, contexts, examples, dict(skipped), dict(notes), first_skipped)


def _paragraphs(path, a, article):
  """The `paragraphs` list of article `a`; raises SquadInputError without one."""
  paragraphs = article.get("paragraphs") if isinstance(article, dict) else None
  if not isinstance(paragraphs, list):
    title = article.get("title") if isinstance(article, dict) else None
    named = f" ({title!r})" if isinstance(title, str) else ""
    raise SquadInputError(f"{path}: article {a}{named} has no 'paragraphs' list")
  return paragraphs


def _context_and_questions(where, paragraph):
  """(context str, list of question dicts) of a paragraph; raises SquadInputError otherwise."""
  context = paragraph.get("context") if isinstance(paragraph, dict) else None
  if not isinstance(context, str):
    raise SquadInputError(f"{where}: no 'context' string")
  qas = paragraph.get("qas", [])
  if not isinstance(qas, list) or not all(isinstance(qa, dict) for qa in qas):
    raise SquadInputError(f"{where}: 'qas' must be a list of question objects")
  return context, qas


def _question(where, qa, seen_ids):
  """(id, question text, is_impossible) of question `qa` (at `where`: the file and the place);
  raises SquadInputError on a missing or duplicate id, a missing question or a non-boolean
  is_impossible."""
  qas_id, question = qa.get("id"), qa.get("question")
  if not isinstance(qas_id, str) or not isinstance(question, str):
    raise SquadInputError(f"{where}: needs string 'id' and 'question' (an "
                          f"integer id is read as its decimal string)")
  if qas_id in seen_ids:
    raise SquadInputError(f"{where}: duplicate id {qas_id!r} (first at "
                          f"{seen_ids[qas_id]}); question ids must be unique")
  is_impossible = qa.get("is_impossible", False)
  if not isinstance(is_impossible, bool):
    raise SquadInputError(f"{where} ({qas_id}): 'is_impossible' must be true or "
                          f"false (JSON booleans), got {is_impossible!r:.50}")
  return qas_id, question, is_impossible


def _answers(where, qa, why):
  """The `answers` list of question `qa` ([] without one); raises SquadInputError naming `where`
  and `why` a list is needed when it is not a list."""
  answers = qa.get("answers", [])
  if not isinstance(answers, list):
    raise SquadInputError(
        f"{where}: 'answers' must be a list of {{\"text\": string, \"answer_start\": integer}} "
        f"objects ({why}), got {answers!r:.200}")
  return answers


def _check_gold_answers(where, qa, notes):
  """Raises SquadInputError unless question `qa` of an eval file has its `answers` (if any) as the
  scorers read them, a list of objects with a string 'text'; counts a question whose every answer
  text is blank (`blank_answers_scored_as_empty`: only "" matches them)."""
  answers = _answers(where, qa, "the scorer compares the prediction with each 'text'")
  for i, answer in enumerate(answers):
    if not isinstance(answer, dict) or not isinstance(answer.get("text"), str):
      raise SquadInputError(
          f"{where}: answer {i} must be an object with a string 'text' (the scorer compares the "
          f"prediction with each answer's), got {answer!r:.200}")
  if answers and not any(answer["text"].strip() for answer in answers):
    notes["blank_answers_scored_as_empty"] += 1


def _training_answer(where, qa, context, notes):
  """(text, start) of a training question's first answer, or the reason (str) it is skipped for;
  raises SquadInputError on a malformed answer."""
  answers = _answers(where, qa, "[] for none")
  if not answers:
    return "no_answer"
  if len(answers) > 1:
    notes["first_of_several_answers"] += 1
  answer_text = answers[0].get("text") if isinstance(answers[0], dict) else None
  answer_start = answers[0].get("answer_start") if isinstance(answers[0], dict) else None
  if not isinstance(answer_text, str) or type(answer_start) is not int:
    raise SquadInputError(f"{where}: first answer needs a string "
                          f"'text' and an integer 'answer_start' (or its decimal string), "
                          f"got {answers[0]!r:.200}")
  if not answer_text.strip():
    return "answer_empty"
  if answer_start < 0 or answer_start + len(answer_text) > len(context):
    return "answer_start_out_of_range"
  if not _answer_matches_words(answer_text, answer_start, context):
    return "answer_text_mismatch"
  if context[answer_start:answer_start + len(answer_text)] != answer_text:
    # Kept, as run_squad.py keeps it: its words hold the text, so the span is the text's tokens
    # inside them. Many such offsets point into the wrong unit (UTF-8 bytes, UTF-16 code units).
    notes["answer_start_not_at_text"] += 1
  return answer_text, answer_start
