// The reasons come from the contract: every value of the generated
// ErrorReason enum maps from its wire string and back. Needs no server.
import assert from "node:assert/strict";
import { test } from "node:test";
import { reasonEnum, reasonString } from "../src/errors";
import { ErrorReason } from "../src/gen/leasehold/v1/leasehold";

test("every ErrorReason maps from its wire string and back", () => {
  const values = Object.values(ErrorReason).filter(
    (v): v is ErrorReason =>
      typeof v === "number" && v !== ErrorReason.ERROR_REASON_UNSPECIFIED && v !== ErrorReason.UNRECOGNIZED,
  );
  assert.ok(values.length > 0, "the generated ErrorReason has no reasons");
  for (const value of values) {
    const wire = reasonString(value);
    assert.ok(wire && !wire.startsWith("ERROR_REASON_"), wire);
    assert.equal(`ERROR_REASON_${wire}`, ErrorReason[value]);
    assert.equal(reasonEnum(wire), value, wire);
  }
  assert.equal(reasonString(ErrorReason.ERROR_REASON_FENCED), "FENCED");
  assert.equal(reasonEnum("LEASE_LOST"), ErrorReason.ERROR_REASON_LEASE_LOST);
});

test("an unknown reason maps to UNRECOGNIZED", () => {
  for (const reason of ["NOT_A_REASON", "fenced", "ERROR_REASON_FENCED", "constructor", "", undefined]) {
    assert.equal(reasonEnum(reason), ErrorReason.UNRECOGNIZED, String(reason));
  }
});
