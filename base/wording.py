"""Counts in messages: "1 question", "2 questions", "10,570 questions"."""


def counted(number, noun, plural=None):
  """`number` (an int) with thousands separators and `noun`, in its plural form (`plural`, default
  noun + "s") unless number is 1."""
  return f"{number:,} {noun if number == 1 else plural or noun + 's'}"
