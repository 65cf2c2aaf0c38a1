package dev.leasehold.client;

/**
 * One live key, as {@link Client#listKeys} returns it.
 *
 * @param key the key
 * @param token the token of its last write
 * @param version its version
 * @param size the value's size in bytes
 */
public record KeyInfo(byte[] key, long token, long version, int size) {}
