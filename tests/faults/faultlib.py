"""Small helpers shared by the crash, ensemble and pause fault tests: what
zkwarden says about itself (admin endpoint, metrics, open descriptors) and
what the ZooKeeper server says about its sessions (`dump`, `cons`), so that a
test can tell live sessions from stale ones on both sides."""

import json
import os
import re

from zkharness import four_letter

SID = re.compile(r"0x[0-9a-fA-F]+")


def metric(proxy, name):
    """The sum of every series of one metric (0 when absent)."""
    return sum(v for k, v in proxy.metrics().items() if k == name or k.startswith(name + "{"))


def proxy_sessions(proxy):
    """{session id (int): entry} of /v1/sessions."""
    status, body = proxy.admin_get("/v1/sessions")
    assert status == 200, body
    doc = json.loads(body)
    return {int(s["session"], 16): s for s in doc["sessions"]}


def open_fds(pid):
    return len(os.listdir("/proc/%d/fd" % pid))


def fd_list(pid):
    """What each descriptor of pid is (for a failure message)."""
    out = []
    d = "/proc/%d/fd" % pid
    for f in os.listdir(d):
        try:
            out.append((int(f), os.readlink(os.path.join(d, f))))
        except OSError:  # closed while we looked
            pass
    return sorted(out)


def wait_ready(proxy, timeout=20.0):
    """Waits for /readyz 200: zkwarden's own connections (admin listener,
    registry session in sidecar mode) are then open, so its descriptor
    count is a baseline."""
    from zkharness import wait_until

    def ready():
        try:
            return proxy.admin_get("/readyz")[0] == 200
        except OSError:  # the admin endpoint is not listening yet
            return False
    wait_until(ready, timeout, interval=0.1, what="zkwarden /readyz 200")


def server_sessions(port):
    """Every session the server tracks (the SessionTracker part of `dump`),
    connected or not: a session a crashed proxy left behind shows here
    until it expires."""
    text = four_letter(port, "dump").decode("utf-8", "replace")
    tracker = text.split("ephemeral nodes dump", 1)[0]
    return {int(m, 16) for m in SID.findall(tracker)}


def server_connection_sids(port):
    """The session id of every client connection the server holds (`cons`)."""
    text = four_letter(port, "cons").decode("utf-8", "replace")
    return {int(m.group(1), 16) for m in re.finditer(r"sid=(0x[0-9a-fA-F]+)", text)}


def hexes(ids):
    return sorted("0x%x" % i for i in ids)
