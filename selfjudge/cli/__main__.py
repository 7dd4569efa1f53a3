"""``python -m selfjudge.cli``: the same as the ``selfjudge`` command."""

import sys

from selfjudge.cli import main

sys.exit(main())
