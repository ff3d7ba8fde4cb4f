"""The consistency test's client processes, each recording its history with
kzrec.py. Started by consistency.py, never by hand:

  /usr/bin/python3 workload.py worker CONFIG.json   the plain clients of one run
  /usr/bin/python3 workload.py jm CONFIG.json       one JobManager incarnation

The worker runs several kazoo sessions, one thread each, over the run's
root (<root>):
  reg-i    registers <root>/reg/e<epoch>-k<j>: linearizable reads (sync, then
           getData), plain reads, writes, compare-and-set (setData with a
           version) and the same as a multi (check + setData), creates;
           a few pipelined at a time; now and then a read arms a watch
  pipe     batches of 40 pipelined requests: writes and reads of the
           registers, sequential creates, exists
  seqeph   sequential creates under <root>/seq/e<epoch>-p<j> (the counters;
           each child's name starts with the op's token), ephemerals
           <root>/eph/<label>-<n> created and deleted
  watch    data watches on every register of the epoch, re-armed when they
           fire, and plain reads of the same registers
The registers and counters of an epoch (EPOCH_S seconds) are fresh nodes, so
that each key's history stays short for the linearizability checker.

The JobManager (jm) does what Flink's does with ZooKeeper, through its
sidecar in the zkwarden run: a leader latch (ephemeral sequential), its
connection_info when it leads, checkpoints added as Flink's addAndLock does
(a multi: state node, `locks`, its lock <state>/locks/<uuid>), read back,
subsumed (its lock, `locks`, the state node deleted, pipelined), retained
checkpoints locked again at start, and job graphs that another session puts
under jobgraphs/ locked (<jobgraph>/<uuid>) and later removed. The lock
names are the incarnation's UUID, as Flink's store instance draws one.

Both stop when the stop file appears, write the session each client holds
to the idle file, and close their sessions when the close file appears.
"""

import json
import logging
import os
import random
import sys
import threading
import time

from kazoo.exceptions import NodeExistsError, NoNodeError, NotEmptyError  # noqa: F401  (names in the history)

from kzrec import History, RecClient, now, stat_of

logging.getLogger("kazoo").setLevel(logging.ERROR)  # its reconnect warnings: the history has what matters

EPOCH_S = 4.0
KEYS = 5
PARENTS = 2
WAIT_S = 30.0  # an operation with no result by then is written down as unknown


def epoch_of(cfg):
    e = int((now() - cfg["t0"]) / 1e9 / EPOCH_S)
    return min(max(e, 0), cfg["epochs"] - 1)


def reg_key(cfg, e, j):
    return "%s/reg/e%d-k%d" % (cfg["root"], e, j)


def seq_parent(cfg, e, j):
    return "%s/seq/e%d-p%d" % (cfg["root"], e, j)


