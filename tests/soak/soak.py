"""Soak: zkwarden under a Flink-like mix with periodic JobManager restarts, for
minutes (30 by default), checking that nothing grows and nothing is lost.

What runs (all on 127.0.0.1): a 3-server ZooKeeper ensemble; two Flink-like
JobManagers (tests/flinklike, current layout, a checkpoint every 100 ms,
num-retained 10), jm-0 and jm-1, each through its own zkwarden sidecar; a
relay-mode zkwarden with a few kazoo clients doing reads, writes, sequential
creates, deletes and watches. Every 30-60 s the leading JM is killed with -9 and
restarted at once; every few restarts, when jm-1 leads, a pod restart instead
(jm-1 killed -9, its sidecar stopped with SIGTERM, both started again, as the
drills do). jm-0's sidecar is never restarted: it serves the whole run, through
every restart of its JM, so its figures form one long series.

Every ~10 s (5 s in runs under 5 minutes) it samples each zkwarden process
(RSS and open descriptors from /proc, its /metrics), the registry (nodes under
the registry root, read straight from the ensemble) and the Flink namespace
(checkpoint state nodes, lock nodes, all nodes). At the end it prints a table
and fails (exit 1) unless: RSS and descriptors are flat (last third of each
process's samples against its first third, after a warm-up), the registry holds
no more nodes than its identities need, no checkpoint leaked and no lock is
stale (measured as the drills measure them, at every restart and at the end),
the counters are consistent (connections accepted - closed = active at every
scrape, counters never go down, fences <= restarts, no fence failure, no
protocol or registry error, no identity conflict), every restart led to a
leader within the drills' bound, the JMs saw no failed request and no reordered
reply, the kazoo clients lost no acknowledged write and never lost their
connection, and every sidecar exited 0 on SIGTERM.

Why: zkwarden is on the HA path of every JobManager for months; a slow leak of
memory, descriptors, registry nodes or locks only shows over time.

Run with tests/soak/run.sh (needs /usr/bin/python3 with kazoo, Java 17, Debian's
ZooKeeper and Curator jars). The drills' helpers start and stop the processes
(tests/drills/procs.py, by pid only).
"""

import argparse
import csv
import json
import logging
import os
import random
import re
import shutil
import signal
import statistics
import sys
import tempfile
import threading
import time
import types
import urllib.request
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path.insert(0, str(REPO / "tests" / "drills"))

import drill  # noqa: E402  (Run: JMs, sidecars, leader waits, leak and stale-lock measures)
import procs  # noqa: E402  (Ensemble, Sidecar, JM, pid-only stops)
from procs import HOST  # noqa: E402

try:
    from kazoo.client import KazooClient, KazooState
    from kazoo.exceptions import NoNodeError
except ImportError:  # pragma: no cover
    sys.exit("soak: kazoo is missing: run under /usr/bin/python3 with python3-kazoo installed")

log = logging.getLogger("soak")

LAYOUT = "current"
IDENTITIES = ("jm-0", "jm-1")
# Pod restarts replace this JM's sidecar; the other sidecar lives the whole run.
POD_RESTARTED = "jm-1"
# Flatness tolerances (stated in the table): the median of the last third of a
# process's samples may exceed the median of its first third by at most this.
RSS_TOL_FRACTION = 0.05
RSS_TOL_KIB = 128
FD_TOL = 2
# A series (one zkwarden process) needs this many samples after its warm-up to
# be judged; a shorter one (a sidecar replaced by a pod restart soon after) is
# listed but not judged.
MIN_JUDGED_SAMPLES = 6
# Checkpoint state nodes seen by an unpaused sample: the retained ones plus
# those being added or subsumed right now.
STATE_NODES_BOUND = 2 * drill.NUM_RETAINED
# Registry nodes: root, identities, and per identity its record and owner.
def registry_bound(n_identities):
    return 2 + 2 * n_identities


def now_ms():
    return int(time.time() * 1000)


# ---------------------------------------------------------------- /proc and /metrics

def proc_status_kib(pid, field):
    """A /proc/<pid>/status size in KiB (VmRSS, VmData), or None."""
    try:
        with open("/proc/%d/status" % pid) as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def private_rss_kib(pid):
    """VmRSS less RssShmem: the process's own memory. The shared part is
    the journal (ZKWARDEN_DURABLE_SESSIONS), a file of fixed size whose
    pages count in VmRSS as the sessions' rings first reach them: bounded
    by construction, reported apart (shmem_kib), not a leak."""
    rss, shm = proc_status_kib(pid, "VmRSS"), proc_status_kib(pid, "RssShmem")
    return None if rss is None else rss - (shm or 0)


def proc_fds(pid):
    try:
        return len(os.listdir("/proc/%d/fd" % pid))
    except OSError:
        return None


METRIC_RE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)$')


