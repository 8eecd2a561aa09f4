"""Where the SQuAD files are looked for when no flag names them: `$SQUAD_DIR`."""

import os

SQUAD_URL = "https://rajpurkar.github.io/SQuAD-explorer/"

# Names a SQuAD v1.1 train file may have inside $SQUAD_DIR, in order of preference. The second is the
# reconstructed training set this project's CI uses (see ../shared/data/squad/README.md).
TRAIN_FILE_NAMES = ("train-v1.1.json", "train-v1.1.reconstructed.json")
PREDICT_FILE_NAMES = ("dev-v1.1.json",)


def squad_dir():
  """Returns `$SQUAD_DIR`, or `data/squad` when it is unset (a path, relative to the working directory)."""
  return os.environ.get("SQUAD_DIR", os.path.join("data", "squad"))


def default_squad_file(names):
  """Returns the first of `names` that exists in `squad_dir()`, else the path of the first name.

  Args:
    names: file names (str) in order of preference.

  Returns:
    A path (str). It may not exist: the caller reports that with `missing_squad_file_message`.
  """
  for name in names:
    path = os.path.join(squad_dir(), name)
    if os.path.exists(path):
      return path
  return os.path.join(squad_dir(), names[0])


def missing_squad_file_message(flag_name, path):
  """One line telling the user where SQuAD is published and how to point this tool at a copy."""
  return (f"--{flag_name}: no file at {path!r}. SQuAD v1.1 is published at {SQUAD_URL} "
          f"(train-v1.1.json, dev-v1.1.json); download it and set SQUAD_DIR=<folder holding it> "
          f"or pass --{flag_name}=<path>.")
