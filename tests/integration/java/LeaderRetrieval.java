// A leader-retrieval client like Flink's CLI and TaskManagers (issue 12): it
// shares the JobManager's ZooKeeper address and only reads the leader nodes.
//
// usage: java LeaderRetrieval <host:port> <namespace, e.g. flink/c1> <1.7|current> <run ms>
//
// Curator as Flink builds it (namespace, ExponentialBackoffRetry(5000, 3),
// no ensemble tracker), then on the leader node of each component:
//   - a NodeCache (Flink up to 1.14) in the 1.7 layout (/leader/<x>_lock),
//     a TreeCache (Flink 1.15+) on /leader/<x>/connection_info otherwise;
//   - getData with a watch, re-armed on each event, on the raw handle.
// Creates nothing. Prints "READY <sid hex>" once connected, "LEADER <path>
// <bytes>" the first time each leader node is seen with data, "STATE <s>" on
// each connection state change, and at the end "DONE <sid hex> sessions=N
// seen=K lost=L", where sessions counts the distinct session ids it had.

import java.util.ArrayList;
import java.util.List;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicInteger;

import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.recipes.cache.NodeCache;
import org.apache.curator.framework.recipes.cache.TreeCache;
import org.apache.curator.retry.ExponentialBackoffRetry;
import org.apache.zookeeper.WatchedEvent;
import org.apache.zookeeper.Watcher;
import org.apache.zookeeper.ZooKeeper;

public class LeaderRetrieval {
    static final Set<String> seen = ConcurrentHashMap.newKeySet();
    static final Set<Long> sessions = ConcurrentHashMap.newKeySet();
    static final AtomicInteger lost = new AtomicInteger();
    static String ns;

    static synchronized void println(String s) {
        System.out.println(s);
        System.out.flush();
    }

    static void saw(String path, byte[] data) {
        if (data != null && data.length > 0 && seen.add(path)) {
            println("LEADER " + path + " " + data.length);
        }
    }

    // getData with a watch on the raw handle, re-armed by each event.
    static void watchData(CuratorFramework client, String path) {
        try {
            ZooKeeper zk = client.getZookeeperClient().getZooKeeper();
            if (zk.getSessionId() != 0) {
                sessions.add(zk.getSessionId());
            }
            Watcher w = (WatchedEvent ev) -> {
                if (ev.getType() != Watcher.Event.EventType.None) {
                    watchData(client, path);
                }
            };
            if (zk.exists(path, w) != null) {
                saw(path, zk.getData(path, w, null));
            }
        } catch (Exception e) {
            // connection loss: the next connection state change re-arms it
        }
    }

    public static void main(String[] args) throws Exception {
        String connect = args[0];
        ns = args[1];
        boolean old = args[2].equals("1.7");
        long runMs = Long.parseLong(args[3]);
        CuratorFramework client = Curators.builder(connect, 60000, 15000, new ExponentialBackoffRetry(5000, 3))
                .namespace(ns)
                .ensembleTracker(false)
                .build();
        String[] components = old
                ? new String[] {"dispatcher_lock", "resource_manager_lock", "rest_server_lock"}
                : new String[] {"dispatcher", "resource_manager", "rest_server"};
        List<String> paths = new ArrayList<>();
        for (String c : components) {
            paths.add(old ? "/leader/" + c : "/leader/" + c + "/connection_info");
        }
        client.getConnectionStateListenable().addListener((c, state) -> {
            println("STATE " + state);
            if (state.name().equals("LOST")) {
                lost.incrementAndGet();
            }
            if (state.isConnected()) {
                for (String p : paths) {
                    watchData(client, p);
                }
            }
        });
        client.start();
        client.blockUntilConnected();
        long sid = client.getZookeeperClient().getZooKeeper().getSessionId();
        sessions.add(sid);
        List<AutoCloseable> caches = new ArrayList<>();
        for (String p : paths) {
            if (old) {
                NodeCache nc = new NodeCache(client, p);
                nc.getListenable().addListener(() -> {
                    if (nc.getCurrentData() != null) {
                        saw(p, nc.getCurrentData().getData());
                    }
                });
                nc.start(true);
                if (nc.getCurrentData() != null) {
                    saw(p, nc.getCurrentData().getData());
                }
                caches.add(nc);
            } else {
                TreeCache tc = TreeCache.newBuilder(client, p).setCacheData(true).setCreateParentNodes(false)
                        .build();
                tc.getListenable().addListener((c, ev) -> {
                    if (ev.getData() != null && ev.getData().getPath().endsWith("/connection_info")) {
                        saw(p, ev.getData().getData());
                    }
                });
                tc.start();
                caches.add(tc);
            }
            watchData(client, p);
        }
        println("READY 0x" + Long.toHexString(sid));
        Thread.sleep(runMs);
        long now = client.getZookeeperClient().getZooKeeper().getSessionId();
        sessions.add(now);
        for (AutoCloseable c : caches) {
            c.close();
        }
        client.close();
        println("DONE 0x" + Long.toHexString(now) + " sessions=" + sessions.size() + " seen=" + seen.size()
                + " lost=" + lost.get());
    }
}
