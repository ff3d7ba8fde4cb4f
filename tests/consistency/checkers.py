"""The consistency test's checkers: each reads a run's recorded history (and
what ZooKeeper held at the end, read direct) and returns its anomalies.

  linearizable_registers  each register <root>/reg/... with Porcupine
                          (checker/main.go), per key: creates, writes and
                          compare-and-set (setData with a version, or a multi
                          of check and setData), each with the version it
                          returned. Reads are not in it: ZooKeeper promises
                          linearizable writes, and a read even after sync
                          can be stale (seen direct: on the leader a sync
                          waits for no commit, its CommitProcessor having
                          matchSyncs false; ZOOKEEPER-1675); reads are
                          checked by read_your_writes
  linearizable_counters   each sequential parent with Porcupine: every
                          create takes the next number; each create's number
                          is known from the children listed at the end (names
                          start with the op's token); a token twice, a child
                          no op made, an acknowledged create missing
  xid_order               replies in the order of their requests (xids), none
                          without a request
  zxid_monotonic          no reply's zxid lower than an earlier reply's in the
                          same session, across connections and moves
  read_your_writes        a read never shows a node older than a write the
                          session had already seen (the zxid of any earlier
                          reply of the session covers that write), nor a
                          value whose write had not been sent yet
  watch_before_data       a watch's notification comes before any reply of
                          that connection showing the change it reports (a
                          read of the node with the newer version, or any
                          reply whose zxid covers the change)
  sequential_increasing   a session's sequential creates under one parent get
                          strictly increasing numbers
  ephemerals              an ephemeral is gone if and only if its session ended
                          or it was deleted (by a client, or by zkwarden as a
                          stale lock)
  zkwarden_deletes        zkwarden deleted only stale locks it tagged (here:
                          the planted ones of an older incarnation) and
                          ephemerals of sessions it saw end, fenced only the
                          JobManager's earlier sessions; no node of the run
                          vanished that nobody deleted
  locks_tagged            every lock the JobManager made through zkwarden
                          as a recorded incarnation carries zkwarden's tag
                          (its identity and session) and the JobManager's
                          own bytes, and the JobManager reads its own bytes
                          back. A lock its session created before zkwarden
                          recorded it (the registry not usable within
                          ZKWARDEN_FENCE_TIMEOUT_MS: the request goes on as a
                          plain client's, DESIGN 3.3 and docs/reliability.md)
                          is counted apart (stats: locks_before_recorded)

An operation whose outcome is unknown (no reply, CONNECTIONLOSS, a timeout)
may or may not have taken effect, and is checked as such. Each anomaly is a
dict with at least `what`; counts() gives the number per checker.
"""

import bisect
import json
import re
import subprocess
from collections import defaultdict

CHECKERS = ["linearizable_registers", "linearizable_counters", "xid_order", "zxid_monotonic",
            "read_your_writes", "watch_before_data", "sequential_increasing", "ephemerals",
            "zkwarden_deletes", "locks_tagged"]
ZKWARDEN_ONLY = {"locks_tagged"}

# Reply errors after which the request may or may not have been executed.
UNKNOWN_ERRS = {-4, -7, -112, -118}  # CONNECTIONLOSS, OPERATIONTIMEOUT, SESSIONEXPIRED, SESSIONMOVED
DEFINITE_EXC = {"NoNodeError": "NoNode", "NodeExistsError": "NodeExists", "BadVersionError": "BadVersion",
                "NotEmptyError": "NotEmpty", "RolledBackError": "RolledBack",
                "RuntimeInconsistency": "RuntimeInconsistency", "NoChildrenForEphemeralsError": "NoChildren"}
LOCK = re.compile(r"/[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")
TAG = re.compile(r"^zkwarden-lock 1 identity=(\S+) incarnation=(\d+) session=0x([0-9a-f]+)\n", re.S)
SEQ_SUFFIX = re.compile(r"^(.*)-(\d{10})$")
DETAILS = 20  # anomalies kept in full per checker (all are counted)


