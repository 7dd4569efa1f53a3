"""Wall-clock matrix of decoding policies on the default pair: ``selfjudge bench`` as a script.

    python bench/run_wallclock.py --quick
    python bench/run_wallclock.py --help

The code lives in :mod:`selfjudge.evaluation` and :mod:`selfjudge.cli.bench` (installed with the package).
"""

import sys

from selfjudge.cli import main
from selfjudge.cli.common import command_line

if __name__ == "__main__":
    argv = sys.argv[1:]
    sys.exit(main(["bench", *argv], command=command_line(argv, "python bench/run_wallclock.py")))
