import os
import re
import sys

from setuptools import find_packages, setup

# On Python >= 3.11 stock fairseq 0.12.2 does not import (dataclass mutable default);
# fairseq-fixed installs the same `fairseq` module and imports there.
FAIRSEQ = "fairseq-fixed==0.12.3.1" if sys.version_info >= (3, 11) else "fairseq==0.12.2"

# the one source of the version: hltmt_plugin.__version__, read without importing the package
with open(
    os.path.join(os.path.dirname(os.path.abspath(__file__)), "hltmt_plugin", "__init__.py"), encoding="utf-8"
) as f:
    VERSION = re.search(r'^__version__ = "([^"]+)"$', f.read(), re.M).group(1)

setup(
    name="hltmt_plugin",
    version=VERSION,
    description="HLT-MT and language-specific modules (adapters, skills) for multilingual NMT, as a fairseq plugin",
    long_description=open("README.md", encoding="utf-8").read(),
    long_description_content_type="text/markdown",
    license="MIT",
    license_files=["LICENSE"],
    packages=find_packages(include=["hltmt_plugin", "hltmt_plugin.*"]),
    # checked: 3.11 (make setup, the test suite), 3.12 and 3.13 (make check-python)
    python_requires=">=3.11",
    classifiers=[
        "Programming Language :: Python :: 3",
        "Programming Language :: Python :: 3.11",
        "Programming Language :: Python :: 3.12",
        "Programming Language :: Python :: 3.13",
        "Topic :: Scientific/Engineering :: Artificial Intelligence",
    ],
    # one distribution: the plugin's core (what fairseq's --user-dir loads) and its tools (the hltmt-*
    # commands, the Python API, the exports, the experiment drivers); the tools' heavy dependencies
    # are extras, which the core never imports (docs/architecture.md, "One distribution";
    # tests/test_layering.py)
    install_requires=[
        # a range the CPU build satisfies, so pip does not reach for a multi-GB CUDA build
        # when torch is already installed (the set-up script installs torch first)
        "torch>=2.5",  # safe loading needs torch.serialization.safe_globals (hltmt_plugin.compat.safe_loading)
        FAIRSEQ,
        "numpy",
        "sentencepiece",  # the commands' and the hub's tokenizer (a 1 MB wheel)
        "sacrebleu>=2.0",  # the experiments' scores; fairseq requires sacrebleu itself
    ],
    extras_require={
        # the experiments' charts (hltmt-report, hltmt-study's report, the benches)
        "plots": ["matplotlib"],
        "test": [
            "pytest>=7",
            "pytest-xdist>=3",
            "ruff==0.17.6",
            "matplotlib",
            "sacremoses",
            "hypothesis>=6.100",  # property-based tests: the engines' search options (tests/hub/test_engine_contract.py)
            "selenium>=4.20",
            "libretranslatepy>=2.1",
        ],
        "ctranslate2": ["ctranslate2>=4.5"],
        "transformers": ["transformers>=5.25,<6", "safetensors>=0.4"],
        # the WMT-10 example's cleaning (examples/wmt10/clean.py: Moses punctuation normalisation)
        "wmt10": ["sacremoses"],
        # hltmt-serve's web stack (docs/serving.md; docs/architecture.md says why these)
        "serve": ["starlette>=0.40", "uvicorn>=0.30"],
    },
    entry_points={
        "console_scripts": [
            "hltmt-prepare-data = hltmt_plugin.cli.prepare_data:main",
            "hltmt-translate = hltmt_plugin.cli.translate:main",
            "hltmt-adapters = hltmt_plugin.cli.adapters:main",
            "hltmt-train-language-adapter = hltmt_plugin.cli.train_language_adapter:main",
            "hltmt-launch = hltmt_plugin.cli.launch:main",
            "hltmt-main-job = hltmt_plugin.experiments.main_job:main",
            "hltmt-report = hltmt_plugin.experiments.report:main",
            "hltmt-options = hltmt_plugin.cli.options:main",
            "hltmt-average-checkpoints = hltmt_plugin.cli.average_checkpoints:main",
            "hltmt-study = hltmt_plugin.experiments.study:main",
            "hltmt-export = hltmt_plugin.cli.export:main",
            "hltmt-import = hltmt_plugin.cli.import_model:main",
            "hltmt-serve = hltmt_plugin.cli.serve:main",
        ]
    },
)
