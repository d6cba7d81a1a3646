"""The charts' one way to matplotlib: :func:`pyplot`, called inside each drawing function (the
reports' charts, the gate heatmap, the benches' figures). matplotlib is the ``plots`` extra
(``pip install 'hltmt_plugin[plots]'``): the plugin core and the commands never import it at
module level, and a chart drawn without it is one line naming the extra."""

import logging

from hltmt_plugin.errors import HltmtConfigError

INSTALL_HINT = "drawing charts needs matplotlib, the plugin's plots extra: pip install 'hltmt_plugin[plots]'"


def pyplot():
    """matplotlib's pyplot on the Agg backend (files, no display), its start-up logging kept
    quiet; :class:`HltmtConfigError` with the install hint when matplotlib is not installed."""
    logging.getLogger("matplotlib").setLevel(logging.WARNING)  # (set before its import, which logs at DEBUG)
    try:
        import matplotlib
    except ImportError:
        raise HltmtConfigError(INSTALL_HINT) from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt
