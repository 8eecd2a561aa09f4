"""The files train.py writes into --model_dir, written atomically."""

import json

import tensorflow as tf


def write_json(path, value):
  """Writes `value` as indented UTF-8 JSON to `path` via a temporary file and a rename (no half-written file)."""
  with tf.io.gfile.GFile(path + ".tmp", "w") as f:
    json.dump(value, f, indent=2, ensure_ascii=False)
  tf.io.gfile.rename(path + ".tmp", path, overwrite=True)
