"""1a. kazoo differential workload: direct against ZooKeeper and through
zkwarden, each under its own root. Each transcript must equal the expected
one below, and the zkwarden transcript must equal the direct one."""

import base64
import hashlib

import kazoo_workload
from conftest import Target
from transcript import digest


def st(version=0, cversion=0, aversion=0, dataLength=0, numChildren=0, eph="none"):
    return {"version": version, "cversion": cversion, "aversion": aversion,
            "dataLength": dataLength, "numChildren": numChildren, "eph": eph}


ALICE = "alice:" + base64.b64encode(hashlib.sha1(b"alice:secret").digest()).decode()
ROOT_KIDS = ["c2", "c2s-0000000009", "ctr", "e", "es-0000000004", "s-0000000002",
             "s-0000000003", "ttl", "ttls-0000000007"]
BIG = "<1000000 bytes sha256:%s>" % digest(kazoo_workload.big_data())

EXPECTED = [
    ("create root", "R"),
    ("create persistent", "R/p"),
    ("create persistent again", "!NodeExistsError"),
    ("create ephemeral", "R/e"),
    ("exists ephemeral", st(dataLength=3, eph="self")),
    # sequence suffix = the parent's cversion, 10 digits
    ("create sequential 1", "R/s-0000000002"),
    ("create sequential 2", "R/s-0000000003"),
    ("create ephemeral sequential", "R/es-0000000004"),
    ("exists ephemeral sequential", st(eph="self")),
    ("create container", ("R/ctr", st(dataLength=5))),
    ("create child of container", "R/ctr/kid"),
    ("create ttl", ("R/ttl", st(dataLength=5))),
    ("create ttl sequential", ("R/ttls-0000000007", st())),
    ("create ttl zero (bad)", "!BadArgumentsError"),
    ("create2", ("R/c2", st(dataLength=5))),
    ("create2 sequential ephemeral", ("R/c2s-0000000009", st(eph="self"))),
    ("create under ephemeral", "!NoChildrenForEphemeralsError"),
    ("create without parent", "!NoNodeError"),
    ("create makepath", "R/mk/a/b"),
    ("get", ("v0", st(dataLength=2))),
    ("set", st(version=1, dataLength=2)),
    ("set version 1", st(version=2, dataLength=2)),
    ("set bad version", "!BadVersionError"),
    ("get after sets", ("v2", st(version=2, dataLength=2))),
    ("set empty", st(version=1)),
    ("get empty", ("", st(version=1))),
    ("exists missing", None),
    ("get missing", "!NoNodeError"),
    ("set missing", "!NoNodeError"),
    ("delete missing", "!NoNodeError"),
    ("delete bad version", "!BadVersionError"),
    ("delete not empty", "!NotEmptyError"),
    ("delete with version", True),
    ("exists deleted", None),
    ("delete recursive", None),
    ("exists after recursive", None),
    ("children", ROOT_KIDS),
    # 11 creates + 2 deletes under the root so far
    ("children with data", (ROOT_KIDS, st(cversion=13, numChildren=9))),
    ("children missing", "!NoNodeError"),
    ("sync", "R"),
    ("add_auth", True),
    ("create acl node", "R/acl"),
    ("get_acls", ([(31, "digest", ALICE)], st(dataLength=7))),
    ("get acl node as owner", ("private", st(dataLength=7))),
    ("unauth get", "!NoAuthError"),
    ("unauth get_acls", "!NoAuthError"),
    ("set_acls bad version", "!BadVersionError"),
    ("set_acls", st(aversion=1, dataLength=7)),
    ("get_acls after set", ([(31, "digest", ALICE), (1, "world", "anyone")],
                            st(aversion=1, dataLength=7))),
    ("unauth get after set_acls", ("private", st(aversion=1, dataLength=7))),
    ("unauth set after set_acls", "!NoAuthError"),
    ("unauth create child", "!NoAuthError"),
    ("wrong password add_auth", True),
    ("wrong password set", "!NoAuthError"),
    ("unknown auth scheme", "!AuthFailedError"),
    ("empty acl list", "!InvalidACLError"),
    ("multi commit", ["R/tx1", st(version=1, dataLength=1), True, "R/tx2", True,
                      "R/txs-0000000014"]),
    ("multi fail", ["!RolledBackError", "!BadVersionError", "!RuntimeInconsistency"]),
    ("multi fail left nothing", None),
    ("multi get tx1", ("b", st(version=1, dataLength=1))),
    ("multi fail first op", ["!NoNodeError"]),
    ("get with data watch", ("w0", st(dataLength=2))),
    ("data watch events", [("CHANGED", "CONNECTED", "R/w")]),
    ("children with child watch", []),
    ("child watch events", [("CHILD", "CONNECTED", "R/w")]),
    ("exists watch on missing", None),
    ("exists watch events", [("CREATED", "CONNECTED", "R/nw")]),
    ("exists watch on present", st()),
    ("data watch on same node", ("", st())),
    ("delete events exists-watch", [("DELETED", "CONNECTED", "R/nw")]),
    ("delete events data-watch", [("DELETED", "CONNECTED", "R/nw")]),
    ("children of container with watch", ["kid"]),
    ("exists container with watch", st(cversion=1, dataLength=5, numChildren=1)),
    ("container child events", [("CHILD", "CONNECTED", "R/ctr")]),
    ("container removed by server", [("DELETED", "CONNECTED", "R/ctr")]),
    ("create short ttl", ("R/ttlshort", st())),
    ("exists short ttl with watch", st()),
    ("ttl node removed by server", [("DELETED", "CONNECTED", "R/ttlshort")]),
    ("create ~1MiB", "R/big"),
    ("get ~1MiB", (BIG, st(dataLength=1000000))),
    ("helper get ~1MiB", (BIG, st(dataLength=1000000))),
    ("pipelined creates errors", []),
    ("many children count", 10000),
    ("many children equal", True),
    ("many children digest", digest("\n".join(kazoo_workload.many_names()).encode())),
    ("many children reply over 1 MiB", True),
    ("many children2 stat", st(cversion=10000, numChildren=10000)),
    ("pipelined mixed", [500, 1, 500]),
    ("session still same", True),
    ("ephemerals still there", [True, True]),
    # a request over jute.maxbuffer: the connection is dropped, the session kept
    ("oversized set", "!ConnectionLoss"),
    ("session same after oversize", True),
    ("get after oversized", 1000000),
]


def assert_transcript(got, expected, what):
    got_labels = [k for k, _ in got]
    exp_labels = [k for k, _ in expected]
    assert got_labels == exp_labels, "%s: steps differ" % what
    bad = [(k, g, e) for (k, g), (_, e) in zip(got, expected) if g != e]
    assert not bad, "%s: unexpected results:\n%s" % (
        what, "\n".join("  %s:\n    got      %r\n    expected %r" % b for b in bad))


def _run(mode_target, kazoo_factory):
    root = "/kazoo-" + mode_target.kind
    return kazoo_workload.run(mode_target.hostport, root, kazoo_factory,
                              mode_target.another).entries


def test_kazoo_workload(target, kazoo_factory, transcripts, zk_server):
    got = _run(target, kazoo_factory)
    transcripts[("kazoo", target.kind)] = got
    assert_transcript(got, EXPECTED, "kazoo %s" % target.kind)
    if target.via_zkwarden:
        direct = transcripts.get(("kazoo", "direct"))
        if direct is None:
            direct = _run(Target("direct", zk_server), kazoo_factory)
        assert_transcript(got, direct, "kazoo %s vs direct" % target.kind)
