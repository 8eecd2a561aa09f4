"""The TFRecord schema (google-research/bert and tfm feature names, all int64), meta.json, and the
tf.data readers of train and eval records.

Eval records add `example_index`, `token_start_char` / `token_end_char` (code-point offsets, end
exclusive, -1 outside the context; stored + 1) and `token_is_max_context` (0/1).
"""

import json
import os
import re

import numpy as np

import tensorflow as tf

from squad_qa import errors
from squad_qa.base import artifacts
from squad_qa.base import commands
from squad_qa.preprocess import wordpiece

META_FILE = "meta.json"
FORMAT_VERSION = 2
TRAIN_SPLIT = "train"
EVAL_SPLIT = "eval"

MODEL_INPUT_KEYS = ("input_ids", "input_mask", "segment_ids")
TRAIN_KEYS = ("unique_ids",) + MODEL_INPUT_KEYS + ("start_positions", "end_positions")
EVAL_SEQUENCE_KEYS = MODEL_INPUT_KEYS + ("token_start_char", "token_end_char",
                                         "token_is_max_context")
EVAL_KEYS = ("unique_ids", "example_index") + EVAL_SEQUENCE_KEYS
# Stored as offset + 1 under these names: a -1 takes 10 bytes as a varint.
PLUS_ONE_KEYS = {
    "token_start_char": "token_start_char_plus_1",
    "token_end_char": "token_end_char_plus_1"
}


def shard_name(split, index, num_shards):
  """`train-00000-of-00008.tfrecord` style name of one shard."""
  return f"{split}-{index:05d}-of-{num_shards:05d}.tfrecord"


# In train records besides TRAIN_KEYS, not parsed by train_dataset.
TRAIN_EXTRA_KEYS = ("example_index", "is_impossible")


def split_keys(split):
  """Keys of a split's records as readers see them, in the order they are written."""
  if split == TRAIN_SPLIT:
    return TRAIN_KEYS[:1] + TRAIN_EXTRA_KEYS[:1] + TRAIN_KEYS[1:] + TRAIN_EXTRA_KEYS[1:]
  return EVAL_KEYS


def stored_name(key):
  """The name a key has in the records."""
  return PLUS_ONE_KEYS.get(key, key)


def _decode(parsed):
  """Parsed records -> reader keys: offsets stored + 1 become offsets again (-1 outside)."""
  decoded = dict(parsed)
  for key, stored in PLUS_ONE_KEYS.items():
    if stored in decoded:
      decoded[key] = decoded.pop(stored) - 1
  return decoded


def feature_spec(split, max_seq_length, keys=None):
  """`tf.io.parse_example` spec (stored names, int64 [] or [max_seq_length]) of `keys` (default:
  the split's TRAIN_KEYS or EVAL_KEYS); `_decode` the result."""
  sequence = tf.io.FixedLenFeature([max_seq_length], tf.int64)
  scalar = tf.io.FixedLenFeature([], tf.int64)
  if keys is None:
    keys = TRAIN_KEYS if split == TRAIN_SPLIT else EVAL_KEYS
  sequence_keys = MODEL_INPUT_KEYS + EVAL_SEQUENCE_KEYS
  return {stored_name(k): sequence if k in sequence_keys else scalar for k in keys}


def read_records(paths, split, max_seq_length):
  """{key: int64 [num_records] or [num_records, max_seq_length]} of `paths`, in file order."""
  spec = feature_spec(split, max_seq_length, split_keys(split))
  columns = {k: [] for k in spec}
  for batch in tf.data.TFRecordDataset(list(paths)).batch(4096):
    for k, v in tf.io.parse_example(batch, spec).items():
      columns[k].append(v.numpy())
  return _decode({
      k: (np.concatenate(v) if v else np.zeros((0,) + tuple(spec[k].shape), np.int64))
      for k, v in columns.items()
  })


