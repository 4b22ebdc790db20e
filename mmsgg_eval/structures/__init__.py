"""Reading data samples into validated tensors: field access, tensor conversion, the value rules of the data
contract, and the scene-graph batch reader.

* :mod:`.fields`: :func:`get_field` (one accessor for data elements, dicts, ``metainfo`` and legacy BoxLists),
  :func:`to_tensor` (one converter), :func:`require` / :func:`optional`, :func:`sample_name`,
  :func:`sample_index`;
* :mod:`.validation`: the value rules, written once, applied to padded batches (and to single fields);
* :mod:`.reader`: :func:`collate_scene_graphs` -> :class:`SceneGraphBatch`, the per-mode object rule and
  :class:`ObjectCounts` (predicted object lists of another length than the GT).
"""
from ..functional.scores import RelationScores
from .fields import get_field, member, optional, require, sample_index, sample_name, to_tensor
from .reader import (MODES, SCORE_LAYOUTS, ObjectCounts, SceneGraphBatch, collate_scene_graphs, collate_stages,
                     read_scene_graph)
from .validation import check_boxes, check_finite

__all__ = ['MODES', 'SCORE_LAYOUTS', 'ObjectCounts', 'RelationScores', 'SceneGraphBatch', 'check_boxes', 'check_finite',
           'collate_scene_graphs', 'collate_stages', 'get_field', 'member', 'optional', 'read_scene_graph', 'require',
           'sample_index', 'sample_name', 'to_tensor']
