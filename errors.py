"""The errors a user can fix: each command prints `<command>: <message>` for a `UserError` and exits
with status 1, without a traceback (`flags.command_line.run`). Other exceptions are bugs.
"""


class UserError(Exception):
  """A problem the user can fix; `str()` is the message the command prints."""


class UsageError(UserError, ValueError):
  """A flag value, or a combination of flags and inputs, that cannot work."""


class MissingFileError(UserError, FileNotFoundError):
  """An input file or folder that is not there."""


class OutputExistsError(UserError, FileExistsError):
  """An output that is already there and would be overwritten."""
