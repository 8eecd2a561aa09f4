"""WordPiece tokenization with character offsets, identical to the reference's, batched in C++.

The reference (google-research/bert `run_squad.py`, tf-models-official `official/nlp/data/squad_lib.py`)
tokenizes each whitespace-separated word of a context with `FullTokenizer` (Python). Its output is a
function of the word alone, and a question's tokens are the concatenation of its words' tokens
(BasicTokenizer turns every run_squad.py whitespace character into a space before splitting). So a
text can be tokenized run by run, where a run is a maximal stretch without ASCII whitespace:

  * runs made only of printable ASCII (0x21-0x7E), >99% of SQuAD's words, go through
    `tensorflow_text.FastBertTokenizer` (BERT's basic tokenization and WordPiece in C++), a batch of
    whole texts per call;
  * any run holding another character (accents, dashes, CJK, emoji, control or zero-width
    characters, U+202F, lone surrogates) is tokenized by tf-models-official's own `FullTokenizer`,
    the reference itself, once per distinct word (memoized), and its tokens are mapped back to the
    word's characters (`_align_word`).

FastBertTokenizer is given the text with those runs blanked out (same length, ASCII only), so its byte
offsets are code-point offsets. On printable ASCII the two tokenizers agree (lower-casing, splitting
on ASCII punctuation, greedy longest-match-first WordPiece); where they differ elsewhere
(FastBertTokenizer folds "ß" -> "ss" and "ﬁ" -> "fi", splits at NUL instead of deleting it) the
reference path is taken. `tests/test_reference_parity.py` and `tools/compare_with_reference.py` check
the result against the reference on real SQuAD.
"""

import dataclasses
import functools
import hashlib
import re
import unicodedata

import numpy as np
import tensorflow as tf
import tensorflow_text as tf_text

from preprocess.features import TokenizedText

# tf-models-official tokenization.WordpieceTokenizer.max_input_chars_per_word: a basic token longer
# than this is [UNK] (google-research/bert uses 200). FastBertTokenizer counts bytes, which equals
# characters here since it only sees ASCII.
MAX_CHARS_PER_WORD = 400

_RUN_WITH_OTHER_CHARS = re.compile(r"(?<![^ \t\r\n])[^ \t\r\n]*?[^\x21-\x7e \t\r\n][^ \t\r\n]*")
_OTHER_CHAR = re.compile(r"[^\x20-\x7e\t\r\n]")
_RUN_SQUAD_WORD_SEPARATOR = "\u202f"  # run_squad.py whitespace that is not ASCII


def read_vocab(vocab_file):
  """Reads a vocab.txt (one token per line, id = line number) into a list of str.

  Lines are stripped of surrounding whitespace, as tf-models-official's `load_vocab` does.

  Raises:
    FileNotFoundError: with the path, when it does not exist.
    ValueError: the vocabulary lacks [CLS], [SEP], [UNK] or [PAD], or repeats a token (ids would
      differ between tokenizers).
  """
  with tf.io.gfile.GFile(vocab_file, "r") as f:
    vocab = [line.strip() for line in f]
  while vocab and not vocab[-1]:
    vocab.pop()
  missing = [t for t in ("[CLS]", "[SEP]", "[UNK]", "[PAD]") if t not in vocab]
  if missing:
    raise ValueError(f"{vocab_file}: not a BERT WordPiece vocab (no {', '.join(missing)})")
  if len(set(vocab)) != len(vocab):
    seen = set()
    repeated = next(t for t in vocab if t in seen or seen.add(t))
    raise ValueError(f"{vocab_file}: token {repeated!r} appears on two lines; fix the vocab")
  return vocab


def file_sha256(path):
  """Hex SHA-256 of a file's bytes."""
  digest = hashlib.sha256()
  with tf.io.gfile.GFile(path, "rb") as f:
    for block in iter(lambda: f.read(1 << 20), b""):
      digest.update(block)
  return digest.hexdigest()


@dataclasses.dataclass
class RaggedTokens:
  """Tokens of many texts, flat: text i owns rows `row_splits[i]:row_splits[i + 1]`.

  Attributes:
    ids: int32 [total] vocabulary ids.
    start_chars: int32 [total] offset of each token's first character in its text, in code points.
    end_chars: int32 [total] offset one past its last character, in code points.
    row_splits: int64 [num_texts + 1].
  """
  ids: np.ndarray
  start_chars: np.ndarray
  end_chars: np.ndarray
  row_splits: np.ndarray

  def __len__(self):
    return len(self.row_splits) - 1

  def lengths(self):
    return np.diff(self.row_splits)

  def row(self, i):
    """TokenizedText of text i."""
    rows = slice(self.row_splits[i], self.row_splits[i + 1])
    return TokenizedText(self.ids[rows], self.start_chars[rows], self.end_chars[rows])