class History:
    """A run's history, indexed: ops by id with their completion, and every
    frame each client received in order."""

    def __init__(self, records):
        self.ops = {}
        self.frames = defaultdict(list)   # client -> [(rseq, kind, rec)]
        self.conns = defaultdict(list)    # client -> conn records
        self.expired = defaultdict(list)  # client -> expired records
        for r in records:
            t = r["t"]
            if t == "inv":
                self.ops[r["id"]] = dict(r, done=None)
            elif t == "ret":
                op = self.ops.get(r["id"])
                if op is not None:
                    op["done"] = r
                    if r.get("rseq") is not None:
                        self.frames[r["c"]].append((r["rseq"], "ret", op))
            elif t in ("anon", "ev", "xidbad"):
                self.frames[r["c"]].append((r["rseq"], t, r))
            elif t == "conn":
                self.conns[r["c"]].append(r)
            elif t == "expired":
                self.expired[r["c"]].append(r)
        for c in self.frames:
            self.frames[c].sort(key=lambda f: f[0])

    @staticmethod
    def outcome(op):
        """"ok", "fail" (a definite error: its name in op's result) or "unknown"."""
        d = op["done"]
        if d is None or d.get("ts") is None:
            return "unknown"
        if d.get("err") in UNKNOWN_ERRS:
            return "unknown"
        exc = d.get("exc")
        if exc is None:
            return "ok"
        return "fail" if exc in DEFINITE_EXC else "unknown"

    def ok(self, op):
        return self.outcome(op) == "ok"

    def by_kind(self, *kinds):
        return [op for op in self.ops.values() if op["kind"] in kinds]

    def known_writes(self):
        """{path: sorted mzxids of every acknowledged change of it}."""
        w = defaultdict(list)
        for op in self.ops.values():
            if not self.ok(op):
                continue
            res = op["done"].get("res") or {}
            if op["kind"] in ("create", "set") and res.get("stat"):
                w[res.get("path") or op["path"]].append(res["stat"]["mzxid"])
            elif op["kind"] == "multi":
                for (kind, path, _), r in zip(op["args"]["ops"], res.get("results", [])):
                    if kind in ("set", "create") and r.get("stat"):
                        w[path].append(r["stat"]["mzxid"])
        for p in w:
            w[p].sort()
        return w

    def deleted_paths(self):
        """Paths any delete was sent for (whatever its outcome)."""
        out = set()
        for op in self.ops.values():
            if op["kind"] == "delete":
                out.add(op["path"])
            elif op["kind"] == "multi":
                out.update(p for k, p, _ in op["args"]["ops"] if k == "delete")
        return out


def _err(op):
    exc = (op["done"] or {}).get("exc")
    return DEFINITE_EXC.get(exc, exc)


# ---------------------------------------------------------------- Porcupine

def porcupine_input(h, root):
    """The register and counter histories for checker/main.go, and the
    counter anomalies found while resolving each create's number."""
    clients = {}
    regs = defaultdict(list)
    anomalies = []

    def cid(c):
        return clients.setdefault(c, len(clients))

    reg_prefix = root + "/reg/"
    for op in h.ops.values():
        path = op["path"]
        if not path.startswith(reg_prefix):
            continue
        kind, args = op["kind"], op.get("args") or {}
        out = h.outcome(op)
        if kind == "create":
            i = {"kind": "create", "v": args["v"]}
        elif kind == "set":
            i = {"kind": "set" if args["ver"] == -1 else "cas", "v": args["v"], "ver": args["ver"]}
        elif kind == "multi" and [o[0] for o in args["ops"]] == ["check", "set"]:
            i = {"kind": "cas", "v": args["ops"][1][2]["v"], "ver": args["ops"][0][2]["ver"]}
        else:
            continue
        o = {"known": out != "unknown"}
        if out == "ok":
            res = op["done"]["res"]
            if kind == "multi":
                rs = res["results"]
                failed = [r["exc"] for r in rs if "exc" in r and r["exc"] != "RuntimeInconsistency"]
                if failed:
                    o["err"] = DEFINITE_EXC.get(failed[0], failed[0])
                else:
                    o["version"] = rs[1]["stat"]["version"]
            else:
                if res.get("stat") is None:
                    continue  # not reached: every register result has a stat
                o["version"] = res["stat"]["version"]
                if kind == "get":
                    o["v"] = res["v"]
        elif out == "fail":
            o["err"] = _err(op)
        regs[path].append({"c": cid(op["c"]), "call": op["ts"],
                           "ret": op["done"]["ts"] if out != "unknown" else -1, "in": i, "out": o})
    return regs, clients, anomalies


