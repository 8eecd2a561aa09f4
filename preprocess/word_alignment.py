"""Code-point offsets of the reference's WordPiece tokens within one word, by following tfm's
BasicTokenizer one character at a time."""

import functools
import unicodedata


# The reference's character classes (tf-models-official tokenization.py), for align_word.
def _is_whitespace(c):
  return c in " \t\n\r" or unicodedata.category(c) == "Zs"


def _is_control(c):
  return c not in "\t\n\r" and unicodedata.category(c) in ("Cc", "Cf")


def _is_punctuation(c):
  cp = ord(c)
  if 33 <= cp <= 47 or 58 <= cp <= 64 or 91 <= cp <= 96 or 123 <= cp <= 126:
    return True
  return unicodedata.category(c).startswith("P")


def _is_chinese_char(cp):
  return (0x4E00 <= cp <= 0x9FFF or 0x3400 <= cp <= 0x4DBF or 0x20000 <= cp <= 0x2A6DF or
          0x2A700 <= cp <= 0x2B73F or 0x2B740 <= cp <= 0x2B81F or 0x2B820 <= cp <= 0x2CEAF or
          0xF900 <= cp <= 0xFAFF or 0x2F800 <= cp <= 0x2FA1F)


_DELETED, _SPACE, _CJK, _PUNCTUATION = "deleted", "space", "cjk", "punctuation"


@functools.lru_cache(maxsize=None)
def _char_pieces(c, do_lower_case):
  """What BasicTokenizer makes of one character: _DELETED, _SPACE, _CJK, or a tuple of
  (normalized character, is punctuation) pairs (lower-cased, NFD, Mn dropped)."""
  cp = ord(c)
  if cp == 0 or cp == 0xFFFD or _is_control(c):
    return _DELETED
  if _is_whitespace(c) or c.isspace():  # _clean_text's spaces, then str.split()'s
    return _SPACE
  if _is_chinese_char(cp):
    return _CJK
  normalized = c
  if do_lower_case:
    normalized = unicodedata.normalize("NFD", c.lower())
    normalized = "".join(n for n in normalized if unicodedata.category(n) != "Mn")
  return tuple((n, _is_punctuation(n)) for n in normalized)


def is_deleted(c):
  """Whether BasicTokenizer deletes character `c` whatever the casing (NUL, U+FFFD, controls and
  format characters such as U+200B)."""
  return _char_pieces(c, False) is _DELETED


def _basic_pieces(word, do_lower_case):
  """BasicTokenizer's tokens of `word`, each as (normalized text, source index of each of its
  characters)."""
  pieces = []
  current_text, current_source = [], []

  def close():
    if current_text:
      pieces.append(("".join(current_text), list(current_source)))
      current_text.clear()
      current_source.clear()

  for i, c in enumerate(word):
    kind = _char_pieces(c, do_lower_case)
    if kind is _DELETED:
      continue
    if kind is _SPACE:
      close()
    elif kind is _CJK:
      close()
      pieces.append((c, [i]))
    else:
      for n, is_punctuation in kind:
        if is_punctuation:
          close()
          pieces.append((n, [i]))
        else:
          current_text.append(n)
          current_source.append(i)
  close()
  return pieces


def align_word(word, tokens, do_lower_case, unk_token="[UNK]"):
  """Character offsets (start, end) within `word` of the reference's WordPiece `tokens` of it.

  Each basic token is consumed by one [UNK] or by pieces whose lengths (without "##") add up to
  its length; lengths, not texts, are matched (lower-casing a whole word differs from lower-casing
  each character only in a final sigma). When they do not line up, every token gets the whole word.

  Returns:
    A list of (start, end) code-point offsets, end exclusive, one per token.
  """
  offsets = []
  t = 0
  for text, source in _basic_pieces(word, do_lower_case):
    if t < len(tokens) and tokens[t] == unk_token:
      offsets.append((source[0], source[-1] + 1))
      t += 1
      continue
    position = 0
    while position < len(text) and t < len(tokens):
      size = len(tokens[t]) - 2 if position and tokens[t].startswith("##") else len(tokens[t])
      if size <= 0 or position + size > len(text):
        break
      offsets.append((source[position], source[position + size - 1] + 1))
      position += size
      t += 1
    if position != len(text):
      break
  if t != len(tokens) or len(offsets) != len(tokens):
    return [(0, len(word))] * len(tokens)
  return widen_over_removed(word, offsets, do_lower_case)


def widen_over_removed(word, offsets, do_lower_case):
  """Token offsets that also cover the combining marks BasicTokenizer strips next to them.

  A stripped mark (do_lower_case drops Mn after NFD) joins the token before it, or the one after at
  the start of a piece; so "cafe" + U+0301 gives "cafe" the offsets (0, 5). Deleted characters
  (controls, format characters such as U+200B and U+00AD, NUL, U+FFFD) join no token: an answer
  does not start or end with an invisible character (no SQuAD v1.1 or v2.0 answer does, and the
  official scorer would count one as a wrong answer). serving/tokenizer.py widens by the same rule.
  """
  removed = [_char_pieces(c, do_lower_case) == () for c in word]
  widened = []
  previous_end = 0
  for start, end in offsets:
    while start > previous_end and removed[start - 1]:
      start -= 1
    while end < len(word) and removed[end]:
      end += 1
    widened.append((start, end))
    previous_end = max(previous_end, end)
  return widened
