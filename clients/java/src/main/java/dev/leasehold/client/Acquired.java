package dev.leasehold.client;

/**
 * The answer to {@link Client#acquire}.
 *
 * @param acquired whether we hold the lease now
 * @param lease our lease when acquired, else the current holder's
 */
public record Acquired(boolean acquired, Lease lease) {}
