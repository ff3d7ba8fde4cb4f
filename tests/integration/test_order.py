"""Order as direct, and bounded memory, through a reclaim (issue 35, items 2
and 4).

Direct, a session's requests execute in the order the client sent them and
every reply is the server's, with zxids that never go down. A reclaim used to
break that: a lock create that met a stale lock was withheld and replayed
after the requests pipelined behind it had executed (9 zxid regressions in
the issue's measurement), and the replies behind it were held in memory
without bound (+250 MiB for 100 reads of a 1 MB node).

Now a lock create's NODEEXISTS reaches the JobManager as the server sent it
(Flink takes it as "held") and zkwarden replaces the stale lock with the
JobManager's own behind it; a delete under the lock roots is a barrier: the
requests after it wait for its answer, so its replay executes before them.
Each test runs direct (the reference) and through zkwarden, records every
reply's xid and zxid, and checks the order; the memory tests measure
zkwarden's peak RSS while 200 pipelined reads of a 1,000,000-byte node follow
a reclaim.
"""
import os
import time

import pytest

from checkpoints import forged_tag, new_uuid
from test_slow_clients import ASAN_SMALL_QUARANTINE, proc_kib
from zkharness import wait_until

IDENTITY = "jm-order"
WRITES = 5
SEQUENTIAL = 3


def spy_replies(client):
    """Records (xid, zxid, err) of every reply header the kazoo client reads
    for a request of its own (xid > 0), in the order they arrive."""
    seen = []
    conn = client._connection
    read = conn._read_header

    def spy(timeout):
        header, buf, offset = read(timeout)
        if header.xid > 0:
            seen.append((header.xid, header.zxid, header.err))
        return header, buf, offset
    conn._read_header = spy
    return seen


def jobmanager(kind, zk, zkwarden_factory, kazoo_factory, **env):
    """The JobManager's client (its latch begins the incarnation through
    zkwarden), and the sidecar (None direct)."""
    proxy = None
    hostport = zk.hostport
    if kind == "zkwarden":
        full = {"ZKWARDEN_MODE": "sidecar", "ZKWARDEN_IDENTITY": IDENTITY, "ZKWARDEN_SWEEP_INTERVAL_S": "0"}
        full.update(env)
        proxy = zkwarden_factory.start(zk, extra_env=full)
        hostport = proxy.hostport
    jm = kazoo_factory(hostport, timeout=30)
    jm.create("/flink/order/leader/latch/_c_%s-latch-" % new_uuid(), b"", ephemeral=True, sequence=True,
              makepath=True)
    return jm, proxy


def assert_in_order(replies):
    xids = [x for x, _, _ in replies]
    zxids = [z for _, z, _ in replies]
    assert xids == sorted(xids), "replies out of xid order: %s" % replies
    assert zxids == sorted(zxids), "reply zxids went down: %s" % replies


def pipeline_after(jm, first, root):
    """first() then, without waiting, WRITES setData of a register,
    SEQUENTIAL sequential creates and an exists: all in flight at once.
    Returns the async results, first's first."""
    results = [first()]
    for i in range(WRITES):
        results.append(jm.set_async(root + "/reg", b"v%d" % i))
    for _ in range(SEQUENTIAL):
        results.append(jm.create_async(root + "/seq-", b"", sequence=True))
    results.append(jm.exists_async(root + "/reg"))
    return results


