"""Fixtures for the real-vLLM harness tests (tests/vllm_real; not "tests/vllm", which would shadow the vllm package on sys.path).

The fixtures live in tests/vllm_server/fixtures.py; a non-root conftest may not use
``pytest_plugins``, so they are imported here.
"""

import pathlib
import sys

_REPO_ROOT = pathlib.Path(__file__).resolve().parents[2]
if str(_REPO_ROOT) not in sys.path:  # make `tests.vllm_server` importable in any import mode
    sys.path.insert(0, str(_REPO_ROOT))

from tests.vllm_server.fixtures import *  # noqa: E402, F403
