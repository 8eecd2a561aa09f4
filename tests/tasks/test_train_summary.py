"""train.py's one-line accounts: the padded lengths, and the summary at the end of the command."""

from squad_qa.tasks import run_plan
from squad_qa.tasks import train_and_evaluate


def test_padded_lengths_in_a_few_words():
  assert [
      run_plan.describe_lengths(lengths)
      for lengths in ((384,), (8, 16), (8, 16, 24), tuple(range(8, 392, 8)), (8, 16, 384, 512))
  ] == [
      "384 tokens", "8 and 16 tokens", "8, 16 and 24 tokens",
      "48 buckets, 8..384 tokens in steps of 8", "4 buckets, 8..512 tokens"
  ]


def _model_dir(folder, *names):
  """`folder` holding the files `names` (empty), as a str."""
  folder.mkdir()
  for name in names:
    (folder / name).write_text("")
  return str(folder)


def test_the_summary_names_time_steps_rate_scores_and_outputs(tmp_path):
  stats = {
      "steps": 320,
      "start_step": 0,
      "end_step": 320,
      "effective_batch_size": 16,
      "train_seconds": 400.0,
      "loss": 1.23456,
      "loss_steps": [301, 320]
  }
  results = {"exact_match": 51.7, "f1": 61.1825, "num_questions": 1000}
  model = _model_dir(tmp_path / "model", "checkpoint", "qa_config.json", "predictions.json",
                     "nbest_predictions.json", "eval_results.json")
  assert train_and_evaluate.summary_line(512.4, stats, results, model) == (
      f"done in 8 min 32 s; trained steps 0..320 in 6 min 40 s (12.8 examples/s, loss 1.2346 "
      f"over steps 301..320); EM 51.70 / F1 61.18 on 1,000 questions; in {model}: checkpoints, "
      f"qa_config.json, predictions.json, nbest_predictions.json, eval_results.json, TensorBoard "
      f"logs "
      f"(tensorboard --logdir={model})")
  with_curve = dict(stats, train_seconds=200.0, scoring_seconds=75.0)
  assert train_and_evaluate.summary_line(400.0, with_curve, None, model).startswith(
      "done in 6 min 40 s; trained steps 0..320 in 3 min 20 s (25.6 examples/s, loss 1.2346 over "
      "steps 301..320) and 1 min 15 s scoring the learning curve; ")
  v2 = {"exact": 50.0, "f1": 52.5, "total": 11873}
  assert train_and_evaluate.summary_line(3.0, None, v2, model) == (
      f"done in 3 s; exact 50.00 / F1 52.50 on 11,873 questions; in {model}: checkpoints, "
      f"qa_config.json, predictions.json, nbest_predictions.json, eval_results.json")
  nothing_left = {"steps": 0, "start_step": 320, "end_step": 320, "learning_curve": True}
  assert train_and_evaluate.summary_line(
      2.0, nothing_left, None,
      model) == (f"done in 2 s; in {model}: checkpoints, qa_config.json, TensorBoard logs "
                 f"(tensorboard --logdir={model})")


def test_the_summary_names_only_the_outputs_that_are_there(tmp_path):
  """Predicting from --init_checkpoint writes no checkpoint and no qa_config.json; a learning
  curve that scored nothing writes no file: neither is named."""
  results = {"exact_match": 50.0, "f1": 60.0, "num_questions": 5}
  model = _model_dir(tmp_path / "model", "predictions.json", "eval_results.json")
  assert train_and_evaluate.summary_line(
      3.0, None, results,
      model) == (f"done in 3 s; EM 50.00 / F1 60.00 on 5 questions; in {model}: predictions.json, "
                 f"eval_results.json")
  assert train_and_evaluate.summary_line(3.0, None, None, str(tmp_path / "none")) == "done in 3 s"
