package site.ycsb.db.lightstore;

import static org.junit.Assert.assertEquals;
import static org.junit.Assert.assertThrows;
import static org.junit.Assert.assertTrue;
import static org.junit.Assume.assumeTrue;

import java.io.IOException;
import java.net.ServerSocket;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Random;
import java.util.Set;
import java.util.TreeMap;
import java.util.Vector;
import org.junit.Test;
import site.ycsb.ByteIterator;
import site.ycsb.DBException;
import site.ycsb.Status;
import site.ycsb.StringByteIterator;

/**
 * The binding against running drives, checked against an in-memory model: insert, read (all and
 * some fields), update of some fields, scan from many start keys, delete. Skipped unless
 * {@code -Dlightstore.it.hosts=host:port[,host:port...]} is given (several hosts: cluster mode);
 * {@code cargo test -p xtask -- --ignored ycsb} starts the drives and runs it.
 */
public class LiveDriveTest {
  private static final int FIELDS = 4;

  private static String hosts() {
    String h = System.getProperty("lightstore.it.hosts", "");
    return h.startsWith("${") ? "" : h;
  }

  private static LightStoreClient client(String hosts) throws DBException {
    Properties p = new Properties();
    p.setProperty(LightStoreClient.HOSTS, hosts);
    p.setProperty("fieldcount", Integer.toString(FIELDS));
    p.setProperty(LightStoreClient.TIMEOUT, "5000");
    LightStoreClient c = new LightStoreClient();
    c.setProperties(p);
    c.init();
    return c;
  }

  private static Map<String, String> strings(Map<String, ByteIterator> m) {
    Map<String, String> out = new HashMap<>();
    for (Map.Entry<String, ByteIterator> e : m.entrySet()) {
      out.put(e.getKey(), new String(e.getValue().toArray(), StandardCharsets.UTF_8));
    }
    return out;
  }

  @Test
  public void behavesLikeTheModel() throws Exception {
    String hosts = hosts();
    assumeTrue("set -Dlightstore.it.hosts to run against drives", !hosts.isEmpty());
    LightStoreClient c = client(hosts);
    Random rnd = new Random(42);
    String table = "livetest" + Long.toHexString(System.nanoTime());
    TreeMap<String, Map<String, String>> model = new TreeMap<>(
        (a, b) -> Arrays.compareUnsigned(a.getBytes(StandardCharsets.UTF_8),
            b.getBytes(StandardCharsets.UTF_8)));
    try {
      for (int i = 0; i < 400; i++) {
        String key = "user" + (rnd.nextInt(5) == 0 ? i : Math.abs(rnd.nextLong()));
        Map<String, String> values = new HashMap<>();
        for (int f = 0; f < FIELDS; f++) {
          values.put("field" + f, key + "-" + f + "-" + rnd.nextInt(1000));
        }
        assertEquals(Status.OK, c.insert(table, key, StringByteIterator.getByteIteratorMap(values)));
        model.put(key, values);
      }
      List<String> keys = new ArrayList<>(model.keySet());
      // Reads: every field, and some fields.
      for (int t = 0; t < 200; t++) {
        String key = keys.get(rnd.nextInt(keys.size()));
        Map<String, ByteIterator> got = new HashMap<>();
        assertEquals(Status.OK, c.read(table, key, null, got));
        assertEquals(model.get(key), strings(got));
        got.clear();
        assertEquals(Status.OK, c.read(table, key, Set.of("field1", "field3"), got));
        Map<String, String> want = new HashMap<>(model.get(key));
        want.keySet().retainAll(Set.of("field1", "field3"));
        assertEquals(want, strings(got));
      }
      assertEquals(Status.NOT_FOUND, c.read(table, "nosuchuser", null, new HashMap<>()));
      // Updates touch only the given fields.
      for (int t = 0; t < 100; t++) {
        String key = keys.get(rnd.nextInt(keys.size()));
        Map<String, String> change = Map.of("field2", "updated-" + t);
        assertEquals(Status.OK, c.update(table, key, StringByteIterator.getByteIteratorMap(change)));
        model.get(key).putAll(change);
        Map<String, ByteIterator> got = new HashMap<>();
        assertEquals(Status.OK, c.read(table, key, null, got));
        assertEquals(model.get(key), strings(got));
      }
      // Deletes.
      for (int t = 0; t < 40; t++) {
        String key = keys.get(rnd.nextInt(keys.size()));
        Status s = c.delete(table, key);
        assertEquals(model.remove(key) == null ? Status.NOT_FOUND : Status.OK, s);
        assertEquals(Status.NOT_FOUND, c.read(table, key, null, new HashMap<>()));
      }
      // Scans come back in key order with the model's records, over every drive.
      for (int t = 0; t < 150; t++) {
        String start = t % 10 == 0 ? "" : "user" + Math.abs(rnd.nextLong());
        int n = 1 + rnd.nextInt(t % 3 == 0 ? 500 : 100);
        Set<String> fields = t % 4 == 0 ? Set.of("field0") : null;
        Vector<HashMap<String, ByteIterator>> got = new Vector<>();
        assertEquals(Status.OK, c.scan(table, start, n, fields, got));
        List<Map<String, String>> want = new ArrayList<>();
        for (Map<String, String> v : model.tailMap(start, true).values()) {
          if (want.size() == n) {
            break;
          }
          Map<String, String> w = new HashMap<>(v);
          if (fields != null) {
            w.keySet().retainAll(fields);
          }
          want.add(w);
        }
        List<Map<String, String>> gotStrings = new ArrayList<>();
        for (HashMap<String, ByteIterator> r : got) {
          gotStrings.add(strings(r));
        }
        assertEquals("scan from " + start + " n " + n, want, gotStrings);
      }
      // Bad input is refused, not guessed at.
      assertEquals(Status.BAD_REQUEST, c.read(table, "a\0b", null, new HashMap<>()));
      assertEquals(Status.BAD_REQUEST, c.insert("bad:table", "k",
          StringByteIterator.getByteIteratorMap(Map.of("f", "v"))));
    } finally {
      for (String key : model.keySet()) {
        c.delete(table, key);
      }
      c.cleanup();
    }
  }