def counter_input(h, root, listing):
    """The counters' histories, each create's number resolved from the
    listing ({parent: [child names]}), and the anomalies of that resolution."""
    anomalies = []
    ctrs = defaultdict(list)
    clients = {}
    seq_prefix = root + "/seq/"
    taken = {}  # (parent, token) -> [numbers]
    for parent, names in listing.items():
        for name in names:
            m = SEQ_SUFFIX.match(name)
            if not m:
                anomalies.append({"what": "a child that is no sequential create's", "path": parent + "/" + name})
                continue
            taken.setdefault((parent, m.group(1)), []).append(int(m.group(2)))
    issued = {}
    for op in h.ops.values():
        if op["kind"] != "create" or not op["path"].startswith(seq_prefix) or not (op.get("args") or {}).get("seq"):
            continue
        parent, _, prefix = op["path"].rpartition("/")
        token = prefix[:-1]
        issued[(parent, token)] = op
    for key, nums in taken.items():
        if key not in issued:
            anomalies.append({"what": "a child no operation created", "path": "%s/%s" % key, "numbers": nums})
        elif len(nums) > 1:
            op = issued[key]
            anomalies.append({"what": "one create made %d children" % len(nums), "path": op["path"],
                              "numbers": sorted(nums), "op": op["id"], "client": op["c"]})
    for key, op in issued.items():
        parent, token = key
        out = h.outcome(op)
        nums = taken.get(key, [])
        if out == "ok":
            got = int(SEQ_SUFFIX.match(op["done"]["res"]["path"].rpartition("/")[2]).group(2))
            if not nums:
                anomalies.append({"what": "an acknowledged create is missing", "path": op["done"]["res"]["path"],
                                  "op": op["id"], "client": op["c"]})
                continue
            if got not in nums:
                anomalies.append({"what": "a create's reply names another number than its node",
                                  "path": op["path"], "reply": got, "nodes": nums, "op": op["id"]})
        if not nums:
            continue
        ctrs[parent].append({"c": clients.setdefault(op["c"], len(clients)), "call": op["ts"],
                             "ret": op["done"]["ts"] if out == "ok" else -1, "in": {"token": token},
                             "out": {"n": min(nums)}})
    # Numbers taken by a create made twice: no operation accounts for the
    # second one, which the model then finds as a number nobody took.
    return ctrs, anomalies


def run_porcupine(checker_bin, workdir, regs, ctrs, timeout_s=20.0):
    inp = workdir / "porcupine-in.json"
    out = workdir / "porcupine-out.json"
    inp.write_text(json.dumps({"timeout_s": timeout_s, "registers": regs, "counters": ctrs}))
    r = subprocess.run([str(checker_bin), str(inp), str(out), str(workdir / "porcupine")], capture_output=True,
                       text=True, timeout=1800)
    if r.returncode != 0:
        raise RuntimeError("checker failed (%d): %s" % (r.returncode, r.stderr))
    return json.loads(out.read_text())


def porcupine_anomalies(result, kind):
    out = []
    for key, v in sorted(result[kind].items()):
        if v["result"] != "Ok":
            out.append({"what": "%s not linearizable (%s)" % (kind[:-1], v["result"]), "key": key, "ops": v["ops"],
                        "view": "porcupine/%s-%s.html" % (kind[:-1], key.strip("/").replace("/", "_"))})
    return out


# ---------------------------------------------------------------- session guarantees

def replies(h, c):
    """(rseq, rec or op, xid, zxid) of every reply client c got, in order."""
    out = []
    for rseq, kind, r in h.frames[c]:
        if kind == "ret":
            d = r["done"]
            out.append((rseq, r, d["xid"], d["zxid"], d["conn"], d["sid"]))
        elif kind == "anon":
            out.append((rseq, r, r["xid"], r["zxid"], r["conn"], r["sid"]))
    return out


def check_xid_order(h):
    out = []
    for c, frames in h.frames.items():
        for rseq, kind, r in frames:
            if kind == "xidbad":
                out.append({"what": "reply out of xid order", "client": c, "session": _hex(r["sid"]),
                            "got_xid": r["got"], "expected_xid": r["want"], "zxid": _hex(r["zxid"]), "rseq": rseq})
        last = {}
        for rseq, rec, xid, zxid, conn, sid in replies(h, c):
            if xid is None or xid <= 0:
                continue
            if conn in last and xid <= last[conn]:
                out.append({"what": "reply xid not above the previous one", "client": c, "session": _hex(sid),
                            "xid": xid, "previous": last[conn], "rseq": rseq})
            last[conn] = xid
    return out


