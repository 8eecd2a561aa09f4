"""Our TFRecords hold exactly the reference's features, on real SQuAD slices of both splits.

The reference is tf-models-official squad_lib (`read_squad_examples` +
`convert_examples_to_features`) with its `FullTokenizer` (google-research/bert run_squad.py's
algorithm), run here on the same slices with the same vocab; tools/compare_with_reference.py matches
the features question by question and window by window. The slices are the articles of each file
with the most non-ASCII text (accents, dashes, CJK, IPA, Greek, Cyrillic), where tokenizers disagree
if they ever do. The full files are compared by `python -m tools.compare_with_reference`
(docs/featurization.md has the numbers).
"""

import argparse

import pytest

from squad_qa import errors
from squad_qa.preprocess import wordpiece
from tests import testutil
from tools import compare_with_reference
from tools import reference_features

# (file, articles): dev's Yuan_dynasty and Warsaw; train's Apollo, Chinese_characters and
# Russian_language (the articles with the most non-ASCII characters per question).
SLICES = {
    "eval": (testutil.DEV_FILE, [36, 1]),
    "train": (testutil.TRAIN_FILE, [328, 255, 415]),
}


@pytest.fixture(scope="module")
def vocab():
  return wordpiece.read_vocab(testutil.vocab_file())


@pytest.mark.parametrize(
    "split, lengths",
    [
        ("eval", (384, 128, 64)),
        ("train", (384, 128, 64)),
        # Short windows: several per question, so max-context flags and answers cut by windows
        # matter.
        ("eval", (128, 32, 32)),
        ("train", (128, 32, 32)),
    ])
def test_features_identical_to_the_reference(tmp_path, vocab, split, lengths):
  source, articles = SLICES[split]
  path = testutil.write_squad_articles(source, tmp_path / f"{split}.json", articles)
  max_seq_length, doc_stride, max_query_length = lengths
  ours = compare_with_reference.run_ours(path, split, testutil.vocab_file(), True, max_seq_length,
                                         doc_stride, max_query_length, False,
                                         str(tmp_path / "records"), num_workers=1, in_process=True)
  reference = reference_features.run_reference(path, split == "train", testutil.vocab_file(), True,
                                               max_seq_length, doc_stride, max_query_length)
  result = compare_with_reference.compare(ours, reference, split == "train", vocab)
  assert result.questions_ours == result.questions_reference == result.questions_both > 400
  assert result.features_ours == result.features_reference
  assert result.different == 0 and result.unmatched == 0, "\n".join(result.examples)
  assert result.identical == result.features_reference
  assert result.unique_ids_identical
  if max_seq_length == 128:
    assert result.features_reference > 2 * result.questions_reference  # the windows do slide


def test_lengths_are_slash_joined_triples_separated_by_commas():
  assert compare_with_reference.parse_lengths("384/128/64,128/32/32") == [(384, 128, 64),
                                                                          (128, 32, 32)]
  for malformed in ("128", "384/128/64,256", "384,128,64", "384/128/x"):
    with pytest.raises(
        errors.UsageError, match=r"is not max_seq_length/doc_stride/max_query_length; .* e\.g\. "
        r"--lengths=384/128/64,256/128/64$"):
      compare_with_reference.parse_lengths(malformed)


def test_a_missing_file_or_a_length_that_leaves_no_window_is_refused_before_any_run():
  args = argparse.Namespace(vocab_file=testutil.vocab_file())
  jobs = [(str(testutil.DEV_FILE), "eval"), ("/nope.json", "train")]
  with pytest.raises(errors.MissingFileError, match="^--train_file=/nope.json: no such file$"):
    compare_with_reference.check_inputs(jobs, [(384, 128, 64)], args)
  with pytest.raises(errors.UsageError, match=r"max_seq_length=50\)$"):
    compare_with_reference.check_inputs(jobs[:1], [(384, 128, 64), (50, 128, 64)], args)