def parse_metrics(text):
    """{name: total over every label set} of the samples in a Prometheus text,
    plus {name{labels}: value} for the labelled ones; histograms skipped."""
    out = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = METRIC_RE.match(line)
        if not m:
            continue
        name, labels, value = m.group(1), m.group(2), m.group(3)
        if name.endswith("_bucket") or name.endswith("_sum") or name.endswith("_count"):
            continue
        try:
            v = float(value)
        except ValueError:
            continue
        out[name] = out.get(name, 0.0) + v
        if labels:
            out[name + labels] = v
    return out


def admin_get(port, path, timeout=3.0):
    with urllib.request.urlopen("http://%s:%d%s" % (HOST, port, path), timeout=timeout) as r:
        return r.read().decode("utf-8", "replace")


# Counters we keep per sample (names without the zkwarden_ prefix).
KEPT = ("connections_accepted_total", "connections_closed_total", "connections_active",
        "sessions_established_total", "sessions_rejected_total", "sessions_active", "outstanding_requests",
        "decode_errors_total", "fences_total", "fence_failures_total", "reclaims_at_create_total",
        "reclaims_at_delete_total", "stale_locks_swept_total", "orphans_fenced_total",
        "identity_conflicts_total", "registry_errors_total", "watch_events_total",
        "upstream_connect_failures_total", "identity_incarnation")
MONOTONIC = [k for k in KEPT if k.endswith("_total")]


# ---------------------------------------------------------------- relay clients

class LoadClient(threading.Thread):
    """One kazoo session through the relay zkwarden: a counter it sets and reads
    back, sequential items it creates and trims, child and data watches. Every
    write is recorded once acknowledged, so the end can check it is there."""

    def __init__(self, idx, connect, root, stop, rate_hz, n_clients):
        super().__init__(name="load-%d" % idx, daemon=True)
        self.idx = idx
        self.root = root
        self.base = "%s/c%d" % (root, idx)
        self.stop_ev = stop
        self.period = 1.0 / rate_hz
        self.other = "%s/c%d/value" % (root, (idx + 1) % n_clients)
        self.zk = KazooClient(hosts=connect, timeout=15.0)
        self.states = []
        self.closing = False
        self.zk.add_listener(self._on_state)
        self.ops = 0
        self.errors = []
        self.acked_value = None       # last value whose setData was acknowledged
        self.unacked_value = None     # a setData whose outcome is unknown (error)
        self.items = []               # items created (acknowledged) and not deleted
        self.deleted = 0
        self.readback_mismatch = 0
        self.watch_events = 0

    def _on_state(self, state):
        if state != KazooState.CONNECTED and not self.closing:
            self.states.append((time.time(), str(state)))

    def _on_data(self, event):
        self.watch_events += 1

    def _on_children(self, event):
        self.watch_events += 1

    def setup(self):
        self.zk.start(timeout=30)
        self.zk.ensure_path(self.base + "/items")
        if not self.zk.exists(self.base + "/value"):
            self.zk.create(self.base + "/value", b"0")
        self.acked_value = 0

    def run(self):
        n = 0
        while not self.stop_ev.is_set():
            t = time.monotonic()
            n += 1
            try:
                self.unacked_value = n
                self.zk.set(self.base + "/value", str(n).encode())
                self.acked_value = n
                self.unacked_value = None
                data, st = self.zk.get(self.base + "/value")
                if data != str(n).encode():
                    self.readback_mismatch += 1
                p = self.zk.create(self.base + "/items/item-", b"x" * (n % 512), sequence=True)
                self.items.append(p)
                self.zk.get_children(self.base + "/items", watch=self._on_children)
                self.zk.exists(self.other, watch=self._on_data)
                if len(self.items) > 20:
                    old = self.items.pop(0)
                    self.zk.delete(old)
                    self.deleted += 1
                self.ops += 7
            except Exception as e:  # recorded, checked at the end
                self.errors.append("%s: %s" % (type(e).__name__, e))
                if len(self.errors) > 50:
                    break
            left = self.period - (time.monotonic() - t)
            if left > 0:
                self.stop_ev.wait(left)

    def verify(self, insp):
        """Problems with what the ensemble holds now (read directly)."""
        out = []
        data, _ = insp.zk.get(self.base + "/value")
        want = {str(self.acked_value).encode()}
        if self.unacked_value is not None:
            want.add(str(self.unacked_value).encode())
        if data not in want:
            out.append("c%d: value %r, last acknowledged %r" % (self.idx, data, self.acked_value))
        have = set(insp.children(self.base + "/items"))
        missing = [p for p in self.items if p.rsplit("/", 1)[1] not in have]
        if missing:
            out.append("c%d: %d acknowledged items missing (%s)" % (self.idx, len(missing), missing[:3]))
        extra = len(have) - len(self.items)
        if extra > 1:  # one create may be in doubt after an error
            out.append("c%d: %d items more than created and not deleted" % (self.idx, extra))
        return out

    def close(self):
        self.closing = True  # the LOST of our own stop is not a fault
        try:
            self.zk.stop()
            self.zk.close()
        except Exception:
            pass


