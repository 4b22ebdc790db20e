"""Analyses of datasets and metrics (the relation alignment study of RelCLIPScore-style encoders)."""
from .relation_alignment import (AlignmentRows, alignment_markdown, alignment_summary, candidate_predicates,
                                 rank_statistics, run_relation_alignment, write_alignment_report)

__all__ = ['AlignmentRows', 'alignment_summary', 'alignment_markdown', 'candidate_predicates', 'rank_statistics',
           'run_relation_alignment', 'write_alignment_report']