def read_meta(records_dir):
  """The dict of `meta.json` in `records_dir`.

  Raises:
    errors.MissingFileError: no meta.json, or one of another record format.
    errors.UsageError: meta.json is not valid JSON.
  """
  path = os.path.join(records_dir, META_FILE)
  if not tf.io.gfile.exists(path):
    raise errors.MissingFileError(f"{path}: not found; run `{commands.command('squad-qa-records')} "
                                  f"--output_dir={records_dir}` first")
  with tf.io.gfile.GFile(path, "r") as f:
    text = f.read()
  try:
    meta = json.loads(text)
  except json.JSONDecodeError as e:
    raise errors.UsageError(
        artifacts.not_valid_json(
            path, e, f"the file is damaged: rerun `{commands.command('squad-qa-records')} "
            f"--output_dir={records_dir}`")) from None
  if meta.get("format_version") != FORMAT_VERSION:
    raise errors.MissingFileError(
        f"{path}: records of format {meta.get('format_version')} (this version reads "
        f"{FORMAT_VERSION}); rerun `{commands.command('squad-qa-records')} "
        f"--output_dir={records_dir}`")
  return meta


def vocab_size_of(meta):
  """Tokens in the records' vocab (from meta.json, else its vocab_file when it exists), or None."""
  if "vocab_size" in meta:
    return meta["vocab_size"]
  path = meta.get("flags", {}).get("vocab_file")
  if path and tf.io.gfile.exists(path):
    return len(wordpiece.read_vocab(path))
  return None


def shard_paths(records_dir, meta, split):
  """Paths of a split's shards in order, as listed in meta.json.

  Raises:
    errors.MissingFileError: the split was not written, or a listed shard is missing.
  """
  info = meta.get("splits", {}).get(split)
  if not info:
    raise errors.MissingFileError(
        f"{records_dir}: has no {split} records; rerun {commands.command('squad-qa-records')} with "
        f"--{'train_file' if split == TRAIN_SPLIT else 'predict_file'}")
  paths = [os.path.join(records_dir, name) for name in info["shards"]]
  for path in paths:
    if not tf.io.gfile.exists(path):
      raise errors.MissingFileError(
          f"{path}: missing shard; rerun {commands.command('squad-qa-records')}")
  return paths


def _to_model_inputs(batch):
  """Renames record keys to tfm BertEncoder inputs (int32), keeping the other keys."""
  features = {k: tf.cast(v, tf.int32) for k, v in batch.items()}
  features["input_word_ids"] = features.pop("input_ids")
  features["input_type_ids"] = features.pop("segment_ids")
  return features


# Tokens between default --length_buckets boundaries; XLA compiles once per shape, hence fewer.
LENGTH_BUCKET_STEP = 8
XLA_LENGTH_BUCKET_STEP = 64


def length_bucket_boundaries(max_seq_length, boundaries=None, step=LENGTH_BUCKET_STEP):
  """The padded lengths (tokens) of the training buckets: `boundaries` (default: the multiples of
  `step`) then `max_seq_length`, a tuple of increasing ints.

  Raises:
    errors.UsageError: a boundary is not a positive int, not increasing, or above max_seq_length.
  """
  if boundaries is None:
    boundaries = range(step, max_seq_length, step)
  boundaries = [int(b) for b in boundaries]
  if any(b < 1 for b in boundaries) or any(a >= b for a, b in zip(boundaries, boundaries[1:])):
    raise errors.UsageError(f"length buckets {boundaries} are not increasing positive lengths")
  if boundaries and boundaries[-1] > max_seq_length:
    raise errors.UsageError(
        f"length bucket {boundaries[-1]} is longer than the records' max_seq_length "
        f"{max_seq_length}")
  if not boundaries or boundaries[-1] < max_seq_length:
    boundaries.append(max_seq_length)
  return tuple(boundaries)


