package site.ycsb.db.lightstore;

import java.nio.charset.StandardCharsets;
import java.util.Arrays;

/**
 * How a YCSB record is laid out on the drives: one string key per field.
 *
 * <pre>
 *   sub-key = table ":" "{" record-key NUL "}" field-name
 *   e.g.      usertable:{user6284781860667377211\0}field3
 * </pre>
 *
 * <ul>
 *   <li>The record key sits in a Redis Cluster hash tag, so all fields of a record hash to the
 *       same slot: one drive holds the whole record, and MSET/MGET of its fields are never
 *       cross-slot. (The tag is the bytes between the first '{' and the next '}', which depends
 *       only on the table and record key, so this holds for any record key.)
 *   <li>The NUL after the record key keeps the drive's byte order of sub-keys equal to the order
 *       of record keys: "user1" + NUL sorts before "user12", whereas "user1}" would sort after
 *       it. So one LS.RANGE from {@code prefix(table, startkey)} returns records in key order,
 *       each record's fields contiguous. Record keys must therefore not contain NUL; table names
 *       must not contain ':', '{' or '}'.
 *   <li>The table prefix keeps each YCSB table in its own key range, apart from other data on
 *       the drive.
 * </ul>
 */
final class KeyLayout {
  private KeyLayout() {}

  static byte[] utf8(String s) {
    return s.getBytes(StandardCharsets.UTF_8);
  }

  static void checkTable(String table) {
    if (table.isEmpty() || table.indexOf(':') >= 0 || table.indexOf('{') >= 0
        || table.indexOf('}') >= 0) {
      throw new IllegalArgumentException(
          "table name " + table + " must be non-empty without ':', '{' or '}'");
    }
  }

  static void checkRecordKey(String key) {
    if (key.indexOf('\0') >= 0) {
      throw new IllegalArgumentException("record key contains a NUL character");
    }
  }

  /** The first bytes of every sub-key of the record: {@code table:{key\0}}. */
  static byte[] recordPrefix(String table, String key) {
    checkTable(table);
    checkRecordKey(key);
    return utf8(table + ":{" + key + "\0}");
  }

  /** The sub-key holding one field of a record. */
  static byte[] subKey(String table, String key, String field) {
    checkTable(table);
    checkRecordKey(key);
    return utf8(table + ":{" + key + "\0}" + field);
  }

  /** Start of the table's sub-key range (inclusive): {@code table:{}. */
  static byte[] tableStart(String table) {
    checkTable(table);
    return utf8(table + ":{");
  }

  /** End of the table's sub-key range (exclusive): {@code table:|} ('|' is '{' + 1). */
  static byte[] tableEnd(String table) {
    checkTable(table);
    return utf8(table + ":|");
  }

  /** A sub-key split back into record key and field name. */
  static final class Parsed {
    final byte[] recordKey;
    final String field;

    Parsed(byte[] recordKey, String field) {
      this.recordKey = recordKey;
      this.field = field;
    }

    String recordKeyString() {
      return new String(recordKey, StandardCharsets.UTF_8);
    }
  }

  /**
   * Splits a sub-key of {@code table}, or returns null when it is not one (a key in the table's
   * range that this layout did not write).
   */
  static Parsed parse(byte[] tablePrefix, byte[] subKey) {
    int p = tablePrefix.length;
    if (subKey.length < p + 2
        || !Arrays.equals(subKey, 0, p, tablePrefix, 0, p)) {
      return null;
    }
    for (int i = p; i + 1 < subKey.length; i++) {
      if (subKey[i] == 0) {
        if (subKey[i + 1] != '}') {
          return null;
        }
        byte[] record = Arrays.copyOfRange(subKey, p, i);
        String field = new String(subKey, i + 2, subKey.length - i - 2, StandardCharsets.UTF_8);
        return new Parsed(record, field);
      }
    }
    return null;
  }

  /** The smallest key that sorts after {@code key} (the continuation point of LS.RANGE). */
  static byte[] successor(byte[] key) {
    return Arrays.copyOf(key, key.length + 1);
  }
}
