"""The reasons come from the contract: every value of the generated
``ErrorReason`` enum maps from its wire string and back. Needs no server."""

from leasehold import errors
from leasehold.v1 import leasehold_pb2 as pb


def test_every_error_reason_maps_from_its_wire_string_and_back():
    values = [v for v in pb.ErrorReason.values() if v != pb.ERROR_REASON_UNSPECIFIED]
    assert values, "the generated ErrorReason has no reasons"
    for value in values:
        wire = errors.reason_string(value)
        assert wire and not wire.startswith("ERROR_REASON_"), wire
        assert "ERROR_REASON_" + wire == pb.ErrorReason.Name(value)
        assert errors.reason_enum(wire) == value, wire
    assert errors.reason_string(pb.ERROR_REASON_FENCED) == "FENCED"
    assert errors.reason_enum("LEASE_LOST") == pb.ERROR_REASON_LEASE_LOST


def test_an_unknown_reason_maps_to_none():
    for reason in ("NOT_A_REASON", "fenced", "ERROR_REASON_FENCED", "", None):
        assert errors.reason_enum(reason) is None, reason
