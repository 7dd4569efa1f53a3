"""selfjudge.labelling."""
