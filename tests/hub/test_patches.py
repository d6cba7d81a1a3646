"""hltmt_plugin.hub.patches: a group's model.bin stored as the byte ranges that differ from the
base group's, rebuilt exactly; a patch that does not fit is refused in one line."""

import pytest

from hltmt_plugin.errors import HltmtInputError
from hltmt_plugin.hub import patches

pytestmark = pytest.mark.fast  # the fast tier (tests/tiers.py)


def test_a_patch_rebuilds_the_other_file_exactly_and_a_bad_one_is_refused():
    base = bytes(range(256)) * 40
    other = bytearray(base)
    other[10:20] = b"x" * 10
    other[5000] = 7
    patch = patches.make_patch(base, bytes(other))
    assert patches.apply_patch(base, patch, "p") == bytes(other)
    assert len(patch) < 200 and patches.make_patch(base, base + b"!") is None
    with pytest.raises(HltmtInputError, match="p is cut short"):
        patches.apply_patch(base, patch[: len(patches.PATCH_MAGIC) + 5], "p")
    with pytest.raises(HltmtInputError, match="not a model patch"):
        patches.apply_patch(base, b"junk", "p")
    with pytest.raises(HltmtInputError, match="does not fit"):
        patches.apply_patch(base[:100], patch, "p")
