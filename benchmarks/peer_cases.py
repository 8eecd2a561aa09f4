"""The serving benchmarks' inputs, chosen from a SQuAD file as the peer's serving script
(../shared/peer/bench_serve.py `pick_cases`) chooses them, so that ours and the peer answer the same
questions: one question on a ~100-character context (the first dev sentence of 90-110 characters
holding its answer), on the dev paragraph closest to 1,000 characters, and on consecutive dev
paragraphs joined up to >= 10,000 characters; and BATCH questions on the BATCH dev paragraphs
closest to 1,000 characters.
"""

import json
import os
import re

from squad_qa import errors

CASES = ("ctx~100", "ctx~1000", "ctx~10000")
BATCH = 32


def pick_cases(predict_file):
  """The peer's inputs: {case: (question, context)}, and 32 questions and their contexts.

  As ../shared/peer/bench_serve.py `pick_cases` chooses them from the SQuAD file (unique paragraphs
  in file order with their first question; first gold answers).

  Raises:
    errors.MissingFileError: no file at predict_file.
  """
  if not os.path.exists(predict_file):
    raise errors.MissingFileError(
        f"{predict_file}: not found; set SQUAD_DIR or pass --predict_file")
  with open(predict_file, encoding="utf-8") as f:
    articles = json.load(f)["data"]
  examples = [(qa["question"], paragraph["context"], qa["answers"][0]["answer_start"],
               qa["answers"][0]["text"])
              for article in articles for paragraph in article["paragraphs"]
              for qa in paragraph["qas"]]
  paragraphs, seen = [], set()
  for example in examples:
    if example[1] not in seen:
      seen.add(example[1])
      paragraphs.append(example)
  mid = min(paragraphs, key=lambda e: abs(len(e[1]) - 1000))
  short = None
  for question, context, answer_start, answer in examples:
    pos = 0
    for sentence in re.split(r"(?<=[.!?])\s+", context):
      start = context.find(sentence, pos)
      pos = start + len(sentence)
      if (90 <= len(sentence) <= 110 and start <= answer_start < start + len(sentence)
          and answer in sentence):
        short = (question, sentence)
        break
    if short:
      break
  first = next(i for i, e in enumerate(paragraphs) if len(e[1]) >= 600)
  parts, total = [], 0
  for example in paragraphs[first:]:
    parts.append(example[1])
    total += len(example[1]) + 1
    if total >= 10000:
      break
  cases = {"ctx~100": short, "ctx~1000": mid[:2],
           "ctx~10000": (paragraphs[first][0], " ".join(parts))}
  batch = sorted(paragraphs, key=lambda e: abs(len(e[1]) - 1000))[:BATCH]
  return cases, [e[0] for e in batch], [e[1] for e in batch]


