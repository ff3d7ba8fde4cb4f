"""zkwarden-keeper and the hand-over between zkwarden processes (issue 37),
with real processes in front of a real ZooKeeper, on loopback.

What is checked is the transport and the processes' lives: who holds the
listening socket and each client connection, and when. What becomes of an
inherited session (its recovery from the journal) is not: until the
recovery lands a successor closes the connections it inherits, and these
tests only check that it inherited them. Each keeper behaviour is shown
beside what happens without it (the same kill or restart of a zkwarden
serving by itself), so that a test fails when the keeper does nothing.
"""

import os
import re
import shutil
import signal
import socket
import stat
import sys
import time

import pytest

import rawzk
from keeperlib import (children, eof_within, fds, held, holds, keeper_bin, pid_gone, refused_during,
                       server_side, stop_pid, zkwarden_bin)
from zkharness import HOST, wait_until

KEEPER_ON = {"ZKWARDEN_KEEPER": "on"}


def connect_response(sock, timeout):
    """Reads a ConnectResponse frame; the negotiated timeout (>0: a session)."""
    sock.settimeout(timeout)
    buf = b""
    while len(buf) < 4 or len(buf) < 4 + int.from_bytes(buf[:4], "big"):
        d = sock.recv(4096)
        if not d:
            raise ConnectionError("closed before the ConnectResponse")
        buf += d
    return int.from_bytes(buf[8:12], "big", signed=True)


def answers(session):
    """The established raw session still gets replies."""
    session.send(rawzk.exists(77, "/"))
    xid, _, err, _ = session.read_reply()
    return xid == 77 and err == 0


def kept_session(sc):
    """The Kubernetes layout (a keeper without --spawn, a worker of the
    test's with ZKWARDEN_KEEPER=on) and an established session through it,
    once the keeper holds its connection: (keeper, worker, session, the
    inode of the sidecar's end)."""
    k = sc.keeper(spawn=False)
    w = sc.worker(env=KEEPER_ON)
    sc.serves()
    s = rawzk.RawSession(sc.port, timeout_ms=10000)
    inode = server_side(sc, s.sock)
    wait_until(lambda: holds(k.pid, inode), 10, what="the keeper to hold the connection")
    return k, w, s, inode


def test_listening_socket_kept_across_worker_kill(zk_server, sidecars):
    """A keeper without --spawn (the Kubernetes layout: the worker runs in
    another container): while no worker runs after a kill -9, a client's
    connection is accepted into the keeper's socket's backlog and served by
    the next worker. Without a keeper, the same kill refuses it."""
    plain = sidecars(zk_server.hostport, name="plain")
    z = plain.worker()
    plain.serves()
    z.kill()
    z.stopped_by_test = True
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection((HOST, plain.port), timeout=5).close()

    sc = sidecars(zk_server.hostport)
    k = sc.keeper(spawn=False)
    sc.wait_log(k, "waiting for workers")
    w1 = sc.worker(env=KEEPER_ON)
    sc.serves()
    w1.kill()
    w1.stopped_by_test = True
    sc.wait_log(k, r"worker pid %d is gone" % w1.pid)
    c = socket.create_connection((HOST, sc.port), timeout=5)  # in the backlog: nobody accepts yet
    try:
        c.sendall(rawzk.connect_request(6000))
        c.settimeout(1.0)
        with pytest.raises(socket.timeout):
            c.recv(1)
        sc.worker(env=KEEPER_ON, name="zkwarden2")
        assert connect_response(c, 60) > 0
    finally:
        c.close()
    sc.serves()


def test_spawned_worker_restarted_at_once_then_with_a_pause(zk_server, sidecars):
    """--spawn: a worker killed -9 is started again at once (a client
    connecting right after the kill is served), and one that keeps dying
    young waits a growing pause."""
    sc = sidecars(zk_server.hostport)
    k = sc.keeper()
    seen = [sc.worker_pid(k)]
    sc.serves()
    for _ in range(3):
        os.kill(seen[-1], signal.SIGKILL)
        c = socket.create_connection((HOST, sc.port), timeout=5)
        try:
            c.sendall(rawzk.connect_request(6000))
            assert connect_response(c, 60) > 0
        finally:
            c.close()
        seen.append(sc.worker_pid(k, not_in=seen))
    text = k.text()
    assert len(re.findall(r"was killed by signal 9", text)) == 3
    # The first death is restarted at once; the two after it (young) wait.
    first = text.index("was killed by signal 9")
    assert "starting the next worker in" not in text[first:text.index("started worker pid %d" % seen[1])]
    assert len(re.findall(r"starting the next worker in \d+ ms", text)) == 2