def check_zxid_monotonic(h):
    out = []
    for c in h.frames:
        best = {}  # sid -> (zxid, what)
        for rseq, rec, xid, zxid, conn, sid in replies(h, c):
            if xid is None or xid <= 0 or not zxid or zxid <= 0:
                continue
            prev = best.get(sid)
            if prev and zxid < prev[0]:
                out.append({"what": "reply zxid lower than an earlier reply's", "client": c, "session": _hex(sid),
                            "xid": xid, "zxid": _hex(zxid), "earlier_zxid": _hex(prev[0]),
                            "earlier": prev[1], "op": _desc(rec), "rseq": rseq})
            elif not prev or zxid > prev[0]:
                best[sid] = (zxid, _desc(rec))
    return out


def check_read_your_writes(h, writes, deleted):
    out = []
    for c in h.frames:
        zmax = {}
        for rseq, rec, xid, zxid, conn, sid in replies(h, c):
            if "kind" in rec and rec["kind"] in ("get", "exists") and rec["path"] not in deleted \
                    and not rec["path"].startswith("/flink/"):
                z = zmax.get(sid, 0)
                ws = writes.get(rec["path"], [])
                i = bisect.bisect_right(ws, z)
                seen = ws[i - 1] if i else None  # the newest acknowledged write the session had covered
                if seen is not None:
                    st = None
                    if h.ok(rec):
                        st = (rec["done"]["res"] or {}).get("stat")
                    elif _err(rec) != "NoNode":
                        st = "skip"
                    if st != "skip" and (st is None or st["mzxid"] < seen):
                        out.append({"what": "read older than a write the session had seen", "client": c,
                                    "session": _hex(sid), "path": rec["path"], "op": rec["id"],
                                    "read_mzxid": _hex(st["mzxid"]) if st else "no node",
                                    "write_mzxid": _hex(seen), "session_zxid": _hex(z)})
            if xid is not None and xid > 0 and zxid and zxid > 0:
                zmax[sid] = max(zmax.get(sid, 0), zxid)
    out += own_writes(h)
    # No read shows a value before its write was sent (every value is unique).
    sent = {}
    for op in h.ops.values():
        v = (op.get("args") or {}).get("v")
        if op["kind"] in ("create", "set") and v is not None:
            sent.setdefault((op["path"], v), op["ts"])
        elif op["kind"] == "multi":
            for kind, path, args in op["args"]["ops"]:
                if args.get("v") is not None:
                    sent.setdefault((path, args["v"]), op["ts"])
    for op in h.by_kind("get"):
        if not h.ok(op) or op["path"].startswith("/flink/"):
            continue
        v = op["done"]["res"]["v"]
        t = sent.get((op["path"], v))
        if v and (t is None or t > op["done"]["ts"]):
            out.append({"what": "read a value no write had sent yet", "client": op["c"], "path": op["path"],
                        "value": v, "op": op["id"]})
    return out


