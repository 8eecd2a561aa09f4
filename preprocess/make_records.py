r"""SQuAD JSON -> sharded TFRecords of windowed WordPiece features, plus meta.json.

  python preprocess/make_records.py --vocab_file=vocab.txt --max_seq_length=384 \
      --output_dir=records [--train_file=...] [--predict_file=...] [--version_2_with_negative]

Without --train_file/--predict_file both splits are made from $SQUAD_DIR (default data/squad). The
features are those of google-research/bert run_squad.py / tf-models-official squad_lib.py (see
preprocess/features.py and tools/compare_with_reference.py).

How it is fast: the JSON is read once; then --num_workers processes (forked, so TensorFlow is imported
once) each take a contiguous group of shards, tokenize their paragraphs and questions in batches
(preprocess/wordpiece.py), plan and build all windows with NumPy and serialize them with NumPy. The
only exchange between them is each group's feature count, so that `unique_ids` run on across shards.

How it is safe: every shard is written under a temporary name (`.<shard>.tmp-<pid>`); only when all are
complete is the old meta.json removed, the old shards removed, the new ones renamed into place and the
new meta.json written (atomically). Killed at any moment, the output directory holds either the
previous complete output or no meta.json (no usable output), never a half-written shard under a shard's
name. The same inputs and flags give byte-identical shards, whatever --num_workers.

Bad input: a structural problem in the JSON exits non-zero with one line naming the file, the
article/paragraph/question and what is wrong; questions that cannot be used are skipped, logged and
counted by reason in meta.json (`skipped`), and kept questions worth knowing about are counted under
`notes` (see preprocess/squad_reader.py).
"""

import collections
import dataclasses
import glob
import json
import multiprocessing
import os
import re
import resource
import sys
import time
import traceback

from absl import flags  # pylint: disable=g-import-not-at-top
from absl import logging
import numpy as np
import tensorflow as tf

from squad_qa.flags import command_line
from squad_qa.flags import definitions
from squad_qa.preprocess import features as features_lib
from squad_qa.preprocess import records
from squad_qa.preprocess import squad_reader
from squad_qa.preprocess import wordpiece

definitions.define_squad_file_flags()
definitions.define_tokenizer_flags()
definitions.define_featurization_flags()
FLAGS = flags.FLAGS

FIRST_UNIQUE_ID = 1000000000  # as in run_squad.py / squad_lib.py
_ROWS_PER_CHUNK = 2048  # features built and serialized at once (bounds memory: ~10 MB per chunk)
_TEMP_NAME = re.compile(r"^\..+\.tmp-(\d+)$")


@dataclasses.dataclass
class Settings:
  """What shapes the features (the featurization flags)."""
  vocab_file: str
  do_lower_case: bool
  max_seq_length: int
  doc_stride: int
  max_query_length: int
  num_shards: int
  version_2_with_negative: bool = False


@dataclasses.dataclass
class SplitResult:
  """What one group of shards of one split produced."""
  num_examples: int = 0
  num_features: int = 0
  skipped: collections.Counter = dataclasses.field(default_factory=collections.Counter)
  notes: collections.Counter = dataclasses.field(default_factory=collections.Counter)


