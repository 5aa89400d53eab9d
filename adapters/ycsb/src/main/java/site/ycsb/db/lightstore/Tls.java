package site.ycsb.db.lightstore;

import java.io.IOException;
import java.io.InputStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.security.GeneralSecurityException;
import java.security.KeyFactory;
import java.security.KeyStore;
import java.security.PrivateKey;
import java.security.cert.Certificate;
import java.security.cert.CertificateFactory;
import java.security.spec.PKCS8EncodedKeySpec;
import java.util.Base64;
import java.util.Collection;
import javax.net.ssl.KeyManagerFactory;
import javax.net.ssl.SSLContext;
import javax.net.ssl.SSLSocketFactory;
import javax.net.ssl.TrustManagerFactory;

/**
 * TLS for the binding's connections to drives serving {@code --tls-port}: trust the CA in a PEM
 * file and, for drives that ask for client certificates, present a certificate chain and its
 * PKCS#8 private key (PEM, EC or RSA). The drive's certificate must name the address the
 * binding connects to (hostname verification is on).
 */
final class Tls {
  private Tls() {}

  /**
   * A socket factory trusting {@code caFile}; with {@code certFile} and {@code keyFile} (both or
   * neither), presenting that identity.
   *
   * @throws IOException a file cannot be read or parsed, or the TLS context cannot be built
   */
  static SSLSocketFactory socketFactory(String caFile, String certFile, String keyFile)
      throws IOException {
    if ((certFile == null) != (keyFile == null)) {
      throw new IOException("a client certificate needs both its certificate and its key file");
    }
    try {
      CertificateFactory cf = CertificateFactory.getInstance("X.509");
      KeyStore trust = KeyStore.getInstance(KeyStore.getDefaultType());
      trust.load(null, null);
      int i = 0;
      for (Certificate c : certificates(cf, caFile)) {
        trust.setCertificateEntry("ca" + i++, c);
      }
      TrustManagerFactory tmf =
          TrustManagerFactory.getInstance(TrustManagerFactory.getDefaultAlgorithm());
      tmf.init(trust);
      KeyManagerFactory kmf = null;
      if (certFile != null) {
        Certificate[] chain = certificates(cf, certFile).toArray(new Certificate[0]);
        KeyStore identity = KeyStore.getInstance(KeyStore.getDefaultType());
        identity.load(null, null);
        char[] none = new char[0];
        identity.setKeyEntry("client", privateKey(keyFile), none, chain);
        kmf = KeyManagerFactory.getInstance(KeyManagerFactory.getDefaultAlgorithm());
        kmf.init(identity, none);
      }
      SSLContext ctx = SSLContext.getInstance("TLS");
      ctx.init(kmf == null ? null : kmf.getKeyManagers(), tmf.getTrustManagers(), null);
      return ctx.getSocketFactory();
    } catch (GeneralSecurityException e) {
      throw new IOException("TLS settings: " + e.getMessage(), e);
    }
  }

  private static Collection<? extends Certificate> certificates(CertificateFactory cf,
      String file) throws IOException, GeneralSecurityException {
    try (InputStream in = Files.newInputStream(Path.of(file))) {
      Collection<? extends Certificate> certs = cf.generateCertificates(in);
      if (certs.isEmpty()) {
        throw new IOException(file + ": no certificate");
      }
      return certs;
    }
  }

  private static PrivateKey privateKey(String file) throws IOException, GeneralSecurityException {
    String pem = Files.readString(Path.of(file), StandardCharsets.US_ASCII);
    int begin = pem.indexOf("-----BEGIN PRIVATE KEY-----");
    int end = pem.indexOf("-----END PRIVATE KEY-----");
    if (begin < 0 || end < begin) {
      throw new IOException(file + ": no PKCS#8 PRIVATE KEY section");
    }
    String body = pem.substring(begin + "-----BEGIN PRIVATE KEY-----".length(), end)
        .replaceAll("\\s", "");
    PKCS8EncodedKeySpec spec = new PKCS8EncodedKeySpec(Base64.getDecoder().decode(body));
    GeneralSecurityException last = null;
    for (String alg : new String[] {"EC", "RSA", "Ed25519"}) {
      try {
        return KeyFactory.getInstance(alg).generatePrivate(spec);
      } catch (GeneralSecurityException e) {
        last = e;
      }
    }
    throw new IOException(file + ": not an EC, RSA or Ed25519 key", last);
  }
}
