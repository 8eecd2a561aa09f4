"""Tells a value the user gave from a default, for the configs whose rules depend on it."""


class GivenFields:
  """Mixin for a frozen dataclass config with a field `typed_flags`.

  `typed_flags` holds the names of the fields whose flags were typed on the command line
  (`flags.command_line.config_from_flags` fills it), or None for a config built in Python; there a
  field counts as given when its value differs from its default, which is the flag's.
  """

  def given(self, name):
    """Whether the user gave field `name` (str): typed its flag, or, with `typed_flags` None, set
    it to a value other than its default. Returns a bool."""
    if self.typed_flags is None:
      return getattr(self, name) != self.__dataclass_fields__[name].default
    return name in self.typed_flags
