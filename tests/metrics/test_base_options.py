"""The keywords every row metric's constructor takes without declaring them (``save_state``, ``bootstrap``:
``mmsgg_eval.metrics.options.BASE_OPTIONS``) and the recorded constructor arguments, through one wrapper; the
checks of the shared options (scalars accepted, a bad value names the option)."""
import pytest

from mmsgg_eval.metrics import DetectionAP, GroundingPr, SGMeanRecall, SGRecall, SGBenchMetric
from mmsgg_eval.metrics.base import RowMetric
from mmsgg_eval.metrics.options import BASE_OPTIONS, recorded_arguments
from mmsgg_eval.metrics.settings import metric_settings
from tests.metrics.scene_graph.test_edge_cases import evaluate, two_relation_image


class _Outer(SGRecall):
    """A subclass whose own constructor passes options to its base's."""

    def __init__(self, extra: int = 3, **kwargs):
        super().__init__(mode='sgcls', bootstrap=50, save_state='inner.state', **kwargs)
        self.extra = extra


def test_options_are_stored_checked_and_not_recorded():
    assert set(BASE_OPTIONS) == {'save_state', 'bootstrap'}
    metric = SGMeanRecall(mode='predcls', topk=(5, 20), save_state='m.state', bootstrap=dict(samples=40, seed=3))
    assert metric.save_state == 'm.state'
    assert metric.bootstrap == {'samples': 40, 'level': 0.95, 'seed': 3}
    recorded = recorded_arguments(metric)
    assert recorded['mode'] == ('predcls', True) and recorded['topk'] == ((5, 20), True)
    assert recorded['iou_thr'][1] is False  # a default, not given
    assert not set(BASE_OPTIONS) & set(recorded)
    assert not set(BASE_OPTIONS) & set(metric_settings(metric))


def test_defaults_leave_the_class_attributes():
    metric = SGRecall(mode='predcls')
    assert metric.save_state is None and metric.bootstrap is None
    assert SGRecall(mode='predcls', bootstrap=False).bootstrap is None


def test_outermost_call_records_and_outer_values_win():
    metric = _Outer(extra=7)
    assert recorded_arguments(metric) == {'extra': (7, True)}  # the subclass's own call, not its base's
    assert metric.bootstrap['samples'] == 50 and metric.save_state == 'inner.state'  # given by the nested call
    metric = _Outer(bootstrap=8, save_state='outer.state')
    assert metric.bootstrap['samples'] == 8 and metric.save_state == 'outer.state'
    # a subclass forwarding **kwargs (SGBenchMetric) gets them taken out before its body
    bench = SGBenchMetric(bootstrap=5)
    assert bench.bootstrap['samples'] == 5 and 'bootstrap' not in recorded_arguments(bench)


@pytest.mark.parametrize('cls', [SGRecall, SGMeanRecall, _Outer])
def test_bad_bootstrap_names_the_metric(cls):
    kwargs = {} if cls is _Outer else dict(mode='predcls')
    with pytest.raises(ValueError, match=rf'^{cls.__name__}: bootstrap level must be in \(0, 1\)'):
        cls(bootstrap=dict(level=2), **kwargs)
    with pytest.raises(TypeError):  # an unknown keyword stays a TypeError of the constructor's own signature
        cls(no_such_option=1, **kwargs)


def test_every_row_metric_constructor_is_wrapped():
    import mmsgg_eval.metrics as metrics
    classes = [c for c in vars(metrics).values() if isinstance(c, type) and issubclass(c, RowMetric)
               and c is not RowMetric]
    assert classes
    for cls in classes:
        if '__init__' in cls.__dict__:
            assert hasattr(cls.__init__, '__wrapped__'), cls.__name__


def test_scalar_topk_and_thresholds_are_accepted():
    assert SGRecall(topk=50).topk == (50,)
    assert SGMeanRecall(topk=[20, 50]).topk == (20, 50)
    assert GroundingPr(thresholds=0.5).thresholds == (0.5,)
    res = evaluate(SGRecall(mode='predcls', topk=1), [[two_relation_image(0)]])
    assert res['predcls/R@1'] == 50.0


@pytest.mark.parametrize('build,match', [
    (lambda: SGRecall(topk=0), 'SGRecall: topk must be positive integers'),
    (lambda: SGRecall(topk=True), 'SGRecall: topk'),
    (lambda: SGRecall(topk=2.5), 'SGRecall: topk'),
    (lambda: SGRecall(topk=(20, 20)), 'topk repeats'),
    (lambda: SGRecall(topk='50'), 'SGRecall: topk'),
    (lambda: SGRecall(topk=None), 'SGRecall: topk'),
    (lambda: SGRecall(iou_thr=0), r'iou_thr must be a number in \(0, 1\]'),
    (lambda: SGRecall(iou_thr=1.5), 'iou_thr'),
    (lambda: SGRecall(iou_thr=-0.1), 'iou_thr'),
    (lambda: SGRecall(iou_thr='0.5'), 'iou_thr'),
    (lambda: SGRecall(ng_topk=0), 'ng_topk must be an integer >= 1'),
    (lambda: SGRecall(pool_samples=0), 'pool_samples must be an integer >= 1'),
    (lambda: SGMeanRecall(score_layout='last'), 'score_layout must be one of'),
    (lambda: SGRecall(mode='det'), 'mode must be one of'),
    (lambda: GroundingPr(thresholds='abc'), 'GroundingPr: thresholds must be numbers'),
    (lambda: GroundingPr(thresholds=True), 'GroundingPr: thresholds'),
    (lambda: GroundingPr(thresholds=float('nan')), 'GroundingPr: thresholds'),
    (lambda: GroundingPr(thresholds=None), 'thresholds'),
    (lambda: DetectionAP(max_dets=0), 'DetectionAP: max_dets must be an integer >= 1'),
])
def test_bad_options_name_the_option(build, match):
    with pytest.raises(ValueError, match=match):
        build()
