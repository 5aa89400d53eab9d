package site.ycsb.db.lightstore;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;

/**
 * Sends commands to the right drive: the only drive in single mode, or the primary serving the
 * key's hash slot in cluster mode. Owns one connection per drive (the binding makes one Router
 * per YCSB thread, so one connection per thread per drive).
 *
 * <p>Cluster mode: the slot map comes from {@code CLUSTER SLOTS} of any reachable drive (the
 * configured hosts are the seeds). A {@code -MOVED slot addr} reply updates that slot, refreshes
 * the whole map, and the command is resent to the new owner (at most {@link #MAX_REDIRECTS}
 * times). {@code -ASK} is followed once with {@code ASKING}. Replicas are not read: a drive
 * that cannot be reached fails the command (after one reconnect and a map refresh), it never
 * answers from elsewhere.
 */
final class Router implements AutoCloseable {
  static final int MAX_REDIRECTS = 5;

  private final boolean cluster;
  private final List<String> seeds;
  private final int connectTimeoutMs;
  private final int readTimeoutMs;
  /** The drives' password (null: none), sent with AUTH on every connection. */
  private final String password;
  /** TLS for every connection (null: plain TCP). */
  private final javax.net.ssl.SSLSocketFactory tls;
  private final Map<String, RespConnection> conns = new HashMap<>();
  /** Cluster mode: the address of each slot's primary (null = unknown). */
  private String[] owner = new String[Slots.COUNT];

  Router(List<String> hosts, boolean cluster, int connectTimeoutMs, int readTimeoutMs) {
    this(hosts, cluster, connectTimeoutMs, readTimeoutMs, null);
  }

  Router(List<String> hosts, boolean cluster, int connectTimeoutMs, int readTimeoutMs,
      String password) {
    this(hosts, cluster, connectTimeoutMs, readTimeoutMs, password, null);
  }

  Router(List<String> hosts, boolean cluster, int connectTimeoutMs, int readTimeoutMs,
      String password, javax.net.ssl.SSLSocketFactory tls) {
    if (hosts.isEmpty()) {
      throw new IllegalArgumentException("no drive address given");
    }
    for (String h : hosts) {
      splitAddress(h);
    }
    this.seeds = List.copyOf(hosts);
    this.cluster = cluster;
    this.connectTimeoutMs = connectTimeoutMs;
    this.readTimeoutMs = readTimeoutMs;
    this.password = password;
    this.tls = tls;
  }

  boolean isCluster() {
    return cluster;
  }

  /** Splits host:port (host may be a bracketed IPv6 address). */
  static Object[] splitAddress(String addr) {
    int colon = addr.lastIndexOf(':');
    if (colon <= 0 || colon == addr.length() - 1) {
      throw new IllegalArgumentException("drive address " + addr + " is not host:port");
    }
    String host = addr.substring(0, colon);
    if (host.startsWith("[") && host.endsWith("]")) {
      host = host.substring(1, host.length() - 1);
    }
    int port;
    try {
      port = Integer.parseInt(addr.substring(colon + 1));
    } catch (NumberFormatException e) {
      throw new IllegalArgumentException("drive address " + addr + " has a bad port");
    }
    if (port <= 0 || port > 65535) {
      throw new IllegalArgumentException("drive address " + addr + " has a bad port");
    }
    return new Object[] {host, port};
  }

  private RespConnection conn(String addr) {
    return conns.computeIfAbsent(addr, a -> {
      Object[] hp = splitAddress(a);
      return new RespConnection((String) hp[0], (Integer) hp[1], connectTimeoutMs, readTimeoutMs,
          password, tls);
    });
  }

  /**
   * Sends a command to one drive; on an I/O failure reconnects and sends it once more (every
   * command the binding sends is idempotent: GET/MGET, SET/MSET of the same values, DEL,
   * LS.RANGE).
   */
  Object callAt(String addr, List<byte[]> args) throws IOException {
    RespConnection c = conn(addr);
    try {
      return c.call(args);
    } catch (IOException first) {
      try {
        return c.call(args);
      } catch (IOException second) {
        second.addSuppressed(first);
        throw new IOException("drive " + addr + ": " + second.getMessage(), second);
      }
    }
  }

  /** The drive that should serve {@code key} now. */
  String addressFor(byte[] key) throws IOException, DriveException {
    if (!cluster) {
      return seeds.get(0);
    }
    int slot = Slots.slot(key);
    if (owner[slot] == null) {
      refreshMap();
    }
    String a = owner[slot];
    if (a == null) {
      throw new DriveException("slot " + slot + " has no drive in the cluster map");
    }
    return a;
  }

