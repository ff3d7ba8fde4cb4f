"""A JobManager stand-in in its own process, so a test can kill it with -9:
it opens one session (kazoo), creates a Flink leader-latch node and lock
nodes as Flink does, prints one JSON line, then waits to be killed.

usage: jm_proc.py HOST:PORT TIMEOUT_MS LATCH_DIR [LOCK_PATH ...]

The latch node is EPHEMERAL_SEQUENTIAL `LATCH_DIR/_c_<uuid>-latch-` (Curator's
protected LeaderLatch, as Flink uses it); locks are EPHEMERAL with the host
address as data, like Curator's default data.
"""

import json
import sys
import time
import uuid

from kazoo.client import KazooClient
from kazoo.retry import KazooRetry


def main():
    hostport, timeout_ms, latch_dir = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    locks = sys.argv[4:]
    c = KazooClient(hosts=hostport, timeout=timeout_ms / 1000.0,
                    connection_retry=KazooRetry(max_tries=-1, delay=0.05, max_delay=0.5))
    c.start(timeout=15)
    c.ensure_path(latch_dir)
    latch = c.create("%s/_c_%s-latch-" % (latch_dir, uuid.uuid4()), b"", ephemeral=True, sequence=True)
    for p in locks:
        c.ensure_path(p.rsplit("/", 1)[0])
        c.create(p, b"127.0.0.1", ephemeral=True)
    print(json.dumps({"session": c.client_id[0], "latch": latch}), flush=True)
    while True:
        time.sleep(3600)


if __name__ == "__main__":
    main()
