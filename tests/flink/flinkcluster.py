"""Real Flink on this machine, for tests/flink: the classpaths (resolved from
Maven Central by tests/flink/maven), our own streaming job, a Flink cluster of
separate JVMs (JobManager, TaskManager, the job's submitter), ZooKeeper
servers of any version, and what is read back: Flink's REST API, the
ZooKeeper tree, the HA storage and checkpoint directories, the JobManager's
own log.

Every process is started here in its own process group, remembered by its
pid (tests/drills/procs.py's registry) and stopped by that pid. Everything
listens on 127.0.0.1 only. A JVM in a session of its own outlives the run
unless the run stops it: flinktest.py turns SIGTERM and SIGHUP into an exit
through every finally block, and a process is started and registered under
signals_held(), so that no such signal comes between the two.
"""

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path.insert(0, str(REPO / "tests" / "integration"))
sys.path.insert(0, str(REPO / "tests" / "drills"))

import procs  # noqa: E402  (process registry, zkwarden sidecars)
import zkharness  # noqa: E402  (ZooKeeper servers, free ports, polling)
from drill import Inspector  # noqa: E402  (a kazoo session straight to the servers)
from zkharness import HOST, free_port, tail, wait_until  # noqa: E402,F401

# Each release line at its newest patch release, as pinned by the profiles of
# tests/flink/maven/flink/pom.xml (flink-<line>).
FLINK_LINES = {"1.18": "1.18.1", "1.19": "1.19.3", "1.20": "1.20.5", "2.0": "2.0.2",
               "2.1": "2.1.3", "2.2": "2.2.1", "2.3": "2.3.0"}
# ZooKeeper servers: Maven Central's (tests/flink/maven/zookeeper/pom.xml,
# zk-<line>) and Debian's package, the one every other test uses.
ZK_LINES = {"3.6": "3.6.4", "3.7": "3.7.2", "3.8": "3.8.6", "3.9": "3.9.5", "debian": "3.8.0"}
# flink-container (the application cluster's entry point) is not served for 1.19.
NO_APPLICATION_CLUSTER = ("1.19",)

# The JobManager's removals that failed, as Flink logs them (its own words):
# ZooKeeperStateHandleStore.releaseAndTryRemove on NOTEMPTY (at DEBUG: the log
# configuration below raises that one logger), a subsumption that threw, and a
# job graph / execution plan that could not be removed (retried by Flink's
# resource cleaner, each attempt logged).
FAILED_REMOVAL = re.compile(r"because it is still locked|Fail(?:ed)? to subsume|"
                            r"Could not remove (?:the )?(?:job graph|execution plan|JobGraph|ExecutionPlan)",
                            re.I)
CURATOR_SUSPENDED = re.compile(r"State change: SUSPENDED")
# Leadership going, in the JobManager's words: the REST endpoint (one per
# process, under the process's one leader latch since 1.18) logs it once per
# revocation (WebMonitorEndpoint.revokeLeadership).
LEADERSHIP_REVOKED = re.compile(r"http://\S+ lost leadership")
CURATOR_LOST = re.compile(r"State change: LOST")
# The ZooKeeper client opening a connection: after the first, each one is a
# reconnect (its connection closed). Both lines name the address it dials.
JM_DIALS = re.compile(r"Opening socket connection to server")
# A checkpoint the coordinator could not trigger (e.g. its ID counter in
# ZooKeeper unreachable) or whose triggering failed, in Flink's words
# (CheckpointCoordinator, 1.18 to 2.x).
CHECKPOINT_TRIGGER_FAILED = re.compile(r"Failed to trigger checkpoint for job|Triggering Checkpoint \d+ for job \S+ "
                                       r"failed")
JOB_RESTART = re.compile(r"Job \S+ \(([0-9a-f]{32})\) switched from state RUNNING to "
                         r"(RESTARTING|SUSPENDED|FAILING|FAILED)")