def own_writes(h):
    """A session reads what it wrote itself, on any path (a JobManager's
    locks too), unless a delete of that path by any client may have run in
    between: a read sent after the session's own create or setData of the
    node (later on the same connection, or after its reply) shows it, at
    least that version."""
    out = []
    deletes = defaultdict(list)  # path -> [(sent, done or None)]
    for op in h.ops.values():
        paths = [op["path"]] if op["kind"] == "delete" else \
            [p for k, p, _ in op["args"]["ops"] if k == "delete"] if op["kind"] == "multi" else []
        for p in paths:
            deletes[p].append((op["ts"], (op["done"] or {}).get("ts") if h.outcome(op) != "unknown" else None))
    for c in h.frames:
        mine = {}  # (sid, path) -> (mzxid or 0, the write's op, sent at)
        for rseq, rec, xid, zxid, conn, sid in replies(h, c):
            if "kind" not in rec or not h.ok(rec):
                if "kind" in rec and rec["kind"] in ("get", "exists") and _err(rec) == "NoNode":
                    pass
                else:
                    continue
            kind = rec["kind"]
            res = (rec["done"] or {}).get("res") or {}
            if kind in ("create", "set") and h.ok(rec) and not (rec.get("args") or {}).get("seq"):
                st = res.get("stat")
                mine[(sid, res.get("path") or rec["path"])] = (st["mzxid"] if st else 0, rec)
            elif kind == "multi":
                for (k, p, _), r in zip(rec["args"]["ops"], res.get("results", [])):
                    if k in ("create", "set") and ("path" in r or "stat" in r):
                        mine[(sid, p)] = (r["stat"]["mzxid"] if r.get("stat") else 0, rec)
            elif kind in ("get", "exists"):
                w = mine.get((sid, rec["path"]))
                if w is None:
                    continue
                m, wop = w
                t0, t1 = wop["ts"], rec["done"]["ts"]
                if any(sent < t1 and (done is None or done > t0) for sent, done in deletes.get(rec["path"], [])):
                    continue
                st = res.get("stat") if h.ok(rec) else None
                if st is None or st["mzxid"] < m:
                    out.append({"what": "a session's read does not show its own write", "client": c,
                                "session": _hex(sid), "path": rec["path"], "write": _desc(wop),
                                "write_mzxid": _hex(m), "read": _desc(rec),
                                "read_mzxid": _hex(st["mzxid"]) if st else "no node"})
    return out


def check_watch_before_data(h, writes):
    out = []
    for c, frames in h.frames.items():
        by_conn = defaultdict(list)
        for f in frames:
            conn = f[2]["done"]["conn"] if f[1] == "ret" else f[2]["conn"]
            by_conn[conn].append(f)
        for conn, fs in by_conn.items():
            events = defaultdict(list)  # path -> rseqs
            for rseq, kind, r in fs:
                if kind == "ev":
                    events[r["path"]].append(rseq)
            for idx, (rseq, kind, r) in enumerate(fs):
                if kind != "ret" or not (r.get("args") or {}).get("watch") or not h.ok(r):
                    continue
                path = r["path"]
                st = (r["done"]["res"] or {}).get("stat")
                m0 = st["mzxid"] if st else 0
                ws = writes.get(path, [])
                i = bisect.bisect_right(ws, m0)
                if i == len(ws):
                    continue  # no known change after the arm
                zc = ws[i]
                evs = events[path]
                k = bisect.bisect_right(evs, rseq)
                e = evs[k] if k < len(evs) else None
                for j in range(idx + 1, len(fs)):
                    rseq2, kind2, r2 = fs[j]
                    if e is not None and rseq2 >= e:
                        break
                    if kind2 == "ev":
                        continue
                    z = r2["done"]["zxid"] if kind2 == "ret" else r2.get("zxid")
                    xid = r2["done"]["xid"] if kind2 == "ret" else r2.get("xid")
                    shows = None
                    if kind2 == "ret" and r2["path"] == path and r2["kind"] in ("get", "exists") and h.ok(r2):
                        st2 = (r2["done"]["res"] or {}).get("stat")
                        if st2 and st2["mzxid"] > m0:
                            shows = "a read of %s at mzxid %s" % (path, _hex(st2["mzxid"]))
                    if not shows and xid and xid > 0 and z and z >= zc:
                        shows = "a reply (%s) with zxid %s" % (_desc(r2), _hex(z))
                    if shows:
                        out.append({"what": "data before its watch event", "client": c, "conn": conn, "path": path,
                                    "armed_at_mzxid": _hex(m0), "change_zxid": _hex(zc), "shown_by": shows,
                                    "event": "after it" if e is not None else "never", "op": r["id"]})
                        break
    return out


def check_sequential_increasing(h):
    out = []
    last = {}
    for c in h.frames:
        for rseq, rec, xid, zxid, conn, sid in replies(h, c):
            if rec.get("kind") != "create" or not (rec.get("args") or {}).get("seq") or not h.ok(rec):
                continue
            path = rec["done"]["res"]["path"]
            parent, _, name = path.rpartition("/")
            n = int(name[-10:])
            key = (c, sid, parent)
            if key in last and n <= last[key]:
                out.append({"what": "sequential name not above the session's previous one", "client": c,
                            "session": _hex(sid), "path": path, "previous": last[key]})
            last[key] = max(n, last.get(key, -1))
    return out


