r"""The reference's end-to-end featurization, timed: SQuAD JSON -> tfm TFRecords, one split at a time.

  python -m benchmarks.featurize_reference --predict_file=dev.json --train_file=train.json \
      --vocab_file=vocab.txt --output_dir=reference_features [--cache_dir=...]

Runs tf-models-official's `squad_lib.read_squad_examples` + `FullTokenizer` +
`convert_examples_to_features` + `FeatureWriter` (what its `generate_tf_record_from_json_file` does for
training, and the same for eval) through tools/reference_features.py, and prints one JSON line per split:
{"split", "questions", "features", "seconds", "cpu_seconds"}. benchmarks/featurize_squad.py runs it in a child process
to measure its wall time and memory. With --cache_dir the features are also saved for
tools/compare_with_reference.py.
"""

import argparse
import json
import os
import time

from tools import reference_features  # pylint: disable=g-import-not-at-top


def main():
  parser = argparse.ArgumentParser()
  parser.add_argument("--predict_file")
  parser.add_argument("--train_file")
  parser.add_argument("--vocab_file", required=True)
  parser.add_argument("--max_seq_length", type=int, default=384)
  parser.add_argument("--doc_stride", type=int, default=128)
  parser.add_argument("--max_query_length", type=int, default=64)
  parser.add_argument("--output_dir", required=True)
  parser.add_argument("--cache_dir")
  args = parser.parse_args()
  os.makedirs(args.output_dir, exist_ok=True)
  for split, path in (("eval", args.predict_file), ("train", args.train_file)):
    if not path:
      continue
    cpu = time.process_time()
    result = reference_features.run_reference(
        path, split == "train", args.vocab_file, True, args.max_seq_length, args.doc_stride,
        args.max_query_length, record_file=os.path.join(args.output_dir, f"{split}.tfrecord"),
        cache_dir=args.cache_dir)
    print(json.dumps({"split": split, "questions": len(result.qas_ids),
                      "features": int(len(result.arrays["input_ids"])),
                      "seconds": round(result.seconds, 2),
                      "cpu_seconds": round(time.process_time() - cpu, 2)}), flush=True)


if __name__ == "__main__":
  main()
