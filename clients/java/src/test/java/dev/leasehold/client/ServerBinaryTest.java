package dev.leasehold.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.File;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.attribute.PosixFilePermissions;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;
import org.opentest4j.TestAbortedException;

/**
 * How the tests find the server: LEASEHOLD_BIN, else leasehold on the
 * PATH, else the repository's debug or release build; without one the
 * server-backed tests are skipped with a message, or fail when
 * leasehold.requireServer is set (clients/test.sh).
 */
class ServerBinaryTest {
  static Path fake(Path p) throws Exception {
    Files.createDirectories(p.getParent());
    Files.writeString(p, "#!/bin/sh\n");
    Files.setPosixFilePermissions(p, PosixFilePermissions.fromString("rwxr-xr-x"));
    return p;
  }

  @Test
  void theBinaryIsLeaseholdBinElseOnThePathElseTheDebugThenReleaseBuild(@TempDir Path dir) throws Exception {
    Path javaDir = Files.createDirectories(dir.resolve("repo/clients/java"));
    Path bin = dir.resolve("bin");
    Files.createDirectories(bin);
    String path = dir.resolve("empty") + File.pathSeparator + bin;
    assertNull(ServerProcess.findBinary(null, path, javaDir));

    Path release = fake(dir.resolve("repo/target/release/leasehold"));
    assertEquals(release, ServerProcess.findBinary(null, path, javaDir));
    Path debug = fake(dir.resolve("repo/target/debug/leasehold"));
    assertEquals(debug, ServerProcess.findBinary("", path, javaDir));
    Path onPath = fake(bin.resolve("leasehold"));
    assertEquals(onPath, ServerProcess.findBinary(null, path, javaDir));
    Path named = fake(dir.resolve("elsewhere/my-leasehold"));
    assertEquals(named, ServerProcess.findBinary(named.toString(), path, javaDir));
    // A LEASEHOLD_BIN that names nothing is not silently replaced.
    assertNull(ServerProcess.findBinary(dir.resolve("missing").toString(), path, javaDir));
    // Not executable: not a server.
    Files.setPosixFilePermissions(onPath, PosixFilePermissions.fromString("rw-r--r--"));
    assertEquals(debug, ServerProcess.findBinary(null, path, javaDir));
  }

  @Test
  void withoutABinaryTheTestIsSkippedOrFailsWhenTheServerIsRequired(@TempDir Path dir) {
    TestAbortedException skipped = assertThrows(TestAbortedException.class,
        () -> ServerProcess.binary(null, null, false));
    assertTrue(skipped.getMessage().contains("LEASEHOLD_BIN"), skipped.getMessage());
    assertTrue(skipped.getMessage().contains("skipped"), skipped.getMessage());
    IllegalStateException failed = assertThrows(IllegalStateException.class,
        () -> ServerProcess.binary(null, dir.resolve("missing").toString(), true));
    assertTrue(failed.getMessage().contains("missing"), failed.getMessage());
    assertEquals(dir, ServerProcess.binary(dir, null, true));
  }
}
