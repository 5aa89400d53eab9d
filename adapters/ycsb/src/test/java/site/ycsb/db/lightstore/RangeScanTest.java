package site.ycsb.db.lightstore;

import static org.junit.Assert.assertEquals;
import static org.junit.Assert.assertThrows;
import static org.junit.Assert.assertTrue;

import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.NavigableMap;
import java.util.Random;
import java.util.Set;
import java.util.TreeMap;
import java.util.TreeSet;
import org.junit.Test;
import site.ycsb.ByteIterator;

/** The scan logic against in-memory drives that answer LS.RANGE like the real one. */
public class RangeScanTest {
  private static final String TABLE = "usertable";

  /** N fake drives splitting the slots evenly, as the cluster map does. */
  private static final class FakeCluster implements RangeScan.RangeReader, RangeScan.Ownership {
    final List<NavigableMap<byte[], byte[]>> drives = new ArrayList<>();
    final TreeMap<String, Map<String, String>> model = new TreeMap<>(
        (a, b) -> Arrays.compareUnsigned(a.getBytes(StandardCharsets.UTF_8),
            b.getBytes(StandardCharsets.UTF_8)));
    int calls;
    long pairsReturned;
    /** Like the drive's reply byte cap: some replies stop early. */
    final Random shortReplies = new Random(3);
    boolean cutShort;

    FakeCluster(int n) {
      for (int i = 0; i < n; i++) {
        drives.add(new TreeMap<>(Arrays::compareUnsigned));
      }
    }

    List<String> nodes() {
      List<String> out = new ArrayList<>();
      for (int i = 0; i < drives.size(); i++) {
        out.add("node" + i);
      }
      return out;
    }

    int ownerOf(byte[] key) {
      return Slots.slot(key) * drives.size() / Slots.COUNT;
    }

    void putRaw(byte[] key, byte[] value) {
      drives.get(ownerOf(key)).put(key, value);
    }

    @Override
    public boolean owns(String node, byte[] key) {
      return Integer.parseInt(node.substring(4)) == ownerOf(key);
    }

    /** A stale copy left on a drive that no longer serves the key's slot. */
    void putStale(byte[] key, byte[] value) {
      drives.get((ownerOf(key) + 1) % drives.size()).put(key, value);
    }

    void insert(String record, int fields) {
      Map<String, String> values = new HashMap<>();
      for (int f = 0; f < fields; f++) {
        String v = record + "/" + f;
        values.put("field" + f, v);
        putRaw(KeyLayout.subKey(TABLE, record, "field" + f), v.getBytes(StandardCharsets.UTF_8));
      }
      model.put(record, values);
    }

    @Override
    public List<Object> range(String node, byte[] start, byte[] end, int count) {
      calls++;
      NavigableMap<byte[], byte[]> d = drives.get(Integer.parseInt(node.substring(4)));
      List<Object> out = new ArrayList<>();
      if (cutShort && count > 1 && shortReplies.nextInt(4) == 0) {
        count = 1 + shortReplies.nextInt(count - 1);
      }
      for (Map.Entry<byte[], byte[]> e : d.subMap(start, true, end, false).entrySet()) {
        if (out.size() / 2 >= count) {
          break;
        }
        out.add(e.getKey());
        out.add(e.getValue());
      }
      pairsReturned += out.size() / 2;
      return out;
    }
  }

  private static Map<String, String> strings(Map<String, ByteIterator> m) {
    Map<String, String> out = new HashMap<>();
    for (Map.Entry<String, ByteIterator> e : m.entrySet()) {
      out.put(e.getKey(), new String(e.getValue().toArray(), StandardCharsets.UTF_8));
    }
    return out;
  }

  private static void check(FakeCluster c, String start, int n, Set<String> fields,
      int declaredFields) throws Exception {
    List<RangeScan.Record> got =
        RangeScan.scan(c, c, c.nodes(), TABLE, start, n, fields, declaredFields);
    List<String> wantKeys = new ArrayList<>(c.model.tailMap(start, true).keySet());
    wantKeys = wantKeys.subList(0, Math.min(n, wantKeys.size()));
    List<String> gotKeys = new ArrayList<>();
    for (int i = 0; i < got.size(); i++) {
      String k = new String(got.get(i).key, StandardCharsets.UTF_8);
      gotKeys.add(k);
      Map<String, String> want = new HashMap<>(c.model.get(k));
      if (fields != null) {
        want.keySet().retainAll(fields);
      }
      assertEquals(k, want, strings(got.get(i).values));
    }
    assertEquals("start " + start + " n " + n, wantKeys, gotKeys);
  }

