// TrackerCheck: Curator clients with the default settings (ensemble tracker
// on, as in Flink 1.18+ by default) connect to the given connect string, one
// after the other, and report every connect string their ensemble tracker
// hands to Curator once it has read /zookeeper/config (it sends two reads at
// start; each reply it takes is a line). Prints "READY" once the first client
// is connected, "CONFIG <string>" for each connect string the tracker sets,
// and "FINAL <string>" at the end of each client's watch (milliseconds).
// Arguments: connect string, watch ms, number of clients (default 1).
import org.apache.curator.ensemble.fixed.FixedEnsembleProvider;
import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.retry.RetryNTimes;

public class TrackerCheck {
  /** The connect string Curator starts with, printing each one the tracker sets. */
  static final class Recording extends FixedEnsembleProvider {
    Recording(String connect) {
      super(connect, true);
    }

    @Override
    public void setConnectionString(String connectionString) {
      System.out.println("CONFIG " + connectionString);
      super.setConnectionString(connectionString);
    }
  }

  public static void main(String[] args) throws Exception {
    String connect = args[0];
    long watchMs = Long.parseLong(args[1]);
    int clients = args.length > 2 ? Integer.parseInt(args[2]) : 1;
    for (int i = 0; i < clients; i++) {
      CuratorFramework client = Curators.builder(connect, 10000, 5000, new RetryNTimes(50, 100))
          .ensembleProvider(new Recording(connect))
          .build();
      if (!Curators.startConnected(client, 20)) {
        System.out.println("NOT CONNECTED");
        System.exit(1);
      }
      if (i == 0) System.out.println("READY");
      long end = System.currentTimeMillis() + watchMs;
      while (System.currentTimeMillis() < end) {
        client.checkExists().forPath("/");
        Thread.sleep(50);
      }
      System.out.println("FINAL " + client.getZookeeperClient().getCurrentConnectionString());
      client.close();
    }
  }
}
