"""What ``tools/benchmark.py`` measures, and how (not imported by the metrics).

``workloads`` (the seeded synthetic data), ``runners`` (one runner per implementation, the job table and one
subprocess per job), ``timing`` (``best_of``, the one timing helper), ``report`` (the table and the ratios),
``offline`` (evaluation from a prediction stream and the offline CLI), ``relclip`` (RelCLIPScore and the
alignment study), ``legacy_numpy`` (the per-image numpy peer).
"""
