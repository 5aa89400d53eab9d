package site.ycsb.db.lightstore;

import java.io.BufferedInputStream;
import java.io.BufferedOutputStream;
import java.io.EOFException;
import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.net.InetSocketAddress;
import java.net.Socket;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;

/**
 * One blocking RESP2 connection to one drive: writes a command as an array of bulk strings and
 * reads one reply.
 *
 * <p>Replies are decoded to plain Java values: a bulk string is a {@code byte[]}, a nil bulk
 * string or nil array is {@code null}, an integer is a {@link Long}, a simple string is a
 * {@link String}, an array is a {@code List<Object>}, and an error reply is an {@link Error}
 * value (returned, not thrown: the caller decides, e.g. to follow a {@code MOVED}).
 *
 * <p>Any I/O failure or malformed reply closes the socket, since the stream position is then
 * unknown; the next call reconnects. Not thread-safe: YCSB gives each thread its own binding
 * instance, and each instance its own connections.
 */
final class RespConnection implements AutoCloseable {
  /** Largest bulk string accepted from a drive (the drive's own value limit is lower). */
  static final int MAX_BULK = 512 << 20;
  /** Largest array accepted from a drive (LS.RANGE returns at most 20,000 elements). */
  static final int MAX_ARRAY = 1 << 22;

  /** An error reply ({@code -ERR ...}, {@code -MOVED ...}). */
  static final class Error {
    final String message;

    Error(String message) {
      this.message = message;
    }

    @Override
    public String toString() {
      return "-" + message;
    }
  }

  /** A reply that does not follow the protocol. */
  static final class ProtocolException extends IOException {
    private static final long serialVersionUID = 1L;

    ProtocolException(String message) {
      super(message);
    }
  }

  private final String host;
  private final int port;
  private final int connectTimeoutMs;
  private final int readTimeoutMs;
  /** Sent with AUTH on every (re)connection; null: none. */
  private final String password;
  /** TLS over the socket (drives serving --tls-port); null: plain TCP. */
  private final javax.net.ssl.SSLSocketFactory tls;
  private Socket socket;
  private InputStream in;
  private OutputStream out;

  RespConnection(String host, int port, int connectTimeoutMs, int readTimeoutMs) {
    this(host, port, connectTimeoutMs, readTimeoutMs, null);
  }

  RespConnection(String host, int port, int connectTimeoutMs, int readTimeoutMs,
      String password) {
    this(host, port, connectTimeoutMs, readTimeoutMs, password, null);
  }

  RespConnection(String host, int port, int connectTimeoutMs, int readTimeoutMs,
      String password, javax.net.ssl.SSLSocketFactory tls) {
    this.host = host;
    this.port = port;
    this.connectTimeoutMs = connectTimeoutMs;
    this.readTimeoutMs = readTimeoutMs;
    this.password = password == null || password.isEmpty() ? null : password;
    this.tls = tls;
  }

  /** Where this connection goes, as host:port. */
  String address() {
    return host + ":" + port;
  }

  private void connect() throws IOException {
    Socket s = new Socket();
    try {
      s.setTcpNoDelay(true);
      s.setSoTimeout(readTimeoutMs);
      s.connect(new InetSocketAddress(host, port), connectTimeoutMs);
      if (tls != null) {
        javax.net.ssl.SSLSocket ss = (javax.net.ssl.SSLSocket) tls.createSocket(s, host, port, true);
        javax.net.ssl.SSLParameters params = ss.getSSLParameters();
        // The drive's certificate must name the address connected to.
        params.setEndpointIdentificationAlgorithm("HTTPS");
        ss.setSSLParameters(params);
        ss.setSoTimeout(readTimeoutMs);
        ss.startHandshake();
        s = ss;
      }
    } catch (IOException e) {
      s.close();
      throw e;
    }
    socket = s;
    in = new BufferedInputStream(s.getInputStream(), 64 << 10);
    out = new BufferedOutputStream(s.getOutputStream(), 64 << 10);
    if (password != null) {
      writeCommand(out, List.of("AUTH".getBytes(java.nio.charset.StandardCharsets.UTF_8),
          password.getBytes(java.nio.charset.StandardCharsets.UTF_8)));
      out.flush();
      Object reply = readReply(in);
      if (!"OK".equals(reply)) {
        close();
        // The reply names the refusal (WRONGPASS, ...); the password is never shown.
        throw new IOException("AUTH to " + address() + " refused: " + reply);
      }
    }
  }