# ---------------------------------------------------------------- ephemerals and zkwarden's own

def eph_creates(h):
    """(op, path, client, sid, outcome) of every ephemeral create, in a multi too."""
    for op in h.ops.values():
        out = h.outcome(op)
        d = op["done"] or {}
        if op["kind"] == "create" and (op.get("args") or {}).get("eph"):
            path = (d.get("res") or {}).get("path") or op["path"]
            yield op, path, op["c"], d.get("sid"), out
        elif op["kind"] == "multi":
            rs = (d.get("res") or {}).get("results") or []
            for j, (kind, path, args) in enumerate(op["args"]["ops"]):
                if kind == "create" and args.get("eph"):
                    sub_ok = out == "ok" and j < len(rs) and "path" in rs[j]
                    yield op, path, op["c"], d.get("sid"), "ok" if sub_ok else ("fail" if out == "ok" else out)


def ended_sessions(h, run_info):
    """Sessions known to have ended by the end of the workload: expired ones
    (their client was told) and those zkwarden fenced."""
    ended = set()
    for c, recs in h.expired.items():
        ended.update(r["sid"] for r in recs if r["sid"])
    for a in run_info["audit"]:
        if a.get("kind") in ("fence", "orphan_fence") and a.get("done") and a.get("session"):
            ended.add(int(a["session"], 16) if isinstance(a["session"], str) else a["session"])
    return ended


def check_ephemerals(h, run_info):
    out = []
    snap = run_info["snapshot"]["ephemerals"]
    live = {lab: s["sid"] for lab, s in run_info["idle"].items() if s.get("sid")}
    ended = ended_sessions(h, run_info)
    deleted = h.deleted_paths()
    # zkwarden's deletes, done or tried: a delete answered by a connection
    # loss is written down as failed, yet the server may have run it.
    by_zkwarden = {a["path"] for a in run_info["audit"] if _deleted_maybe(a)}
    for path, node in snap.items():
        if node["owner"] in ended:
            out.append({"what": "ephemeral of a session that ended", "path": path, "owner": _hex(node["owner"])})
    for op, path, c, sid, outcome in eph_creates(h):
        if outcome != "ok" or path in deleted or path in by_zkwarden:
            continue
        if live.get(c) == sid and sid not in ended:
            node = snap.get(path)
            if node is None:
                out.append({"what": "ephemeral of a live session gone", "path": path, "client": c,
                            "session": _hex(sid), "op": op["id"]})
            elif node["owner"] != sid:
                out.append({"what": "ephemeral owned by another session", "path": path, "client": c,
                            "session": _hex(sid), "owner": _hex(node["owner"])})
    for path, node in run_info["leftover"].items():
        out.append({"what": "ephemeral left after every session closed or expired", "path": path,
                    "owner": _hex(node["owner"])})
    return out


def _deleted_maybe(a):
    """An audit entry whose node zkwarden deleted, or may have: a delete
    answered by a connection loss is written down as failed ("cannot delete
    ..."), and so is reclaim at create's replace (one multi: delete the stale
    lock, create the JobManager's: "cannot replace ..."), yet the server may
    have run it."""
    if a.get("would") or not a.get("path"):
        return False
    reason = a.get("reason") or ""
    unknown = reason.startswith("failed (connection_loss)") or reason.startswith("failed (timeout)")
    return bool(a.get("done")) or (unknown and ("cannot delete" in reason or "cannot replace" in reason))


def _superseded_at(h):
    """{session of JobManager jmK: the monotonic ns at which jm(K+1) first
    connected}."""
    first = {}
    for c, rs in h.conns.items():
        if c.startswith("jm") and c[2:].isdigit() and rs:
            first[int(c[2:])] = (min(r["ts"] for r in rs), {r["sid"] for r in rs})
    out = {}
    for k, (_, sids) in first.items():
        if k + 1 in first:
            for sid in sids:
                out[sid] = first[k + 1][0]
    return out


