"""base/wording.py: counts with their noun in number."""

import pytest

from squad_qa.base.wording import counted


@pytest.mark.parametrize("number, expected", [(0, "0 questions"), (1, "1 question"),
                                              (2, "2 questions"), (10570, "10,570 questions")])
def test_counted(number, expected):
  assert counted(number, "question") == expected


def test_an_irregular_plural():
  assert counted(1, "query", "queries") == "1 query"
  assert counted(3, "query", "queries") == "3 queries"
