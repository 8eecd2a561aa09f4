"""The errors a user can fix, and how the commands report them.

Every error that bad flags, bad input files or a run that does not fit can cause derives from
`UserError`. The library raises it with a message that says what is wrong, where (the flag, the
file, the record) and the fix; each command catches it once (`flags.command_line.run`), prints
`<command>: <message>` and exits with status 1, without a traceback. Any other exception is a
programming error and keeps its traceback.
"""


class UserError(Exception):
  """A problem the user can fix. `str()` is the message the command prints: one line, or the
  lines of a diagnosis that needs several (the memory planner's)."""


class UsageError(UserError, ValueError):
  """A flag value, or a combination of flags and inputs, that cannot work (e.g. `--doc_stride=0`,
  a --predict_file other than the one the eval records were made from)."""


class MissingFileError(UserError, FileNotFoundError):
  """An input file or folder that is not there (the message names the flag and what makes it)."""


class OutputExistsError(UserError, FileExistsError):
  """An output that is already there and would be overwritten (the message names the flag and
  the fix)."""