# ---------------------------------------------------------------- the soak

class Soak:
    def __init__(self, args):
        self.args = args
        self.workdir = Path(args.workdir) if args.workdir else Path(tempfile.mkdtemp(prefix="zkwarden-soak."))
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.samples = []
        self.sample_lock = threading.Lock()
        self.restarts = []
        self.scans = []
        self.failures = []
        self.notes = []
        self.relay = None
        self.clients = []
        self.stop_load = threading.Event()
        self.stop_sampler = threading.Event()
        self.t_measure = None
        # series: one per zkwarden process, "<identity>#<start>"
        self.series_started = {}
        self.next_pod = 2

    # --- set-up

    def setup(self):
        t0 = time.time()
        classpath = procs.build_flinklike()
        ens = procs.Ensemble(self.workdir / "ensemble").start()
        log.info("ensemble up (%s), JM stand-in built; %.1f s", ens.connect, time.time() - t0)
        insp = drill.Inspector(ens.connect)
        dargs = types.SimpleNamespace(zkwarden_log_level=self.args.zkwarden_log_level,
                                      orphan_grace_ms=10000, ensemble_tracker=True, quick=False)
        self.d = types.SimpleNamespace(args=dargs, workdir=self.workdir, ens=ens, insp=insp, classpath=classpath,
                                       tls_env={})  # the soak runs plaintext
        self.run = drill.Run(self.d, "soak", LAYOUT, "zkwarden")
        if self.args.clients > 0:
            self.relay = procs.Sidecar(self.workdir / "relay", "relay", ens.connect, "/zkwarden-soak-relay",
                                       log_level=self.args.zkwarden_log_level,
                                       extra_env={"ZKWARDEN_MODE": "relay"})
            self.relay.start()
            self.series_started[self.series_of(self.relay)] = time.time()
            for i in range(self.args.clients):
                c = LoadClient(i, self.relay.hostport, "/soak-load", self.stop_load, self.args.client_rate,
                               self.args.clients)
                c.setup()
                self.clients.append(c)
        j0 = self.run.jm("jm-0", submit=True)
        self.series_started[self.series_of(self.run.sidecars["jm-0"])] = time.time()
        self.run.leader(0, min_added=0)  # jm-0 runs the job: jm-1 joins as the standby
        j1 = self.run.jm("jm-1")
        self.series_started[self.series_of(self.run.sidecars["jm-1"])] = time.time()
        j1.wait_stats(lambda s: s.get("connected"), 60, "connected")
        self.run.leader(0)
        for c in self.clients:
            c.start()
        log.info("set-up done in %.1f s: jm-0 leads, jm-1 stands by, %d kazoo clients through the relay",
                 time.time() - t0, len(self.clients))
        return j0

    def zkwardens(self):
        out = [sc for sc in self.run.sidecars.values()]
        if self.relay is not None:
            out.append(self.relay)
        return out

    @staticmethod
    def series_of(sc):
        return "%s#%d" % (sc.identity, sc.starts)

    # --- sampling

    def count_nodes(self, path):
        """Nodes in the subtree at path, path included (0 if absent)."""
        zk = self.d.insp.zk
        try:
            kids = zk.get_children(path)
        except NoNodeError:
            return 0
        return 1 + sum(self.count_nodes(path.rstrip("/") + "/" + k) for k in kids)

    def flink_counts(self):
        ns = self.run.ns
        cp_root = ns + "/jobs/%s/checkpoints" % drill.JOB
        insp = self.d.insp
        state = insp.children(cp_root)
        locks = 0
        for c in state:
            locks += len(insp.children(cp_root + "/" + c + "/locks"))
        jg = ns + "/execution-plans/" + drill.JOB
        locks += len(insp.children(jg + "/locks"))
        return {"state_nodes": len(state), "lock_nodes": locks, "flink_nodes": self.count_nodes(ns)}

    def sample_one(self, sc, t, kind="periodic"):
        proc = sc.proc
        if proc is None or proc.poll() is not None:
            return None
        pid = proc.pid
        row = {"t": round(t, 3), "elapsed_s": round(t - self.t_measure, 1) if self.t_measure else None,
               "series": self.series_of(sc), "identity": sc.identity, "pid": pid, "kind": kind,
               "rss_kib": private_rss_kib(pid), "shmem_kib": proc_status_kib(pid, "RssShmem"),
               "vmdata_kib": proc_status_kib(pid, "VmData"), "fds": proc_fds(pid)}
        try:
            m = parse_metrics(admin_get(sc.admin_port, "/metrics"))
        except Exception as e:
            row["metrics_error"] = str(e)
            return row
        for k in KEPT:
            row[k] = m.get("zkwarden_" + k)
        row["closed_protocol_error"] = m.get('zkwarden_connections_closed_total{reason="protocol_error"}', 0.0)
        return row

    def sample(self, kind="periodic"):
        t = time.time()
        rows = []
        for sc in self.zkwardens():
            try:
                r = self.sample_one(sc, t, kind)
            except Exception as e:
                log.warning("sample of %s failed: %s", sc.identity, e)
                r = None
            if r is not None:
                rows.append(r)
        try:
            reg = self.count_nodes(self.run.sidecars["jm-0"].registry_root)
            fl = self.flink_counts()
        except Exception as e:
            log.warning("ZooKeeper counts failed: %s", e)
            reg, fl = None, {}
        for r in rows:
            r["registry_nodes"] = reg
            r.update(fl)
        with self.sample_lock:
            self.samples.extend(rows)
        return rows

    def sampler(self):
        while not self.stop_sampler.wait(self.args.sample_s):
            self.sample()

    # --- restarts

    def restart_leader(self, k):
        """Restart k (1-based): the leading JM killed -9 and restarted at once; a
        pod restart (its sidecar SIGTERMed and restarted too) when jm-1 leads and
        at least 3 restarts have passed since the last one (the first at k=2)."""
        r = self.run
        lj, ls = r.leader(0, min_added=drill.NUM_RETAINED + 1)
        pod = lj.name == POD_RESTARTED and k >= self.next_pod
        if pod:
            self.next_pod = k + 3
        sc = r.sidecars[lj.name]
        if pod:
            # the series' last figures, just before it ends
            last = self.sample_one(sc, time.time(), "final")
            if last is not None:
                with self.sample_lock:
                    self.samples.append(last)
        t_kill = now_ms()
        lj.kill9()
        if pod:
            sc.stop()
            sc.start()
            self.series_started[self.series_of(sc)] = time.time()
        lj.start()
        t_start = now_ms()
        nl, ns = r.leader(t_kill)
        rs = lj.wait_stats(lambda s: s.get("connected_epoch_ms"), 60, "connected")
        to_leader = ns["leader_epoch_ms"] - rs["connect_start_epoch_ms"]
        s, view = r.paused_scan(nl)
        m = r.measure(view, s.get("retained"))
        rec = {"restart": k, "kind": "pod" if pod else "jm", "killed": lj.name, "new_leader": nl.name,
               "to_leader_ms": to_leader, "kill_to_leader_ms": ns["leader_epoch_ms"] - t_kill,
               "restart_to_leader_ms": ns["leader_epoch_ms"] - t_start, "elapsed_s": round(time.time() -
                                                                                           self.t_measure, 1)}
        rec.update(m)
        self.restarts.append(rec)
        log.info("restart %d (%s): killed %s, %s leads %d ms after the restarted JM began to connect; "
                 "leaked %d, stale %d, state nodes %d", k, rec["kind"], lj.name, nl.name, to_leader,
                 m["leaked"], m["stale"], m["state_nodes"])

    # --- the run

    def soak(self):
        self.setup()
        self.t_measure = time.time()
        end = self.t_measure + self.args.minutes * 60.0
        self.sample()
        th = threading.Thread(target=self.sampler, name="sampler", daemon=True)
        th.start()
        rng = random.Random(self.args.seed)
        lo, hi = self.args.restart_every
        k = 0
        next_restart = time.time() + rng.uniform(lo, hi)
        while time.time() < end:
            for c in self.clients:
                if not c.is_alive() and not self.stop_load.is_set():
                    raise RuntimeError("kazoo client %d stopped: %s" % (c.idx, c.errors[-3:]))
            if time.time() >= next_restart and end - time.time() > lo / 2:
                k += 1
                self.restart_leader(k)
                next_restart = time.time() + rng.uniform(lo, hi)
            time.sleep(min(1.0, max(0.0, end - time.time())))
        # the end: load stopped, everything settled, final figures
        self.stop_load.set()
        for c in self.clients:
            c.join(30)
        self.stop_sampler.set()
        th.join(30)
        lj, ls = self.run.leader(0, min_added=1)
        s, view = self.run.paused_scan(lj)
        self.final_scan = self.run.measure(view, s.get("retained"))
        self.final_rows = self.sample("final")
        self.final_sessions = {}
        for sc in self.zkwardens():
            try:
                self.final_sessions[self.series_of(sc)] = json.loads(admin_get(sc.admin_port, "/v1/sessions"))["count"]
            except Exception as e:
                self.final_sessions[self.series_of(sc)] = "error: %s" % e
        self.client_problems = []
        for c in self.clients:
            try:
                self.client_problems += c.verify(self.d.insp)
            except Exception as e:
                self.client_problems.append("c%d: verify failed: %s" % (c.idx, e))

    def teardown(self):
        """Stops the JMs (SIGTERM, all at once), then the sidecars and the relay."""
        self.stop_load.set()
        self.stop_sampler.set()
        for c in self.clients:
            c.close()
        try:
            self.jm_totals = self.run.jm_totals()
        except Exception as e:
            self.jm_totals = None
            self.failures.append("JM totals: %s" % e)
        self.run.stop_all()
        if self.relay is not None:
            self.relay.stop()
            self.run.retired_sidecars.append(self.relay)
        self.sidecar_problems = self.run.sidecar_problems()
        if self.d.insp:
            self.d.insp.close()
        procs.stop_all_started()


