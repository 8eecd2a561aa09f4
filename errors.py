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


class FolderInUseError(UserError, BlockingIOError):
  """An output folder another running command is writing (it holds the folder's lock)."""


class NotWritableError(UserError, PermissionError):
  """An output folder this process cannot create or write (permissions, a read-only disk)."""


class NoSpaceError(UserError, OSError):
  """The disk of an output folder filled up while writing; the partial output was removed."""
