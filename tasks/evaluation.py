"""Prediction over the eval shards and SQuAD scoring (one device): predictions.json and
eval_results.json."""

import collections
import os
import time
import weakref

from absl import logging
import tensorflow as tf

from squad_qa.base import artifacts
from squad_qa.base import progress as progress_lib
from squad_qa.model import span_model
from squad_qa.postprocess import span_decoding
from squad_qa.postprocess import squad_scoring
from squad_qa.preprocess import records
from squad_qa.preprocess import squad_reader
from squad_qa.errors import UsageError

# One traced prediction step per model, kept while the model lives: every later `predict` of that
# model (train.py's evaluations, a benchmark's passes) reuses its one trace instead of building and
# optimizing the model's graph again. The step takes every batch shape from the start: eval batches
# vary in width, and the last one in size.
_PREDICT_STEPS = weakref.WeakKeyDictionary()
_PREDICT_INPUTS = dict(zip(span_model.MODEL_INPUTS, span_model.input_signature()))


def predict_step(model):
  """`model`'s prediction (training=False) as a tf.function of int32 [batch, seq] encoder inputs
  of any shape, traced once: the same function for every call with this model."""
  if model not in _PREDICT_STEPS:
    held = weakref.ref(model)  # the step must not keep the model (its key) alive
    _PREDICT_STEPS[model] = tf.function(lambda inputs: held()(inputs, training=False),
                                        input_signature=[_PREDICT_INPUTS])
  return _PREDICT_STEPS[model]


def predict(model, dataset, total_windows=None, what="predicting"):
  """Runs the model over eval batches of any width, showing progress (`what`, e.g. "predicting")
  out of `total_windows`.

  Returns:
    {example index: [span_decoding.WindowLogits, ...]} in window order (by unique_id, whatever
    order the batches came in).
  """
  step = predict_step(model)
  windows = collections.defaultdict(list)
  progress = progress_lib.Progress(what, total_windows, "windows")
  for batch in dataset:
    start_logits, end_logits = step(span_model.model_inputs(batch))
    arrays = {k: v.numpy() for k, v in batch.items()}
    start_logits, end_logits = start_logits.numpy(), end_logits.numpy()
    for i, example_index in enumerate(arrays["example_index"]):
      windows[int(example_index)].append(
          (int(arrays["unique_ids"][i]),
           span_decoding.real_window(start_logits[i], end_logits[i], arrays["token_start_char"][i],
                                     arrays["token_end_char"][i], arrays["token_is_max_context"][i],
                                     arrays["input_mask"][i])))
    progress.update(len(arrays["example_index"]))
  progress.finish()
  return {
      index: [w for _, w in sorted(found, key=lambda pair: pair[0])]
      for index, found in windows.items()
  }


