"""selfjudge.labelling: training labels for a verifier, and their on-disk format.

Both label miners write the same shard format (:mod:`.shards`, with its
readers :func:`~selfjudge.labelling.shards.read_labels`,
:func:`~selfjudge.labelling.shards.read_label_dirs` and tau resolution):

* SelfJudge: :func:`selfjudge.labelling.pipeline.label` scores every swap of the
  target's own response in one forward (:mod:`.swap_scoring`; :mod:`.naive` is the
  independent reference);
* AutoJudge: :func:`selfjudge.labelling.autojudge.mine_task` walks the mismatches
  and checks the regenerated answer (:mod:`.autojudge_walk`, :mod:`.autojudge_batch`).
"""
