"""selfjudge.judge."""
