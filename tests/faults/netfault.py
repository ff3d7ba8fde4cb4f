"""A fault-injecting TCP relay for the partition tests (issue 7, faults 3
and 4): it listens on 127.0.0.1, forwards every connection to one target
host:port, and can be switched at run time between

- "pass":  bytes flow both ways;
- "drop":  a blackhole, as a lost network: every connection stays open but
  nothing is forwarded in either direction (the relay stops reading, so what
  the peers send waits in the kernel buffers as unacknowledged data waits
  for a retransmission); new connections are accepted and held without a
  connection to the target. The peers see timeouts, never a reset. Back in
  "pass", held bytes flow again (and a held connection is connected to the
  target then), as TCP delivers after a partition heals, unless a peer gave
  up and closed in the meantime;
- "reset": every connection is closed with a RST on both sides (SO_LINGER 0),
  and new ones are reset as soon as they are accepted;
- "mute": what clients send flows to the target, what the target answers
  is held (a server that took a request and has not answered yet); a
  client's close still reaches the target. Back in "pass", held answers
  flow.

Why a relay and not iptables or network namespaces: it needs no privilege,
keeps every packet on loopback, and behaves the same on any CI machine.

The relay runs in a thread of the test process (selectors, non-blocking
sockets); start() and stop() belong to the test. Everything stays on
127.0.0.1.
"""

import errno
import os
import selectors
import socket
import struct
import threading
import time

HOST = "127.0.0.1"
MODES = ("pass", "drop", "reset", "mute")
_CHUNK = 65536
_HIGH_WATER = 1 << 20  # stop reading a side while its peer has this much unsent


def _rst_close(sock):
    """Closes a socket so that the peer gets a RST, not a FIN."""
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    except OSError:
        pass
    try:
        sock.close()
    except OSError:
        pass


class _Pair:
    """One accepted connection and its connection to the target."""

    def __init__(self, relay, client):
        self.relay = relay
        self.client = client
        self.upstream = None
        self.connecting = False
        self.to_client = bytearray()
        self.to_upstream = bytearray()
        self.client_eof = False
        self.upstream_eof = False
        self.closed = False

    def open_upstream(self):
        u = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        u.setblocking(False)
        u.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        rc = u.connect_ex(self.relay.target)
        if rc not in (0, errno.EINPROGRESS):
            u.close()
            self.close(reset=True)
            return
        self.upstream = u
        self.connecting = rc != 0

    def close(self, reset):
        self.relay._close_pair(self, reset)


