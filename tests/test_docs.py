"""The documentation: every relative link in README.md, BUILD.md and docs/*.md reaches a file of the
repository (and a heading of it, for `#anchor`), and the two top-level files stay short."""

import importlib
import re

from squad_qa.flags import settings
from tests import testutil

# [text](target) outside code; an image's ![alt](target) is a link too.
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
FENCE = re.compile(r"^\s*(```|~~~)")
INLINE_CODE = re.compile(r"`+[^`]*`+")


def documentation_files():
  """README.md, BUILD.md and docs/*.md, as paths."""
  return [
      testutil.REPO / "README.md", testutil.REPO / "BUILD.md", *sorted(
          (testutil.REPO / "docs").glob("*.md"))
  ]


def prose_lines(text, keep_inline_code=False):
  """(line number, line) of `text` outside fenced and indented code blocks, inline code removed
  unless `keep_inline_code`."""
  in_fence = False
  for number, line in enumerate(text.splitlines(), start=1):
    if FENCE.match(line):
      in_fence = not in_fence
      continue
    if in_fence or line.startswith("    ") or line.startswith("\t"):
      continue
    yield number, line if keep_inline_code else INLINE_CODE.sub("", line)


def slug(heading):
  """GitHub's anchor of a heading: markup dropped, lower case, punctuation except hyphens and
  spaces (and word characters) dropped, spaces to hyphens."""
  text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link in a heading keeps its text
  text = text.replace("`", "").lower()
  text = re.sub(r"[^\w\- ]", "", text)
  return text.replace(" ", "-")


def anchors(path):
  """The anchors of the headings of Markdown file `path` (a repeated heading gets -1, -2, ...)."""
  seen = {}
  result = set()
  for _, line in prose_lines(path.read_text(encoding="utf-8"), keep_inline_code=True):
    match = HEADING.match(line)
    if not match:
      continue
    base = slug(match.group(2))
    count = seen.get(base, 0)
    seen[base] = count + 1
    result.add(base if count == 0 else f"{base}-{count}")
  return result


def broken_links(path, root):
  """[(line number, target, why)] for each relative link of `path` that does not resolve to a file
  under `root` (or to a heading of it, for `#anchor`)."""
  broken = []
  text = path.read_text(encoding="utf-8")
  for number, line in prose_lines(text):
    for target in LINK.findall(line):
      if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
        continue
      file_part, _, anchor = target.partition("#")
      resolved = (path.parent / file_part).resolve() if file_part else path.resolve()
      if not resolved.is_relative_to(root.resolve()):
        broken.append((number, target, "outside the repository"))
      elif not resolved.exists():
        broken.append((number, target, "no such file"))
      elif anchor and (resolved.is_dir() or resolved.suffix != ".md"):
        broken.append((number, target, "an anchor into a file that is not Markdown"))
      elif anchor and anchor not in anchors(resolved):
        broken.append((number, target, "no such heading"))
  return broken


def test_every_relative_link_resolves():
  files = documentation_files()
  assert len(files) >= 9  # README, BUILD and seven topic files
  broken = {
      path.relative_to(testutil.REPO).as_posix(): broken_links(path, testutil.REPO)
      for path in files
  }  # yapf: disable (yapf does not split a dict comprehension before `for`)
  assert {name: links for name, links in broken.items() if links} == {}


def test_the_docs_link_to_each_other():
  readme = (testutil.REPO / "README.md").read_text(encoding="utf-8")
  linked = set(LINK.findall(readme))
  for name in ("design", "memory", "featurization", "serving", "distribution", "training",
               "benchmarks"):
    assert f"docs/{name}.md" in linked, name
  assert "BUILD.md" in linked


def test_the_checker_reports_a_broken_link_and_a_broken_anchor(tmp_path):
  (tmp_path / "other.md").write_text(
      "# Other file\n\n## Length-bucketed training: the `auto` step\n", encoding="utf-8")
  page = tmp_path / "page.md"
  page.write_text(
      "# Page\n"
      "[fine](other.md) and [fine too](other.md#length-bucketed-training-the-auto-step)\n"
      "[gone](missing.md)\n"
      "[no heading](other.md#no-such-heading) and [here](#page) and [not here](#elsewhere)\n"
      "```\n[in code](missing-in-code.md)\n```\n"
      "[web](https://example.com/x.md)\n", encoding="utf-8")
  assert broken_links(page, tmp_path) == [
      (3, "missing.md", "no such file"),
      (4, "other.md#no-such-heading", "no such heading"),
      (4, "#elsewhere", "no such heading"),
  ]


def test_slug_follows_githubs_rule():
  assert slug("Memory: plan the batch, accumulate gradients, no bare OOM") == (
      "memory-plan-the-batch-accumulate-gradients-no-bare-oom")
  assert slug(
      "Starting checkpoints (`--init_checkpoint`)") == "starting-checkpoints---init_checkpoint"
  assert slug("TensorFlow Serving") == "tensorflow-serving"


