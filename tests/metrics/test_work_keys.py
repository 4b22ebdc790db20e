"""Keys of shared work (RowMetric.compute_key / summary_key) are derived from the recorded constructor
arguments, the row schema and the declared row facts, never hand-listed: a new argument is part of both keys
unless declared output-only or summary-only. ComputeGroup declares its fields."""
import inspect

import pytest
import torch

from mmsgg_eval.metrics import ComputeGroup, SGMeanRecall, SGRecall
from mmsgg_eval.metrics.scene_graph import SceneGraphMetric
from mmsgg_eval.metrics.sgbench import SGBenchMetric
from mmsgg_eval.metrics.settings import NOT_IN_WORK_KEYS, key_value, work_key
from mmsgg_eval.metrics.state import rows_description
from tests.metrics.scene_graph.test_recall import META


def with_meta(*metrics):
    for m in metrics:
        m.dataset_meta = META
    return metrics


class RecallWithOption(SGRecall):
    """A metric that gains a constructor argument nobody declared anywhere."""

    def __init__(self, new_option: float = 0.5, **kwargs):
        super().__init__(**kwargs)
        self.new_option = new_option


class RecallWithSummaryOption(SGRecall):
    summary_arguments = SGRecall.summary_arguments + ('summary_option',)

    def __init__(self, summary_option: str = 'a', **kwargs):
        super().__init__(**kwargs)
        self.summary_option = summary_option


def test_recall_and_mean_recall_with_equal_settings_share_rows_and_summaries():
    recall, mean, other_k = with_meta(SGRecall(mode='sgdet'), SGMeanRecall(mode='sgdet'),
                                      SGMeanRecall(mode='sgdet', topk=(50, 100)))
    assert recall.compute_key() == mean.compute_key() == other_k.compute_key()  # the same ranked lists (max K)
    assert recall.summary_key() == mean.summary_key() != other_k.summary_key()  # the summary reads every K
    assert ComputeGroup.join(recall.compute_key()) is ComputeGroup.join(mean.compute_key())


def test_a_new_constructor_argument_is_part_of_the_keys_without_being_listed():
    a, b, c = with_meta(RecallWithOption(mode='sgdet'), RecallWithOption(mode='sgdet', new_option=0.7),
                        RecallWithOption(mode='sgdet', new_option=0.5))
    assert a.compute_key() != b.compute_key() and a.summary_key() != b.summary_key()
    assert a.compute_key() == c.compute_key() and a.summary_key() == c.summary_key()


def test_a_declared_summary_argument_keeps_the_rows_shared_but_not_the_summary():
    a, b = with_meta(RecallWithSummaryOption(mode='sgdet'), RecallWithSummaryOption(mode='sgdet', summary_option='b'))
    assert a.compute_key() == b.compute_key()
    assert a.summary_key() != b.summary_key()


@pytest.mark.parametrize('argument,value', [('outfile_prefix', 'x/out'), ('report_dir', 'x'), ('prefix', 'other'),
                                            ('collect_device', 'gpu'), ('save_state', 'x.state')])
def test_output_only_arguments_change_no_key(argument, value):
    a, b = with_meta(SGRecall(mode='predcls'), SGMeanRecall(mode='predcls', **{argument: value}))
    assert a.compute_key() == b.compute_key() and a.summary_key() == b.summary_key()


@pytest.mark.parametrize('argument,value', [('iou_thr', 0.7), ('ng_topk', 50), ('rank', 'given'), ('match', 'mask'),
                                            ('score_layout', 'background_first'), ('strict_counts', True),
                                            ('pool_samples', 7), ('zeroshot_triplets', [(0, 1, 2)]),
                                            ('protocol', 'openpsg'), ('per_image_topk', 5), ('mode', 'sgcls')])
def test_every_row_argument_separates_the_compute_keys(argument, value):
    a, b = with_meta(SGRecall(mode='predcls'), SGMeanRecall(**{'mode': 'predcls', argument: value}))
    assert a.compute_key() != b.compute_key()


