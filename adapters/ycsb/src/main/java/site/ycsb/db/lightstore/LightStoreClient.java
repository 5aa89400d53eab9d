package site.ycsb.db.lightstore;

import java.io.IOException;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.Vector;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicLong;
import site.ycsb.ByteArrayByteIterator;
import site.ycsb.ByteIterator;
import site.ycsb.DB;
import site.ycsb.DBException;
import site.ycsb.Status;

/**
 * YCSB binding for LightStore drives, after the paper's YCSB adapter: each field of a record is
 * its own key on the drive (see {@link KeyLayout}), written with one MSET and read with one
 * MGET; scans use the drives' ordered range read LS.RANGE (see {@link RangeScan}).
 *
 * <ul>
 *   <li>insert: MSET of every field's sub-key; update: MSET of the given fields only.
 *   <li>read: MGET of the requested fields, or of all {@code fieldcount} fields named
 *       {@code fieldnameprefix + i} (YCSB's CoreWorkload names) when every field is asked for.
 *       NOT_FOUND when none exists.
 *   <li>delete: DEL of those {@code fieldcount} sub-keys; NOT_FOUND when none existed.
 *   <li>scan: records with key &gt;= startkey in key order, over every primary in cluster mode.
 * </ul>
 *
 * <p>Properties: {@code lightstore.hosts} (comma-separated host:port, default 127.0.0.1:6379;
 * one address is a single drive, in cluster mode they are seeds for the slot map),
 * {@code lightstore.cluster} (true/false; default true when more than one host is listed),
 * {@code lightstore.connect.timeout.ms} (default 2000), {@code lightstore.timeout.ms} (reply
 * timeout, default 10000), {@code lightstore.password} (sent with AUTH on every connection;
 * default: the {@code LIGHTSTORE_PASSWORD} environment variable, else none), {@code
 * lightstore.tls.ca} (PEM CA file: connect over TLS; the drives' certificates must name the
 * addresses used), {@code lightstore.tls.cert} and {@code lightstore.tls.key} (PEM certificate
 * chain and PKCS#8 key, for drives that ask for client certificates). One connection per
 * YCSB thread per drive.
 *
 * <p>Any failure (drive unreachable, timeout, error reply, reply of the wrong shape) is
 * {@link Status#ERROR} with the reason logged to stderr (the first 20 of each operation, then one
 * in 10,000);
 * nothing is ever answered from a guess.
 */
public class LightStoreClient extends DB {
  public static final String HOSTS = "lightstore.hosts";
  public static final String CLUSTER = "lightstore.cluster";
  public static final String CONNECT_TIMEOUT = "lightstore.connect.timeout.ms";
  public static final String TIMEOUT = "lightstore.timeout.ms";
  public static final String PASSWORD = "lightstore.password";
  /** PEM file of the CA that signed the drives' certificates: connect over TLS. */
  public static final String TLS_CA = "lightstore.tls.ca";
  /** PEM certificate chain presented to drives that ask for client certificates. */
  public static final String TLS_CERT = "lightstore.tls.cert";
  /** PKCS#8 PEM private key of {@link #TLS_CERT}. */
  public static final String TLS_KEY = "lightstore.tls.key";
  /** The environment variable the password is read from when the property is not set. */
  public static final String PASSWORD_ENV = "LIGHTSTORE_PASSWORD";

  private static final byte[] MGET = KeyLayout.utf8("MGET");
  private static final byte[] MSET = KeyLayout.utf8("MSET");
  private static final byte[] DEL = KeyLayout.utf8("DEL");
  private static final byte[] LS_RANGE = KeyLayout.utf8("LS.RANGE");
  private static final byte[] COUNT = KeyLayout.utf8("COUNT");
  private static final byte[] PING = KeyLayout.utf8("PING");

  /** Failures so far per operation name, to log the first few of each kind. */
  private static final ConcurrentHashMap<String, AtomicLong> ERRORS = new ConcurrentHashMap<>();

