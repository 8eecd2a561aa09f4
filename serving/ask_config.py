"""ask.py's settings as one frozen config, without TensorFlow (its flags parse first)."""

import dataclasses
from typing import Optional, Tuple

from squad_qa import errors
from squad_qa.flags import settings
from squad_qa.postprocess import span_decoding


@dataclasses.dataclass(frozen=True, kw_only=True)
class AskConfig(span_decoding.SpanLimits, settings.GivenFields):
  """Questions about one passage for an export: each field is ask.py's flag.

  Attributes:
    export_dir: folder written by export.py.
    question: the questions, a tuple of str (a str is one question).
    context: the passage holding the answer, unless `context_file` (UTF-8) is given.
    context_file: a UTF-8 file holding the passage.
    n_best_size, max_answer_length: decoding settings of the serve_features path (None: the
      export's); another value than the export's is refused on the serve_text path.
    use_serve_features: answer through serve_features even when the export has serve_text.
    typed_flags: names of the fields whose flags were typed, or None (built in Python).

  Raises:
    errors.UsageError: no question, neither or both of a context and a context file, or a context
      of only white space.
  """
  export_dir: str = settings.setting("export", "The folder export.py wrote.")
  question: Optional[Tuple[str, ...]] = settings.setting(
      None, "A question; give the flag again for more questions about the same passage.")
  context: Optional[str] = settings.setting(None, "The passage holding the answer.")
  context_file: Optional[str] = settings.setting(None,
                                                 "Read the passage from this UTF-8 file instead.")
  use_serve_features: bool = settings.setting(
      False, "Tokenize and window in Python and call the serve_features signature instead of the "
      "raw-text serving_default (automatic for SavedModels without serve_text).")
  typed_flags: Optional[tuple] = None

  def check(self):
    if isinstance(self.question, str):
      object.__setattr__(self, "question", (self.question,))
    elif self.question is not None:
      object.__setattr__(self, "question", tuple(self.question))
    if not self.question or (self.context is None and not self.context_file):
      raise errors.UsageError("give --question and --context (or --context_file)")
    if self.context is not None and self.context_file:
      raise errors.UsageError("give --context or --context_file, not both (one passage per run)")
    if self.context is not None and not self.context.strip():
      raise errors.UsageError(f"--context={self.context!r} is empty: there is no passage to "
                              f"answer from; give its text")
