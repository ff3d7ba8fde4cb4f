"""The fault tests' client workload, with a check that nothing was lost.

Each fault test (issue 7) runs this workload through zkwarden (or direct to
ZooKeeper, as the baseline), injects its fault, and then asks check() for
the list of problems. The workload is several kazoo sessions, each in its own
thread, each owning a subtree under `root`:

  <root>/s<i>/counter   setData with an increasing counter n (data b"<n>")
  <root>/s<i>/seq/c-    persistent sequential creates, data a unique token
  <root>/eph/s<i>       an ephemeral node owned by the session

Each session sends pipelined batches: a few setData, one sequential create,
then getData of the counter and exists of the last acknowledged create. It
records every acknowledged write and checks every reply as it arrives:

- setData versions strictly increase in ack order, sequential create numbers
  strictly increase in ack order (one writer per node, so anything else is a
  reply reordered, duplicated or given to the wrong request);
- a read returns a counter at least as new as the session's last
  acknowledged setData issued before it, and no newer than the last one
  issued (a read never sees the future, nor a stale past);
- exists of the last acknowledged create finds it;
- kazoo's own xid check ("xids do not match") is a problem, not a reconnect;
- a request that gets no reply at all within `reply_timeout` is a hang.

Operations that fail with ConnectionLoss (or SessionExpired) are
indeterminate: they may or may not have been applied and never count as lost.
A session expiry is a reported event (counters["expired"], the state
sequence), not a silent loss: kazoo then opens a new session and the thread
re-creates its ephemeral for it.

check() then reads the server directly (`verify_hosts`, never through
zkwarden): every acknowledged create present with its data, no create applied
twice, no node that the workload did not issue, the counter at least at the
last acknowledged value, and each session's ephemeral present and owned by
the session while the session is alive (and not owned by any expired one).

API: Workload(root, verify_hosts, sessions=4, session_timeout=6.0, ...,
client_kw={more KazooClient arguments, e.g. randomize_hosts=False});
start(hostport), stop(), check() -> [problem strings], check_ephemerals(),
wait_connected(timeout), mark() and wait_reconnected(mark, timeout),
wait_progress(n, timeout), counters (acked, indeterminate, expired,
reconnects, reads, batches), states() -> {session index: [state, ...]},
suspensions() -> {session index: [seconds without a connection, ...]},
session_ids() -> {session index: current session id}.
"""

import logging
import threading
import time

from kazoo.client import KazooClient
from kazoo.exceptions import (ConnectionClosedError, ConnectionLoss, NodeExistsError,
                              NoNodeError, OperationTimeoutError, SessionExpiredError)
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.protocol.states import KazooState
from kazoo.retry import KazooRetry

# Failures after which a write may or may not have been applied.
INDETERMINATE = (ConnectionLoss, SessionExpiredError, ConnectionClosedError,
                 OperationTimeoutError)


class _XidWatch(logging.Handler):
    """Collects kazoo's own complaints about replies out of order."""

    MARKERS = ("xids do not match", "out of order")

    def __init__(self, sink):
        super().__init__(level=logging.DEBUG)
        self.sink = sink

    def emit(self, record):
        try:
            msg = record.getMessage()
        except Exception:  # a malformed log record is not our business
            return
        if record.exc_info and record.exc_info[1] is not None:
            msg += " " + str(record.exc_info[1])
        if any(m in msg for m in self.MARKERS):
            self.sink("kazoo: " + msg)


def _seqno(path):
    return int(path[-10:])


