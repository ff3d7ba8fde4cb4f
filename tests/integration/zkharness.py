"""Process harness for the integration tests: a real ZooKeeper server, the
zkwarden proxy, and small helpers (free ports, four-letter words, polling).

Every process started here is tracked by its pid and stopped by that pid.
Everything listens on and connects to 127.0.0.1 only.
"""

import itertools
import os
import signal
import socket
import subprocess
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
HOST = "127.0.0.1"

ZK_CLASSPATH = "/etc/zookeeper/conf:/usr/share/java/zookeeper.jar"
# slf4j-simple is added only so that the server's log reaches its log file
# (without a binding slf4j falls back to NOP and the server is silent).
ZK_LOG_BINDING = "/usr/share/java/slf4j-simple.jar"

SANITIZER_MARKERS = ("runtime error:", "AddressSanitizer", "LeakSanitizer",
                     "UndefinedBehaviorSanitizer")


def free_port():
    """A currently free TCP port on 127.0.0.1."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


def wait_until(pred, timeout, interval=0.02, what="condition"):
    """Poll pred() until it returns a truthy value; return that value.
    Raises TimeoutError naming `what` when the deadline passes."""
    deadline = time.monotonic() + timeout
    while True:
        v = pred()
        if v:
            return v
        if time.monotonic() >= deadline:
            raise TimeoutError("timed out after %.1fs waiting for %s" % (timeout, what))
        time.sleep(interval)


def four_letter(port, word, timeout=5.0):
    """Send a four-letter word and read the raw reply until the peer closes."""
    if isinstance(word, str):
        word = word.encode()
    with socket.create_connection((HOST, port), timeout=timeout) as s:
        s.sendall(word)
        out = b""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                d = s.recv(65536)
            except ConnectionResetError:
                break
            if not d:
                break
            out += d
        return out


def four_letter_tls(port, word, ctx, timeout=5.0):
    """four_letter over TLS (ZooKeeper's secure port answers them too)."""
    if isinstance(word, str):
        word = word.encode()
    with socket.create_connection((HOST, port), timeout=timeout) as raw:
        with ctx.wrap_socket(raw) as s:
            s.sendall(word)
            out = b""
            while True:
                try:
                    d = s.recv(65536)
                except (ConnectionResetError, OSError):
                    break
                if not d:
                    break
                out += d
            return out


class TlsCerts:
    """Certificates for a test run, made with the openssl CLI in dir: a CA,
    a server certificate (IP SAN 127.0.0.1, DNS SAN zk.test), a client
    certificate, and the bad ones: a server certificate of an untrusted CA,
    one expired, one for another name. Server keystores are PEM files with
    the key and the certificate (ssl.keyStore.type=PEM)."""

    SERVER_SAN = "IP:127.0.0.1,DNS:zk.test"

    def __init__(self, workdir):
        self.dir = Path(workdir)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.ca = self._ca("ca", "zkwarden test CA")
        self.other_ca = self._ca("other-ca", "untrusted test CA")
        self.server = self._leaf("server", "zk", self.SERVER_SAN)
        self.client = self._leaf("client", "jm-0", None, ext="extendedKeyUsage=clientAuth")
        self.untrusted = self._leaf("untrusted", "zk", self.SERVER_SAN, ca="other-ca")
        self.wrong_name = self._leaf("wrong-name", "other", "IP:127.0.0.2,DNS:other.test")
        self.expired = self._leaf("expired", "zk", self.SERVER_SAN, dates=("20200101000000Z",
                                                                            "20200201000000Z"))

    def _run(self, *args):
        subprocess.run(["openssl"] + list(args), cwd=str(self.dir), check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)

    def _ca(self, name, cn):
        self._run("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", name + ".key",
                  "-out", name + ".pem", "-days", "30", "-subj", "/CN=" + cn,
                  "-addext", "basicConstraints=critical,CA:TRUE",
                  "-addext", "keyUsage=critical,keyCertSign,cRLSign")
        return self.dir / (name + ".pem")

    def _leaf(self, name, cn, san, ca="ca", ext=None, dates=None, days=30):
        """name.pem (certificate), name.key, name-keystore.pem (both)."""
        self._run("req", "-newkey", "rsa:2048", "-nodes", "-keyout", name + ".key", "-out",
                  name + ".csr", "-subj", "/CN=" + cn)
        exts = ["basicConstraints=CA:FALSE"]
        if san:
            exts.append("subjectAltName=" + san)
        if ext:
            exts.append(ext)
        (self.dir / (name + ".ext")).write_text("\n".join(exts) + "\n")
        if dates:
            # openssl 3.0's x509 cannot backdate: a throwaway `openssl ca`.
            db = self.dir / ("%s.db" % name)
            db.mkdir(exist_ok=True)
            (db / "index.txt").write_text("")
            (db / "serial").write_text("1000\n")
            (db / "ca.cnf").write_text(
                "[ca]\ndefault_ca=d\n[d]\ndatabase=%s/index.txt\nnew_certs_dir=%s\n"
                "serial=%s/serial\ndefault_md=sha256\npolicy=p\n[p]\ncommonName=supplied\n"
                % (db, db, db))
            self._run("ca", "-batch", "-config", str(db / "ca.cnf"), "-cert", ca + ".pem",
                      "-keyfile", ca + ".key", "-in", name + ".csr", "-out", name + ".pem",
                      "-startdate", dates[0], "-enddate", dates[1], "-extfile", name + ".ext",
                      "-notext")
        else:
            self._run("x509", "-req", "-in", name + ".csr", "-CA", ca + ".pem", "-CAkey", ca + ".key",
                      "-CAcreateserial", "-out", name + ".pem", "-days", str(days),
                      "-extfile", name + ".ext")
        pem = self.dir / (name + ".pem")
        key = self.dir / (name + ".key")
        (self.dir / (name + "-keystore.pem")).write_bytes(key.read_bytes() + pem.read_bytes())
        return pem

    def keystore(self, leaf):
        return self.dir / (Path(leaf).stem + "-keystore.pem")

    def key(self, leaf):
        return self.dir / (Path(leaf).stem + ".key")

    def new_client(self, name, days, ca="ca"):
        """Another client certificate (rotation), of the CA or of "other-ca", valid for days."""
        return self._leaf(name, "jm-0", None, ca=ca, ext="extendedKeyUsage=clientAuth", days=days)


# Debian's zookeeper.jar leaves netty off its classpath; the
# NettyServerCnxnFactory (the only one serving TLS) needs these.
NETTY_JARS = ["netty-buffer", "netty-codec", "netty-common", "netty-handler", "netty-resolver",
              "netty-transport", "netty-transport-native-epoll", "netty-transport-native-unix-common"]


def zk_classpath(tls=False):
    """The server's classpath: Debian's jar, slf4j-simple (its log), netty for TLS."""
    cp = ZK_CLASSPATH
    if os.path.exists(ZK_LOG_BINDING):
        cp += ":" + ZK_LOG_BINDING
    if tls:
        cp += "".join(":/usr/share/java/%s.jar" % j for j in NETTY_JARS)
    return cp


def zk_tls_cfg(tls, port):
    """zoo.cfg lines serving TLS only on port; tls is (TlsCerts, server
    certificate, ssl.clientAuth)."""
    certs, server_cert, client_auth = tls
    return ["secureClientPort=%d" % port,
            "secureClientPortAddress=%s" % HOST,
            "serverCnxnFactory=org.apache.zookeeper.server.NettyServerCnxnFactory",
            "ssl.keyStore.location=%s" % certs.keystore(server_cert),
            "ssl.keyStore.type=PEM",
            "ssl.trustStore.location=%s" % certs.ca,
            "ssl.trustStore.type=PEM",
            "ssl.clientAuth=%s" % client_auth]


def zk_check_ctx(certs):
    """The harness's own TLS checks (srvr, cons): unverified (the bad
    certificates' servers too), with the client certificate (clientAuth=need)."""
    import ssl
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    ctx.load_cert_chain(str(certs.client), str(certs.key(certs.client)))
    return ctx


def port_accepts(port):
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.settimeout(0.5)
        return s.connect_ex((HOST, port)) == 0


def tail(path, limit=20000):
    try:
        data = Path(path).read_bytes()
    except OSError as e:
        return "<cannot read %s: %s>" % (path, e)
    if len(data) > limit:
        data = b"...[%d bytes cut]...\n" % (len(data) - limit) + data[-limit:]
    return data.decode("utf-8", "replace")


def wait_or_kill(proc, grace):
    """Waits for a child we already signalled (a second SIGTERM can cut a
    graceful exit short), then SIGKILL. Returns the exit status."""
    try:
        proc.wait(grace)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(10)
    return proc.returncode


def _stop_pid(proc, grace=10.0):
    """Terminate one child we started (by its pid), then kill it if needed.
    Returns the exit status."""
    if proc.poll() is None:
        try:
            proc.terminate()
        except ProcessLookupError:
            pass
        wait_or_kill(proc, grace)
    return proc.returncode


# JVM options that start a server sooner (small heap, serial GC, C1 only):
# for tests that restart servers many times, not for benchmarks.
FAST_START_JVM = ("-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Xshare:auto")


class ZkServer:
    """A standalone ZooKeeper 3.8 server in its own directory.

    restart() keeps the port and the dataDir, so sessions survive it as long
    as the restart is shorter than their timeout."""

    def __init__(self, workdir, tick_ms=500, min_session_ms=1000,
                 max_session_ms=30000, extra_cfg=None,
                 four_letter_words="srvr,ruok,stat", jvm_args=(), sysprops=None, jaas=None, tls=None,
                 classpath=None):
        """tls: (TlsCerts, server certificate, ssl.clientAuth) to serve TLS
        only: secureClientPort on the port, no plaintext client port.
        classpath: another server's jars (tests/flink: Maven Central's 3.6 to
        3.9) instead of Debian's."""
        self.dir = Path(workdir)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.datadir = self.dir / "data"
        self.datadir.mkdir(exist_ok=True)
        self.port = free_port()
        self.cfg = self.dir / "zoo.cfg"
        self.log = self.dir / "zookeeper.log"
        self.proc = None
        self.starts = 0
        self.paused = False
        self.jvm_args = list(jvm_args)  # e.g. FAST_START_JVM for tests that restart servers
        self.classpath = classpath
        # Java system properties (-Dk=v), e.g. the SASL authProvider or
        # zookeeper.enforce.auth.enabled; jaas: the text of a JAAS file
        # (a Server section) the server is started with.
        self.sysprops = dict(sysprops or {})
        if jaas is not None:
            self.jaas = self.dir / "jaas.conf"
            self.jaas.write_text(jaas)
            self.sysprops["java.security.auth.login.config"] = str(self.jaas)
        lines = [
            "tickTime=%d" % tick_ms,
            "minSessionTimeout=%d" % min_session_ms,
            "maxSessionTimeout=%d" % max_session_ms,
            "dataDir=%s" % self.datadir,
            "maxClientCnxns=0",
            "admin.enableServer=false",
            "4lw.commands.whitelist=%s" % four_letter_words,
            "extendedTypesEnabled=true",
        ]
        self.tls = tls
        if tls:
            lines += zk_tls_cfg(tls, self.port)
            self.check_ctx = zk_check_ctx(tls[0])
        else:
            lines += ["clientPort=%d" % self.port, "clientPortAddress=%s" % HOST]
        lines += list(extra_cfg or [])
        self.cfg.write_text("\n".join(lines) + "\n")

    @property
    def hostport(self):
        return "%s:%d" % (HOST, self.port)

    def start(self, timeout=30.0, wait=True):
        """Starts the server; wait=False for ensemble members (no standalone mode)."""
        assert self.proc is None or self.proc.poll() is not None
        cp = self.classpath or zk_classpath(bool(self.tls))
        props = ["-D%s=%s" % kv for kv in sorted(self.sysprops.items())]
        cmd = ["java"] + self.jvm_args + props + ["-Dzookeeper.extendedTypesEnabled=true",
               # Containers are checked every second, not every minute.
               "-Dznode.container.checkIntervalMs=1000",
               "-Dorg.slf4j.simpleLogger.showDateTime=true",
               "-cp", cp, "org.apache.zookeeper.server.quorum.QuorumPeerMain",
               str(self.cfg)]
        self.starts += 1
        with open(self.log, "ab") as log:
            log.write(b"\n===== zookeeper start #%d =====\n" % self.starts)
            log.flush()
            self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=log,
                                         stderr=subprocess.STDOUT, cwd=str(self.dir))
        if wait:
            self.wait_ready(timeout)
        return self

    def _srvr_ok(self):
        if self.proc.poll() is not None:
            raise RuntimeError("ZooKeeper exited with %s during start:\n%s"
                               % (self.proc.returncode, tail(self.log)))
        try:
            if self.tls:
                out = four_letter_tls(self.port, "srvr", self.check_ctx, timeout=2.0)
            else:
                out = four_letter(self.port, "srvr", timeout=2.0)
        except OSError:
            return False
        return b"Mode: standalone" in out

    def wait_ready(self, timeout=30.0):
        wait_until(self._srvr_ok, timeout, interval=0.05, what="ZooKeeper srvr on %d" % self.port)

    def stop(self):
        if self.proc is not None:
            self.resume()
            _stop_pid(self.proc)

    def kill(self):
        """kill -9 (a crash): no clean shutdown, sessions stay in the log."""
        if self.proc is not None and self.proc.poll() is None:
            self.resume()
            self.proc.kill()
            self.proc.wait(10)

    def pause(self):
        """SIGSTOP: the server holds its connections but answers nothing."""
        if self.proc is not None and self.proc.poll() is None and not self.paused:
            self.proc.send_signal(signal.SIGSTOP)
            self.paused = True

    def resume(self):
        if self.paused:
            self.paused = False
            if self.proc.poll() is None:
                self.proc.send_signal(signal.SIGCONT)

    def restart(self, down_for=0.0):
        self.stop()
        if down_for:
            time.sleep(down_for)
        return self.start()

    def alive(self):
        return self.proc is not None and self.proc.poll() is None


