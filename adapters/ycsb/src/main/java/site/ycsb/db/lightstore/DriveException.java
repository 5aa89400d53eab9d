package site.ycsb.db.lightstore;

/** A drive answered with an error reply, or with a reply of the wrong shape for the command. */
final class DriveException extends Exception {
  private static final long serialVersionUID = 1L;

  DriveException(String message) {
    super(message);
  }
}
