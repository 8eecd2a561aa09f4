"""The one place this project's absl flags are defined (see `flags.definitions`)."""
