package site.ycsb.db.lightstore;

import java.io.IOException;
import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.List;
import java.util.Set;
import site.ycsb.ByteArrayByteIterator;
import site.ycsb.ByteIterator;

/**
 * YCSB's SCAN over the drives' ordered range reads ({@code LS.RANGE start end COUNT n}).
 *
 * <p>Each drive holding part of the table gets a cursor that walks its sub-keys from
 * {@code table:{startkey\0}} to the table's end in batches, turning consecutive sub-keys of one
 * record key into one record (a record is complete once a sub-key of the next record, or the end
 * of the range, has been seen; the range ends with an empty reply, since the drive may also
 * stop a reply early). The cursors are merged by record key, so the records come back
 * in global key order. With one drive that is a single LS.RANGE of {@code n * fieldcount + 1}
 * pairs. With N drives the records are spread by hash slot, so every drive must be asked: each
 * cursor first fetches about {@code 1.25 n / N + 1} records and fetches more only if the merge
 * drains it, so a scan costs N round trips at least and reads about 1.25x the records it
 * returns (more when the keys are unevenly spread).
 */
final class RangeScan {
  /** The drive's largest COUNT. */
  static final int MAX_COUNT = 10_000;

  /** Sends LS.RANGE to one drive and returns the flat [key, value, ...] reply. */
  interface RangeReader {
    List<Object> range(String node, byte[] start, byte[] end, int count)
        throws IOException, DriveException;
  }

  /**
   * Whether a drive serves a key's slot. A drive's LS.RANGE returns everything it stores in the
   * range, which after a slot map change can include keys of slots it no longer serves (nothing
   * migrates data); those are dropped so each key is taken from its current owner only.
   */
  interface Ownership {
    boolean owns(String node, byte[] key);
  }

  /** One record found by a scan. */
  static final class Record {
    final byte[] key;
    final HashMap<String, ByteIterator> values = new HashMap<>();

    Record(byte[] key) {
      this.key = key;
    }
  }

  /** Walks one drive's part of the table in key order. */
  static final class Cursor {
    private final RangeReader reader;
    private final Ownership ownership;
    private final String node;
    private final byte[] tablePrefix;
    private final byte[] end;
    private final Set<String> fields;
    private final int countPerFetch;
    private final ArrayDeque<Record> ready = new ArrayDeque<>();
    private byte[] next;
    private Record partial;
    private boolean exhausted;

    Cursor(RangeReader reader, Ownership ownership, String node, String table, String startKey,
        Set<String> fields, int recordsPerFetch, int fieldsPerRecord) {
      this.reader = reader;
      this.ownership = ownership;
      this.node = node;
      this.tablePrefix = KeyLayout.tableStart(table);
      this.next = KeyLayout.recordPrefix(table, startKey);
      this.end = KeyLayout.tableEnd(table);
      this.fields = fields;
      long count = (long) Math.max(1, recordsPerFetch) * Math.max(1, fieldsPerRecord) + 1;
      this.countPerFetch = (int) Math.min(MAX_COUNT, count);
    }

    /** The next record of this drive, or null when it has no more. */
    Record peek() throws IOException, DriveException {
      while (ready.isEmpty() && !exhausted) {
        fetch();
      }
      return ready.peekFirst();
    }

    Record poll() throws IOException, DriveException {
      Record r = peek();
      ready.pollFirst();
      return r;
    }

    private void fetch() throws IOException, DriveException {
      List<Object> flat = reader.range(node, next, end, countPerFetch);
      if (flat.size() % 2 != 0 || flat.size() / 2 > countPerFetch) {
        throw new DriveException("LS.RANGE at " + node + ": reply of " + flat.size()
            + " elements for COUNT " + countPerFetch);
      }
      byte[] last = null;
      for (int i = 0; i < flat.size(); i += 2) {
        Object k = flat.get(i);
        Object v = flat.get(i + 1);
        if (!(k instanceof byte[]) || !(v instanceof byte[])) {
          throw new DriveException("LS.RANGE at " + node + ": non-string element in the reply");
        }
        byte[] key = (byte[]) k;
        if (last != null && Arrays.compareUnsigned(last, key) >= 0
            || Arrays.compareUnsigned(key, next) < 0 || Arrays.compareUnsigned(key, end) >= 0) {
          throw new DriveException("LS.RANGE at " + node + ": keys out of order or range");
        }
        last = key;
        KeyLayout.Parsed p = KeyLayout.parse(tablePrefix, key);
        if (p == null || !ownership.owns(node, key)) {
          continue; // Not written by this layout, or a slot this drive no longer serves.
        }
        if (partial == null || !Arrays.equals(partial.key, p.recordKey)) {
          if (partial != null) {
            ready.addLast(partial);
          }
          partial = new Record(p.recordKey);
        }
        if (fields == null || fields.contains(p.field)) {
          partial.values.put(p.field, new ByteArrayByteIterator((byte[]) v));
        }
      }
      // A short reply does not mean the range is done: the drive also stops early once a
      // reply carries 64 MiB of values. Only an empty reply ends it.
      if (flat.isEmpty()) {
        exhausted = true;
        if (partial != null) {
          ready.addLast(partial);
          partial = null;
        }
      } else {
        next = KeyLayout.successor(last);
      }
    }
  }

  private RangeScan() {}

  /**
   * The first {@code n} records with key >= {@code startKey} over all {@code nodes}, in key
   * order.
   */
  static List<Record> scan(RangeReader reader, Ownership ownership, List<String> nodes,
      String table, String startKey, int n, Set<String> fields, int fieldsPerRecord)
      throws IOException, DriveException {
    List<Record> out = new ArrayList<>(Math.max(0, n));
    if (n <= 0) {
      return out;
    }
    int perFetch = nodes.size() == 1 ? n : (int) Math.ceil(1.25 * n / nodes.size()) + 1;
    List<Cursor> cursors = new ArrayList<>(nodes.size());
    for (String node : nodes) {
      cursors.add(new Cursor(reader, ownership, node, table, startKey, fields, perFetch,
          fieldsPerRecord));
    }
    while (out.size() < n) {
      Cursor best = null;
      Record bestRec = null;
      for (Cursor c : cursors) {
        Record r = c.peek();
        if (r != null && (bestRec == null || Arrays.compareUnsigned(r.key, bestRec.key) < 0)) {
          best = c;
          bestRec = r;
        }
      }
      if (best == null) {
        break;
      }
      best.poll();
      out.add(bestRec);
    }
    return out;
  }
}
