// ZombieServer: a real ZooKeeper 3.8 server (Debian's zookeeper.jar), run
// in-process from a zoo.cfg exactly as QuorumPeerMain would run it
// (standalone, or one member of an ensemble), that can on command put into
// its in-memory tree an ephemeral node owned by any session id: the state
// the server bugs ZOOKEEPER-2355/4541/4712 leave behind (a node kept after
// its session ended). Used by test_zombies.py.
//
// usage: ZombieServer ZOO_CFG REPLY_FILE
// Commands on stdin, one a line; each is answered by one line appended to
// REPLY_FILE ("<n> ok <path>" or "<n> error <text>", n counted from 1):
//   zombie PATH OWNER_HEX DATA_HEX|-|~ [CTIME_MS]
//                                       create PATH owned by session OWNER (data: null, empty),
//                                       created at CTIME_MS (default now)
//   bulk ROOT CLUSTERS PER              other clusters' trees: ROOT/cluster-NNN/jobs/jNNNNNN, PER
//                                       nodes each (issue 30: a sidecar reads none of them)
//   ready                               answers once this server serves requests
import java.io.BufferedReader;
import java.io.FileWriter;
import java.io.InputStreamReader;
import java.io.PrintWriter;
import java.lang.reflect.Field;
import java.nio.charset.StandardCharsets;

import org.apache.zookeeper.ZooDefs;
import org.apache.zookeeper.server.DataTree;
import org.apache.zookeeper.server.ServerCnxnFactory;
import org.apache.zookeeper.server.ServerConfig;
import org.apache.zookeeper.server.ZooKeeperServer;
import org.apache.zookeeper.server.ZooKeeperServerMain;
import org.apache.zookeeper.server.quorum.QuorumPeerConfig;
import org.apache.zookeeper.server.quorum.QuorumPeerMain;

public class ZombieServer {
  /** Standalone: the ZooKeeperServerMain's server, through its connection factory. */
  static class Standalone extends ZooKeeperServerMain {
    ZooKeeperServer server() throws Exception {
      Field f = ZooKeeperServerMain.class.getDeclaredField("cnxnFactory");
      f.setAccessible(true);
      ServerCnxnFactory factory = (ServerCnxnFactory) f.get(this);
      return factory == null ? null : factory.getZooKeeperServer();
    }
  }

  /** An ensemble member: the server its QuorumPeer runs now (leader or follower). */
  static class Member extends QuorumPeerMain {
    ZooKeeperServer server() {
      return quorumPeer == null ? null : quorumPeer.getActiveServer();
    }
  }

  static byte[] hex(String s) {
    if (s.equals("-")) return null;
    if (s.equals("~")) return new byte[0];
    byte[] out = new byte[s.length() / 2];
    for (int i = 0; i < out.length; i++)
      out[i] = (byte) Integer.parseInt(s.substring(2 * i, 2 * i + 2), 16);
    return out;
  }

  public static void main(String[] args) throws Exception {
    QuorumPeerConfig config = new QuorumPeerConfig();
    config.parse(args[0]);
    PrintWriter reply = new PrintWriter(new FileWriter(args[1], StandardCharsets.UTF_8, true), true);
    Standalone standalone = null;
    Member member = null;
    Thread run;
    if (config.isDistributed()) {
      Member m = member = new Member();
      run = new Thread(() -> {
        try {
          m.runFromConfig(config);
        } catch (Exception e) {
          e.printStackTrace();
        }
        Runtime.getRuntime().halt(1);
      }, "quorum-peer-main");
    } else {
      ServerConfig sc = new ServerConfig();
      sc.readFrom(config);
      Standalone s = standalone = new Standalone();
      run = new Thread(() -> {
        try {
          s.runFromConfig(sc);
        } catch (Exception e) {
          e.printStackTrace();
        }
        Runtime.getRuntime().halt(1);
      }, "zookeeper-server-main");
    }
    run.setDaemon(true);
    run.start();

    BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
    int n = 0;
    for (String line; (line = in.readLine()) != null;) {
      n++;
      String[] w = line.trim().split(" ");
      try {
        ZooKeeperServer zks = standalone != null ? standalone.server() : member.server();
        if (zks == null || !zks.isRunning()) throw new IllegalStateException("not serving yet");
        if (w[0].equals("ready")) {
          reply.println(n + " ok ready");
        } else if (w[0].equals("zombie") && (w.length == 4 || w.length == 5)) {
          DataTree tree = zks.getZKDatabase().getDataTree();
          long owner = Long.parseUnsignedLong(w[2], 16);
          // The node as a create by session `owner` would have left it: in
          // the tree and in the session's ephemeral set, but with no session.
          long zxid = zks.getZKDatabase().getDataTreeLastProcessedZxid();
          long ctime = w.length == 5 ? Long.parseLong(w[4]) : System.currentTimeMillis();
          tree.createNode(w[1], hex(w[3]), ZooDefs.Ids.OPEN_ACL_UNSAFE, owner, -1, zxid, ctime);
          reply.println(n + " ok " + w[1]);
        } else if (w[0].equals("bulk") && w.length == 4) {
          // Other clusters' trees, put straight into the tree (a test's
          // hundreds of thousands of nodes in a second): under w[1], w[2]
          // clusters, each cluster-NNN/jobs/jNNNNNN with w[3] nodes in all.
          DataTree tree = zks.getZKDatabase().getDataTree();
          long zxid = zks.getZKDatabase().getDataTreeLastProcessedZxid();
          long now = System.currentTimeMillis();
          int clusters = Integer.parseInt(w[2]), per = Integer.parseInt(w[3]);
          if (tree.getNode(w[1]) == null)
            tree.createNode(w[1], new byte[0], ZooDefs.Ids.OPEN_ACL_UNSAFE, 0, -1, zxid, now);
          for (int c = 0; c < clusters; c++) {
            String cl = String.format("%s/cluster-%03d", w[1], c);
            tree.createNode(cl, new byte[0], ZooDefs.Ids.OPEN_ACL_UNSAFE, 0, -1, zxid, now);
            tree.createNode(cl + "/jobs", new byte[0], ZooDefs.Ids.OPEN_ACL_UNSAFE, 0, -1, zxid, now);
            for (int i = 0; i < per - 2; i++)
              tree.createNode(String.format("%s/jobs/j%06d", cl, i), new byte[] {1}, ZooDefs.Ids.OPEN_ACL_UNSAFE,
                  0, -1, zxid, now);
          }
          reply.println(n + " ok " + (long) clusters * per);
        } else {
          reply.println(n + " error unknown command: " + line);
        }
      } catch (Exception e) {
        reply.println(n + " error " + e);
      }
    }
    Runtime.getRuntime().halt(0); // stdin closed: the test is over
  }
}
