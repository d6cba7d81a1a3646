"""A fingerprint of the dictionaries of a binarized data folder.

Binarized data (``*.bin`` / ``*.idx``) holds token ids, and the ids mean something only with
the ``dict.*.txt`` they were made with: a dictionary edited after binarization (one line
removed, two lines swapped) shifts every id after the change, and fairseq trains on it
without a word. ``hltmt-prepare-data`` therefore writes ``dict_fingerprint.json`` into
the folder it binarizes, next to the dictionaries:

    {"format": "hltmt_plugin.dict_fingerprint", "version": 1,
     "dicts": {"dict.de.txt": "<sha256 of the file's bytes>", "dict.en.txt": "...", ...}}

``dictionary_fingerprint(folder)`` computes the ``dicts`` part from the files as they are
now; ``check_dictionaries(folder)`` compares it with the recorded one and returns the
differences (an empty list when they agree, or when the folder records no fingerprint), so a
task or a script can refuse to train on a changed dictionary.
"""

import hashlib
import json
import os
from typing import Dict, List, Optional

from hltmt_plugin import records
from hltmt_plugin.atomic_files import write_text

FINGERPRINT_FILE = "dict_fingerprint.json"
FORMAT = "hltmt_plugin.dict_fingerprint"
VERSION = 1
SCHEMA = records.Record(
    {
        "format": records.Text(choices=[FORMAT]),
        "version": records.Int(low=VERSION, high=VERSION),
        "dicts": records.MapOf(records.SHA256, key=records.Text(pattern=r"dict\.[^/]+\.txt"), min_len=1),
    },
    optional={records.VERSION_FIELD: records.Text(max_len=40)},
)


def sha256_file(path: str) -> str:
    """The sha256 of a file's bytes, as hex."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def dictionary_fingerprint(folder: str) -> Dict[str, str]:
    """sha256 of every ``dict.*.txt`` in ``folder`` (file name -> hex digest), sorted by name."""
    names = sorted(
        n
        for n in os.listdir(folder)
        if n.startswith("dict.") and n.endswith(".txt") and os.path.isfile(os.path.join(folder, n))
    )
    return {name: sha256_file(os.path.join(folder, name)) for name in names}


def write_fingerprint(folder: str) -> Dict[str, object]:
    """Record the dictionaries of ``folder`` in ``folder/dict_fingerprint.json`` (written
    atomically); returns what was written."""
    record = {"format": FORMAT, "version": VERSION, "dicts": dictionary_fingerprint(folder)}
    write_text(os.path.join(folder, FINGERPRINT_FILE), json.dumps(record, indent=1, sort_keys=True) + "\n")
    return record


def read_fingerprint(folder: str) -> Optional[Dict[str, str]]:
    """The recorded ``dicts`` of ``folder``, or None when it records none. A file that is not
    a fingerprint written here (also an empty or partial one) raises HltmtInputError (a
    ValueError) naming it."""
    path = os.path.join(folder, FINGERPRINT_FILE)
    if not os.path.lexists(path):
        return None
    return records.read_json(path, SCHEMA, "dictionary fingerprint")["dicts"]


def check_dictionaries(folder: str) -> List[str]:
    """Differences between the dictionaries of ``folder`` and its recorded fingerprint, one
    phrase each (``dict.de.txt changed since the data was binarized``, ``dict.ro.txt is
    missing``); empty when they agree or nothing is recorded. A dictionary added later is not
    a difference: no binarized file was made with it."""
    recorded = read_fingerprint(folder)
    if recorded is None:
        return []
    now = dictionary_fingerprint(folder)
    problems = []
    for name in sorted(recorded):
        if name not in now:
            problems.append(f"{name} is missing")
        elif now[name] != recorded[name]:
            problems.append(f"{name} changed since the data was binarized")
    return problems