def check_zkwarden_deletes(h, run_info):
    out = []
    planted = {path for op, path, c, sid, outcome in eph_creates(h) if c == "planter"}
    jm_sids = {r["sid"] for c, rs in h.conns.items() if c.startswith("jm") for r in rs}
    current = run_info.get("jm_current_sid")
    jm_eph = {(path, sid) for op, path, c, sid, outcome in eph_creates(h) if c.startswith("jm")}
    superseded_at = _superseded_at(h)  # JobManager session -> when the next JobManager connected
    offset = run_info.get("wall_minus_mono_ns")  # audit wall-clock ms -> the histories' monotonic ns
    for a in run_info["audit"]:
        if not a.get("done") and not _deleted_maybe(a):
            continue  # observe mode's, or a step that failed before any delete
        kind = a.get("kind")
        sess = a.get("session")
        sess = int(sess, 16) if isinstance(sess, str) else sess
        if kind in ("fence", "orphan_fence"):
            if sess not in jm_sids or sess == current:
                out.append({"what": "zkwarden fenced a session that was no earlier JobManager's",
                            "session": _hex(sess), "audit": a})
        elif a.get("path"):
            # A lock of a JobManager that a later one had replaced (the test
            # kills one before it starts the next): reclaimed by a sweep or a
            # reclaim, or a zombie; never the last one's, never before its
            # successor connected (when the run recorded its clock).
            ok = a["path"] in planted or ((a["path"], sess) in jm_eph and sess != current and (
                kind == "zombie" or (sess in superseded_at and (
                    offset is None or a.get("time_ms") is None or
                    a["time_ms"] * 1000000 - offset >= superseded_at[sess]))))
            if not ok:
                out.append({"what": "zkwarden deleted a node it did not tag or that was not stale",
                            "path": a["path"], "audit": a})
    # /v1/reclaims (the last actions) says what the audit file says.
    audited = {(a.get("time_ms"), a.get("kind"), a.get("path"), a.get("session"), a.get("done"))
               for a in run_info["audit"]}
    for a in (run_info.get("reclaims") or {}).get("reclaims", []):
        if (a.get("time_ms"), a.get("kind"), a.get("path"), a.get("session"), a.get("done")) not in audited:
            out.append({"what": "an action /v1/reclaims shows is not in the audit file", "action": a})
    # Nothing of the run vanished that no one deleted (direct too).
    nodes = set(run_info["snapshot"]["nodes"])
    deleted = h.deleted_paths()
    for op in h.ops.values():
        if op["kind"] != "create" or (op.get("args") or {}).get("eph") or (op.get("args") or {}).get("seq"):
            continue
        if h.ok(op) and op["path"] not in deleted and op["path"] not in nodes \
                and (op["path"].startswith("/flink/") or "/reg/" in op["path"]):
            out.append({"what": "a node nobody deleted is gone", "path": op["path"], "op": op["id"]})
    return out


def check_locks_tagged(h, run_info, stats=None):
    out = []
    identity = run_info["identity"]
    # When zkwarden recorded each JobManager session as an incarnation (its
    # log, wall clock), in the histories' monotonic ns; absent: every lock
    # counts (a run from before the log was read).
    recorded = run_info.get("incarnation_recorded_ns")
    offset = run_info.get("wall_minus_mono_ns")
    if not recorded:
        recorded = None  # nothing read from the log: no lock is excused
    made, early = {}, set()
    for op, path, c, sid, outcome in eph_creates(h):
        if c.startswith("jm") and LOCK.search(path) and outcome == "ok":
            args = op["args"] if op["kind"] == "create" else \
                [a for k, p, a in op["args"]["ops"] if p == path][0]
            made[(path, sid)] = args["v"]
            if recorded is not None and offset is not None:
                # Sent on (tagged or not) by the time its reply came: a reply
                # before the session was recorded is a plain client's.
                at = recorded.get(_hex(sid))
                if at is None or (op["done"] or {}).get("ts", op["ts"]) < at - offset:
                    early.add((path, sid))
    untagged_early = set()
    for snap in run_info["lock_snapshots"] + [run_info["snapshot"]["ephemerals"]]:
        for path, node in snap.items():
            want = made.get((path, node["owner"]))
            if want is None:
                continue  # not a lock the JobManager made (a planted one, its latch)
            m = TAG.match(node["data"])
            if not m and (path, node["owner"]) in early:
                untagged_early.add((path, node["owner"]))  # a plain client's create, as documented
            elif not m:
                out.append({"what": "a lock without zkwarden's tag", "path": path, "data": node["data"][:80]})
            elif m.group(1) != identity or int(m.group(3), 16) != node["owner"]:
                out.append({"what": "a lock tagged with another identity or session", "path": path,
                            "tag": node["data"][:m.end()].strip(), "owner": _hex(node["owner"])})
            elif node["data"][m.end():] != want:
                out.append({"what": "a lock's tag does not keep the JobManager's bytes", "path": path,
                            "data": node["data"][m.end():][:80], "want": want})
    if stats is not None and recorded is not None:
        stats["locks_before_recorded"] = len(untagged_early)
    return out


