package dev.leasehold.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.google.protobuf.Descriptors.EnumValueDescriptor;
import dev.leasehold.v1.ErrorReason;
import java.util.Arrays;
import org.junit.jupiter.api.Test;

/**
 * The reasons come from the contract: every value of the generated
 * {@link ErrorReason} maps from its wire string and back. Needs no server.
 */
class ErrorReasonTest {
  @Test
  void everyErrorReasonMapsFromItsWireStringAndBack() {
    int n = 0;
    for (EnumValueDescriptor d : ErrorReason.getDescriptor().getValues()) {
      ErrorReason value = ErrorReason.valueOf(d);
      if (value == ErrorReason.ERROR_REASON_UNSPECIFIED) {
        continue;
      }
      n++;
      String wire = Errors.reasonString(value);
      assertFalse(wire.isEmpty() || wire.startsWith("ERROR_REASON_"), wire);
      assertEquals(d.getName(), "ERROR_REASON_" + wire);
      assertEquals(value, Errors.reasonOf(wire), wire);
    }
    assertTrue(n > 0, "the generated ErrorReason has no reasons");
    assertEquals("FENCED", Errors.reasonString(ErrorReason.ERROR_REASON_FENCED));
    assertEquals(ErrorReason.ERROR_REASON_LEASE_LOST, Errors.reasonOf("LEASE_LOST"));
  }

  @Test
  void anUnknownReasonMapsToUnrecognized() {
    for (String reason : Arrays.asList("NOT_A_REASON", "fenced", "ERROR_REASON_FENCED", "UNRECOGNIZED", "", null)) {
      assertEquals(ErrorReason.UNRECOGNIZED, Errors.reasonOf(reason), String.valueOf(reason));
    }
  }
}