class Ensemble:
    """A quorum of n ZooKeeper servers (ZkServer each) on free 127.0.0.1
    ports. The server lines carry the client address (the 3.5+ dynamic
    config form), so /zookeeper/config names every server's client port.
    Members can be killed, paused and restarted one by one; wait_quorum()
    waits for one leader and n-1 followers again."""

    def __init__(self, workdir, n=3, tick_ms=500, reconfig=True, extra_cfg=None,
                 four_letter_words="srvr,ruok,stat", max_session_ms=30000, jvm_args=(), classpath=None):
        workdir = Path(workdir)
        ports = [(free_port(), free_port(), free_port()) for _ in range(n)]
        lines = ["server.%d=%s:%d:%d:participant;%s:%d" % (i + 1, HOST, q, e, HOST, c)
                 for i, (c, q, e) in enumerate(ports)]
        self.servers = []
        for i, (c, q, e) in enumerate(ports):
            srv = ZkServer(workdir / ("zk%d" % (i + 1)), tick_ms=tick_ms,
                           min_session_ms=2 * tick_ms, max_session_ms=max_session_ms,
                           four_letter_words=four_letter_words, jvm_args=jvm_args, classpath=classpath,
                           extra_cfg=[
                               "reconfigEnabled=%s" % ("true" if reconfig else "false"),
                               "standaloneEnabled=false", "initLimit=10", "syncLimit=5"]
                           + list(extra_cfg or []) + lines)
            # The client port comes from the server line (dynamic config).
            srv.port = c
            text = srv.cfg.read_text().splitlines()
            srv.cfg.write_text("\n".join(l for l in text if not l.startswith(("clientPort=",
                                                                                "clientPortAddress=")))
                               + "\n")
            (srv.datadir / "myid").write_text("%d\n" % (i + 1))
            self.servers.append(srv)

    @property
    def connect(self):
        """The kazoo / ZooKeeper connect string of every member."""
        return ",".join(s.hostport for s in self.servers)

    def start(self, timeout=60):
        for s in self.servers:
            s.start(wait=False)
        self.wait_quorum(timeout)

    def modes(self):
        """The srvr Mode line of each member (None when it does not answer)."""
        out = []
        for s in self.servers:
            if not s.alive() or s.paused:
                out.append(None)
                continue
            try:
                text = four_letter(s.port, "srvr", timeout=1.0)
            except OSError:
                out.append(None)
                continue
            mode = None
            for line in text.decode("utf-8", "replace").splitlines():
                if line.startswith("Mode: "):
                    mode = line[6:].strip()
            out.append(mode)
        return out

    def has_quorum(self):
        modes = self.modes()
        return modes.count("leader") == 1 and modes.count("follower") == len(self.servers) - 1

    def wait_quorum(self, timeout=60):
        wait_until(self.has_quorum, timeout, interval=0.2, what="a quorum with every member")

    def leader(self):
        """Index of the current leader, or None."""
        modes = self.modes()
        return modes.index("leader") if "leader" in modes else None

    def stop(self):
        for s in self.servers:
            s.stop()


