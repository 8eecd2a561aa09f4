"""The layers of docs/design.md run one way: a module imports only its own layer and those below.

base (errors.py, base/, flags/) -> data (preprocess, postprocess) -> model -> tasks -> serving ->
the commands at the root (train.py, export.py, ask.py), which may import anything. A command
inside a layer's folder (preprocess/make_records.py, model/memory/__main__.py,
model/convert_checkpoint.py) keeps its folder's layer. Nothing imports a command: a module that
runs as one (an `if __name__ == "__main__":` block or a `__main__.py`) or a root module.
"""

import ast
import os

from tests import testutil

PACKAGE = "squad_qa"
DRIVERS = "drivers"
# Layer of each folder of the package, lowest first (docs/design.md).
LAYERS = {
    "errors": 0,
    "base": 0,
    "flags": 0,
    "preprocess": 1,
    "postprocess": 1,
    "model": 2,
    "tasks": 3,
    "serving": 4
}
NOT_IN_PACKAGE = ("tests", "benchmarks", "tools", "build", "docs")


def package_modules(root):
  """{dotted module name: path} for every module of the package rooted at the folder `root`."""
  modules = {}
  for folder, dirs, files in os.walk(root):
    relative = os.path.relpath(folder, root)
    dirs[:] = sorted(
        d for d in dirs
        if not d.startswith((".", "_")) and (relative != "." or d not in NOT_IN_PACKAGE) and
        os.path.exists(os.path.join(folder, d, "__init__.py")))
    for name in files:
      if not name.endswith(".py") or (relative == "." and name == "setup.py"):
        continue
      parts = [] if relative == "." else relative.split(os.sep)
      stem = name[:-len(".py")]
      dotted = ".".join([PACKAGE, *parts] + ([] if stem == "__init__" else [stem]))
      modules[dotted] = os.path.join(folder, name)
  return modules


def is_root_command(module):
  """Whether `module` is a command at the package's root (train.py, export.py, ask.py)."""
  parts = module.split(".")
  return len(parts) == 2 and parts[1] not in LAYERS


def is_command(module, tree):
  """Whether `module` runs as a command: a root module, a `__main__.py` or a `__main__` block."""
  if module.split(".")[-1] == "__main__" or is_root_command(module):
    return True
  return any(
      isinstance(node, ast.If) and "__main__" in ast.unparse(node.test) for node in tree.body)


def layer_of(module):
  """The layer number of a library module; raises KeyError for a folder that has no layer."""
  parts = module.split(".")
  return -1 if len(parts) == 1 else LAYERS[parts[1]]


def imported_modules(tree, known):
  """The package's modules (names in `known`) that `tree` imports anywhere, function bodies too."""
  found = set()
  for node in ast.walk(tree):
    if isinstance(node, ast.Import):
      names = [a.name for a in node.names]
    elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
      # `from package import module` imports the module; `from module import name` the module.
      names = [f"{node.module}.{a.name}" for a in node.names if f"{node.module}.{a.name}" in known
              ] or [node.module]
    else:
      continue
    found |= {name for name in names if name in known}
  return found


def layer_violations(root):
  """Lines "<module> imports <module> (<why>)" for every import against the layers."""
  modules = package_modules(root)
  trees = {}
  for module, path in modules.items():
    with open(path, encoding="utf-8") as f:
      trees[module] = ast.parse(f.read())
  commands = {m for m, tree in trees.items() if is_command(m, tree)}
  violations = []
  for module, tree in sorted(trees.items()):
    if is_root_command(module):
      continue
    try:
      layer = layer_of(module)
    except KeyError:
      violations.append(f"{module} is in no layer (add its folder to docs/design.md)")
      continue
    for target in sorted(imported_modules(tree, modules)):
      if target in commands:
        violations.append(f"{module} imports {target} (a command)")
      elif target != PACKAGE and layer_of(target) > layer:
        violations.append(f"{module} imports {target} (a higher layer)")
  return violations


def test_the_package_imports_one_way():
  assert layer_violations(testutil.REPO) == []


def test_a_back_import_is_found(tmp_path):
  """The check above can fail: a model module importing tasks, a library module importing a
  command, or a command inside a layer's folder importing a higher layer, is reported."""
  for folder in ("model", "tasks", "preprocess", "base"):
    (tmp_path / folder).mkdir()
    (tmp_path / folder / "__init__.py").write_text("")
  (tmp_path / "train.py").write_text("from squad_qa.tasks import trainer\n")
  (tmp_path / "tasks" / "trainer.py").write_text("from squad_qa.model import net\n")
  (tmp_path / "model" / "net.py").write_text("def f():\n  from squad_qa.tasks import trainer\n")
  (tmp_path / "preprocess" /
   "tool.py").write_text("from squad_qa import train\nif __name__ == '__main__':\n  pass\n")
  (tmp_path / "preprocess" / "reader.py").write_text("from squad_qa.preprocess import tool\n")
  (tmp_path / "model" / "__main__.py").write_text("from squad_qa.tasks import trainer\n")
  (tmp_path / "base" / "files.py").write_text("from squad_qa.preprocess import reader\n")
  assert layer_violations(tmp_path) == [
      "squad_qa.base.files imports squad_qa.preprocess.reader (a higher layer)",
      "squad_qa.model.__main__ imports squad_qa.tasks.trainer (a higher layer)",
      "squad_qa.model.net imports squad_qa.tasks.trainer (a higher layer)",
      "squad_qa.preprocess.reader imports squad_qa.preprocess.tool (a command)",
      "squad_qa.preprocess.tool imports squad_qa.train (a command)",
  ]


# Calls that run code stored in data. The package reads files users download (SQuAD JSON,
# checkpoints, records, exports), so it deserializes only with json, TFRecord, safetensors and
# TensorFlow's checkpoint and SavedModel readers.
UNSAFE_CALLS = ("pickle.load", "pickle.loads", "marshal.loads", "yaml.load", "dill.load",
                "torch.load", "eval", "exec")


def unsafe_calls(root):
  """Lines "<module>: <call>" for every UNSAFE_CALLS call, or np.load(allow_pickle=True), in the
  package rooted at `root`."""
  found = []
  for module, path in sorted(package_modules(root).items()):
    with open(path, encoding="utf-8") as f:
      tree = ast.parse(f.read())
    for node in ast.walk(tree):
      if not isinstance(node, ast.Call):
        continue
      name = ast.unparse(node.func)
      pickles = any(
          k.arg == "allow_pickle" and ast.unparse(k.value) != "False" for k in node.keywords)
      if name in UNSAFE_CALLS or (name.endswith(".load") and pickles):
        found.append(f"{module}: {name}")
  return found


def test_the_package_runs_no_code_from_data():
  assert unsafe_calls(testutil.REPO) == []


def test_an_unsafe_call_is_found(tmp_path):
  (tmp_path / "model").mkdir()
  (tmp_path / "model" / "__init__.py").write_text("")
  (tmp_path / "model" / "weights.py").write_text(
      "import pickle\nimport numpy as np\n"
      "def read(f):\n  return pickle.load(f), np.load(f, allow_pickle=True), np.load(f)\n")
  assert unsafe_calls(tmp_path) == [
      "squad_qa.model.weights: pickle.load", "squad_qa.model.weights: np.load"
  ]
