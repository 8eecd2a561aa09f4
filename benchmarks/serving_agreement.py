r"""Does an export answer a whole SQuAD file as a reference did (the Python pipeline, or another
export)?

  python -m benchmarks.serving_agreement --export_dir=export \
      --predictions_file=model_out/predictions.json [--predict_file=dev-v1.1.json] \
      [--batch_size=32] [--output_file=serve_text_predictions.json] [--use_serve_features]

  # int8 against float32 on the same Python path (tokenization, windows, decoding):
  python -m benchmarks.serving_agreement --export_dir=export --use_serve_features \
      --output_file=float32_predictions.json
  python -m benchmarks.serving_agreement --export_dir=export_int8 \
      --predictions_file=float32_predictions.json

--predictions_file is the reference: train.py's predictions.json for the checkpoint the export was
made from (TFRecord windows from make_records.py, batched prediction, postprocess/span_decoding.py),
or the --output_file of an earlier run. Without it every question of --predict_file is answered and
scored alone. Every question goes through the export in batches: its `serving_default`
(serve_text), or with --use_serve_features, and always for an int8 export (which has no
serve_text), through `SavedModelQA.answers_with_serve_features` (Python tokenization and windows,
the features model, Python decoding). Prints how many answers are identical, the official SQuAD
v1.1 EM/F1 of both prediction sets, and each disagreement, with its kind when serve_text answered:
  float noise:  serve_text equals the Python path re-run on this question alone
                (saved_model_qa.SavedModelQA.answer_with_serve_features), so the Python
                pipeline's logits for the same windows differed in the last bits (another batch
                composition); the score gap between the two answers is shown.
  other:        serve_text differs from the Python path on the same logits too (a bug to explain).
On the Python path the kind is not looked for: the difference is the reference's (its precision, or
its batches).
"""

import dataclasses
import json
import os
import time
from typing import Optional

from squad_qa.base import cpu_runtime  # noqa: F401  (must precede tensorflow)
from absl import logging  # pylint: disable=g-import-not-at-top

from squad_qa import errors
from squad_qa.flags import command_line
from squad_qa.flags import settings
from squad_qa.postprocess import squad_scoring
from squad_qa.preprocess import squad_reader
from squad_qa.serving import ask_config
from squad_qa.serving import saved_model_qa


@dataclasses.dataclass(frozen=True, kw_only=True)
class AgreementConfig(settings.Settings):
  """The benchmark's flags, each a field (the only flags it defines)."""
  export_dir: str = settings.variant(ask_config.AskConfig, "export_dir")
  predict_file: Optional[str] = settings.variant(squad_reader.SquadFiles, "predict_file")
  predictions_file: Optional[str] = settings.setting(
      None, "The reference predictions (train.py's predictions.json, or an earlier run's "
      "--output_file); without it the export is only scored.")
  batch_size: int = settings.setting(32, "Questions per call.", check=settings.at_least(1))
  output_file: Optional[str] = settings.setting(None,
                                                "Also write the export's predictions here (JSON).")
  show: int = settings.setting(10, "Disagreements to print.",
                               check=settings.at_least(0, "0 (none) or more"))
  use_serve_features: bool = settings.variant(
      ask_config.AskConfig, "use_serve_features",
      help="Answer through Python tokenization, the features model and Python decoding even when "
      "the export has serve_text.")

  def check(self):
    if self.predictions_file and not os.path.isfile(self.predictions_file):
      raise errors.MissingFileError(f"--predictions_file={self.predictions_file}: no such file")


def _scores(dataset, predictions, version_2):
  if version_2:
    scores = squad_scoring.score_v2(dataset, predictions)
    return (f"SQuAD 2.0 exact {scores['exact']:.2f}  f1 {scores['f1']:.2f}  total "
            f"{scores['total']}  HasAns exact {scores.get('HasAns_exact', 0.0):.2f}  NoAns exact "
            f"{scores.get('NoAns_exact', 0.0):.2f}")
  scores = squad_scoring.score_v1(dataset, predictions)
  return f"EM {scores['exact_match']:.2f}  F1 {scores['f1']:.2f}"


