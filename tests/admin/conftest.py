"""Fixtures for the operability tests (admin endpoint, config, deploy/).

They are the integration suite's own fixtures (tests/integration/conftest.py:
zk_server, private_zk, zkwarden_factory, kazoo_factory, ...), loaded from
there so that both suites start and stop processes the same way, plus:

- admin: an AdminClient (curl and raw sockets) for a zkwarden's admin port;
- zkwarden_factory: as the integration suite's, with an identity per zkwarden.
"""

import os
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.normpath(os.path.join(HERE, "..", "integration")))
sys.path.insert(0, HERE)

import zkharness  # noqa: E402

_integration = zkharness.export_integration_fixtures(globals())

from adminclient import AdminClient  # noqa: E402

_identities = iter(range(1, 1 << 30))


class _Factory(_integration.ZkwardenFactory):
    """The integration suite's factory, giving every zkwarden an identity of
    its own (unless the test sets one): tests then never fence or reclaim
    each other's sessions through the shared server's registry."""

    def start(self, *servers, **kw):
        env = dict(kw.pop("extra_env", None) or {})
        env.setdefault("ZKWARDEN_IDENTITY", "admin-test-%d-%d" % (os.getpid(), next(_identities)))
        return super().start(*servers, extra_env=env, **kw)


@pytest.fixture
def zkwarden_factory(tmp_path, request):
    yield from _integration.zkwarden_factory_fixture(tmp_path, request, _Factory)


@pytest.fixture
def admin():
    """admin(proxy) -> an AdminClient for that zkwarden's admin port."""
    return lambda proxy: AdminClient(proxy.admin_port)


@pytest.fixture(scope="session")
def zkw_bin():
    import zkharness
    return zkharness.default_zkwarden_bin()


@pytest.fixture(scope="session")
def promtool():
    """Path of promtool (fetched by get-promtool.sh), or None when it cannot
    be had; tests then rely on promcheck.py alone and say so."""
    import subprocess
    r = subprocess.run([os.path.join(HERE, "get-promtool.sh")], capture_output=True, text=True, timeout=600)
    if r.returncode != 0:
        import logging
        logging.getLogger("zkw.tests").warning("promtool unavailable: %s", r.stderr.strip())
        return None
    return r.stdout.strip()