def test_held_connection_survives_worker_kill(zk_server, sidecars):
    """An established session's connection stays open across a kill -9 of
    the worker: the keeper holds a duplicate (the very socket, by inode),
    the client sees no EOF, and the next worker inherits it and takes the
    session up (the journal): its requests are answered on the same
    connection. Without a keeper the client sees EOF at once."""
    plain = sidecars(zk_server.hostport, name="plain")
    z = plain.worker()
    plain.serves()
    s = rawzk.RawSession(plain.port, timeout_ms=10000)
    z.kill()
    z.stopped_by_test = True
    assert eof_within(s.sock, 5.0)
    s.close()

    sc = sidecars(zk_server.hostport)
    k, w1, s, inode = kept_session(sc)
    try:
        assert answers(s)
        w1.kill()
        w1.stopped_by_test = True
        sc.wait_log(k, r"worker pid %d is gone .*; 1 connection\(s\) held" % w1.pid)
        assert not eof_within(s.sock, 2.0), "the client saw its connection close"
        assert holds(k.pid, inode)
        w2 = sc.worker(env=KEEPER_ON, name="zkwarden2")
        sc.wait_log(w2, r"handed over the listening socket and 1 client connection\(s\) \(a worker served before\)")
        # The next worker takes the session up from the journal: the same
        # connection, the same session, answered again.
        assert answers(s)
        sc.wait_log(w2, r"inherited client connections: 1 recovered, 0 closed")
    finally:
        s.close()


def test_forget_and_client_close_free_the_duplicate(zk_server, sidecars):
    """The keeper's duplicates go when they should, counted in
    /proc/<keeper>/fd: the worker closing a connection (a handshake that
    never came) makes the keeper let go of it (FORGET: the client sees EOF
    only then); a client that closes while no worker runs is let go too
    (POLLRDHUP); at the end the keeper holds what it held before."""
    sc = sidecars(zk_server.hostport, extra_env={"ZKWARDEN_HANDSHAKE_TIMEOUT_MS": "1000"})
    k = sc.keeper(spawn=False)
    w1 = sc.worker(env=KEEPER_ON)
    sc.serves()
    wait_until(lambda: held(sc, k.pid) == 0, 10, what="serves()'s connection let go")
    base = len(fds(k.pid))
    idle = socket.create_connection((HOST, sc.port), timeout=5)
    a = rawzk.RawSession(sc.port, timeout_ms=10000)
    b = rawzk.RawSession(sc.port, timeout_ms=10000)
    try:
        inodes = {n: server_side(sc, x) for n, x in (("idle", idle), ("a", a.sock), ("b", b.sock))}
        wait_until(lambda: all(holds(k.pid, i) for i in inodes.values()), 10, what="three connections held")
        assert held(sc, k.pid) == 3 and len(fds(k.pid)) == base + 3
        # FORGET: the worker closes the idle one; its client sees EOF because
        # the keeper closed its duplicate too.
        assert eof_within(idle, 15.0), "the idle connection stayed open: the keeper kept it"
        wait_until(lambda: not holds(k.pid, inodes["idle"]), 10, what="the idle connection let go")
        # A client's close while a worker serves: let go.
        a.close()
        wait_until(lambda: not holds(k.pid, inodes["a"]), 10, what="a's connection let go")
        assert held(sc, k.pid) == 1
        # A client's close while no worker runs: the keeper's poll sees it.
        w1.kill()
        w1.stopped_by_test = True
        sc.wait_log(k, r"worker pid %d is gone .*; 1 connection\(s\) held" % w1.pid)
        assert holds(k.pid, inodes["b"])
        b.close()
        wait_until(lambda: not holds(k.pid, inodes["b"]), 10, what="b's connection let go with no worker")
        assert held(sc, k.pid) == 0
        assert len(fds(k.pid)) == base - 1  # and the dead worker's link
        # The next worker inherits nothing; the keeper holds what it held before.
        w2 = sc.worker(env=KEEPER_ON, name="zkwarden2")
        sc.wait_log(w2, r"handed over the listening socket and 0 client connection\(s\)")
        wait_until(lambda: len(fds(k.pid)) == base, 10, what="the keeper's descriptors back to where they were")
    finally:
        idle.close()
        a.close()
        b.close()


