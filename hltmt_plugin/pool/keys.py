"""Where the SLP's state lies in a model's state dict (and so in a checkpoint): the pool on the
decoder as ``decoder.slp.*`` (``pool.<k>.*``: the T pool modules, ``universal.*``: the
universal module), its router as ``decoder.slp_router.*`` (``gate.*``, the routing map, the
gate's step count and the map's language names). The parameter groups of ``--train-only``
and hltmt-average-checkpoints name these entries by the constants here; older names are read by
:func:`hltmt_plugin.pool.router.upgrade_router_state` alone."""

DECODER = "decoder."  # the pool and its router are modules of the decoder
POOL = "slp"  # the pool's name on the decoder
ROUTER = "slp_router"  # the router's name on the decoder

# the router's entries
GATE = "gate"  # W_g: gate.weight, gate.bias
MAP = "routing_map"  # the routing map: one-hot rows, one per high-resource language
GATE_STEPS = "gate_steps"  # training passes the gate has seen while learning
LANG_NAMES = "high_lang_names"  # the map's languages by name (UTF-8 bytes of the comma-separated list)

# the model's state-dict names
POOL_MODULES = f"{DECODER}{POOL}.pool."  # prefix of the T pool modules' parameters
UNIVERSAL_MODULE = f"{DECODER}{POOL}.universal."  # prefix of the universal module's parameters
GATE_PARAMETERS = f"{DECODER}{ROUTER}.{GATE}."  # prefix of the gate's parameters
ROUTER_MAP = f"{DECODER}{ROUTER}.{MAP}"
ROUTER_GATE_STEPS = f"{DECODER}{ROUTER}.{GATE_STEPS}"
