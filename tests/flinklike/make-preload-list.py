#!/usr/bin/python3
"""Writes tests/flinklike/preload.classes: the classes a cold Flink-like JobManager
loads from Curator's start to its first leadership (connecting, leader election),
in both layouts, once submitting the job and once recovering it, against a
private ZooKeeper on 127.0.0.1. See tests/flinklike/README.md.

    tests/flinklike/make-preload-list.py     (after tests/flinklike/build.sh)

Every process is started here and stopped by its pid.
"""

import json
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1] / "tests" / "integration"))
import zkharness  # noqa: E402

RUN_S = 6
SKIP = re.compile(r"\$\$Lambda|/0x|LambdaForm\$|^jdk\.internal\.reflect\.Generated|^jdk\.proxy|^com\.sun\.proxy|"
                  r"^flinklike\.")


def main():
    cp = (HERE / "build" / "classpath").read_text().strip()
    work = Path(tempfile.mkdtemp(prefix="flinklike-preload."))
    zk = zkharness.ZkServer(work / "zk", tick_ms=1000, min_session_ms=2000, max_session_ms=60000)
    zk.start()
    names = {}
    try:
        for layout in ("1.7", "current"):
            for n, submit in ((1, True), (2, False)):
                tag = "%s-%d" % (layout, n)
                log, stats = work / (tag + ".classes"), work / (tag + ".stats")
                cmd = ["java", "-Xmx160m", "-Xss512k", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
                       "-Xlog:class+load:file=%s:uptimemillis" % log, "-cp", cp, "flinklike.FlinkLikeJM",
                       "--connect=" + zk.hostport, "--identity=preload", "--layout=" + layout,
                       "--cluster-id=/preload-" + layout.replace(".", ""), "--session-timeout-ms=20000",
                       "--checkpoint-interval-ms=100", "--stats-file=%s" % stats, "--stats-interval-ms=250",
                       "--storage-dir=%s" % (work / "storage")] + (["--submit-job"] if submit else [])
                p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                try:
                    time.sleep(RUN_S)
                finally:
                    zkharness._stop_pid(p, grace=20)
                s = json.loads(stats.read_text())
                start = s["connect_start_epoch_ms"] - s["start_epoch_ms"]
                end = s["first_leader_epoch_ms"] - s["start_epoch_ms"]
                for line in log.read_text().splitlines():
                    m = re.match(r"\[(\d+)ms\] (\S+) source: ", line)
                    if m and start - 20 <= int(m.group(1)) <= end + 20 and not SKIP.search(m.group(2)):
                        names.setdefault(m.group(2), None)
    finally:
        zk.stop()
    head = ["# Classes a cold Flink-like JobManager (tests/flinklike) loads from Curator's start to its first",
            "# leadership: connecting and leader election (both layouts, direct to a ZooKeeper 3.8 server,",
            "# Debian's Curator 5.4 / ZooKeeper 3.8 / Java 17). --preload-classes loads and initializes them",
            "# before the clock starts; a name that is missing is skipped.",
            "# Made by make-preload-list.py from -Xlog:class+load logs; order as loaded."]
    (HERE / "preload.classes").write_text("\n".join(head + list(names)) + "\n")
    shutil.rmtree(work, ignore_errors=True)
    print("%d classes -> %s" % (len(names), HERE / "preload.classes"))


if __name__ == "__main__":
    main()
