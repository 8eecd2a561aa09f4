"""Native libraries' log lines that no log level reaches, held back (no side effects on import,
so the Python API may use it)."""

import contextlib
import os
import sys
import tempfile

import squad_qa


@contextlib.contextmanager
def native_stderr_held_back(verbose=None):
  """Holds back what native code writes to file descriptor 2 inside the block, for libraries
  whose C++ loggers `TF_CPP_MIN_LOG_LEVEL` does not reach (the LiteRT converter's `Ignored
  output_format`, the interpreter's `Created TensorFlow Lite XNNPACK delegate`). The held lines
  are written out when the block raises, so a failure keeps its detail. `verbose` None: from
  `SQUAD_QA_VERBOSE`; true holds nothing back."""
  if verbose is None:
    verbose = squad_qa.verbose_from_environment()
  if verbose:
    yield
    return
  sys.stderr.flush()
  saved = os.dup(2)
  with tempfile.TemporaryFile() as held:
    os.dup2(held.fileno(), 2)
    try:
      yield
    except BaseException:
      os.dup2(saved, 2)
      held.seek(0)
      os.write(2, held.read())
      raise
    finally:
      os.dup2(saved, 2)
      os.close(saved)
