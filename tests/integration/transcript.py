"""Normalized transcripts: an ordered list of (label, value) pairs in which
everything that differs between two runs of the same workload (zxids, times,
session ids, the root path) is removed or replaced by a stable token."""

import hashlib
import threading
import time


def digest(data):
    return hashlib.sha256(data).hexdigest()[:16]


class Transcript:
    def __init__(self, root):
        self.root = root
        self.entries = []
        self.labels = set()
        self.self_sid = None     # session id that counts as "self" in ephemeralOwner
        self._lock = threading.Lock()
        self._events = {}
        self._cond = threading.Condition(self._lock)

    # -------- normalization
    def path(self, p):
        if isinstance(p, str) and self.root and p.startswith(self.root):
            return "R" + p[len(self.root):]
        return p

    def stat(self, st):
        owner = st.ephemeralOwner
        if owner == 0:
            eph = "none"
        elif self.self_sid is not None and owner == self.self_sid:
            eph = "self"
        else:
            eph = "other"
        return {"version": st.version, "cversion": st.cversion, "aversion": st.aversion,
                "dataLength": st.dataLength, "numChildren": st.numChildren, "eph": eph}

    def norm(self, v):
        from kazoo.exceptions import KazooException
        from kazoo.protocol.states import ZnodeStat, WatchedEvent
        from kazoo.security import ACL
        if v is None or isinstance(v, (bool, int, float)):
            return v
        if isinstance(v, str):
            return self.path(v)
        if isinstance(v, (bytes, bytearray)):
            v = bytes(v)
            if len(v) > 64:
                return "<%d bytes sha256:%s>" % (len(v), digest(v))
            return v.decode("utf-8", "backslashreplace")
        if isinstance(v, ZnodeStat):
            return self.stat(v)
        if isinstance(v, ACL):
            return (v.perms, v.id.scheme, v.id.id)
        if isinstance(v, WatchedEvent):
            return (v.type, v.state, self.path(v.path))
        if isinstance(v, (KazooException, Exception)):
            return "!" + type(v).__name__
        if isinstance(v, (list, tuple)):
            return type(v)(self.norm(x) for x in v) if isinstance(v, list) \
                else tuple(self.norm(x) for x in v)
        if isinstance(v, dict):
            return {k: self.norm(x) for k, x in v.items()}
        return repr(v)

    # -------- recording
    def add(self, label, value, raw=False):
        assert label not in self.labels, "duplicate transcript label %s" % label
        self.labels.add(label)
        self.entries.append((label, value if raw else self.norm(value)))
        return value

    def step(self, label, fn, *args, **kw):
        """Run fn; record its normalized result, or '!ExceptionName'."""
        from kazoo.exceptions import KazooException
        try:
            v = fn(*args, **kw)
        except KazooException as e:
            self.add(label, "!" + type(e).__name__, raw=True)
            return e
        self.add(label, v)
        return v

    # -------- watch events
    def watcher(self, name):
        """A kazoo watch callback that files its events under `name`."""
        with self._lock:
            self._events.setdefault(name, [])

        def cb(event):
            with self._cond:
                self._events[name].append(event)
                self._cond.notify_all()
        return cb

    def wait_events(self, name, n, timeout=10.0):
        deadline = time.monotonic() + timeout
        with self._cond:
            while len(self._events[name]) < n:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._cond.wait(left)
            return list(self._events[name])

    def record_events(self, label, name, n, timeout=10.0):
        evs = self.wait_events(name, n, timeout)
        return self.add(label, evs)

    def as_dict(self):
        return dict(self.entries)