def length_grouped_batches(pools, batch_size, boundaries, drop_remainder=True):
  """Sorts each pool by real length (sum(input_mask)) and cuts it into batches, each trimmed to
  the first of `boundaries` >= its longest window (as transformers' `LengthGroupedSampler`).

  Args:
    pools: a Dataset of parsed feature batches (`_to_model_inputs` keys, int32 [pool, seq]).
    batch_size: features per batch.
    boundaries: `length_bucket_boundaries(...)`.
    drop_remainder: drop a pool's last size % batch_size features (else one batch is partial).

  Returns:
    A Dataset of batches: sequence keys int32 [batch_size, width], the others [batch_size].
  """
  limits = tf.constant(boundaries, tf.int32)

  def batches(pool):
    size = tf.shape(pool["input_mask"])[0]
    if drop_remainder:
      size -= size % batch_size
      pool = {k: v[:size] for k, v in pool.items()}
    order = tf.argsort(tf.reduce_sum(pool["input_mask"], axis=1), stable=True)
    pool = {k: tf.gather(v, order) for k, v in pool.items()}

    def batch(i):
      rows = {k: v[i * batch_size:(i + 1) * batch_size] for k, v in pool.items()}
      longest = tf.reduce_max(tf.reduce_sum(rows["input_mask"], axis=1))
      width = limits[tf.searchsorted(limits, longest[None], side="left")[0]]
      return {k: v[:, :width] if k in _SEQUENCE_INPUTS else v for k, v in rows.items()}

    count = (size + batch_size - 1) // batch_size
    return tf.data.Dataset.range(tf.cast(count,
                                         tf.int64)).map(lambda i: batch(tf.cast(i, tf.int32)))

  return pools.flat_map(batches)


_SEQUENCE_INPUTS = ("input_word_ids", "input_mask", "input_type_ids")

# Batches per length-sorted training pool (padding against pool size: docs/distribution.md).
TRAIN_POOL_BATCHES = 100


