"""The peer's prediction speed and answers: Hugging Face BertForQuestionAnswering forward passes
over SQuAD dev, at one or more precisions.

Run by benchmarks/prediction_throughput.py with the peer's own interpreter
(../shared/peer/README.md: PyTorch 2.13 CPU, transformers); never imported by the project, and it
imports nothing of the project (benchmarks/peer_precision.py, beside it, is the peer's side too).
It featurizes with the peer's `qa_common.prepare_eval_features` (run_qa.py's
`prepare_validation_features`: fast tokenizer, max_length 384, overlap stride 128) and times only
the forward passes, as ours are timed:
  padded: run_qa.py's default, every window max_length wide, in file order;
  sorted: the peer at its best, windows sorted by real length and each batch padded to its longest
      (DataCollatorWithPadding on length-grouped batches).
Each of --precisions (peer_precision.for_inference: float32; bfloat16 autocast; dynamic int8)
loads the model afresh, runs every order, then decodes the last order's logits with the peer's
`qa_common.postprocess` (n-best 20, max_answer_length 30) and scores them (`squad_v1_score`).
Writes a JSON {"runs": {precision: {order: {windows, seconds, windows_per_s, width},
exact_match, f1, predictions: {question id: text}}}} plus versions to --json.

  <peer python> benchmarks/peer_prediction.py --model DIR --predict_file dev-v1.1.json \
      --orders padded sorted --json out.json [--precisions float32 bfloat16 int8] \
      [--max_questions N] [--batch 64] [--threads 2]
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

import peer_precision  # beside this file (the script's folder is on sys.path)


def main():
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--model", required=True, help="BertForQuestionAnswering folder.")
  parser.add_argument("--peer_dir", required=True, help="../shared/peer (its qa_common.py).")
  parser.add_argument("--predict_file", required=True)
  parser.add_argument("--orders", nargs="+", choices=("padded", "sorted"), required=True)
  parser.add_argument("--precisions", nargs="+", choices=peer_precision.PRECISIONS,
                      default=["float32"])
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
      yield rows, {k: torch.from_numpy(features[k][rows, :width]).long()
                   for k in ("input_ids", "token_type_ids", "attention_mask")}

  result = {"torch": torch.__version__, "transformers": transformers.__version__,
            "threads": torch.get_num_threads(), "questions": len(examples),
            "real_tokens_per_window": float(lengths.mean()), "runs": {}}
  for precision in args.precisions:
    model, context = peer_precision.for_inference(
        AutoModelForQuestionAnswering.from_pretrained(args.model).eval(), precision)
    run = result["runs"][precision] = {}
    with torch.inference_mode():
      for order in args.orders:
        for _, (_, batch) in zip(range(args.warmup_batches), batches(order)):
          with context():
            model(**batch)
        widths, logits, started = 0, [], time.perf_counter()
        for rows, batch in batches(order):
          with context():
            out = model(**batch)
          logits.append((rows, out.start_logits, out.end_logits))
          widths += int(batch["input_ids"].shape[0]) * int(batch["input_ids"].shape[1])
        seconds = time.perf_counter() - started
        run[order] = {"windows": num_windows, "seconds": seconds,
                      "windows_per_s": num_windows / seconds, "width": widths / num_windows}
        print(json.dumps({precision: {order: run[order]}}), flush=True)
    # The windows back in feature order, padded to max_len with -inf (never chosen).
    start = np.full((num_windows, args.max_len), -np.inf, np.float32)
    end = np.full((num_windows, args.max_len), -np.inf, np.float32)
    for rows, start_logits, end_logits in logits:
      start[rows, :start_logits.shape[1]] = start_logits.float().numpy()
      end[rows, :end_logits.shape[1]] = end_logits.float().numpy()
    predictions = qa_common.postprocess(examples, features, start, end)
    run.update(qa_common.squad_v1_score(examples, predictions), predictions=predictions)
  os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
  with open(args.json, "w") as f:
    json.dump(result, f, indent=1)


if __name__ == "__main__":
  main()
