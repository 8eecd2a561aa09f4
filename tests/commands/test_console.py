"""What a user sees on the console: make_records -> train -> export -> ask print the project's own
lines, each once, and none of TensorFlow's or its libraries' notices; SQUAD_QA_VERBOSE=1 and absl's
--verbosity=1 bring those back (base/console.py)."""

import collections
import os
import re

import pytest

from squad_qa.base import console
from tests import testutil

# A line of TensorFlow's C++ logging: "YYYY-MM-DD hh:mm:ss.ffffff: I external/...".
CPP_LOG_LINE = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d+: ([IWEF]) ")
# absl's prefix, "I1202 01:18:28.557408 140555288148864 make_records_job.py:245] ": compared
# without it, two lines logged at different times are the same line.
ABSL_PREFIX = re.compile(r"^[IWEF]\d{4} \d\d:\d\d:\d\d\.\d+ +\d+ [^ \]]+:\d+\] ")
# Distinctive parts of the lines a CPU user used to see and cannot act on.
NOISE = (
    "cuInit",
    "Could not find cuda drivers",
    "oneDNN custom operations are",
    "This TensorFlow binary is optimized",
    "will not be optimized",
    "Sharding callback duration",
    "Start watcher for local signal",
    "PreemptionCheckpointHandler",
    "Found untraced functions",
    "Assets written to",
    "Writing fingerprint",
    "contains input name(s)",
    "INFO:tensorflow:",
    "AdamWeightDecay gradient_clip_norm",
    "Sync on async checkpoint saving",
    "Logging before flag parsing",
    "train | step:",
    "DictWrapper",
    "restoring or initializing",
)
# The lines each command must still print (its results, its settings, warnings a user acts on).
PRODUCT_LINES = {
    "records": ("read train: 24 usable questions, eval: 8 usable questions",
                "train: 24 questions -> ", "done in ", "the shards and meta.json in "),
    "train":
        ("strategy: OneDeviceStrategy, 1 replica", "precision: ", " (auto: ",
         "batch: 8 features per step = ",
         "no --init_checkpoint: the encoder starts from random weights",
         "training steps 0..2, 8 features per step", "training: 1 of 2 steps (50 %), epoch ",
         "training: 2 of 2 steps (100 %), epoch ", "trained steps 0..2: loss ",
         "SQuAD v1.1 on 8 questions of ", "exact_match = ", "done in ", " on 8 questions; in "),
    "export":
        ("exporting ", "serving max_seq_length=64 (qa_config.json)", "exported SavedModel to ",
         "signatures serving_default, serve_features, serve_examples, serve_text; ", "done in ",
         "ask it: python ask.py --export_dir="),
    "ask": ("Q: Who won the game?", "A: ", "answered 1 question in "),
}


def default_environment(**values):
  """This process's environment without the logging settings a CI sets, plus `values`."""
  env = {
      k: v for k, v in os.environ.items() if k not in (console.LOG_LEVEL_ENV, console.VERBOSE_ENV)
  }
  env.update(values)
  return env


def run_all(tmp, env):
  """make_records, train (2 steps, tiny model, scored on 8 dev questions), export, ask in `tmp`.

  Returns:
    ({command: its stdout + stderr}, the --model_dir).
  """
  train = testutil.write_squad_slice(testutil.TRAIN_FILE, tmp / "train.json", 24)
  dev = testutil.write_squad_slice(testutil.DEV_FILE, tmp / "dev.json", 8)
  config = testutil.write_tiny_config(tmp / "bert_config.json")
  records, model, export = tmp / "records", tmp / "model", tmp / "export"
  vocab = testutil.vocab_file()
  commands = {
      "records": ("preprocess/make_records.py", f"--train_file={train}", f"--predict_file={dev}",
                  f"--vocab_file={vocab}", "--max_seq_length=64", "--doc_stride=32",
                  "--max_query_length=16", "--num_shards=1", f"--output_dir={records}"),
      "train": ("train.py", f"--records_dir={records}", f"--model_dir={model}",
                f"--bert_config_file={config}", f"--vocab_file={vocab}", "--max_steps=2",
                "--train_batch_size=8", "--steps_per_loop=1", f"--predict_file={dev}",
                "--predict_batch_size=16"),
      "export": ("export.py", f"--model_dir={model}", f"--export_dir={export}"),
      "ask": ("ask.py", f"--export_dir={export}", "--question=Who won the game?",
              "--context=The Broncos won the game in Santa Clara."),
  }
  return ({
      name: testutil.run_cli(*command, env=env)[1] for name, command in commands.items()
  }, model)


@pytest.fixture(scope="module")
def quiet(tmp_path_factory):
  """The commands' outputs in the default environment, and their --model_dir."""
  return run_all(tmp_path_factory.mktemp("quiet"), default_environment())


def messages(output):
  """The non-empty lines of `output`, absl's time/thread/file prefix removed."""
  return [ABSL_PREFIX.sub("", line).strip() for line in output.splitlines() if line.strip()]


@pytest.mark.slow
@pytest.mark.parametrize("command", sorted(PRODUCT_LINES))
def test_commands_print_their_own_lines_and_no_tensorflow_notices(quiet, command):
  output = quiet[0][command]
  assert not [line for line in output.splitlines() if CPP_LOG_LINE.match(line)], output
  assert not [noise for noise in NOISE if noise in output], output
  for expected in PRODUCT_LINES[command]:
    assert expected in output, (expected, output)


@pytest.mark.slow
@pytest.mark.parametrize("command", sorted(PRODUCT_LINES))
def test_no_line_is_printed_twice(quiet, command):
  """No exception is needed: each of the project's lines names what it is about (the step, the
  split, the shard range), and orbit's lines, which it both prints and logs, print once."""
  output = quiet[0][command]
  counts = collections.Counter(messages(output))
  assert not {line: n for line, n in counts.items() if n > 1}, output


@pytest.mark.slow
def test_verbose_environment_brings_every_line_back(tmp_path, quiet):
  """SQUAD_QA_VERBOSE=1: TensorFlow's C++ INFO lines and the Python INFO lines of TensorFlow, e.g.
  the SavedModel's "Assets written to" (the vocab asset; --serve_text=false: a quicker export
  through the same console setup)."""
  output = testutil.run_cli("export.py", f"--model_dir={quiet[1]}",
                            f"--export_dir={tmp_path / 'export'}", "--serve_text=false",
                            env=default_environment(**{console.VERBOSE_ENV: "1"}))[1]
  levels = [m.group(1) for m in map(CPP_LOG_LINE.match, output.splitlines()) if m]
  assert "I" in levels, output  # e.g. "oneDNN custom operations are on"
  assert "Assets written to" in output and "exported SavedModel to " in output


@pytest.mark.slow
def test_verbosity_flag_brings_the_python_lines_back(tmp_path, quiet):
  """--verbosity=1 is parsed after base/console.py has set the C++ level: the Python INFO lines
  come back, the C++ level stays quiet (README: the environment variable is the switch for
  those). --serve_text=false: a quicker export, the same vocab asset and console setup."""
  output = testutil.run_cli("export.py", f"--model_dir={quiet[1]}",
                            f"--export_dir={tmp_path / 'export'}", "--serve_text=false",
                            "--verbosity=1", env=default_environment())[1]
  assert "Assets written to" in output and "exported SavedModel to " in output
  assert not [line for line in output.splitlines() if CPP_LOG_LINE.match(line)], output