def shard_of_questions(num_questions, num_shards):
  """First question of each shard: question i goes to shard i * num_shards // num_questions.

  Returns:
    int64 [num_shards + 1] boundaries (questions of shard k are boundaries[k]..boundaries[k+1]-1).
  """
  k = np.arange(num_shards + 1, dtype=np.int64)
  return -(-k * num_questions // num_shards)  # ceil(k * N / S)


_RUN_PID = os.getpid()  # the job's (parent's) pid, set by make_records; workers inherit it


def temp_path(output_dir, name):
  """Temporary name of a shard while it is written: `.<name>.tmp-<pid of the job>`."""
  return os.path.join(output_dir, f".{name}.tmp-{_RUN_PID}")


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
    self.query = tokenizer.tokenize_ragged([e.question_text for e in examples])
    query_lengths = self.query.lengths()
    self.result.notes["question_truncated"] += int((query_lengths > settings.max_query_length).sum())
    query_lengths = np.minimum(query_lengths, settings.max_query_length)
    kept = np.ones(len(examples), bool)
    self.answer_spans = None
    if is_training:
      answers = tokenizer.tokenize_ragged([e.answer_text for e in examples])
      starts = np.array([-1 if e.is_impossible else e.answer_start for e in examples], np.int64)
      lengths = np.array([len(e.answer_text) for e in examples], np.int64)
      self.answer_spans = features_lib.answer_token_spans(paragraphs, self.context, paragraph,
                                                          starts, lengths, answers)
      no_tokens = (starts >= 0) & (self.answer_spans[:, 0] < 0)
      self.result.skipped["answer_has_no_tokens"] += int(no_tokens.sum())
      kept &= ~no_tokens
    context_lengths = self.context.lengths()[paragraph]
    no_context_tokens = kept & (context_lengths == 0)
    self.result.skipped["context_has_no_tokens"] += int(no_context_tokens.sum())
    kept &= ~no_context_tokens
    self.kept = np.flatnonzero(kept)
    self.paragraph = paragraph[self.kept]
    self.query_lengths = query_lengths[self.kept]
    self.query_splits = self.query.row_splits[self.kept]
    if self.answer_spans is not None:
      self.answer_spans = self.answer_spans[self.kept]
    self.plan = features_lib.plan_windows(context_lengths[self.kept], self.query_lengths,
                                          settings.max_seq_length, settings.doc_stride)
    self.result.num_examples = len(self.kept)
    self.result.num_features = len(self.plan)
    logging.info("%s questions %d..%d: %d paragraphs and %d questions tokenized, %d windows, in "
                 "%.1f s", split, begin, end - 1, len(paragraphs), len(examples), len(self.plan),
                 time.time() - started)

  def write(self, tokenizer, settings, shard_begin, shard_end, boundaries, first_unique_id,
            output_dir):
    """Builds, serializes and writes shards shard_begin..shard_end-1 under temporary names."""
    started = time.time()
    # Question index (within this group) where each shard starts, among kept questions.
    shard_questions = np.searchsorted(self.kept, boundaries[shard_begin:shard_end + 1] - self.begin)
    shard_rows = np.searchsorted(self.plan.question, shard_questions)
    with_offsets = self.split == records.EVAL_SPLIT
    for k, shard in enumerate(range(shard_begin, shard_end)):
      name = records.shard_name(self.split, shard, settings.num_shards)
      path = temp_path(output_dir, name)
      with tf.io.TFRecordWriter(path) as writer:
        for row in range(shard_rows[k], shard_rows[k + 1], _ROWS_PER_CHUNK):
          chunk = self.plan.rows(row, min(row + _ROWS_PER_CHUNK, shard_rows[k + 1]))
          arrays = features_lib.build_features(
              chunk, self.query.ids, self.query_splits, self.query_lengths, self.context.ids,
              self.context.start_chars, self.context.end_chars, self.context.row_splits,
              self.paragraph, tokenizer.cls_id, tokenizer.sep_id, settings.max_seq_length,
              answer_spans=self.answer_spans, with_offsets=with_offsets)
          # example_index: the question's index in the file (as read), not within this group.
          arrays.example_index = self.kept[arrays.example_index] + self.begin
          unique_ids = first_unique_id + np.arange(row, row + len(chunk), dtype=np.int64)
          for record in records.serialize_features(arrays, unique_ids, self.split):
            writer.write(record)
    if shard_end > shard_begin:
      elapsed = time.time() - started
      logging.info("%s shards %d..%d: %d features written in %.1f s (%.0f features/s)", self.split,
                   shard_begin, shard_end - 1, len(self.plan), elapsed,
                   len(self.plan) / max(elapsed, 1e-9))


def _shard_groups(num_shards, num_workers):
  return [(w * num_shards // num_workers, (w + 1) * num_shards // num_workers)
          for w in range(num_workers)]


def _run_group(worker, num_workers, splits, settings, output_dir, exchange):
  """One worker's job: for each split, prepare its shard group, learn its first unique id, write.

  Args:
    exchange: callable(split, num_features) -> first unique id of this group's features.

  Returns:
    {split: SplitResult}.
  """
  tokenizer = wordpiece.WordPieceTokenizer(settings.vocab_file, settings.do_lower_case)
  results = {}
  for split, squad in splits:
    boundaries = shard_of_questions(len(squad.examples), settings.num_shards)
    shard_begin, shard_end = _shard_groups(settings.num_shards, num_workers)[worker]
    prepared = _PreparedSplit(squad, split, tokenizer, settings, int(boundaries[shard_begin]),
                              int(boundaries[shard_end]))
    first_unique_id = exchange(split, prepared.result.num_features)
    prepared.write(tokenizer, settings, shard_begin, shard_end, boundaries, first_unique_id,
                   output_dir)
    results[split] = prepared.result
  return results


def _worker_main(worker, num_workers, splits, settings, output_dir, connection):
  """Entry point of a forked worker: runs its group, reporting through `connection`."""
  def exchange(split, num_features):
    connection.send(("count", split, num_features))
    return connection.recv()
  try:
    results = _run_group(worker, num_workers, splits, settings, output_dir, exchange)
    connection.send(("done", results))
  except BaseException as e:  # reported by the parent as one line; the trace goes to the log
    logging.error("worker %d failed:\n%s", worker, traceback.format_exc())
    connection.send(("error", f"{type(e).__name__}: {e}"))


class WorkerError(RuntimeError):
  """A worker process failed; the message is its one-line error."""


def featurize(splits, settings, output_dir, num_workers):
  """Writes the shards of every split under temporary names.

  Args:
    splits: list of (split name, squad_reader.SquadFile).
    settings: Settings.
    output_dir: where the temporary shards go.
    num_workers: processes; 1 runs in this process.

  Returns:
    {split: SplitResult} summed over the workers.

  Raises:
    WorkerError: a worker failed.
  """
  num_workers = max(1, min(num_workers, settings.num_shards))
  totals = {split: SplitResult() for split, _ in splits}
  if num_workers == 1:
    next_id = {}
    def exchange(split, num_features):
      del num_features
      return next_id.setdefault(split, FIRST_UNIQUE_ID)
    partials = [_run_group(0, 1, splits, settings, output_dir, exchange)]
  else:
    context = multiprocessing.get_context("fork")
    workers = []
    for w in range(num_workers):
      parent_end, child_end = context.Pipe()
      process = context.Process(target=_worker_main, daemon=True,
                                args=(w, num_workers, splits, settings, output_dir, child_end))
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
      totals[split].num_examples += result.num_examples
      totals[split].num_features += result.num_features
      totals[split].skipped.update(result.skipped)
      totals[split].notes.update(result.notes)
  return totals


def _receive(process, connection):
  try:
    message = connection.recv()
  except EOFError:
    raise WorkerError(f"a worker process died (exit code {process.exitcode}); see the log "
                      f"above") from None
  if message[0] == "error":
    raise WorkerError(message[1])
  return message


def _coordinate(workers, splits):
  """Parent side: per split, collects each group's feature count and hands out first unique ids."""
  for split, _ in splits:
    counts = [_receive(*worker)[2] for worker in workers]
    first = FIRST_UNIQUE_ID
    for (_, connection), count in zip(workers, counts):
      connection.send(first)
      first += count
  return [_receive(*worker)[1] for worker in workers]


def _remove_stale_temp_files(output_dir):
  """Removes temporary shards left by runs that were killed (their process no longer exists)."""
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


def _commit(output_dir, new_shards, meta):
  """Replaces the previous output by the new one (see the module docstring for the order)."""
  meta_path = os.path.join(output_dir, records.META_FILE)
  old_shards = []
  if tf.io.gfile.exists(meta_path):
    try:
      with tf.io.gfile.GFile(meta_path, "r") as f:
        old_meta = json.load(f)
      old_shards = [n for info in old_meta.get("splits", {}).values() for n in info.get("shards", [])]
    except (ValueError, KeyError, AttributeError, TypeError):
      pass
    tf.io.gfile.remove(meta_path)
  for name in old_shards:
    if name not in new_shards and os.path.basename(name) == name:
      path = os.path.join(output_dir, name)
      if tf.io.gfile.exists(path):
        tf.io.gfile.remove(path)
  for name in new_shards:
    tf.io.gfile.rename(temp_path(output_dir, name), os.path.join(output_dir, name), overwrite=True)
  with tf.io.gfile.GFile(meta_path + ".tmp", "w") as f:
    json.dump(meta, f, indent=2)
  tf.io.gfile.rename(meta_path + ".tmp", meta_path, overwrite=True)


def _resolve_inputs():
  """Which splits to make and from which files; one-line error when a file is missing."""
  explicit = {records.TRAIN_SPLIT: FLAGS.train_file, records.EVAL_SPLIT: FLAGS.predict_file}
  if not any(explicit.values()):
    explicit = {
        records.TRAIN_SPLIT: definitions.default_squad_file(definitions.TRAIN_FILE_NAMES),
        records.EVAL_SPLIT: definitions.default_squad_file(definitions.PREDICT_FILE_NAMES)}
  inputs = {}
  for split, path in explicit.items():
    if not path:
      continue
    flag = "train_file" if split == records.TRAIN_SPLIT else "predict_file"
    if not os.path.exists(path):
      raise squad_reader.SquadInputError(definitions.missing_squad_file_message(flag, path))
    inputs[split] = path
  return inputs


def settings_from_flags():
  """Settings from FLAGS; one-line error for impossible values."""
  if not FLAGS.vocab_file:
    raise squad_reader.SquadInputError(
        "--vocab_file is required (the encoder's vocab.txt, e.g. beside its checkpoint)")
  if not os.path.exists(FLAGS.vocab_file):
    raise squad_reader.SquadInputError(f"--vocab_file={FLAGS.vocab_file}: no such file")
  if FLAGS.doc_stride <= 0 or FLAGS.max_query_length <= 0 or FLAGS.num_shards <= 0 or (
      FLAGS.max_seq_length <= FLAGS.max_query_length + 3):
    raise squad_reader.SquadInputError(
        f"need doc_stride > 0, max_query_length > 0, num_shards > 0 and max_seq_length > "
        f"max_query_length + 3 (got doc_stride={FLAGS.doc_stride}, max_query_length="
        f"{FLAGS.max_query_length}, num_shards={FLAGS.num_shards}, max_seq_length="
        f"{FLAGS.max_seq_length})")
  return Settings(FLAGS.vocab_file, FLAGS.do_lower_case, FLAGS.max_seq_length, FLAGS.doc_stride,
                  FLAGS.max_query_length, FLAGS.num_shards, FLAGS.version_2_with_negative)


def make_records(inputs, settings, output_dir, num_workers=1):
  """The whole job: read, featurize, write shards, commit, write meta.json.

  Args:
    inputs: {split: path of the SQuAD JSON}.
    settings: Settings.
    output_dir: the records directory.
    num_workers: processes writing shards (1: this process). More than 1 forks this process:
      do that before TensorFlow has run anything here (as the command line does), since a forked
      copy of a running TensorFlow runtime is not safe.

  Returns:
    The meta dict written to meta.json.

  Raises:
    SquadInputError: bad input (one line); nothing is written.
    WorkerError: a worker failed; nothing is written.
  """
  global _RUN_PID
  _RUN_PID = os.getpid()
  started = time.time()
  started_cpu = _cpu_seconds()
  splits = []
  for split, path in inputs.items():
    squad = squad_reader.read_squad(path, is_training=split == records.TRAIN_SPLIT,
                                    version_2_with_negative=settings.version_2_with_negative)
    if not squad.examples:
      reasons = ", ".join(f"{k}: {v}" for k, v in sorted(squad.skipped.items())) or "no questions"
      raise squad_reader.SquadInputError(f"{path}: no usable {split} questions ({reasons})")
    if (not settings.version_2_with_negative and
        squad.skipped.get("unanswerable_needs_version_2")):
      logging.warning("%s: %d questions are marked is_impossible (SQuAD 2.0); they are skipped "
                      "unless --version_2_with_negative is given", path,
                      squad.skipped["unanswerable_needs_version_2"])
    splits.append((split, squad))
  logging.info("read %s in %.1f s", ", ".join(f"{s}: {len(q.examples)} questions" for s, q in splits),
               time.time() - started)
  os.makedirs(output_dir, exist_ok=True)
  _remove_stale_temp_files(output_dir)
  new_shards = [records.shard_name(split, i, settings.num_shards)
                for split, _ in splits for i in range(settings.num_shards)]
  try:
    totals = featurize(splits, settings, output_dir, num_workers)
  except BaseException:
    for name in new_shards:
      if os.path.exists(temp_path(output_dir, name)):
        os.remove(temp_path(output_dir, name))
    raise
  meta = {
      "format_version": records.FORMAT_VERSION,
      "flags": dataclasses.asdict(settings),
      "vocab_sha256": wordpiece.file_sha256(settings.vocab_file),
      "splits": {},
  }
  for split, squad in splits:
    total = totals[split]
    skipped = collections.Counter(squad.skipped)
    skipped.update(total.skipped)
    notes = collections.Counter(squad.notes)
    notes.update(total.notes)
    meta["splits"][split] = {
        "input_file": os.path.abspath(squad.path),
        "input_sha256": wordpiece.file_sha256(squad.path),
        "num_examples": total.num_examples,
        "num_features": total.num_features,
        "skipped": {k: v for k, v in sorted(skipped.items()) if v},
        "notes": {k: v for k, v in sorted(notes.items()) if v},
        "shards": [records.shard_name(split, i, settings.num_shards)
                   for i in range(settings.num_shards)],
    }
    if meta["splits"][split]["skipped"]:
      logging.warning("%s: skipped questions by reason: %s", split, meta["splits"][split]["skipped"])
    if meta["splits"][split]["notes"]:
      logging.info("%s: notes (kept questions, normalized input): %s", split,
                   meta["splits"][split]["notes"])
    logging.info("%s: %d questions -> %d features", split, total.num_examples, total.num_features)
  _commit(output_dir, new_shards, meta)
  elapsed = time.time() - started
  num_questions = sum(len(squad.examples) for _, squad in splits)
  logging.info("wrote %s in %.1f s (%.0f questions/s; %.1f CPU seconds with the workers)",
               os.path.join(output_dir, records.META_FILE), elapsed,
               num_questions / max(elapsed, 1e-9), _cpu_seconds() - started_cpu)
  return meta


def _cpu_seconds():
  """User + system CPU seconds of this process and of its finished (joined) worker processes."""
  own = resource.getrusage(resource.RUSAGE_SELF)
  children = resource.getrusage(resource.RUSAGE_CHILDREN)
  return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def main(argv):
  del argv
  try:
    settings = settings_from_flags()
    make_records(_resolve_inputs(), settings, FLAGS.output_dir, FLAGS.num_workers)
  except (squad_reader.SquadInputError, WorkerError, ValueError, OSError) as e:
    message = str(e).splitlines()[0] if str(e) else type(e).__name__
    sys.exit(f"make_records.py: {message}")


def cli():
  """Console-script entry point: parses the flags and runs main()."""
  command_line.run(main)


if __name__ == "__main__":
  cli()
