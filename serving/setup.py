"""The serving install of hltmt_plugin: ``hltmt-translate`` and the Python API
(``hltmt_plugin.hub.HltmtTranslator.load``) for folders written by ``hltmt-export``, with
CTranslate2 and sentencepiece and without torch or fairseq.

    pip install ./serving          # from a checkout: a new environment that serves export folders
    pip install "./serving[serve]" # and hltmt-serve, the HTTP server (docs/serving.md)

It ships the package's torch-free modules (:data:`MODULES`, read from ``../hltmt_plugin``), not
the training code; it is an install of its own, not an extra of the full package, whose
requirements (torch, fairseq) an extra cannot remove. Install it in an environment without the
full package (both install ``hltmt_plugin``). See docs/deploying.md.
"""

import os
import re

from setuptools import setup

HERE = os.path.dirname(os.path.abspath(__file__))
PACKAGE = os.path.join(os.pardir, "hltmt_plugin")  # relative to this folder, as setuptools wants it

# the modules an export folder is served with: each imports only these (and the standard
# library, numpy, sentencepiece, CTranslate2, tqdm) at its top
MODULES = [
    "hltmt_plugin.process",  # what the process is: imported by the package's __init__.py
    "hltmt_plugin.errors",
    "hltmt_plugin.directions",
    "hltmt_plugin.paths",
    "hltmt_plugin.records",
    "hltmt_plugin.atomic_files",
    "hltmt_plugin.text",
    "hltmt_plugin.data_fingerprint",
    "hltmt_plugin.hub.manifest",
    "hltmt_plugin.hub.patches",
    "hltmt_plugin.hub.decoding",
    "hltmt_plugin.hub.engines",
    "hltmt_plugin.hub.arguments",
    "hltmt_plugin.hub.results",
    "hltmt_plugin.hub.contract",
    "hltmt_plugin.hub.vocabulary",
    "hltmt_plugin.hub.ct2_engine",
    "hltmt_plugin.hub.hf_engine",
    "hltmt_plugin.hub.translator",
    "hltmt_plugin.cli.output",
    "hltmt_plugin.cli.export",
    "hltmt_plugin.cli.translate",
    # hltmt-serve (its web stack comes with the serve extra: docs/serving.md)
    "hltmt_plugin.serve.batcher",
    "hltmt_plugin.serve.metrics",
    "hltmt_plugin.serve.api",
    "hltmt_plugin.serve.page",
    "hltmt_plugin.serve.app",
    "hltmt_plugin.cli.serve",
]

with open(os.path.join(HERE, PACKAGE, "__init__.py"), encoding="utf-8") as f:
    VERSION = re.search(r'^__version__ = "([^"]+)"$', f.read(), re.M).group(1)

setup(
    name="hltmt_plugin_serving",
    version=VERSION,
    description="Serving models exported by hltmt_plugin (hltmt-export) with CTranslate2, without torch or fairseq",
    license="MIT",
    python_requires=">=3.11",
    package_dir={"hltmt_plugin": PACKAGE},
    py_modules=MODULES,  # each package's __init__.py comes with its modules
    install_requires=["ctranslate2>=4.5", "sentencepiece", "numpy", "tqdm"],
    extras_require={"serve": ["starlette>=0.40", "uvicorn>=0.30"]},  # hltmt-serve (docs/serving.md)
    entry_points={
        "console_scripts": [
            "hltmt-translate = hltmt_plugin.cli.translate:main",
            "hltmt-serve = hltmt_plugin.cli.serve:main",
        ]
    },
)