# Java 17 needs these for Flink's reflection (what flink-dist's default
# env.java.opts.all opens).
JAVA17_OPENS = ["--add-exports=java.base/sun.net.util=ALL-UNNAMED",
                "--add-exports=java.rmi/sun.rmi.registry=ALL-UNNAMED"] + [
    "--add-opens=java.base/%s=ALL-UNNAMED" % p for p in (
        "java.lang", "java.net", "java.io", "java.nio", "sun.nio.ch", "java.lang.reflect", "java.text",
        "java.time", "java.util", "java.util.concurrent", "java.util.concurrent.atomic",
        "java.util.concurrent.locks")]
# Small JVMs that start fast: C1 only, serial GC, class data sharing.
FAST_JVM = ["-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Xshare:auto", "-Xss512k"]


# ---------------------------------------------------------------- signals

_held = {"depth": 0, "pending": None}


def hold_signal(signum):
    """Called by the run's signal handler: True when the signal waits for
    the end of a signals_held() block (which delivers it again)."""
    if _held["depth"]:
        _held["pending"] = signum
        return True
    return False


@contextlib.contextmanager
def signals_held():
    """A process started and stored where the finally blocks stop it (its
    object, procs' registry) before a SIGTERM or SIGHUP ends the run."""
    _held["depth"] += 1
    try:
        yield
    finally:
        _held["depth"] -= 1
        if not _held["depth"] and _held["pending"] is not None:
            signum, _held["pending"] = _held["pending"], None
            os.kill(os.getpid(), signum)  # the handler runs now and ends the run


def log(msg):
    sys.stderr.write("%s flink: %s\n" % (time.strftime("%H:%M:%S"), msg))
    sys.stderr.flush()


# ---------------------------------------------------------------- classpaths

def cache_dir():
    """Where resolved classpaths and compiled jobs are kept (gitignored build/)."""
    d = Path(os.environ.get("ZKW_FLINK_CACHE") or (REPO / "build" / "flink"))
    d.mkdir(parents=True, exist_ok=True)
    return d


def _mvn_classpath(pom, profile, out, repo_local, version_prop):
    """Runs Maven's dependency:build-classpath on pom with one profile, into out."""
    cmd = ["mvn", "-B", "-q", "-f", str(pom), "-P", profile, version_prop, "dependency:build-classpath",
           "-Dmdep.outputFile=%s" % out]
    if repo_local:
        cmd.append("-Dmaven.repo.local=%s" % repo_local)
    t0 = time.monotonic()
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    if r.returncode != 0 or not Path(out).exists():
        raise RuntimeError("mvn %s failed (%s):\n%s%s" % (profile, r.returncode, r.stdout[-4000:], r.stderr[-4000:]))
    return time.monotonic() - t0


def flink_classpath(line, version, repo_local=None):
    """(classpath, seconds Maven took or 0 when cached) of one Flink release
    (its line's profile; another patch release than the pinned one with
    -Dflink.version, which wins over the profile's)."""
    d = cache_dir() / ("flink-" + version)
    d.mkdir(parents=True, exist_ok=True)
    out = d / "classpath"
    pom = HERE / "maven" / "flink" / "pom.xml"
    took = 0.0
    if repo_local or not out.exists() or out.stat().st_mtime < pom.stat().st_mtime or \
            not all(os.path.exists(j) for j in out.read_text().strip().split(":")):
        took = _mvn_classpath(pom, "flink-" + line, out, repo_local, "-Dflink.version=" + version)
    return out.read_text().strip(), took


def job_jar(version, classpath):
    """Our job, compiled against one Flink release's classpath (tests/flink/job)."""
    d = cache_dir() / ("flink-" + version)
    jar = d / "zkw-job.jar"
    srcs = sorted((HERE / "job").rglob("*.java"))
    if jar.exists() and all(s.stat().st_mtime < jar.stat().st_mtime for s in srcs):
        return jar
    classes = d / "job-classes"
    shutil.rmtree(classes, ignore_errors=True)
    classes.mkdir()
    r = subprocess.run(["javac", "-Xlint:all,-serial,-options", "-encoding", "UTF-8", "--release", "17",
                        "-d", str(classes), "-cp", classpath] + [str(s) for s in srcs],
                       capture_output=True, text=True, timeout=300)
    if r.returncode != 0:
        raise RuntimeError("javac of the job against Flink %s failed:\n%s%s" % (version, r.stdout, r.stderr))
    tmp = d / "zkw-job.jar.tmp"
    subprocess.run(["jar", "cf", str(tmp), "-C", str(classes), "."], check=True, timeout=120)
    os.replace(tmp, jar)
    return jar


