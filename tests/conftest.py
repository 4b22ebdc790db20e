import os

import pytest

SHARED = os.path.abspath(os.path.join(os.path.dirname(__file__), '..', '..', 'shared'))
FIXTURES = os.path.join(SHARED, 'fixtures')


@pytest.fixture
def fixtures_dir():
    """Path of ../shared/fixtures (real data samples); tests using it skip when it is absent."""
    if not os.path.isdir(FIXTURES):
        pytest.skip(f'real fixtures not found at {FIXTURES}')
    return FIXTURES


@pytest.fixture(params=['compiled', 'torch'])
def score_kernels(request):
    """Runs a test once with the compiled CPU score kernels (skipped where they are not built; CI requires them,
    see tests/functional/compiled/test_score_kernels.py) and once with the torch implementation; yields the name."""
    from mmsgg_eval.functional import compiled
    if request.param == 'compiled':
        if not compiled.built():
            pytest.skip('the compiled kernels (mmsgg_eval._ext) are not built')
        yield 'compiled'
    else:
        with compiled.disabled():
            yield 'torch'


@pytest.fixture
def torch_scores():
    """The torch implementation of the score layouts (stacked, concatenated, views) for this test."""
    from mmsgg_eval.functional import compiled
    with compiled.disabled():
        yield
