"""The TFRecord schema shared by preprocessing (writer) and training/prediction (reader).

Feature names follow google-research/bert and tf-models-official: `unique_ids`, `input_ids`,
`input_mask`, `segment_ids`, `start_positions`, `end_positions`. Eval records add what postprocessing
needs to map a token span back to the context's characters: `example_index` (the question's position
in the eval file), `token_start_char` / `token_end_char` (code-point offsets, end exclusive, -1 outside
the context) and `token_is_max_context` (0/1). Every value is int64 in the record.
"""

import json
import os

import tensorflow as tf

META_FILE = "meta.json"
TRAIN_SPLIT = "train"
EVAL_SPLIT = "eval"

MODEL_INPUT_KEYS = ("input_ids", "input_mask", "segment_ids")
TRAIN_KEYS = ("unique_ids",) + MODEL_INPUT_KEYS + ("start_positions", "end_positions")
EVAL_SEQUENCE_KEYS = MODEL_INPUT_KEYS + ("token_start_char", "token_end_char",
                                         "token_is_max_context")
EVAL_KEYS = ("unique_ids", "example_index") + EVAL_SEQUENCE_KEYS


def shard_name(split, index, num_shards):
  """`train-00000-of-00008.tfrecord` style name of one shard."""
  return f"{split}-{index:05d}-of-{num_shards:05d}.tfrecord"


def _int64_feature(values):
  return tf.train.Feature(int64_list=tf.train.Int64List(value=values))


def serialize_feature(feature, split):
  """Serializes a preprocess.features.Feature as a tf.train.Example (bytes)."""
  values = {
      "unique_ids": [feature.unique_id],
      "input_ids": feature.input_ids,
      "input_mask": feature.input_mask,
      "segment_ids": feature.segment_ids,
  }
  if split == TRAIN_SPLIT:
    values["start_positions"] = [feature.start_position]
    values["end_positions"] = [feature.end_position]
  else:
    values["example_index"] = [feature.example_index]
    values["token_start_char"] = feature.token_start_char
    values["token_end_char"] = feature.token_end_char
    values["token_is_max_context"] = feature.token_is_max_context
  example = tf.train.Example(features=tf.train.Features(
      feature={k: _int64_feature(v) for k, v in values.items()}))
  return example.SerializeToString()


def feature_spec(split, max_seq_length):
  """`tf.io.parse_example` spec of a split: int64 [] scalars and int64 [max_seq_length] sequences."""
  sequence = tf.io.FixedLenFeature([max_seq_length], tf.int64)
  scalar = tf.io.FixedLenFeature([], tf.int64)
  keys = TRAIN_KEYS if split == TRAIN_SPLIT else EVAL_KEYS
  sequence_keys = MODEL_INPUT_KEYS + EVAL_SEQUENCE_KEYS
  return {k: sequence if k in sequence_keys else scalar for k in keys}


def read_meta(records_dir):
  """Loads `meta.json` written by preprocess/make_records.py.

  Raises:
    FileNotFoundError: one line saying to run make_records.py first.
  """
  path = os.path.join(records_dir, META_FILE)
  if not tf.io.gfile.exists(path):
    raise FileNotFoundError(
        f"{path}: not found; run `python preprocess/make_records.py --output_dir={records_dir}` first")
  with tf.io.gfile.GFile(path, "r") as f:
    return json.load(f)


def shard_paths(records_dir, meta, split):
  """Paths of a split's shards in order, as listed in meta.json.

  Raises:
    FileNotFoundError: the split was not written, or a listed shard is missing.
  """
  info = meta.get("splits", {}).get(split)
  if not info:
    raise FileNotFoundError(f"{records_dir}: has no {split} records; rerun make_records.py with "
                            f"--{'train_file' if split == TRAIN_SPLIT else 'predict_file'}")
  paths = [os.path.join(records_dir, name) for name in info["shards"]]
  for path in paths:
    if not tf.io.gfile.exists(path):
      raise FileNotFoundError(f"{path}: missing shard; rerun make_records.py")
  return paths


def _to_model_inputs(batch):
  """Renames record keys to tfm BertEncoder inputs (int32), keeping the other keys."""
  features = {k: tf.cast(v, tf.int32) for k, v in batch.items()}
  features["input_word_ids"] = features.pop("input_ids")
  features["input_type_ids"] = features.pop("segment_ids")
  return features


def train_dataset(paths, max_seq_length, batch_size, seed=None, shuffle_buffer=10000):
  """Endless shuffled training batches: file list -> interleave -> shuffle -> batch -> prefetch.

  Returns:
    A tf.data.Dataset of dicts of int32 tensors: `input_word_ids`, `input_mask`, `input_type_ids`
    [batch, max_seq_length] and `unique_ids`, `start_positions`, `end_positions` [batch].
  """
  spec = feature_spec(TRAIN_SPLIT, max_seq_length)
  files = tf.data.Dataset.from_tensor_slices(paths).shuffle(len(paths), seed=seed).repeat()
  dataset = files.interleave(tf.data.TFRecordDataset, cycle_length=min(len(paths), 4),
                             num_parallel_calls=tf.data.AUTOTUNE, deterministic=seed is not None)
  dataset = dataset.shuffle(shuffle_buffer, seed=seed)
  dataset = dataset.batch(batch_size, drop_remainder=True)
  dataset = dataset.map(lambda x: _to_model_inputs(tf.io.parse_example(x, spec)),
                        num_parallel_calls=tf.data.AUTOTUNE)
  return dataset.prefetch(tf.data.AUTOTUNE)


def eval_dataset(paths, max_seq_length, batch_size, max_examples=None):
  """Eval batches in file order (deterministic), optionally only questions < max_examples.

  Returns:
    A tf.data.Dataset of dicts of int32 tensors: the three model inputs, `token_start_char`,
    `token_end_char`, `token_is_max_context` [batch, max_seq_length], `unique_ids` and
    `example_index` [batch].
  """
  spec = feature_spec(EVAL_SPLIT, max_seq_length)
  dataset = tf.data.TFRecordDataset(paths)
  dataset = dataset.map(lambda x: tf.io.parse_single_example(x, spec))
  if max_examples is not None:
    # Eval shards hold questions in order, so the wanted ones form a prefix.
    dataset = dataset.take_while(lambda x: x["example_index"] < max_examples)
  dataset = dataset.batch(batch_size).map(_to_model_inputs)
  return dataset.prefetch(tf.data.AUTOTUNE)