  @Test
  public void scansMatchTheModel() throws Exception {
    Random rnd = new Random(7);
    for (int drives : new int[] {1, 2, 3, 4}) {
      FakeCluster c = new FakeCluster(drives);
      for (int i = 0; i < 600; i++) {
        c.insert("user" + Math.abs(rnd.nextLong() % 1_000_000_000L), 10);
      }
      // Keys next to each other by prefix, and other data in and around the table's range.
      c.insert("user1", 10);
      c.insert("user12", 10);
      c.insert("user1~", 10);
      c.putRaw("usertable:{junk".getBytes(StandardCharsets.UTF_8), new byte[] {1});
      c.putRaw("usertable:zzz".getBytes(StandardCharsets.UTF_8), new byte[] {1});
      c.putRaw("other:{user5\0}field0".getBytes(StandardCharsets.UTF_8), new byte[] {1});
      if (drives > 1) {
        // Left behind by a slot move: the old drive still returns it from LS.RANGE.
        for (String k : new ArrayList<>(c.model.keySet()).subList(0, 50)) {
          c.putStale(KeyLayout.subKey(TABLE, k, "field0"), new byte[] {9});
          c.putStale(KeyLayout.subKey(TABLE, k + "stale", "field0"), new byte[] {9});
        }
      }
      for (int t = 0; t < 200; t++) {
        String start = "user" + Math.abs(rnd.nextLong() % 1_000_000_000L);
        int n = 1 + rnd.nextInt(100);
        check(c, start, n, null, 10);
      }
      check(c, "user1", 3, null, 10);
      check(c, "", 700, null, 10);
      check(c, "user", 5, Set.of("field3", "field7"), 10);
      check(c, "user5", 0, null, 10);
      check(c, "~", 10, null, 10);
      // A wrong fieldcount only costs round trips: records split across batches still join up.
      check(c, "user3", 40, null, 1);
      check(c, "user3", 40, null, 50);
      c.cutShort = true;
      for (int t = 0; t < 50; t++) {
        check(c, "user" + Math.abs(rnd.nextLong() % 1_000_000_000L), 1 + rnd.nextInt(100), null,
            10);
      }
      check(c, "", 700, null, 10);
      c.cutShort = false;
    }
  }

  @Test
  public void clusterScansReadLittleMoreThanTheyReturn() throws Exception {
    Random rnd = new Random(11);
    FakeCluster c = new FakeCluster(4);
    for (int i = 0; i < 5000; i++) {
      c.insert("user" + Math.abs(rnd.nextLong()), 10);
    }
    c.pairsReturned = 0;
    int scans = 200;
    long want = 0;
    for (int t = 0; t < scans; t++) {
      List<RangeScan.Record> got = RangeScan.scan(c, c, c.nodes(), TABLE,
          "user" + Math.abs(rnd.nextLong()), 100, null, 10);
      want += got.size() * 10L;
    }
    assertTrue("read " + c.pairsReturned + " pairs for " + want,
        c.pairsReturned < 2 * want);
  }

  @Test
  public void outOfOrderRepliesAreErrors() {
    RangeScan.RangeReader liar = (node, start, end, count) -> List.of(
        KeyLayout.subKey(TABLE, "b", "f"), new byte[0], KeyLayout.subKey(TABLE, "a", "f"),
        new byte[0]);
    assertThrows(DriveException.class,
        () -> RangeScan.scan(liar, (n, k) -> true, List.of("n"), TABLE, "", 5, null, 1));
    RangeScan.RangeReader odd = (node, start, end, count) -> List.of(new byte[0]);
    assertThrows(DriveException.class,
        () -> RangeScan.scan(odd, (n, k) -> true, List.of("n"), TABLE, "", 5, null, 1));
    RangeScan.RangeReader below = (node, start, end, count) -> List.of(
        KeyLayout.subKey(TABLE, "a", "f"), new byte[0]);
    assertThrows(DriveException.class,
        () -> RangeScan.scan(below, (n, k) -> true, List.of("n"), TABLE, "b", 5, null, 1));
  }

  @Test
  public void clusterSlotsReplyIsParsed() throws Exception {
    List<Object> reply = List.of(
        List.of(0L, 8191L, List.of("127.0.0.1".getBytes(StandardCharsets.UTF_8), 7001L,
            "a".repeat(40).getBytes(StandardCharsets.UTF_8))),
        List.of(8192L, 16383L, List.of(new byte[0], 7002L)));
    String[] map = Router.parseSlots(reply, "10.0.0.9:7005");
    assertEquals("127.0.0.1:7001", map[0]);
    assertEquals("127.0.0.1:7001", map[8191]);
    assertEquals("10.0.0.9:7002", map[8192]);
    assertEquals(new TreeSet<>(List.of("127.0.0.1:7001", "10.0.0.9:7002")),
        new TreeSet<>(Arrays.asList(map)));
    assertThrows(DriveException.class, () -> Router.parseSlots(
        new RespConnection.Error("ERR This instance has cluster support disabled"), "x:1"));
  }
}
