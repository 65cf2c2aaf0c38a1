package dev.leasehold.client;

import java.util.List;

/**
 * One page of a job's history of leaders ({@link Client#history(String, int, String)}).
 *
 * @param tenures the page's tenures, newest first
 * @param nextPageToken pass as {@code pageToken} for the older tenures; empty on the last page
 * @param chaos the chaos API's actions on the job, newest first (the last 32 since
 *     the server started); on the first page only, empty without chaos
 */
public record HistoryPage(List<Tenure> tenures, String nextPageToken, List<ChaosEvent> chaos) {
  public HistoryPage {
    tenures = List.copyOf(tenures);
    chaos = List.copyOf(chaos);
  }

  /** Whether older tenures follow ({@link #nextPageToken()} is not empty). */
  public boolean hasNext() {
    return !nextPageToken.isEmpty();
  }

  static HistoryPage fromProto(dev.leasehold.v1.GetHistoryResponse r) {
    return new HistoryPage(r.getTenuresList().stream().map(Tenure::fromProto).toList(), r.getNextPageToken(),
        r.getChaosList().stream().map(ChaosEvent::fromProto).toList());
  }
}