_IDENTITY_SEQ = itertools.count(1)


def children(pid):
    """The pids of a process's children (a keeper's workers)."""
    try:
        with open("/proc/%d/task/%d/children" % (pid, pid)) as f:
            return [int(p) for p in f.read().split()]
    except OSError:
        return []


def default_zkwarden_bin():
    return os.environ.get("ZKW_BIN") or str(REPO / "build" / "zkwarden")


def default_build_dir():
    return os.environ.get("ZKW_BUILD_DIR") or str(REPO / "build")


class Zkwarden:
    """One zkwarden process in front of the given upstream host:port list."""

    def __init__(self, workdir, upstreams, binary=None, log_level=None, extra_env=None,
                 name="zkwarden", keeper=None):
        """keeper: a zkwarden-keeper binary that runs zkwarden (`--spawn`):
        proc is then the keeper, and worker_pid() the zkwarden serving."""
        self.dir = Path(workdir)
        self.keeper = keeper
        self.dir.mkdir(parents=True, exist_ok=True)
        self.binary = binary or default_zkwarden_bin()
        self.upstreams = list(upstreams)
        self.port = free_port()
        self.admin_port = free_port()
        while self.admin_port == self.port:  # the kernel may hand out a just-freed port again
            self.admin_port = free_port()
        self.name = name
        self.stderr_path = self.dir / ("%s.stderr" % name)
        self.stdout_path = self.dir / ("%s.stdout" % name)
        self.log_level = log_level or os.environ.get("ZKW_LOG_LEVEL", "info")
        self.extra_env = dict(extra_env or {})
        self.proc = None
        self.returncode = None

    @property
    def hostport(self):
        return "%s:%d" % (HOST, self.port)

    def start(self, timeout=15.0):
        if not os.access(self.binary, os.X_OK):
            raise FileNotFoundError(
                "zkwarden binary %s not found or not executable (set ZKW_BIN, build with "
                "cmake, or run with ZKW_DIRECT_ONLY=1)" % self.binary)
        env = dict(os.environ)
        env.update({
            # One identity per process, as one sidecar per JobManager: the
            # registry in the shared server outlives each test's zkwarden.
            "ZKWARDEN_IDENTITY": "itest-%d-%d" % (os.getpid(), next(_IDENTITY_SEQ)),
            # Many clients share one zkwarden in these tests: a plain relay,
            # unless a test asks for the sidecar (identity, fencing, reclaim).
            "ZKWARDEN_MODE": "relay",
            "ZKWARDEN_UPSTREAM": ",".join(self.upstreams),
            "ZKWARDEN_LISTEN": self.hostport,
            "ZKWARDEN_ADMIN_LISTEN": "%s:%d" % (HOST, self.admin_port),
            "ZKWARDEN_LOG_LEVEL": self.log_level,
        })
        env.setdefault("UBSAN_OPTIONS", "print_stacktrace=1")
        env.update(self.extra_env)
        self.err = open(self.stderr_path, "ab")
        self.out = open(self.stdout_path, "ab")
        cmd = [self.keeper, "--spawn", self.binary] if self.keeper else [self.binary]
        self.proc = subprocess.Popen(cmd, env=env, stdin=subprocess.DEVNULL,
                                     stdout=self.out, stderr=self.err, cwd=str(self.dir))

        def ready():
            if self.proc.poll() is not None:
                raise RuntimeError("zkwarden exited with %s during start; stderr:\n%s"
                                   % (self.proc.returncode, self.stderr()))
            # The client port, then the admin port: zkwarden opens the admin
            # endpoint after the registry starts, so a test's first admin
            # request could otherwise be refused. The log lines say so; the
            # client port is probed only when they go to a file (a probe is
            # an accepted connection, which tests count).
            if env.get("ZKWARDEN_LOG_FILE"):
                return port_accepts(self.port) and port_accepts(self.admin_port)
            text = self.stderr() + tail(self.stdout_path)
            return "listening on" in text and "admin endpoint on" in text

        wait_until(ready, timeout, interval=0.02, what="zkwarden to listen on %d" % self.port)
        return self

    def stderr(self):
        return tail(self.stderr_path, limit=200000)

    def admin_get(self, path, timeout=5.0):
        """(status, body) of GET path on the admin endpoint (errors too)."""
        import urllib.error
        import urllib.request
        url = "http://%s:%d%s" % (HOST, self.admin_port, path)
        try:
            with urllib.request.urlopen(url, timeout=timeout) as r:
                return r.status, r.read().decode("utf-8", "replace")
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode("utf-8", "replace")

    def metrics(self):
        """{name or name{labels}: value} of every sample on /metrics."""
        status, body = self.admin_get("/metrics")
        if status != 200:
            raise RuntimeError("/metrics answered %d: %s" % (status, body[:200]))
        out = {}
        for line in body.splitlines():
            if line and not line.startswith("#"):
                key, _, value = line.rpartition(" ")
                out[key] = float(value)
        return out

    def metric(self, key):
        """One sample, `name` or `name{labels}` as /metrics prints it (0 when absent)."""
        return self.metrics().get(key, 0.0)

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def worker_pid(self):
        """Under a keeper: the pid of the zkwarden serving (the keeper's
        child), else None."""
        pids = children(self.proc.pid)
        return pids[0] if len(pids) == 1 else None

    def kill(self):
        """kill -9 (a crash). start() brings it back on the same ports."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
        for f in (self.err, self.out):
            f.close()

    def stop(self):
        """SIGTERM, wait, and return a list of problems (empty when clean)."""
        problems = []
        if self.proc is None:
            return problems
        if self.proc.poll() is not None:
            problems.append("zkwarden had already exited with status %s before SIGTERM"
                            % self.proc.returncode)
        else:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                problems.append("zkwarden did not exit within 15 s of SIGTERM; killed")
                self.proc.kill()
                self.proc.wait(10)
            if self.proc.returncode != 0:
                problems.append("zkwarden exited with status %s after SIGTERM (want 0)"
                                % self.proc.returncode)
        self.returncode = self.proc.returncode
        for f in (self.err, self.out):
            f.close()
        text = self.stderr()
        for marker in SANITIZER_MARKERS:
            if marker in text:
                problems.append("zkwarden stderr contains %r" % marker)
        return problems


def run_bounded(cmd, timeout, input=None, env=None):
    """Run a command we start, in its own process group, with a deadline.
    On timeout the group we created is killed and TimeoutError is raised with
    the output so far. Returns (returncode, stdout, stderr) as text."""
    p = subprocess.Popen(cmd, stdin=subprocess.PIPE if input is not None else subprocess.DEVNULL,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env,
                         start_new_session=True, text=True)
    try:
        out, err = p.communicate(input=input, timeout=timeout)
    except subprocess.TimeoutExpired:
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        out, err = p.communicate()
        raise TimeoutError("%s did not finish within %ss\nstdout:\n%s\nstderr:\n%s"
                           % (cmd[0], timeout, out, err))
    return p.returncode, out, err


def export_integration_fixtures(namespace):
    """Loads tests/integration/conftest.py as a module and copies its names
    (fixtures, hooks, classes) into `namespace`, the globals() of another
    suite's conftest.py, so that every suite starts and stops ZooKeeper and
    zkwarden the same way. Returns the loaded module."""
    import importlib.util
    path = Path(__file__).resolve().parent / "conftest.py"
    spec = importlib.util.spec_from_file_location("zkw_integration_conftest", str(path))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    for name in dir(module):
        if not name.startswith("__"):
            namespace[name] = getattr(module, name)
    return module
