"""Curator's ensemble tracker (DESIGN §3.8): on a 3-server ensemble with
reconfigEnabled=true, /zookeeper/config names every server's client address,
and a default Curator client switches its connect string to them, bypassing
the sidecar. Through zkwarden the config names only the sidecar, so the
client stays on it. Shown direct first, so the test can fail."""

import subprocess

import pytest

from zkharness import Ensemble


@pytest.fixture
def ensemble(tmp_path):
    e = Ensemble(tmp_path)
    try:
        e.start()
        yield e
    finally:
        e.stop()


def run_tracker(java_classes, connect, ms=4000):
    out = subprocess.run(java_classes.cmd("TrackerCheck", connect, ms), capture_output=True, text=True,
                         timeout=120)
    assert "READY" in out.stdout, out.stdout + out.stderr
    final = [l for l in out.stdout.splitlines() if l.startswith("FINAL ")]
    assert final, out.stdout + out.stderr
    return final[0].split(" ", 1)[1]


@pytest.mark.parametrize("kind", ["direct", pytest.param("zkwarden", marks=pytest.mark.zkwarden)])
def test_default_curator_client_stays_on_the_sidecar(kind, ensemble, request, java_classes, kazoo_factory):
    first = ensemble.servers[0]
    if kind == "direct":
        final = run_tracker(java_classes, first.hostport)
        # The tracker replaced the connect string with every server.
        assert all(str(s.port) in final for s in ensemble.servers), final
        return
    proxy = request.getfixturevalue("zkwarden_factory").start(
        *[s.hostport for s in ensemble.servers],
        extra_env={"ZKWARDEN_MODE": "sidecar", "ZKWARDEN_IDENTITY": "jm-0", "ZKWARDEN_SWEEP_INTERVAL_S": "0"})
    final = run_tracker(java_classes, proxy.hostport)
    assert final == proxy.hostport, final
    # What the sidecar shows for /zookeeper/config: one client address, its own.
    data = kazoo_factory(proxy.hostport).get("/zookeeper/config")[0].decode()
    assert data.count(";") == 1 and ";%s" % proxy.hostport in data, data
    direct = kazoo_factory(first.hostport).get("/zookeeper/config")[0].decode()
    assert direct.count(";") == 3