# ---------------------------------------------------------------- checks

def is_sanitizer_build(binary):
    """True for a zkwarden built with AddressSanitizer: its RSS grows with every
    allocation (freed memory waits in ASan's quarantine, up to 256 MiB), so it
    says nothing about leaks and is reported, not judged."""
    try:
        with open(binary, "rb") as f:
            return b"__asan_init" in f.read()
    except OSError:
        return False


def judge_series(rows, warmup_s, judge_rss=True):
    """Flatness of one zkwarden process: (result dict)."""
    t0 = rows[0]["t"]
    post = [r for r in rows if r["t"] - t0 >= warmup_s and r.get("rss_kib") is not None]
    res = {"series": rows[0]["series"], "samples": len(rows), "judged": len(post),
           "rss_start": rows[0]["rss_kib"], "rss_end": rows[-1]["rss_kib"],
           "rss_max": max(r["rss_kib"] or 0 for r in rows),
           "shmem_end": rows[-1].get("shmem_kib"), "shmem_max": max(r.get("shmem_kib") or 0 for r in rows),
           "vmdata_start": rows[0].get("vmdata_kib"), "vmdata_end": rows[-1].get("vmdata_kib"),
           "fds_start": rows[0]["fds"], "fds_end": rows[-1]["fds"], "fds_max": max(r["fds"] or 0 for r in rows)}
    if len(post) < MIN_JUDGED_SAMPLES:
        res["verdict"] = "not judged (%d samples after warm-up)" % len(post)
        res["ok"] = True
        return res
    third = len(post) // 3
    first, last = post[:third], post[-third:]
    r1 = statistics.median(r["rss_kib"] for r in first)
    r3 = statistics.median(r["rss_kib"] for r in last)
    f1 = statistics.median(r["fds"] for r in first)
    f3 = statistics.median(r["fds"] for r in last)
    rss_limit = r1 * (1 + RSS_TOL_FRACTION) + RSS_TOL_KIB
    res["rss_slope_kib_h"] = round(slope([(r["t"], r["rss_kib"]) for r in post]) * 3600, 1)
    res.update({"rss_first": r1, "rss_last": r3, "rss_limit": round(rss_limit), "fds_first": f1, "fds_last": f3,
                "fds_limit": f1 + FD_TOL})
    why = []
    if r3 > rss_limit and judge_rss:
        why.append("RSS grew %s -> %s KiB (limit %d)" % (r1, r3, rss_limit))
    if f3 > f1 + FD_TOL:
        why.append("descriptors grew %s -> %s (limit %s)" % (f1, f3, f1 + FD_TOL))
    res["ok"] = not why
    res["verdict"] = ("flat" if judge_rss else "fds flat (RSS not judged: ASan)") if not why else "; ".join(why)
    return res


