"""The peer's prediction speed: Hugging Face BertForQuestionAnswering forward passes over SQuAD dev.

Run by benchmarks/prediction_throughput.py --configurations=...,peer_sorted with the peer's own
interpreter (../shared/peer/README.md: PyTorch 2.13 CPU, transformers); never imported by the
project, and it imports nothing of the project. It featurizes with the peer's
`qa_common.prepare_eval_features` (run_qa.py's `prepare_validation_features`: fast tokenizer,
max_length 384, overlap stride 128) and times only the forward passes, as ours are timed:
  padded: run_qa.py's default, every window max_length wide, in file order;
  sorted: the peer at its best, windows sorted by real length and each batch padded to its longest
      (DataCollatorWithPadding on length-grouped batches).
Writes a JSON {order: {windows, seconds, windows_per_s, width}} plus versions to --json.

  <peer python> benchmarks/peer_prediction.py --model DIR --predict_file dev-v1.1.json \
      --orders padded sorted --json out.json [--max_questions N] [--batch 64] [--threads 2]
"""

import argparse
import importlib.util
import json
import os

import time

import numpy as np
import torch
import transformers
from transformers import AutoModelForQuestionAnswering
from transformers import AutoTokenizer


def main():
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--model", required=True, help="BertForQuestionAnswering folder.")
  parser.add_argument("--peer_dir", required=True, help="../shared/peer (its qa_common.py).")
  parser.add_argument("--predict_file", required=True)
  parser.add_argument("--orders", nargs="+", choices=("padded", "sorted"), required=True)
  parser.add_argument("--max_questions", type=int, default=0, help="0: all.")
  parser.add_argument("--batch", type=int, default=64, help="Windows per forward pass.")
  parser.add_argument("--max_len", type=int, default=384)
  parser.add_argument("--stride", type=int, default=128, help="HF's overlap, in tokens.")
  parser.add_argument("--threads", type=int, default=2)
  parser.add_argument("--warmup_batches", type=int, default=3)
  parser.add_argument("--json", required=True)
  args = parser.parse_args()

  # The peer's helpers, loaded from its folder by path (it is not an installed package).
  spec = importlib.util.spec_from_file_location(
      "qa_common", os.path.join(args.peer_dir, "qa_common.py"))
  qa_common = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(qa_common)

  torch.set_num_threads(args.threads)
  tokenizer = AutoTokenizer.from_pretrained(args.model)
  model = AutoModelForQuestionAnswering.from_pretrained(args.model).eval()
  examples = qa_common.load_squad(args.predict_file)
  if args.max_questions:
    examples = examples[:args.max_questions]
  features = qa_common.prepare_eval_features(tokenizer, examples, args.max_len, args.stride)
  lengths = features["attention_mask"].sum(axis=1)
  num_windows = len(lengths)

  def batches(order):
    index = np.arange(num_windows) if order == "padded" else np.argsort(lengths, kind="stable")
    for i in range(0, num_windows, args.batch):
      rows = index[i:i + args.batch]
      width = args.max_len if order == "padded" else int(lengths[rows].max())
      yield {k: torch.from_numpy(features[k][rows, :width]).long()
             for k in ("input_ids", "token_type_ids", "attention_mask")}

  result = {"torch": torch.__version__, "transformers": transformers.__version__,
            "threads": torch.get_num_threads(), "questions": len(examples),
            "real_tokens_per_window": float(lengths.mean())}
  with torch.inference_mode():
    for order in args.orders:
      for _, batch in zip(range(args.warmup_batches), batches(order)):
        model(**batch)
      widths, started = 0, time.perf_counter()
      for batch in batches(order):
        model(**batch)
        widths += int(batch["input_ids"].shape[0]) * int(batch["input_ids"].shape[1])
      seconds = time.perf_counter() - started
      result[order] = {"windows": num_windows, "seconds": seconds,
                       "windows_per_s": num_windows / seconds, "width": widths / num_windows}
      print(json.dumps({order: result[order]}), flush=True)
  os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
  with open(args.json, "w") as f:
    json.dump(result, f, indent=1)


if __name__ == "__main__":
  main()
