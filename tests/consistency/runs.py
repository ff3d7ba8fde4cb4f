"""One run of the consistency test: where its clients connect (the ensemble
direct, or a zkwarden sidecar in front of it), its client processes
(workload.py: the worker and the JobManager incarnations), the planter that
leaves stale locks the way a buggy ensemble does, and what is read from
ZooKeeper at the end (the snapshot the checkers compare with the history).

Every process is started here, remembered by its pid and stopped by that
pid; nothing is stopped by name."""

import datetime
import json
import logging
import os
import random
import re
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path.insert(0, str(REPO / "tests" / "integration"))

import zkharness  # noqa: E402
from checkpoints import forged_tag  # noqa: E402  (the tag zkwarden gives a lock, as an old incarnation's)
from kazoo.client import KazooClient  # noqa: E402
from kzrec import History, RecClient  # noqa: E402
from workload import EPOCH_S, KEYS, PARENTS  # noqa: E402

logging.getLogger("kazoo").setLevel(logging.ERROR)  # its reconnect warnings: the history has what matters

PY = "/usr/bin/python3"
WORKLOAD = str(HERE / "workload.py")

# How much each run's clients do (workload.py): sessions of each kind and
# their request rates (per second).
MAIN_MIX = {"reg": 4, "reg_rate": 45, "pipe": 1, "pipe_rate": 170, "seqeph": 1, "seqeph_rate": 35,
            "watch": 1, "watch_rate": 30}
MUTATION_MIX = {"reg": 2, "reg_rate": 40, "pipe": 1, "pipe_rate": 150, "seqeph": 1, "seqeph_rate": 35,
                "watch": 1, "watch_rate": 40}


def jm_uuid(seed, name, inc):
    """The lock name of a JobManager incarnation (Flink draws one per store)."""
    return str(uuid.UUID(int=random.Random("%s/%s/jm%d" % (seed, name, inc)).getrandbits(128), version=4))


