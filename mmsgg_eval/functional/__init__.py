"""Pure tensor functions (no MMEngine import): IoU, ranking, matching and recall statistics."""
from .boxes import box_area, box_iou, box_iou_unchecked, mask_iou, paired_box_iou, union_boxes
from .matching import (NO_HIT, box_object_matches, first_hit_rank, gather_pair_iou, ranked_list_hits,
                       relation_end_matches, triplet_hits)
from .ranking import stable_topk, triplet_scores
from .scores import RelationScores, build_relation_scores
from .recall import (no_graph_constraint_list, object_iou_matrix, object_match_matrix, per_predicate_recall, recall_from_ranks, scene_graph_ranks,
                     triplet_keys)

__all__ = [
    'NO_HIT', 'box_area', 'box_iou', 'box_iou_unchecked', 'mask_iou', 'paired_box_iou', 'union_boxes',
    'box_object_matches', 'first_hit_rank', 'gather_pair_iou', 'ranked_list_hits', 'relation_end_matches',
    'triplet_hits', 'stable_topk', 'triplet_scores', 'RelationScores', 'build_relation_scores',
    'no_graph_constraint_list', 'object_iou_matrix', 'object_match_matrix', 'per_predicate_recall', 'recall_from_ranks', 'scene_graph_ranks',
    'triplet_keys'
]
