"""Featurizes SQuAD questions into TFRecord shards under temporary names, in forked workers.

Each worker takes a contiguous group of shards; they exchange only each group's feature count, so
`unique_ids` run on across shards and the shards are the same whatever the number of workers.
"""

import collections
import dataclasses
import glob
import multiprocessing
import os
import re
import signal
import time
import traceback
from typing import Dict, Optional, Tuple

from absl import logging
import numpy as np
import tensorflow as tf

from squad_qa import errors
from squad_qa.base.wording import counted
from squad_qa.preprocess import answer_spans
from squad_qa.preprocess import features as features_lib
from squad_qa.preprocess import record_serialization
from squad_qa.preprocess import records
from squad_qa.preprocess import wordpiece

FIRST_UNIQUE_ID = 1000000000  # as in run_squad.py / squad_lib.py
_ROWS_PER_CHUNK = 2048  # features built and serialized at once (bounds memory)
_TEMP_NAME = re.compile(r"^\..+\.tmp-(\d+)$")


@dataclasses.dataclass
class SplitResult:
  """What one group of shards of one split produced."""
  num_examples: int = 0
  num_features: int = 0
  skipped: collections.Counter = dataclasses.field(default_factory=collections.Counter)
  notes: collections.Counter = dataclasses.field(default_factory=collections.Counter)
  # features.safe_doc_stride of the training answers (None: no answer).
  safe_doc_stride: Optional[int] = None
  num_answers: int = 0  # training answers that were tokenized (in a window or not)
  # reason -> (index in the split, id) of the first question featurizing skipped for it.
  first_skipped: Dict[str, Tuple[int, str]] = dataclasses.field(default_factory=dict)

  def skip(self, reason, skipped, examples, begin):
    """Counts the questions `examples[i]` for i in `skipped` (increasing int positions) under
    `reason`, and keeps the first one's place (`begin`: the examples' first index in their
    split)."""
    self.skipped[reason] += len(skipped)
    if len(skipped) and reason not in self.first_skipped:
      self.first_skipped[reason] = (begin + int(skipped[0]), examples[skipped[0]].qas_id)

  def add(self, other):
    """Adds another group's result to this one."""
    self.num_examples += other.num_examples
    self.num_features += other.num_features
    self.skipped.update(other.skipped)
    for reason, first in other.first_skipped.items():
      self.first_skipped[reason] = min(first, self.first_skipped.get(reason, first))
    self.notes.update(other.notes)
    self.num_answers += other.num_answers
    strides = [s for s in (self.safe_doc_stride, other.safe_doc_stride) if s is not None]
    self.safe_doc_stride = min(strides) if strides else None


class WorkerError(errors.UserError):
  """A worker process failed; the message is its error (the trace is in the log)."""


