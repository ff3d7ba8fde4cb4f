"""The keeper's tests' processes: one sidecar's environment (its ports, its
upstream, its handover socket), zkwarden-keeper and the zkwarden workers
started in it, and what the tests read of them (their logs, the keeper's
descriptors, the workers it started).

Every process is started here, tracked by its pid and stopped by that pid
(a worker the keeper spawned is the keeper's child: the keeper stops it).
Everything listens on and connects to 127.0.0.1 only.
"""

import os
import re
import signal
import socket
import subprocess
import time
from pathlib import Path

import rawzk
from zkharness import HOST, REPO, SANITIZER_MARKERS, children, free_port, tail, wait_until  # noqa: F401 (children: the tests import it from here)


def zkwarden_bin():
    return os.environ.get("ZKW_BIN") or str(REPO / "build" / "zkwarden")


def keeper_bin():
    """ZKW_KEEPER_BIN, else zkwarden-keeper next to ZKW_BIN (the same build)."""
    return os.environ.get("ZKW_KEEPER_BIN") or str(Path(zkwarden_bin()).parent / "zkwarden-keeper")


def fault_build():
    """True when the binaries carry the fault-injection seam."""
    with open(keeper_bin(), "rb") as f:
        return b"ZKW_TEST_FAULT" in f.read()


class Proc:
    """One process the test started, its stderr in its own file."""

    def __init__(self, name, argv, env, workdir):
        self.name = name
        self.log = Path(workdir) / ("%s.log" % name)
        self.err = open(self.log, "ab")
        self.popen = subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL, stdout=self.err,
                                      stderr=self.err, cwd=str(workdir))
        self.pid = self.popen.pid

    def alive(self):
        return self.popen.poll() is None

    def text(self):
        return tail(self.log, limit=400000)

    def wait(self, timeout):
        try:
            return self.popen.wait(timeout)
        except subprocess.TimeoutExpired:
            return None

    def signal(self, sig):
        if self.alive():
            self.popen.send_signal(sig)

    def kill(self):
        if self.alive():
            self.popen.kill()
            self.popen.wait(10)

    def stop(self, grace=20.0):
        """SIGTERM (if still running), then SIGKILL after grace. The exit status."""
        if self.alive():
            self.popen.send_signal(signal.SIGTERM)
            if self.wait(grace) is None:
                self.popen.kill()
                self.popen.wait(10)
        self.err.close()
        return self.popen.returncode


def fds(pid):
    """The descriptors a process holds (names of /proc/<pid>/fd)."""
    return sorted(int(f) for f in os.listdir("/proc/%d/fd" % pid))


def sockets(pid):
    """How many of its descriptors are sockets."""
    n = 0
    for f in os.listdir("/proc/%d/fd" % pid):
        try:
            n += os.readlink("/proc/%d/fd/%s" % (pid, f)).startswith("socket:")
        except OSError:
            pass
    return n


def eof_within(sock, timeout):
    """True when the peer closes sock (EOF or reset) within timeout; False
    when it stays open (no byte is expected on it)."""
    sock.settimeout(timeout)
    try:
        while True:
            if not sock.recv(4096):
                return True
    except (ConnectionResetError, BrokenPipeError):
        return True
    except socket.timeout:
        return False


