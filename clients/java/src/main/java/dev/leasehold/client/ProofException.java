package dev.leasehold.client;

/**
 * A proof that {@link Proofs#verify} refused; {@link #kind()} says why.
 * Not a {@link LeaseholdException}: the check is made here, with no call to
 * the server. Branch on the kind, not on the message.
 */
public class ProofException extends RuntimeException {
  private static final long serialVersionUID = 1L;

  /** Why a proof was refused, in the order {@link Proofs#verify} checks. */
  public enum Kind {
    /**
     * Not three base64url parts (no padding), a header that is not a JSON
     * object, or claims that are not a JSON object of the expected types
     * ({@code iss} {@code "leasehold"}, a token that is a decimal u64 above 0).
     */
    MALFORMED("malformed"),
    /** An {@code alg} other than {@code EdDSA}, or a {@code typ} other than {@code leasehold-proof+jwt}. */
    UNSUPPORTED("unsupported"),
    /** A {@code kid} that names no Ed25519 key of the key set (a key rotated out, another server's). */
    UNKNOWN_KEY("unknown key"),
    /** A signature that does not verify with the named key: altered, or forged. */
    BAD_SIGNATURE("bad signature"),
    /** A true proof for another job than the one expected. */
    WRONG_JOB("wrong job"),
    /** A true proof of another token than the one expected. */
    WRONG_TOKEN("wrong token");

    private final String description;

    Kind(String description) {
      this.description = description;
    }

    /** The class of refusal in words, as docs/proofs.md and the conformance vectors name it ("unknown key"). */
    public String description() {
      return description;
    }
  }

  private final Kind kind;

  public ProofException(Kind kind, String message) {
    super("proof refused (" + kind.description() + "): " + message);
    this.kind = kind;
  }

  /** Why the proof was refused. */
  public Kind kind() {
    return kind;
  }
}