def check_lock_reads(h):
    """The JobManager reads its own lock's bytes back (the tag is invisible):
    part of locks_tagged, run direct too. A read counts from the reply of the
    JobManager's own successful create of the lock until it sends a delete of
    it (its replies in order)."""
    out = []
    for c in h.frames:
        if not c.startswith("jm"):
            continue
        mine = {}
        for rseq, rec, xid, zxid, conn, sid in replies(h, c):
            if "kind" not in rec:
                continue
            kind = rec["kind"]
            if kind == "delete":
                mine.pop(rec["path"], None)
            elif kind == "create" and LOCK.search(rec["path"]) and h.ok(rec):
                mine[rec["path"]] = rec["args"]["v"]
            elif kind == "multi" and h.ok(rec):
                for k, p, a in rec["args"]["ops"]:
                    if k == "create" and LOCK.search(p):
                        mine[p] = a["v"]
            elif kind == "get" and rec["path"] in mine and h.ok(rec):
                got = rec["done"]["res"]["v"]
                if got != mine[rec["path"]]:
                    out.append({"what": "the JobManager read other bytes than it wrote in its lock",
                                "path": rec["path"], "read": (got or "")[:80], "wrote": mine[rec["path"]],
                                "op": rec["id"]})
    return out


# ---------------------------------------------------------------- all of them

def check_run(records, run_info, checker_bin, workdir, zkwarden):
    """{checker: [anomalies]} for one run."""
    h = History(records)
    root = run_info["root"]
    writes = h.known_writes()
    deleted = h.deleted_paths()
    regs, _, _ = porcupine_input(h, root)
    ctrs, ctr_anomalies = counter_input(h, root, run_info["snapshot"]["seq"])
    result = run_porcupine(checker_bin, workdir, regs, ctrs)
    found = {
        "linearizable_registers": porcupine_anomalies(result, "registers"),
        "linearizable_counters": ctr_anomalies + porcupine_anomalies(result, "counters"),
        "xid_order": check_xid_order(h),
        "zxid_monotonic": check_zxid_monotonic(h),
        "read_your_writes": check_read_your_writes(h, writes, deleted),
        "watch_before_data": check_watch_before_data(h, writes),
        "sequential_increasing": check_sequential_increasing(h),
        "ephemerals": check_ephemerals(h, run_info),
        "zkwarden_deletes": check_zkwarden_deletes(h, run_info),
    }
    stats = op_stats(h)
    found["locks_tagged"] = check_lock_reads(h) + (check_locks_tagged(h, run_info, stats) if zkwarden else [])
    stats["registers"] = len(regs)
    stats["register_ops"] = sum(len(v) for v in regs.values())
    stats["counters"] = len(ctrs)
    stats["counter_ops"] = sum(len(v) for v in ctrs.values())
    stats["watch_events"] = sum(1 for fs in h.frames.values() for f in fs if f[1] == "ev")
    return found, stats


def op_stats(h):
    by_outcome = defaultdict(int)
    by_kind = defaultdict(int)
    for op in h.ops.values():
        if op["kind"] == "sync":
            continue  # half of a linearizable read
        by_outcome[h.outcome(op)] += 1
        by_kind[op["kind"]] += 1
    return {"ops": sum(by_outcome.values()), "by_outcome": dict(by_outcome), "by_kind": dict(by_kind),
            "sessions": len({r["sid"] for rs in h.conns.values() for r in rs})}


def counts(found):
    return {k: len(found.get(k, [])) for k in CHECKERS}


def _hex(v):
    return "0x%x" % v if isinstance(v, int) else v


def _desc(op):
    if "kind" in op:
        return "%s %s (%s)" % (op["kind"], op["path"], op["id"])
    return "xid %s" % op.get("xid")