class Sidecar:
    """One sidecar's environment: the ports, the upstream and the handover
    socket every process started in it shares (a keeper and its workers, or
    standalone zkwardens taking over from each other)."""

    def __init__(self, workdir, upstream, extra_env=None, name="sc"):
        self.dir = Path(workdir)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self.admin_port = free_port()
        while self.admin_port == self.port:
            self.admin_port = free_port()
        self.env = dict(os.environ)
        for k in list(self.env):
            if k.startswith("ZKWARDEN_") or k == "ZKW_TEST_FAULT":
                del self.env[k]
        self.env.update({
            "ZKWARDEN_UPSTREAM": upstream,
            "ZKWARDEN_MODE": "relay",
            "ZKWARDEN_IDENTITY": "keeper-%d-%s-%d" % (os.getpid(), name, self.port),
            "ZKWARDEN_LISTEN": "%s:%d" % (HOST, self.port),
            "ZKWARDEN_ADMIN_LISTEN": "%s:%d" % (HOST, self.admin_port),
            "ZKWARDEN_LOG_LEVEL": os.environ.get("ZKW_LOG_LEVEL", "info"),
            "UBSAN_OPTIONS": "print_stacktrace=1",
            "ASAN_OPTIONS": "detect_leaks=1:abort_on_error=0",
        })
        self.env.update(extra_env or {})
        self.procs = []
        self.seq = 0

    @property
    def hostport(self):
        return "%s:%d" % (HOST, self.port)

    def _start(self, name, argv, env=None):
        e = dict(self.env)
        e.update(env or {})
        self.seq += 1
        p = Proc("%02d-%s" % (self.seq, name), argv, e, self.dir)
        self.procs.append(p)
        return p

    def keeper(self, spawn=True, binary=None, env_file=None, env=None):
        """zkwarden-keeper; with spawn, it starts `binary` (default ZKW_BIN)."""
        argv = [keeper_bin()]
        if env_file:
            argv += ["--env-file", str(env_file)]
        if spawn:
            argv += ["--spawn", str(binary or zkwarden_bin())]
        k = self._start("keeper", argv, env)
        wait_until(lambda: not k.alive() or "handover socket @" in k.text(), 30, what="the keeper to listen")
        return k

    def worker(self, *args, env=None, name="zkwarden"):
        """A zkwarden the test starts itself (standalone, or with
        ZKWARDEN_KEEPER=on in env: a Kubernetes worker container's)."""
        return self._start(name, [zkwarden_bin()] + list(args), env)

    def command(self, *args, timeout=120, env=None):
        """Runs `zkwarden args...` to its end: (status, stdout, stderr)."""
        e = dict(self.env)
        e.update(env or {})
        r = subprocess.run([zkwarden_bin()] + list(args), env=e, capture_output=True, text=True,
                           timeout=timeout)
        return r.returncode, r.stdout, r.stderr

    def text(self):
        return "".join("----- %s -----\n%s" % (p.name, p.text()) for p in self.procs)

    def wait_log(self, proc, pattern, timeout=30.0, count=1):
        """Waits until pattern (a regex) appears count times in proc's log."""
        return wait_until(lambda: len(re.findall(pattern, proc.text())) >= count, timeout,
                          what="%r in %s's log" % (pattern, proc.name))

    def serves(self, timeout=30.0, process=None):
        """Waits until a ZooKeeper session through the sidecar's port answers a
        request (a worker serves); returns the session id. Gives up early
        (RuntimeError) when `process` exits meanwhile."""
        def once():
            if process is not None and not process.alive():
                raise RuntimeError("%s exited with %s" % (process.name, process.popen.returncode))
            try:
                s = rawzk.RawSession(self.port, timeout_ms=6000, sock_timeout=5.0)
            except (OSError, ConnectionError, RuntimeError):
                return None
            try:
                s.send(rawzk.exists(1, "/"))
                xid, _, err, _ = s.read_reply()
                return s.session_id if xid == 1 and err == 0 else None
            except (OSError, ConnectionError):
                return None
            finally:
                s.close()
        return wait_until(once, timeout, interval=0.05, what="a session through %s to answer" % self.hostport)

    def workers_of(self, keeper):
        return children(keeper.pid)

    def worker_pid(self, keeper, timeout=30.0, not_in=()):
        """The keeper's serving worker (a child that is not in not_in, and
        that the keeper logged as serving)."""
        def one():
            kids = [p for p in children(keeper.pid) if p not in not_in]
            served = set(int(p) for p in re.findall(r"keeper: worker pid (\d+) serves", keeper.text()))
            kids = [p for p in kids if p in served]
            return kids[-1] if kids else None
        return wait_until(one, timeout, what="a worker of the keeper that serves")

    def stop_all(self):
        """Stops what is still running (keepers first: their STOP ends
        their workers) and returns the problems: a process that ended
        before the test was done with it (unless the test said so:
        stopped_by_test), an exit status other than 0 (or expected_status),
        a sanitizer report in any log."""
        problems = []
        running = [p for p in self.procs if p.alive()]
        for p in self.procs:
            if p not in running and not getattr(p, "stopped_by_test", False):
                problems.append("%s had exited with %s before the end" % (p.name, p.popen.returncode))
        keepers = [p for p in running if "keeper" in p.name]
        for p in keepers:
            p.signal(signal.SIGTERM)
            p.wait(20)
        for p in running:
            if keepers and p not in keepers:
                p.wait(10)  # ended by its keeper's STOP, or still running
        for p in sorted(running, key=lambda p: "keeper" not in p.name):
            expected = getattr(p, "expected_status", 0)
            rc = p.stop()
            if rc != expected:
                problems.append("%s exited with %s at the end (want %s)" % (p.name, rc, expected))
        for p in self.procs:
            if not p.err.closed:
                p.err.close()
            text = p.text()
            for marker in SANITIZER_MARKERS:
                if marker in text:
                    problems.append("%s's log contains %r" % (p.name, marker))
        return problems


