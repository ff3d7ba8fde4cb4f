// A JobManager-like Java client whose connection test_orphan_grace.py drops,
// to measure how soon the client comes back with its session (issue 37: the
// default ZKWARDEN_ORPHAN_GRACE_MS is set from it).
//
// usage: java ReconnectDelay <zk|curator> <host:port> <latch dir> <session ms>
//
// zk: a plain ZooKeeper handle that creates an EPHEMERAL_SEQUENTIAL latch
// node under <latch dir>; curator: Curator as Flink builds it
// (ExponentialBackoffRetry(5000, 3), connection timeout 15 s) holding a
// LeaderLatch on <latch dir>. Either way the one address is the sidecar, as
// Flink's quorum is. Prints "READY <sid hex>" once it holds its latch node,
// then "STATE <epoch ms> <state> <sid hex>" on every connection change; runs
// until it is killed (a crashed JobManager) or stdin closes.

import java.io.InputStream;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;

import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.recipes.leader.LeaderLatch;
import org.apache.curator.retry.ExponentialBackoffRetry;
import org.apache.zookeeper.CreateMode;
import org.apache.zookeeper.WatchedEvent;
import org.apache.zookeeper.Watcher;
import org.apache.zookeeper.ZooDefs;
import org.apache.zookeeper.ZooKeeper;

public class ReconnectDelay {
    static synchronized void println(String s) {
        System.out.println(s);
        System.out.flush();
    }

    public static void main(String[] args) throws Exception {
        String kind = args[0];
        String connect = args[1];
        String latchDir = args[2];
        int sessionMs = Integer.parseInt(args[3]);
        if (kind.equals("zk")) {
            CountDownLatch connected = new CountDownLatch(1);
            ZooKeeper[] zk = new ZooKeeper[1];
            Watcher w = (WatchedEvent e) -> {
                if (e.getType() == Watcher.Event.EventType.None) {
                    long sid = zk[0] == null ? 0 : zk[0].getSessionId();
                    println("STATE " + System.currentTimeMillis() + " " + e.getState() + " "
                            + Long.toHexString(sid));
                    if (e.getState() == Watcher.Event.KeeperState.SyncConnected) {
                        connected.countDown();
                    }
                }
            };
            zk[0] = new ZooKeeper(connect, sessionMs, w);
            if (!connected.await(20, TimeUnit.SECONDS)) {
                System.err.println("no connection to " + connect);
                System.exit(2);
            }
            String parent = "";
            for (String part : latchDir.substring(1).split("/")) {
                parent += "/" + part;
                if (zk[0].exists(parent, false) == null) {
                    try {
                        zk[0].create(parent, new byte[0], ZooDefs.Ids.OPEN_ACL_UNSAFE, CreateMode.PERSISTENT);
                    } catch (org.apache.zookeeper.KeeperException.NodeExistsException e) {
                        // made meanwhile by another client
                    }
                }
            }
            zk[0].create(latchDir + "/_c_" + java.util.UUID.randomUUID() + "-latch-", new byte[0],
                    ZooDefs.Ids.OPEN_ACL_UNSAFE, CreateMode.EPHEMERAL_SEQUENTIAL);
            println("READY " + Long.toHexString(zk[0].getSessionId()));
        } else {
            CuratorFramework c = Curators.builder(connect, sessionMs, 15000,
                    new ExponentialBackoffRetry(5000, 3)).build();
            c.getConnectionStateListenable().addListener((client, state) -> {
                long sid = 0;
                try {
                    sid = client.getZookeeperClient().getZooKeeper().getSessionId();
                } catch (Exception e) {
                    // no handle now
                }
                println("STATE " + System.currentTimeMillis() + " " + state + " " + Long.toHexString(sid));
            });
            if (!Curators.startConnected(c, 20)) {
                System.err.println("no connection to " + connect);
                System.exit(2);
            }
            LeaderLatch latch = new LeaderLatch(c, latchDir);
            latch.start();
            if (!latch.await(20, TimeUnit.SECONDS)) {
                System.err.println("no leadership on " + latchDir);
                System.exit(2);
            }
            println("READY " + Long.toHexString(c.getZookeeperClient().getZooKeeper().getSessionId()));
        }
        InputStream in = System.in;
        while (in.read() >= 0) {
            // runs until stdin closes or the process is killed
        }
        System.exit(0);
    }
}
