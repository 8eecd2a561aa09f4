"""The TFRecord schema shared by preprocessing (writer) and training/prediction (reader).

Feature names follow google-research/bert and tf-models-official: `unique_ids`, `input_ids`,
`input_mask`, `segment_ids`, `start_positions`, `end_positions`, `is_impossible`. Train records also
hold `example_index` (the question's position in the train file as read); `is_impossible` is tfm's:
1 when the window does not hold the answer (positions 0), including every window of an unanswerable
SQuAD 2.0 question. Eval records add what postprocessing needs to map a token span back to the
context's characters: `example_index` (the question's position in the eval file),
`token_start_char` / `token_end_char` (code-point offsets, end exclusive, -1 outside the context;
stored as offset + 1 under `token_start_char_plus_1` / `token_end_char_plus_1`, decoded by the
readers here) and `token_is_max_context` (0/1). Every value is int64 in the record. Records are
written by preprocess/record_serialization.py (NumPy, byte-identical for identical features).
"""

import json
import os

import numpy as np

import tensorflow as tf

from squad_qa import errors
from squad_qa.base import artifacts
from squad_qa.base import commands
from squad_qa.preprocess import wordpiece

META_FILE = "meta.json"
# 2: train records carry example_index and is_impossible; eval offsets are stored + 1.
FORMAT_VERSION = 2
TRAIN_SPLIT = "train"
EVAL_SPLIT = "eval"

MODEL_INPUT_KEYS = ("input_ids", "input_mask", "segment_ids")
TRAIN_KEYS = ("unique_ids",) + MODEL_INPUT_KEYS + ("start_positions", "end_positions")
EVAL_SEQUENCE_KEYS = MODEL_INPUT_KEYS + ("token_start_char", "token_end_char",
                                         "token_is_max_context")
EVAL_KEYS = ("unique_ids", "example_index") + EVAL_SEQUENCE_KEYS
# Stored as offset + 1 (0 outside the context) under these names: a -1 takes 10 bytes as a varint,
# which made eval records 2x larger and slower to write; readers here give back the -1s.
PLUS_ONE_KEYS = {
    "token_start_char": "token_start_char_plus_1",
    "token_end_char": "token_end_char_plus_1"
}


def shard_name(split, index, num_shards):
  """`train-00000-of-00008.tfrecord` style name of one shard."""
  return f"{split}-{index:05d}-of-{num_shards:05d}.tfrecord"


# Written to train records besides TRAIN_KEYS (not needed by training, so not parsed by
# train_dataset): the question's index in the train file as read, and tfm's is_impossible (1 when
# the window holds no answer: positions are 0).
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
  """`tf.io.parse_example` spec of a split (stored key names; apply `_decode` to the result): int64
  [] scalars and int64 [max_seq_length] sequences. Default keys: TRAIN_KEYS or EVAL_KEYS."""
  sequence = tf.io.FixedLenFeature([max_seq_length], tf.int64)
  scalar = tf.io.FixedLenFeature([], tf.int64)
  if keys is None:
    keys = TRAIN_KEYS if split == TRAIN_SPLIT else EVAL_KEYS
  sequence_keys = MODEL_INPUT_KEYS + EVAL_SEQUENCE_KEYS
  return {stored_name(k): sequence if k in sequence_keys else scalar for k in keys}


def read_records(paths, split, max_seq_length):
  """Every key of every record of `paths`, in file order, as NumPy arrays (for tools and tests).

  Returns:
    {key: int64 [num_records] or [num_records, max_seq_length]}.
  """
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
  """Loads `meta.json` written by preprocess/make_records.py.

  Raises:
    FileNotFoundError: one line saying to run make_records.py (again): no meta.json, or one of an
      older record format.
    errors.UsageError: meta.json is not valid JSON (one line, the same fix).
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
  """How many tokens the records' vocab has (their ids are below it), or None when unknown.

  meta.json records it; for records made before it did, the vocab file named in meta.json is
  counted when it still exists.
  """
  if "vocab_size" in meta:
    return meta["vocab_size"]
  path = meta.get("flags", {}).get("vocab_file")
  if path and tf.io.gfile.exists(path):
    return len(wordpiece.read_vocab(path))
  return None


def shard_paths(records_dir, meta, split):
  """Paths of a split's shards in order, as listed in meta.json.

  Raises:
    FileNotFoundError: the split was not written, or a listed shard is missing.
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


