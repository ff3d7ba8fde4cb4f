"""Fixtures for the keeper's tests (issue 37): the integration suite's own
fixtures (tests/integration/conftest.py: zk_server, ...), loaded from there
so that every suite starts and stops ZooKeeper the same way, plus
`sidecars`: a factory of Sidecar environments (keeperlib.py) whose
processes are all stopped at teardown, the test failing unless each exits
as expected with no sanitizer report in its log."""

import os
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.normpath(os.path.join(HERE, "..", "integration")))
sys.path.insert(0, HERE)

import zkharness  # noqa: E402
from keeperlib import Sidecar, keeper_bin, zkwarden_bin  # noqa: E402

_integration = zkharness.export_integration_fixtures(globals())


class Sidecars:
    def __init__(self, tmp_path, node):
        self.tmp_path = tmp_path
        self.node = node
        self.all = []

    def __call__(self, upstream, extra_env=None, name=None):
        name = name or "sc%d" % len(self.all)
        sc = Sidecar(self.tmp_path / name, upstream, extra_env, name=name)
        self.all.append(sc)
        _integration._logs_of(self.node).insert(0, ("%s logs" % name, sc.text))
        return sc


@pytest.fixture
def sidecars(tmp_path, request):
    for b in (zkwarden_bin(), keeper_bin()):
        assert os.access(b, os.X_OK), "%s not built (cmake --build build)" % b
    f = Sidecars(tmp_path, request.node)
    yield f
    problems = []
    for sc in f.all:
        problems += sc.stop_all()
    if problems:
        text = "\n".join(problems)
        for sc in f.all:
            text += "\n" + sc.text()[-20000:]
        pytest.fail("shutdown check failed:\n" + text, pytrace=False)
