r"""Answers questions about one passage with a SavedModel written by export.py.

  python ask.py --export_dir=export --question="Who won?" --question="Where?" \
      --context="The Broncos won the game in Santa Clara."

By default it calls the SavedModel's raw-text `serving_default` signature (serve_text):
tokenization, windowing and span decoding run inside the graph. With --use_serve_features (and
automatically for SavedModels exported without serve_text) it tokenizes and windows the question and
passage in Python exactly as preprocessing does (vocab and settings come from the SavedModel), calls
`serve_features` and decodes the best span over all windows. Prints each answer with its character
offsets, score (start + end logit) and time, or "no answer" with why (a SQuAD 2.0 null answer);
--format=json prints a JSON object a question instead.
"""

import json

from squad_qa.base import cpu_runtime  # noqa: F401  (must precede tensorflow)
from squad_qa.base import console  # noqa: F401  (must precede tensorflow)

from squad_qa.flags import command_line
from squad_qa.flags import settings
from squad_qa.serving import ask_config

settings.define_flags(ask_config.AskConfig)


def main(argv):
  """Prints each answer of the flags' questions with its score and time, then a summary line."""
  del argv
  config = command_line.config_from_flags(ask_config.AskConfig)
  context = ask_config.passage(config)
  # Imported after the flags parse and the passage is read, so --help, flag errors and a bad
  # --context_file do not wait for TensorFlow.
  from squad_qa.serving import saved_model_qa  # pylint: disable=g-import-not-at-top
  answers, load_seconds = saved_model_qa.answer_questions(config, context)
  if config.format == "json":
    for question, answer, seconds in answers:
      print(json.dumps(saved_model_qa.answer_record(question, answer, seconds), ensure_ascii=False))
    return
  for question, answer, seconds in answers:
    print(f"Q: {question}")
    print(saved_model_qa.answer_line(answer, seconds))
  print(f"answered {len(answers)} question{'s' if len(answers) > 1 else ''} in "
        f"{sum(seconds for _, _, seconds in answers):.2f} s (the export loaded and warmed up in "
        f"{load_seconds:.2f} s)")


def cli():
  """Console-script entry point: parses the flags and runs main()."""
  command_line.run(main, after_interrupt=None)  # it writes nothing: nothing to say of its files


if __name__ == "__main__":
  cli()