@pytest.mark.parametrize("kind", ["direct", "zkwarden"])
def test_lock_create_on_a_stale_lock_keeps_the_servers_order(kind, private_zk, zkwarden_factory,
                                                              kazoo_factory):
    """A lock create that meets a stale lock of an earlier incarnation,
    pipelined with writes, sequential creates and an exists: every reply in
    xid order with zxids that never go down, the create's NODEEXISTS as the
    server sent it; through zkwarden the lock then belongs to the JobManager
    (direct it stays the dead incarnation's)."""
    root = "/flink/order/c-%s" % new_uuid()[:8]
    locks = root + "/jobs/%s/checkpoints/%019d/locks" % ("a" * 32, 1)
    lock = "%s/%s" % (locks, new_uuid())
    old = kazoo_factory(private_zk.hostport)
    old.create(lock, forged_tag(IDENTITY, 0), ephemeral=True, makepath=True)
    jm, proxy = jobmanager(kind, private_zk, zkwarden_factory, kazoo_factory)
    jm.ensure_path(root + "/reg")
    seen = spy_replies(jm)
    results = pipeline_after(jm, lambda: jm.create_async(lock, b"127.0.0.1", ephemeral=True), root)
    from kazoo.exceptions import NodeExistsError
    with pytest.raises(NodeExistsError):  # what the server said; Flink: "I hold it"
        results[0].get(timeout=10)
    stats = [r.get(timeout=10) for r in results[1:]]
    assert len(seen) == 1 + WRITES + SEQUENTIAL + 1, seen
    assert_in_order(seen)
    assert [s.version for s in stats[:WRITES]] == list(range(1, WRITES + 1))
    owner = jm.exists(lock).ephemeralOwner
    if kind == "direct":
        assert owner == old.client_id[0]  # the stale lock stays; it vanishes with its session
        return
    wait_until(lambda: jm.exists(lock).ephemeralOwner == jm.client_id[0], 10,
               what="the stale lock replaced by the JobManager's own")
    assert proxy.metric("zkwarden_reclaims_at_create_total") == 1
    old.stop()  # the dead incarnation's session ends: the JobManager keeps its lock
    assert jm.exists(lock).ephemeralOwner == jm.client_id[0]
    assert jm.get(lock)[0] == b"127.0.0.1"  # its own bytes, the tag hidden


@pytest.mark.parametrize("kind", ["direct", "zkwarden"])
def test_lock_delete_on_stale_locks_runs_before_the_requests_after_it(kind, private_zk, zkwarden_factory,
                                                                     kazoo_factory):
    """A delete of a checkpoint's `locks` node that meets a stale lock,
    pipelined with writes: through zkwarden the stale lock is deleted and the
    delete replayed before any of the writes behind it execute (their mzxid
    is above the delete's zxid), and every reply comes in order with zxids
    that never go down. Direct the delete gets NOTEMPTY."""
    root = "/flink/order/d-%s" % new_uuid()[:8]
    locks = root + "/jobs/%s/checkpoints/%019d/locks" % ("b" * 32, 1)
    old = kazoo_factory(private_zk.hostport)
    old.create("%s/%s" % (locks, new_uuid()), forged_tag(IDENTITY, 0), ephemeral=True, makepath=True)
    jm, proxy = jobmanager(kind, private_zk, zkwarden_factory, kazoo_factory)
    jm.ensure_path(root + "/reg")
    seen = spy_replies(jm)
    results = pipeline_after(jm, lambda: jm.delete_async(locks), root)
    if kind == "direct":
        from kazoo.exceptions import NotEmptyError
        with pytest.raises(NotEmptyError):
            results[0].get(timeout=10)
    else:
        results[0].get(timeout=10)
    stats = [r.get(timeout=10) for r in results[1:]]
    assert len(seen) == 1 + WRITES + SEQUENTIAL + 1, seen
    assert_in_order(seen)
    assert (jm.exists(locks) is None) == (kind == "zkwarden")
    delete_zxid = seen[0][1]
    assert all(s.mzxid > delete_zxid for s in stats[:WRITES]), \
        "a write behind the delete executed before it: delete zxid %d, writes %s" % (
            delete_zxid, [s.mzxid for s in stats[:WRITES]])
    if proxy:
        assert proxy.metric("zkwarden_reclaims_at_delete_total") == 1
        assert proxy.metric("zkwarden_lock_delete_waits_total") == 1


BIG = 1000 * 1000  # a node near jute.maxbuffer (1 MiB - 1 for the whole request)
READS = 200
PEAK_GROWTH_KIB = 16 * 1024