def main(argv):
  del argv
  config = command_line.config_from_flags(AgreementConfig)
  predict_file = config.predict_file or squad_reader.default_squad_file(
      squad_reader.PREDICT_FILE_NAMES)
  dataset = squad_reader.load_json(predict_file)
  questions = [(qa["id"], qa["question"], paragraph["context"]) for article in dataset
               for paragraph in article["paragraphs"] for qa in paragraph["qas"]]
  reference = None
  if config.predictions_file:
    with open(config.predictions_file, encoding="utf-8") as f:
      reference = json.load(f)
  qa = saved_model_qa.SavedModelQA(config.export_dir)
  version_2 = bool(
      qa.config.get("version_2_with_negative") or squad_scoring.unanswerable_questions(dataset))
  use_serve_text = qa.has_serve_text and not config.use_serve_features
  path = "serve_text" if use_serve_text else "Python path"
  answer_batch = qa.answers if use_serve_text else qa.answers_with_serve_features

  examples = [q for q in questions if reference is None or q[0] in reference]
  served = {}
  started = time.time()
  for i in range(0, len(examples), config.batch_size):
    batch = examples[i:i + config.batch_size]
    got = answer_batch([question for _, question, _ in batch], [context for _, _, context in batch])
    for (qid, _, _), answer in zip(batch, got):
      served[qid] = answer
    if (i // config.batch_size) % 50 == 0:
      logging.info("%d/%d questions, %.1f questions/s", i + len(batch), len(examples),
                   (i + len(batch)) / (time.time() - started))
  elapsed = time.time() - started
  predictions = {k: a.text for k, a in served.items()}
  if config.output_file:
    with open(config.output_file, "w", encoding="utf-8") as f:
      json.dump(predictions, f, indent=2, ensure_ascii=False)

  if len(examples) < len(questions):
    dataset = squad_scoring.restrict_to_questions(dataset, set(predictions))
  print(f"questions: {len(examples)} (of {len(questions)} in {predict_file}); the export "
        f"computes in {qa.serving_precision}, answered through {path}")
  name = f"{config.export_dir} ({qa.serving_precision}, {path}):"
  if reference is not None:
    disagreements = [q for q in examples if predictions[q[0]] != reference[q[0]]]
    kinds = {"float noise": 0, "other": 0} if use_serve_text else {}
    for shown, (qid, question, context) in enumerate(disagreements):
      got = served[qid]
      if use_serve_text:
        alone = qa.answer_with_serve_features(question, context)
        kind = "float noise" if alone.text == got.text else "other"
        kinds[kind] += 1
        detail = f" [{kind}]; Python path alone {alone.text!r} ({alone.score:.6f})"
      else:
        if shown >= config.show:
          break
        detail = ""
      if shown < config.show:
        print(f"  {qid}: {path} {got.text!r} ({got.score:.6f}) vs {config.predictions_file} "
              f"{reference[qid]!r}{detail}")
    same = len(examples) - len(disagreements)
    print(f"identical answers: {same} ({100.0 * same / max(len(examples), 1):.2f}%); "
          f"different: {len(disagreements)}{' ' + str(kinds) if kinds else ''}")
    reference = {qid: reference[qid] for qid, _, _ in examples}
    width = max(len(name), len(config.predictions_file) + 1) + 1
    print(f"{config.predictions_file + ':':{width}s}{_scores(dataset, reference, version_2)}")
    print(f"{name:{width}s}{_scores(dataset, predictions, version_2)}")
  else:
    print(f"{name} {_scores(dataset, predictions, version_2)}")
  print(f"{path}: {elapsed:.1f} s, {len(examples) / elapsed:.1f} questions/s at batch "
        f"{config.batch_size} (wall time, whatever else runs on the machine)")


if __name__ == "__main__":
  settings.define_flags(AgreementConfig)
  command_line.run(main)