class _Session(threading.Thread):
    def __init__(self, wl, idx):
        super().__init__(name="wl-%s-s%d" % (wl.root, idx), daemon=True)
        self.wl = wl
        self.idx = idx
        self.base = "%s/s%d" % (wl.root, idx)
        self.counter = self.base + "/counter"
        self.seqdir = self.base + "/seq"
        self.eph = "%s/eph/s%d" % (wl.root, idx)
        self.lock = threading.Lock()
        self.client = None
        self.connected = threading.Event()
        self.states = []            # (monotonic time, "CONNECTED"|"SUSPENDED"|"LOST")
        self.sids = []              # every session id this thread has used, in order
        self.eph_sid = None         # the session whose ephemeral is in place
        self.next_n = 0             # next counter value to write
        self.last_n = -1            # last acknowledged counter value
        self.last_version = -1      # its version
        self.last_seq = -1          # last acknowledged sequential create number
        self.last_path = None
        self.ntok = 0
        self.acked = {}             # token -> path of every acknowledged create
        self.issued = set()         # every create token sent
        self.indet = set()          # tokens of creates that ended indeterminate
        self.failed = set()         # tokens of creates that got a definite error
        self.stopping = False

    # -- state

    def _listener(self, state):
        # Runs on kazoo's connection thread: record and return, never block.
        # The LOST of our own close() is not something the session saw.
        if self.stopping:
            return
        now = time.monotonic()
        with self.lock:
            self.states.append((now, str(state)))
        if state == KazooState.CONNECTED:
            self.connected.set()
            with self.wl.lock:
                if len(self.states) > 1:
                    self.wl.counters["reconnects"] += 1
        else:
            self.connected.clear()
            if state == KazooState.LOST and not self.stopping:
                with self.wl.lock:
                    self.wl.counters["expired"] += 1

    def connect(self, hostport):
        c = KazooClient(hosts=hostport, timeout=self.wl.session_timeout,
                        connection_retry=KazooRetry(max_tries=-1, delay=0.05, backoff=1.5,
                                                    max_delay=0.5), **self.wl.client_kw)
        c.add_listener(self._listener)
        self.client = c
        c.start(timeout=30)
        # A fresh root: the checks assume this workload is the only writer.
        c.create(self.counter, b"-1", makepath=True)
        c.create(self.seqdir)
        c.ensure_path(self.wl.root + "/eph")
        self.last_version = c.exists(self.counter).version

    def session_id(self):
        c = self.client
        if c is None or not self.connected.is_set():
            return None
        try:
            return c.client_id[0]
        except TypeError:  # not connected any more
            return None

    # -- the loop

    def run(self):
        try:
            while not self.wl.stop_event.is_set():
                if not self.connected.wait(0.1):
                    continue
                sid = self.session_id()
                if sid is None:
                    continue
                if sid != self.eph_sid and not self._ensure_ephemeral(sid):
                    continue
                self._batch()
                if self.wl.pause:
                    self.wl.stop_event.wait(self.wl.pause)
        except Exception as e:  # a bug in the workload must show, not vanish
            self.wl.problem("s%d: workload thread died: %r" % (self.idx, e))
            logging.getLogger("zkw.faults").exception("workload thread")

    def _ensure_ephemeral(self, sid):
        with self.lock:
            if not self.sids or self.sids[-1] != sid:
                self.sids.append(sid)
        try:
            self.client.create(self.eph, b"%d" % sid, ephemeral=True)
        except NodeExistsError:
            try:
                _, st = self.client.get(self.eph)
            except INDETERMINATE + (NoNodeError,):
                return False
            if st.ephemeralOwner != sid:
                # The node of an expired session goes before its expiry is
                # announced; wait for that rather than flag it at once.
                self.wl.stop_event.wait(0.1)
                return False
        except INDETERMINATE:
            return False
        with self.lock:
            self.eph_sid = sid
        return True

    def _batch(self):
        c = self.client
        wl = self.wl
        ops = []
        for _ in range(wl.sets_per_batch):
            n = self.next_n
            self.next_n += 1
            ops.append(("set", n, c.set_async(self.counter, b"%d" % n)))
        tok = b"s%d-%d" % (self.idx, self.ntok)
        self.ntok += 1
        with self.lock:
            self.issued.add(tok)
        ops.append(("create", tok, c.create_async(self.seqdir + "/c-", tok, sequence=True)))
        ops.append(("get", self.next_n - 1, c.get_async(self.counter)))
        if self.last_path is not None:
            ops.append(("exists", self.last_path, c.exists_async(self.last_path)))
        with wl.lock:
            wl.counters["batches"] += 1
        for kind, arg, res in ops:
            try:
                value = res.get(timeout=wl.reply_timeout)
            except INDETERMINATE:
                if kind == "create":
                    with self.lock:
                        self.indet.add(arg)
                if kind in ("set", "create"):
                    with wl.lock:
                        wl.counters["indeterminate"] += 1
                continue
            except KazooTimeoutError:
                wl.problem("s%d: no reply to %s %r within %.0f s (hang)"
                           % (self.idx, kind, arg, wl.reply_timeout))
                if kind == "create":
                    with self.lock:
                        self.indet.add(arg)
                continue
            except RuntimeError as e:
                wl.problem("s%d: %s %r: reply out of order: %s" % (self.idx, kind, arg, e))
                if kind == "create":
                    with self.lock:
                        self.indet.add(arg)
                continue
            except Exception as e:
                wl.problem("s%d: %s %r failed with an unexpected error: %r"
                           % (self.idx, kind, arg, e))
                if kind == "create":
                    with self.lock:
                        self.failed.add(arg)
                continue
            self._acked(kind, arg, value)

    def _acked(self, kind, arg, value):
        wl = self.wl
        with self.lock:
            if kind == "set":
                if value.version <= self.last_version:
                    wl.problem("s%d: setData %d acked with version %d, not above the last "
                               "acked version %d (reply reordered or duplicated)"
                               % (self.idx, arg, value.version, self.last_version))
                self.last_version = max(self.last_version, value.version)
                self.last_n = arg
            elif kind == "create":
                seq = _seqno(value)
                if seq <= self.last_seq:
                    wl.problem("s%d: create %r acked as %s, not above the last acked "
                               "sequence %d" % (self.idx, arg, value, self.last_seq))
                self.last_seq = max(self.last_seq, seq)
                self.last_path = value
                self.acked[arg] = value
            elif kind == "get":
                data, st = value
                try:
                    v = int(data)
                except ValueError:
                    v = None
                if v is None or not (self.last_n <= v <= arg):
                    wl.problem("s%d: read of the counter returned %r, want between the last "
                               "acked write %d and the last issued %d"
                               % (self.idx, data, self.last_n, arg))
                if st.version < self.last_version:
                    wl.problem("s%d: read of the counter returned version %d, older than the "
                               "acked %d" % (self.idx, st.version, self.last_version))
            elif kind == "exists":
                if value is None:
                    wl.problem("s%d: exists(%s) found nothing, but its create was "
                               "acknowledged" % (self.idx, arg))
        with wl.lock:
            wl.counters["reads" if kind in ("get", "exists") else "acked"] += 1

    def close(self):
        self.stopping = True
        c = self.client
        if c is None:
            return
        try:
            c.stop()
            c.close()
        except Exception:
            logging.getLogger("zkw.faults").exception("closing a workload session")


