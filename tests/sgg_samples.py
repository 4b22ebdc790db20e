"""Random scene-graph samples for differential tests: :mod:`mmsgg_eval.testing.random_samples` (one module for
the tests and the benchmark workloads)."""
from mmsgg_eval.testing.random_samples import box_masks, random_dataset, random_image  # noqa: F401