def replace_file(path, data=None, source=None):
    """Puts a new file at path as a package upgrade does (a rename: the
    running binary stays intact)."""
    tmp = str(path) + ".new"
    if source:
        shutil.copy(source, tmp)
    else:
        with open(tmp, "wb") as f:
            f.write(data)
    os.chmod(tmp, 0o755)
    os.replace(tmp, path)


def test_planned_restart_that_cannot_start_keeps_the_old_worker(zk_server, sidecars, tmp_path):
    """SIGUSR2 (and `zkwarden upgrade`) onto a configuration that does not
    load, a file that does not execute, a binary that exits at once: each is
    logged with its reason and the worker that serves keeps serving, its
    session answered throughout. Then a good binary takes over."""
    binary = tmp_path / "bin" / "zkwarden"
    binary.parent.mkdir()
    replace_file(binary, source=zkwarden_bin())
    envf = tmp_path / "zkwarden.env"
    envf.write_text("# the configuration, read at each start\nZKWARDEN_MAX_FRAME=1048575\n")
    sc = sidecars(zk_server.hostport)
    k = sc.keeper(binary=binary, env_file=envf)
    w = sc.worker_pid(k)
    sc.serves()
    s = rawzk.RawSession(sc.port, timeout_ms=10000)
    try:
        envf.write_text("ZKWARDEN_MAX_FRAME=lots\n")
        k.signal(signal.SIGUSR2)
        sc.wait_log(k, r"the new worker \(pid \d+\) exited with status 2 \(a configuration error: its log says "
                       r"which\) before taking over: the current worker keeps serving")
        assert 'ZKWARDEN_MAX_FRAME="lots" is not valid' in k.text()
        assert answers(s) and not pid_gone(w)

        envf.write_text('ZKWARDEN_MAX_FRAME="1048575"\n')
        replace_file(binary, data=b"\x7fELF but not really\n")
        k.signal(signal.SIGUSR2)
        sc.wait_log(k, r"cannot execute .*zkwarden: Exec format error")
        sc.wait_log(k, r"the restart did not happen: the current worker keeps serving")
        rc, out, err = sc.command("upgrade")
        assert rc == 1 and "cannot execute" in err and "Exec format error" in err, (rc, out, err)
        assert answers(s) and not pid_gone(w)

        replace_file(binary, data=b"#!/bin/sh\necho 'broken build' >&2\nexit 3\n")
        rc, out, err = sc.command("upgrade")
        assert rc == 1 and "exited with status 3 before taking over" in err, (rc, out, err)
        assert answers(s) and not pid_gone(w)
        assert w in sc.workers_of(k)

        replace_file(binary, source=zkwarden_bin())
        rc, out, err = sc.command("upgrade")
        assert rc == 0 and "the new worker serves" in out, (rc, out, err)
        new = sc.worker_pid(k, not_in=[w])
        assert new != w
        wait_until(lambda: pid_gone(w), 30, what="the old worker to exit")
        sc.wait_log(k, r"the previous worker pid %d exited with status 0" % w)
        sc.serves()
        assert answers(s)  # the session held through all of it goes on with the new worker
    finally:
        s.close()


