"""The selective language-specific pool (SLP, HLT-MT) on the decoder's top, one job per file:

- :mod:`~hltmt_plugin.pool.config`: its options and their checks;
- :mod:`~hltmt_plugin.pool.modules`: the pool modules and the universal module, routed per row
  by a routing decision;
- :mod:`~hltmt_plugin.pool.router`: the gate, the routing map, the target -> module table every
  reader reads, and each batch's routing decision;
- :mod:`~hltmt_plugin.pool.head`: the pool and its router wired on the decoder's top, called once per pass;
- :mod:`~hltmt_plugin.pool.keys`: where the pool's and the router's state lie in a checkpoint.
"""