  private Router router;
  private List<String> allFields;

  /** Parses {@code lightstore.hosts}. */
  static List<String> parseHosts(String value) {
    List<String> out = new ArrayList<>();
    for (String h : value.split(",")) {
      String t = h.trim();
      if (!t.isEmpty()) {
        out.add(t);
      }
    }
    return out;
  }

  /** The field names YCSB's CoreWorkload uses: prefix0 .. prefix(count-1). */
  static List<String> fieldNames(Properties p) {
    int count = Integer.parseInt(p.getProperty("fieldcount", "10"));
    String prefix = p.getProperty("fieldnameprefix", "field");
    List<String> names = new ArrayList<>(count);
    for (int i = 0; i < count; i++) {
      names.add(prefix + i);
    }
    return names;
  }

  @Override
  public void init() throws DBException {
    Properties p = getProperties();
    List<String> hosts = parseHosts(p.getProperty(HOSTS, "127.0.0.1:6379"));
    if (hosts.isEmpty()) {
      throw new DBException(HOSTS + " lists no drive");
    }
    boolean cluster = Boolean.parseBoolean(
        p.getProperty(CLUSTER, Boolean.toString(hosts.size() > 1)));
    if (!cluster && hosts.size() > 1) {
      throw new DBException(HOSTS + " lists " + hosts.size()
          + " drives but " + CLUSTER + " is false; list one drive, or use cluster mode");
    }
    allFields = fieldNames(p);
    try {
      String ca = p.getProperty(TLS_CA);
      if (ca == null && (p.getProperty(TLS_CERT) != null || p.getProperty(TLS_KEY) != null)) {
        // A client certificate means TLS was meant: never fall back to plain TCP (and send
        // the password in the clear).
        throw new IOException(TLS_CERT + " / " + TLS_KEY + " need " + TLS_CA
            + " (the CA that signed the drives' certificates)");
      }
      javax.net.ssl.SSLSocketFactory tls = ca == null ? null
          : Tls.socketFactory(ca, p.getProperty(TLS_CERT), p.getProperty(TLS_KEY));
      router = new Router(hosts, cluster,
          Integer.parseInt(p.getProperty(CONNECT_TIMEOUT, "2000")),
          Integer.parseInt(p.getProperty(TIMEOUT, "10000")),
          p.getProperty(PASSWORD, System.getenv(PASSWORD_ENV)), tls);
      if (cluster) {
        router.refreshMap();
        router.primaries();
      } else {
        Object pong = router.callAt(hosts.get(0), List.of(PING));
        if (!"PONG".equals(pong)) {
          throw new DriveException("PING answered " + pong);
        }
      }
    } catch (IOException | DriveException | IllegalArgumentException e) {
      if (router != null) {
        router.close();
      }
      throw new DBException("LightStore binding: " + e.getMessage(), e);
    }
  }

  @Override
  public void cleanup() {
    if (router != null) {
      router.close();
    }
  }

  private static Status fail(String op, String key, Exception e) {
    long n = ERRORS.computeIfAbsent(op, o -> new AtomicLong()).incrementAndGet();
    if (n <= 20 || n % 10_000 == 0) {
      System.err.println("lightstore: " + op + " " + key + " failed: " + e.getMessage()
          + (n > 20 ? " (" + n + " " + op + " errors so far)" : ""));
    }
    return e instanceof IllegalArgumentException ? Status.BAD_REQUEST : Status.ERROR;
  }

  private static DriveException unexpected(String cmd, Object reply) {
    String what;
    if (reply == null) {
      what = "nil";
    } else if (reply instanceof List) {
      what = "an array of " + ((List<?>) reply).size() + " elements";
    } else if (reply instanceof byte[]) {
      what = "a bulk string";
    } else if (reply instanceof Long) {
      what = "integer " + reply;
    } else {
      what = reply instanceof String ? "+" + reply : reply.toString();
    }
    return new DriveException(cmd + " answered " + what);
  }