  private static byte[] b(String s) {
    return s.getBytes(StandardCharsets.UTF_8);
  }

  /**
   * Cluster mode with a stale slot map: a slot moves to another drive (a newer map pushed to
   * every drive with LS.CLUSTERMAP) after the binding loaded its map. Its next write to that
   * slot is redirected (-MOVED), lands on the new owner, and reads and scans find it there.
   * Changes the drives' map, so it runs on drives started for the test only.
   */
  @Test
  public void followsMovedAfterAMapChange() throws Exception {
    List<String> hosts = LightStoreClient.parseHosts(hosts());
    assumeTrue("needs -Dlightstore.it.hosts with several drives", hosts.size() > 1);
    LightStoreClient c = client(String.join(",", hosts));
    String table = "movetest" + Long.toHexString(System.nanoTime());
    String key = "user42";
    int slot = Slots.slot(KeyLayout.subKey(table, key, "field0"));
    Object[] hp = Router.splitAddress(hosts.get(0));
    try (RespConnection admin = new RespConnection((String) hp[0], (Integer) hp[1], 2000, 5000)) {
      Object slots = admin.call(b("CLUSTER"), b("SLOTS"));
      String[] owners = Router.parseSlots(slots, hosts.get(0));
      // Node ids and addresses from CLUSTER SLOTS; this test only handles maps without replicas.
      Map<String, String> idOf = new HashMap<>();
      for (Object o : (List<?>) slots) {
        List<?> e = (List<?>) o;
        assumeTrue("maps with replicas are not handled here", e.size() == 3);
        List<?> node = (List<?>) e.get(2);
        idOf.put(owners[((Long) e.get(0)).intValue()],
            new String((byte[]) node.get(2), StandardCharsets.UTF_8));
      }
      String from = owners[slot];
      String to = idOf.keySet().stream().filter(a -> !a.equals(from)).findFirst().orElseThrow();
      String text = new String((byte[]) admin.call(b("LS.CLUSTERMAP")), StandardCharsets.UTF_8);
      java.util.regex.Matcher m =
          java.util.regex.Pattern.compile("(?m)^version\\s*=\\s*(\\d+)").matcher(text);
      assertTrue(text, m.find());
      long version = Long.parseLong(m.group(1)) + 1;
      owners[slot] = to;
      StringBuilder map = new StringBuilder("version = " + version + "\n");
      for (Map.Entry<String, String> node : idOf.entrySet()) {
        map.append("\n[[node]]\nid = \"").append(node.getValue()).append("\"\naddr = \"")
            .append(node.getKey()).append("\"\nslots = [");
        String sep = "";
        for (int s = 0; s < Slots.COUNT; s++) {
          if (!owners[s].equals(node.getKey())) {
            continue;
          }
          int e = s;
          while (e + 1 < Slots.COUNT && owners[e + 1].equals(node.getKey())) {
            e++;
          }
          map.append(sep).append("[").append(s).append(", ").append(e).append("]");
          sep = ", ";
          s = e;
        }
        map.append("]\n");
      }
      for (String addr : idOf.keySet()) {
        Object[] a = Router.splitAddress(addr);
        try (RespConnection r = new RespConnection((String) a[0], (Integer) a[1], 2000, 5000)) {
          assertEquals("OK",
              r.call(b("LS.CLUSTERMAP"), b(Long.toString(version)), b(map.toString())));
        }
      }
      // The binding still has the old map: the write goes to the old owner first.
      Map<String, String> values = Map.of("field0", "moved", "field1", "too");
      assertEquals(Status.OK, c.insert(table, key, StringByteIterator.getByteIteratorMap(values)));
      Map<String, ByteIterator> got = new HashMap<>();
      assertEquals(Status.OK, c.read(table, key, null, got));
      assertEquals(values, strings(got));
      Vector<HashMap<String, ByteIterator>> scanned = new Vector<>();
      assertEquals(Status.OK, c.scan(table, "", 10, null, scanned));
      assertEquals(1, scanned.size());
      assertEquals(values, strings(scanned.get(0)));
      // Stored on the new owner only.
      for (String addr : idOf.keySet()) {
        Object[] a = Router.splitAddress(addr);
        try (RespConnection r = new RespConnection((String) a[0], (Integer) a[1], 2000, 5000)) {
          Object range = r.call(b("LS.RANGE"), KeyLayout.tableStart(table),
              KeyLayout.tableEnd(table));
          assertEquals(addr, addr.equals(to) ? 4 : 0, ((List<?>) range).size());
        }
      }
      assertEquals(Status.OK, c.delete(table, key));
    } finally {
      c.cleanup();
    }
  }

