"""/v1/reclaims and the identity metrics, filled by real actions of the
identity code: fencing a superseded session and fencing an orphan."""

import re

import pytest

import promcheck
import rawzk
from zkharness import wait_until

pytestmark = pytest.mark.zkwarden


def reclaims(adm):
    r = adm.get("/v1/reclaims")
    assert r.status == 200 and r.headers["content-type"] == "application/json"
    return r.json()


def test_fence_of_a_superseded_session_is_listed(zk_server, zkwarden_factory, admin):
    proxy = zkwarden_factory.start(zk_server, extra_env={"ZKWARDEN_ORPHAN_GRACE_MS": "0", "ZKWARDEN_MODE": "sidecar"})
    adm = admin(proxy)
    first = rawzk.RawSession(proxy.port, timeout_ms=30000)
    assert first.create_latch() == 0  # incarnation 1
    first.close()  # the JobManager dies; its session lives on in the server
    second = rawzk.RawSession(proxy.port)
    assert second.create_latch() == 0  # incarnation 2: fences the first
    doc = wait_until(lambda: (lambda d: d if d["reclaims"] else None)(reclaims(adm)), 10,
                     what="the fence in /v1/reclaims")
    assert doc["total"] == 1 and doc["capacity"] == 256
    (e,) = doc["reclaims"]
    assert e["kind"] == "fence"
    assert e["session"] == "0x%x" % first.session_id
    assert e["incarnation"] == 1 and e["identity"].startswith("admin-test-")
    assert e["path"] == "" and e["reason"]
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", e["time"])
    s = adm.samples()
    assert promcheck.value(s, "zkwarden_fences_total") == 1
    assert promcheck.value(s, "zkwarden_identity_incarnation") == 2
    assert promcheck.value(s, "zkwarden_fence_failures_total") == 0
    assert promcheck.value(s, "zkwarden_identity_conflicts_total") == 0
    second.close()


def test_orphan_fence_is_listed(zk_server, zkwarden_factory, admin):
    proxy = zkwarden_factory.start(zk_server, extra_env={"ZKWARDEN_ORPHAN_GRACE_MS": "300", "ZKWARDEN_MODE": "sidecar"})
    adm = admin(proxy)
    before = adm.samples()
    s = rawzk.RawSession(proxy.port, timeout_ms=30000)
    assert s.create_latch() == 0  # incarnation 1 (a plain client is never orphan-fenced)
    sid = s.session_id
    s.close()  # dropped without closeSession: an orphan after 300 ms
    doc = wait_until(lambda: (lambda d: d if d["reclaims"] else None)(reclaims(adm)), 10,
                     what="the orphan fence in /v1/reclaims")
    (e,) = doc["reclaims"]
    assert (e["kind"], e["session"], e["incarnation"]) == ("orphan_fence", "0x%x" % sid, 1)
    m = adm.samples()
    assert promcheck.value(m, "zkwarden_orphans_fenced_total") == 1
    closed = [promcheck.value(x, "zkwarden_connections_closed_total", reason="client_closed") for x in (before, m)]
    assert closed[1] - closed[0] == 1
