"""2. Four-letter words are relayed raw: the reply is the server's own text
and the connection closes after it."""

import socket
import time

from zkharness import HOST, four_letter


def keys(text):
    """The field names of a srvr/stat reply (values such as latencies and
    counters differ from one call to the next)."""
    return [line.split(":", 1)[0] for line in text.decode().splitlines() if line.strip()]


def test_srvr(target, zk_server):
    out = four_letter(target.port, "srvr")
    assert b"Zookeeper version: 3.8" in out
    assert b"Mode: standalone" in out
    assert keys(out) == ["Zookeeper version", "Latency min/avg/max", "Received", "Sent",
                         "Connections", "Outstanding", "Zxid", "Mode", "Node count"]
    if target.via_zkwarden:
        direct = four_letter(zk_server.port, "srvr")
        assert keys(out) == keys(direct)


def test_ruok(target):
    assert four_letter(target.port, "ruok") == b"imok"


def test_stat(target):
    out = four_letter(target.port, "stat")
    assert out.startswith(b"Zookeeper version: 3.8")
    assert b"Clients:" in out and b"Mode: standalone" in out


def test_word_not_in_whitelist(target):
    assert four_letter(target.port, "conf") == \
        b"conf is not executed because it is not in the whitelist.\n"


def test_srvr_split_across_writes(target):
    """The four bytes arrive in two TCP segments."""
    with socket.create_connection((HOST, target.port), timeout=5) as s:
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        s.sendall(b"sr")
        time.sleep(0.2)
        s.sendall(b"vr")
        out = b""
        while True:
            d = s.recv(65536)
            if not d:
                break
            out += d
    assert b"Mode: standalone" in out