class Actor(threading.Thread):
    """One session of the workload: a RecClient and a loop of batches."""

    def __init__(self, cfg, hist, label, rate):
        super().__init__(name=label, daemon=True)
        self.cfg = cfg
        self.label = label
        self.rng = random.Random("%s/%s" % (cfg["seed"], label))
        self.rc = RecClient(hist, label, cfg["hosts"], timeout=cfg["session_timeout"])
        self.rate = rate
        self.ntok = 0
        self.stop = threading.Event()
        self.error = None

    def token(self):
        self.ntok += 1
        return "%s.%d" % (self.label, self.ntok)

    def issue(self, kind, path, fn, *a, args=None, **kw):
        op = self.rc.begin(kind, path, **(args or {}))
        return op, self.rc.call(op, fn, *a, **kw)

    def complete(self, op, aobj, parse):
        """Waits for one result; records it. Returns (result, exception)."""
        try:
            r = aobj.get(timeout=WAIT_S)
        except Exception as e:  # every error is part of the history
            self.rc.finish(op, exc=e)
            return None, e
        res = parse(r)
        self.rc.finish(op, res=res)
        return res, None

    # -- requests: each returns (op, async result, parser)

    def get(self, path, watch=None, sync=False):
        args = {}
        if watch:
            args["watch"] = True
        if sync:
            args["sync"] = True
            op = self.rc.begin("get", path, **args)
            s = self.rc.begin("sync", path)
            a = self.rc.call(s, self.rc.c.sync_async, path)
            pending = (s, a, lambda r: {"path": r})
            return [pending, (op, self.rc.call(op, self.rc.c.get_async, path, watch=watch), _get_res)]
        op, a = self.issue("get", path, self.rc.c.get_async, path, watch=watch, args=args)
        return [(op, a, _get_res)]

    def exists(self, path, watch=None):
        op, a = self.issue("exists", path, self.rc.c.exists_async, path, watch=watch,
                           args={"watch": True} if watch else None)
        return [(op, a, lambda st: {"stat": stat_of(st)})]

    def set(self, path, v, ver=-1):
        op, a = self.issue("set", path, self.rc.c.set_async, path, v.encode(), ver, args={"v": v, "ver": ver})
        return [(op, a, lambda st: {"stat": stat_of(st)})]

    def create(self, path, v, eph=False, seq=False):
        args = {"v": v}
        if eph:
            args["eph"] = True
        if seq:
            args["seq"] = True
        op, a = self.issue("create", path, self.rc.c.create_async, path, v.encode(), ephemeral=eph, sequence=seq,
                           include_data=True, args=args)
        return [(op, a, lambda r: {"path": r[0], "stat": stat_of(r[1])})]

    def delete(self, path, ver=-1):
        op, a = self.issue("delete", path, self.rc.c.delete_async, path, ver, args={"ver": ver})
        return [(op, a, lambda r: {})]

    def children(self, path):
        op, a = self.issue("children", path, self.rc.c.get_children_async, path)
        return [(op, a, lambda r: {"names": sorted(r)})]

    def multi(self, ops):
        """ops: [(kind, path, args)], kind in create, set, check, delete."""
        t = self.rc.c.transaction()
        for kind, path, args in ops:
            if kind == "create":
                t.create(path, args["v"].encode(), ephemeral=args.get("eph", False), sequence=args.get("seq", False))
            elif kind == "set":
                t.set_data(path, args["v"].encode(), args.get("ver", -1))
            elif kind == "check":
                t.check(path, args["ver"])
            elif kind == "delete":
                t.delete(path, args.get("ver", -1))
        path = ops[0][1]
        op = self.rc.begin("multi", path, ops=[list(o) for o in ops])
        return [(op, self.rc.call(op, t.commit_async), _multi_res)]

    def run_batch(self, reqs):
        """Waits for every request of a batch (sent pipelined); returns the
        results in order, each (res, exc)."""
        return [self.complete(op, a, parse) for op, a, parse in reqs]

    def pace(self, n, t_start):
        wait = n / self.rate - (time.monotonic() - t_start)
        if wait > 0:
            self.stop.wait(wait)

    def run(self):
        try:
            self.rc.start()
            while not self.stop.is_set():
                t = time.monotonic()
                n = self.step()
                self.pace(max(n, 1), t)
        except Exception as e:  # reported by the process: a workload that dies is a failed run
            self.error = "%s: %r" % (self.label, e)
            import traceback
            traceback.print_exc()

    def step(self):
        raise NotImplementedError


def _get_res(r):
    data, st = r
    return {"v": data.decode("utf-8", "replace") if data is not None else None, "stat": stat_of(st)}


def _multi_res(results):
    out = []
    for r in results:
        if isinstance(r, Exception):
            out.append({"exc": type(r).__name__})
        elif hasattr(r, "mzxid"):
            out.append({"stat": stat_of(r)})
        elif isinstance(r, str):
            out.append({"path": r})
        else:
            out.append({"ok": bool(r)})
    return {"results": out}


class Reg(Actor):
    """Registers: a few requests pipelined per batch."""

    def __init__(self, cfg, hist, label, rate, depth):
        super().__init__(cfg, hist, label, rate)
        self.depth = depth
        self.version = {}  # last version seen per key
        self.watched = set()

    def one(self, key):
        r = self.rng.random()
        ver = self.version.get(key, self.rng.randint(0, 3))
        if r < 0.28:
            return self.get(key, sync=True)
        if r < 0.40:
            return self.get(key)
        if r < 0.58:
            return self.set(key, self.token())
        if r < 0.78:
            return self.set(key, self.token(), ver)
        if r < 0.88:
            return self.multi([("check", key, {"ver": ver}), ("set", key, {"v": self.token()})])
        if r < 0.94 and key not in self.watched:
            self.watched.add(key)
            return self.get(key, watch=lambda ev, k=key: self.watched.discard(k))
        return self.create(key, self.token())

    def step(self):
        e = epoch_of(self.cfg)
        reqs = []
        for _ in range(self.depth):
            reqs += self.one(reg_key(self.cfg, e, self.rng.randrange(KEYS)))
        for (op, _, _), (res, exc) in zip(reqs, self.run_batch(reqs)):
            if res and res.get("stat"):
                self.version[op.path] = res["stat"]["version"]
        return len(reqs)


class Pipe(Actor):
    """Batches of 40 requests sent back to back (pipelined)."""

    def step(self):
        e = epoch_of(self.cfg)
        reqs = []
        for i in range(40):
            key = reg_key(self.cfg, e, self.rng.randrange(KEYS))
            r = self.rng.random()
            if r < 0.3:
                reqs += self.set(key, self.token())
            elif r < 0.6:
                reqs += self.get(key)
            elif r < 0.7:
                reqs += self.get(key, sync=True)
            elif r < 0.85:
                p = seq_parent(self.cfg, e, self.rng.randrange(PARENTS))
                reqs += self.create("%s/%s-" % (p, self.token()), "s", seq=True)
            else:
                reqs += self.exists(key)
        self.run_batch(reqs)
        return len(reqs)


