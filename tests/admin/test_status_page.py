"""The status page (GET / on the admin endpoint), rendered by headless
Chromium as an operator's browser would through `kubectl port-forward`:
identity, incarnation, readiness and why, sessions and their roles, recent
reclaims and the lock summary, with no external assets. The screenshot is
kept under the build directory (test-artifacts/status-page.png).

Chromium only ever talks to the loopback admin port: background networking
is off and every host name other than 127.0.0.1 fails to resolve."""

import os
import re
import shutil
import socket
import uuid

import pytest

import rawzk
from zkharness import default_build_dir, run_bounded, wait_until

pytestmark = pytest.mark.zkwarden

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


def chromium(tmp_path, url, *args):
    if not CHROMIUM:
        pytest.fail("chromium is not installed (deploy/install-deps.sh installs it)")
    cmd = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
           "--disable-background-networking", "--disable-component-update", "--disable-sync",
           "--disable-default-apps", "--disable-extensions", "--no-pings", "--disable-domain-reliability",
           "--host-resolver-rules=MAP * ~NOTFOUND , EXCLUDE 127.0.0.1",
           "--user-data-dir=%s" % (tmp_path / "chromium-profile")] + list(args) + [url]
    rc, out, err = run_bounded(cmd, 120)
    assert rc == 0, err[-3000:]
    return out


def text_of(dom):
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", dom))


def test_status_page_in_a_browser(zk_server, zkwarden_factory, kazoo_factory, admin, tmp_path):
    identity = "jm-status-%d" % os.getpid()
    proxy = zkwarden_factory.start(zk_server, extra_env={
        "ZKWARDEN_MODE": "sidecar", "ZKWARDEN_IDENTITY": identity, "ZKWARDEN_ORPHAN_GRACE_MS": "0",
        "ZKWARDEN_LOCK_ROOTS": "/flink-status-%d" % os.getpid(), "ZKWARDEN_SWEEP_INTERVAL_S": "0"})
    adm = admin(proxy)
    root = "/flink-status-%d" % os.getpid()
    first = rawzk.RawSession(proxy.port, timeout_ms=30000)
    assert first.create_latch(root) == 0  # incarnation 1, dies without closing
    first.close()
    jm = kazoo_factory(proxy.hostport)
    jm.create("%s/_c_%s-latch-" % (root, uuid.uuid4()), b"", ephemeral=True, sequence=True)  # incarnation 2: fences the first
    wait_until(lambda: adm.get("/v1/reclaims").json()["reclaims"], 10, what="the fence")
    graph = "/flink-status-%d/c1/jobgraphs/%s" % (os.getpid(), "a" * 32)
    jm.create(graph + "/locks", makepath=True)
    jm.create("%s/locks/%s" % (graph, uuid.uuid4()), b"127.0.0.1", ephemeral=True)
    # A connection that has not sent its ConnectRequest yet: no incarnation.
    plain = socket.create_connection(("127.0.0.1", proxy.port))
    wait_until(lambda: adm.get("/v1/sessions").json()["count"] == 2, 10, what="two connections")

    url = "http://127.0.0.1:%d/" % proxy.admin_port
    r = adm.get("/")
    assert r.status == 200 and r.headers["content-type"] == "text/html; charset=utf-8"
    assert not re.search(r"(src|href)=\"(https?:)?//", r.text)  # no external assets

    dom = chromium(tmp_path, url, "--dump-dom")
    text = text_of(dom)
    assert "zkwarden" in text and identity in text
    assert re.search(r"incarnation 2\b", text)  # the JobManager session's role
    assert "plain client" in text
    assert re.search(r"readiness ready", text)
    assert re.search(r"registry owner", text)
    assert re.search(r"fence /?\s*%s 1 0x[0-9a-f]+" % re.escape(identity), text), text
    assert re.search(r"%s 2 1 0 0 ok" % re.escape(identity), text), text  # lock summary: 1 lock, 0 stale, 0 zombies
    assert "1 lock(s): 0 stale, 0 untagged; 1 state node(s), 1 held" in text

    shots = os.path.join(default_build_dir(), "test-artifacts")
    os.makedirs(shots, exist_ok=True)
    png = os.path.join(shots, "status-page.png")
    if os.path.exists(png):
        os.unlink(png)
    chromium(tmp_path, url, "--screenshot=%s" % png, "--window-size=1100,760", "--hide-scrollbars")
    with open(png, "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"
    print("status page screenshot: %s" % png)
    plain.close()


def test_status_page_says_why_not_ready(zkwarden_factory, admin):
    # No ZooKeeper at all: the page still answers, and says why it is not ready.
    proxy = zkwarden_factory.start("127.0.0.1:1", extra_env={"ZKWARDEN_MODE": "sidecar"})
    r = admin(proxy).get("/")
    assert r.status == 200
    text = text_of(r.text)
    assert "readiness not ready: " in text
    assert "lock report unavailable: the registry session is not connected" in text
