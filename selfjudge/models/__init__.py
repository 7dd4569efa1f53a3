"""selfjudge.models."""