# The reference's character classes (tf-models-official tokenization.py), for _align_word.
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


def _basic_pieces(word, do_lower_case):
  """The reference's basic tokens of `word`, each as (normalized text, source char per character).

  Follows BasicTokenizer (delete NUL/U+FFFD/control/format characters, split at whitespace and
  around CJK characters, lower-case + NFD + drop Mn, split around punctuation) one character at a
  time, so every normalized character remembers where it came from.
  """
  pieces = []
  current_text, current_source = [], []

  def close():
    if current_text:
      pieces.append(("".join(current_text), list(current_source)))
      current_text.clear()
      current_source.clear()

  for i, c in enumerate(word):
    cp = ord(c)
    if cp == 0 or cp == 0xFFFD or _is_control(c):
      continue
    if _is_whitespace(c) or c.isspace():  # _clean_text's spaces, then str.split()'s
      close()
      continue
    if _is_chinese_char(cp):
      close()
      pieces.append((c, [i]))
      continue
    normalized = c
    if do_lower_case:
      normalized = unicodedata.normalize("NFD", c.lower())
      normalized = "".join(n for n in normalized if unicodedata.category(n) != "Mn")
    for n in normalized:
      if _is_punctuation(n):
        close()
        pieces.append((n, [i]))
      else:
        current_text.append(n)
        current_source.append(i)
  close()
  return pieces