def test_first_start_that_cannot_start_stops_the_keeper(zk_server, sidecars, tmp_path):
    """A worker that exits 2 (its configuration) at its first start, or a
    path that does not execute, make the keeper exit 2 (systemd and the
    kubelet show it) instead of restarting it forever."""
    sc = sidecars(zk_server.hostport, extra_env={"ZKWARDEN_MAX_FRAME": "lots"})
    k = sc.keeper()
    assert k.wait(60) == 2
    assert "could not start (its first start): stopping" in k.text()
    k.stopped_by_test = True
    sc2 = sidecars(zk_server.hostport, name="nobinary")
    k2 = sc2.keeper(binary=tmp_path / "no-such-zkwarden")
    assert k2.wait(60) == 2
    assert "cannot execute" in k2.text() and "No such file or directory" in k2.text()
    k2.stopped_by_test = True


def test_takeover_standalone_refuses_no_connection(zk_server, sidecars):
    """`zkwarden --takeover` next to a zkwarden serving by itself (no
    keeper): the listening socket passes to the new process and not one
    connection attempt is refused, where a stop and a start refuse them;
    the old process hands over its connections and exits 0 before the new
    one serves."""
    plain = sidecars(zk_server.hostport, name="restart")
    z1 = plain.worker()
    plain.serves()

    def restart():
        assert z1.stop() == 0
        z1.stopped_by_test = True
        with pytest.raises(ConnectionRefusedError):  # between the two, whatever the loop caught
            socket.create_connection((HOST, plain.port), timeout=5).close()
        plain.worker(name="zkwarden2")
        plain.serves()
    refused_during(plain.port, restart)

    sc = sidecars(zk_server.hostport)
    old = sc.worker()
    sc.serves()
    held = rawzk.RawSession(sc.port, timeout_ms=10000)
    try:
        def takeover():
            new = sc.worker("--takeover", name="successor")
            assert old.wait(60) == 0
            old.stopped_by_test = True
            sc.wait_log(new, "listening on")
            sc.serves()
        attempts, refused = refused_during(sc.port, takeover)
        assert answers(held)  # the session goes on, on the same connection, through the new process
    finally:
        held.close()
    assert attempts > 20 and refused == 0, "%d of %d connection attempts refused" % (refused, attempts)
    new = sc.procs[-1]
    assert new.alive()
    # The held session and whatever connections the loop had open then.
    assert re.search(r"handed the listening socket and [1-9]\d* client connection\(s\) to pid %d: exiting"
                     % new.pid, old.log.read_text(errors="replace"))
    assert re.search(r"handed over the listening socket and [1-9]\d* client connection\(s\)",
                     new.log.read_text(errors="replace"))
    # One takeover per process: the new one answers the next.
    third = sc.worker("--takeover", name="third")
    assert new.wait(60) == 0
    new.stopped_by_test = True
    sc.wait_log(third, "listening on")
    sc.serves()


def test_takeover_without_a_running_zkwarden_fails_clearly(zk_server, sidecars):
    sc = sidecars(zk_server.hostport)
    p = sc.worker("--takeover")
    assert p.wait(30) == 1
    p.stopped_by_test = True
    assert "--takeover: no running zkwarden answers on @zkwarden/%s" % sc.hostport in p.text()
    rc, out, err = sc.command("upgrade")
    assert rc == 1 and "nothing answers on @zkwarden/%s" % sc.hostport in err


def test_upgrade_of_a_standalone_zkwarden(zk_server, sidecars):
    """`zkwarden upgrade` next to a zkwarden serving by itself: it starts its
    binary as on disk with --takeover, hands over, exits; the command exits 0
    once the new one serves."""
    sc = sidecars(zk_server.hostport)
    old = sc.worker()
    sc.serves()
    rc, out, err = sc.command("upgrade")
    assert rc == 0 and "the new zkwarden serves" in out, (rc, out, err)
    m = re.search(r"upgrade: started pid (\d+)", old.text())
    assert m
    new = int(m.group(1))
    try:
        assert old.wait(60) == 0
        old.stopped_by_test = True
        sc.serves()
        assert not pid_gone(new)
    finally:
        stop_pid(new)  # its log lines (and any sanitizer report) are in old's file


