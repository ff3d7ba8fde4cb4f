"""Flink's checkpoint locks as the integration tests replay them: an old
incarnation's checkpoint with its lock left behind, and the new JobManager
subsuming that checkpoint the way Flink does. test_identity.py (an old
incarnation restarted, fenced or reclaimed) and test_secured.py (the same
under ACLs, SASL and Kerberos) run this one sequence.

Layouts: "1.7" is Flink up to 1.14 (locks are the state node's children),
"1.15" is Flink 1.15+ (locks under <state>/locks)."""

import uuid

import pytest
from kazoo.exceptions import NotEmptyError


def forged_tag(identity, incarnation, session=0x1234, original=b"127.0.0.1"):
    """The data zkwarden's tag gives a lock (what a node left by an earlier
    incarnation of `identity` holds), written by a test itself."""
    return b"zkwarden-lock 1 identity=%s incarnation=%d session=0x%x\n%s" % (
        identity.encode(), incarnation, session, original)


def new_uuid():
    return str(uuid.uuid4())


def plant_stale_lock(holder, state, locks, layout, data):
    """The old incarnation's checkpoint: its state node (and, in 1.15+, the
    locks container) and one lock of its own under it, ephemeral, holding
    data. Returns the lock's path."""
    holder.create(state, b"handle", makepath=True)
    if layout == "1.15":
        holder.create(locks)
    lock = "%s/%s" % (locks, new_uuid())
    holder.create(lock, data, ephemeral=True)
    return lock


def subsume(jm, state, locks, layout, stale, leaks):
    """The new JobManager subsumes the checkpoint as Flink does: takes and
    releases its own lock, then deletes the locks (and, in 1.15+, the state
    node). leaks: the delete must fail with NOTEMPTY and the stale lock stay
    (the problem, as direct); else the checkpoint must be gone."""
    mine = "%s/%s" % (locks, new_uuid())
    jm.create(mine, b"127.0.0.1", ephemeral=True)
    jm.delete(mine)
    if leaks:
        with pytest.raises(NotEmptyError):
            jm.delete(locks)
        assert jm.exists(stale)
        return
    jm.delete(locks)
    if layout == "1.15":
        jm.delete(state)
    assert jm.exists(state) is None, "leaked: %s" % state