class Run:
    """kind: "direct" or "zkwarden". name: the run's name in paths and the report."""

    def __init__(self, name, kind, workdir, ensemble, seed, session_timeout, epochs, mix, with_jm=True,
                 zkwarden_env=None, binary=None, keeper=None):
        self.name = name
        self.kind = kind
        self.dir = Path(workdir) / name
        (self.dir / "hist").mkdir(parents=True, exist_ok=True)
        self.ensemble = ensemble
        self.seed = seed
        self.session_timeout = session_timeout
        self.epochs = epochs
        self.mix = mix
        self.with_jm = with_jm
        self.root = "/consistency/%s" % name
        self.cluster = "/flink/cons-%s" % name
        self.job = "%032x" % random.Random("%s/%s/job" % (seed, name)).getrandbits(128)
        self.other_job = "%032x" % random.Random("%s/%s/job2" % (seed, name)).getrandbits(128)
        self.identity = "cons-%s-%s" % (name, seed)
        self.zkwarden = None
        self.zkwarden_env = dict(zkwarden_env or {})
        self.binary = binary
        self.keeper = keeper  # zkwarden-keeper running zkwarden (issue 37), or None
        self.procs = {}       # what -> Popen
        self.jm_inc = 0
        self.jm_uuids = {}    # incarnation -> uuid
        self.planter = None
        self.planter_rc = None
        self.planter_stop = threading.Event()   # no more planting
        self.planter_close = threading.Event()  # its session closes
        self.lock_snapshots = []  # ephemerals under the cluster, read before each JobManager kill
        self.problems = []
        self.metrics = {}
        self.takeovers = 0
        self.restarts_by = {}  # how zkwarden was replaced -> times

    # ------------------------------------------------------------ start

    @property
    def hosts(self):
        return self.zkwarden.hostport if self.zkwarden else self.ensemble.connect

    def start_zkwarden(self):
        env = {
            "ZKWARDEN_MODE": "sidecar",
            "ZKWARDEN_IDENTITY": self.identity,
            "ZKWARDEN_LOCK_ROOTS": "/flink",
            "ZKWARDEN_REGISTRY_ROOT": "/zkwarden-cons",
            "ZKWARDEN_REGISTRY_AUTH": "cons:%s" % uuid.uuid4().hex,
            "ZKWARDEN_AUDIT_FILE": str(self.dir / "audit.jsonl"),
            "ZKWARDEN_SWEEP_INTERVAL_S": "3",
            # Text lines at info on stderr: the checkers read when each session
            # became an incarnation from them (incarnations_recorded).
            "ZKWARDEN_LOG_FORMAT": "text",
            "ZKWARDEN_LOG_LEVEL": "info",
            "ZKWARDEN_LOG_FILE": "",
        }
        env.update(self.zkwarden_env)
        self.zkwarden = zkharness.Zkwarden(self.dir / "zkwarden", [s.hostport for s in self.ensemble.servers],
                                           binary=self.binary, extra_env=env, keeper=self.keeper)
        self.zkwarden.start()

    def prepare(self, admin):
        """The run's trees, made direct before any client starts."""
        for p in ("%s/reg" % self.root, "%s/eph" % self.root, "%s/leader/latch" % self.cluster,
                  "%s/jobs/%s/checkpoints" % (self.cluster, self.job),
                  "%s/jobs/%s/checkpoints" % (self.cluster, self.other_job), "%s/jobgraphs" % self.cluster):
            admin.ensure_path(p)
        t = admin.transaction()
        for e in range(self.epochs):
            for j in range(PARENTS):
                t.create("%s/seq/e%d-p%d" % (self.root, e, j))
        admin.ensure_path("%s/seq" % self.root)
        for r in t.commit():
            if isinstance(r, Exception):
                raise r

    def config(self, kind, **extra):
        c = {"name": self.name, "hosts": self.hosts, "root": self.root, "seed": self.seed, "t0": self.t0,
             "epochs": self.epochs, "session_timeout": self.session_timeout}
        c.update(extra)
        return c

    def _spawn(self, what, kind, cfg):
        path = self.dir / ("%s.json" % what)
        path.write_text(json.dumps(cfg))
        out = open(self.dir / ("%s.log" % what), "ab")
        p = subprocess.Popen([PY, WORKLOAD, kind, str(path)], stdin=subprocess.DEVNULL, stdout=out,
                             stderr=subprocess.STDOUT, cwd=str(HERE))
        out.close()
        self.procs[what] = p
        return p

    def files(self, what):
        return {k: str(self.dir / ("%s.%s" % (what, k))) for k in ("stop", "idle", "close")}

    def start(self, t0):
        self.t0 = t0
        f = self.files("worker")
        self._spawn("worker", "worker", self.config(
            "worker", history=str(self.dir / "hist" / "worker.jsonl"), mix=self.mix, stop_file=f["stop"],
            idle_file=f["idle"], close_file=f["close"]))
        if self.with_jm:
            self.start_jm()
            self.planter = threading.Thread(target=self._plant, name="planter-" + self.name, daemon=True)
            self.planter.start()

    def start_jm(self):
        self.jm_inc += 1
        inc = self.jm_inc
        self.jm_uuids[inc] = jm_uuid(self.seed, self.name, inc)
        f = self.files("jm%d" % inc)
        self._spawn("jm%d" % inc, "jm", self.config(
            "jm", history=str(self.dir / "hist" / ("jm%d.jsonl" % inc)), cluster=self.cluster, job=self.job,
            uuid=self.jm_uuids[inc], incarnation=inc, rate=40, retain=3, stop_file=f["stop"],
            idle_file=f["idle"], close_file=f["close"]))
        return inc

    # ------------------------------------------------------------ faults

    def client_pids(self, with_jm):
        out = []
        for what, p in self.procs.items():
            if p.poll() is None and (what == "worker" or (with_jm and what.startswith("jm"))):
                out.append(p.pid)
        return out

    def restart_jm(self, snapshot_client):
        """kill -9 of the JobManager (its connection drops without
        closeSession), then a new one: a new session, a new incarnation."""
        self.lock_snapshots.append(self.ephemerals(snapshot_client, self.cluster))
        p = self.procs.get("jm%d" % self.jm_inc)
        if p is not None and p.poll() is None:
            p.kill()
            p.wait(10)
        return self.start_jm()

    def _plant(self):
        """Leaves stale locks as an ensemble that fails to remove a dead
        session's ephemerals does (zkwarden's tag, an older incarnation of
        this run's identity), held by a live session zkwarden does not know
        (direct to the ensemble): job graphs whose lock has the running
        JobManager's name (met by its lock create: reclaim at create) and
        another one (met by its delete: reclaim at delete), and orphans in
        another job's checkpoints (the sweep). Direct, the same nodes are
        just there."""
        hist = History(str(self.dir / "hist" / "planter.jsonl"), "p" + self.name)
        rc = RecClient(hist, "planter", self.ensemble.connect, timeout=self.session_timeout)
        self.planter_rc = rc
        rng = random.Random("%s/%s/planter" % (self.seed, self.name))
        try:
            rc.start()
            k = 0
            while not self.planter_stop.wait(rng.uniform(0.8, 1.6)):
                k += 1
                data = forged_tag(self.identity, 0).decode()
                g = "%s/jobgraphs/g%d" % (self.cluster, k)
                ops = [("create", g, {"v": "graph"}),
                       ("create", "%s/%s" % (g, self.jm_uuids[self.jm_inc]), {"v": data, "eph": True})]
                if k % 2 == 0:
                    ops.append(("create", "%s/%s" % (g, uuid.UUID(int=rng.getrandbits(128), version=4)),
                                {"v": data, "eph": True}))
                _batch(rc, [_multi(rc, ops)])
                if k % 3 == 0:
                    st = "%s/jobs/%s/checkpoints/%019d" % (self.cluster, self.other_job, k)
                    lock = "%s/locks/%s" % (st, uuid.UUID(int=rng.getrandbits(128), version=4))
                    _batch(rc, [_multi(rc, [("create", st, {"v": "h"}), ("create", st + "/locks", {"v": ""}),
                                            ("create", lock, {"v": data, "eph": True})])])
        except Exception as e:  # a planter that stops is a failed run
            self.problems.append("planter: %r" % e)
        finally:
            self.planter_close.wait()
            rc.stop()
            hist.close()

    # ------------------------------------------------------------ end

    def stop_workload(self, timeout=90):
        self.planter_stop.set()
        live = [w for w, p in self.procs.items() if p.poll() is None]
        for w in live:
            Path(self.files(w)["stop"]).touch()
        for w in live:
            idle = self.files(w)["idle"]
            p = self.procs[w]
            zkharness.wait_until(lambda: os.path.exists(idle) or p.poll() is not None, timeout,
                                 what="%s %s to stop its workload" % (self.name, w))
        self.idle = {}
        for w in live:
            try:
                self.idle.update(json.loads(Path(self.files(w)["idle"]).read_text()))
            except (OSError, ValueError):
                self.problems.append("%s exited before writing its sessions (status %s)"
                                     % (w, self.procs[w].poll()))
        if self.planter_rc is not None:
            c = self.planter_rc.c
            self.idle["planter"] = {"sid": c._session_id, "connected": c.connected}
        for label, s in self.idle.items():
            if s.get("error"):
                self.problems.append("client %s stopped: %s" % (label, s["error"]))

    def close_sessions(self, timeout=60):
        self.planter_close.set()
        if self.planter is not None:
            self.planter.join(30)
        for w, p in self.procs.items():
            Path(self.files(w)["close"]).touch()
        for w, p in self.procs.items():
            try:
                p.wait(timeout)
            except subprocess.TimeoutExpired:
                self.problems.append("%s did not exit after closing its sessions" % w)
                p.kill()
                p.wait(10)

    def kill_all(self):
        self.planter_stop.set()
        self.planter_close.set()
        for p in self.procs.values():
            if p.poll() is None:
                p.kill()
                p.wait(10)

    def ephemerals(self, zk, top):
        """{path: {"owner", "data"}} of every ephemeral under top."""
        out = {}

        def walk(path):
            try:
                kids = zk.get_children(path)
            except Exception:  # gone meanwhile
                return
            for k in kids:
                walk(path.rstrip("/") + "/" + k)
            try:
                data, st = zk.get(path)
            except Exception:
                return
            if st.ephemeralOwner:
                out[path] = {"owner": st.ephemeralOwner, "data": (data or b"").decode("latin-1")}
        walk(top)
        return out

    def snapshot(self, zk):
        """What ZooKeeper holds at the end (read direct): every node of the
        run's trees that the checkers look at."""
        snap = {"ephemerals": {}, "nodes": [], "seq": {}}
        snap["ephemerals"].update(self.ephemerals(zk, self.root + "/eph"))
        snap["ephemerals"].update(self.ephemerals(zk, self.cluster))
        for k in zk.get_children(self.root + "/reg"):
            snap["nodes"].append("%s/reg/%s" % (self.root, k))
        for p in zk.get_children(self.root + "/seq"):
            snap["seq"]["%s/seq/%s" % (self.root, p)] = zk.get_children("%s/seq/%s" % (self.root, p))

        def walk(path):
            try:
                kids = zk.get_children(path)
            except Exception:
                return
            snap["nodes"].append(path)
            for k in kids:
                walk(path.rstrip("/") + "/" + k)
        walk(self.cluster)
        return snap

    def leftover_ephemerals(self, zk):
        out = {}
        out.update(self.ephemerals(zk, self.root + "/eph"))
        out.update(self.ephemerals(zk, self.cluster))
        return out

    def zkwarden_metrics(self):
        if not self.zkwarden:
            return {}
        want = ("zkwarden_session_moves_total", "zkwarden_reclaims_at_create_total",
                "zkwarden_reclaims_at_delete_total", "zkwarden_stale_locks_swept_total", "zkwarden_fences_total",
                "zkwarden_locks_tagged_total")
        try:
            m = self.zkwarden.metrics()
        except Exception as e:  # reported: the run cannot say what zkwarden did
            self.problems.append("zkwarden /metrics: %r" % e)
            return {}
        out = {}
        for k, v in m.items():
            if k.split("{", 1)[0] in want:
                out[k] = v
        return out

    def reclaims_view(self):
        if not self.zkwarden:
            return None
        status, body = self.zkwarden.admin_get("/v1/reclaims")
        return json.loads(body) if status == 200 else None

    def stop_zkwarden(self):
        if self.zkwarden:
            for msg in self.zkwarden.stop():
                self.problems.append("zkwarden: " + msg)

    def incarnations_recorded(self):
        """When zkwarden recorded each session as an incarnation ("incarnation N
        begins" in its log: wall-clock ns), by session ("0x..."); {} direct."""
        out = {}
        if not self.zkwarden or not Path(self.zkwarden.stderr_path).exists():
            return out
        begins = re.compile(r"^(\S+)Z info conn=\d+ session=(0x[0-9a-f]+) .*: incarnation \d+ begins$")
        with open(self.zkwarden.stderr_path, errors="replace") as fh:
            for line in fh:
                m = begins.match(line.rstrip("\n"))
                if m and m.group(2) not in out:
                    t = datetime.datetime.strptime(m.group(1), "%Y-%m-%dT%H:%M:%S.%f")
                    out[m.group(2)] = int(t.replace(tzinfo=datetime.timezone.utc).timestamp() * 1e6) * 1000
        return out

    def audit(self):
        path = self.dir / "audit.jsonl"
        out = []
        if path.exists():
            for line in path.read_text().splitlines():
                if line.strip():
                    out.append(json.loads(line))
        return out

    def histories(self):
        out = []
        for f in sorted((self.dir / "hist").glob("*.jsonl")):
            for line in f.read_text().splitlines():
                try:
                    out.append(json.loads(line))
                except ValueError:  # a line cut by kill -9: its operation is unknown
                    pass
        return out


