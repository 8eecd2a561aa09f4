r"""Fine-tunes a BERT encoder for SQuAD span prediction, then predicts and scores the dev set.

  python train.py --records_dir=records --model_dir=model_out \
      --init_checkpoint=<HF BERT folder, google-research TF1 or tfm TF2 checkpoint> [--gpu] \
      [--distribution_strategy=one_device|mirrored|multi_worker_mirrored|tpu]

It checks the inputs, plans the run (steps, batch, precision), trains with checkpoints, then
predicts and scores the dev set, writing train_results.json, predictions.json and
eval_results.json into --model_dir. The same command resumes from the last checkpoint there.
"""
# The flags are the fields of tasks.train_config.TrainConfig; tasks/train_and_evaluate.py runs it.

import os
import re

from absl import flags

from squad_qa.base import cpu_runtime  # noqa: F401  (must precede tensorflow)
from squad_qa.base import console  # noqa: F401  (must precede tensorflow)
from squad_qa.base import artifacts
from squad_qa.base import native_log
from squad_qa.base import progress
from squad_qa.flags import command_line
from squad_qa.flags import settings
from squad_qa.tasks import train_config

settings.define_flags(train_config.TrainConfig)


def main(argv):
  del argv
  config = command_line.config_from_flags(train_config.TrainConfig)
  # Imported after the flags parse, so --help and flag errors do not wait for TensorFlow.
  from squad_qa.tasks import train_and_evaluate as train_lib  # pylint: disable=g-import-not-at-top
  native_log.cpp_log_level_to_absl()  # XLA's lines (--xla) follow TF_CPP_MIN_LOG_LEVEL too
  train_lib.train_and_evaluate(config, started_seconds_ago=progress.seconds_since_process_start())


def after_interrupt():
  """What a Ctrl-C leaves: the checkpoint the same command resumes from, or none yet. Reads the
  checkpoint state file without TensorFlow, which the interrupt may have stopped mid-call."""
  model_dir = flags.FLAGS["model_dir"].value or ""
  state = os.path.join(model_dir, artifacts.CHECKPOINT_STATE_FILE)
  if "://" in model_dir:
    return "the checkpoints in --model_dir are kept; the same command resumes from the last one"
  latest = None
  if os.path.isfile(state):
    with open(state, encoding="utf-8") as f:
      found = re.search(r'^model_checkpoint_path: "(.*)"$', f.read(), re.MULTILINE)
    if found:
      latest = os.path.join(model_dir, found.group(1))
  if not flags.FLAGS["do_train"].value:  # predicting alone: nothing was trained or saved
    return "the checkpoints are as they were; the same command predicts again"
  if latest and os.path.exists(latest + ".index"):
    return f"{latest} is kept; the same command resumes from it"
  return f"no checkpoint was saved in --model_dir={model_dir} yet; the same command starts over"


def cli():
  """Console-script entry point: parses the flags and runs main()."""
  command_line.run(main, after_interrupt=after_interrupt,
                   terminated_exit_status=command_line.PREEMPTED_EXIT_STATUS)


if __name__ == "__main__":
  cli()