def flink_jar_versions(classpath):
    """{artifact: version} of the Flink jars on a classpath that can differ in
    version: flink-runtime and flink-container (the application cluster's
    entry point, published for some patch releases only: e.g. 1.20.0 beside
    1.20.5's runtime)."""
    out = {}
    for jar in classpath.split(":"):
        m = re.match(r"(flink-runtime|flink-container)-(\d+\.\d+\.\d+)\.jar$", os.path.basename(jar))
        if m:
            out[m.group(1)] = m.group(2)
    return out


def pinned_container_versions():
    """{Flink line: flink-container version} as maven/flink/pom.xml pins them
    (for results that did not record the jars they ran)."""
    text = (HERE / "maven" / "flink" / "pom.xml").read_text()
    out = {}
    for prof in re.findall(r"<profile>(.*?)</profile>", text, re.S):
        line = re.search(r"<id>flink-([0-9.]+)</id>", prof)
        dep = re.search(r"<artifactId>flink-container</artifactId><version>([^<]+)</version>", prof)
        if line and dep:
            out[line.group(1)] = dep.group(1)
    return out


def zookeeper_classpath(line, version, repo_local=None):
    """(classpath, seconds) of one ZooKeeper server release; Debian's needs no Maven."""
    if line == "debian":
        return zkharness.zk_classpath(), 0.0
    d = cache_dir() / ("zookeeper-" + version)
    d.mkdir(parents=True, exist_ok=True)
    out = d / "classpath"
    pom = HERE / "maven" / "zookeeper" / "pom.xml"
    took = 0.0
    if repo_local or not out.exists() or out.stat().st_mtime < pom.stat().st_mtime:
        took = _mvn_classpath(pom, "zk-" + line, out, repo_local, "-Dzookeeper.version=" + version)
    # the logging configuration (log4j 1 for 3.6/3.7, logback for 3.8+) comes first
    return "%s:%s" % (HERE / "zookeeper-conf", out.read_text().strip()), took


def cds_archive(version):
    """The JobManager's class data sharing archive of a Flink release (make_cds_archive)."""
    return cache_dir() / ("flink-" + version) / "jobmanager.jsa"


def make_cds_archive(cluster, timeout=120.0):
    """A training run: a JobManager of this cluster's line starts, leads, and
    stops with SIGTERM, leaving the classes it loaded in an AppCDS archive that
    every later JVM of the line maps (measured here: a JobManager leads in 1.3
    s instead of 2.5 s). Done once per line; the cache keeps it."""
    target = cds_archive(cluster.version)
    if target.exists():
        return 0.0
    t0 = time.monotonic()
    tmp = target.with_suffix(".jsa.tmp")
    cluster.start_jm(cds_dump=tmp)
    try:
        wait_until(lambda: "was granted leadership" in tail(cluster.jm_logs[-1]) or cluster.jm.poll() is not None,
                   timeout, interval=0.1, what="the training JobManager to lead")
    finally:
        zkharness._stop_pid(cluster.jm, grace=30)
        procs._untrack(cluster.jm)
    if tmp.exists():
        os.replace(tmp, target)
    else:
        log("no class data sharing archive was written (JobManager exit %s); JVMs start without one"
            % cluster.jm.returncode)
    return time.monotonic() - t0


# ---------------------------------------------------------------- REST

