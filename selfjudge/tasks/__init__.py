"""selfjudge.tasks."""
