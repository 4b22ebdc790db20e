"""Pure tensor functions (no MMEngine import): IoU, ranking, matching and recall statistics."""
from .boxes import box_area, box_iou, box_iou_unchecked, mask_iou, paired_box_iou, union_boxes
from .first_hits import scene_graph_ranks
from .matching import (NO_HIT, ObjectMatches, box_object_match_list, box_object_matches, expand_bits, first_hit_rank,
                       first_hit_rank_bits, gather_pair_iou, object_iou_matrix, object_match_list, object_match_matrix,
                       pair_end_bits, pairs_in_reference, predicate_bits, predicate_hit_bits, relation_bits,
                       relation_end_bits, same_class_pairs, triplet_hits)
from .no_graph_constraint import no_graph_constraint_list
from .ranking import graph_constrained_list, pair_end_scores, prefix_topk, stable_topk, triplet_scores
from .scores import RelationScores, build_relation_scores
from .recall import per_predicate_recall, recall_from_ranks
from .triplets import triplet_keys, triplet_parts

__all__ = [
    'NO_HIT', 'box_area', 'box_iou', 'box_iou_unchecked', 'mask_iou', 'paired_box_iou', 'union_boxes',
    'ObjectMatches', 'box_object_match_list', 'box_object_matches', 'expand_bits', 'first_hit_rank',
    'first_hit_rank_bits', 'gather_pair_iou', 'pair_end_bits', 'pairs_in_reference', 'predicate_bits',
    'predicate_hit_bits', 'relation_bits', 'relation_end_bits', 'same_class_pairs', 'triplet_hits',
    'graph_constrained_list', 'pair_end_scores', 'prefix_topk', 'stable_topk', 'triplet_scores', 'RelationScores',
    'build_relation_scores', 'no_graph_constraint_list',
    'object_iou_matrix', 'object_match_list', 'object_match_matrix', 'per_predicate_recall', 'recall_from_ranks',
    'scene_graph_ranks', 'triplet_keys', 'triplet_parts'
]
