r"""TensorFlow's `saved_model_cli`, with the tensorflow-text ops registered.

  python -m tools.saved_model_cli run --dir export --tag_set serve \
      --signature_def serving_default \
      --input_exprs 'question=["When was the bridge painted?"];context=["It was painted in 1932."]'

The stock `saved_model_cli run` executes the graph in a process that never imports tensorflow_text,
so loading a SavedModel with the raw-text signature fails with "Op type not registered
'FastWordpieceTokenizeWithOffsets'" (or 'NormalizeUTF8'). This wrapper
imports tensorflow_text (which registers its ops) and then runs saved_model_cli unchanged, with the
same arguments. `saved_model_cli show` needs no wrapper.
"""

import sys

import tensorflow_text  # noqa: F401  (registers the ops)
from tensorflow.python.tools import saved_model_cli

if __name__ == "__main__":
  sys.argv[0] = "saved_model_cli"
  sys.exit(saved_model_cli.main())