def rest(port, path, method="GET", timeout=3.0):
    """JSON of a Flink REST call, or None when the endpoint does not answer."""
    req = urllib.request.Request("http://%s:%d%s" % (HOST, port, path), method=method)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            body = r.read()
            return json.loads(body) if body else {}
    except (urllib.error.URLError, OSError, ValueError):
        return None


# ---------------------------------------------------------------- the cluster

class FlinkCluster:
    """One Flink cluster: a config directory, one JobManager process at a time
    (start() makes a new incarnation, each with its own log), one TaskManager.

    kind: "session" (StandaloneSessionClusterEntrypoint, jobs submitted
    through REST) or "application" (StandaloneApplicationClusterEntryPoint
    running our job's main)."""

    def __init__(self, workdir, version, classpath, jar, quorum, cluster_id, session_timeout_ms,
                 kind="session", num_retained=3, slots=2, extra_settings=None, shared_dir=None):
        """extra_settings: Flink settings beside (or instead of) ours;
        shared_dir: where the HA storage and the checkpoints are (another
        JobManager of the same cluster: the standby), else workdir."""
        self.dir = Path(workdir)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.extra_settings = dict(extra_settings or {})
        self.peers = []  # the other JobManagers of the same cluster (all_jm_logs)
        self.version = version
        self.major = int(version.split(".")[0])
        self.classpath = classpath
        self.jar = jar
        self.quorum = quorum
        self.cluster_id = cluster_id
        self.kind = kind
        self.num_retained = num_retained
        self.session_timeout_ms = session_timeout_ms
        self.ha_dir = Path(shared_dir or self.dir) / "ha"
        self.checkpoint_dir = Path(shared_dir or self.dir) / "checkpoints"
        self.conf_dir = self.dir / "conf"
        self.rest_port = free_port()
        self.rpc_port = free_port()
        self.blob_port = free_port()
        self.jm = None
        self.jm_n = 0
        self.jm_started_at = None
        self.tm = None
        self.jm_logs = []
        self.write_config(slots)

    @property
    def zk_root(self):
        """The cluster's root znode (path.root /flink + cluster-id)."""
        return "/flink/" + self.cluster_id

    def settings(self, slots):
        timeout = self.session_timeout_ms
        return {
            "jobmanager.rpc.address": HOST, "jobmanager.rpc.port": self.rpc_port,
            "jobmanager.bind-host": HOST, "rest.address": HOST, "rest.bind-address": HOST,
            "rest.port": self.rest_port, "blob.server.port": self.blob_port,
            "taskmanager.host": HOST, "taskmanager.bind-host": HOST,
            "taskmanager.numberOfTaskSlots": slots, "parallelism.default": 1,
            # TaskManagerRunner started without Flink's scripts needs every
            # memory component set (the scripts pass them as -D).
            "taskmanager.cpu.cores": 1,
            "taskmanager.memory.framework.heap.size": "64m",
            "taskmanager.memory.framework.off-heap.size": "64m",
            "taskmanager.memory.task.heap.size": "96m",
            "taskmanager.memory.task.off-heap.size": "0m",
            "taskmanager.memory.network.min": "32m", "taskmanager.memory.network.max": "32m",
            "taskmanager.memory.managed.size": "0m",
            "taskmanager.memory.jvm-metaspace.size": "128m",
            "taskmanager.memory.jvm-overhead.min": "64m", "taskmanager.memory.jvm-overhead.max": "64m",
            "io.tmp.dirs": str(self.dir / "tmp"),
            "high-availability.type": "zookeeper",
            "high-availability.zookeeper.quorum": self.quorum,
            "high-availability.zookeeper.path.root": "/flink",
            "high-availability.cluster-id": "/" + self.cluster_id,
            "high-availability.storageDir": "file://%s" % self.ha_dir,
            "high-availability.zookeeper.client.session-timeout": timeout,
            "zookeeper.sasl.disable": "true",
            # checkpoints: 1.x keys and their 2.x names (each line ignores the other's)
            "execution.checkpointing.interval": "1s",
            "execution.checkpointing.externalized-checkpoint-retention": "RETAIN_ON_CANCELLATION",
            "state.checkpoints.num-retained": self.num_retained,
            "execution.checkpointing.num-retained": self.num_retained,
            "state.checkpoints.dir": "file://%s" % self.checkpoint_dir,
            "execution.checkpointing.dir": "file://%s" % self.checkpoint_dir,
            "restart-strategy.type": "fixed-delay",
            "restart-strategy.fixed-delay.attempts": 1000,
            "restart-strategy.fixed-delay.delay": "1s",
            **self.extra_settings,
        }

    def job_settings(self):
        """What the submitter passes with the job (the client's configuration)."""
        s = self.settings(1)
        keys = [k for k in s if k.startswith(("execution.checkpointing.", "state.checkpoints.", "restart-strategy."))]
        return {k: s[k] for k in keys}

    def write_config(self, slots):
        self.conf_dir.mkdir(parents=True, exist_ok=True)
        (self.dir / "tmp").mkdir(exist_ok=True)
        name = "config.yaml" if self.major >= 2 else "flink-conf.yaml"
        text = "".join("%s: %s\n" % kv for kv in self.settings(slots).items())
        (self.conf_dir / name).write_text(text)
        # log4j 2: everything at INFO to the process's stdout (a file per
        # process), and the state handle store at DEBUG: it logs a removal that
        # failed on a foreign lock only at DEBUG.
        (self.conf_dir / "log4j2.properties").write_text(
            "rootLogger.level = INFO\n"
            "rootLogger.appenderRef.out.ref = out\n"
            "appender.out.type = Console\n"
            "appender.out.name = out\n"
            "appender.out.layout.type = PatternLayout\n"
            "appender.out.layout.pattern = %d{yyyy-MM-dd HH:mm:ss,SSS} %-5p %c - %m%n\n"
            "logger.shs.name = org.apache.flink.runtime.zookeeper.ZooKeeperStateHandleStore\n"
            "logger.shs.level = DEBUG\n")

    def _java(self, heap, main, args, out, cds_dump=None):
        cp = self.classpath + ":" + str(self.jar)
        cds = []
        if cds_dump:
            cds = ["-XX:ArchiveClassesAtExit=%s" % cds_dump]
        elif cds_archive(self.version).exists():
            cds = ["-XX:SharedArchiveFile=%s" % cds_archive(self.version)]
        cmd = ["java", "-Xmx%s" % heap] + FAST_JVM + cds + JAVA17_OPENS + [
            "-Dlog4j.configurationFile=%s" % (self.conf_dir / "log4j2.properties"),
            # Flink's web and RPC jars unpack under java.io.tmpdir: the work
            # directory's, so that nothing is left in /tmp.
            "-Djava.io.tmpdir=%s" % (self.dir / "tmp"),
            "-cp", cp, main] + list(args)
        f = open(out, "ab")
        p = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=f, stderr=subprocess.STDOUT,
                             cwd=str(self.dir), start_new_session=True)
        f.close()
        return p

    # -------------------------------------------------------- JobManager

    def start_jm(self, cds_dump=None):
        """A new JobManager process (the next incarnation); returns its launch time.
        cds_dump: write a class data sharing archive there when it exits."""
        assert self.jm is None or self.jm.poll() is not None
        self.jm_n += 1
        path = self.dir / ("jobmanager.%d.log" % self.jm_n)
        self.jm_logs.append(path)
        if self.kind == "session":
            main, args = "org.apache.flink.runtime.entrypoint.StandaloneSessionClusterEntrypoint", []
        else:
            main = "org.apache.flink.container.entrypoint.StandaloneApplicationClusterEntryPoint"
            args = ["--job-classname", "zkwtest.GeneratorJob"]
        with signals_held():
            self.jm_started_at = time.time()
            self.jm = self._java("320m", main, ["--configDir", str(self.conf_dir)] + args, path, cds_dump)
            procs._track(self.jm, "jobmanager %s#%d" % (self.cluster_id, self.jm_n))
        return self.jm_started_at

    def kill_jm(self):
        """kill -9 of the JobManager (a crash: nothing closes its session)."""
        if self.jm is not None and self.jm.poll() is None:
            os.kill(self.jm.pid, signal.SIGKILL)
            self.jm.wait(10)
        if self.jm is not None:
            procs._untrack(self.jm)

    def jm_alive(self):
        return self.jm is not None and self.jm.poll() is None

    def jm_log(self, n=None):
        """The text of one incarnation's log (the latest by default)."""
        path = self.jm_logs[(n or self.jm_n) - 1]
        return tail(path, limit=50_000_000)

    def all_jm_logs(self):
        """Every incarnation's log, and those of the peers (the other
        JobManagers of the same cluster: a standby's figures read them all)."""
        return "".join(c.jm_log(i + 1) for c in [self] + self.peers for i in range(c.jm_n))

    # -------------------------------------------------------- TaskManager

    def start_tm(self):
        path = self.dir / "taskmanager.log"
        with signals_held():
            self.tm = self._java("200m", "org.apache.flink.runtime.taskexecutor.TaskManagerRunner",
                                 ["--configDir", str(self.conf_dir)], path)
            procs._track(self.tm, "taskmanager %s" % self.cluster_id)

    # -------------------------------------------------------- jobs

    def submit(self, n_jobs, timeout=120.0):
        """Submits n copies of our job through the REST API from a client JVM of
        its own (flink-clients' remote environment); returns their job ids."""
        out = self.dir / "submit.log"
        args = ["--rest", "%s:%d" % (HOST, self.rest_port), "--jobs", str(n_jobs)]
        for k, v in self.job_settings().items():
            args += ["--set", "%s=%s" % (k, v)]
        with signals_held():
            p = self._java("128m", "zkwtest.GeneratorJob", args, out)
            procs._track(p, "submitter %s" % self.cluster_id)
        try:
            p.wait(timeout)
        except subprocess.TimeoutExpired:
            raise RuntimeError("the job submitter did not finish within %ss:\n%s" % (timeout, tail(out, 6000)))
        finally:
            zkharness._stop_pid(p)
            procs._untrack(p)
        ids = re.findall(r"^submitted ([0-9a-f]{32})$", out.read_text(errors="replace"), re.M)
        if p.returncode != 0 or len(ids) != n_jobs:
            raise RuntimeError("the job submitter exited %s with %d job ids:\n%s" % (p.returncode, len(ids),
                                                                                  tail(out, 6000)))
        return ids

    def overview(self):
        """{job id: (state, tasks running, tasks total)} from /jobs/overview, or None."""
        o = rest(self.rest_port, "/jobs/overview")
        if o is None or "jobs" not in o:
            return None
        return {j["jid"]: (j["state"], j["tasks"]["running"], j["tasks"]["total"]) for j in o["jobs"]}

    def all_running(self, jobs):
        """True when every one of jobs is RUNNING with every task running."""
        o = self.overview()
        if not o:
            return False
        return all(j in o and o[j][0] == "RUNNING" and o[j][1] == o[j][2] and o[j][2] > 0 for j in jobs)

    def wait_running(self, jobs, timeout, what="the jobs to run"):
        def check():
            if not self.jm_alive():
                raise RuntimeError("the JobManager exited with %s while waiting for %s:\n%s"
                                   % (self.jm.returncode, what, tail(self.jm_logs[-1], 8000)))
            return self.all_running(jobs)
        wait_until(check, timeout, interval=0.1, what=what)
        return time.time()

    def checkpoints(self, job):
        """(completed count, latest completed id) of a job from its REST checkpoint statistics."""
        c = rest(self.rest_port, "/jobs/%s/checkpoints" % job)
        if not c or "counts" not in c:
            return 0, None
        latest = (c.get("latest") or {}).get("completed") or {}
        return c["counts"].get("completed", 0), latest.get("id")

    def wait_checkpoints(self, jobs, n, timeout):
        """Waits until every job has completed n more checkpoints than now (the
        counts start again at 0 in a new JobManager); "now" is a count the REST
        API gave, never a call that failed."""
        def counts():
            out = {}
            for j in jobs:
                c = rest(self.rest_port, "/jobs/%s/checkpoints" % j)
                if not c or "counts" not in c:
                    return None
                out[j] = c["counts"].get("completed", 0)
            return out
        base = wait_until(counts, timeout, interval=0.2, what="the checkpoint counts of every job")
        wait_until(lambda: all(self.checkpoints(j)[0] >= base[j] + n for j in jobs), timeout, interval=0.2,
                   what="%d new checkpoints of every job" % n)

    def cancel(self, job):
        return rest(self.rest_port, "/jobs/%s?mode=cancel" % job, method="PATCH") is not None

    def job_state(self, job):
        o = self.overview() or {}
        return o.get(job, (None,))[0]

    def stop(self):
        for p in (self.tm, self.jm):
            if p is not None:
                zkharness._stop_pid(p, grace=10)
                procs._untrack(p)