# Default --length_buckets: boundaries at every multiple of this many tokens up to max_seq_length
# (the widths a length-grouped batch is trimmed to). Without XLA the number of shapes costs nothing
# (one generic trace).
LENGTH_BUCKET_STEP = 8
# The same under XLA, which compiles the step once per shape: 6 compilations at 384 (an epoch of
# SQuAD v1.1 train then pads to 204.9 tokens instead of 177.1).
XLA_LENGTH_BUCKET_STEP = 64


def length_bucket_boundaries(max_seq_length, boundaries=None, step=LENGTH_BUCKET_STEP):
  """The padded lengths of the training buckets, ending at `max_seq_length`.

  Args:
    max_seq_length: tokens per record.
    boundaries: increasing positive ints <= max_seq_length (max_seq_length is added when
      missing, so every window has a bucket), or None: the multiples of `step` below
      max_seq_length, then max_seq_length.
    step: tokens between default boundaries: LENGTH_BUCKET_STEP, or XLA_LENGTH_BUCKET_STEP when
      the step is compiled per shape.

  Returns:
    A tuple of increasing ints; a window of n real tokens goes to the first boundary >= n.

  Raises:
    ValueError: a boundary is not a positive int, not increasing, or above max_seq_length.
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
  """Splits pools of features into batches of similar real length, each trimmed to a boundary.

  Each pool (a random sample of the epoch, `TRAIN_POOL_BATCHES` batches' worth) is sorted by real
  length n = sum(input_mask) and cut into consecutive batches of `batch_size`; a batch is trimmed
  to the first boundary >= its longest window. Hugging Face's `LengthGroupedSampler` groups the same
  way (sorted mega-batches of 50 batches). Unlike per-bucket queues (tf.data's
  `bucket_by_sequence_length`), no window waits for its bucket to fill: every window of an epoch is
  in a batch of that epoch, once, and a batch never holds the same window twice. Trimming drops only
  padding (every position >= n has input_mask 0 and id 0), and start/end positions are < n.

  Args:
    pools: a Dataset of parsed feature batches (`_to_model_inputs` keys; sequence keys int32
      [pool, max_seq_length]), in random order.
    batch_size: features per batch.
    boundaries: `length_bucket_boundaries(...)`: the widths a batch may be trimmed to.
    drop_remainder: True: a pool whose size is not a multiple of `batch_size` (the last of an
      epoch) first drops its last size % batch_size features (random ones: the pool is in random
      order), so every batch is full. False: the pool's longest batch is partial.

  Returns:
    A Dataset of batches in sorted order within each pool: the sequence keys int32
    [batch_size, width] (static shape [batch_size or None, None]), the others [batch_size].
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

# Length-grouped training batches are cut from pools of this many batches sorted by length
# (transformers' LengthGroupedSampler sorts mega-batches of 50). SQuAD v1.1 train at 384/128/64
# (88,641 windows, 172.0 real tokens each on average), 8-token boundaries, batch 16 to 256: pools
# of 50 batches pad an epoch to 178.7 tokens, 100 to 177.1, 200 to 176.3; the group_by_length
# sampler pads to 175.1-175.4 (benchmarks/train_throughput.py's epoch simulation). A pool of 100
# batches of 32 holds 3,200 windows (15 MB at 384).
TRAIN_POOL_BATCHES = 100


def train_dataset(paths, max_seq_length, batch_size, seed=None, shuffle_buffer=10000,
                  length_buckets=None, num_epochs=None, pool_batches=TRAIN_POOL_BATCHES):
  """Shuffled training batches, epoch by epoch: files -> interleave -> shuffle -> batch.

  Every epoch reads every record of `paths` once, in a new random order (deterministic for a
  given seed), and batches only that epoch's records: a window is never in two batches of one
  epoch, and no batch mixes epochs. With endless input (`num_epochs` None) each epoch drops its
  last `num_records % batch_size` records (random ones), so every batch is full: an epoch is
  `num_records // batch_size` batches (`steps_per_epoch`).

  The batches are global: a run on several replicas splits each batch across them
  (tasks/question_answering.py), so that every replica of a step has the same width and the
  same data as one device with this batch size.

  Args:
    paths: train shard paths.
    max_seq_length: tokens per record.
    batch_size: features per batch (per optimizer step, over all replicas and accumulation
      micro-batches).
    seed: shuffling seed; with a seed the batches are deterministic.
    shuffle_buffer: records in tf.data's shuffle buffer.
    length_buckets: None pads every batch to max_seq_length; else increasing boundaries
      (`length_bucket_boundaries`): batches group windows of similar length
      (`length_grouped_batches` over pools of `pool_batches` batches, batch order shuffled within
      that many batches) and are trimmed to a boundary.
    num_epochs: None repeats forever (training); N passes over the records, then ends; each
      epoch's last batch may then be partial, so every record comes out exactly N times.
    pool_batches: batches per length-sorted pool.

  Returns:
    A tf.data.Dataset of dicts of int32 tensors: `input_word_ids`, `input_mask`, `input_type_ids`
    [batch, seq] (seq = max_seq_length, or the batch's boundary) and `unique_ids`,
    `start_positions`, `end_positions` [batch].
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
  return epoch.repeat(num_epochs).prefetch(tf.data.AUTOTUNE)


def steps_per_epoch(num_records, batch_size):
  """Full batches of `batch_size` in one epoch of `num_records` (what `train_dataset` yields)."""
  return num_records // batch_size


# Eval batches trimmed to their longest window: windows are sorted by real length within pools of
# this many batches read in file order (a pool's batches then hold windows of similar length).
# Full dev-v1.1 at 384/128/64, batch 64: pools of 16 batches give batches 188.4 tokens wide, 64 give
# 181.1, one pool of everything 179.5 (178.5 real); 64 batches of 64 windows hold ~38 MB.
EVAL_POOL_BATCHES = 64


def count_eval_windows(paths, max_examples=None):
  """How many eval windows `eval_dataset` yields for questions < `max_examples` (all: None).

  Reads only each record's `example_index` (about a second for SQuAD v1.1 dev's 10,833 windows).
  """
  spec = {"example_index": tf.io.FixedLenFeature([], tf.int64)}
  dataset = tf.data.TFRecordDataset(paths).map(lambda x: tf.io.parse_single_example(x, spec))
  if max_examples is not None:
    dataset = dataset.take_while(lambda x: x["example_index"] < max_examples)
  return int(dataset.reduce(0, lambda count, _: count + 1))


def eval_dataset(paths, max_seq_length, batch_size, max_examples=None, trim=True):
  """Eval batches, optionally only questions < max_examples.

  With `trim`, the records are read in pools of EVAL_POOL_BATCHES * batch_size windows (file
  order), each pool is sorted by real length (sum(input_mask); stable) and split into batches, and
  each batch's model inputs are cut to its longest window: only padding is dropped, and all the work
  is per pool or per batch, none per window. Batches are then not in file order; `unique_ids` give
  the windows' order back. Without `trim`, batches are in file order and max_seq_length wide.

  Returns:
    A tf.data.Dataset of dicts of int32 tensors: the three model inputs [batch, seq] (seq =
    max_seq_length, or the batch's longest window with `trim`), `token_start_char`,
    `token_end_char`, `token_is_max_context` [batch, max_seq_length], `unique_ids` and
    `example_index` [batch].
  """
  spec = feature_spec(EVAL_SPLIT, max_seq_length)
  dataset = tf.data.TFRecordDataset(paths)
  dataset = dataset.map(lambda x: _decode(tf.io.parse_single_example(x, spec)))
  if max_examples is not None:
    # Eval shards hold questions in order, so the wanted ones form a prefix.
    dataset = dataset.take_while(lambda x: x["example_index"] < max_examples)
  if not trim:
    return dataset.batch(batch_size).map(_to_model_inputs).prefetch(tf.data.AUTOTUNE)

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
  return dataset.flat_map(batches).prefetch(tf.data.AUTOTUNE)
