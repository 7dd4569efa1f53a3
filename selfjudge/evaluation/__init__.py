"""selfjudge.evaluation: the evaluation harness behind ``selfjudge bench``, ``report``, ``calibrate``
and ``demo`` (``bench/run_wallclock.py``): :mod:`.matrix` makes a block's configurations,
:mod:`.block_run` runs and scores one interleaved block, :mod:`.wallclock` the whole matrix,
:mod:`.report` turns finished blocks into tables and plots (:mod:`.pareto`: gaps with intervals).
The lab's scripts that use it live in the repository's ``bench/``.
"""