def _align_word(word, tokens, do_lower_case, unk_token="[UNK]"):
  """Character offsets (start, end) within `word` of the reference's WordPiece `tokens` of it.

  Each basic token (`_basic_pieces`) is consumed either by one [UNK] or by word pieces whose lengths
  (without "##") add up to its normalized length; a piece's offsets are the source characters of its
  normalized characters. Lengths, not texts, are matched, because lower-casing a whole word can
  differ from lower-casing its characters one by one only in the character chosen (a final sigma).
  When even the lengths do not line up, every token gets the whole word's span: answers cut from it
  stay exact substrings, only less tight.

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
  return offsets


@functools.lru_cache(maxsize=4)
def model_buffers(vocab, do_lower_case):
  """tensorflow-text's flatbuffer models (wordpiece, normalizer) for a vocab, as bytes, cached.

  Built by tensorflow-text's C++ builders without touching the TensorFlow runtime, so a parent
  process can build them once before forking workers (preprocess/make_records.py).

  Args:
    vocab: tuple of token strings.
    do_lower_case: bool.
  """
  from tensorflow_text.core.pybinds import pywrap_fast_bert_normalizer_model_builder  # pylint: disable=g-import-not-at-top
  from tensorflow_text.core.pybinds import pywrap_fast_wordpiece_tokenizer_model_builder  # pylint: disable=g-import-not-at-top
  wordpiece_model = pywrap_fast_wordpiece_tokenizer_model_builder.build_fast_wordpiece_model(
      list(vocab), MAX_CHARS_PER_WORD, "##", "[UNK]", False, False)
  normalizer_model = pywrap_fast_bert_normalizer_model_builder.build_fast_bert_normalizer_model(
      do_lower_case)
  return wordpiece_model, normalizer_model


class WordPieceTokenizer:
  """BERT WordPiece tokenizer giving the reference's tokens with code-point offsets.

  Args:
    vocab_file: path of vocab.txt.
    do_lower_case: lower-case and strip accents (NFD, drop combining marks), for uncased vocabs.
  """

  def __init__(self, vocab_file, do_lower_case=True):
    self.vocab = read_vocab(vocab_file)
    self.vocab_file = vocab_file
    self.do_lower_case = do_lower_case
    self._ids = {t: i for i, t in enumerate(self.vocab)}
    self.cls_id = self._ids["[CLS]"]
    self.sep_id = self._ids["[SEP]"]
    self.pad_id = self._ids["[PAD]"]
    self.unk_id = self._ids["[UNK]"]
    wordpiece_model, normalizer_model = model_buffers(tuple(self.vocab), bool(do_lower_case))
    # uint8 tensors made from NumPy views (tensorflow-text would build them from Python lists).
    fast = tf_text.FastBertTokenizer(
        token_out_type=tf.int32,
        fast_wordpiece_model_buffer=tf.constant(np.frombuffer(wordpiece_model, np.uint8)),
        fast_bert_normalizer_model_buffer=tf.constant(np.frombuffer(normalizer_model, np.uint8)))

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string)], autograph=False)
    def tokenize_batch(texts):
      ids, starts, ends = fast.tokenize_with_offsets(texts)
      return ids.flat_values, starts.flat_values, ends.flat_values, ids.row_lengths()

    self._tokenize_batch = tokenize_batch
    self._reference = None  # tf-models-official FullTokenizer, built on the first non-ASCII word
    self._word_cache = {}

  def _reference_tokenizer(self):
    if self._reference is None:
      from official.nlp.tools import tokenization  # pylint: disable=g-import-not-at-top
      self._reference = tokenization.FullTokenizer(self.vocab_file, self.do_lower_case)
    return self._reference

  def _reference_word(self, word):
    """(ids, starts, ends) of one run_squad.py word by the reference tokenizer, memoized."""
    cached = self._word_cache.get(word)
    if cached is None:
      tokens = self._reference_tokenizer().tokenize(word)
      offsets = _align_word(word, tokens, self.do_lower_case)
      cached = ([self._ids[t] for t in tokens], [s for s, _ in offsets], [e for _, e in offsets])
      self._word_cache[word] = cached
    return cached

  def tokenize_ragged(self, texts, batch_size=1024):
    """Tokenizes texts; the fast path for many texts.

    Args:
      texts: a sequence of str.
      batch_size: texts per FastBertTokenizer call.

    Returns:
      RaggedTokens (code-point offsets into each text).
    """
    texts = list(texts)
    fast_texts = []
    extra = ([], [], [], [])  # text index, id, start, end of reference-path tokens
    for index, text in enumerate(texts):
      if not _OTHER_CHAR.search(text):
        fast_texts.append(text)
        continue
      blanked = []
      kept_from = 0
      for match in _RUN_WITH_OTHER_CHARS.finditer(text):
        run_start, run = match.start(), match.group()
        blanked += [text[kept_from:run_start], " " * len(run)]
        kept_from = match.end()
        word_start = run_start
        for word in run.split(_RUN_SQUAD_WORD_SEPARATOR):
          ids, starts, ends = self._reference_word(word)
          extra[0].extend([index] * len(ids))
          extra[1].extend(ids)
          extra[2].extend(word_start + s for s in starts)
          extra[3].extend(word_start + e for e in ends)
          word_start += len(word) + 1
      blanked.append(text[kept_from:])
      fast_texts.append("".join(blanked))
    ids, starts, ends, lengths = [], [], [], []
    for i in range(0, len(fast_texts), batch_size):
      batch = tf.constant(fast_texts[i:i + batch_size], tf.string)
      token_ids, token_starts, token_ends, row_lengths = self._tokenize_batch(batch)
      ids.append(token_ids.numpy())
      starts.append(token_starts.numpy())
      ends.append(token_ends.numpy())
      lengths.append(row_lengths.numpy())
    if not fast_texts:
      return RaggedTokens(np.zeros(0, np.int32), np.zeros(0, np.int32), np.zeros(0, np.int32),
                          np.zeros(1, np.int64))
    ids = np.concatenate(ids).astype(np.int32)
    starts = np.concatenate(starts).astype(np.int32)
    ends = np.concatenate(ends).astype(np.int32)
    lengths = np.concatenate(lengths).astype(np.int64)
    if extra[0]:
      text_of_token = np.concatenate([np.repeat(np.arange(len(texts)), lengths),
                                      np.asarray(extra[0], np.int64)])
      ids = np.concatenate([ids, np.asarray(extra[1], np.int32)])
      starts = np.concatenate([starts, np.asarray(extra[2], np.int32)])
      ends = np.concatenate([ends, np.asarray(extra[3], np.int32)])
      order = np.lexsort((starts, text_of_token))  # by text, then by position in the text
      ids, starts, ends = ids[order], starts[order], ends[order]
      lengths = np.bincount(text_of_token, minlength=len(texts))
    row_splits = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    return RaggedTokens(ids, starts, ends, row_splits)

  def tokenize(self, texts, batch_size=1024):
    """Tokenizes texts.

    Args:
      texts: a sequence of str.
      batch_size: texts per FastBertTokenizer call.

    Returns:
      A list of `TokenizedText` (int32 ids, code-point start/end offsets), one per text.
    """
    ragged = self.tokenize_ragged(texts, batch_size)
    return [ragged.row(i) for i in range(len(ragged))]

  def ids_to_tokens(self, ids):
    """Vocabulary strings of `ids` (for logs and error messages)."""
    return [self.vocab[i] for i in ids]