def shard_of_questions(num_questions, num_shards):
  """int64 [num_shards + 1]: shard k holds questions boundaries[k]..boundaries[k+1]-1."""
  k = np.arange(num_shards + 1, dtype=np.int64)
  return -(-k * num_questions // num_shards)  # ceil(k * N / S)


def temp_path(output_dir, name, job_pid):
  """Temporary path of a shard while it is written: `.<name>.tmp-<job_pid>` (the parent's pid)."""
  return os.path.join(output_dir, f".{name}.tmp-{job_pid}")


def remove_stale_temp_files(output_dir):
  """Removes temporary shards of dead processes, and this process's own."""
  for path in glob.glob(os.path.join(output_dir, ".*.tmp-*")):
    match = _TEMP_NAME.match(os.path.basename(path))
    if not match:
      continue
    pid = int(match.group(1))
    try:
      os.kill(pid, 0)
      alive = pid != os.getpid()
    except ProcessLookupError:
      alive = False
    except PermissionError:
      alive = True
    if not alive:
      os.remove(path)


class _PreparedSplit:
  """Tokens and windows of one split's questions begin..end-1."""

  def __init__(self, squad, split, tokenizer, settings, begin, end):
    self.split, self.begin, self.end = split, begin, end
    self.result = SplitResult()
    is_training = split == records.TRAIN_SPLIT
    examples = squad.examples[begin:end]
    started = time.time()
    if not examples:
      self.plan = features_lib.plan_windows([], [], settings.max_seq_length, settings.doc_stride)
      self.kept = np.zeros(0, np.int64)
      return
    first_paragraph = examples[0].paragraph_index
    paragraphs = squad.contexts[first_paragraph:examples[-1].paragraph_index + 1]
    paragraph = np.array([e.paragraph_index - first_paragraph for e in examples], np.int64)
    self.context = tokenizer.tokenize_ragged(paragraphs)
    query = tokenizer.tokenize_ragged([e.question_text for e in examples])
    query_lengths = query.lengths()
    truncated = query_lengths > settings.max_query_length
    self.result.notes["question_truncated"] += int(truncated.sum())
    query_lengths = np.minimum(query_lengths, settings.max_query_length)
    kept = query_lengths > 0  # an empty question asks nothing
    self.result.skip("question_has_no_tokens", np.flatnonzero(~kept), examples, begin)
    spans = None
    if is_training:
      answers = tokenizer.tokenize_ragged([e.answer_text for e in examples])
      starts = np.array([-1 if e.is_impossible else e.answer_start for e in examples], np.int64)
      lengths = np.array([len(e.answer_text) for e in examples], np.int64)
      spans = answer_spans.answer_token_spans(paragraphs, self.context, paragraph, starts, lengths,
                                              answers)
      no_tokens = kept & (starts >= 0) & (spans[:, 0] < 0)
      self.result.skip("answer_has_no_tokens", np.flatnonzero(no_tokens), examples, begin)
      kept &= ~no_tokens
    context_lengths = self.context.lengths()[paragraph]
    no_context_tokens = kept & (context_lengths == 0)
    self.result.skip("context_has_no_tokens", np.flatnonzero(no_context_tokens), examples, begin)
    kept &= ~no_context_tokens
    self.kept = np.flatnonzero(kept)
    self._plan(query, query_lengths, paragraph, spans, context_lengths, settings)
    if spans is not None:
      self._skip_answers_in_no_window(query, query_lengths, paragraph, spans, context_lengths,
                                      settings, examples)
    self.result.num_examples = len(self.kept)
    self.result.num_features = len(self.plan)
    logging.info("%s questions %d..%d: %s and %s tokenized, %s, in %.1f s", split, begin, end - 1,
                 counted(len(paragraphs), "paragraph"), counted(len(examples), "question"),
                 counted(len(self.plan), "window"),
                 time.time() - started)

  def _plan(self, query, query_lengths, paragraph, spans, context_lengths, settings):
    """The questions and windows of the `kept` questions."""
    self.questions = features_lib.Questions(
        ids=query.ids, starts=query.row_splits[self.kept], lengths=query_lengths[self.kept],
        paragraph=paragraph[self.kept], answer_spans=None if spans is None else spans[self.kept])
    self.plan = features_lib.plan_windows(context_lengths[self.kept], self.questions.lengths,
                                          settings.max_seq_length, settings.doc_stride)

  def _skip_answers_in_no_window(self, query, query_lengths, paragraph, spans, context_lengths,
                                 settings, examples):
    """Skips the training answers no window holds whole (a feature labelled [CLS] for an answer
    the context has is wrong): longer than their window, or across window boundaries."""
    kept_spans = spans[self.kept]
    answered = kept_spans[:, 0] >= 0
    window_tokens = settings.max_seq_length - 3 - query_lengths[self.kept]
    answer_tokens = kept_spans[:, 1] - kept_spans[:, 0] + 1
    self.result.num_answers = int(answered.sum())
    self.result.safe_doc_stride = features_lib.safe_doc_stride(window_tokens[answered],
                                                               answer_tokens[answered])
    in_no_window = answered & ~features_lib.answers_in_windows(self.plan, kept_spans)
    too_long = in_no_window & (answer_tokens > window_tokens)
    self.result.skip("answer_longer_than_window", self.kept[too_long], examples, self.begin)
    self.result.skip("answer_in_no_window", self.kept[in_no_window & ~too_long], examples,
                     self.begin)
    if in_no_window.any():
      self.kept = self.kept[~in_no_window]
      self._plan(query, query_lengths, paragraph, spans, context_lengths, settings)

  def write(self, tokenizer, settings, shard_begin, shard_end, boundaries, first_unique_id,
            output_dir, job_pid):
    """Builds, serializes and writes shards shard_begin..shard_end-1 under temporary names."""
    started = time.time()
    # Question index (within this group) where each shard starts, among kept questions.
    shard_questions = np.searchsorted(self.kept, boundaries[shard_begin:shard_end + 1] - self.begin)
    shard_rows = np.searchsorted(self.plan.question, shard_questions)
    with_offsets = self.split == records.EVAL_SPLIT
    for k, shard in enumerate(range(shard_begin, shard_end)):
      name = records.shard_name(self.split, shard, settings.num_shards)
      path = temp_path(output_dir, name, job_pid)
      with tf.io.TFRecordWriter(path) as writer:
        for row in range(shard_rows[k], shard_rows[k + 1], _ROWS_PER_CHUNK):
          chunk = self.plan.rows(row, min(row + _ROWS_PER_CHUNK, shard_rows[k + 1]))
          arrays = features_lib.build_features(chunk, self.questions, self.context,
                                               tokenizer.cls_id, tokenizer.sep_id,
                                               settings.max_seq_length, with_offsets=with_offsets)
          # example_index: the question's index in the file (as read), not within this group.
          arrays.example_index = self.kept[arrays.example_index] + self.begin
          unique_ids = first_unique_id + np.arange(row, row + len(chunk), dtype=np.int64)
          for record in record_serialization.serialize_features(arrays, unique_ids, self.split):
            writer.write(record)
    if shard_end > shard_begin and len(self.plan):
      elapsed = time.time() - started
      logging.info("%s shards %d..%d: %s written in %.1f s (%.0f windows/s)", self.split,
                   shard_begin, shard_end - 1, counted(len(self.plan), "window"), elapsed,
                   len(self.plan) / max(elapsed, 1e-9))


def _shard_groups(num_shards, num_workers):
  return [(w * num_shards // num_workers, (w + 1) * num_shards // num_workers)
          for w in range(num_workers)]


def _run_group(worker, num_workers, splits, settings, output_dir, job_pid, exchange):
  """{split: SplitResult} of one worker's shard groups; `exchange(split, num_features)` gives the
  group's first unique id."""
  tokenizer = wordpiece.WordPieceTokenizer(settings.vocab_file, settings.do_lower_case)
  results = {}
  for split, squad in splits:
    boundaries = shard_of_questions(len(squad.examples), settings.num_shards)
    shard_begin, shard_end = _shard_groups(settings.num_shards, num_workers)[worker]
    prepared = _PreparedSplit(squad, split, tokenizer, settings, int(boundaries[shard_begin]),
                              int(boundaries[shard_end]))
    first_unique_id = exchange(split, prepared.result.num_features)
    prepared.write(tokenizer, settings, shard_begin, shard_end, boundaries, first_unique_id,
                   output_dir, job_pid)
    results[split] = prepared.result
  return results


def _worker_main(worker, num_workers, splits, settings, output_dir, job_pid, connection):
  """Entry point of a forked worker: runs its group, reporting through `connection`."""
  # Ctrl-C reaches the whole process group: the parent stops the workers and says so in one line.
  signal.signal(signal.SIGINT, signal.SIG_IGN)
  # A worker stopped by the parent ends at once (its forked copy of the command's handler would
  # raise in the worker instead).
  signal.signal(signal.SIGTERM, signal.SIG_DFL)

  def exchange(split, num_features):
    connection.send(("count", split, num_features))
    return connection.recv()

  try:
    results = _run_group(worker, num_workers, splits, settings, output_dir, job_pid, exchange)
    connection.send(("done", results))
  except BaseException as e:  # reported by the parent as one line; the trace goes to the log
    logging.error("worker %d failed:\n%s", worker, traceback.format_exc())
    connection.send(("error", f"{type(e).__name__}: {e}"))


def featurize(splits, settings, output_dir, num_workers):
  """Writes the shards of every split under temporary names (`temp_path` with this process's pid).

  Args:
    splits: list of (split name, squad_reader.SquadFile).
    settings: a RecordsConfig.
    output_dir: where the temporary shards go.
    num_workers: processes; 1 runs in this process, more fork it (before TensorFlow has run: a
      forked running runtime is not safe).

  Returns:
    {split: SplitResult} summed over the workers.

  Raises:
    WorkerError: a worker process failed.
  """
  job_pid = os.getpid()
  num_workers = max(1, min(num_workers, settings.num_shards))
  totals = {split: SplitResult() for split, _ in splits}
  if num_workers == 1:
    next_id = {}

    def exchange(split, num_features):
      del num_features
      return next_id.setdefault(split, FIRST_UNIQUE_ID)

    partials = [_run_group(0, 1, splits, settings, output_dir, job_pid, exchange)]
  else:
    context = multiprocessing.get_context("fork")
    workers = []
    for w in range(num_workers):
      parent_end, child_end = context.Pipe()
      process = context.Process(
          target=_worker_main, daemon=True,
          args=(w, num_workers, splits, settings, output_dir, job_pid, child_end))
      process.start()
      workers.append((process, parent_end))
    try:
      partials = _coordinate(workers, splits)
    finally:
      for process, _ in workers:
        if process.is_alive():
          process.terminate()
        process.join()
  for partial in partials:
    for split, result in partial.items():
      totals[split].add(result)
  return totals


def _receive(process, connection):
  try:
    message = connection.recv()
  except EOFError:
    raise WorkerError(f"a worker process died (exit code {process.exitcode}); see the log "
                      f"above") from None
  if message[0] == "error":
    raise WorkerError(message[1].splitlines()[0])  # "<type>: <message>", never empty
  return message


def _coordinate(workers, splits):
  """Parent side: per split, collects each group's feature count and hands out first unique ids."""
  for _split, _ in splits:
    counts = [_receive(*worker)[2] for worker in workers]
    first = FIRST_UNIQUE_ID
    for (_, connection), count in zip(workers, counts):
      connection.send(first)
      first += count
  return [_receive(*worker)[1] for worker in workers]
