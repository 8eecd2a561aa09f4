r"""Does the raw-text signature answer a whole SQuAD file as the Python pipeline did?

  python -m benchmarks.serving_agreement --export_dir=export \
      --predictions_file=model_out/predictions.json [--predict_file=dev-v1.1.json] \
      [--batch_size=32] [--output_file=serve_text_predictions.json]

--predictions_file is train.py's predictions.json for the checkpoint the SavedModel was exported
from (TFRecord windows from make_records.py, batched prediction, postprocess/span_decoding.py). Every
question of --predict_file goes through the SavedModel's `serving_default` (serve_text) in batches.
Prints how many answers are identical, the official SQuAD v1.1 EM/F1 of both prediction sets, and
each disagreement with its kind:
  float noise:  serve_text equals the Python path re-run on this question alone
                (saved_model_qa.SavedModelQA.answer_with_serve_features), so the Python
                pipeline's logits for the same windows differed in the last bits (another batch
                composition); the score gap between the two answers is shown.
  other:        serve_text differs from the Python path on the same logits too (a bug to explain).
"""

import json
import sys
import time

from squad_qa.tasks import cpu_runtime  # pylint: disable=unused-import  (must precede tensorflow)
from absl import flags  # pylint: disable=g-import-not-at-top
from absl import logging

from squad_qa.flags import command_line
from squad_qa.flags import definitions
from squad_qa.postprocess import squad_scoring
from squad_qa.preprocess import squad_reader
from squad_qa.serving import saved_model_qa

definitions.define_export_flags()
definitions.define_squad_file_flags()
flags.DEFINE_string("predictions_file", None, "train.py's predictions.json to compare with.")
flags.DEFINE_integer("batch_size", 32, "Questions per serve_text call.")
flags.DEFINE_string("output_file", None, "Also write serve_text's predictions here (JSON).")
flags.DEFINE_integer("show", 10, "Disagreements to print.")
FLAGS = flags.FLAGS


def main(argv):
  del argv
  if not FLAGS.predictions_file:
    sys.exit("serving_agreement.py: --predictions_file (train.py's predictions.json) is required")
  predict_file = FLAGS.predict_file or squad_reader.default_squad_file(
      squad_reader.PREDICT_FILE_NAMES)
  dataset = squad_reader.load_json(predict_file)
  questions = [(qa["id"], qa["question"], paragraph["context"]) for article in dataset
               for paragraph in article["paragraphs"] for qa in paragraph["qas"]]
  with open(FLAGS.predictions_file, encoding="utf-8") as f:
    python_predictions = json.load(f)
  qa = saved_model_qa.SavedModelQA(FLAGS.export_dir)
  version_2 = bool(qa.config.get("version_2_with_negative") or
                   squad_scoring.unanswerable_questions(dataset))

  examples = [q for q in questions if q[0] in python_predictions]
  served = {}
  started = time.time()
  for i in range(0, len(examples), FLAGS.batch_size):
    batch = examples[i:i + FLAGS.batch_size]
    got = qa.answers([question for _, question, _ in batch], [context for _, _, context in batch])
    for (qid, _, _), answer in zip(batch, got):
      served[qid] = answer
    if (i // FLAGS.batch_size) % 50 == 0:
      logging.info("%d/%d questions, %.1f questions/s", i + len(batch), len(examples),
                   (i + len(batch)) / (time.time() - started))
  elapsed = time.time() - started
  serve_predictions = {k: a.text for k, a in served.items()}
  if FLAGS.output_file:
    with open(FLAGS.output_file, "w", encoding="utf-8") as f:
      json.dump(serve_predictions, f, indent=2, ensure_ascii=False)

  disagreements = [q for q in examples if serve_predictions[q[0]] != python_predictions[q[0]]]
  kinds = {"float noise": 0, "other": 0}
  for shown, (qid, question, context) in enumerate(disagreements):
    alone = qa.answer_with_serve_features(question, context)
    got = served[qid]
    kind = "float noise" if alone.text == got.text else "other"
    kinds[kind] += 1
    if shown < FLAGS.show:
      print(f"  {qid} [{kind}]: serve_text {got.text!r} ({got.score:.6f}) vs "
            f"predictions.json {python_predictions[qid]!r}; Python path alone "
            f"{alone.text!r} ({alone.score:.6f})")

  if len(examples) < len(questions):
    dataset = squad_scoring.restrict_to_questions(dataset, set(serve_predictions))
  python_predictions = {qid: python_predictions[qid] for qid, _, _ in examples}
  same = len(examples) - len(disagreements)
  print(f"questions: {len(examples)} (of {len(questions)} in {predict_file}); the SavedModel "
        f"computes in {qa.serving_precision}")
  print(f"identical answers: {same} ({100.0 * same / max(len(examples), 1):.2f}%); "
        f"different: {len(disagreements)} {kinds}")
  for name, predictions in (("predictions.json (Python pipeline)", python_predictions),
                            ("serve_text (SavedModel)", serve_predictions)):
    if version_2:
      scores = squad_scoring.score_v2(dataset, predictions)
      print(f"{name + ':':36s}SQuAD 2.0 exact {scores['exact']:.2f}  f1 {scores['f1']:.2f}  "
            f"total {scores['total']}  HasAns exact {scores.get('HasAns_exact', 0.0):.2f}  "
            f"NoAns exact {scores.get('NoAns_exact', 0.0):.2f}")
    else:
      scores = squad_scoring.score_v1(dataset, predictions)
      print(f"{name + ':':36s}EM {scores['exact_match']:.2f}  F1 {scores['f1']:.2f}")
  print(f"serve_text: {elapsed:.1f} s, {len(examples) / elapsed:.1f} questions/s at batch "
        f"{FLAGS.batch_size}")


if __name__ == "__main__":
  command_line.run(main)
