"""Fixtures for the zkwarden integration suite.

- zk_server: one ZooKeeper 3.8 server for the whole session (tests isolate
  themselves by root path).
- private_zk: a server of the test's own, for tests that restart it.
- zkwarden_factory: starts zkwarden processes in front of a server and, at
  teardown, stops them with SIGTERM and fails the test unless each exits 0
  with no sanitizer report in its stderr.
- target: parametrized "direct" / "zkwarden": where the clients connect.
- kazoo_factory: kazoo clients that are always stopped at teardown.

Environment:
  ZKW_DIRECT_ONLY=1   skip everything that needs the zkwarden binary
  ZKW_BIN             zkwarden binary (default <repo>/build/zkwarden)
  ZKW_BUILD_DIR       build directory (default <repo>/build), for the C client
  ZKW_CCLIENT         the C client workload binary itself (overrides ZKW_BUILD_DIR)
  ZKW_LOG_LEVEL       zkwarden log level (default info)
"""

import logging
import os

import pytest

import zkharness
from zkharness import HOST, ZkServer, Zkwarden, tail

DIRECT_ONLY = os.environ.get("ZKW_DIRECT_ONLY", "") not in ("", "0")

# Where the clients of a test connect (params of the `target` fixture):
# "direct" to ZooKeeper; "sidecar", zkwarden in its default mode (identity,
# tags, fencing, reclaim; one zkwarden per client session); "relay",
# ZKWARDEN_MODE=relay (a plain proxy).
MODES = ["direct",
         pytest.param("sidecar", marks=pytest.mark.zkwarden),
         pytest.param("relay", marks=pytest.mark.zkwarden)]
SIDECAR_MODES = MODES[:2]


def pytest_configure(config):
    config.addinivalue_line("markers", "zkwarden: needs the zkwarden binary "
                            "(skipped when ZKW_DIRECT_ONLY=1)")


def pytest_collection_modifyitems(config, items):
    if not DIRECT_ONLY:
        return
    skip = pytest.mark.skip(reason="ZKW_DIRECT_ONLY=1")
    for item in items:
        if "zkwarden" in item.keywords:
            item.add_marker(skip)


def _logs_of(item):
    logs = getattr(item, "_zkw_logs", None)
    if logs is None:
        logs = item._zkw_logs = []
    return logs


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    if rep.failed:
        # Attach the logs of every process the test used: zkwarden's stderr
        # first, the ZooKeeper log after it.
        for name, fn in _logs_of(item):
            try:
                rep.sections.append((name, fn()))
            except Exception as e:  # diagnostics must never hide the failure
                rep.sections.append((name, "<log unavailable: %s>" % e))


# ---------------------------------------------------------------- servers

@pytest.fixture(scope="session")
def zk_server(tmp_path_factory):
    srv = ZkServer(tmp_path_factory.mktemp("zk-shared"))
    try:
        srv.start()
        yield srv
    finally:
        srv.stop()


@pytest.fixture
def private_zk(tmp_path, request):
    srv = ZkServer(tmp_path / "zk")
    _logs_of(request.node).append(("zookeeper log (private)", lambda: tail(srv.log)))
    try:
        srv.start()
        yield srv
    finally:
        srv.stop()


@pytest.fixture(autouse=True)
def _shared_zk_log_on_failure(request):
    if "zk_server" in request.fixturenames:
        srv = request.getfixturevalue("zk_server")
        _logs_of(request.node).append(("zookeeper log (shared, tail)",
                                       lambda: tail(srv.log, limit=8000)))
    yield


# ---------------------------------------------------------------- zkwarden

class ZkwardenFactory:
    def __init__(self, tmp_path, node):
        self.tmp_path = tmp_path
        self.node = node
        self.procs = []

    def start(self, *servers, **kw):
        ups = [s if isinstance(s, str) else s.hostport for s in servers]
        name = "zkwarden%d" % len(self.procs)
        p = Zkwarden(self.tmp_path / name, ups, name=name, **kw)
        self.procs.append(p)
        _logs_of(self.node).insert(0, ("%s stderr" % name, p.stderr))
        p.start()
        return p

    def stop_all(self):
        problems = []
        for p in self.procs:
            for msg in p.stop():
                problems.append("%s: %s" % (p.name, msg))
        return problems


def zkwarden_factory_fixture(tmp_path, request, cls=ZkwardenFactory):
    """The body of every suite's zkwarden_factory fixture (yield from it):
    cls(tmp_path, node), then the shutdown check of every zkwarden started."""
    if DIRECT_ONLY:
        pytest.skip("ZKW_DIRECT_ONLY=1")
    f = cls(tmp_path, request.node)
    yield f
    problems = f.stop_all()
    if problems:
        text = "\n".join(problems)
        for p in f.procs:
            text += "\n----- %s stderr -----\n%s" % (p.name, p.stderr())
        pytest.fail("zkwarden shutdown check failed:\n" + text, pytrace=False)


