"""Sentinels and size limits shared across layers, in one place, with the relations that tie them.

* ``NO_HIT``: the rank given to a GT relation that no prediction of a ranked list hits. It must exceed every K
  a user may ask for, including the VLM metric's K-free ``K_ALL``.
* ``K_ALL``: the "K" of K-free recalls (VLM Recall / mRecall: every predicted triplet counts).
* ``RANK_CAP_INT16``: ranks are stored as int16 when every K is below it (ranks at or above the largest K
  only mean "missed", so they are clamped to the cap).
* ``AUTO_SAMPLE_ID_BASE``: samples without ``sample_idx`` (single process only) are numbered from here, far
  above any dataset index, so they never collide with real ones.
* ``POOL_SCORE_ROWS``: the predicted pairs (score rows) a scene-graph metric pools before ranking them (~107 MB
  of 51-column float32 scores), which bounds the memory a pool keeps alive (two pools while one pool's ranking
  pass runs beside the previous pool's rows: :mod:`.overlap`). SGDet with all pairs of 80 detections (6,320 per
  image) is ranked in pools of 128 images when ``process()`` gets 64: on two cores, pools of 64 took ~15% longer
  (each pool's pass starts and ends beside the previous pool's Python work).
* ``STACK_SCORE_ROWS``: on the CPU where the compiled kernels do not read the score matrices in place (not built,
  or inputs they do not take), a batch of up to that many score rows (~53 MB of 51-column float32 scores) has its
  score matrices copied into one tensor (the layout rule of :mod:`.scores`), unless its images are very long (SGDet
  with all pairs).
"""

NO_HIT = 2 ** 30
K_ALL = 10 ** 9
RANK_CAP_INT16 = 2 ** 15 - 1
AUTO_SAMPLE_ID_BASE = 2 ** 40
POOL_SCORE_ROWS = 2 ** 19
STACK_SCORE_ROWS = 2 ** 18

assert K_ALL < NO_HIT < 2 ** 31, 'NO_HIT must exceed every K and fit int32'
assert RANK_CAP_INT16 < K_ALL and RANK_CAP_INT16 == 32767, 'the int16 rank cap is the int16 maximum'
assert AUTO_SAMPLE_ID_BASE > 2 ** 31, 'automatic sample ids must not collide with dataset indices'