  /**
   * Sends one command and returns its reply (see the class comment for the types).
   *
   * @throws IOException when the drive cannot be reached, times out, or replies out of protocol;
   *     the connection is closed and the command may or may not have run
   */
  Object call(List<byte[]> args) throws IOException {
    if (socket == null) {
      connect();
    }
    try {
      writeCommand(out, args);
      out.flush();
      return readReply(in);
    } catch (IOException | RuntimeException e) {
      close();
      throw e;
    }
  }

  /** {@link #call(List)} with the arguments given inline. */
  Object call(byte[]... args) throws IOException {
    return call(List.of(args));
  }

  @Override
  public void close() {
    if (socket != null) {
      try {
        socket.close();
      } catch (IOException ignored) {
        // Closing is best effort; the socket is dropped either way.
      }
    }
    socket = null;
    in = null;
    out = null;
  }

  static void writeCommand(OutputStream out, List<byte[]> args) throws IOException {
    out.write('*');
    out.write(Integer.toString(args.size()).getBytes(StandardCharsets.US_ASCII));
    out.write('\r');
    out.write('\n');
    for (byte[] a : args) {
      out.write('$');
      out.write(Integer.toString(a.length).getBytes(StandardCharsets.US_ASCII));
      out.write('\r');
      out.write('\n');
      out.write(a);
      out.write('\r');
      out.write('\n');
    }
  }

  /** Reads one RESP2 reply. */
  static Object readReply(InputStream in) throws IOException {
    int type = in.read();
    if (type < 0) {
      throw new EOFException("the drive closed the connection");
    }
    switch (type) {
      case '+':
        return readLine(in);
      case '-':
        return new Error(readLine(in));
      case ':':
        return parseLong(readLine(in));
      case '$': {
        long len = parseLong(readLine(in));
        if (len == -1) {
          return null;
        }
        if (len < 0 || len > MAX_BULK) {
          throw new ProtocolException("bad bulk string length " + len);
        }
        byte[] b = in.readNBytes((int) len);
        if (b.length != len) {
          throw new EOFException("the drive closed the connection inside a bulk string");
        }
        if (in.read() != '\r' || in.read() != '\n') {
          throw new ProtocolException("bulk string not followed by CRLF");
        }
        return b;
      }
      case '*': {
        long n = parseLong(readLine(in));
        if (n == -1) {
          return null;
        }
        if (n < 0 || n > MAX_ARRAY) {
          throw new ProtocolException("bad array length " + n);
        }
        List<Object> items = new ArrayList<>((int) n);
        for (long i = 0; i < n; i++) {
          items.add(readReply(in));
        }
        return items;
      }
      default:
        throw new ProtocolException("unexpected reply type byte " + type);
    }
  }

  private static String readLine(InputStream in) throws IOException {
    StringBuilder sb = new StringBuilder();
    while (true) {
      int c = in.read();
      if (c < 0) {
        throw new EOFException("the drive closed the connection inside a reply line");
      }
      if (c == '\r') {
        if (in.read() != '\n') {
          throw new ProtocolException("CR not followed by LF");
        }
        return sb.toString();
      }
      if (sb.length() > 64 << 10) {
        throw new ProtocolException("reply line too long");
      }
      sb.append((char) c);
    }
  }

  private static long parseLong(String s) throws ProtocolException {
    try {
      return Long.parseLong(s);
    } catch (NumberFormatException e) {
      throw new ProtocolException("not an integer: " + s);
    }
  }
}
