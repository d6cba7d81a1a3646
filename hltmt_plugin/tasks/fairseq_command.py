"""Which of fairseq's commands this process is: some checks belong to one command only."""

import os
import sys


def running_fairseq(command: str) -> bool:
    """Whether this process is fairseq's ``command`` (``train``, ``interactive``, ...), started
    as ``fairseq-COMMAND`` or ``python -m fairseq_cli.COMMAND``."""
    argv0 = os.path.abspath(sys.argv[0]) if sys.argv and sys.argv[0] else ""
    return os.path.basename(argv0) == f"fairseq-{command}" or argv0.endswith(
        os.path.join("fairseq_cli", f"{command}.py")
    )
