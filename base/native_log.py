"""Native libraries' log lines that TensorFlow's log level does not reach: held back, or given that
level (no side effects on import, so the Python API may use it)."""

import contextlib
import ctypes
import os
import sys
import tempfile

import squad_qa

# absl's C++ `absl::SetMinLogLevel(absl::LogSeverityAtLeast)` as TensorFlow 2.20's framework
# library exports it; the name carries the absl release (LTS 2025-01-27) TensorFlow was built with.
ABSL_SET_MIN_LOG_LEVEL = "_ZN4absl12lts_2025012714SetMinLogLevelENS0_18LogSeverityAtLeastE"
TENSORFLOW_FRAMEWORK_LIBRARY = "libtensorflow_framework.so.2"


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


def cpp_log_level_to_absl(environ=os.environ):
  """Gives absl's C++ logging in TensorFlow's framework library the level `environ` sets in
  `TF_CPP_MIN_LOG_LEVEL` (0 INFO, 1 WARNING, 2 ERROR, 3 FATAL: absl's severities, same numbers).

  XLA logs through absl, which reads no environment variable, and TensorFlow never calls
  absl::InitializeLog, so without this a command's first compiled step (--xla) prints
  "WARNING: All log messages before absl::InitializeLog() is called are written to STDERR" and
  "I0000 ... device_compiler.h:196] Compiled cluster using XLA!" at any TF_CPP_MIN_LOG_LEVEL.
  Call it after `import tensorflow`.

  Returns:
    The level set (int), or None: the variable unset (SQUAD_QA_VERBOSE) or not a level,
    TensorFlow not imported, or the library or its function not found (another TensorFlow release
    or platform; those lines then show as before).
  """
  try:
    level = int(environ.get(squad_qa.LOG_LEVEL_ENV, ""))
  except ValueError:
    return None
  tensorflow = sys.modules.get("tensorflow")
  if tensorflow is None or not 0 <= level <= 3:
    return None
  path = os.path.join(os.path.dirname(tensorflow.__file__), TENSORFLOW_FRAMEWORK_LIBRARY)
  try:  # RTLD_NOLOAD: the copy TensorFlow loaded, never a second one
    library = ctypes.CDLL(path, mode=os.RTLD_NOLOAD | os.RTLD_LAZY)
    set_min_log_level = getattr(library, ABSL_SET_MIN_LOG_LEVEL)
  except (OSError, AttributeError):
    return None
  set_min_log_level.argtypes, set_min_log_level.restype = [ctypes.c_int], None
  set_min_log_level(level)
  return level
