"""The index page's per-predicate chart is sorted by training frequency when known, else by the GT
count of the report's images, and says which."""
from mmsgg_eval.analysis.browse import chart_order

PREDICATES = ['above', 'behind', 'on', 'wearing']
PER_PREDICATE = {'above': {'num_gt': 1}, 'behind': {'num_gt': 0}, 'on': {'num_gt': 5}, 'wearing': {'num_gt': 1}}


def test_training_frequency_when_known():
    order, note = chart_order(PREDICATES, PER_PREDICATE, [3, 10, 40, 10])
    assert order == ['on', 'behind', 'wearing', 'above'] and note == 'predicates sorted by training frequency'


def test_gt_count_when_unknown_ties_in_predicate_order():
    for counts in (None, [1, 2]):  # absent, or not one count per predicate
        order, note = chart_order(PREDICATES, PER_PREDICATE, counts)
        assert order == ['on', 'above', 'wearing', 'behind']
        assert note == 'predicates sorted by GT count in these images (training frequencies unknown)'
