"""kazoo clients that record their history for the consistency checkers.

Every request a workload makes goes through a RecClient: the operation's
invocation is written to the history (monotonic clock, ns) before the
request is queued, and its completion after the result is known, with the
reply's xid, zxid and error as kazoo's connection reader read them, the
connection and session it came on, and its position among every frame the
client received (rseq). Notifications are written as they are read, with
their position, so that a checker can tell what a client saw first.

The reader is hooked in the test, never patched in the installed package: a
ConnectionHandler subclass replaces the client's own (kazoo/protocol/
connection.py reads every frame with _read_header and every reply with
_read_response). A reply whose xid is not the one kazoo expects is written
down ("xidbad") and turned into a dropped connection, as the Java client
does ("Xid out of order"), where kazoo alone would stop its connection
thread for good.

History lines (JSON, one per line, one file per process, flushed per line so
that a process killed with -9 leaves every invocation it sent):
  conn   {c, conn, sid, ts, host}           a connection (re)established
  expired {c, sid, ts}                      the server said the session is gone
  inv    {id, c, kind, path, args, ts}      an operation invoked
  ret    {id, c, ts, xid, zxid, err, rseq, conn, sid, res, exc}
                                            its completion (ts, xid...: null
                                            when no reply frame came)
  anon   {c, conn, sid, xid, zxid, err, rseq, ts}   a reply to a request the
                                            workload did not record (kazoo's own)
  ev     {c, conn, sid, rseq, ts, type, path}       a notification
  xidbad {c, conn, sid, rseq, ts, got, want, zxid}  a reply out of xid order
"""

import itertools
import json
import os
import threading
import time

from kazoo.client import KazooClient
from kazoo.exceptions import ConnectionDropped, SessionExpiredError
from kazoo.protocol.connection import ConnectionHandler
from kazoo.protocol.serialization import Watch
from kazoo.retry import KazooRetry

_tl = threading.local()
_ids = itertools.count(1)


def now():
    return time.monotonic_ns()


class History:
    """One process's history file; lines from any thread."""

    def __init__(self, path, prefix):
        self.f = open(path, "a", buffering=1)
        self.lock = threading.Lock()
        self.prefix = prefix  # makes op ids unique across processes

    def write(self, rec):
        line = json.dumps(rec, separators=(",", ":"))
        with self.lock:
            self.f.write(line + "\n")

    def close(self):
        with self.lock:
            self.f.close()


class Op:
    __slots__ = ("id", "kind", "path", "ts", "xid", "zxid", "err", "ts_ret", "rseq", "conn", "sid", "aobj")

    def __init__(self, oid, kind, path):
        self.id, self.kind, self.path = oid, kind, path
        self.ts = now()
        self.xid = self.zxid = self.err = self.ts_ret = self.rseq = self.conn = self.sid = None
        self.aobj = None


class RecordingConnection(ConnectionHandler):
    rec = None

    def _connect(self, host, hostip, port):
        try:
            r = super()._connect(host, hostip, port)
        except SessionExpiredError:
            self.rec.on_expired()
            raise
        self.rec.on_connect(host, port)
        return r

    def _read_header(self, timeout):
        header, buffer, offset = super()._read_header(timeout)
        self.rec.on_frame(header, buffer, offset)
        return header, buffer, offset

    def _read_response(self, header, buffer, offset):
        pending = self.client._pending
        want = pending[0][2] if pending else None
        if header.xid != want:
            self.rec.on_xid_mismatch(header, want)
            raise ConnectionDropped("reply xid %r, expected xid %r" % (header.xid, want))
        self.rec.on_reply(pending[0][1], header)
        return super()._read_response(header, buffer, offset)


