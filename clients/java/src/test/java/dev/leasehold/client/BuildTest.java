package dev.leasehold.client;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.util.jar.Attributes;
import java.util.jar.JarFile;
import javax.xml.parsers.DocumentBuilderFactory;
import org.junit.jupiter.api.Assumptions;
import org.junit.jupiter.api.Test;
import org.w3c.dom.Element;
import org.w3c.dom.Node;

/**
 * What the build makes: {@link Client#VERSION} is the pom's version, and
 * the jars {@code mvn package} makes (the classes, with
 * {@code Automatic-Module-Name} and {@code Implementation-Version} in the
 * manifest; the sources; the javadoc). The jar checks need a package built
 * before the tests run (clients/test.sh runs {@code mvn install
 * -DskipTests} first and sets {@code -Dleasehold.requireBuilt=true});
 * without it they are skipped.
 */
class BuildTest {
  /** The version in pom.xml: the project's own {@code <version>}, read from the file. */
  static String pomVersion() throws Exception {
    var doc = DocumentBuilderFactory.newInstance().newDocumentBuilder().parse(Paths.get("pom.xml").toFile());
    Element project = doc.getDocumentElement();
    for (Node n = project.getFirstChild(); n != null; n = n.getNextSibling()) {
      if (n instanceof Element e && e.getTagName().equals("version")) {
        return e.getTextContent().trim();
      }
    }
    throw new AssertionError("pom.xml has no project version");
  }

  /** A file {@code mvn package} makes, or skips the test (fails under leasehold.requireBuilt). */
  static Path built(String path, String how) {
    Path p = Paths.get(path);
    if (!Files.isRegularFile(p)) {
      String why = p + " is not built (" + how + ")";
      if (Boolean.getBoolean("leasehold.requireBuilt")) {
        throw new AssertionError(why + "; leasehold.requireBuilt=true");
      }
      Assumptions.abort(why + ": skipped");
    }
    return p;
  }

  static String jarName(String classifier) throws Exception {
    return "target/leasehold-client-" + pomVersion() + (classifier.isEmpty() ? "" : "-" + classifier) + ".jar";
  }

  @Test
  void theVersionIsThePomsVersion() throws Exception {
    String v = pomVersion();
    assertTrue(v.matches("0\\.\\d+\\.\\d+.*"), "a 0.x version: " + v);
    assertEquals(v, Client.VERSION);
  }

  @Test
  void theTwoWorkersExampleDependsOnThisVersion() throws Exception {
    var doc = DocumentBuilderFactory.newInstance().newDocumentBuilder()
        .parse(Paths.get("examples", "two-workers", "pom.xml").toFile());
    var deps = doc.getElementsByTagName("dependency");
    String version = null;
    for (int i = 0; i < deps.getLength(); i++) {
      Element d = (Element) deps.item(i);
      if (d.getElementsByTagName("artifactId").item(0).getTextContent().trim().equals("leasehold-client")) {
        version = d.getElementsByTagName("version").item(0).getTextContent().trim();
      }
    }
    assertEquals(pomVersion(), version, "examples/two-workers/pom.xml's leasehold-client version");
  }

  @Test
  void theJarsManifestHasTheModuleNameAndTheVersion() throws Exception {
    Path jar = built(jarName(""), "mvn package");
    try (JarFile f = new JarFile(jar.toFile())) {
      Attributes main = f.getManifest().getMainAttributes();
      assertEquals("dev.leasehold.client", main.getValue("Automatic-Module-Name"));
      assertEquals(pomVersion(), main.getValue("Implementation-Version"));
      assertNotNull(f.getEntry("dev/leasehold/client/Client.class"));
      assertNotNull(f.getEntry("dev/leasehold/v1/LeasesGrpc.class"));
      assertNotNull(f.getEntry("dev/leasehold/client/version.properties"));
    }
  }

  /** Each of the three jars ships the license, byte for byte the LICENSE file (Apache-2.0). */
  @Test
  void everyJarShipsTheLicense() throws Exception {
    byte[] license = Files.readAllBytes(Paths.get("LICENSE"));
    assertTrue(new String(license, java.nio.charset.StandardCharsets.UTF_8).contains("Apache License"),
        "LICENSE is the Apache-2.0 text");
    for (String classifier : new String[] {"", "sources", "javadoc"}) {
      try (JarFile f = new JarFile(built(jarName(classifier), "mvn package").toFile())) {
        var entry = f.getJarEntry("META-INF/LICENSE");
        assertNotNull(entry, jarName(classifier) + " has META-INF/LICENSE");
        try (var in = f.getInputStream(entry)) {
          assertArrayEquals(license, in.readAllBytes(), jarName(classifier) + ": META-INF/LICENSE is the LICENSE file");
        }
      }
    }
  }

  @Test
  void theSourcesAndJavadocJarsAreBuilt() throws Exception {
    try (JarFile f = new JarFile(built(jarName("sources"), "mvn package").toFile())) {
      assertNotNull(f.getEntry("dev/leasehold/client/Client.java"));
      assertNotNull(f.getEntry("dev/leasehold/client/Elector.java"));
      assertNotNull(f.getEntry("dev/leasehold/v1/LeasesGrpc.java"), "the generated code too");
    }
    try (JarFile f = new JarFile(built(jarName("javadoc"), "mvn package").toFile())) {
      assertNotNull(f.getEntry("index.html"));
      assertNotNull(f.getEntry("dev/leasehold/client/Client.html"));
      assertNotNull(f.getEntry("dev/leasehold/client/Elector.html"));
      assertFalse(f.stream().anyMatch(e -> e.getName().equals("dev/leasehold/client/Retry.html")),
          "package-private classes are not documented");
    }
  }
}
