"""selfjudge.bench: the wall-clock matrix of decoding policies (``selfjudge bench``,
``bench/run_wallclock.py``): :mod:`.matrix` runs and scores one interleaved block,
:mod:`.report` turns finished blocks into tables and plots, :mod:`.wallclock` is the CLI.
"""
