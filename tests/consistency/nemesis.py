"""The consistency test's nemesis: faults injected while the workloads run,
drawn from a seeded generator and written down with their times.

The faults are plugins (class Fault): each has a kind, a lane and apply().
Two lanes run side by side: the server lane (one ZooKeeper server fault at a
time, each ended and the full quorum back before the next) and the client
lane (clients paused, a JobManager restarted, zkwarden itself restarted).
A fault acts on every run of the test at once (direct and through zkwarden
share the ensemble), so both see the same faults at the same moments.

Kinds (FAULTS):
  kill9          kill -9 of a server (the leader half of the time), restarted
  sigterm        SIGTERM of a server (the leader half of the time), restarted
  pause          a server paused (SIGSTOP) past the clients' read timeout,
                 then SIGCONT; the leader half of the time
  client_pause   every client process of the workload paused (SIGSTOP) for
                 1-3 s, shorter than the session timeout, then SIGCONT
  jm_restart     each run's JobManager killed with -9 (its connection dropped
                 without closeSession) and a new one started: a new session,
                 a new incarnation (zkwarden fences the old one)
  zkwarden_restart  zkwarden replaced by a new process (issue 37): under
                 its keeper (zkwarden-keeper beside the binary) a kill -9 of
                 the serving process or a planned restart (SIGUSR2), at
                 random; without one `zkwarden --takeover`. Enabled only
                 when the binary's --help mentions --takeover
Session moves are not a fault of their own: zkwarden moves sessions when their
server goes away (kill9, sigterm, pause); the report counts them.
"""

import os
import signal
import threading
import time


class Fault:
    kind = None
    lane = None

    def enabled(self, ctx):
        return True

    def apply(self, ctx, rng):
        """Injects and ends the fault; returns a short description."""
        raise NotImplementedError


def _pick_server(ctx, rng):
    """(index, 'leader'|'follower') of a running member: the leader half of the time."""
    leader = ctx.ensemble.leader()
    if leader is not None and rng.random() < 0.5:
        return leader, "leader"
    others = [i for i, s in enumerate(ctx.ensemble.servers) if s.alive() and i != leader]
    if not others:
        return leader, "leader"
    return rng.choice(others), "follower"


class ServerFault(Fault):
    lane = "server"

    def heal(self, ctx, i):
        srv = ctx.ensemble.servers[i]
        srv.start(wait=False)
        ctx.ensemble.wait_quorum(120)


class ServerStop(ServerFault):
    """A server stopped (stop: its method on zkharness.ZkServer), down for a
    while (down: seconds, low and high), started again."""
    stop = down = None

    def apply(self, ctx, rng):
        i, role = _pick_server(ctx, rng)
        getattr(ctx.ensemble.servers[i], self.stop)()
        time.sleep(rng.uniform(*self.down))
        self.heal(ctx, i)
        return "server %d (%s)" % (i + 1, role)


class Kill9(ServerStop):
    kind, stop, down = "kill9", "kill", (0.5, 2.0)


class Sigterm(ServerStop):
    kind, stop, down = "sigterm", "stop", (0.2, 1.0)


class Pause(ServerFault):
    kind = "pause"

    def apply(self, ctx, rng):
        i, role = _pick_server(ctx, rng)
        srv = ctx.ensemble.servers[i]
        secs = ctx.session_timeout * 2.0 / 3.0 + rng.uniform(0.5, 1.0)  # past the read timeout
        srv.pause()
        time.sleep(secs)
        srv.resume()
        ctx.ensemble.wait_quorum(120)
        return "server %d (%s) for %.1f s" % (i + 1, role, secs)


class ClientPause(Fault):
    kind = "client_pause"
    lane = "client"

    def apply(self, ctx, rng):
        secs = rng.uniform(1.0, 3.0)
        with_jm = rng.random() < 0.5
        pids = ctx.client_pids(with_jm)
        for pid in pids:
            _signal(pid, signal.SIGSTOP)
        time.sleep(secs)
        for pid in pids:
            _signal(pid, signal.SIGCONT)
        return "%d client processes%s for %.1f s" % (len(pids), " (JobManagers too)" if with_jm else "", secs)


class JmRestart(Fault):
    kind = "jm_restart"
    lane = "client"

    def apply(self, ctx, rng):
        incs = ctx.restart_jobmanagers()
        return "JobManagers restarted (kill -9, new session): incarnation %s" % incs


class ZkwardenRestart(Fault):
    kind = "zkwarden_restart"
    lane = "client"

    def enabled(self, ctx):
        return ctx.zkwarden_takeover_supported()

    def apply(self, ctx, rng):
        return ctx.restart_zkwarden(rng)


FAULTS = [Kill9(), Sigterm(), Pause(), ClientPause(), JmRestart(), ZkwardenRestart()]


def _signal(pid, sig):
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass


class Nemesis:
    """Runs the enabled faults in their lanes until done() is true; each lane
    goes through its kinds in a shuffled order, round after round, with a
    random gap between faults."""

    def __init__(self, ctx, rng, faults=None, gap=(0.5, 2.0)):
        self.ctx = ctx
        self.rng = rng
        self.faults = [f for f in (faults or FAULTS) if f.enabled(ctx)]
        self.gap = gap
        self.log = []
        self.lock = threading.Lock()
        self.errors = []

    def kinds(self):
        return [f.kind for f in self.faults]

    def counts(self):
        with self.lock:
            out = {f.kind: 0 for f in self.faults}
            for e in self.log:
                out[e["kind"]] += 1
            return out

    def _lane(self, name, faults, rng, done):
        order = []
        while not done():
            if not order:
                order = list(faults)
                rng.shuffle(order)
            f = order.pop()
            t = time.monotonic()
            try:
                what = f.apply(self.ctx, rng)
            except Exception as e:  # a fault that cannot be injected or healed ends the run as failed
                self.errors.append("%s: %r" % (f.kind, e))
                return
            entry = {"kind": f.kind, "lane": name, "t": round(t - self.ctx.t_start, 2),
                     "took": round(time.monotonic() - t, 2), "what": what}
            with self.lock:
                self.log.append(entry)
            print("nemesis: %6.1f s  %-16s %s (%.1f s)" % (entry["t"], f.kind, what, entry["took"]), flush=True)
            end = time.monotonic() + rng.uniform(*self.gap)
            while time.monotonic() < end and not done():
                time.sleep(0.05)

    def run(self, done):
        lanes = {}
        for f in self.faults:
            lanes.setdefault(f.lane, []).append(f)
        threads = []
        for name, faults in sorted(lanes.items()):
            rng = type(self.rng)(self.rng.random())
            th = threading.Thread(target=self._lane, args=(name, faults, rng, lambda: done() or self.errors),
                                  name="nemesis-" + name, daemon=True)
            th.start()
            threads.append(th)
        for th in threads:
            th.join()
        return self.log
