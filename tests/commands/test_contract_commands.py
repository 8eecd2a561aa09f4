"""The contract through the commands: what train.py scored with is what export.py serves, and a
refused setting or vocab is one line, exit 1, with nothing overwritten."""

import json

import pytest

from tests import testutil
from tests.tasks import test_contract


@pytest.mark.slow
def test_the_scored_settings_are_served_and_mismatches_overwrite_nothing(tmp_path):
  dev_file = testutil.write_squad_slice(testutil.DEV_FILE, tmp_path / "dev.json", 8)
  train_file = testutil.write_squad_slice(testutil.TRAIN_FILE, tmp_path / "train.json", 16)
  records_dir, model_dir, export_dir = (tmp_path / "records", tmp_path / "model",
                                        tmp_path / "export")
  testutil.run_cli("preprocess/make_records.py", f"--train_file={train_file}",
                   f"--predict_file={dev_file}", f"--vocab_file={testutil.vocab_file()}",
                   "--max_seq_length=96", "--doc_stride=48", "--max_query_length=24",
                   f"--output_dir={records_dir}")
  testutil.run_cli("train.py", f"--records_dir={records_dir}", f"--model_dir={model_dir}",
                   f"--bert_config_file={testutil.write_tiny_config(tmp_path / 'config.json')}",
                   "--max_steps=2", "--train_batch_size=8", f"--predict_file={dev_file}",
                   "--n_best_size=5", "--max_answer_length=2")
  qa_config = json.loads((model_dir / "qa_config.json").read_text())
  assert (qa_config["n_best_size"], qa_config["max_answer_length"]) == (5, 2)
  assert qa_config["vocab_size"] == 30522 and len(qa_config["vocab_sha256"]) == 64
  eval_results = (model_dir / "eval_results.json").read_bytes()
  assert json.loads(eval_results)["max_answer_length"] == 2

  # A setting no prediction can use: one line, exit 1, eval_results.json as it was.
  code, log = testutil.run_cli("train.py", f"--records_dir={records_dir}",
                               f"--model_dir={model_dir}", "--do_train=false",
                               f"--predict_file={dev_file}", "--max_answer_length=0",
                               expect_ok=False)
  assert code == 1 and "Traceback" not in log
  assert log.splitlines()[-1] == ("train.py: --max_answer_length=0: must be at least 1 (below that "
                                  "no span can be an answer, and every prediction would be empty)")
  assert (model_dir / "eval_results.json").read_bytes() == eval_results

  # export.py serves what was scored, and says where each setting came from.
  _, log = testutil.run_cli("export.py", f"--model_dir={model_dir}", f"--export_dir={export_dir}")
  assert ("serving max_seq_length=96 (qa_config.json), doc_stride=48 (qa_config.json), "
          "max_query_length=24 (qa_config.json), do_lower_case=True (qa_config.json), "
          "n_best_size=5 (qa_config.json), max_answer_length=2 (qa_config.json)") in log
  served = json.loads((export_dir / "assets.extra" / "qa_config.json").read_text())
  assert (served["n_best_size"], served["max_answer_length"]) == (5, 2)
  assert served["vocab_sha256"] == qa_config["vocab_sha256"]

  # Another vocab at export: one line, exit 1, the export as it was.
  saved_model = (export_dir / "saved_model.pb").read_bytes()
  other = test_contract.extended_vocab(tmp_path)
  code, log = testutil.run_cli("export.py", f"--model_dir={model_dir}",
                               f"--export_dir={export_dir}", f"--vocab_file={other}",
                               expect_ok=False)
  assert code == 1 and "Traceback" not in log
  assert log.splitlines()[-1].startswith(f"export.py: --vocab_file={other} (SHA-256 ")
  assert (export_dir / "saved_model.pb").read_bytes() == saved_model
