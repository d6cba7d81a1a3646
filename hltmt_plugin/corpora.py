"""The corpora the commands, scripts and examples know by name: their languages and their
high-resource split, written once here.

- WMT-10: the ten languages of the WMT-10 multilingual benchmark paired with English, in the
  benchmark's order (``WMT10_LANGS``), and the HLT-MT paper's high-resource split
  (``WMT10_HIGH``: fr, cs, de, fi, lv, et).
- DebMT-10: the example data in ``data/debmt10`` (its README, ``data/debmt10/README.md``):
  the same ten languages, with their own split by the amount of data each has here
  (``DEBMT10_HIGH``, most data first: fr, de, cs, tr, fi, et; ``DEBMT10_LOW``: the others).
"""

from typing import List

WMT10_LANGS: List[str] = ["fr", "cs", "de", "fi", "lv", "et", "ro", "hi", "tr", "gu"]
WMT10_HIGH: List[str] = ["fr", "cs", "de", "fi", "lv", "et"]  # the HLT-MT paper's high-resource split

DEBMT10_LANGS: List[str] = WMT10_LANGS  # the same ten languages (data/debmt10/README.md)
DEBMT10_HIGH: List[str] = ["fr", "de", "cs", "tr", "fi", "et"]  # data/debmt10/README.md: high resource here
DEBMT10_LOW: List[str] = ["ro", "lv", "hi", "gu"]
