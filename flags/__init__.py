"""Commands' flags: each made from its config's fields (`flags.settings`), parsed and read into
the config (`flags.command_line`)."""