class Workload:
    """See the module docstring. `verify_hosts` is a kazoo host string for the
    ZooKeeper server(s) themselves: check() reads there, never through the
    proxy under test."""

    def __init__(self, root, verify_hosts, sessions=4, session_timeout=6.0, sets_per_batch=3,
                 pause=0.02, reply_timeout=None, client_kw=None):
        self.root = root.rstrip("/")
        self.verify_hosts = verify_hosts
        self.nsessions = sessions
        self.session_timeout = float(session_timeout)
        self.sets_per_batch = sets_per_batch
        self.pause = pause
        self.client_kw = dict(client_kw or {})  # more KazooClient arguments
        # A reply may wait out a reconnect, but never longer than kazoo's own
        # give-up (session timeout) plus a generous margin.
        self.reply_timeout = reply_timeout or max(20.0, 4 * self.session_timeout)
        self.lock = threading.Lock()
        self.stop_event = threading.Event()
        self.counters = {"acked": 0, "indeterminate": 0, "expired": 0, "reconnects": 0,
                         "reads": 0, "batches": 0}
        self.problems = []
        self.sessions = []
        self.hostport = None
        self._xid = _XidWatch(self.problem)
        self._stopped = False

    def problem(self, msg):
        with self.lock:
            self.problems.append(msg)

    # -- lifecycle

    def start(self, hostport):
        """Opens the sessions on hostport (zkwarden or ZooKeeper) and starts
        their threads; returns once every session is connected and set up."""
        self.hostport = hostport
        logging.getLogger("kazoo").addHandler(self._xid)
        for i in range(self.nsessions):
            s = _Session(self, i)
            self.sessions.append(s)
            s.connect(hostport)
        for s in self.sessions:
            s.start()
        return self

    def stop(self):
        """Stops the threads, checks the ephemerals of the sessions still
        alive, then closes the sessions. Safe to call twice."""
        if self._stopped:
            return
        self._stopped = True
        self.stop_event.set()
        for s in self.sessions:
            s.join(self.reply_timeout + 10)
            if s.is_alive():
                self.problem("s%d: workload thread did not stop (a reply never came)" % s.idx)
        for p in self.check_ephemerals(require_connected=False):
            self.problem(p)
        for s in self.sessions:
            s.close()
        logging.getLogger("kazoo").removeHandler(self._xid)

    def wait_connected(self, timeout):
        """True once every session is connected and has its ephemeral."""
        deadline = time.monotonic() + timeout
        for s in self.sessions:
            while True:
                sid = s.session_id()
                if sid is not None and s.eph_sid == sid:
                    break
                if time.monotonic() >= deadline:
                    return False
                s.connected.wait(0.05)
                time.sleep(0.02)
        return True

    def mark(self):
        """A point in each session's state sequence, for wait_reconnected()."""
        out = {}
        for s in self.sessions:
            with s.lock:
                out[s.idx] = len(s.states)
        return out

    def wait_reconnected(self, mark, timeout):
        """True once every session has lost its connection after `mark`,
        connected again and is set up: a fault that breaks every connection
        is over for the clients (a client may notice the break only after
        the faulty process is already back)."""
        def back():
            for s in self.sessions:
                with s.lock:
                    after = [st for _, st in s.states[mark[s.idx]:]]
                if "SUSPENDED" not in after or after[-1] != "CONNECTED":
                    return False
            return True
        deadline = time.monotonic() + timeout
        while not back():
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.02)
        return self.wait_connected(max(0.0, deadline - time.monotonic()))

    def wait_progress(self, acked, timeout):
        """Waits until `acked` more writes have been acknowledged."""
        target = self.counters["acked"] + acked
        deadline = time.monotonic() + timeout
        while self.counters["acked"] < target:
            if time.monotonic() >= deadline or not any(s.is_alive() for s in self.sessions):
                return False
            time.sleep(0.02)
        return True

    # -- what the sessions saw

    def states(self):
        out = {}
        for s in self.sessions:
            with s.lock:
                out[s.idx] = [st for _, st in s.states]
        return out

    def session_ids(self):
        return {s.idx: s.session_id() for s in self.sessions}

    def suspensions(self):
        """{session index: [seconds from each SUSPENDED to the next
        CONNECTED]}: how long each session was without a connection."""
        out = {}
        for s in self.sessions:
            with s.lock:
                seq = list(s.states)
            spans, since = [], None
            for t, st in seq:
                if st == "SUSPENDED" and since is None:
                    since = t
                elif st == "CONNECTED" and since is not None:
                    spans.append(t - since)
                    since = None
            out[s.idx] = spans
        return out

    def all_session_ids(self):
        """Every session id used, per session index, in order."""
        out = {}
        for s in self.sessions:
            with s.lock:
                out[s.idx] = list(s.sids)
        return out

    def snapshot(self):
        with self.lock:
            return dict(self.counters)

    # -- checks

    def _verifier(self):
        c = KazooClient(hosts=self.verify_hosts, timeout=10.0,
                        connection_retry=KazooRetry(max_tries=-1, delay=0.05, backoff=1.5,
                                                    max_delay=0.5))
        c.start(timeout=30)
        return c

    def check_ephemerals(self, require_connected=True):
        """Reads each session's ephemeral from the server: owned by the
        session while it is alive (its thread has set it up and the session
        is connected), never owned by an expired session of the workload."""
        problems = []
        v = self._verifier()
        try:
            for s in self.sessions:
                with s.lock:
                    sids = list(s.sids)
                    eph_sid = s.eph_sid
                sid = s.session_id()
                v.sync(s.eph)
                st = v.exists(s.eph)
                owner = st.ephemeralOwner if st else None
                if sid is not None and sid == eph_sid:
                    # Re-read the session id: it must not have changed while
                    # we looked (an expiry in between is not a loss).
                    if owner != sid and s.session_id() == sid:
                        problems.append("s%d: ephemeral %s owned by %s, want the live session "
                                        "0x%x" % (s.idx, s.eph,
                                                  "nobody" if owner is None else "0x%x" % owner,
                                                  sid))
                elif require_connected:
                    problems.append("s%d: session not connected at the check" % s.idx)
                old = [x for x in sids if x != sid]
                if owner is not None and owner in old and owner != s.session_id():
                    problems.append("s%d: ephemeral %s still owned by the expired session 0x%x"
                                    % (s.idx, s.eph, owner))
        finally:
            v.stop()
            v.close()
        return problems

    def check(self):
        """Every problem seen: those found while running, plus what the
        server holds (read directly). Call after stop() for the full check;
        on a running workload it checks only what cannot race with it."""
        problems = list(self.problems)
        done = self._stopped
        v = self._verifier()
        try:
            for s in self.sessions:
                with s.lock:
                    acked = dict(s.acked)
                    indet = set(s.indet)
                    last_n, last_version = s.last_n, s.last_version
                v.sync(s.seqdir)
                seen = {}
                for child in v.get_children(s.seqdir):
                    path = s.seqdir + "/" + child
                    try:
                        data, _ = v.get(path)
                    except NoNodeError:
                        problems.append("s%d: %s vanished while checking" % (s.idx, path))
                        continue
                    seen.setdefault(data, []).append(path)
                for tok, path in sorted(acked.items()):
                    paths = seen.get(tok, [])
                    if path not in paths:
                        problems.append("s%d: acknowledged create %s (%r) is not on the server "
                                        "(lost)" % (s.idx, path, tok))
                with s.lock:
                    issued = set(s.issued)
                for tok, paths in sorted(seen.items()):
                    if len(paths) > 1:
                        problems.append("s%d: create %r applied %d times: %s"
                                        % (s.idx, tok, len(paths), sorted(paths)))
                    if tok not in issued:
                        problems.append("s%d: %s holds %r, which the workload never sent"
                                        % (s.idx, paths[0], tok))
                    elif done and tok not in acked and tok not in indet:
                        problems.append("s%d: create %r was applied (%s) but its reply said it "
                                        "failed" % (s.idx, tok, paths[0]))
                data, st = v.get(s.counter)
                try:
                    value = int(data)
                except ValueError:
                    value = None
                if value is None or value < last_n:
                    problems.append("s%d: counter holds %r, older than the last acknowledged "
                                    "write %d (lost)" % (s.idx, data, last_n))
                if st.version < last_version:
                    problems.append("s%d: counter at version %d, below the acknowledged %d"
                                    % (s.idx, st.version, last_version))
        finally:
            v.stop()
            v.close()
        if not done:
            problems += self.check_ephemerals(require_connected=False)
        return problems

    def summary(self):
        c = self.snapshot()
        return ("acked=%(acked)d indeterminate=%(indeterminate)d reads=%(reads)d "
                "expired=%(expired)d reconnects=%(reconnects)d batches=%(batches)d" % c)
