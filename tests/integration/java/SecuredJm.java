// SecuredJm: a JobManager's ZooKeeper client as Flink configures it on a
// secured ensemble: Curator, SASL from the JAAS file given with
// -Djava.security.auth.login.config (a Client section), every node created
// with the creator-only ACL (high-availability.zookeeper.client.acl: creator).
// Creates an ephemeral lock at the given path and prints "ok <scheme>:<id>"
// of its ACL, or "failed <exception>" (exit 1). Used by test_secured.py.
import java.nio.charset.StandardCharsets;
import java.util.List;
import java.util.concurrent.TimeUnit;
import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.api.ACLProvider;
import org.apache.curator.retry.RetryNTimes;
import org.apache.zookeeper.CreateMode;
import org.apache.zookeeper.ZooDefs;
import org.apache.zookeeper.data.ACL;

public class SecuredJm {
  public static void main(String[] args) throws Exception {
    String connect = args[0];
    String lock = args[1];
    ACLProvider creator = new ACLProvider() {
      public List<ACL> getDefaultAcl() {
        return ZooDefs.Ids.CREATOR_ALL_ACL;
      }

      public List<ACL> getAclForPath(String path) {
        return ZooDefs.Ids.CREATOR_ALL_ACL;
      }
    };
    CuratorFramework c = Curators.builder(connect, 10000, 5000, new RetryNTimes(2, 200)).aclProvider(creator).build();
    c.start();
    int rc = 1;
    try {
      if (!c.blockUntilConnected(15, TimeUnit.SECONDS)) throw new IllegalStateException("not connected");
      c.create().creatingParentsIfNeeded().withMode(CreateMode.EPHEMERAL).forPath(
          lock, "127.0.0.1".getBytes(StandardCharsets.UTF_8));
      ACL acl = c.getACL().forPath(lock).get(0);
      System.out.println("ok " + acl.getId().getScheme() + ":" + acl.getId().getId());
      rc = 0;
    } catch (Exception e) {
      System.out.println("failed " + e);
    }
    System.out.flush();
    Runtime.getRuntime().halt(rc);
  }
}
