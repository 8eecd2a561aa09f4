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


def test_the_summary_names_time_steps_rate_scores_and_outputs():
  stats = {
      "steps": 320,
      "start_step": 0,
      "end_step": 320,
      "effective_batch_size": 16,
      "train_seconds": 400.0,
      "loss": 1.23456
  }
  results = {"exact_match": 51.7, "f1": 61.1825, "num_questions": 1000}
  assert train_and_evaluate.summary_line(512.4, stats, results, "out/model") == (
      "done in 8 min 32 s; trained steps 0..320 in 6 min 40 s (12.8 examples/s, final loss "
      "1.2346); EM 51.70 / F1 61.18 on 1,000 questions; in out/model: checkpoints, "
      "qa_config.json, predictions.json, eval_results.json, TensorBoard logs "
      "(tensorboard --logdir=out/model)")
  v2 = {"exact": 50.0, "f1": 52.5, "total": 11873}
  assert train_and_evaluate.summary_line(
      3.0, None, v2,
      "m") == ("done in 3 s; exact 50.00 / F1 52.50 on 11,873 questions; in m: checkpoints, "
               "qa_config.json, predictions.json, eval_results.json")
  nothing_left = {"steps": 0, "start_step": 320, "end_step": 320}
  assert train_and_evaluate.summary_line(2.0, nothing_left, None, "m") == (
      "done in 2 s; in m: checkpoints, qa_config.json, TensorBoard logs (tensorboard --logdir=m)")