def test_kubernetes_layout_takeover_and_refusal(zk_server, sidecars):
    """Without --spawn: a worker started with --takeover (a new container
    of the pod) replaces the one serving, which hands over and exits 0; one
    without --takeover is refused while another serves; `zkwarden upgrade`
    says the keeper starts no worker."""
    sc = sidecars(zk_server.hostport)
    k, w1, s, inode = kept_session(sc)
    try:
        w2 = sc.worker("--takeover", env=KEEPER_ON, name="zkwarden2")
        assert w1.wait(60) == 0
        w1.stopped_by_test = True
        sc.wait_log(w1, r"handed over to the keeper \(DONE\)")
        sc.wait_log(w2, r"handed over the listening socket and 1 client connection\(s\) \(a worker served before\)")
        sc.serves()
        w3 = sc.worker(env=KEEPER_ON, name="zkwarden3")
        assert w3.wait(60) == 1
        w3.stopped_by_test = True
        why = r"pid %d wants to serve while pid %d does \(start it with --takeover" % (w3.pid, w2.pid)
        sc.wait_log(k, why)
        sc.wait_log(w3, r"the keeper on @zkwarden/%s refused: " % re.escape(sc.hostport) + why)
        rc, out, err = sc.command("upgrade")
        assert rc == 1 and "does not start its worker (no --spawn)" in err
        assert w2.alive()
    finally:
        s.close()


def test_worker_sigterm_with_a_keeper_keeps_the_connections(zk_server, sidecars):
    """With a keeper, the worker's SIGTERM (a container restart) hands the
    connections back to the keeper instead of closing them: the client sees
    no EOF while no worker runs. Without a keeper SIGTERM closes them."""
    plain = sidecars(zk_server.hostport, name="plain")
    z = plain.worker()
    plain.serves()
    s = rawzk.RawSession(plain.port, timeout_ms=10000)
    z.signal(signal.SIGTERM)
    assert eof_within(s.sock, 10.0)
    s.close()
    assert z.wait(30) == 0
    z.stopped_by_test = True

    sc = sidecars(zk_server.hostport)
    k, w1, s, inode = kept_session(sc)
    try:
        w1.signal(signal.SIGTERM)
        assert w1.wait(60) == 0
        w1.stopped_by_test = True
        assert "handing the connections back to the keeper" in w1.text()
        assert not eof_within(s.sock, 1.0)
        assert holds(k.pid, inode)
    finally:
        s.close()


def test_keeper_sigterm_stops_everything(zk_server, sidecars):
    """SIGTERM of the keeper: the worker is told STOP and closes its
    sessions, the keeper closes what it held and exits 0; the clients see
    EOF and nothing listens on the ports any more."""
    sc = sidecars(zk_server.hostport)
    k = sc.keeper()
    w = sc.worker_pid(k)
    sc.serves()
    s1 = rawzk.RawSession(sc.port, timeout_ms=10000)
    s2 = rawzk.RawSession(sc.port, timeout_ms=10000)
    try:
        k.signal(signal.SIGTERM)
        assert k.wait(60) == 0
        k.stopped_by_test = True
        assert eof_within(s1.sock, 5.0) and eof_within(s2.sock, 5.0)
        assert pid_gone(w)
        text = k.text()
        assert "the keeper stops (STOP)" in text and "keeper: worker pid %d exited with status 0" % w in text
        assert "keeper: stopped" in text
        for port in (sc.port, sc.admin_port):
            with pytest.raises(ConnectionRefusedError):
                socket.create_connection((HOST, port), timeout=5).close()
    finally:
        s1.close()
        s2.close()


def test_handover_socket_refuses_another_user(zk_server, sidecars):
    """The abstract socket is reachable by anyone in the network namespace:
    a peer running as another user is refused (its descriptors would be the
    JobManager's connections and the journal's passwords)."""
    if os.geteuid() != 0:
        pytest.skip("needs root to connect as another user")
    sc = sidecars(zk_server.hostport)
    k = sc.keeper()
    sc.worker_pid(k)
    pid = os.fork()
    if pid == 0:  # as nobody: connect and wait for the keeper's answer
        code = 3
        try:
            os.setgroups([])
            os.setgid(65534)
            os.setuid(65534)
            u = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
            u.connect("\0zkwarden/%s" % sc.hostport)
            u.settimeout(10)
            code = 0 if u.recv(64) == b"" else 4
        except Exception:
            code = 5
        os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.WEXITSTATUS(status) == 0, "the keeper did not close another user's connection"
    sc.wait_log(k, r"refused a handover connection from pid \d+: another user")