# ---------------------------------------------------------------- what is left

class Tree(Inspector):
    """The ZooKeeper tree of one cluster, read by our own kazoo session straight
    to the servers (never through zkwarden): the drill's inspector, with the
    paths of Flink's own layout."""

    def exists(self, path):
        return self.stat(path) is not None

    def checkpoint_ids(self, root, job):
        self.zk.sync(root)
        return sorted(int(c) for c in self.children("%s/jobs/%s/checkpoints" % (root, job)) if c.isdigit())

    def job_graph_paths(self, root, job):
        """The job graph (1.x) / execution plan node of a job, whichever the line uses."""
        return [p for p in ("%s/jobgraphs/%s" % (root, job), "%s/execution-plans/%s" % (root, job))
                if self.exists(p)]

    def locks(self, root, job):
        """[(lock path, ephemeralOwner)] on every checkpoint of a job."""
        out = []
        for cid in self.checkpoint_ids(root, job):
            out += self.locks_of("%s/jobs/%s/checkpoints/%019d" % (root, job, cid), "1.15")
        return out


COMPLETED = re.compile(r"Completed checkpoint (\d+) for job ([0-9a-f]{32})")
_LOG_STAMP = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d),(\d{3}) ", re.M)


def log_time(line):
    """Epoch seconds of a JobManager log line (log4j's local time), or None."""
    m = _LOG_STAMP.match(line)
    if not m:
        return None
    return time.mktime(time.strptime(m.group(1), "%Y-%m-%d %H:%M:%S")) + int(m.group(2)) / 1000.0