class Relay:
    """The relay. Typical use:

        r = Relay(("127.0.0.1", server_port)).start()
        ... connect to r.port ...
        r.set_mode("drop"); ...; r.set_mode("pass")
        r.stop()
    """

    def __init__(self, target, name="relay"):
        if isinstance(target, str):
            host, port = target.rsplit(":", 1)
            target = (host, int(port))
        assert target[0] == HOST, "traffic stays on loopback"
        self.target = (target[0], int(target[1]))
        self.name = name
        self.mode = "pass"
        self.accepted = 0
        self.resets = 0
        self._pairs = []
        self._lock = threading.Lock()
        self._pending_mode = None
        self._stopping = False
        self._thread = None
        self._sel = selectors.DefaultSelector()
        self._listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._listener.bind((HOST, 0))
        self._listener.listen(512)
        self._listener.setblocking(False)
        self.port = self._listener.getsockname()[1]
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        os.set_blocking(self._wake_w, False)
        self._error = None

    @property
    def hostport(self):
        return "%s:%d" % (HOST, self.port)

    def __repr__(self):
        return "Relay(%s %s -> %s:%d)" % (self.name, self.hostport, self.target[0], self.target[1])

    # ------------------------------------------------------------ control

    def start(self):
        self._thread = threading.Thread(target=self._run, name="netfault-%s" % self.name, daemon=True)
        self._thread.start()
        return self

    def set_mode(self, mode, timeout=5.0):
        """Switches the mode; returns once the relay thread has applied it."""
        assert mode in MODES, mode
        done = threading.Event()
        with self._lock:
            self._pending_mode = (mode, done)
        self._wake()
        if not done.wait(timeout):
            raise RuntimeError("%r did not switch to %s within %ss" % (self, mode, timeout))
        if self._error:
            raise RuntimeError("%r failed: %s" % (self, self._error))

    def connections(self):
        """Open connections (accepted and not yet closed)."""
        with self._lock:
            return sum(1 for p in self._pairs if not p.closed)

    def held_to_client(self):
        """Bytes the target sent that the connecting side has not taken yet
        (over 1 MiB: the relay stopped reading the target, so that side is
        not reading)."""
        with self._lock:
            return sum(len(p.to_client) for p in self._pairs if not p.closed)

    def stop(self):
        """Stops the thread and closes the listener and every connection."""
        if self._thread is None:
            return
        self._stopping = True
        self._wake()
        self._thread.join(10)
        self._thread = None
        os.close(self._wake_r)
        os.close(self._wake_w)
        if self._error:
            raise RuntimeError("%r failed: %s" % (self, self._error))

    def _wake(self):
        try:
            os.write(self._wake_w, b"x")
        except (BlockingIOError, OSError):
            pass

    # ------------------------------------------------------------ the loop

    def _run(self):
        try:
            self._loop()
        except Exception as e:  # reported by set_mode/stop
            self._error = "%s: %s" % (type(e).__name__, e)
        finally:
            for p in list(self._pairs):
                self._close_pair(p, reset=False)
            try:
                self._sel.close()
            except Exception:
                pass
            self._listener.close()

    def _loop(self):
        while not self._stopping:
            self._apply_pending_mode()
            self._register_all()
            for key, ev in self._sel.select(timeout=0.5):
                what = key.data
                if what == "wake":
                    try:
                        while os.read(self._wake_r, 4096):
                            pass
                    except BlockingIOError:
                        pass
                elif what == "listen":
                    self._accept()
                else:
                    pair, side = what
                    if not pair.closed:
                        self._io(pair, side, ev)
            with self._lock:
                self._pairs = [p for p in self._pairs if not p.closed]

    def _apply_pending_mode(self):
        with self._lock:
            pending, self._pending_mode = self._pending_mode, None
        if pending is None:
            return
        mode, done = pending
        self.mode = mode
        if mode == "reset":
            for p in list(self._pairs):
                self._close_pair(p, reset=True)
                self.resets += 1
        elif mode in ("pass", "mute"):
            # Held connections reach the target now, as a SYN retransmitted
            # after the partition healed would.
            for p in self._pairs:
                if not p.closed and p.upstream is None:
                    p.open_upstream()
        done.set()

    def _accept(self):
        while True:
            try:
                c, _ = self._listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as e:
                if e.errno in (errno.EMFILE, errno.ENFILE):
                    return
                raise
            self.accepted += 1
            if self.mode == "reset":
                _rst_close(c)
                self.resets += 1
                continue
            c.setblocking(False)
            c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            pair = _Pair(self, c)
            with self._lock:
                self._pairs.append(pair)
            if self.mode in ("pass", "mute"):
                pair.open_upstream()

    def _register_all(self):
        """Recomputes what every socket waits for, from the mode and the
        buffers (the selector is rebuilt each turn: a few sockets only)."""
        for key in list(self._sel.get_map().values()):
            self._sel.unregister(key.fileobj)
        self._sel.register(self._wake_r, selectors.EVENT_READ, "wake")
        self._sel.register(self._listener, selectors.EVENT_READ, "listen")
        if self.mode not in ("pass", "mute"):
            return  # drop: nothing moves; reset: nothing is left
        mute = self.mode == "mute"
        for p in self._pairs:
            if p.closed or p.upstream is None:
                continue
            ev_c = ev_u = 0
            if p.connecting:
                ev_u = selectors.EVENT_WRITE
            else:
                if not p.client_eof and len(p.to_upstream) < _HIGH_WATER:
                    ev_c |= selectors.EVENT_READ
                if not mute and not p.upstream_eof and len(p.to_client) < _HIGH_WATER:
                    ev_u |= selectors.EVENT_READ
                if p.to_upstream:
                    ev_u |= selectors.EVENT_WRITE
                if p.to_client and not mute:
                    ev_c |= selectors.EVENT_WRITE
            if ev_c:
                self._sel.register(p.client, ev_c, (p, "client"))
            if ev_u:
                self._sel.register(p.upstream, ev_u, (p, "upstream"))

    def _io(self, p, side, ev):
        try:
            if side == "upstream" and p.connecting:
                err = p.upstream.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
                if err:
                    # The target refused: the client sees a reset, as it
                    # would connecting to a closed port.
                    self._close_pair(p, reset=True)
                    return
                p.connecting = False
                return
            sock = p.client if side == "client" else p.upstream
            if ev & selectors.EVENT_READ:
                data = sock.recv(_CHUNK)
                if not data:
                    if side == "client":
                        p.client_eof = True
                    else:
                        p.upstream_eof = True
                elif side == "client":
                    p.to_upstream += data
                else:
                    p.to_client += data
            if ev & selectors.EVENT_WRITE:
                buf = p.to_client if side == "client" else p.to_upstream
                if buf:
                    n = sock.send(buf)
                    del buf[:n]
            # A side that ended: once what it sent is delivered, end the
            # whole pair (ZooKeeper never half-closes).
            if (p.client_eof and not p.to_upstream) or (p.upstream_eof and not p.to_client):
                self._close_pair(p, reset=False)
        except (BlockingIOError, InterruptedError):
            return
        except (ConnectionResetError, BrokenPipeError):
            self._close_pair(p, reset=True)  # pass the reset on
        except OSError:
            self._close_pair(p, reset=True)

    def _close_pair(self, p, reset):
        if p.closed:
            return
        p.closed = True
        for s in (p.client, p.upstream):
            if s is None:
                continue
            try:
                self._sel.unregister(s)
            except (KeyError, ValueError):
                pass
            if reset:
                _rst_close(s)
            else:
                try:
                    s.close()
                except OSError:
                    pass


def wait_connections(relay, pred, timeout=10.0):
    """Waits until pred(relay.connections()) holds; returns the count."""
    deadline = time.monotonic() + timeout
    while True:
        n = relay.connections()
        if pred(n):
            return n
        if time.monotonic() > deadline:
            raise TimeoutError("%r: %d connections" % (relay, n))
        time.sleep(0.02)
