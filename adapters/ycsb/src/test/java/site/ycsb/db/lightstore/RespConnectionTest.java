package site.ycsb.db.lightstore;

import static org.junit.Assert.assertArrayEquals;
import static org.junit.Assert.assertEquals;
import static org.junit.Assert.assertNull;
import static org.junit.Assert.assertThrows;
import static org.junit.Assert.assertTrue;

import java.io.ByteArrayInputStream;
import java.io.ByteArrayOutputStream;
import java.io.EOFException;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.io.InputStream;
import java.io.OutputStream;
import java.net.ServerSocket;
import java.net.Socket;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import org.junit.Test;

public class RespConnectionTest {
  private static Object parse(String wire) throws IOException {
    return RespConnection.readReply(
        new ByteArrayInputStream(wire.getBytes(StandardCharsets.ISO_8859_1)));
  }

  @Test
  public void writesArraysOfBulkStrings() throws IOException {
    ByteArrayOutputStream out = new ByteArrayOutputStream();
    RespConnection.writeCommand(out, List.of("MGET".getBytes(StandardCharsets.UTF_8),
        new byte[] {'a', 0, 'b'}, new byte[0]));
    assertEquals("*3\r\n$4\r\nMGET\r\n$3\r\na\0b\r\n$0\r\n\r\n",
        out.toString(StandardCharsets.ISO_8859_1));
  }

  @Test
  public void readsEveryReplyType() throws IOException {
    assertEquals("OK", parse("+OK\r\n"));
    assertEquals(42L, parse(":42\r\n"));
    assertArrayEquals("a\r\nb".getBytes(StandardCharsets.UTF_8), (byte[]) parse("$4\r\na\r\nb\r\n"));
    assertNull(parse("$-1\r\n"));
    assertNull(parse("*-1\r\n"));
    Object err = parse("-MOVED 12 127.0.0.1:7002\r\n");
    assertTrue(err instanceof RespConnection.Error);
    assertEquals("MOVED 12 127.0.0.1:7002", ((RespConnection.Error) err).message);
    List<?> arr = (List<?>) parse("*3\r\n$1\r\nk\r\n$-1\r\n*1\r\n:1\r\n");
    assertArrayEquals(new byte[] {'k'}, (byte[]) arr.get(0));
    assertNull(arr.get(1));
    assertEquals(List.of(1L), arr.get(2));
  }

  @Test
  public void refusesBrokenReplies() {
    assertThrows(EOFException.class, () -> parse(""));
    assertThrows(EOFException.class, () -> parse("$5\r\nab"));
    assertThrows(IOException.class, () -> parse("$2\r\nabcd\r\n"));
    assertThrows(IOException.class, () -> parse("?\r\n"));
    assertThrows(IOException.class, () -> parse(":x\r\n"));
    assertThrows(IOException.class, () -> parse("$-7\r\n"));
    assertThrows(IOException.class, () -> parse("+OK\rX"));
  }

  /**
   * A one-connection fake server: reads two commands, answers the first (AUTH) with
   * {@code authReply} and the second with +PONG; completes with the AUTH arguments it saw.
   */
  private static CompletableFuture<List<?>> fakeServer(ServerSocket ss, String authReply) {
    return CompletableFuture.supplyAsync(() -> {
      try (Socket s = ss.accept()) {
        InputStream in = s.getInputStream();
        OutputStream out = s.getOutputStream();
        List<?> auth = (List<?>) RespConnection.readReply(in);
        out.write(authReply.getBytes(StandardCharsets.ISO_8859_1));
        out.flush();
        if (authReply.startsWith("+")) {
          RespConnection.readReply(in);
          out.write("+PONG\r\n".getBytes(StandardCharsets.ISO_8859_1));
          out.flush();
        }
        return auth;
      } catch (IOException e) {
        throw new IllegalStateException(e);
      }
    });
  }

  @Test
  public void authenticatesOnConnectAndHidesThePassword() throws Exception {
    try (ServerSocket ss = new ServerSocket(0)) {
      CompletableFuture<List<?>> seen = fakeServer(ss, "+OK\r\n");
      RespConnection c = new RespConnection("127.0.0.1", ss.getLocalPort(), 2000, 2000, "pw 1");
      assertEquals("PONG", c.call("PING".getBytes(StandardCharsets.UTF_8)));
      List<?> auth = seen.get();
      assertArrayEquals("AUTH".getBytes(StandardCharsets.UTF_8), (byte[]) auth.get(0));
      assertArrayEquals("pw 1".getBytes(StandardCharsets.UTF_8), (byte[]) auth.get(1));
      c.close();
    }
    try (ServerSocket ss = new ServerSocket(0)) {
      fakeServer(ss, "-WRONGPASS invalid username-password pair\r\n");
      RespConnection c = new RespConnection("127.0.0.1", ss.getLocalPort(), 2000, 2000, "pw 1");
      IOException e = assertThrows(IOException.class,
          () -> c.call("PING".getBytes(StandardCharsets.UTF_8)));
      assertTrue(e.getMessage(), e.getMessage().contains("WRONGPASS"));
      assertTrue(!e.getMessage().contains("pw 1"));
    }
  }
}
