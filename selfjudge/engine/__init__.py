"""selfjudge.engine."""