  @Override
  public Status read(String table, String key, Set<String> fields,
      Map<String, ByteIterator> result) {
    List<String> names = fields == null ? allFields : new ArrayList<>(fields);
    try {
      if (names.isEmpty()) {
        return Status.OK;
      }
      List<byte[]> args = new ArrayList<>(names.size() + 1);
      args.add(MGET);
      for (String f : names) {
        args.add(KeyLayout.subKey(table, key, f));
      }
      Object reply = router.call(args.get(1), args);
      if (!(reply instanceof List) || ((List<?>) reply).size() != names.size()) {
        throw unexpected("MGET", reply);
      }
      List<?> values = (List<?>) reply;
      Map<String, ByteIterator> found = new HashMap<>();
      for (int i = 0; i < names.size(); i++) {
        Object v = values.get(i);
        if (v instanceof byte[]) {
          found.put(names.get(i), new ByteArrayByteIterator((byte[]) v));
        } else if (v != null) {
          throw unexpected("MGET", v);
        }
      }
      if (found.isEmpty()) {
        return Status.NOT_FOUND;
      }
      result.putAll(found);
      return Status.OK;
    } catch (IOException | DriveException | RuntimeException e) {
      return fail("read", key, e);
    }
  }

  private Status write(String op, String table, String key, Map<String, ByteIterator> values) {
    try {
      if (values.isEmpty()) {
        return Status.OK;
      }
      List<byte[]> args = new ArrayList<>(2 * values.size() + 1);
      args.add(MSET);
      for (Map.Entry<String, ByteIterator> e : values.entrySet()) {
        args.add(KeyLayout.subKey(table, key, e.getKey()));
        args.add(e.getValue().toArray());
      }
      Object reply = router.call(args.get(1), args);
      if (!"OK".equals(reply)) {
        throw unexpected("MSET", reply);
      }
      return Status.OK;
    } catch (IOException | DriveException | RuntimeException e) {
      return fail(op, key, e);
    }
  }

  @Override
  public Status update(String table, String key, Map<String, ByteIterator> values) {
    return write("update", table, key, values);
  }

  @Override
  public Status insert(String table, String key, Map<String, ByteIterator> values) {
    return write("insert", table, key, values);
  }

  @Override
  public Status delete(String table, String key) {
    try {
      List<byte[]> args = new ArrayList<>(allFields.size() + 1);
      args.add(DEL);
      for (String f : allFields) {
        args.add(KeyLayout.subKey(table, key, f));
      }
      if (args.size() == 1) {
        return Status.OK;
      }
      Object reply = router.call(args.get(1), args);
      if (!(reply instanceof Long)) {
        throw unexpected("DEL", reply);
      }
      return (Long) reply == 0 ? Status.NOT_FOUND : Status.OK;
    } catch (IOException | DriveException | RuntimeException e) {
      return fail("delete", key, e);
    }
  }

  private List<Object> range(String node, byte[] start, byte[] end, int count)
      throws IOException, DriveException {
    Object reply = router.callAt(node, Arrays.asList(
        LS_RANGE, start, end, COUNT, KeyLayout.utf8(Integer.toString(count))));
    if (!(reply instanceof List)) {
      throw unexpected("LS.RANGE at " + node, reply);
    }
    @SuppressWarnings("unchecked")
    List<Object> flat = (List<Object>) reply;
    return flat;
  }

  @Override
  public Status scan(String table, String startkey, int recordcount, Set<String> fields,
      Vector<HashMap<String, ByteIterator>> result) {
    try {
      List<RangeScan.Record> records = RangeScan.scan(this::range, router::owns, router.primaries(), table,
          // Every field of a record comes back from the range read, asked for or not.
          startkey, recordcount, fields, allFields.size());
      for (RangeScan.Record r : records) {
        result.add(r.values);
      }
      return Status.OK;
    } catch (IOException | DriveException | RuntimeException e) {
      return fail("scan", startkey, e);
    }
  }
}