@pytest.mark.zkwarden
@pytest.mark.parametrize("step", ["create", "delete"])
def test_reads_behind_a_reclaim_are_not_held(step, private_zk, zkwarden_factory, kazoo_factory):
    """A reclaim (at create or at delete) followed by 200 pipelined reads of
    a 1,000,000-byte node: zkwarden's peak RSS grows by less than 16 MiB
    (it held every reply behind a reclaim: +250 MiB for 100 such reads), and
    every reply arrives, in order."""
    root = "/flink/order/m-%s" % new_uuid()[:8]
    locks = root + "/jobs/%s/checkpoints/%019d/locks" % ("c" * 32, 1)
    lock = "%s/%s" % (locks, new_uuid())
    old = kazoo_factory(private_zk.hostport)
    old.create(lock, forged_tag(IDENTITY, 0), ephemeral=True, makepath=True)
    old.create(root + "/big", os.urandom(BIG))
    jm, proxy = jobmanager("zkwarden", private_zk, zkwarden_factory, kazoo_factory,
                           ASAN_OPTIONS=ASAN_SMALL_QUARANTINE)
    pid = proxy.proc.pid
    assert len(jm.get(root + "/big")[0]) == BIG  # the relay's buffers have had a big frame once
    base = proc_kib(pid, "VmHWM")
    seen = spy_replies(jm)
    if step == "create":
        first = jm.create_async(lock, b"127.0.0.1", ephemeral=True)
    else:
        first = jm.delete_async(locks)
    reads = [jm.get_async(root + "/big") for _ in range(READS)]
    t0 = time.monotonic()
    if step == "create":
        from kazoo.exceptions import NodeExistsError
        with pytest.raises(NodeExistsError):
            first.get(timeout=60)
    else:
        first.get(timeout=60)
    assert all(len(r.get(timeout=60)[0]) == BIG for r in reads)
    peak = proc_kib(pid, "VmHWM")
    print("%s: %d reads of %d bytes behind a reclaim in %.1f s: zkwarden's peak RSS %d -> %d KiB"
          % (step, READS, BIG, time.monotonic() - t0, base, peak))
    assert len(seen) == 1 + READS
    assert_in_order(seen)
    assert peak - base < PEAK_GROWTH_KIB, "peak RSS grew by %d KiB" % (peak - base)
    metric = "zkwarden_reclaims_at_%s_total" % step
    wait_until(lambda: proxy.metric(metric) == 1, 10, what=metric)


CAP = 4 * 1024 * 1024
SLOW_SESSIONS = 12
SLOW_READS = 6


@pytest.mark.zkwarden
def test_all_buffers_together_stay_under_the_process_bound(private_zk, zkwarden_factory, kazoo_factory):
    """ZKWARDEN_MAX_BUFFERED_BYTES bounds what all connections buffer
    together: 12 clients each pipeline 6 reads of a 1,000,000-byte node and
    read nothing (72 MB of replies). Each connection alone stays under its
    own bound (1 MiB queued to its client, one frame read), which together
    come to 38 MB here; with a 4 MiB bound they stay within it plus the frame
    each connection was writing (12.8 MB), the process says so (the metric
    and one warn line), and once the clients read every reply arrives, in
    order."""
    import rawzk
    root = "/order-cap-%s" % new_uuid()[:8]
    setup = kazoo_factory(private_zk.hostport)
    setup.create(root + "/big", os.urandom(BIG), makepath=True)
    proxy = zkwarden_factory.start(private_zk, extra_env={
        "ZKWARDEN_MAX_BUFFERED_BYTES": str(CAP), "ASAN_OPTIONS": ASAN_SMALL_QUARANTINE})
    sessions = []
    for _ in range(SLOW_SESSIONS):
        sessions.append(rawzk.RawSession(proxy.port, timeout_ms=30000, sock_timeout=30.0, rcvbuf=4096))
    for r in sessions:
        r.send(b"".join(rawzk.get_data(x, root + "/big") for x in range(1, SLOW_READS + 1)))
    t0 = time.monotonic()
    wait_until(lambda: proxy.metric("zkwarden_buffer_cap_pauses_total") >= 1, 10, what="the bound to stop reads")
    last = []

    def settled():  # nothing moves any more: every side stopped or drained as far as it may
        last.append(proxy.metric("zkwarden_buffered_bytes"))
        return len(last) > 3 and len(set(last[-3:])) == 1
    wait_until(settled, 10, interval=0.2, what="zkwarden's buffers to settle")
    held = last[-1]
    print("settled after %.1f s" % (time.monotonic() - t0))
    print("%d clients not reading %d replies of %d bytes: zkwarden buffers %d bytes (bound %d)"
          % (SLOW_SESSIONS, SLOW_READS, BIG, held, CAP))
    # The bound, plus the frame each connection was writing when it stopped.
    assert held <= CAP + SLOW_SESSIONS * 1280 * 1024, held
    assert "over ZKWARDEN_MAX_BUFFERED_BYTES" in proxy.stderr()
    for r in sessions:
        for x in range(1, SLOW_READS + 1):
            xid, _, err, body = r.read_reply()
            assert (xid, err, len(body)) == (x, 0, 4 + BIG + 68)
        r.close()
    wait_until(lambda: proxy.metric("zkwarden_buffered_bytes") < CAP, 10, what="the buffers to drain")
