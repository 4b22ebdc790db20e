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