class DevScorer:
  """Predicts the first `max_eval_examples` questions of the eval shards and scores them with the
  official SQuAD scorer; reads and checks the files once, to score many models.

  Args:
    records_dir, meta: the records folder and its meta.json (dict).
    predict_file: the SQuAD JSON the eval records were made from, checked by
      `run_inputs.check_predict_file` (train.py before training).
    predict_batch_size: windows per prediction batch.
    decoding: the `span_decoding.DecodingSettings`.
    max_eval_examples: score only the first N questions (None: all).

  Raises:
    UsageError: the file has unanswerable questions without --version_2_with_negative.
  """

  def __init__(self, records_dir, meta, predict_file, predict_batch_size, decoding,
               max_eval_examples=None):
    version_2_with_negative = decoding.version_2_with_negative
    eval_meta = meta["splits"][records.EVAL_SPLIT]
    dataset_json = squad_reader.load_json(predict_file)
    unanswered = [] if version_2_with_negative else squad_scoring.unanswerable_questions(
        dataset_json)
    if unanswered:  # make_records refuses such a file (squad_reader's `scored`); older records
      raise UsageError(f"--predict_file={predict_file} has {len(unanswered)} questions without "
                       f"answers (the first: {unanswered[0]}), which SQuAD 1.1 cannot score; add "
                       f"their answers or remove them and make the records again")
    self.squad = squad_reader.read_squad(predict_file, is_training=False,
                                         version_2_with_negative=version_2_with_negative)
    self.paths = records.shard_paths(records_dir, meta, records.EVAL_SPLIT)
    self.max_seq_length = meta["flags"]["max_seq_length"]
    self.total_windows = (eval_meta["num_features"] if max_eval_examples is None else
                          records.count_eval_windows(self.paths, max_eval_examples))
    # Questions without windows (no context tokens) are scored as "", as SQuAD v1.1's scorer does.
    self.ids = squad_scoring.question_ids(dataset_json, max_eval_examples)
    if max_eval_examples is not None:
      dataset_json = squad_scoring.restrict_to_questions(dataset_json, set(self.ids))
    self.dataset_json = dataset_json
    self.predict_batch_size, self.max_eval_examples = predict_batch_size, max_eval_examples
    self.decoding = decoding

  def score(self, model, nbest=False):
    """Predicts and scores `model`.

    Returns:
      (results, final): the official scorer's figures (v1.1: exact_match, f1; v2.0: exact, f1,
      HasAns_*, NoAns_*, best_*) plus n_best_size, max_answer_length and predict_seconds; and
      the `span_decoding.final_predictions` (texts by question id, null_odds; with `nbest`, the
      n-best lists).
    """
    started = time.time()
    results, final = self.score_windows(self.predict(model), nbest)
    results["predict_seconds"] = time.time() - started
    return results, final

  def dataset(self):
    """The eval batches scored (records.eval_dataset: trimmed, pools sorted by length)."""
    return records.eval_dataset(self.paths, self.max_seq_length, self.predict_batch_size,
                                self.max_eval_examples)

  def predict(self, model):
    """`predict(model, self.dataset())`: {example index: [WindowLogits, ...]}."""
    return predict(model, self.dataset(), self.total_windows)

  def score_windows(self, windows, nbest=False):
    """Decodes and scores the windows of `predict`; returns (results, final) as `score`, without
    predict_seconds."""
    squad, decoding = self.squad, self.decoding
    contexts = {i: squad.contexts[squad.examples[i].paragraph_index] for i in windows}
    answers = span_decoding.decode_all(windows, contexts, decoding.n_best_size,
                                       decoding.max_answer_length)
    final = span_decoding.final_predictions(self.ids, {
        squad.examples[i].qas_id: answer for i, answer in answers.items()
    }, decoding.version_2_with_negative, decoding.null_score_diff_threshold)
    if nbest:
      lists = {
          squad.examples[i].qas_id: span_decoding.nbest_answers(
              w, contexts[i], decoding.n_best_size, decoding.max_answer_length,
              decoding.version_2_with_negative) for i, w in windows.items()
      }
      final.nbest = {qid: lists.get(qid) or span_decoding.nbest_answers([], "") for qid in self.ids}
    if decoding.version_2_with_negative:
      results = squad_scoring.score_v2(self.dataset_json, final.texts, final.null_odds,
                                       final.best_non_null)
      results["null_score_diff_threshold"] = decoding.null_score_diff_threshold
    else:
      results = squad_scoring.score_v1(self.dataset_json, final.texts)
    results.update(n_best_size=decoding.n_best_size, max_answer_length=decoding.max_answer_length)
    return results, final


def evaluate(model, records_dir, meta, predict_file, model_dir, predict_batch_size, decoding,
             max_eval_examples=None):
  """`score_and_write` of a `DevScorer` of these arguments: the scores, also written to
  `model_dir`.

  Raises:
    UsageError: as `DevScorer`.
  """
  scorer = DevScorer(records_dir, meta, predict_file, predict_batch_size, decoding,
                     max_eval_examples)
  return score_and_write(scorer, model, model_dir)


def all_null_hint(results, threshold):
  """What a SQuAD 2.0 scoring (`results`, the official scorer's with best_*) that answered every
  question "" under `threshold` (null_score_diff_threshold, logits) means, in one line."""
  said = (f"every question was answered \"\" (no answer): each null score beat the best span by "
          f"more than --null_score_diff_threshold={threshold:g}")
  if results["best_f1"] > results["f1"] + 0.005:
    return (f"{said}. The official scorer's best threshold on these questions is "
            f"{results['best_f1_thresh']:.3f} (F1 {results['best_f1']:.2f} against "
            f"{results['f1']:.2f}): pass it as --null_score_diff_threshold, or train longer")
  return (f"{said}, and no threshold scores better on these questions: the model prefers no "
          f"answer to any span it finds; train longer")


def score_and_write(scorer, model, model_dir):
  """`scorer.score(model)`, written to `model_dir` as predictions.json, nbest_predictions.json
  (run_squad.py's n-best lists), eval_results.json (and null_odds.json for SQuAD 2.0: each
  question's null score minus best span score; an earlier SQuAD 2.0 scoring's null_odds.json is
  removed by a SQuAD 1.1 one, so the files are of one run); returns the results."""
  results, final = scorer.score(model, nbest=True)
  null_odds_file = os.path.join(model_dir, artifacts.NULL_ODDS_FILE)
  if scorer.decoding.version_2_with_negative:
    artifacts.write_json(null_odds_file, final.null_odds)
  elif os.path.exists(null_odds_file):
    os.remove(null_odds_file)
  artifacts.write_json(os.path.join(model_dir, artifacts.PREDICTIONS_FILE), final.texts)
  artifacts.write_json(os.path.join(model_dir, artifacts.NBEST_PREDICTIONS_FILE), final.nbest)
  artifacts.write_json(os.path.join(model_dir, artifacts.EVAL_RESULTS_FILE), results)
  if scorer.decoding.version_2_with_negative and results.get("HasAns_total") and not any(
      final.texts.values()):
    logging.warning("%s", all_null_hint(results, scorer.decoding.null_score_diff_threshold))
  return results
