"""benchmarks/prediction_throughput.py: a --model_dir without a trained model is refused in one
line."""

import pytest

from tests import testutil


@pytest.mark.slow  # starts the command
def test_a_model_dir_without_a_trained_model_is_refused(tmp_path):
  records = testutil.make_train_records(tmp_path, 4, dev_questions=4)
  (tmp_path / "model").mkdir()
  code, output = testutil.run_cli("-m benchmarks.prediction_throughput", f"--records_dir={records}",
                                  f"--model_dir={tmp_path / 'model'}",
                                  f"--predict_file={tmp_path / 'dev.json'}", expect_ok=False)
  assert code == 1
  assert output.strip().splitlines()[-1] == (
      f"benchmarks.prediction_throughput: --model_dir={tmp_path / 'model'} holds no trained "
      f"checkpoint with its qa_config.json; train one with python train.py first")
