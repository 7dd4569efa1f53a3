"""selfjudge.judge: the verifier file and its training, nothing else.

``load_verifier`` / ``Verifier`` are cheap to import; training (sklearn) is
imported from :mod:`selfjudge.judge.train` on use. The label miners that feed
the trainer (SelfJudge's and AutoJudge's) live in :mod:`selfjudge.labelling`.
"""

from selfjudge.judge.verifier import FORMAT, Verifier, load_verifier, save_verifier, shipped_verifier_path

__all__ = ["FORMAT", "Verifier", "load_verifier", "save_verifier", "shipped_verifier_path", "fit_verifier", "train_from_labels"]


def __getattr__(name):
    if name in ("fit_verifier", "train_from_labels"):
        from selfjudge.judge import train

        return getattr(train, name)
    raise AttributeError(f"module 'selfjudge.judge' has no attribute {name!r}")
