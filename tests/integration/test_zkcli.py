"""1d. zkCli.sh: one batch of commands on stdin (one JVM per run), direct and
through zkwarden. zkCli prints data and Stat on stdout and "Created ..." and
errors on stderr; both are normalized and compared."""

import re

from conftest import Target
from zkharness import run_bounded

ZKCLI = "/usr/share/zookeeper/bin/zkCli.sh"

COMMANDS = """\
create $R
create $R/n hello
create -e $R/eph x
create -s $R/seq- x
get $R/n
set $R/n world
get -s $R/n
stat $R/eph
ls $R
ls -s $R
create $R/n/kid k
delete $R/n
delete $R/missing
set -v 7 $R/n bad
create $R/n again
deleteall $R/n
ls $R
get $R/n
stat $R/missing
quit
"""

STAT_N = ["cversion = 0", "dataVersion = 1", "aclVersion = 0", "ephemeralOwner = 0x0",
          "dataLength = 5", "numChildren = 0"]
STAT_EPH = ["cversion = 0", "dataVersion = 0", "aclVersion = 0", "ephemeralOwner = <session>",
            "dataLength = 1", "numChildren = 0"]
STAT_ROOT = ["cversion = 3", "dataVersion = 0", "aclVersion = 0", "ephemeralOwner = 0x0",
             "dataLength = 0", "numChildren = 3"]

EXPECTED_STDOUT = (["hello", "world"] + STAT_N + STAT_EPH +
                   ["[eph, n, seq-0000000002]", "[eph, n, seq-0000000002]"] + STAT_ROOT +
                   ["[eph, seq-0000000002]"])
EXPECTED_STDERR = [
    "Created R", "Created R/n", "Created R/eph", "Created R/seq-0000000002",
    "Created R/n/kid",
    "Node not empty: R/n",
    "Node does not exist: R/missing",
    "version No is not valid : R/n",
    "Node already exists: R/n",
    "Node does not exist: R/n",
    "Node does not exist: R/missing",
]

DROP = re.compile(r"^(SLF4J:|WATCHER::|WatchedEvent |Connecting to |Welcome to ZooKeeper|"
                  r"JLine support|(cZxid|ctime|mZxid|mtime|pZxid) = )")


def normalize(text, root):
    lines = []
    for line in text.splitlines():
        line = line.rstrip()
        if not line or DROP.match(line):
            continue
        line = line.replace(root, "R")
        line = re.sub(r"^ephemeralOwner = 0x(?!0$)[0-9a-f]+$", "ephemeralOwner = <session>", line)
        lines.append(line)
    return lines


def run_zkcli(hostport, root):
    rc, out, err = run_bounded([ZKCLI, "-server", hostport], timeout=90,
                               input=COMMANDS.replace("$R", root))
    return normalize(out, root), normalize(err, root)


def test_zkcli(target, transcripts, zk_server):
    root = "/zkcli-" + target.kind
    out, err = run_zkcli(target.hostport, root)
    transcripts[("zkcli", target.kind)] = (out, err)
    assert out == EXPECTED_STDOUT
    assert err == EXPECTED_STDERR
    if target.via_zkwarden:
        direct = transcripts.get(("zkcli", "direct"))
        if direct is None:
            direct = run_zkcli(Target("direct", zk_server).hostport, "/zkcli-direct")
        assert (out, err) == direct