def max_checkpoint_gap(text):
    """The longest time, s, between two completed checkpoints of one job in a
    JobManager's log text (None with fewer than two)."""
    times = {}
    for line in text.splitlines():
        m = COMPLETED.search(line)
        t = log_time(line) if m else None
        if t is not None:
            times.setdefault(m.group(2), []).append(t)
    gaps = [b - a for ts in times.values() for a, b in zip(ts, ts[1:])]
    return round(max(gaps), 2) if gaps else None


def completed_checkpoints(cluster, job):
    """Checkpoint ids the JobManagers logged as completed for a job."""
    return {int(m.group(1)) for m in COMPLETED.finditer(cluster.all_jm_logs()) if m.group(2) == job}


def disk_checkpoints(cluster, job):
    """Checkpoint ids with a chk-N directory of the job on disk."""
    d = cluster.checkpoint_dir / job
    if not d.is_dir():
        return []
    return sorted(int(p.name[4:]) for p in d.iterdir() if p.name.startswith("chk-") and p.name[4:].isdigit())


def ha_files(cluster, prefix):
    """HA storage files of a kind (completedCheckpoint..., submittedJobGraph...)."""
    d = cluster.ha_dir / cluster.cluster_id
    if not d.is_dir():
        return []
    return sorted(p.name for p in d.iterdir() if p.name.startswith(prefix))


