"""Curator's ensemble tracker (DESIGN §3.8): on a 3-server ensemble with
reconfigEnabled=true, /zookeeper/config names every server's client address,
and a default Curator client switches its connect string to them, bypassing
the sidecar. Through zkwarden every reply of /zookeeper/config names only the
sidecar, however many reads are in flight (the tracker sends two at start),
so the client stays on it. Shown direct first, so the tests can fail:

- test_default_curator_client_stays_on_the_sidecar: Curator 5.4's own
  tracker, 10 clients one after the other; every connect string the tracker
  sets is the sidecar's (direct: the servers').
- test_pipelined_config_reads_all_rewritten: three getData of
  /zookeeper/config in flight at once (written in one send on a raw
  connection), three rounds: every reply names the sidecar and no server
  (direct: every reply names the servers).
"""

import struct
import subprocess

import pytest

import rawzk
from zkharness import Ensemble

CLIENTS = 10


@pytest.fixture(scope="module")
def ensemble(tmp_path_factory):
    e = Ensemble(tmp_path_factory.mktemp("tracker-ensemble"))
    try:
        e.start()
        yield e
    finally:
        e.stop()


def tracker_configs(java_classes, connect, clients, ms=1500):
    """The connect strings the tracker set, and each client's final one."""
    out = subprocess.run(java_classes.cmd("TrackerCheck", connect, ms, clients), capture_output=True, text=True,
                         timeout=60 + clients * 10)
    assert "READY" in out.stdout, out.stdout + out.stderr
    lines = out.stdout.splitlines()
    configs = [l.split(" ", 1)[1] for l in lines if l.startswith("CONFIG ")]
    finals = [l.split(" ", 1)[1] for l in lines if l.startswith("FINAL ")]
    assert len(finals) == clients, out.stdout + out.stderr
    return configs, finals


def sidecar(request, ensemble):
    return request.getfixturevalue("zkwarden_factory").start(
        *[s.hostport for s in ensemble.servers],
        extra_env={"ZKWARDEN_MODE": "sidecar", "ZKWARDEN_IDENTITY": "jm-0", "ZKWARDEN_SWEEP_INTERVAL_S": "0"})


def names_only(data, hostport):
    """The config text names hostport as its one client address."""
    return data.count(";") == 1 and ";%s" % hostport in data


@pytest.mark.parametrize("kind", ["direct", pytest.param("zkwarden", marks=pytest.mark.zkwarden)])
def test_default_curator_client_stays_on_the_sidecar(kind, ensemble, request, java_classes):
    if kind == "direct":
        configs, finals = tracker_configs(java_classes, ensemble.servers[0].hostport, 1)
        # The tracker replaced the connect string with every server.
        assert configs and all(all(str(s.port) in c for s in ensemble.servers) for c in configs), configs
        return
    proxy = sidecar(request, ensemble)
    configs, finals = tracker_configs(java_classes, proxy.hostport, CLIENTS)
    # A config event per client at least (its reads at start), each the sidecar.
    assert len(configs) >= CLIENTS, configs
    assert set(configs) == {proxy.hostport}, configs
    assert set(finals) == {proxy.hostport}, finals


@pytest.mark.parametrize("kind", ["direct", pytest.param("zkwarden", marks=pytest.mark.zkwarden)])
def test_pipelined_config_reads_all_rewritten(kind, ensemble, request):
    server = ensemble.servers[0]
    port = server.port if kind == "direct" else sidecar(request, ensemble).port
    hostport = "127.0.0.1:%d" % port
    raw = rawzk.RawSession(port)
    try:
        for r in range(3):
            xids = [10 * r + i for i in range(1, 4)]
            raw.send(b"".join(rawzk.get_data(x, "/zookeeper/config") for x in xids))
            datas = []
            for x in xids:
                xid, _, err, body = raw.read_reply()
                assert (xid, err) == (x, 0)
                (n,) = struct.unpack(">i", body[:4])
                datas.append(body[4:4 + n].decode())
            if kind == "direct":
                assert all(d.count(";") == 3 for d in datas), datas
            else:
                assert all(names_only(d, hostport) for d in datas), datas
                assert not any(str(s.port) in d.split(";", 1)[1] for d in datas for s in ensemble.servers), datas
    finally:
        raw.close()
