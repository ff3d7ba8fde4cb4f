"""Processes of the incident drills: a 3-server ZooKeeper ensemble, zkwarden
sidecars and Flink-like JobManagers (tests/flinklike).

Every process is started here, remembered by its pid and stopped by that pid
(SIGTERM, then SIGKILL); nothing is ever stopped by name. Everything listens on
and connects to 127.0.0.1 only.
"""

import calendar
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path.insert(0, str(REPO / "tests" / "integration"))

import zkharness  # noqa: E402  (free ports, four-letter words, polling, pid stops)
from zkharness import HOST, free_port, four_letter, tail, wait_until  # noqa: E402,F401

FLINKLIKE = REPO / "tests" / "flinklike"
# Classes the JM loads and initializes before its clock starts (JVM start-up):
# see tests/flinklike/README.md.
PRELOAD = FLINKLIKE / "preload.classes"

# Every process we started and have not reaped yet, so that an interrupted
# drill still stops exactly these (by pid) and nothing else.
_LIVE = {}


def _track(proc, what):
    _LIVE[proc.pid] = (proc, what)


def _untrack(proc):
    _LIVE.pop(proc.pid, None)


def stop_all_started():
    """Stops every process this drill started and has not stopped yet."""
    for pid, (proc, what) in list(_LIVE.items()):
        try:
            os.kill(pid, signal.SIGCONT)
        except OSError:
            pass
        zkharness._stop_pid(proc, grace=5.0)
        _LIVE.pop(pid, None)


def _java():
    return os.environ.get("JAVA", "java")


# ---------------------------------------------------------------- ZooKeeper