def leftovers(c, tree, jobs):
    """S2: what Flink subsumed and left behind, read twice with a checkpoint
    between (a node or file counts only if it is still there the second time,
    so a subsumption under way is not one): checkpoint znodes older than the
    job's retained ones, HA files without a checkpoint znode, checkpoint
    directories of completed checkpoints older than the retained ones; and
    the JobManager's failed removals, from its own log. A checkpoint under way
    when a JobManager was killed never completed and was never subsumed: its
    directory stays (Flink does not clean it up) and is counted apart."""
    def snapshot():
        zk = {j: tree.checkpoint_ids(c.zk_root, j) for j in jobs}
        disk = {j: disk_checkpoints(c, j) for j in jobs}
        ha = ha_files(c, "completedCheckpoint")
        return zk, disk, ha

    zk1, disk1, ha1 = snapshot()
    c.wait_checkpoints(jobs, 2, 60)
    zk2, disk2, ha2 = snapshot()
    left_zk, left_disk, stale_locks, in_flight = 0, 0, 0, 0
    for j in jobs:
        retained = zk2[j][-c.num_retained:]
        left_zk += len([i for i in zk1[j] if i in zk2[j] and i not in retained])
        oldest = min(retained) if retained else 0
        completed = completed_checkpoints(c, j)
        old = [i for i in disk1[j] if i in disk2[j] and i < oldest]
        left_disk += len([i for i in old if i in completed])
        in_flight += len([i for i in old if i not in completed])
        owners = {o for _, o in tree.locks(c.zk_root, j)}
        stale_locks += len(owners - {leader_session(tree, c)})
    n_zk = sum(len(v) for v in zk2.values())
    left_disk += max(0, min(len(ha1) - sum(len(v) for v in zk1.values()), len(ha2) - n_zk))
    failed = len(FAILED_REMOVAL.findall(c.all_jm_logs()))
    return {"failed_removals": failed, "left_in_zookeeper": left_zk, "left_on_disk": left_disk,
            "lock_owner_sessions_not_the_leader": stale_locks, "never_completed_dirs_left": in_flight}


