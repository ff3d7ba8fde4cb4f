"""1c. The C client (libzookeeper_mt, cclient/workload.c) differential
workload, direct and through zkwarden."""

import base64
import hashlib
import os

import pytest

from conftest import DIRECT_ONLY, Target
from test_kazoo_workload import assert_transcript
from zkharness import SANITIZER_MARKERS, run_bounded


def cclient_binary(build_dir):
    path = os.environ.get("ZKW_CCLIENT") or os.path.join(
        build_dir, "tests", "integration", "zkw_cclient_workload")
    if not os.access(path, os.X_OK):
        msg = "C client workload %s is not built (cmake --build the build dir)" % path
        if DIRECT_ONLY:
            pytest.skip(msg)
        pytest.fail(msg)
    return path


def stat(v=0, cv=0, av=0, length=0, nc=0, eph="none"):
    return "v=%d cv=%d av=%d len=%d nc=%d eph=%s" % (v, cv, av, length, nc, eph)


CAROL = "carol:" + base64.b64encode(hashlib.sha1(b"carol:pw").digest()).decode()

EXPECTED = [
    ("create root", "R"),
    ("create", "R/a"),
    ("create exists", "!ZNODEEXISTS"),
    ("create null data", "R/null"),
    ("create2", "R/b " + stat(length=4)),
    ("create2 ephemeral", "R/e " + stat(length=3, eph="self")),
    ("create2 sequential", "R/s-0000000004 " + stat()),
    ("create ephemeral sequential", "R/es-0000000005"),
    ("create2 container", "R/ctr " + stat(length=1)),
    ("create2 ttl", "R/ttl " + stat(length=1)),
    ("create under ephemeral", "!ZNOCHILDRENFOREPHEMERALS"),
    ("create no parent", "!ZNONODE"),
    ("get", "'alpha' " + stat(length=5)),
    ("get null data", "null " + stat()),
    ("set", stat(v=1, length=6)),
    ("set bad version", "!ZBADVERSION"),
    ("get after set", "'alpha2' " + stat(v=1, length=6)),
    ("get missing", "!ZNONODE"),
    ("exists", stat(length=4)),
    ("exists missing", "!ZNONODE"),
    ("delete bad version", "!ZBADVERSION"),
    ("delete", "ok"),
    ("delete missing", "!ZNONODE"),
    ("create child", "R/a/kid"),
    ("delete not empty", "!ZNOTEMPTY"),
    ("children2", "[a,ctr,e,es-0000000005,null,s-0000000004,ttl] " + stat(cv=9, nc=7)),
    ("children2 missing", "!ZNONODE"),
    ("children", "[kid]"),
    ("multi commit", "rc=ZOK R/m1 ok ok R/ms-0000000009 ok"),
    ("multi commit set stat", stat(v=1, length=2)),
    ("multi fail", "rc=ZBADVERSION ok !ZBADVERSION !ZRUNTIMEINCONSISTENCY"),
    ("multi fail left nothing", "!ZNONODE"),
    ("add_auth digest", "ok"),
    ("create creator-all acl", "R/acl"),
    ("get_acl", "[31:digest:%s] %s" % (CAROL, stat(length=6))),
    ("set_acl bad version", "!ZBADVERSION"),
    ("set_acl", "ok"),
    ("get acl node authed", "'secret' " + stat(av=1, length=6)),
    ("unauth get (world read)", "'secret' " + stat(av=1, length=6)),
    ("unauth set", "!ZNOAUTH"),
    ("unauth delete (open parent)", "ok"),
    ("wget", "ok"),
    ("wget_children2", "[] " + stat(v=1, cv=2, length=6)),
    ("wexists missing", "!ZNONODE"),
    ("other set", stat(v=2, cv=2, length=7)),
    ("data watch event", "[CHANGED R/a]"),
    ("other create child", "R/a/k2"),
    ("child watch event", "[CHILD R/a]"),
    ("other create later", "R/later"),
    ("exists watch event", "[CREATED R/later]"),
    ("remove watches none", "!ZNOWATCHER"),
    ("own ephemeral", stat(length=3, eph="self")),
]


def run_cclient(binary, target, root):
    rc, out, err = run_bounded([binary, "workload", target.hostport, root, target.another()],
                               timeout=90)
    lines = out.splitlines()
    assert rc == 0 and lines and lines[-1] == "DONE", \
        "C client workload failed (rc=%s)\nstdout:\n%s\nstderr:\n%s" % (rc, out, err)
    for marker in SANITIZER_MARKERS:
        assert marker not in err, "C client stderr:\n" + err
    return [tuple(line.split("\t", 1)) for line in lines[:-1]]


def test_cclient_workload(target, build_dir, transcripts, zk_server):
    binary = cclient_binary(build_dir)
    got = run_cclient(binary, target, "/cclient-" + target.kind)
    transcripts[("cclient", target.kind)] = got
    assert_transcript(got, EXPECTED, "C client %s" % target.kind)
    if target.via_zkwarden:
        direct = transcripts.get(("cclient", "direct"))
        if direct is None:
            direct = run_cclient(binary, Target("direct", zk_server), "/cclient-direct")
        assert_transcript(got, direct, "C client %s vs direct" % target.kind)