def test_keeper_links_libc_only():
    """The keeper is small and depends on nothing that could fail it: libc
    alone (and the sanitizer runtimes in a sanitizer build)."""
    import subprocess
    from keeperlib import keeper_bin
    out = subprocess.run(["readelf", "-d", keeper_bin()], capture_output=True, text=True, check=True).stdout
    libs = set(re.findall(r"\(NEEDED\)\s+Shared library: \[(.+?)\]", out))
    assert {lib for lib in libs if not lib.startswith(("libasan.", "libubsan."))} == {"libc.so.6"}, libs


def test_a_dead_workers_last_adopts_are_all_read(zk_server, sidecars, tmp_path):
    """A worker that dies right after telling the keeper of many new
    connections (more ADOPTs queued on its link than the keeper reads in one
    turn) has each of them held: the keeper reads its link to the end
    before it lets the dead worker go, and the next worker inherits them
    all. The keeper is stopped (SIGSTOP) while the worker sends and exits,
    so that the link's messages and SIGCHLD are there at once."""
    n = 100
    out = tmp_path / "fake"
    out.mkdir()
    fake = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fake_worker.py")
    sc = sidecars(zk_server.hostport)
    k = sc._start("keeper", [keeper_bin(), "--spawn", sys.executable, fake, str(out)])
    wait_until(lambda: (out / "gen1.count").exists(), 30, what="the fake worker's hand-over")
    first = children(k.pid)
    assert len(first) == 1
    clients = [socket.create_connection((HOST, sc.port), timeout=5) for _ in range(n)]
    try:
        os.kill(k.pid, signal.SIGSTOP)
        try:
            (out / "go").write_text(str(n))
            wait_until(lambda: pid_gone(first[0]), 30, what="the fake worker to send and exit")
        finally:
            os.kill(k.pid, signal.SIGCONT)
        wait_until(lambda: (out / "gen2.count").exists(), 30, what="the next fake worker's hand-over")
        assert (out / "gen2.count").read_text() == str(n), k.text()[-3000:]
    finally:
        for c in clients:
            c.close()


def test_a_worker_given_up_on_during_its_hand_over_closes_no_session(zk_server, sidecars):
    """The Kubernetes layout: a worker that does not answer QUIESCE (stopped
    here) is given up on after 10 s and its successor gets the connections.
    When the old one runs again it finds its link closed in the middle of
    its hand-over: it exits without closing a session, so the journal slot
    the successor goes on with stays whole (the next crash is recovered
    from it). Before, it closed its sessions, wiping their slots under the
    successor: the next worker then found none and closed the connection."""
    sc = sidecars(zk_server.hostport)
    k = sc.keeper(spawn=False)
    w1 = sc.worker(env=KEEPER_ON)
    sc.serves()
    s = rawzk.RawSession(sc.port, timeout_ms=30000)
    try:
        inode = server_side(sc, s.sock)
        wait_until(lambda: holds(k.pid, inode), 10, what="the keeper to hold the connection")
        assert answers(s)
        os.kill(w1.pid, signal.SIGSTOP)
        try:
            w2 = sc.worker("--takeover", env=KEEPER_ON, name="zkwarden2")
            sc.wait_log(k, r"worker pid %d did not answer QUIESCE within" % w1.pid, timeout=30)
            sc.wait_log(w2, r"inherited client connections: 1 recovered, 0 closed")
        finally:
            os.kill(w1.pid, signal.SIGCONT)
        assert w1.wait(30) == 0
        w1.stopped_by_test = True
        sc.wait_log(w1, r"lost \(its connection closed\) during the hand-over: exiting without closing a session")
        assert answers(s)
        w2.kill()
        w2.stopped_by_test = True
        w3 = sc.worker(env=KEEPER_ON, name="zkwarden3")
        sc.wait_log(w3, r"inherited client connections: 1 recovered, 0 closed")
        assert answers(s)
    finally:
        s.close()