def train_dataset(paths, max_seq_length, batch_size, seed=None, shuffle_buffer=10000,
                  length_buckets=None, num_epochs=None, pool_batches=TRAIN_POOL_BATCHES):
  """Shuffled global training batches (`batch_size` features per optimizer step), epoch by
  epoch: each epoch reads every record once in a new order (deterministic for a `seed`).

  Args:
    length_buckets: None pads every batch to max_seq_length; else boundaries for
      `length_grouped_batches` over pools of `pool_batches` batches.
    num_epochs: None repeats forever, only full batches (`steps_per_epoch`); N: N passes.

  Returns:
    A Dataset of int32 dicts: the model inputs [batch, seq] (seq: max_seq_length or a boundary),
    `unique_ids`, `start_positions`, `end_positions` [batch].
  """
  spec = feature_spec(TRAIN_SPLIT, max_seq_length)
  drop_remainder = num_epochs is None  # endless input: only full batches
  files = tf.data.Dataset.from_tensor_slices(list(paths)).shuffle(len(paths), seed=seed)
  epoch = files.interleave(tf.data.TFRecordDataset, cycle_length=min(len(paths), 4),
                           num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
  epoch = epoch.shuffle(shuffle_buffer, seed=seed)
  parse = lambda x: _to_model_inputs(tf.io.parse_example(x, spec))
  if length_buckets is None:
    epoch = epoch.batch(batch_size,
                        drop_remainder=drop_remainder).map(parse,
                                                           num_parallel_calls=tf.data.AUTOTUNE)
  else:
    pools = epoch.batch(pool_batches * batch_size).map(parse, num_parallel_calls=tf.data.AUTOTUNE)
    epoch = length_grouped_batches(pools, batch_size,
                                   length_bucket_boundaries(max_seq_length, length_buckets),
                                   drop_remainder).shuffle(pool_batches, seed=seed)
  # Repeated after batching (each pass reshuffles: reshuffle_each_iteration), so epochs stay apart.
  return _fixed_pipeline(epoch.repeat(num_epochs))


def steps_per_epoch(num_records, batch_size):
  """Full batches of `batch_size` in one epoch of `num_records` (what `train_dataset` yields)."""
  return num_records // batch_size


# Batches per length-sorted eval pool (widths against pool size: docs/serving.md).
EVAL_POOL_BATCHES = 64


def count_eval_windows(paths, max_examples=None):
  """How many eval windows `eval_dataset` yields for questions < `max_examples` (all: None)."""
  # Named functions, not lambdas: AutoGraph finds a lambda by its source line and has mistaken
  # one of these for another (a 1-argument lambda called with 2 arguments).
  spec = {"example_index": tf.io.FixedLenFeature([], tf.int64)}

  def parse(record):
    return tf.io.parse_single_example(record, spec)

  def in_budget(example):
    return example["example_index"] < max_examples

  def count_one(count, _):
    return count + 1

  dataset = tf.data.TFRecordDataset(paths).map(parse)
  if max_examples is not None:
    dataset = dataset.take_while(in_budget)
  return int(dataset.reduce(0, count_one))


def eval_dataset(paths, max_seq_length, batch_size, max_examples=None, trim=True):
  """Eval batches, optionally only questions < max_examples.

  With `trim`, pools of EVAL_POOL_BATCHES batches (file order) are sorted by real length and each
  batch's model inputs cut to its longest window (batches then leave file order; `unique_ids` tell
  it). Without `trim`, batches are in file order and max_seq_length wide.

  Returns:
    A Dataset of int32 dicts: the model inputs [batch, seq], the offsets and max-context flags
    [batch, max_seq_length], `unique_ids` and `example_index` [batch].
  """
  spec = feature_spec(EVAL_SPLIT, max_seq_length)
  dataset = tf.data.TFRecordDataset(paths)
  dataset = dataset.map(lambda x: _decode(tf.io.parse_single_example(x, spec)))
  if max_examples is not None:
    # Eval shards hold questions in order, so the wanted ones form a prefix.
    dataset = dataset.take_while(lambda x: x["example_index"] < max_examples)
  if not trim:
    return _fixed_pipeline(dataset.batch(batch_size).map(_to_model_inputs))

  def sorted_by_length(pool):
    order = tf.argsort(tf.reduce_sum(pool["input_mask"], axis=1), stable=True)
    return {k: tf.gather(v, order) for k, v in _to_model_inputs(pool).items()}

  def batches(pool):
    size = tf.shape(pool["unique_ids"], out_type=tf.int64)[0]

    def batch(i):
      rows = {k: v[i * batch_size:(i + 1) * batch_size] for k, v in pool.items()}
      length = tf.reduce_max(tf.reduce_sum(rows["input_mask"], axis=1))
      for key in ("input_word_ids", "input_mask", "input_type_ids"):
        rows[key] = rows[key][:, :length]
      return rows

    return tf.data.Dataset.range((size + batch_size - 1) // batch_size).map(batch)

  dataset = dataset.batch(EVAL_POOL_BATCHES * batch_size).map(sorted_by_length)
  return _fixed_pipeline(dataset.flat_map(batches))


def _fixed_pipeline(dataset):
  """`dataset` prefetching 2 batches, with tf.data's autotuning off (its AUTOTUNE parallelism
  then is the number of cores).

  With autotuning on (TF 2.20, CPU), while the model kept both cores busy, reaching the end of an
  eval iterator took about 10 s more in roughly half of the passes over 1,000 dev questions (20.6 s
  instead of 10.6 s), and dropping a training iterator after 20 batches took 10.1 s once in 9
  (0.13-0.35 s otherwise); with it off, neither in 7 and 5 tries. Reading stays far ahead of the
  model: about 5,900 training batches of 16 per second without it.
  """
  options = tf.data.Options()
  options.autotune.enabled = False
  return dataset.prefetch(2).with_options(options)


class DamagedShardError(errors.UserError, IOError):
  """A records shard that cannot be read to its end (truncated or corrupted on disk)."""


def damaged_shard_error(records_dir, meta):
  """After a tf.errors.DataLossError while reading `records_dir` (whose record reader names no
  file): the `DamagedShardError` naming the first shard of `meta`'s splits that does not read to
  its end (each read through once, with CRC checks), or None when all read.
  """
  for split in meta.get("splits", {}):
    for name in meta["splits"][split]["shards"]:
      path = os.path.join(records_dir, name)
      try:
        tf.data.TFRecordDataset(path).reduce(np.int64(0), lambda count, _: count + 1).numpy()
      except tf.errors.DataLossError as e:
        found = re.search(r"(truncated|corrupted) record at \d+", e.message)
        reason = found.group(0) if found else "unreadable"
        return DamagedShardError(
            f"{path}: damaged shard ({reason}); write the records again: rerun "
            f"`{commands.command('squad-qa-records')} --output_dir={records_dir}` with the input "
            f"files and flags of its {META_FILE}")
  return None
