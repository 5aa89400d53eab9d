package lightstore.probe;

import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Set;

import redis.clients.jedis.HostAndPort;
import redis.clients.jedis.JedisCluster;

/**
 * Writes {@code jedis:0}, {@code jedis:1}, ... through Jedis's cluster client until a stop
 * file appears, then reads every key it saw acknowledged and checks its value. Prints the
 * number of keys written; exits 1 at the first failed write or wrong read (Jedis follows
 * MOVED and ASK redirects itself, so a slot moving under it must cost nothing but retries).
 */
public final class ClusterWriter {
  private ClusterWriter() {}

  /**
   * Runs the writer.
   *
   * @param args the seed node's host and port, and the stop file
   */
  public static void main(String[] args) throws Exception {
    if (args.length != 3) {
      System.err.println("usage: ClusterWriter HOST PORT STOP_FILE");
      System.exit(2);
    }
    HostAndPort seed = new HostAndPort(args[0], Integer.parseInt(args[1]));
    Path stop = Path.of(args[2]);
    long written = 0;
    try (JedisCluster cluster = new JedisCluster(Set.of(seed))) {
      while (!Files.exists(stop) || written < 10) {
        String key = "jedis:" + written;
        String reply = cluster.set(key, Long.toString(written));
        if (!"OK".equals(reply)) {
          System.err.println("SET " + key + " answered " + reply);
          System.exit(1);
        }
        written++;
      }
      for (long i = 0; i < written; i++) {
        String key = "jedis:" + i;
        String value = cluster.get(key);
        if (!Long.toString(i).equals(value)) {
          System.err.println("GET " + key + " read " + value + ", wrote " + i);
          System.exit(1);
        }
      }
    }
    System.out.println(written);
  }
}