  /**
   * A one-connection server that answers PING, then each later command with the next scripted
   * reply, then closes.
   */
  private static ServerSocket scripted(String... replies) throws IOException {
    ServerSocket server = new ServerSocket(0);
    Thread t = new Thread(() -> {
      try (ServerSocket srv = server; java.net.Socket s = srv.accept()) {
        java.io.InputStream in = s.getInputStream();
        java.io.OutputStream out = s.getOutputStream();
        List<String> script = new ArrayList<>();
        script.add("+PONG\r\n");
        script.addAll(List.of(replies));
        for (String reply : script) {
          // Read one command: an array of bulk strings.
          Object cmd = RespConnection.readReply(in);
          if (cmd == null) {
            return;
          }
          out.write(reply.getBytes(StandardCharsets.ISO_8859_1));
          out.flush();
        }
      } catch (IOException ignored) {
        // The client went away.
      }
    });
    t.setDaemon(true);
    t.start();
    return server;
  }

  private static LightStoreClient clientOf(ServerSocket s, int timeoutMs) throws DBException {
    Properties p = new Properties();
    p.setProperty(LightStoreClient.HOSTS, "127.0.0.1:" + s.getLocalPort());
    p.setProperty(LightStoreClient.TIMEOUT, Integer.toString(timeoutMs));
    p.setProperty("fieldcount", "2");
    LightStoreClient c = new LightStoreClient();
    c.setProperties(p);
    c.init();
    return c;
  }

  @Test
  public void failuresAreErrorsNotAnswers() throws Exception {
    int port;
    try (ServerSocket s = new ServerSocket(0)) {
      port = s.getLocalPort();
    }
    String dead = "127.0.0.1:" + port;
    assertThrows(DBException.class, () -> client(dead));
    assertThrows(DBException.class, () -> client(""));
    assertThrows(DBException.class, () -> client("127.0.0.1:1,127.0.0.1:2,nonsense"));
    Map<String, ByteIterator> one = StringByteIterator.getByteIteratorMap(Map.of("field0", "v"));
    // Replies of the wrong shape.
    LightStoreClient c = clientOf(scripted("$3\r\nabc\r\n", "*1\r\n$1\r\na\r\n",
        "*2\r\n:1\r\n$-1\r\n", ":1\r\n", "-ERR the drive is full\r\n", "+OK\r\n",
        "*1\r\n$1\r\nk\r\n"), 2000);
    Map<String, ByteIterator> got = new HashMap<>();
    assertEquals(Status.ERROR, c.read("usertable", "k", null, got));
    assertEquals(Status.ERROR, c.read("usertable", "k", null, got));
    assertEquals(Status.ERROR, c.read("usertable", "k", null, got));
    assertEquals(Status.ERROR, c.insert("usertable", "k", one));
    assertEquals(Status.ERROR, c.update("usertable", "k", one));
    assertEquals(Status.ERROR, c.delete("usertable", "k"));
    assertEquals(Status.ERROR, c.scan("usertable", "k", 5, null, new Vector<>()));
    assertTrue(got.isEmpty());
    // The server is gone now: reconnecting fails, so does every operation.
    assertEquals(Status.ERROR, c.read("usertable", "k", null, got));
    assertEquals(Status.ERROR, c.insert("usertable", "k", one));
    c.cleanup();
    // A drive that stops answering: the reply timeout ends the wait.
    long t0 = System.nanoTime();
    try (ServerSocket mute = new ServerSocket(0)) {
      Properties p = new Properties();
      p.setProperty(LightStoreClient.HOSTS, "127.0.0.1:" + mute.getLocalPort());
      p.setProperty(LightStoreClient.TIMEOUT, "300");
      LightStoreClient m = new LightStoreClient();
      m.setProperties(p);
      // Accepted by the backlog, never answered: init's PING times out.
      assertThrows(DBException.class, m::init);
    }
    assertTrue((System.nanoTime() - t0) / 1_000_000 < 5_000);
  }
}