def leader_session(tree, c):
    """The session of the leading JobManager: the owner of the first latch node."""
    latch = c.zk_root + "/leader/latch"
    nodes = sorted(tree.children(latch), key=lambda n: n.rsplit("-", 1)[-1])
    for n in nodes:
        st = tree.zk.exists(latch + "/" + n)
        if st is not None:
            return st.ephemeralOwner
    return None


def cancel_and_check(c, tree, job, check_s):
    """S3: cancel a job after the failovers; its job graph node, its HA file
    and its checkpoint tree must go (within check_s of CANCELED)."""
    graphs_before = ha_files(c, "submittedJobGraph") + ha_files(c, "submittedExecutionPlan")
    had_node = bool(tree.job_graph_paths(c.zk_root, job))
    if not c.cancel(job):
        raise RuntimeError("cancel of %s was refused" % job)
    wait_until(lambda: c.job_state(job) == "CANCELED", 60, interval=0.1, what="job %s CANCELED" % job)
    t0 = time.time()

    def gone():
        graphs = ha_files(c, "submittedJobGraph") + ha_files(c, "submittedExecutionPlan")
        return (not tree.job_graph_paths(c.zk_root, job) and len(graphs) < len(graphs_before)
                and not tree.exists("%s/jobs/%s" % (c.zk_root, job)))
    try:
        wait_until(gone, check_s, interval=0.1, what="the job graph removed")
        removed, took = True, round(time.time() - t0, 2)
    except TimeoutError:
        removed, took = False, None
    graphs = ha_files(c, "submittedJobGraph") + ha_files(c, "submittedExecutionPlan")
    return {"job_graph_removed": removed, "removed_after_s": took, "had_job_graph_node": had_node,
            "job_graph_node_left": bool(tree.job_graph_paths(c.zk_root, job)),
            "job_graph_files_left": len(graphs) - (len(graphs_before) - 1),
            "checkpoint_tree_left": tree.exists("%s/jobs/%s" % (c.zk_root, job))}
