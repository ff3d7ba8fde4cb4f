"""1b. Curator / ZooKeeper 3.8 Java API differential workload
(java/CuratorWorkload.java), direct and through zkwarden."""

from conftest import Target
from test_kazoo_workload import assert_transcript
from zkharness import run_bounded


def stat(v=0, cv=0, av=0, length=0, nc=0, eph="none"):
    return "v=%d cv=%d av=%d len=%d nc=%d eph=%s" % (v, cv, av, length, nc, eph)


EXPECTED = [
    ("create root", "R"),
    ("create2 with stat", "R/c2 " + stat(length=3)),
    ("create ephemeral with stat", "R/e " + stat(length=3, eph="self")),
    ("create ttl", "R/ttl " + stat(length=1)),
    ("create ttl sequential", "R/ttls-0000000003"),
    ("raw create2 ttl", "R/ttlraw " + stat(length=1)),
    ("createContainers", stat(cv=1, nc=1) + " | " + stat()),
    ("create container mode", "R/cont2"),
    ("create existing", "!NODEEXISTS"),
    ("transaction commit",
     "CREATE(R/tx1,R/tx1,null,0) SET_DATA(R/tx1,null,%s,0) CHECK(R/tx1,null,null,0) "
     "CREATE(R/txe-,R/txe-0000000008,null,0) DELETE(R/c2,null,null,0)" % stat(v=1, length=1)),
    ("transaction fail", "!BADVERSION error(OK) error(BADVERSION) error(RUNTIMEINCONSISTENCY)"),
    ("after failed transaction", "null | b"),
    ("multiRead", "getData(b,%s) getChildren([a])" % stat(v=1, length=1)),
    ("multiRead with missing",
     "getChildren([b]) error(NONODE) getData(b,%s)" % stat(v=1, length=1)),
    ("getEphemerals", "[R/eph1, R/eph2]"),
    ("getEphemerals other session", "[R/eph3]"),
    ("getAllChildrenNumber", "2"),
    ("getAllChildrenNumber missing", "!NONODE"),
    ("whoAmI", "[ip:127.0.0.1]"),
    ("whoAmI after auth", "[digest:bob, ip:127.0.0.1]"),
    ("addWatch persistent", "ok"),
    ("addWatch persistent recursive (raw handle)", "ok"),
    ("persistent watch events", "[NodeDataChanged R/pw, NodeDataChanged R/pw, "
     "NodeChildrenChanged R/pw, NodeChildrenChanged R/pw]"),
    ("persistent recursive watch events", "[NodeCreated R/rw/a, NodeCreated R/rw/a/b, "
     "NodeDataChanged R/rw/a/b, NodeDeleted R/rw/a/b, NodeDataChanged R/rw]"),
    ("remove persistent watch", "[PersistentWatchRemoved R/pw]"),
    ("after removal", "pw=[] rw=[NodeDataChanged R/rw] pw=[]"),
    ("checkWatches missing watch (local=false)", "!NOWATCHER"),
    ("removeAllWatches none (local=false)", "!NOWATCHER"),
    ("getData with watch", "b"),
    ("checkWatches present watch", "[DataWatchRemoved R/tx1]"),
    ("exists watch on missing then removeAll", "[DataWatchRemoved R/nothere]"),
    ("cache initial", "[NODE_CREATED R/cache root, INITIALIZED]"),
    ("cache create", "[NODE_CREATED R/cache/a 1]"),
    ("cache change", "[NODE_CHANGED R/cache/a 2]"),
    ("cache create nested", "[NODE_CREATED R/cache/b , NODE_CREATED R/cache/b/c 3]"),
    ("cache delete", "[NODE_DELETED R/cache/a 2]"),
    ("cache size", "3"),
    ("latch1 leads", "true"),
    ("latch participants", "[p1*, p2] l1=true l2=false"),
    ("latch2 leads after close", "true leader=p2"),
    ("mutex1 acquire", "true"),
    ("mutex2 acquire while held", "false"),
    ("mutex reentrant", "true"),
    ("mutex2 acquire after release", "true true"),
    ("mutex lock nodes", "1"),
    ("mutex lock nodes after release", "0"),
    ("other session ephemeral after close", "null"),
    ("own ephemerals", stat(eph="self")),
    ("children", "[cache, cont, cont2, e, eph1, eph2, pw, rw, ttl, ttlraw, "
     "ttls-0000000003, tx1, txe-0000000008]"),
]


def run_curator(java_classes, target, root):
    rc, out, err = run_bounded(java_classes.cmd("CuratorWorkload", target.hostport, root,
                                                target.another()), timeout=150)
    lines = out.splitlines()
    assert rc == 0 and lines and lines[-1] == "DONE", \
        "CuratorWorkload failed (rc=%s)\nstdout:\n%s\nstderr:\n%s" % (rc, out, err)
    return [tuple(line.split("\t", 1)) for line in lines[:-1]]


def test_curator_workload(target, java_classes, transcripts, zk_server):
    got = run_curator(java_classes, target, "/curator-" + target.kind)
    transcripts[("curator", target.kind)] = got
    assert_transcript(got, EXPECTED, "curator %s" % target.kind)
    if target.via_zkwarden:
        direct = transcripts.get(("curator", "direct"))
        if direct is None:
            direct = run_curator(java_classes, Target("direct", zk_server), "/curator-direct")
        assert_transcript(got, direct, "curator %s vs direct" % target.kind)
