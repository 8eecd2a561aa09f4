"""Errors the entry points report as one line (no traceback)."""


class UsageError(ValueError):
  """A problem with flags or inputs; main() prints its one-line message and exits non-zero."""
