"""A quiet console: TensorFlow's and its libraries' log lines cut to what a user can act on.

Without it, TensorFlow's C++ notices (no CUDA driver, oneDNN on, CPU instructions, `failed call
to cuInit`) and the INFO lines of TensorFlow, tf-models-official and orbit, some twice, bury a
command's own lines. Importing this module, before anything imports tensorflow, makes the commands
quiet by default:

- `TF_CPP_MIN_LOG_LEVEL` (read once, when TensorFlow's library loads) defaults to 2, which hides the
  C++ runtime's INFO and WARNING lines. On a machine without an NVIDIA driver it defaults to 3,
  which also hides ERROR lines: there the ones TensorFlow prints are its CUDA probe (`failed call
  to cuInit`) and fallback notices (oneDNN's "supports DT_INT64 only on platforms with AVX-512"),
  while an error that stops a run still reaches Python as an exception with its message. A GPU is
  never hidden: the level only filters log lines, and `--gpu` finds a GPU as before. A value the
  user set always wins.
- Python-side, absl's handler is put on the root logger now, before TensorFlow's logger is first
  used: TensorFlow gives its `tensorflow` logger a handler of its own only when the root logger
  has none, and that handler printed each TensorFlow line a second time ("INFO:tensorflow:...").
- absl's handler keeps WARNING and above from everyone, but INFO and below only from this
  project's own modules (the plan, batch, strategy, restore, score and export lines). orbit also
  `print`s each of its controller lines (progress per loop, "restoring or initializing model...")
  besides logging it; dropping the logged copy leaves each line once.
- stdout is line-buffered, so those printed lines reach a file or a pipe (`| tee train.log`, a job
  scheduler's log) when they happen and in order with the log lines on stderr, not in blocks of
  8 KB (Python buffers a stdout that is not a terminal).

Everything comes back with `SQUAD_QA_VERBOSE=1` in the environment (C++ level left at TensorFlow's
default, every Python log line kept), or, for the Python lines only, with absl's `--verbosity=1`
(`-v 1`): the C++ level was set when this module loaded, before any flag is parsed.
"""

import ctypes
import functools
import logging
import os
import sys

from absl import logging as absl_logging

# Set to anything but "", "0" or "false", it keeps every log line (read when this module loads).
VERBOSE_ENV = "SQUAD_QA_VERBOSE"
# TensorFlow's C++ log level variable: 0 all lines, 1 no INFO, 2 no WARNING either, 3 no ERROR.
LOG_LEVEL_ENV = "TF_CPP_MIN_LOG_LEVEL"
QUIET_LEVEL = "2"
QUIET_LEVEL_WITHOUT_GPU_DRIVER = "3"

# The kernel module's folder of the NVIDIA driver (also mounted into GPU containers), and the
# driver library TensorFlow loads (the one way to find it under WSL2, which has no such folder).
_NVIDIA_DRIVER_FOLDER = "/proc/driver/nvidia"
_CUDA_DRIVER_LIBRARY = "libcuda.so.1"
# This package's folder: INFO lines logged by files under it are the project's own.
_PACKAGE_DIR = os.path.dirname(os.path.realpath(os.path.dirname(__file__)))


def verbose_from_environment(environ=os.environ):
  """True when `SQUAD_QA_VERBOSE` in `environ` (a mapping of str) asks for every log line."""
  return environ.get(VERBOSE_ENV, "").strip().lower() not in ("", "0", "false")


def cpp_log_level_to_set(environ=os.environ, nvidia_driver=None):
  """The `TF_CPP_MIN_LOG_LEVEL` to put into `environ`, or None to leave it as it is.

  Args:
    environ: the environment (a mapping of str).
    nvidia_driver: whether the machine has an NVIDIA driver; None: `has_nvidia_driver()`.

  Returns:
    None when the user set the level or asked for verbose logs, else `QUIET_LEVEL` with an NVIDIA
    driver and `QUIET_LEVEL_WITHOUT_GPU_DRIVER` without one (a str).
  """
  if LOG_LEVEL_ENV in environ or verbose_from_environment(environ):
    return None
  if nvidia_driver is None:
    nvidia_driver = has_nvidia_driver()
  return QUIET_LEVEL if nvidia_driver else QUIET_LEVEL_WITHOUT_GPU_DRIVER


def has_nvidia_driver():
  """True when this machine has an NVIDIA driver, i.e. TensorFlow's CUDA probe can succeed."""
  if os.path.isdir(_NVIDIA_DRIVER_FOLDER):
    return True
  try:
    ctypes.CDLL(_CUDA_DRIVER_LIBRARY)
  except OSError:
    return False
  return True


@functools.lru_cache(maxsize=None)
def is_project_file(path):
  """True when the source file `path` (a log record's `pathname`) is one of this project's.

  A file counts when it sits in the package's folder or in one of its Python packages (a folder
  with `__init__.py`), so a virtualenv inside a clone does not.
  """
  relative = os.path.relpath(os.path.realpath(path), _PACKAGE_DIR)
  if relative.startswith(os.pardir + os.sep) or os.path.isabs(relative):
    return False
  top = relative.split(os.sep)[0]
  return top == relative or os.path.isfile(os.path.join(_PACKAGE_DIR, top, "__init__.py"))


class ProjectInfoFilter(logging.Filter):
  """Passes WARNING and above, INFO and below only from this project's files.

  Everything passes when `verbose` (`SQUAD_QA_VERBOSE`) or when absl's verbosity is DEBUG or more.
  """

  def __init__(self, verbose=False):
    super().__init__()
    self.verbose = verbose

  def filter(self, record):
    if record.levelno >= logging.WARNING or self.verbose:
      return True
    # absl's --verbosity=1 (-v 1) is parsed after this module loads, so it is read per record.
    if absl_logging.get_verbosity() >= absl_logging.DEBUG:
      return True
    return is_project_file(record.pathname)


def apply():
  """Sets the C++ log level, installs absl's handler with `ProjectInfoFilter` (once) and makes
  stdout line-buffered.

  Returns:
    What could not take effect because tensorflow was already imported: [`LOG_LEVEL_ENV`] when
    this call set it (TensorFlow has read it already), else [] (as intended, this runs first).
  """
  level = cpp_log_level_to_set()
  if level is not None:
    os.environ[LOG_LEVEL_ENV] = level
  # Before TensorFlow's logger is first used, so that it gets no handler of its own.
  absl_logging.use_absl_handler()
  handler = absl_logging.get_absl_handler()
  if not any(isinstance(f, ProjectInfoFilter) for f in handler.filters):
    handler.addFilter(ProjectInfoFilter(verbose_from_environment()))
  reconfigure = getattr(sys.stdout, "reconfigure", None)  # absent on some replaced stdouts
  if reconfigure is not None:
    reconfigure(line_buffering=True)
  return [LOG_LEVEL_ENV] if level is not None and "tensorflow" in sys.modules else []


apply()
