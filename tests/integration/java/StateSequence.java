// A JobManager's view of its ZooKeeper connection, for the partition tests
// (tests/faults/test_partitions.py): Curator with a LeaderLatch and a
// ConnectionStateListener, as Flink's leader election uses them.
//
// usage: java StateSequence <connect string> <session timeout ms> <latch path>
//
// Prints, one line each, flushed at once:
//   "STATE <CONNECTED|SUSPENDED|RECONNECTED|LOST|READ_ONLY> <sid hex>"  every connection state change
//   "LEADER <true|false>"                                                every leadership change
//   "READY <sid hex>"                                                    once connected and leading
// and answers stdin commands: "SID" prints "SID <sid hex> leader=<true|false>";
// "LOCK <path>" creates an ephemeral node (parents as needed) and "DELETE <path>"
// deletes one, each printing "DONE <LOCK|DELETE> <path> <ok|exception>";
// "QUIT" closes the latch and the client and prints "BYE".

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.util.concurrent.TimeUnit;

import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.recipes.leader.LeaderLatch;
import org.apache.curator.framework.recipes.leader.LeaderLatchListener;
import org.apache.curator.framework.state.ConnectionState;
import org.apache.curator.retry.ExponentialBackoffRetry;

public class StateSequence {
    static synchronized void println(String s) {
        System.out.println(s);
        System.out.flush();
    }

    static String sid(CuratorFramework c) {
        try {
            return Long.toHexString(c.getZookeeperClient().getZooKeeper().getSessionId());
        } catch (Exception e) {
            return "none";
        }
    }

    public static void main(String[] args) throws Exception {
        String connect = args[0];
        int sessionMs = Integer.parseInt(args[1]);
        String latchPath = args[2];
        CuratorFramework c = Curators.builder(connect, sessionMs, sessionMs, new ExponentialBackoffRetry(100, 10, 1000))
                // Direct, the tracker would swap the relays for the servers'
                // own addresses (reconfigEnabled ensembles), and the partition
                // would miss the client. Flink 1.18+ deployments turn it off
                // too (high-availability.zookeeper.client.ensemble-tracker).
                .ensembleTracker(false)
                .build();
        c.getConnectionStateListenable().addListener((CuratorFramework client, ConnectionState st) ->
                println("STATE " + st + " " + sid(client)));
        if (!Curators.startConnected(c, 30)) {
            System.err.println("no connection to " + connect);
            System.exit(2);
        }
        LeaderLatch latch = new LeaderLatch(c, latchPath, "jm");
        latch.addListener(new LeaderLatchListener() {
            @Override
            public void isLeader() {
                println("LEADER true");
            }

            @Override
            public void notLeader() {
                println("LEADER false");
            }
        });
        latch.start();
        if (!latch.await(30, TimeUnit.SECONDS)) {
            System.err.println("no leadership");
            System.exit(3);
        }
        println("READY " + sid(c));

        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        String line;
        while ((line = in.readLine()) != null) {
            if (line.startsWith("SID")) {
                println("SID " + sid(c) + " leader=" + latch.hasLeadership());
            } else if (line.startsWith("LOCK ") || line.startsWith("DELETE ")) {
                String[] w = line.split(" ", 2);
                String result = "ok";
                try {
                    if (w[0].equals("LOCK")) {
                        c.create().creatingParentsIfNeeded().withMode(org.apache.zookeeper.CreateMode.EPHEMERAL)
                                .forPath(w[1], new byte[] {'j', 'm'});
                    } else {
                        c.delete().forPath(w[1]);
                    }
                } catch (Exception e) {
                    result = e.getClass().getSimpleName();
                }
                println("DONE " + w[0] + " " + w[1] + " " + result);
            } else if (line.startsWith("QUIT")) {
                break;
            }
        }
        try {
            latch.close();
        } catch (Exception e) {
            System.err.println("latch close: " + e);
        }
        c.close();
        println("BYE");
    }
}