def _multi(rc, ops):
    t = rc.c.transaction()
    for kind, path, args in ops:
        t.create(path, args["v"].encode(), ephemeral=args.get("eph", False))
    op = rc.begin("multi", ops[0][1], ops=[list(o) for o in ops])
    return op, rc.call(op, t.commit_async)


def _batch(rc, reqs):
    from workload import _multi_res
    for op, a in reqs:
        try:
            r = a.get(timeout=30)
        except Exception as e:  # part of the history
            rc.finish(op, exc=e)
            continue
        rc.finish(op, res=_multi_res(r))


def settled_client(ensemble, timeout=60.0):
    """A client of the leader, once every server has applied the same last
    zxid: what the end snapshot reads (a server that just rejoined can serve
    reads before it has caught up)."""
    def zxids():
        out = []
        for s in ensemble.servers:
            try:
                text = zkharness.four_letter(s.port, "srvr", timeout=2.0).decode("utf-8", "replace")
            except OSError:
                return None
            z = [line.split(":", 1)[1].strip() for line in text.splitlines() if line.startswith("Zxid:")]
            out.append(z[0] if z else None)
        return out if len(set(out)) == 1 and out[0] else None
    last = [None]

    def settled():  # the same zxid everywhere, twice in a row
        z = zxids() if ensemble.has_quorum() else None
        same, last[0] = z is not None and z == last[0], z
        return same
    zkharness.wait_until(settled, timeout, interval=0.5, what="every server at the same zxid")
    c = KazooClient(hosts=ensemble.servers[ensemble.leader()].hostport, timeout=10.0)
    c.start(timeout=60)
    c.sync("/")
    return c


def admin_client(ensemble, timeout=10.0):
    c = KazooClient(hosts=ensemble.connect, timeout=timeout)
    c.start(timeout=60)
    return c


__all__ = ["Run", "admin_client", "EPOCH_S", "KEYS", "MAIN_MIX", "MUTATION_MIX"]