def slope(points):
    """Least-squares slope of (x, y) points (y per unit of x); 0 for < 2 points."""
    if len(points) < 2:
        return 0.0
    mx = statistics.fmean(x for x, _ in points)
    my = statistics.fmean(y for _, y in points)
    den = sum((x - mx) ** 2 for x, _ in points)
    return sum((x - mx) * (y - my) for x, y in points) / den if den else 0.0


def self_test():
    """The flatness check must be able to fail: synthetic series, one flat,
    one leaking a descriptor per minute, one growing 20% in RSS."""
    def rows(rss, fds):
        return [{"t": 10.0 * i, "series": "x", "rss_kib": rss(i), "fds": fds(i)} for i in range(60)]
    flat = judge_series(rows(lambda i: 2500 + (i % 3) * 8, lambda i: 17 + (i % 7 == 0)), 30)
    fdleak = judge_series(rows(lambda i: 2500, lambda i: 17 + i // 6), 30)
    grow = judge_series(rows(lambda i: 2500 + i * 10, lambda i: 17), 30)
    if not flat["ok"] or fdleak["ok"] or grow["ok"]:
        raise AssertionError("flatness self-test: flat %s, fd leak %s, RSS growth %s"
                             % (flat["verdict"], fdleak["verdict"], grow["verdict"]))


def checks(s):
    """[(name, ok, detail)] of every check of the run."""
    out = []
    by_series = {}
    for r in s.samples:
        by_series.setdefault(r["series"], []).append(r)
    warmup = s.args.warmup_s
    judge_rss = not s.asan
    flat = [judge_series(sorted(rows, key=lambda r: r["t"]), warmup, judge_rss) for rows in by_series.values()]
    s.flat = flat
    judged = [f for f in flat if not f["verdict"].startswith("not judged")]
    # the processes that live the whole run must be judged
    required = {"%s#1" % i for i in IDENTITIES if i != POD_RESTARTED} | ({"relay#1"} if s.clients else set())
    unjudged = required - {f["series"] for f in judged}
    out.append(("RSS and descriptors flat" if judge_rss else "descriptors flat (ASan build: RSS not judged)",
                all(f["ok"] for f in flat) and not unjudged,
                "%d of %d series judged%s; %s" % (
                    len(judged), len(flat), " (%s NOT judged)" % sorted(unjudged) if unjudged else "",
                    "; ".join("%s: %s" % (f["series"], f["verdict"]) for f in flat))))

    reg = [r["registry_nodes"] for r in s.samples if r.get("registry_nodes") is not None]
    bound = registry_bound(len(IDENTITIES))
    fin = s.final_rows[0]["registry_nodes"] if s.final_rows else None
    out.append(("registry nodes bounded", bool(reg) and max(reg) <= bound and fin is not None and fin <= bound,
                "max %s, at the end %s, bound %d (2 + 2 per identity)" % (max(reg) if reg else None, fin, bound)))

    stn = [r["state_nodes"] for r in s.samples if r.get("state_nodes") is not None]
    leaks = [x["leaked"] for x in s.restarts] + [s.final_scan["leaked"]]
    stale = [x["stale"] for x in s.restarts] + [s.final_scan["stale"]]
    out.append(("no leaked checkpoint, no stale lock",
                max(leaks) == 0 and max(stale) == 0 and bool(stn) and max(stn) <= STATE_NODES_BOUND,
                "leaked max %d, stale max %d (at %d restarts and the end); state nodes per sample max %s "
                "(bound %d), at the end %d" % (max(leaks), max(stale), len(s.restarts), max(stn) if stn else None,
                                               STATE_NODES_BOUND, s.final_scan["state_nodes"])))

    # counters
    bad = []
    for series, rows in by_series.items():
        rows = sorted(rows, key=lambda r: r["t"])
        for r in rows:
            if r.get("connections_accepted_total") is None:
                continue
            if r["connections_accepted_total"] - r["connections_closed_total"] != r["connections_active"]:
                bad.append("%s at %s s: accepted %d - closed %d != active %d" % (
                    series, r["elapsed_s"], r["connections_accepted_total"], r["connections_closed_total"],
                    r["connections_active"]))
            if r["sessions_active"] > r["connections_active"]:
                bad.append("%s: sessions_active > connections_active" % series)
        for a, b in zip(rows, rows[1:]):
            for k in MONOTONIC:
                if a.get(k) is not None and b.get(k) is not None and b[k] < a[k]:
                    bad.append("%s: %s went down %s -> %s" % (series, k, a[k], b[k]))
    out.append(("connections accepted - closed = active; counters monotonic", not bad, "; ".join(bad[:5]) or
                "at every scrape of every series (%d scrapes)" % len(s.samples)))

    last = {}
    for r in s.samples:
        if r.get("connections_accepted_total") is not None:
            if r["series"] not in last or r["t"] >= last[r["series"]]["t"]:
                last[r["series"]] = r

    def total(k, sidecars_only=True):
        return int(sum((r.get(k) or 0) for ser, r in last.items() if not (sidecars_only and ser.startswith("relay"))))

    short = []
    for name, j in s.run.jms.items():
        est = sum((r.get("sessions_established_total") or 0) for ser, r in last.items()
                  if ser.split("#")[0] == name)
        if est < j.n:
            short.append("%s: %d sessions established for %d JM processes" % (name, est, j.n))
    out.append(("every JM process established its session through its sidecar", not short,
                "; ".join(short) or ", ".join("%s: %d processes, %d sessions established" % (
                    name, j.n, sum((r.get("sessions_established_total") or 0) for ser, r in last.items()
                                   if ser.split("#")[0] == name)) for name, j in sorted(s.run.jms.items()))))
    fences = total("fences_total")
    orphans = total("orphans_fenced_total")
    n_restarts = len(s.restarts)
    out.append(("fences <= restarts, no fence failure",
                fences <= n_restarts and total("fence_failures_total") == 0,
                "fences %d, orphans fenced %d, restarts %d, fence failures %d" %
                (fences, orphans, n_restarts, total("fence_failures_total"))))
    errs = {k: total(k, False) for k in ("decode_errors_total", "closed_protocol_error", "registry_errors_total",
                                         "identity_conflicts_total")}
    out.append(("no protocol, registry or identity error", not any(errs.values()),
                ", ".join("%s %d" % kv for kv in errs.items())))
    mism = []
    for ser, n in s.final_sessions.items():
        r = last.get(ser)
        if r is None or n != r.get("connections_active"):
            mism.append("%s: /v1/sessions %s, connections_active %s" % (ser, n, r and r.get("connections_active")))
    out.append(("/v1/sessions agrees with the metrics at the end", not mism, "; ".join(mism) or
                ", ".join("%s %s" % kv for kv in sorted(s.final_sessions.items()))))

    to = [x["to_leader_ms"] for x in s.restarts]
    slow = [x for x in s.restarts if x["to_leader_ms"] > drill.LEADER_TARGET_MS]
    out.append(("every restart led to a leader within %d ms" % drill.LEADER_TARGET_MS,
                bool(s.restarts) and not slow,
                "%d restarts (%d pod); to leader median %s, max %s ms%s" % (
                    n_restarts, sum(1 for x in s.restarts if x["kind"] == "pod"),
                    int(statistics.median(to)) if to else None, max(to) if to else None,
                    "; slow: %s" % [(x["restart"], x["to_leader_ms"]) for x in slow] if slow else "")))

    if s.jm_totals is not None:
        errors, reordered, unhandled, bypassed = s.jm_totals
        out.append(("JMs: no failed request, no reordered reply, never left the sidecar",
                    errors == 0 and reordered == 0 and not bypassed,
                    "failed requests %d, reordered %d, unhandled %d, bypassed %s; NOTEMPTY on subsume %d"
                    % (errors, reordered, unhandled, bypassed or "none", s.run.notempty_total)))
    if s.clients:
        ops = sum(c.ops for c in s.clients)
        cerr = [e for c in s.clients for e in c.errors]
        states = [st for c in s.clients for st in c.states]
        mism = sum(c.readback_mismatch for c in s.clients)
        ok = not cerr and not states and not mism and not s.client_problems
        out.append(("kazoo clients through the relay: nothing lost", ok,
                    "%d ops, %d watch events, errors %d%s, connection state changes %d, read-back mismatches %d, "
                    "end check: %s" % (ops, sum(c.watch_events for c in s.clients), len(cerr),
                                       " (%s)" % cerr[:2] if cerr else "", len(states), mism,
                                       "; ".join(s.client_problems) or "every acknowledged write present")))
    out.append(("every zkwarden exited 0 on SIGTERM, no sanitizer report", not s.sidecar_problems,
                "; ".join(s.sidecar_problems) or "ok"))
    return out


def write_samples(s):
    with open(s.workdir / "samples.json", "w") as f:
        json.dump({"samples": s.samples, "restarts": s.restarts}, f, indent=1)
    keys = []
    for r in s.samples:
        for k in r:
            if k not in keys:
                keys.append(k)
    with open(s.workdir / "samples.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=keys)
        w.writeheader()
        for r in s.samples:
            w.writerow(r)


def report(s, results, elapsed, load_start, load_end):
    print()
    print("## Soak (%s, %.0f min measured, %d restarts, nproc %d, load average %s at the start, %s at the end)"
          % (time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), s.args.minutes, len(s.restarts), os.cpu_count(),
             load_start, load_end))
    print()
    print("| zkwarden process | samples (judged) | private RSS KiB start / end / max | private RSS first third -> "
          "last third (limit) | private RSS slope KiB/h | journal (RssShmem) KiB end / max | VmData KiB start / end "
          "| fds start / end / max | fds first -> last third (limit) | verdict |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for f in sorted(s.flat, key=lambda f: f["series"]):
        print("| %s | %d (%d) | %s / %s / %s | %s -> %s (%s) | %s | %s / %s | %s / %s | %s / %s / %s | %s -> %s (%s) "
              "| %s |" % (
            f["series"], f["samples"], f["judged"], f["rss_start"], f["rss_end"], f["rss_max"],
            f.get("rss_first", "-"), f.get("rss_last", "-"), f.get("rss_limit", "-"), f.get("rss_slope_kib_h", "-"),
            f["shmem_end"], f["shmem_max"], f["vmdata_start"], f["vmdata_end"], f["fds_start"], f["fds_end"],
            f["fds_max"], f.get("fds_first", "-"), f.get("fds_last", "-"), f.get("fds_limit", "-"), f["verdict"]))
    print()
    print("| check | result | detail |")
    print("|---|---|---|")
    for name, ok, detail in results:
        print("| %s | %s | %s |" % (name, "ok" if ok else "FAIL", detail))
    for n in s.notes:
        print("- %s" % n)
    print("Tolerances: RSS last-third median <= first-third median x %.2f + %d KiB; descriptors last-third median "
          "<= first-third median + %d; warm-up %d s of every process excluded; a process needs %d samples after "
          "it to be judged (a sidecar replaced by a pod restart starts a new series)."
          % (1 + RSS_TOL_FRACTION, RSS_TOL_KIB, FD_TOL, s.args.warmup_s, MIN_JUDGED_SAMPLES))
    print("Samples: %s (every %g s). Soak time: %.0f s." % (s.workdir / "samples.csv", s.args.sample_s, elapsed))


def loadavg():
    try:
        return " ".join(open("/proc/loadavg").read().split()[:3])
    except OSError:
        return "?"


def main():
    ap = argparse.ArgumentParser(prog="tests/soak/run.sh", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--minutes", type=float, default=30.0, help="measured time after set-up (default 30)")
    ap.add_argument("--sample-s", type=float, default=None, help="seconds between samples (10; 5 under 5 min)")
    ap.add_argument("--warmup-s", type=float, default=None,
                    help="first seconds of each zkwarden process not judged (60; 30 under 5 min)")
    ap.add_argument("--restart-every", default=None,
                    help="lo,hi seconds between leader restarts (30,60; 20,30 under 5 min)")
    ap.add_argument("--clients", type=int, default=3, help="kazoo clients through a relay zkwarden (0: none)")
    ap.add_argument("--client-rate", type=float, default=5.0, help="rounds per second per client (7 ops each)")
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--workdir", default=None, help="default: a new /tmp/zkwarden-soak.* (kept on failure)")
    ap.add_argument("--keep", action="store_true", help="keep the work directory after a pass")
    ap.add_argument("--json", default=None, help="also write the checks, series and restarts here")
    ap.add_argument("--zkwarden-log-level", default="info")
    args = ap.parse_args()
    short = args.minutes < 5
    if args.sample_s is None:
        args.sample_s = 5.0 if short else 10.0
    if args.warmup_s is None:
        args.warmup_s = 30.0 if short else 60.0
    if args.restart_every is None:
        args.restart_every = (20.0, 30.0) if short else (30.0, 60.0)
    else:
        args.restart_every = tuple(float(x) for x in args.restart_every.split(","))
    if args.seed is None:
        args.seed = random.randrange(1 << 30)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", datefmt="%H:%M:%S")
    logging.getLogger("kazoo").setLevel(logging.CRITICAL)
    if not os.access(procs.zkwarden_binary(), os.X_OK):
        sys.exit("soak: zkwarden binary %s not found: build it or set ZKW_BIN" % procs.zkwarden_binary())
    log.info("soak: %g min, zkwarden %s, seed %d, work directory pending", args.minutes, procs.zkwarden_binary(),
             args.seed)

    self_test()

    def on_signal(signum, frame):
        raise KeyboardInterrupt()
    signal.signal(signal.SIGTERM, on_signal)

    s = Soak(args)
    # The run uses a copy: a rebuild of the tree mid-run must not change the
    # binary a restarted sidecar starts.
    src = procs.zkwarden_binary()
    binary = s.workdir / "zkwarden"
    shutil.copy2(src, binary)
    os.environ["ZKW_BIN"] = str(binary)
    s.notes.append("zkwarden: a copy of %s (%d bytes, modified %s UTC)" % (
        src, binary.stat().st_size, time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(binary.stat().st_mtime))))
    s.asan = is_sanitizer_build(str(binary))
    if s.asan:
        s.notes.append("%s is an ASan build: its RSS grows with every allocation (quarantine) and is not judged; "
                       "descriptors are, and LeakSanitizer reports leaks at exit" % procs.zkwarden_binary())
    log.info("work directory %s", s.workdir)
    load_start = loadavg()
    t0 = time.time()
    results = []
    err = None
    s.jm_totals = None
    s.sidecar_problems = []
    try:
        s.soak()
    except KeyboardInterrupt:
        err = "interrupted"
    except Exception as e:
        err = "%s: %s" % (type(e).__name__, str(e).splitlines()[0] if str(e) else "")
        log.exception("soak failed")
    finally:
        s.teardown()
    load_end = loadavg()
    elapsed = time.time() - t0
    write_samples(s)
    if err is None:
        results = checks(s)
        report(s, results, elapsed, load_start, load_end)
    else:
        results = [("run completed", False, err)]
        print("| check | result | detail |\n|---|---|---|\n| run completed | FAIL | %s |" % err)
        if s.sidecar_problems:
            print("sidecars: %s" % "; ".join(s.sidecar_problems))
    ok = all(r[1] for r in results)
    if args.json:
        Path(args.json).write_text(json.dumps({
            "ok": ok, "minutes": args.minutes, "seed": args.seed, "load_start": load_start, "load_end": load_end,
            "nproc": os.cpu_count(), "checks": results, "series": getattr(s, "flat", []),
            "restarts": s.restarts}, indent=1))
    if ok and not args.keep and not args.workdir:
        shutil.rmtree(s.workdir, ignore_errors=True)
        print("(work directory removed; --keep keeps it)")
    print("RESULT: %s" % ("PASS" if ok else "FAIL"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
