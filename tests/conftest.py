"""Test configuration: Triton runs in interpreter mode on machines without a GPU.

The variable must be set before triton is first imported, hence module level.
"""

import os

os.environ.setdefault("TRITON_INTERPRET", "1")