def refused_during(port, action, duration_after=0.5):
    """Connects to port again and again while action() runs (and a little
    after): returns (attempts, refused). Each attempt is a TCP connect that
    is closed at once."""
    import threading
    stop = threading.Event()
    counts = {"attempts": 0, "refused": 0}

    def loop():
        while not stop.is_set():
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.settimeout(5.0)
            try:
                s.connect((HOST, port))
            except ConnectionRefusedError:
                counts["refused"] += 1
            except OSError:
                pass
            finally:
                s.close()
                counts["attempts"] += 1
    t = threading.Thread(target=loop, daemon=True)
    t.start()
    try:
        action()
        time.sleep(duration_after)
    finally:
        stop.set()
        t.join(10)
    return counts["attempts"], counts["refused"]


def _tcp_inode(local_port, remote):
    """The inode of the socket on local_port connected to remote (ip, port),
    from /proc/net/tcp; None when there is none."""
    rip, rport = remote
    want_r = "%s:%04X" % ("".join("%02X" % int(b) for b in reversed(rip.split("."))), rport)
    with open("/proc/net/tcp") as f:
        next(f)
        for line in f:
            parts = line.split()
            if int(parts[1].split(":")[1], 16) == local_port and parts[2] == want_r:
                return int(parts[9])
    return None


def server_side(sidecar, client_sock):
    """The inode of the sidecar's end of a client's connection."""
    return wait_until(lambda: _tcp_inode(sidecar.port, client_sock.getsockname()), 10,
                      what="the sidecar's end of the connection in /proc/net/tcp")


def holds(pid, inode):
    """True when the process has a descriptor of that socket."""
    for f in os.listdir("/proc/%d/fd" % pid):
        try:
            if os.readlink("/proc/%d/fd/%s" % (pid, f)) == "socket:[%d]" % inode:
                return True
        except OSError:
            pass
    return False


def pid_gone(pid):
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().split(") ")[1].split()[0] == "Z"
    except OSError:
        return True


def stop_pid(pid, grace=20.0):
    """Stops a process we caused but did not start ourselves (a zkwarden an
    upgrade started): SIGTERM by its pid, then SIGKILL."""
    if pid_gone(pid):
        return
    os.kill(pid, signal.SIGTERM)
    try:
        wait_until(lambda: pid_gone(pid), grace, what="pid %d to exit" % pid)
    except TimeoutError:
        os.kill(pid, signal.SIGKILL)
        wait_until(lambda: pid_gone(pid), 10, what="pid %d to die" % pid)


def held(sidecar, pid):
    """How many of the sidecar's client connections (not its listener) the
    process has a descriptor of."""
    inodes = set()
    with open("/proc/net/tcp") as f:
        next(f)
        for line in f:
            parts = line.split()
            if int(parts[1].split(":")[1], 16) == sidecar.port and parts[3] != "0A":
                inodes.add("socket:[%s]" % parts[9])
    n = 0
    for f in os.listdir("/proc/%d/fd" % pid):
        try:
            n += os.readlink("/proc/%d/fd/%s" % (pid, f)) in inodes
        except OSError:
            pass
    return n
