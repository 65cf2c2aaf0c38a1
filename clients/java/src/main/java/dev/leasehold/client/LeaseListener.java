package dev.leasehold.client;

/**
 * Hears a job's lease changes, from {@link Client#observe}. Only
 * {@link #onEvent} is required.
 */
@FunctionalInterface
public interface LeaseListener {
  /** The current lease (first), then each change: acquired, released, expired, value changed. */
  void onEvent(LeaseEvent event);

  /**
   * The stream broke (the server stopping: {@link ShuttingDownException};
   * unreachable: {@link UnavailableException}; refused:
   * {@link PermissionDeniedException}...); nothing follows. Not called
   * after {@link Observation#close()}.
   */
  default void onError(LeaseholdException error) {}

  /** The server ended the stream without an error; nothing follows. Not called after {@link Observation#close()}. */
  default void onCompleted() {}
}