@pytest.fixture
def zkwarden_factory(tmp_path, request):
    yield from zkwarden_factory_fixture(tmp_path, request)


# ---------------------------------------------------------------- targets

class Target:
    """Where clients connect: the server itself or a zkwarden in front of it.

    One zkwarden stands for one JobManager's sidecar. Sessions other than
    the one under test (helpers that trigger watches, a second Curator
    client, ...) connect to another(): the server (direct) or a zkwarden of
    their own, as another JobManager's would be, so that a workload that
    creates ephemerals under the lock roots (DESIGN.md 3.3: that begins an
    incarnation) never fences its own helpers. Relay mode gets the same
    layout, so both modes see the same traffic. Clients sharing one sidecar:
    test_plain_clients.py."""

    def __init__(self, kind, server, proxy=None, factory=None):
        self.kind = kind
        self.server = server
        self.proxy = proxy
        self.factory = factory

    @property
    def port(self):
        return self.proxy.port if self.proxy else self.server.port

    @property
    def hostport(self):
        return "%s:%d" % (HOST, self.port)

    @property
    def via_zkwarden(self):
        return self.proxy is not None

    def another(self):
        """host:port for one more client session (see the class comment)."""
        if self.kind == "direct":
            return self.server.hostport
        return start_zkwarden(self.factory, self.server, self.kind).hostport

    def __repr__(self):
        return "Target(%s, %s)" % (self.kind, self.hostport)


def start_zkwarden(factory, server, mode):
    return factory.start(server, extra_env={"ZKWARDEN_MODE": mode})


def make_target(kind, server, zkwarden_factory_getter):
    if kind == "direct":
        return Target("direct", server)
    factory = zkwarden_factory_getter()
    return Target(kind, server, start_zkwarden(factory, server, kind), factory)


@pytest.fixture(params=MODES)
def target(request, zk_server):
    return make_target(request.param, zk_server,
                       lambda: request.getfixturevalue("zkwarden_factory"))


# ---------------------------------------------------------------- kazoo

class KazooFactory:
    def __init__(self):
        self.clients = []

    def __call__(self, hosts, start=True, timeout=10.0, **kw):
        from kazoo.client import KazooClient
        from kazoo.retry import KazooRetry
        if not isinstance(hosts, str):
            hosts = hosts.hostport
        kw.setdefault("connection_retry",
                      KazooRetry(max_tries=-1, delay=0.05, backoff=1.5, max_delay=0.5))
        c = KazooClient(hosts=hosts, timeout=timeout, **kw)
        self.clients.append(c)
        if start:
            c.start(timeout=15)
        return c

    def close_all(self):
        for c in self.clients:
            try:
                c.stop()
                c.close()
            except Exception:
                logging.getLogger("zkw.tests").exception("stopping kazoo client")


@pytest.fixture
def kazoo_factory():
    f = KazooFactory()
    yield f
    f.close_all()


@pytest.fixture(scope="session")
def transcripts():
    """Session cache of workload transcripts, keyed (client, mode)."""
    return {}


@pytest.fixture(scope="session")
def build_dir():
    return zkharness.default_build_dir()


# ---------------------------------------------------------------- Java

JAVA_JARS = ["curator-framework", "curator-client", "curator-recipes", "zookeeper",
             "zookeeper-jute", "guava", "slf4j-api", "slf4j-nop"]
JAVA_SRC = os.path.join(os.path.dirname(os.path.abspath(__file__)), "java")


class JavaClasses:
    def __init__(self, outdir):
        self.outdir = str(outdir)
        self.classpath = ":".join([self.outdir] + ["/usr/share/java/%s.jar" % j
                                                   for j in JAVA_JARS])

    def cmd(self, main, *args):
        return ["java", "-Xss1m", "-XX:+UseSerialGC", "-cp", self.classpath, main] + \
            [str(a) for a in args]


@pytest.fixture(scope="session")
def java_classes(tmp_path_factory):
    """Compiles tests/integration/java/*.java once per session into a temp dir."""
    import glob
    import subprocess
    out = tmp_path_factory.mktemp("java-classes")
    jc = JavaClasses(out)
    srcs = sorted(glob.glob(os.path.join(JAVA_SRC, "*.java")))
    r = subprocess.run(["javac", "-d", str(out), "-cp", jc.classpath] + srcs,
                       capture_output=True, text=True, timeout=180)
    assert r.returncode == 0, "javac failed:\n" + r.stdout + r.stderr
    return jc
