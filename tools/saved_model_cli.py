r"""TensorFlow's `saved_model_cli`, with the tensorflow-text ops registered.

  python -m tools.saved_model_cli run --dir export --tag_set serve \
      --signature_def serving_default \
      --input_exprs 'question=["When was the bridge painted?"];context=["It was painted in 1932."]'

The stock `saved_model_cli run` executes the graph in a process that never imports tensorflow_text,
so loading a SavedModel with the raw-text signature fails with "Op type not registered
'FastWordpieceTokenizeWithOffsets'" (or 'NormalizeUTF8'). This wrapper
imports tensorflow_text (which registers its ops) and then runs saved_model_cli unchanged, with the
same arguments. `saved_model_cli show` needs no wrapper. A --dir without a SavedModel (an int8
export is a LiteRT model) is one line, not TensorFlow's traceback.
"""

import os
import sys

from squad_qa.base import console  # noqa: F401  (must precede tensorflow)
import tensorflow as tf  # pylint: disable=g-import-not-at-top
import tensorflow_text  # noqa: F401  (registers the ops)
from tensorflow.python.tools import saved_model_cli

from squad_qa import errors
from squad_qa.base import artifacts
from squad_qa.flags import command_line
from squad_qa.serving import features_model


def dir_argument(argv):
  """The value of --dir in saved_model_cli's arguments `argv` ("--dir X" or "--dir=X"), or None."""
  for i, token in enumerate(argv):
    if token.startswith("--dir="):
      return token.split("=", 1)[1]
    if token == "--dir" and i + 1 < len(argv):
      return argv[i + 1]
  return None


def check_saved_model(directory):
  """Refuses a `directory` without a SavedModel in one line, naming an int8 export as one.

  Raises:
    errors.MissingFileError: no SavedModel in `directory`.
  """
  if tf.saved_model.contains_saved_model(directory):
    return
  if os.path.exists(os.path.join(directory, artifacts.EXPORT_EXTRA_DIR, artifacts.QA_CONFIG_FILE)):
    precision = artifacts.read_export_config(directory).get("serving_precision")
    if precision == features_model.INT8:
      raise errors.MissingFileError(
          f"--dir={directory}: an int8 export holds no SavedModel, only the LiteRT model "
          f"{features_model.INT8_MODEL_FILE}; saved_model_cli reads the float32 and bfloat16 "
          f"exports")
  raise errors.MissingFileError(f"--dir={directory}: no SavedModel there (no saved_model.pb)")


def main():
  directory = dir_argument(sys.argv[1:])
  if directory is not None:
    check_saved_model(directory)
  sys.argv[0] = "saved_model_cli"
  return saved_model_cli.main()


if __name__ == "__main__":
  sys.exit(command_line.run_argparse(main))
