//! Which jobs have series of their own on `/metrics`: both backends pick
//! them while they walk their jobs (the single node in chunks under its
//! state lock, etcd over its mirror), with the one [`Picker`].

use leasehold_core::lease::{JobName, Leadership};

/// Per-job leadership as `/metrics` shows it: totals over every job, and
/// at most `max` jobs with series of their own (see [`JobsShown::pick`]).
#[derive(Debug, Clone, Default)]
pub struct JobsShown {
    /// Every job known.
    pub total: usize,
    /// Jobs with a live leader.
    pub led: usize,
    /// The jobs with series of their own, in name order.
    pub shown: Vec<(JobName, Leadership)>,
}

/// A job as [`JobsShown::pick`] orders it: by `key` (0 when led, else 1 +
/// the nanoseconds it has been without a leader), then by name.
#[derive(Clone)]
struct Ranked {
    key: u64,
    job: JobName,
    leadership: Leadership,
}

impl Ranked {
    fn order(&self, other: &Ranked) -> std::cmp::Ordering {
        self.key
            .cmp(&other.key)
            .then_with(|| self.job.as_str().cmp(other.job.as_str()))
    }
}

/// Picks the jobs [`JobsShown`] shows, offered one at a time: in chunks,
/// so that the lease table's lock need not be held for the whole walk.
///
/// Candidates go into a buffer of at most `2 * max`; when it fills,
/// `select_nth_unstable` keeps the best `max` and the worst of those
/// becomes the bar a later job must beat to be looked at again. O(jobs)
/// whatever their order, one integer comparison for most jobs, and a name
/// copied only when it goes into the buffer.
pub struct Picker {
    max: usize,
    buf: Vec<Ranked>,
    bar: Option<(u64, JobName)>,
    total: usize,
    led: usize,
}

impl Picker {
    /// A picker of at most `max` jobs.
    pub fn new(max: usize) -> Picker {
        Picker {
            max,
            buf: Vec::with_capacity(max.saturating_mul(2).min(8192)),
            bar: None,
            total: 0,
            led: 0,
        }
    }

    /// Counts one job, and keeps it if it may be shown.
    pub fn offer(&mut self, job: &JobName, leadership: Leadership) {
        self.total += 1;
        let key = match leadership {
            Leadership::Led { .. } => {
                self.led += 1;
                0
            }
            Leadership::Vacant { for_, .. } => {
                u64::try_from(for_.as_nanos()).map_or(u64::MAX, |n| n.saturating_add(1))
            }
        };
        if self.max == 0 {
            return;
        }
        if let Some((bkey, bjob)) = &self.bar {
            let beats = key
                .cmp(bkey)
                .then_with(|| job.as_str().cmp(bjob.as_str()))
                .is_lt();
            if !beats {
                return;
            }
        }
        self.buf.push(Ranked {
            key,
            job: job.clone(),
            leadership,
        });
        if self.buf.len() >= self.max.saturating_mul(2) {
            self.keep_best();
            let worst = &self.buf[self.max - 1];
            self.bar = Some((worst.key, worst.job.clone()));
        }
    }

    fn keep_best(&mut self) {
        if self.buf.len() > self.max {
            self.buf.select_nth_unstable_by(self.max - 1, Ranked::order);
            self.buf.truncate(self.max);
        }
    }

    /// What was picked.
    pub fn finish(mut self) -> JobsShown {
        self.keep_best();
        let mut shown: Vec<(JobName, Leadership)> = self
            .buf
            .into_iter()
            .map(|r| (r.job, r.leadership))
            .collect();
        shown.sort_unstable_by(|a, b| a.0.as_str().cmp(b.0.as_str()));
        JobsShown {
            total: self.total,
            led: self.led,
            shown,
        }
    }
}

impl JobsShown {
    /// Counts `jobs` and picks those whose series are shown when there are
    /// more than `max`: those with a live leader first, then those whose
    /// leadership changed most recently (leaderless for the shortest
    /// time); ties by name. The rest are counted in
    /// `leasehold_metrics_jobs_omitted`, and in the totals like every job.
    /// See [`Picker`], which does it a job at a time.
    pub fn pick<'a>(
        jobs: impl IntoIterator<Item = (&'a JobName, Leadership)>,
        max: usize,
    ) -> JobsShown {
        let mut p = Picker::new(max);
        for (job, leadership) in jobs {
            p.offer(job, leadership);
        }
        p.finish()
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use leasehold_core::lease::{Limits, Token};

    /// `JobsShown::pick` keeps exactly what sorting every job by its rank
    /// and taking the first `max` keeps, in name order, and counts all.
    #[test]
    fn picked_jobs_are_the_first_by_rank_of_a_full_sort() {
        let limits = Limits::default();
        let mut seed = 7u64;
        let mut next = move |n: u64| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed % n
        };
        let jobs: Vec<(JobName, Leadership)> = (0..500)
            .map(|i| {
                let token = Token(i);
                // Few distinct durations: many ties, broken by name.
                let l = match next(3) {
                    0 => Leadership::Led { token },
                    _ => Leadership::Vacant {
                        token,
                        for_: Duration::from_millis(next(20)),
                    },
                };
                (limits.job(&format!("job-{}", next(1_000_000))).unwrap(), l)
            })
            .collect();
        let rank = |(j, l): &(JobName, Leadership)| match l {
            Leadership::Led { .. } => (0u8, Duration::ZERO, j.as_str().to_owned()),
            Leadership::Vacant { for_, .. } => (1, *for_, j.as_str().to_owned()),
        };
        let led = jobs
            .iter()
            .filter(|(_, l)| matches!(l, Leadership::Led { .. }))
            .count();
        for max in [0, 1, 7, 100, 499, 500, 501, usize::MAX] {
            let mut want = jobs.clone();
            want.sort_by_key(|j| rank(j));
            want.truncate(max);
            want.sort_by(|a, b| a.0.as_str().cmp(b.0.as_str()));
            let got = JobsShown::pick(jobs.iter().map(|(j, l)| (j, *l)), max);
            assert_eq!(got.shown, want, "max {max}");
            assert_eq!((got.total, got.led), (jobs.len(), led), "max {max}");
        }
    }
}