class SeqEph(Actor):
    """Sequential creates (the counters) and ephemerals created and deleted."""

    def __init__(self, cfg, hist, label, rate):
        super().__init__(cfg, hist, label, rate)
        self.ephs = []
        self.n = 0

    def step(self):
        e = epoch_of(self.cfg)
        reqs = []
        for _ in range(3):
            p = seq_parent(self.cfg, e, self.rng.randrange(PARENTS))
            reqs += self.create("%s/%s-" % (p, self.token()), "s", seq=True)
        self.n += 1
        mine = "%s/eph/%s-%d" % (self.cfg["root"], self.label, self.n)
        reqs += self.create(mine, self.token(), eph=True)
        gone = None
        if len(self.ephs) >= 4:
            gone = self.ephs.pop(self.rng.randrange(len(self.ephs)))
            reqs += self.delete(gone)
        if self.ephs:
            reqs += self.exists(self.rng.choice(self.ephs))
        self.run_batch(reqs)
        self.ephs.append(mine)
        return len(reqs)


class Watcher(Actor):
    """Data watches on every register of the epoch, and plain reads."""

    def __init__(self, cfg, hist, label, rate):
        super().__init__(cfg, hist, label, rate)
        self.armed = set()
        self.lock = threading.Lock()

    def fired(self, ev):
        with self.lock:
            if ev.path is None:  # kazoo dropped its watchers with the connection
                self.armed.clear()
            else:
                self.armed.discard(ev.path)

    def step(self):
        e = epoch_of(self.cfg)
        reqs = []
        for j in range(KEYS):
            key = reg_key(self.cfg, e, j)
            with self.lock:
                arm = key not in self.armed
                if arm:
                    self.armed.add(key)
            if arm:
                reqs += self.exists(key, watch=self.fired)
            else:
                reqs += self.get(key)
        for (op, _, _), (res, exc) in zip(reqs, self.run_batch(reqs)):
            if exc is not None and op.kind == "exists":
                with self.lock:  # not armed: kazoo keeps no watcher for a failed request
                    self.armed.discard(op.path)
        with self.lock:  # a connection loss drops kazoo's watchers (it never re-sets them)
            if not self.rc.c.connected:
                self.armed.clear()
        return len(reqs)


def wait_file(path, stop=None):
    while not os.path.exists(path):
        time.sleep(0.05)


def sessions_of(actors):
    out = {}
    for a in actors:
        c = a.rc.c
        out[a.label] = {"sid": c._session_id, "connected": c.connected, "error": a.error}
    return out


def finish(cfg, actors):
    for a in actors:
        a.stop.set()
    for a in actors:
        a.join(WAIT_S + 10)
    tmp = cfg["idle_file"] + ".tmp"
    with open(tmp, "w") as f:
        json.dump(sessions_of(actors), f)
    os.replace(tmp, cfg["idle_file"])
    wait_file(cfg["close_file"])
    for a in actors:
        a.rc.stop()


def run_worker(cfg):
    hist = History(cfg["history"], "w" + cfg["name"])
    mix = cfg["mix"]
    actors = []
    for i in range(mix.get("reg", 0)):
        actors.append(Reg(cfg, hist, "reg-%d" % i, rate=mix.get("reg_rate", 40), depth=1 + i % 3))
    for i in range(mix.get("pipe", 0)):
        actors.append(Pipe(cfg, hist, "pipe-%d" % i, rate=mix.get("pipe_rate", 160)))
    for i in range(mix.get("seqeph", 0)):
        actors.append(SeqEph(cfg, hist, "seqeph-%d" % i, rate=mix.get("seqeph_rate", 30)))
    for i in range(mix.get("watch", 0)):
        actors.append(Watcher(cfg, hist, "watch-%d" % i, rate=mix.get("watch_rate", 25)))
    for a in actors:
        a.start()
    wait_file(cfg["stop_file"])
    finish(cfg, actors)
    hist.close()


# ---------------------------------------------------------------- JobManager

