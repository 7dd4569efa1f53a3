"""selfjudge.judge: the verifier file, its trainer, and the AutoJudge label miner.

``load_verifier`` / ``Verifier`` are cheap to import; training (sklearn) and
mining (transformers) are imported from their modules on use.
"""

from selfjudge.judge.verifier import FORMAT, Verifier, load_verifier, save_verifier, shipped_verifier_path

__all__ = ["FORMAT", "Verifier", "load_verifier", "save_verifier", "shipped_verifier_path", "fit_verifier", "train_from_labels"]


def __getattr__(name):
    if name in ("fit_verifier", "train_from_labels"):
        from selfjudge.judge import train

        return getattr(train, name)
    raise AttributeError(f"module 'selfjudge.judge' has no attribute {name!r}")
