"""Wall-clock matrix of decoding policies on the default pair: ``selfjudge bench`` as a script.

    python bench/run_wallclock.py --quick
    python bench/run_wallclock.py --help

The code lives in :mod:`selfjudge.bench` (installed with the package).
"""

from selfjudge.bench.wallclock import main

if __name__ == "__main__":
    raise SystemExit(main())