def test_readme_and_build_stay_short():
  readme = (testutil.REPO / "README.md").read_text(encoding="utf-8").splitlines()
  build = (testutil.REPO / "BUILD.md").read_text(encoding="utf-8").splitlines()
  assert len(readme) <= 220, len(readme)
  assert len(build) <= 320, len(build)


# Folders at the root that are not the package's modules (tests/, benchmarks/, tools/ and docs/ run
# from a clone and are not installed).
NOT_PACKAGE = {"tests", "benchmarks", "tools", "docs"}


def module_table_paths():
  """The paths in the first column of docs/design.md's "Module by module" table (a folder ends with
  "/")."""
  text = (testutil.REPO / "docs" / "design.md").read_text(encoding="utf-8")
  section = text.split("\n## Module by module\n", 1)[1].split("\n## ", 1)[0]
  paths = []
  for line in section.splitlines():
    if line.startswith("| `"):
      paths += re.findall(r"`([^`]+)`", line.split("|")[1])
  return paths


def package_modules():
  """The package's modules: its .py files outside NOT_PACKAGE, hidden and build folders, without
  `__init__.py`, as paths relative to the root."""
  modules = []
  for path in testutil.REPO.rglob("*.py"):
    parts = path.relative_to(testutil.REPO).parts
    if (parts[0] in NOT_PACKAGE or path.name == "__init__.py" or any(
        p.startswith(".") or p in ("build", "__pycache__") or p.endswith(".egg-info")
        for p in parts[:-1])):
      continue
    modules.append("/".join(parts))
  return sorted(modules)


def test_the_module_table_lists_every_module_and_only_paths_that_exist():
  paths = module_table_paths()
  assert len(paths) > 20, paths
  assert [p for p in paths if not (testutil.REPO / p).exists()] == []
  folders = [p for p in paths if p.endswith("/")]
  modules = package_modules()
  assert "train.py" in modules and "preprocess/records.py" in modules
  assert [m for m in modules if m not in paths and not any(m.startswith(f) for f in folders)] == []


# A benchmark or tool named in the docs, as a module or a path, and the rest of its command.
SCRIPT_COMMAND = re.compile(
    r"(?<![/\w])(benchmarks|tools)[./](?!md\b)(\w+)(?:\.py|\.sh)?([^`\n|]*)")
# Where a script's flags may be defined besides the script itself.
SHARED_FLAG_FILES = ("benchmarks/peer.py",)
# Config classes whose settings a script may define as its flags (`flags.settings.define_flags`),
# besides the settings of a config class of its own (a field `name: type = settings.…`).
SHARED_SETTINGS = (("squad_qa.preprocess.squad_reader", "SquadFiles"),
                   ("squad_qa.serving.export_config", "ExportConfig"))
# Scripts that hand their flags to another program (TensorFlow's saved_model_cli).
PASS_THROUGH = ("tools/saved_model_cli.py",)


def script_references():
  """(doc, script path, [flag names]) of every `benchmarks.x` / `benchmarks/x.py` / `tools...`
  in the documentation, with the --flags that follow it on its command line."""
  found = []
  for path in documentation_files():
    text = path.read_text(encoding="utf-8").replace("\\\n", " ")
    for folder, name, rest in SCRIPT_COMMAND.findall(text):
      candidates = [f"{folder}/{name}.py", f"{folder}/{name}.sh", f"{folder}/{name}"]
      script = next((c for c in candidates if (testutil.REPO / c).exists()), candidates[0])
      found.append((path.name, script, re.findall(r"(?<![\w-])--(?:no)?([a-z][a-z0-9_]*)", rest)))
  return found


def test_every_script_the_docs_name_exists_with_the_flags_they_give():
  references = script_references()
  assert len(references) > 40
  shared_settings = {
      name for module, config in SHARED_SETTINGS
      for name in settings.names(getattr(importlib.import_module(module), config))
  }
  missing, unknown = [], []
  for doc, script, names in references:
    if not (testutil.REPO / script).exists():
      missing.append((doc, script))
      continue
    if not script.endswith(".py") or script in PASS_THROUGH:
      continue
    sources = "".join(
        (testutil.REPO / f).read_text(encoding="utf-8") for f in (script, *SHARED_FLAG_FILES))
    unknown += [(doc, script, n) for n in names
                if not any(f'"{form}' in sources for form in (f'{n}"', f"--{n}\"", f"--{n}=")) and
                not (n in shared_settings and "settings.define_flags" in sources) and
                not (re.search(rf"^  {n}: [^=\n]+= settings\.", sources, re.MULTILINE) and
                     "settings.define_flags" in sources)]
  assert missing == []
  assert unknown == []
