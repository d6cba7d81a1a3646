"""Where the SLP's state lies (hltmt_plugin/pool/keys.py): the names match the state dict of a
model built with a pool, so the parameter groups of --train-only and hltmt-average-checkpoints
name what the model saves."""

import pytest

from conftest import build
from hltmt_plugin.pool import keys

pytestmark = pytest.mark.fast  # the fast tier (tests/tiers.py)


def test_the_keys_name_the_entries_of_a_built_models_state(data_bin):
    _, _, model = build(data_bin)
    state = model.state_dict()
    assert model.decoder.slp is getattr(model.decoder, keys.POOL)
    assert model.decoder.slp_router is getattr(model.decoder, keys.ROUTER)
    router = {
        k[len(keys.DECODER + keys.ROUTER + ".") :] for k in state if k.startswith(keys.DECODER + keys.ROUTER + ".")
    }
    assert router == {f"{keys.GATE}.weight", f"{keys.GATE}.bias", keys.MAP, keys.GATE_STEPS, keys.LANG_NAMES}
    assert keys.ROUTER_MAP in state and keys.ROUTER_GATE_STEPS in state
    pool_size = model.slp.pool_size
    modules = {k[len(keys.POOL_MODULES) :].split(".")[0] for k in state if k.startswith(keys.POOL_MODULES)}
    assert modules == {str(k) for k in range(pool_size)}
    assert any(k.startswith(keys.UNIVERSAL_MODULE) for k in state)
    assert [k for k in state if k.startswith(keys.GATE_PARAMETERS)] == [
        keys.GATE_PARAMETERS + "weight",
        keys.GATE_PARAMETERS + "bias",
    ]
    pooled = [k for k in state if k.startswith(keys.DECODER + keys.POOL + ".")]
    assert all(k.startswith((keys.POOL_MODULES, keys.UNIVERSAL_MODULE)) for k in pooled)