class RecClient:
    """A KazooClient whose requests and frames are recorded (label: its name
    in the history)."""

    def __init__(self, hist, label, hosts, timeout=6.0):
        self.hist = hist
        self.label = label
        self.c = KazooClient(hosts=hosts, timeout=timeout, randomize_hosts=True,
                             connection_retry=KazooRetry(max_tries=-1, delay=0.05, backoff=1.5, max_delay=0.5))
        conn = RecordingConnection(self.c, self.c._conn_retry.copy(), logger=self.c.logger)
        conn.rec = self
        self.c._connection = conn
        self.inflight = {}
        self.conn_no = 0
        self.sid = None
        self.rseq = 0
        self.last_frame = None  # (rseq, ts) of the frame being read
        orig_call = self.c._call

        def call(request, async_object):
            op = getattr(_tl, "op", None)
            if op is not None:
                op.aobj = async_object
                self.inflight[id(async_object)] = op
            return orig_call(request, async_object)
        self.c._call = call

    # -- reader side (kazoo's connection thread)

    def on_connect(self, host, port):
        self.conn_no += 1
        self.sid = self.c._session_id
        self.hist.write({"t": "conn", "c": self.label, "conn": self.conn_no, "sid": self.sid, "ts": now(),
                         "host": "%s:%s" % (host, port)})

    def on_expired(self):
        self.hist.write({"t": "expired", "c": self.label, "sid": self.c._session_id, "ts": now()})

    def on_frame(self, header, buffer, offset):
        self.rseq += 1
        ts = now()
        self.last_frame = (self.rseq, ts)
        if header.xid == -1:
            try:
                w, _ = Watch.deserialize(buffer, offset)
                typ, path = w.type, w.path
            except Exception:  # recorded as unreadable, kazoo complains itself
                typ, path = None, None
            self.hist.write({"t": "ev", "c": self.label, "conn": self.conn_no, "sid": self.sid,
                             "rseq": self.rseq, "ts": ts, "type": typ, "path": path})

    def on_xid_mismatch(self, header, want):
        rseq, ts = self.last_frame
        self.hist.write({"t": "xidbad", "c": self.label, "conn": self.conn_no, "sid": self.sid, "rseq": rseq,
                         "ts": ts, "got": header.xid, "want": want, "zxid": header.zxid})

    def on_reply(self, aobj, header):
        rseq, ts = self.last_frame
        op = self.inflight.pop(id(aobj), None)
        if op is None:
            self.hist.write({"t": "anon", "c": self.label, "conn": self.conn_no, "sid": self.sid,
                             "xid": header.xid, "zxid": header.zxid, "err": header.err, "rseq": rseq, "ts": ts})
            return
        op.xid, op.zxid, op.err, op.ts_ret, op.rseq = header.xid, header.zxid, header.err, ts, rseq
        op.conn, op.sid = self.conn_no, self.sid

    # -- workload side

    def start(self, timeout=30):
        self.c.start(timeout=timeout)

    def begin(self, kind, path, **args):
        """Records an invocation; the next kazoo *_async call made by this
        thread is its request (use inside `with client.op(...)`)."""
        op = Op("%s-%d" % (self.hist.prefix, next(_ids)), kind, path)
        rec = {"t": "inv", "id": op.id, "c": self.label, "kind": kind, "path": path, "ts": op.ts}
        if args:
            rec["args"] = args
        self.hist.write(rec)
        return op

    def call(self, op, fn, *a, **kw):
        """fn(*a, **kw) (a kazoo *_async method) as op's request."""
        _tl.op = op
        try:
            return fn(*a, **kw)
        finally:
            _tl.op = None

    def finish(self, op, res=None, exc=None):
        """Records op's completion: res (JSON-able) or exc (an exception)."""
        self.inflight.pop(id(op.aobj), None)
        rec = {"t": "ret", "id": op.id, "c": self.label, "ts": op.ts_ret, "xid": op.xid, "zxid": op.zxid,
               "err": op.err, "rseq": op.rseq, "conn": op.conn, "sid": op.sid}
        if exc is not None:
            rec["exc"] = type(exc).__name__
        else:
            rec["res"] = res
        self.hist.write(rec)

    def stop(self):
        try:
            self.c.stop()
            self.c.close()
        except Exception:  # a client that cannot stop is stopped with its process
            pass


def stat_of(st):
    """The Stat fields the checkers use."""
    if st is None:
        return None
    return {"mzxid": st.mzxid, "czxid": st.czxid, "version": st.version, "owner": st.ephemeralOwner,
            "cversion": st.cversion}


def pid_prefix(name):
    return "%s.%d" % (name, os.getpid())
