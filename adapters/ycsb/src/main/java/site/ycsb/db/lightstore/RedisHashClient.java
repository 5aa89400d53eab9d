package site.ycsb.db.lightstore;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
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
 * The command pattern of YCSB's stock {@code redis} binding, for any Redis server: the drive
 * or redis-server, so both run the same commands in a benchmark. Maven Central publishes only
 * {@code site.ycsb:core}, not the stock bindings, so this class sends what that binding sends
 * (written here over {@link RespConnection}; no code of it is copied):
 *
 * <ul>
 *   <li>insert: {@code HMSET key field value ...}, then {@code ZADD _indices <hash(key)> key}
 *       (the index the stock binding keeps for scans, scored by {@code String.hashCode});
 *   <li>read: {@code HGETALL key} for all fields, else {@code HMGET key field ...};
 *   <li>update: {@code HMSET key field value ...};
 *   <li>delete: {@code DEL key} and {@code ZREM _indices key};
 *   <li>scan: {@code ZRANGEBYSCORE _indices <hash(startkey)> +inf LIMIT 0 <count>}, then one
 *       read per key, one after another (as the stock binding does).
 * </ul>
 *
 * <p>A read that finds nothing is {@link Status#ERROR}, as in the stock binding. Properties, as
 * the stock binding names them: {@code redis.host} (default 127.0.0.1), {@code redis.port}
 * (6379), {@code redis.password} (none), {@code redis.timeout} (reply timeout in ms, 10000).
 */
public class RedisHashClient extends DB {
  public static final String HOST = "redis.host";
  public static final String PORT = "redis.port";
  public static final String PASSWORD = "redis.password";
  public static final String TIMEOUT = "redis.timeout";

  /** The sorted set of record keys the stock binding keeps for scans. */
  static final byte[] INDEX = utf8("_indices");

  private static final byte[] HMSET = utf8("HMSET");
  private static final byte[] HMGET = utf8("HMGET");
  private static final byte[] HGETALL = utf8("HGETALL");
  private static final byte[] ZADD = utf8("ZADD");
  private static final byte[] ZREM = utf8("ZREM");
  private static final byte[] ZRANGEBYSCORE = utf8("ZRANGEBYSCORE");
  private static final byte[] DEL = utf8("DEL");
  private static final byte[] LIMIT = utf8("LIMIT");
  private static final byte[] PLUS_INF = utf8("+inf");

  /** Failures so far per operation name, to log the first few of each kind. */
  private static final ConcurrentHashMap<String, AtomicLong> ERRORS = new ConcurrentHashMap<>();

  private RespConnection conn;

  static byte[] utf8(String s) {
    return s.getBytes(StandardCharsets.UTF_8);
  }

  /** The scan index's score of a key: the stock binding's {@code key.hashCode()}. */
  static byte[] score(String key) {
    return utf8(Double.toString(key.hashCode()));
  }

  @Override
  public void init() throws DBException {
    Properties p = getProperties();
    String host = p.getProperty(HOST, "127.0.0.1");
    int port = Integer.parseInt(p.getProperty(PORT, "6379"));
    int timeout = Integer.parseInt(p.getProperty(TIMEOUT, "10000"));
    // AUTH on every (re)connection, as the stock binding's Jedis does.
    conn = new RespConnection(host, port, 2000, timeout, p.getProperty(PASSWORD));
  }

  @Override
  public void cleanup() {
    if (conn != null) {
      conn.close();
    }
  }

  private static Status fail(String op, String key, String why) {
    long n = ERRORS.computeIfAbsent(op, o -> new AtomicLong()).incrementAndGet();
    if (n <= 20 || n % 10_000 == 0) {
      System.err.println("redis: " + op + " " + key + " failed: " + why
          + (n > 20 ? " (" + n + " " + op + " errors so far)" : ""));
    }
    return Status.ERROR;
  }

  @Override
  public Status read(String table, String key, Set<String> fields,
      Map<String, ByteIterator> result) {
    try {
      List<byte[]> args = new ArrayList<>();
      List<String> names = null;
      if (fields == null) {
        args.add(HGETALL);
        args.add(utf8(key));
      } else {
        names = new ArrayList<>(fields);
        args.add(HMGET);
        args.add(utf8(key));
        for (String f : names) {
          args.add(utf8(f));
        }
      }
      Object reply = conn.call(args);
      if (!(reply instanceof List)) {
        return fail("read", key, "answered " + reply);
      }
      List<?> items = (List<?>) reply;
      if (names == null) {
        if (items.size() % 2 != 0) {
          return fail("read", key, "HGETALL answered an odd number of elements");
        }
        for (int i = 0; i < items.size(); i += 2) {
          Object f = items.get(i);
          Object v = items.get(i + 1);
          if (!(f instanceof byte[]) || !(v instanceof byte[])) {
            return fail("read", key, "HGETALL answered a non-string element");
          }
          result.put(new String((byte[]) f, StandardCharsets.UTF_8),
              new ByteArrayByteIterator((byte[]) v));
        }
      } else {
        if (items.size() != names.size()) {
          return fail("read", key, "HMGET answered " + items.size() + " values");
        }
        for (int i = 0; i < names.size(); i++) {
          if (items.get(i) instanceof byte[]) {
            result.put(names.get(i), new ByteArrayByteIterator((byte[]) items.get(i)));
          }
        }
      }
      return result.isEmpty() ? Status.ERROR : Status.OK;
    } catch (IOException e) {
      return fail("read", key, e.getMessage());
    }
  }

  private Status hmset(String op, String key, Map<String, ByteIterator> values) {
    List<byte[]> args = new ArrayList<>(2 + 2 * values.size());
    args.add(HMSET);
    args.add(utf8(key));
    for (Map.Entry<String, ByteIterator> e : values.entrySet()) {
      args.add(utf8(e.getKey()));
      args.add(e.getValue().toArray());
    }
    try {
      Object reply = conn.call(args);
      return "OK".equals(reply) ? Status.OK : fail(op, key, "HMSET answered " + reply);
    } catch (IOException e) {
      return fail(op, key, e.getMessage());
    }
  }

  @Override
  public Status insert(String table, String key, Map<String, ByteIterator> values) {
    Status s = hmset("insert", key, values);
    if (!s.isOk()) {
      return s;
    }
    try {
      Object reply = conn.call(ZADD, INDEX, score(key), utf8(key));
      return reply instanceof Long ? Status.OK : fail("insert", key, "ZADD answered " + reply);
    } catch (IOException e) {
      return fail("insert", key, e.getMessage());
    }
  }

  @Override
  public Status update(String table, String key, Map<String, ByteIterator> values) {
    return hmset("update", key, values);
  }

  @Override
  public Status delete(String table, String key) {
    try {
      Object del = conn.call(DEL, utf8(key));
      Object zrem = conn.call(ZREM, INDEX, utf8(key));
      boolean gone = Long.valueOf(0).equals(del) && Long.valueOf(0).equals(zrem);
      return gone ? Status.ERROR : Status.OK;
    } catch (IOException e) {
      return fail("delete", key, e.getMessage());
    }
  }

  @Override
  public Status scan(String table, String startkey, int recordcount, Set<String> fields,
      Vector<HashMap<String, ByteIterator>> result) {
    try {
      Object reply = conn.call(ZRANGEBYSCORE, INDEX, score(startkey), PLUS_INF, LIMIT,
          utf8("0"), utf8(Integer.toString(recordcount)));
      if (!(reply instanceof List)) {
        return fail("scan", startkey, "ZRANGEBYSCORE answered " + reply);
      }
      for (Object k : (List<?>) reply) {
        if (!(k instanceof byte[])) {
          return fail("scan", startkey, "ZRANGEBYSCORE answered a non-string key");
        }
        HashMap<String, ByteIterator> values = new HashMap<>();
        read(table, new String((byte[]) k, StandardCharsets.UTF_8), fields, values);
        result.add(values);
      }
      return Status.OK;
    } catch (IOException e) {
      return fail("scan", startkey, e.getMessage());
    }
  }
}