  /**
   * Sends a command about {@code key} (every key of the command must hash to its slot) to the
   * drive serving it, following redirects.
   */
  Object call(byte[] key, List<byte[]> args) throws IOException, DriveException {
    String addr = addressFor(key);
    boolean refreshedAfterIoError = false;
    for (int redirects = 0; ; redirects++) {
      Object reply;
      try {
        reply = callAt(addr, args);
      } catch (IOException e) {
        // The drive may have been replaced in the map: refresh once and retry if it moved.
        if (!cluster || refreshedAfterIoError) {
          throw e;
        }
        refreshedAfterIoError = true;
        try {
          refreshMap();
        } catch (IOException | DriveException ignored) {
          throw e;
        }
        String now = addressFor(key);
        if (now.equals(addr)) {
          throw e;
        }
        addr = now;
        continue;
      }
      if (!(reply instanceof RespConnection.Error)) {
        return reply;
      }
      String msg = ((RespConnection.Error) reply).message;
      if (!cluster || redirects >= MAX_REDIRECTS) {
        return reply;
      }
      if (msg.startsWith("MOVED ")) {
        String[] p = msg.split(" ");
        if (p.length != 3) {
          throw new DriveException("malformed redirect: " + msg);
        }
        String target = withHost(p[2], addr);
        int slot;
        try {
          slot = Integer.parseInt(p[1]) & (Slots.COUNT - 1);
        } catch (NumberFormatException e) {
          throw new DriveException("malformed redirect: " + msg);
        }
        // The redirecting drive's map is newer than ours: reload it, asking the new owner
        // first (the old one may still hold the old map), and keep the redirect either way.
        try {
          refreshMap(target);
        } catch (IOException | DriveException ignored) {
          // The redirect alone is enough to go on.
        }
        owner[slot] = target;
        addr = target;
      } else if (msg.startsWith("ASK ")) {
        String[] p = msg.split(" ");
        if (p.length != 3) {
          throw new DriveException("malformed redirect: " + msg);
        }
        String target = withHost(p[2], addr);
        Object ok = callAt(target, List.of(KeyLayout.utf8("ASKING")));
        if (ok instanceof RespConnection.Error) {
          throw new DriveException("ASKING at " + target + ": " + ok);
        }
        return callAt(target, args);
      } else {
        return reply;
      }
    }
  }

  /** Redis may leave the host out of an address (":7001"): use the host of the replier. */
  private static String withHost(String addr, String replier) {
    if (addr.startsWith(":")) {
      return replier.substring(0, replier.lastIndexOf(':')) + addr;
    }
    return addr;
  }

  /** Whether {@code node} serves {@code key}'s slot in the current map (always, single mode). */
  boolean owns(String node, byte[] key) {
    return !cluster || node.equals(owner[Slots.slot(key)]);
  }

  /** Every primary in the map, for commands that must visit all (scans). */
  List<String> primaries() throws IOException, DriveException {
    if (!cluster) {
      return List.of(seeds.get(0));
    }
    Set<String> out = new LinkedHashSet<>();
    for (int s = 0; s < Slots.COUNT; s++) {
      if (owner[s] == null) {
        refreshMap();
        break;
      }
    }
    for (int s = 0; s < Slots.COUNT; s++) {
      if (owner[s] == null) {
        throw new DriveException("slot " + s + " has no drive in the cluster map");
      }
      out.add(owner[s]);
    }
    return new ArrayList<>(out);
  }

  /** Reloads the slot map with CLUSTER SLOTS from the first drive that answers. */
  void refreshMap() throws IOException, DriveException {
    refreshMap(null);
  }

  /** {@link #refreshMap()}, asking {@code first} before the others when it is not null. */
  void refreshMap(String first) throws IOException, DriveException {
    Set<String> candidates = new LinkedHashSet<>();
    if (first != null) {
      candidates.add(first);
    }
    for (String a : owner) {
      if (a != null) {
        candidates.add(a);
      }
    }
    candidates.addAll(seeds);
    Exception last = null;
    for (String addr : candidates) {
      try {
        Object reply = callAt(addr, List.of(KeyLayout.utf8("CLUSTER"), KeyLayout.utf8("SLOTS")));
        owner = parseSlots(reply, addr);
        return;
      } catch (IOException | DriveException e) {
        last = e;
      }
    }
    if (last instanceof DriveException) {
      throw (DriveException) last;
    }
    throw new IOException("no drive answered CLUSTER SLOTS (" + last + ")", last);
  }

  /** Parses a CLUSTER SLOTS reply into slot owners. */
  static String[] parseSlots(Object reply, String replier) throws DriveException {
    if (reply instanceof RespConnection.Error) {
      throw new DriveException("CLUSTER SLOTS at " + replier + ": " + reply);
    }
    if (!(reply instanceof List)) {
      throw new DriveException("CLUSTER SLOTS at " + replier + ": not an array");
    }
    String[] map = new String[Slots.COUNT];
    for (Object o : (List<?>) reply) {
      if (!(o instanceof List) || ((List<?>) o).size() < 3) {
        throw new DriveException("CLUSTER SLOTS at " + replier + ": bad entry " + o);
      }
      List<?> e = (List<?>) o;
      if (!(e.get(0) instanceof Long) || !(e.get(1) instanceof Long)
          || !(e.get(2) instanceof List) || ((List<?>) e.get(2)).size() < 2) {
        throw new DriveException("CLUSTER SLOTS at " + replier + ": bad entry");
      }
      long start = (Long) e.get(0);
      long end = (Long) e.get(1);
      List<?> node = (List<?>) e.get(2);
      if (start < 0 || end >= Slots.COUNT || start > end || !(node.get(1) instanceof Long)) {
        throw new DriveException("CLUSTER SLOTS at " + replier + ": bad range");
      }
      String host = node.get(0) instanceof byte[]
          ? new String((byte[]) node.get(0), StandardCharsets.UTF_8)
          : "";
      if (host.isEmpty() || host.equals("?")) {
        host = replier.substring(0, replier.lastIndexOf(':'));
      } else if (host.indexOf(':') >= 0) {
        host = "[" + host + "]";
      }
      String addr = host + ":" + node.get(1);
      Arrays.fill(map, (int) start, (int) end + 1, addr);
    }
    return map;
  }

  @Override
  public void close() {
    for (RespConnection c : conns.values()) {
      c.close();
    }
    conns.clear();
  }
}
