"""serving/export_config.py: the settings export.py refuses before any work."""

import pytest

from squad_qa import errors
from squad_qa.serving import export_config


def test_serve_text_typed_with_int8_is_refused_and_int8_alone_is_not():
  with pytest.raises(errors.UsageError) as error:
    export_config.ExportConfig(serving_precision="int8", serve_text=True,
                               typed_flags=("serving_precision", "serve_text"))
  assert str(error.value).startswith("--serve_text with --serving_precision=int8: an int8 export "
                                     "has no serve_text")
  # Not typed, the default stands (an int8 export simply writes none); typed false says the same.
  untyped = export_config.ExportConfig(serving_precision="int8", typed_flags=("serving_precision",))
  assert untyped.serve_text is True
  typed_false = export_config.ExportConfig(serving_precision="int8", serve_text=False,
                                           typed_flags=("serving_precision", "serve_text"))
  assert typed_false.serve_text is False


def test_window_batch_size_typed_with_int8_is_refused():
  """An int8 export runs each window alone: serve_text's windows per call would change nothing."""
  with pytest.raises(errors.UsageError) as error:
    export_config.ExportConfig(serving_precision="int8", window_batch_size=4,
                               typed_flags=("serving_precision", "window_batch_size"))
  assert str(error.value) == (
      "--window_batch_size=4 with --serving_precision=int8: it sets serve_text's windows per "
      "model call, and an int8 export runs each window alone; drop it")
  assert export_config.ExportConfig(window_batch_size=4).window_batch_size == 4  # float32
