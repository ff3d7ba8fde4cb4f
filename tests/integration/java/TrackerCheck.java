// TrackerCheck: a Curator client with the default settings (ensemble tracker
// on, as in Flink 1.18+ by default) connects to the given connect string and
// reports the connect string Curator uses once its ensemble tracker has read
// /zookeeper/config. Prints "READY", then "CONNECT <string>" at each change,
// and "FINAL <string>" after the given milliseconds.
import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.retry.RetryNTimes;

public class TrackerCheck {
  public static void main(String[] args) throws Exception {
    String connect = args[0];
    long watchMs = Long.parseLong(args[1]);
    CuratorFramework client = Curators.builder(connect, 10000, 5000, new RetryNTimes(50, 100)).build();
    if (!Curators.startConnected(client, 20)) {
      System.out.println("NOT CONNECTED");
      System.exit(1);
    }
    System.out.println("READY");
    String last = "";
    long end = System.currentTimeMillis() + watchMs;
    while (System.currentTimeMillis() < end) {
      String now = client.getZookeeperClient().getCurrentConnectionString();
      if (!now.equals(last)) {
        System.out.println("CONNECT " + now);
        last = now;
      }
      client.checkExists().forPath("/");
      Thread.sleep(50);
    }
    System.out.println("FINAL " + client.getZookeeperClient().getCurrentConnectionString());
    client.close();
  }
}