class Ensemble:
    """Three ZooKeeper 3.8 servers in quorum on 127.0.0.1 free ports.

    The server lines carry the client address (the 3.5+ form), so
    /zookeeper/config names the real servers: that is what Curator's ensemble
    tracker reads and would switch a JobManager to (flink-zk-ha.md §0.6)."""

    def __init__(self, workdir, n=3, tick_ms=1000, reconfig=False, client_addr_in_config=True,
                 max_session_ms=60000, tls=None):
        """tls: (TlsCerts, server certificate, ssl.clientAuth): the servers
        serve clients over TLS only (secureClientPort), and the server lines
        carry no client address (it would open a plaintext port)."""
        self.dir = Path(workdir)
        self.n = n
        self.tick_ms = tick_ms
        # the bounds every server clamps a requested session timeout to
        self.min_session_ms = 2 * tick_ms
        self.max_session_ms = max_session_ms
        self.ids = list(range(1, n + 1))
        self.client_ports = {i: free_port() for i in self.ids}
        self.quorum_ports = {i: (free_port(), free_port()) for i in self.ids}
        self.procs = {}
        self.logs = {}
        self.starts = {i: 0 for i in self.ids}
        self.tls = tls
        self.check_ctx = zkharness.zk_check_ctx(tls[0]) if tls else None
        servers = []
        for i in self.ids:
            p1, p2 = self.quorum_ports[i]
            line = "server.%d=%s:%d:%d" % (i, HOST, p1, p2)
            if client_addr_in_config and not tls:
                line += ";%s:%d" % (HOST, self.client_ports[i])
            servers.append(line)
        for i in self.ids:
            d = self.dir / ("zk%d" % i)
            (d / "data").mkdir(parents=True, exist_ok=True)
            (d / "data" / "myid").write_text("%d\n" % i)
            cfg = [
                "tickTime=%d" % tick_ms,
                "initLimit=10",
                "syncLimit=5",
                "minSessionTimeout=%d" % self.min_session_ms,
                "maxSessionTimeout=%d" % self.max_session_ms,
                "dataDir=%s" % (d / "data"),
            ] + (zkharness.zk_tls_cfg(tls, self.client_ports[i]) if tls else [
                "clientPort=%d" % self.client_ports[i],
                "clientPortAddress=%s" % HOST,
            ]) + [
                "maxClientCnxns=0",
                "admin.enableServer=false",
                "4lw.commands.whitelist=srvr,cons,stat,ruok,mntr",
                "reconfigEnabled=%s" % ("true" if reconfig else "false"),
                "standaloneEnabled=false",
                "quorumListenOnAllIPs=false",
            ] + servers
            (d / "zoo.cfg").write_text("\n".join(cfg) + "\n")
            self.logs[i] = d / "zookeeper.log"

    @property
    def connect(self):
        return ",".join("%s:%d" % (HOST, self.client_ports[i]) for i in self.ids)

    def hostport(self, i):
        return "%s:%d" % (HOST, self.client_ports[i])

    def start_server(self, i):
        d = self.dir / ("zk%d" % i)
        cp = zkharness.zk_classpath(bool(self.tls))
        cmd = [_java(), "-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
               "-Dorg.slf4j.simpleLogger.showDateTime=true",
               "-cp", cp, "org.apache.zookeeper.server.quorum.QuorumPeerMain", str(d / "zoo.cfg")]
        self.starts[i] += 1
        with open(self.logs[i], "ab") as log:
            log.write(b"\n===== start #%d =====\n" % self.starts[i])
            log.flush()
            p = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                 cwd=str(d))
        self.procs[i] = p
        _track(p, "zookeeper %d" % i)

    def stop_server(self, i):
        p = self.procs.get(i)
        if p is not None:
            zkharness._stop_pid(p)
            _untrack(p)
            self.procs[i] = None

    def word(self, i, word):
        """A four-letter word to server i (over TLS when it serves TLS)."""
        if self.tls:
            return zkharness.four_letter_tls(self.client_ports[i], word, self.check_ctx, timeout=2.0)
        return four_letter(self.client_ports[i], word, timeout=2.0)

    def mode(self, i):
        try:
            out = self.word(i, "srvr").decode("utf-8", "replace")
        except OSError:
            return None
        for line in out.splitlines():
            if line.startswith("Mode:"):
                return line.split(":", 1)[1].strip()
        return None

    def quorum_ok(self):
        modes = [self.mode(i) for i in self.ids if self.procs.get(i) is not None]
        return modes.count("leader") == 1 and modes.count("follower") == len(modes) - 1

    def wait_quorum(self, timeout=60.0):
        for i in self.ids:
            p = self.procs.get(i)
            if p is not None and p.poll() is not None:
                raise RuntimeError("zookeeper %d exited with %s:\n%s" % (i, p.returncode, tail(self.logs[i])))
        wait_until(self.quorum_ok, timeout, interval=0.2, what="a ZooKeeper quorum (1 leader, %d followers)"
                   % (len([p for p in self.procs.values() if p is not None]) - 1))

    def start(self):
        for i in self.ids:
            self.start_server(i)
        self.wait_quorum()
        return self

    def restart_server(self, i, down_for=1.0):
        self.stop_server(i)
        time.sleep(down_for)
        self.start_server(i)
        self.wait_quorum()

    def leader_id(self):
        for i in self.ids:
            if self.mode(i) == "leader":
                return i
        return None

    def _cons_lines(self):
        """(server id, line) of every connection the live servers list (cons)."""
        for i in self.ids:
            if self.procs.get(i) is None:
                continue
            try:
                out = self.word(i, "cons").decode("utf-8", "replace")
            except OSError:
                continue
            for line in out.lower().splitlines():
                yield i, line

    def server_of_session(self, session_hex):
        """The server holding a client connection of this session (cons), or None."""
        want = "sid=%s" % session_hex.lower()
        for i, line in self._cons_lines():
            if want in line:
                return i
        return None

    def granted_timeout(self, requested_ms):
        """What a server of this ensemble grants for a requested session timeout."""
        return min(max(requested_ms, self.min_session_ms), self.max_session_ms)

    def session_timeout(self, session):
        """The timeout a server negotiated for a live session (cons: to=), or None."""
        want = "sid=0x%x," % session
        for _, line in self._cons_lines():
            if want in line:
                m = re.search(r"[(,]to=(\d+)", line)
                if m:
                    return int(m.group(1))
        return None

    def stop(self):
        for i in self.ids:
            self.stop_server(i)


# ---------------------------------------------------------------- zkwarden

def zkwarden_binary():
    return os.environ.get("ZKW_BIN") or str(REPO / "build" / "zkwarden")


