package dev.leasehold.client;

import java.time.Duration;
import java.time.Instant;

/**
 * What a verified proof states: the server issued {@code token} of
 * {@code job} to {@code holder}. It does not say the lease is still live.
 *
 * @param job the job ({@code job})
 * @param token the fencing token (unsigned, as every token here:
 *     {@link Long#toUnsignedString(long)} for its decimal; {@code token})
 * @param holder the holder, as its client named it ({@code holder})
 * @param principal the principal of the server's policy the grant is bound
 *     to; {@code ""} on a server without a policy ({@code principal})
 * @param issuedAt when the token was granted, by the server's wall clock,
 *     to the second ({@code iat})
 * @param ttl the TTL the token was granted with ({@code ttl_ms})
 * @param kid the id of the key that signed it (the header's {@code kid})
 */
public record ProofClaims(String job, long token, String holder, String principal, Instant issuedAt, Duration ttl,
    String kid) {}
