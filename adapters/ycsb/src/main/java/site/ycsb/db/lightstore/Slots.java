package site.ycsb.db.lightstore;

/**
 * Redis Cluster hash slots: CRC16/XMODEM of the key, or of its hash tag (the bytes between the
 * first '{' and the next '}', when non-empty), modulo 16384 — the same function as the drives'
 * ({@code kvproto::cluster::key_slot}).
 */
final class Slots {
  static final int COUNT = 16384;

  private static final int[] TABLE = new int[256];

  static {
    for (int i = 0; i < 256; i++) {
      int crc = i << 8;
      for (int b = 0; b < 8; b++) {
        crc = (crc & 0x8000) != 0 ? (crc << 1) ^ 0x1021 : crc << 1;
      }
      TABLE[i] = crc & 0xFFFF;
    }
  }

  private Slots() {}

  static int crc16(byte[] data, int from, int to) {
    int crc = 0;
    for (int i = from; i < to; i++) {
      crc = ((crc << 8) ^ TABLE[((crc >>> 8) ^ data[i]) & 0xFF]) & 0xFFFF;
    }
    return crc;
  }

  static int slot(byte[] key) {
    int from = 0;
    int to = key.length;
    for (int open = 0; open < key.length; open++) {
      if (key[open] == '{') {
        for (int close = open + 1; close < key.length; close++) {
          if (key[close] == '}') {
            if (close > open + 1) {
              from = open + 1;
              to = close;
            }
            break;
          }
        }
        break;
      }
    }
    return crc16(key, from, to) & (COUNT - 1);
  }
}