class Sidecar:
    """One zkwarden in front of the ensemble, as in a JobManager pod. The listen
    and admin ports stay the same across restarts (the JM's config points at it)."""

    def __init__(self, workdir, identity, upstream, registry_root, log_level="info", extra_env=None, binary=None):
        self.dir = Path(workdir)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.binary = binary  # None: zkwarden_binary() at each start
        self.identity = identity
        self.upstream = upstream
        self.registry_root = registry_root
        self.port = free_port()
        self.admin_port = free_port()
        self.log_level = log_level
        self.extra_env = dict(extra_env or {})
        self.proc = None
        self.starts = 0
        self.started_at = None
        self.exits = []  # (how, exit status) of every stopped process
        self._terminated = None
        self.log = self.dir / ("zkwarden-%s.log" % identity)

    @property
    def hostport(self):
        return "%s:%d" % (HOST, self.port)

    def environment(self):
        """The process environment of this sidecar (what a successor started
        with --takeover must get as well)."""
        env = dict(os.environ)
        env.update({
            "ZKWARDEN_UPSTREAM": self.upstream,
            "ZKWARDEN_LISTEN": self.hostport,
            "ZKWARDEN_ADMIN_LISTEN": "%s:%d" % (HOST, self.admin_port),
            "ZKWARDEN_IDENTITY": self.identity,
            "ZKWARDEN_REGISTRY_ROOT": self.registry_root,
            "ZKWARDEN_LOCK_ROOTS": "/flink",
            "ZKWARDEN_LOG_LEVEL": self.log_level,
        })
        env.update(self.extra_env)
        return env

    def start(self, timeout=15.0):
        binary = self.binary or zkwarden_binary()
        if not os.access(binary, os.X_OK):
            raise FileNotFoundError("zkwarden binary %s not found (build it, set ZKW_BIN, or use --direct-only)"
                                    % binary)
        env = self.environment()
        self.starts += 1
        with open(self.log, "ab") as log:
            log.write(b"\n===== zkwarden start #%d =====\n" % self.starts)
            log.flush()
            self.proc = subprocess.Popen([binary], env=env, stdin=subprocess.DEVNULL, stdout=log,
                                         stderr=subprocess.STDOUT, cwd=str(self.dir))
        self.started_at = time.time()
        _track(self.proc, "zkwarden %s" % self.identity)

        def ready():
            if self.proc.poll() is not None:
                raise RuntimeError("zkwarden %s exited with %s:\n%s"
                                   % (self.identity, self.proc.returncode, tail(self.log)))
            return zkharness.port_accepts(self.port)

        wait_until(ready, timeout, interval=0.02, what="zkwarden %s on %d" % (self.identity, self.port))
        return self

    def kill9(self):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
            self.exits.append(("kill -9", self.proc.returncode))
        if self.proc is not None:
            _untrack(self.proc)

    def terminate(self):
        """SIGTERM without waiting (stop() waits)."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            self._terminated = self.proc

    def stop(self):
        """SIGTERM (as a pod's containers get when it is deleted), SIGKILL after 10 s."""
        if self.proc is not None:
            if self._terminated is self.proc:
                self.exits.append(("SIGTERM", zkharness.wait_or_kill(self.proc, 10.0)))
            elif self.proc.poll() is None:
                self.exits.append(("SIGTERM", zkharness._stop_pid(self.proc)))
            self._terminated = None
            _untrack(self.proc)

    def owned_at(self, start=None):
        """Epoch seconds of the log line where start #start (the latest by
        default) came to own its identity, or None."""
        start = self.starts if start is None else start
        marker = "===== zkwarden start #%d =====" % start
        text = tail(self.log, limit=2_000_000)
        i = text.find(marker)
        if i < 0:
            return None
        for line in text[i + len(marker):].splitlines():
            if line.startswith("===== zkwarden start #"):
                break
            if "owned by this instance" in line or "this instance owns the identity now" in line:
                return _log_time(line)
        return None

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def metrics(self):
        """The admin endpoint's /metrics text, or None."""
        import urllib.request
        try:
            with urllib.request.urlopen("http://%s:%d/metrics" % (HOST, self.admin_port), timeout=2) as r:
                return r.read().decode("utf-8", "replace")
        except Exception:
            return None


def _log_time(line):
    """Epoch seconds of a zkwarden text log line (2026-12-02T14:08:06.539Z ...)."""
    try:
        ts = line.split(" ", 1)[0]
        base, frac = ts.rstrip("Z").split(".")
        return calendar.timegm(time.strptime(base, "%Y-%m-%dT%H:%M:%S")) + int(frac) / 10 ** len(frac)
    except (ValueError, IndexError):
        return None


# ---------------------------------------------------------------- JobManager stand-in

def build_flinklike():
    r = subprocess.run([str(FLINKLIKE / "build.sh")], capture_output=True, text=True, timeout=300)
    if r.returncode != 0:
        raise RuntimeError("tests/flinklike/build.sh failed:\n" + r.stdout + r.stderr)
    return (FLINKLIKE / "build" / "classpath").read_text().strip()


class JM:
    """One JobManager process (one incarnation). start() launches a new process;
    its files are numbered so that every incarnation keeps its own log."""

    def __init__(self, name, workdir, classpath, connect, args):
        self.name = name
        self.dir = Path(workdir)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.classpath = classpath
        self.connect = connect
        self.args = list(args)
        self.proc = None
        self.n = 0
        self.stopped_state = None
        self.launched_at = None
        self.control_seq = 0
        self._terminated = None
        self.history = []  # final stats of earlier incarnations

    def files(self, n=None):
        n = self.n if n is None else n
        base = self.dir / ("%s.%d" % (self.name, n))
        return {"out": Path(str(base) + ".out"), "err": Path(str(base) + ".err"),
                "stats": Path(str(base) + ".stats.json"), "control": Path(str(base) + ".control")}

    def start(self, extra_args=()):
        self.n += 1
        f = self.files()
        for k in ("stats", "control"):
            # never read a stale line of an earlier process with the same name
            try:
                f[k].unlink()
            except FileNotFoundError:
                pass
        cmd = [_java(), "-Xmx160m", "-Xss512k", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
               "-Xshare:auto",
               "-Dorg.slf4j.simpleLogger.showDateTime=true",
               "-Dorg.slf4j.simpleLogger.dateTimeFormat=HH:mm:ss.SSS",
               "-Dorg.slf4j.simpleLogger.defaultLogLevel=info",
               "-cp", self.classpath, "flinklike.FlinkLikeJM",
               "--connect=" + self.connect, "--identity=" + self.name,
               "--stats-file=%s" % f["stats"], "--control-file=%s" % f["control"],
               "--stats-interval-ms=250", "--preload-classes=%s" % PRELOAD] + self.args + list(extra_args)
        self.launched_at = time.time()
        out = open(f["out"], "wb")
        err = open(f["err"], "wb")
        self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=out, stderr=err, cwd=str(self.dir))
        out.close()
        err.close()
        _track(self.proc, "jm %s#%d" % (self.name, self.n))
        self.stopped_state = None
        return self

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def stats(self, n=None):
        """The latest stats line of an incarnation (this one by default), or {}."""
        f = self.files(n)["stats"]
        try:
            return json.loads(f.read_text())
        except (OSError, ValueError):
            return {}

    def wait_stats(self, pred, timeout, what):
        def check():
            if not self.alive() and self.stopped_state is None:
                raise RuntimeError("JM %s#%d exited with %s while waiting for %s:\n%s"
                                   % (self.name, self.n, self.proc.returncode, what, tail(self.files()["err"], 6000)))
            s = self.stats()
            return s if s and pred(s) else None
        return wait_until(check, timeout, interval=0.05, what="%s#%d: %s" % (self.name, self.n, what))

    def control(self, cmd):
        """Writes a command for the JM's control-file poll (cancel, exit, stats)."""
        self.control_seq += 1
        f = self.files()["control"]
        tmp = Path(str(f) + ".tmp")
        tmp.write_text("# %d\n%s\n" % (self.control_seq, cmd))
        os.replace(tmp, f)

    def kill9(self):
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)
        self._done("killed")

    def sigstop(self):
        if self.alive():
            os.kill(self.proc.pid, signal.SIGSTOP)

    def sigcont(self):
        if self.alive():
            os.kill(self.proc.pid, signal.SIGCONT)

    def terminate(self):
        """SIGCONT and SIGTERM without waiting (stop() waits)."""
        if self.proc is not None and self.proc.poll() is None:
            for sig in (signal.SIGCONT, signal.SIGTERM):
                try:
                    os.kill(self.proc.pid, sig)
                except OSError:
                    pass
            self._terminated = self.proc

    def stop(self, grace=15.0):
        """Graceful exit (SIGTERM: the JM closes its session), then SIGKILL."""
        if self.proc is not None and self._terminated is self.proc:
            zkharness.wait_or_kill(self.proc, grace)
        elif self.proc is not None and self.proc.poll() is None:
            try:
                os.kill(self.proc.pid, signal.SIGCONT)
            except OSError:
                pass
            zkharness._stop_pid(self.proc, grace=grace)
        self._terminated = None
        self._done("stopped")

    def _done(self, how):
        if self.proc is not None:
            _untrack(self.proc)
            if self.stopped_state is None:
                self.history.append(self.stats())
            self.stopped_state = how

    def log_text(self, n=None):
        return tail(self.files(n)["err"], limit=5_000_000)
