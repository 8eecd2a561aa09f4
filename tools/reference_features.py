"""The reference featurization (tf-models-official squad_lib + FullTokenizer), collected as arrays.

Development tool used by tools/compare_with_reference.py, benchmarks/featurize_squad.py and
tests/preprocess/test_reference_parity.py; not imported by the tool itself. It runs exactly
`official.nlp.data.squad_lib.read_squad_examples` and `convert_examples_to_features` with
`official.nlp.tools.tokenization.FullTokenizer` (the algorithm of google-research/bert
run_squad.py), optionally writing tfm's own TFRecords with its `FeatureWriter`, and keeps every
feature as NumPy arrays so they can be compared with ours. Results can be cached in an .npz keyed by
the input's SHA-256 and the settings (a full train run of the reference takes minutes).
"""

import collections
import dataclasses
import hashlib
import json
import os
import time

import numpy as np


@dataclasses.dataclass
class ReferenceFeatures:
  """The reference's features of one file.

  Attributes:
    qas_ids: str [E] ids of the questions it kept (its `examples`), in order.
    arrays: {name: array}: per feature `example_index`, `doc_span_index`, `unique_ids`,
      `start_positions`, `end_positions`, `is_impossible` [F] and `input_ids`, `input_mask`,
      `segment_ids`, `token_is_max_context` (0/1, 0 outside the context), `token_to_orig`
      (whitespace-word index, -1 outside the context) [F, max_seq_length].
    seconds: reading + featurizing (+ writing) time of the run that made them.
  """
  qas_ids: list
  arrays: dict
  seconds: float


def _file_sha256(path):
  digest = hashlib.sha256()
  with open(path, "rb") as f:
    for block in iter(lambda: f.read(1 << 20), b""):
      digest.update(block)
  return digest.hexdigest()


def cache_path(cache_dir, path, is_training, vocab_file, do_lower_case, max_seq_length, doc_stride,
               max_query_length, version_2_with_negative):
  key = json.dumps([
      _file_sha256(path), is_training,
      _file_sha256(vocab_file), do_lower_case, max_seq_length, doc_stride, max_query_length,
      version_2_with_negative
  ])
  name = hashlib.sha256(key.encode()).hexdigest()[:16]
  return os.path.join(cache_dir, f"reference-{os.path.basename(path)}-{max_seq_length}-{name}.npz")


def run_reference(path, is_training, vocab_file, do_lower_case=True, max_seq_length=384,
                  doc_stride=128, max_query_length=64, version_2_with_negative=False,
                  record_file=None, cache_dir=None):
  """Featurizes `path` with tf-models-official's squad_lib, or loads the cached result.

  Args:
    path: SQuAD JSON.
    is_training: training features (positions) or eval features.
    vocab_file, do_lower_case, max_seq_length, doc_stride, max_query_length,
      version_2_with_negative: as the flags of the same names.
    record_file: also write tfm's TFRecords there with its FeatureWriter (as its
      generate_tf_record_from_json_file does); disables the cache read.
    cache_dir: read/write an .npz of the result there.

  Returns:
    ReferenceFeatures.
  """
  from absl import logging  # pylint: disable=g-import-not-at-top
  from official.nlp.data import squad_lib  # pylint: disable=g-import-not-at-top
  from official.nlp.tools import tokenization  # pylint: disable=g-import-not-at-top

  cached = None
  if cache_dir:
    cached = cache_path(cache_dir, path, is_training, vocab_file, do_lower_case, max_seq_length,
                        doc_stride, max_query_length, version_2_with_negative)
    if record_file is None and os.path.exists(cached):
      with np.load(cached) as data:
        arrays = {k: data[k] for k in data.files if k not in ("qas_ids", "seconds")}
        return ReferenceFeatures(data["qas_ids"].tolist(), arrays, float(data["seconds"]))
  verbosity = logging.get_verbosity()
  logging.set_verbosity(logging.ERROR)  # squad_lib logs 20 examples and every skipped answer
  try:
    started = time.time()
    examples = squad_lib.read_squad_examples(path, is_training, version_2_with_negative)
    tokenizer = tokenization.FullTokenizer(vocab_file, do_lower_case)
    writer = squad_lib.FeatureWriter(record_file, is_training) if record_file else None
    columns = collections.defaultdict(list)

    def output_fn(feature, is_padding=False):
      if is_padding:
        return
      if writer:
        writer.process_feature(feature)
      columns["example_index"].append(feature.example_index)
      columns["doc_span_index"].append(feature.doc_span_index)
      columns["unique_ids"].append(feature.unique_id)
      columns["start_positions"].append(feature.start_position or 0)
      columns["end_positions"].append(feature.end_position or 0)
      columns["is_impossible"].append(int(bool(feature.is_impossible)))
      columns["input_ids"].append(np.asarray(feature.input_ids, np.int32))
      columns["input_mask"].append(np.asarray(feature.input_mask, np.int8))
      columns["segment_ids"].append(np.asarray(feature.segment_ids, np.int8))
      is_max = np.zeros(max_seq_length, np.int8)
      for position, flag in feature.token_is_max_context.items():
        is_max[position] = int(flag)
      to_orig = np.full(max_seq_length, -1, np.int32)
      for position, word in feature.token_to_orig_map.items():
        to_orig[position] = word
      columns["token_is_max_context"].append(is_max)
      columns["token_to_orig"].append(to_orig)

    squad_lib.convert_examples_to_features(examples, tokenizer, max_seq_length, doc_stride,
                                           max_query_length, is_training, output_fn, batch_size=1)
    if writer:
      writer.close()
    seconds = time.time() - started
  finally:
    logging.set_verbosity(verbosity)
  arrays = {}
  for name, values in columns.items():
    arrays[name] = np.stack(values) if isinstance(values[0], np.ndarray) else np.asarray(values)
  if not columns:
    arrays = {
        name: np.zeros((0,), np.int64)
        for name in ("example_index", "doc_span_index", "unique_ids", "start_positions",
                     "end_positions", "is_impossible")
    }
    arrays.update({
        name: np.zeros((0, max_seq_length), np.int32)
        for name in ("input_ids", "input_mask", "segment_ids", "token_is_max_context",
                     "token_to_orig")
    })
  # Integer ids as squad_reader reads them (decimal strings), so questions pair up by id.
  result = ReferenceFeatures([str(e.qas_id) for e in examples], arrays, seconds)
  if cached:
    os.makedirs(cache_dir, exist_ok=True)
    np.savez(cached + ".tmp.npz", qas_ids=np.asarray(result.qas_ids), seconds=seconds, **arrays)
    os.replace(cached + ".tmp.npz", cached)
  return result
