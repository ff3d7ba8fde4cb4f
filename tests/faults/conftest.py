"""Fixtures for the fault tests (issue 7): the integration suite's own
fixtures (tests/integration/conftest.py: zk_server, private_zk,
zkwarden_factory, kazoo_factory, ...), loaded from there so that every suite
starts and stops ZooKeeper and zkwarden the same way, plus:

- long: True when run as `tests/faults/run.sh --long` (ZKW_FAULTS_LONG=1):
  the long versions (100 crash cycles, partition loops of 30 min, ...);
  False for the quick versions that tests/run.sh runs;
- move_ensemble: one 3-server ensemble (`cons` allowed) that the session
  move tests share (test_session_move.py, test_busy_move.py); each test
  heals it (every member running and in the quorum) when it ends.
"""

import os
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.normpath(os.path.join(HERE, "..", "integration")))
sys.path.insert(0, HERE)

import zkharness  # noqa: E402

_integration = zkharness.export_integration_fixtures(globals())

LONG = os.environ.get("ZKW_FAULTS_LONG", "") not in ("", "0")


@pytest.fixture(scope="session")
def long():
    return LONG


@pytest.fixture(scope="session")
def move_ensemble(tmp_path_factory):
    e = zkharness.Ensemble(tmp_path_factory.mktemp("move-ensemble"), four_letter_words="srvr,ruok,stat,cons")
    try:
        e.start()
        yield e
    finally:
        e.stop()
