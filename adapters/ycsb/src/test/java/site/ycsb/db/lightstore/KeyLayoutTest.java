package site.ycsb.db.lightstore;

import static org.junit.Assert.assertArrayEquals;
import static org.junit.Assert.assertEquals;
import static org.junit.Assert.assertNull;
import static org.junit.Assert.assertThrows;
import static org.junit.Assert.assertTrue;

import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import org.junit.Test;

public class KeyLayoutTest {
  private static byte[] b(String s) {
    return s.getBytes(StandardCharsets.UTF_8);
  }

  @Test
  public void subKeyLayout() {
    assertArrayEquals(b("usertable:{user123\0}field0"),
        KeyLayout.subKey("usertable", "user123", "field0"));
    assertArrayEquals(b("usertable:{user123\0}"), KeyLayout.recordPrefix("usertable", "user123"));
    assertArrayEquals(b("usertable:{"), KeyLayout.tableStart("usertable"));
    assertArrayEquals(b("usertable:|"), KeyLayout.tableEnd("usertable"));
  }

  @Test
  public void parseRoundTrip() {
    byte[] prefix = KeyLayout.tableStart("usertable");
    KeyLayout.Parsed p = KeyLayout.parse(prefix, KeyLayout.subKey("usertable", "user7", "f{x}"));
    assertEquals("user7", p.recordKeyString());
    assertEquals("f{x}", p.field);
    KeyLayout.Parsed empty = KeyLayout.parse(prefix, KeyLayout.subKey("usertable", "", "f"));
    assertEquals("", empty.recordKeyString());
    assertNull(KeyLayout.parse(prefix, b("usertable:{user7}field0")));
    assertNull(KeyLayout.parse(prefix, b("othertable:{user7\0}field0")));
    assertNull(KeyLayout.parse(prefix, b("usertable:{")));
  }

  @Test
  public void fieldsOfARecordShareItsSlot() {
    for (String key : List.of("user1", "user6284781860667377211", "a}b", "{x}", "")) {
      int slot = Slots.slot(KeyLayout.subKey("usertable", key, "field0"));
      for (int i = 1; i < 10; i++) {
        assertEquals(key, slot, Slots.slot(KeyLayout.subKey("usertable", key, "field" + i)));
      }
    }
    // The tag is the record key (plus the NUL), so records spread over the slots.
    assertEquals(Slots.slot(b("user1\0")), Slots.slot(KeyLayout.subKey("usertable", "user1", "f")));
  }

  @Test
  public void subKeysSortLikeRecordKeys() {
    List<String> keys = new ArrayList<>(List.of("user1", "user12", "user1~", "user2", "user",
        "user10", "user1 ", "user\u00e9", "a", "user123456789"));
    List<byte[]> subKeys = new ArrayList<>();
    for (String k : keys) {
      for (String f : List.of("field0", "field9", "zz", "")) {
        subKeys.add(KeyLayout.subKey("usertable", k, f));
      }
    }
    subKeys.sort(Arrays::compareUnsigned);
    keys.sort((x, y) -> Arrays.compareUnsigned(b(x), b(y)));
    // Walking the sorted sub-keys meets every record once, in record-key order.
    List<String> seen = new ArrayList<>();
    byte[] prefix = KeyLayout.tableStart("usertable");
    for (byte[] s : subKeys) {
      String k = KeyLayout.parse(prefix, s).recordKeyString();
      if (seen.isEmpty() || !seen.get(seen.size() - 1).equals(k)) {
        seen.add(k);
      }
    }
    assertEquals(keys, seen);
    // The record prefix of a key is at or below every sub-key of that key and above the
    // sub-keys of smaller keys.
    for (byte[] s : subKeys) {
      String k = KeyLayout.parse(prefix, s).recordKeyString();
      assertTrue(Arrays.compareUnsigned(KeyLayout.recordPrefix("usertable", k), s) <= 0);
    }
  }

  @Test
  public void badNamesAreRefused() {
    assertThrows(IllegalArgumentException.class, () -> KeyLayout.subKey("t", "a\0b", "f"));
    assertThrows(IllegalArgumentException.class, () -> KeyLayout.subKey("t:x", "a", "f"));
    assertThrows(IllegalArgumentException.class, () -> KeyLayout.subKey("t{", "a", "f"));
    assertThrows(IllegalArgumentException.class, () -> KeyLayout.subKey("", "a", "f"));
  }

  @Test
  public void successorIsTheNextKey() {
    assertArrayEquals(new byte[] {'a', 0}, KeyLayout.successor(b("a")));
  }
}