@pytest.mark.parametrize('argument,value', [('mr_average', 'present'), ('recall_average', 'micro'),
                                            ('skip_empty_predictions', False), ('topk', (20, 100)),
                                            ('predicate_groups', {'g': ['p0']}), ('novel_predicates', ['p1'])])
def test_every_summary_argument_separates_only_the_summary_keys(argument, value):
    a, b = with_meta(SGRecall(mode='predcls'), SGMeanRecall(**{'mode': 'predcls', argument: value}))
    assert a.compute_key() == b.compute_key()
    assert a.summary_key() != b.summary_key()


def test_dataset_facts_are_part_of_the_compute_key():
    base = with_meta(SGRecall(mode='predcls'))[0]
    for change in (dict(classes=list(META['classes'])[::-1]), dict(predicates=list(META['predicates'])[:-1]),
                   dict(zeroshot_triplets=[(0, 1, 2)]), dict(iou_plus_one=not META.get('iou_plus_one', False))):
        other = SGRecall(mode='predcls')
        other.dataset_meta = {**META, **change}
        assert other.compute_key() != base.compute_key(), change


def test_zeroshot_sets_are_compared_by_content():
    a, b, c = with_meta(*(SGRecall(mode='predcls', zeroshot_triplets=torch.tensor(t))
                          for t in ([[0, 1, 2]], [[0, 1, 3]], [[0, 1, 2]])))
    assert a.compute_key() != b.compute_key() and a.compute_key() == c.compute_key()


def test_sgbench_never_shares_with_the_recall_metrics():
    a, b = with_meta(SGRecall(mode='sgdet'), SGBenchMetric(mode='sgdet'))
    assert a.compute_key()[0] != b.compute_key()[0]  # the class that computes the rows is part of the key


def test_declared_summary_arguments_are_constructor_arguments():
    """A typo in a declaration would silently put nothing in the summary key."""
    for cls in (SceneGraphMetric, SGBenchMetric):
        params = set(inspect.signature(SceneGraphMetric.__init__).parameters)
        assert set(cls.summary_arguments) <= params, cls
        assert not set(cls.summary_arguments) & set(NOT_IN_WORK_KEYS)


def test_metrics_that_do_not_share_have_no_keys():
    from mmsgg_eval.metrics.oi import OIRelationMetric
    metric = OIRelationMetric()
    assert metric.compute_key() is None and metric.summary_key() is None


def test_key_values_are_exact():
    assert key_value(True) != key_value(1) != key_value(1.0)
    assert key_value([1, 2]) == key_value((1, 2))
    assert key_value({'a': 1, 'b': 2}) == key_value({'b': 2, 'a': 1})
    assert key_value(torch.tensor([1, 2])) != key_value(torch.tensor([1, 2], dtype=torch.int32))
    assert key_value(object()) != key_value(object())  # unknown objects: no sharing rather than a wrong one
    assert key_value(object(), identity=False) == key_value(object(), identity=False)  # what ranks compare


def test_rank_description_falls_back_on_the_derived_key_for_tensor_settings():
    metric = with_meta(SGRecall(mode='predcls', zeroshot_triplets=torch.tensor([[0, 1, 2]])))[0]
    assert rows_description(metric)['settings'] == repr(work_key(metric, 'rows', identity=False))


def test_compute_group_declares_its_fields():
    group = ComputeGroup(('a key',))
    with pytest.raises(AttributeError):
        group.bootstrap_done = None  # nothing is set on a group from outside
    tables = {}
    group.record_bootstrap('k', tables, {'intervals': {}})
    assert group.bootstrap_result('k', tables) == {'intervals': {}}
    assert group.bootstrap_result('k', {}) is None  # other tables (by identity)
    assert not group.per_image_written(('p', 1, 'c'))
    group.record_per_image(('p', 1, 'c'))
    assert group.per_image_written(('p', 1, 'c'))
