"""squad_qa: fine-tune a BERT encoder on SQuAD with TensorFlow and serve it (docs/design.md).

Imported before TensorFlow, the package sets TensorFlow's C++ log level unless the caller set one
or asked for verbose logs: 1 (no INFO) with an NVIDIA driver, 3 without one, where the ERROR line
is the CUDA probe's `failed call to cuInit`; and it hides google-api-core's FutureWarning about
the Python version (`hide_python_version_warnings`). A caller of the Python API then sees no
TensorFlow start-up lines; the commands quiet more (base/console.py).
"""

import ctypes as _ctypes
import functools as _functools
import os as _os
import sys as _sys
import warnings as _warnings

# TensorFlow's C++ log level variable: 0 all lines, 1 no INFO, 2 no WARNING either, 3 no ERROR.
LOG_LEVEL_ENV = "TF_CPP_MIN_LOG_LEVEL"
# Set to anything but "", "0" or "false", it keeps every log line.
VERBOSE_ENV = "SQUAD_QA_VERBOSE"
LIBRARY_LOG_LEVEL, LIBRARY_LOG_LEVEL_WITHOUT_GPU_DRIVER = "1", "3"
# The module whose FutureWarning says that Google no longer supports this Python.
PYTHON_VERSION_WARNING_MODULE = r"google\.api_core\._python_version_support"
# The NVIDIA driver's kernel module folder, and its library (the one way to find it under WSL2).
_NVIDIA_DRIVER_FOLDER = "/proc/driver/nvidia"
_CUDA_DRIVER_LIBRARY = "libcuda.so.1"


def verbose_from_environment(environ=_os.environ):
  """True when `VERBOSE_ENV` in `environ` (a mapping of str) asks for every log line."""
  return environ.get(VERBOSE_ENV, "").strip().lower() not in ("", "0", "false")


@_functools.lru_cache(maxsize=None)  # asked at import and again by a command's console
def has_nvidia_driver():
  """True when TensorFlow's CUDA probe can find an NVIDIA driver."""
  if _os.path.isdir(_NVIDIA_DRIVER_FOLDER):
    return True
  try:
    _ctypes.CDLL(_CUDA_DRIVER_LIBRARY)
  except OSError:
    return False
  return True


# The value this import put into LOG_LEVEL_ENV (None: it left the variable as it was).
log_level_set_here = None
if (LOG_LEVEL_ENV not in _os.environ and "tensorflow" not in _sys.modules and
    not verbose_from_environment()):
  log_level_set_here = (LIBRARY_LOG_LEVEL
                        if has_nvidia_driver() else LIBRARY_LOG_LEVEL_WITHOUT_GPU_DRIVER)
  _os.environ[LOG_LEVEL_ENV] = log_level_set_here


def hide_python_version_warnings(verbose=None):
  """Hides google-api-core's FutureWarning about the Python version, unless `verbose` (None: from
  the environment). `import tensorflow` imports google-api-core (through google-api-python-client,
  which tf-models-official requires), which warns on every run under a Python it no longer
  supports (3.10 from late 2026) and this package does."""
  if verbose is None:
    verbose = verbose_from_environment()
  if not verbose:
    _warnings.filterwarnings("ignore", category=FutureWarning, module=PYTHON_VERSION_WARNING_MODULE)


hide_python_version_warnings()
