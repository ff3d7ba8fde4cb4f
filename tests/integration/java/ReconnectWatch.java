// The Java ZooKeeper client's side of the reconnect test.
//
// usage: java ReconnectWatch <host:port> <root>
//
// Opens a session (30 s), creates <root>/eph (ephemeral), sets a data and a
// child watch on <root>/watched, an exists watch on the missing <root>/later
// and a persistent-recursive watch on <root>/tree (so that the reconnect
// sends SetWatches2), prints "READY <sid hex>", then prints every event as
// "EVENT <type> <state> <path>" and answers stdin commands: "CHECK" prints
// "SID <sid hex>" and "EPH <stat or !CODE>"; "QUIT" closes and prints "BYE".

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;

import org.apache.zookeeper.AddWatchMode;
import org.apache.zookeeper.CreateMode;
import org.apache.zookeeper.KeeperException;
import org.apache.zookeeper.WatchedEvent;
import org.apache.zookeeper.Watcher;
import org.apache.zookeeper.ZooDefs;
import org.apache.zookeeper.ZooKeeper;
import org.apache.zookeeper.data.Stat;

public class ReconnectWatch {
    static String root;

    static synchronized void println(String s) {
        System.out.println(s);
        System.out.flush();
    }

    static String p(String path) {
        if (path == null) {
            return "-";
        }
        return path.startsWith(root) ? "R" + path.substring(root.length()) : path;
    }

    public static void main(String[] args) throws Exception {
        String connect = args[0];
        root = args[1];
        CountDownLatch connected = new CountDownLatch(1);
        Watcher w = (WatchedEvent e) -> {
            println("EVENT " + e.getType() + " " + e.getState() + " " + p(e.getPath()));
            if (e.getState() == Watcher.Event.KeeperState.SyncConnected) {
                connected.countDown();
            }
        };
        // 30 s, and the caller repeats the address in the connect string: one
        // connection attempt gets 30 s / (number of addresses), so a server
        // that accepts but does not answer while it starts cannot use up the
        // whole session timeout.
        ZooKeeper zk = new ZooKeeper(connect, 30000, w);
        if (!connected.await(20, TimeUnit.SECONDS)) {
            System.err.println("no connection to " + connect);
            System.exit(2);
        }
        zk.create(root + "/eph", "e".getBytes(StandardCharsets.UTF_8),
                ZooDefs.Ids.OPEN_ACL_UNSAFE, CreateMode.EPHEMERAL);
        zk.getData(root + "/watched", w, null);
        zk.getChildren(root + "/watched", w);
        if (zk.exists(root + "/later", w) != null) {
            throw new IllegalStateException(root + "/later exists");
        }
        zk.addWatch(root + "/tree", w, AddWatchMode.PERSISTENT_RECURSIVE);
        long sid = zk.getSessionId();
        println("READY " + Long.toHexString(sid));

        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        String line;
        while ((line = in.readLine()) != null) {
            if (line.startsWith("CHECK")) {
                String eph;
                try {
                    Stat s = zk.exists(root + "/eph", false);
                    eph = s == null ? "null"
                            : "owner=" + (s.getEphemeralOwner() == sid ? "self" : "other");
                } catch (KeeperException e) {
                    eph = "!" + e.code();
                }
                println("SID " + Long.toHexString(zk.getSessionId()) + "\nEPH " + eph);
            } else if (line.startsWith("QUIT")) {
                break;
            }
        }
        zk.close();
        println("BYE");
    }
}
