package site.ycsb.db.lightstore;

import static org.junit.Assert.assertEquals;

import java.nio.charset.StandardCharsets;
import org.junit.Test;

public class SlotsTest {
  private static int slot(String s) {
    return Slots.slot(s.getBytes(StandardCharsets.UTF_8));
  }

  @Test
  public void matchesRedisCluster() {
    // From the Redis Cluster specification and CLUSTER KEYSLOT (as kvproto's tests).
    assertEquals(0x31C3, Slots.crc16("123456789".getBytes(StandardCharsets.US_ASCII), 0, 9));
    assertEquals(12182, slot("foo"));
    assertEquals(5061, slot("bar"));
    assertEquals(0, slot(""));
  }

  @Test
  public void hashTags() {
    assertEquals(slot("user1000"), slot("{user1000}.following"));
    assertEquals(slot("foo{}{bar}"), Slots.crc16("foo{}{bar}".getBytes(StandardCharsets.UTF_8),
        0, 10) & 16383);
    assertEquals(slot("{bar"), slot("foo{{bar}}zap"));
    assertEquals(slot("bar"), slot("foo{bar}{zap}"));
    assertEquals(Slots.crc16(new byte[] {'{'}, 0, 1) & 16383, slot("{"));
  }
}