class JobManager(Actor):
    def __init__(self, cfg, hist):
        super().__init__(cfg, hist, "jm%d" % cfg["incarnation"], cfg["rate"])
        self.root = cfg["cluster"]
        self.uuid = cfg["uuid"]
        self.ckpts = "%s/jobs/%s/checkpoints" % (self.root, cfg["job"])
        self.jobgraphs = "%s/jobgraphs" % self.root
        self.latch = None
        self.latch_sid = self.tried = None
        self.leading = False
        self.retained = []      # checkpoint numbers, oldest first
        self.graphs = {}        # job graph name -> batches since it was locked
        self.next_n = 0

    def state(self, n):
        return "%s/%019d" % (self.ckpts, n)

    def lock_of(self, state):
        return "%s/locks/%s" % (state, self.uuid)

    def check_leader(self):
        (res, exc), = self.run_batch(self.children(self.root + "/leader/latch"))
        if res is None:
            return False
        names = sorted(res["names"], key=lambda s: s[-10:])
        return bool(names) and self.latch.endswith("/" + names[0])

    def begin_leading(self):
        self.run_batch(self.create(self.root + "/leader/connection_info", "jm-%s" % self.label, eph=True))
        (res, exc), = self.run_batch(self.children(self.ckpts))
        ns = sorted(int(x) for x in (res or {}).get("names", []))
        reqs = []
        for n in ns:  # retained checkpoints locked again, as Flink's recovery does
            reqs += self.create(self.lock_of(self.state(n)), "%s-%d" % (self.label, n), eph=True)
            reqs += self.get(self.lock_of(self.state(n)))
            reqs += self.get(self.state(n))
        self.run_batch(reqs)
        self.retained = ns
        self.next_n = (ns[-1] + 1) if ns else 1

    def find_own_latch(self):
        """The latch node of this session, after a create whose outcome is unknown."""
        d = self.root + "/leader/latch"
        (res, exc), = self.run_batch(self.children(d))
        reqs = []
        for name in (res or {}).get("names", []):
            reqs += self.exists("%s/%s" % (d, name))
        for (op, _, _), (r, e) in zip(reqs, self.run_batch(reqs)):
            if r and r["stat"] and r["stat"]["owner"] == self.rc.c._session_id:
                return op.path
        return None

    def step(self):
        if not self.rc.c.connected:
            return 1
        sid = self.rc.c._session_id
        if sid != self.latch_sid:  # a new session (the first, or after an expiry): latch and lead again
            self.latch, self.leading, self.latch_sid, self.tried = None, False, sid, False
        if self.latch is None:
            if self.tried:
                self.latch = self.find_own_latch()
            if self.latch is None:
                self.tried = True
                (res, exc), = self.run_batch(self.create(self.root + "/leader/latch/latch-", self.label,
                                                         eph=True, seq=True))
                if res:
                    self.latch = res["path"]
            return 1
        if not self.leading:
            if not self.check_leader():
                return 1
            self.leading = True
            self.begin_leading()
            return 1
        n = self.next_n
        self.next_n += 1
        st = self.state(n)
        reqs = self.multi([("create", st, {"v": "h%d" % n}), ("create", st + "/locks", {"v": ""}),
                           ("create", self.lock_of(st), {"v": "%s-%d" % (self.label, n), "eph": True})])
        reqs += self.get(st)
        reqs += self.get(self.lock_of(st))
        self.retained.append(n)
        while len(self.retained) > self.cfg["retain"]:
            old = self.state(self.retained.pop(0))  # subsumed: Flink's releaseAndTryRemove
            reqs += self.delete(self.lock_of(old))
            reqs += self.delete(old + "/locks")
            reqs += self.delete(old)
            reqs += self.exists(old)
        reqs += self.children(self.jobgraphs)
        results = self.run_batch(reqs)
        names = results[-1][0]["names"] if results[-1][0] else []
        reqs = []
        for g in names:  # a job graph put there by another session: locked, later removed
            if g not in self.graphs:
                self.graphs[g] = 0
                jg = "%s/%s" % (self.jobgraphs, g)
                reqs += self.create("%s/%s" % (jg, self.uuid), "%s-jg" % self.label, eph=True)
                reqs += self.get("%s/%s" % (jg, self.uuid))
                reqs += self.get(jg)
        for g in list(self.graphs):
            self.graphs[g] += 1
            if self.graphs[g] == 6:  # removed (a stale lock under it can keep it there: never locked again)
                jg = "%s/%s" % (self.jobgraphs, g)
                reqs += self.delete("%s/%s" % (jg, self.uuid))
                reqs += self.delete(jg)
        if reqs:
            self.run_batch(reqs)
        return len(reqs) + 1


def run_jm(cfg):
    hist = History(cfg["history"], "j%s.%d" % (cfg["name"], cfg["incarnation"]))
    jm = JobManager(cfg, hist)
    jm.start()
    wait_file(cfg["stop_file"])
    finish(cfg, [jm])
    hist.close()


def main():
    kind, path = sys.argv[1], sys.argv[2]
    with open(path) as f:
        cfg = json.load(f)
    if kind == "worker":
        run_worker(cfg)
    elif kind == "jm":
        run_jm(cfg)
    else:
        raise SystemExit("usage: workload.py worker|jm CONFIG.json")


if __name__ == "__main__":
    main()
