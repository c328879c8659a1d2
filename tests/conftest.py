"""Root conftest: makes tests/ importable so test modules can share plan_helpers; the ``ray_head``
fixture of the Ray tests."""
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))


@pytest.fixture(scope="module")
def ray_head(tmp_path_factory):
    """A private local Ray head (tests/ray_helpers.py) for one test module; skipped without Ray."""
    pytest.importorskip("ray")
    from ray_helpers import local_ray_head

    with local_ray_head(tmp_path_factory.mktemp("ray")) as address:
        yield address
