//! What the status page's readers may cost: a budget of bytes per client
//! (its address, an IPv6 client's /64, or with a policy its principal),
//! and a cap on the page's event streams.
//!
//! Every answer of `/api/jobs` and `/api/job` is charged what it returns
//! (at least [`MIN_CHARGE`] bytes), against a rate of
//! `--admin-read-rate` bytes a second with a burst of
//! `--admin-read-burst` bytes: a generic cell rate algorithm, one instant
//! per client (when its debt is paid). **All clients together are held to
//! `--admin-read-rate-total`** (with [`TOTAL_BURSTS`] bursts at once), so
//! that readers from many addresses cannot take the server's time from
//! its leaders either; no one client can take more than its own share of
//! that. A client within its burst, and within the total's, is answered at
//! once. Past it, **a client is first slowed**: its answer
//! waits until its debt is back within the burst, up to [`MAX_DELAY`];
//! **then refused**: a request that would wait longer is answered 429 with
//! `Retry-After`, before any work is done. Each step is counted on
//! `/metrics` (`leasehold_admin_reads_slowed_total`,
//! `leasehold_admin_reads_slowed_seconds_total`,
//! `leasehold_admin_reads_refused_total`).
//!
//! The page's event streams (`/api/events`) are capped: at most
//! `--max-event-streams` open at once, [`MAX_EVENT_STREAMS_PER_CLIENT`]
//! per client; past either, 503 with `Retry-After` and `Connection:
//! close` (`leasehold_admin_event_streams_refused_total`), so that
//! subscribers never take the places `/healthz` needs.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv6Addr};
use std::sync::atomic::{AtomicI64, AtomicU64};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use tokio::time::Instant;

use crate::clock;

/// The longest a reader's answer is held back before it is refused
/// instead.
pub const MAX_DELAY: Duration = Duration::from_secs(2);

/// The least an answer is charged, however small: a loop of tiny
/// requests costs its requests.
pub const MIN_CHARGE: u64 = 4096;

/// The default of `--admin-read-rate`: bytes a second per client.
pub const DEFAULT_RATE: u64 = 4 << 20;

/// The default of `--admin-read-rate-total`: bytes a second, all clients
/// together (eight clients at their full rate).
pub const DEFAULT_TOTAL_RATE: u64 = 32 << 20;

/// The total's burst, in clients' bursts.
pub const TOTAL_BURSTS: u64 = 4;

/// The default of `--admin-read-burst`: bytes a client may read at once
/// (the whole job list of about 60,000 jobs, once).
pub const DEFAULT_BURST: u64 = 16 << 20;

/// The default of `--max-event-streams`: the page's event streams open at
/// once, on the whole admin port.
pub const DEFAULT_MAX_EVENT_STREAMS: usize = 64;

/// The page's event streams open at once from one client.
pub const MAX_EVENT_STREAMS_PER_CLIENT: usize = 4;

/// Who is charged: a principal (with a policy), or a client address.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Client {
    /// A principal of the policy.
    Principal(Arc<str>),
    /// An address (an IPv6 address's /64).
    Address(IpAddr),
    /// A connection whose address is unknown: all of them together.
    Unknown,
    /// Every client together (`--admin-read-rate-total`).
    All,
}

impl Client {
    /// The client of a request: its principal if it has one, else its
    /// address.
    pub fn of(principal: Option<&str>, remote: Option<IpAddr>) -> Client {
        match (principal, remote) {
            (Some(p), _) => Client::Principal(p.into()),
            (None, Some(ip)) => Client::Address(address_key(ip)),
            (None, None) => Client::Unknown,
        }
    }
}

/// An IPv4 address, or an IPv6 address's /64.
fn address_key(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V4(_) => ip,
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => IpAddr::V6(Ipv6Addr::from(u128::from(v6) & !((1u128 << 64) - 1))),
        },
    }
}

/// The budget's settings.
#[derive(Debug, Clone, Copy)]
pub struct BudgetLimits {
    /// Bytes a second per client (`--admin-read-rate`).
    pub rate: u64,
    /// Bytes a client may read at once (`--admin-read-burst`).
    pub burst: u64,
    /// Bytes a second, all clients together (`--admin-read-rate-total`).
    pub total_rate: u64,
    /// Event streams open at once (`--max-event-streams`).
    pub max_event_streams: usize,
}

impl Default for BudgetLimits {
    fn default() -> Self {
        BudgetLimits {
            rate: DEFAULT_RATE,
            burst: DEFAULT_BURST,
            total_rate: DEFAULT_TOTAL_RATE,
            max_event_streams: DEFAULT_MAX_EVENT_STREAMS,
        }
    }
}

impl BudgetLimits {
    /// Checks the settings; the error names the flag and the limit.
    pub fn validate(&self) -> Result<(), String> {
        if self.rate == 0 {
            return Err("--admin-read-rate must be at least 1 (bytes a second)".into());
        }
        if self.total_rate < self.rate {
            return Err(format!(
                "--admin-read-rate-total must be at least --admin-read-rate ({}), got {}",
                self.rate, self.total_rate
            ));
        }
        if self.burst < MIN_CHARGE {
            return Err(format!(
                "--admin-read-burst must be at least {MIN_CHARGE} (bytes), got {}",
                self.burst
            ));
        }
        if self.max_event_streams == 0 {
            return Err("--max-event-streams must be at least 1".into());
        }
        Ok(())
    }
}

/// What a reader is told before its request is served.
#[derive(Debug, PartialEq, Eq)]
pub enum Admission {
    /// Served (then charged with [`ReadBudget::charge`]).
    Go,
    /// Refused: retry after this long.
    Refused(Duration),
}

/// The budget of the admin port's readers, shared by its handlers.
#[derive(Debug)]
pub struct ReadBudget {
    limits: BudgetLimits,
    /// When each client's debt is paid; none past is kept long.
    paid_at: Mutex<Clients>,
    /// Event streams open, all clients, and per client.
    streams: Mutex<HashMap<Client, usize>>,
    open_streams: Gauge<i64, AtomicI64>,
    slowed: Counter,
    slowed_seconds: Counter<f64, AtomicU64>,
    refused: Counter,
    streams_refused: Counter,
}

#[derive(Debug, Default)]
struct Clients {
    at: HashMap<Client, Instant>,
    /// The size at the last sweep: the next comes at twice it.
    swept_at: usize,
}

impl ReadBudget {
    /// A budget with `limits` (valid: see [`BudgetLimits::validate`]).
    pub fn new(limits: BudgetLimits) -> Arc<ReadBudget> {
        Arc::new(ReadBudget {
            limits,
            paid_at: Mutex::default(),
            streams: Mutex::default(),
            open_streams: Gauge::default(),
            slowed: Counter::default(),
            slowed_seconds: Counter::default(),
            refused: Counter::default(),
            streams_refused: Counter::default(),
        })
    }

    /// Its counters, on `/metrics`.
    pub fn register(&self, r: &mut Registry) {
        r.register(
            "leasehold_admin_reads_slowed",
            "Status page reads (/api/jobs, /api/job) held back because their client was past its burst (--admin-read-burst)",
            self.slowed.clone(),
        );
        r.register(
            "leasehold_admin_reads_slowed_seconds",
            "How long status page reads were held back, all together",
            self.slowed_seconds.clone(),
        );
        r.register(
            "leasehold_admin_reads_refused",
            "Status page reads refused with 429 because their client was too far past its byte budget (--admin-read-rate)",
            self.refused.clone(),
        );
        r.register(
            "leasehold_admin_event_streams_refused",
            "Status page event streams refused with 503 at --max-event-streams or the cap per client",
            self.streams_refused.clone(),
        );
        r.register(
            "leasehold_admin_event_streams",
            "Status page event streams open",
            self.open_streams.clone(),
        );
    }

    /// The rate (bytes a second) and the burst (as time: how far ahead a
    /// debt may run unslowed) of `client`'s account.
    fn account(&self, client: &Client) -> (u64, Duration) {
        let (rate, burst) = match client {
            Client::All => (self.limits.total_rate, TOTAL_BURSTS * self.limits.burst),
            _ => (self.limits.rate, self.limits.burst),
        };
        (rate, cost(rate, burst))
    }

    /// How far `client`'s debt, paid at `at`, is past its burst at `now`.
    fn over(&self, client: &Client, at: Instant, now: Instant) -> Duration {
        at.saturating_duration_since(now)
            .saturating_sub(self.account(client).1)
    }

    /// Whether `client` may be served now: refused when its debt, or all
    /// clients' together, is already past its burst by more than
    /// [`MAX_DELAY`].
    pub fn admit(&self, client: &Client) -> Admission {
        let now = clock::tokio_now();
        let over = {
            let c = self.lock();
            [client, &Client::All]
                .into_iter()
                .filter_map(|who| c.at.get(who).map(|at| self.over(who, *at, now)))
                .max()
                .unwrap_or_default()
        };
        if over > MAX_DELAY {
            self.refused.inc();
            Admission::Refused(over - MAX_DELAY)
        } else {
            Admission::Go
        }
    }

    /// Charges `client`, and all clients together, for `bytes`, and waits
    /// while either debt is past its burst (at most [`MAX_DELAY`]),
    /// counting the wait.
    pub async fn charge(&self, client: &Client, bytes: u64) {
        let now = clock::tokio_now();
        let wait = {
            let mut c = self.lock();
            c.sweep(now);
            let mut wait = Duration::ZERO;
            for who in [client, &Client::All] {
                let rate = self.account(who).0;
                let at = c.at.entry(who.clone()).or_insert(now);
                *at = (*at).max(now) + cost(rate, bytes);
                wait = wait.max(self.over(who, *at, now));
            }
            wait.min(MAX_DELAY)
        };
        if !wait.is_zero() {
            self.slowed.inc();
            self.slowed_seconds.inc_by(wait.as_secs_f64());
            tokio::time::sleep(wait).await;
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Clients> {
        self.paid_at.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A place for an event stream of `client`, given back on drop; `None`
    /// at `--max-event-streams` or at [`MAX_EVENT_STREAMS_PER_CLIENT`]
    /// (counted).
    pub fn stream(self: &Arc<Self>, client: &Client) -> Option<StreamPlace> {
        let mut s = self.streams.lock().unwrap_or_else(|e| e.into_inner());
        let total: usize = s.values().sum();
        let mine = s.get(client).copied().unwrap_or(0);
        if total >= self.limits.max_event_streams || mine >= MAX_EVENT_STREAMS_PER_CLIENT {
            self.streams_refused.inc();
            return None;
        }
        *s.entry(client.clone()).or_insert(0) += 1;
        self.open_streams.inc();
        Some(StreamPlace {
            budget: self.clone(),
            client: client.clone(),
        })
    }

    /// The settings.
    pub fn limits(&self) -> BudgetLimits {
        self.limits
    }
}

/// What `bytes` cost at `rate` bytes a second (at least [`MIN_CHARGE`]).
fn cost(rate: u64, bytes: u64) -> Duration {
    Duration::from_secs_f64(bytes.max(MIN_CHARGE) as f64 / rate as f64)
}

impl Clients {
    /// Forgets the clients whose debt is paid, once the table has doubled
    /// since the last sweep: amortised, never a walk per request.
    fn sweep(&mut self, now: Instant) {
        if self.at.len() < 64 || self.at.len() < 2 * self.swept_at {
            return;
        }
        self.at.retain(|who, at| *at > now || *who == Client::All);
        if self.at.capacity() > 4 * self.at.len().max(16) {
            self.at.shrink_to(2 * self.at.len());
        }
        self.swept_at = self.at.len();
    }
}

/// An event stream's place; given back on drop.
#[derive(Debug)]
pub struct StreamPlace {
    budget: Arc<ReadBudget>,
    client: Client,
}

impl Drop for StreamPlace {
    fn drop(&mut self) {
        let mut s = self
            .budget
            .streams
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        if let Some(n) = s.get_mut(&self.client) {
            *n -= 1;
            if *n == 0 {
                s.remove(&self.client);
            }
        }
        self.budget.open_streams.dec();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn client(n: u8) -> Client {
        Client::of(None, Some(IpAddr::from([10, 0, 0, n])))
    }

    #[tokio::test]
    async fn a_loop_is_served_then_slowed_then_refused() {
        let b = ReadBudget::new(BudgetLimits {
            rate: 1 << 20,
            burst: 4 << 20,
            total_rate: 64 << 20,
            max_event_streams: 2,
        });
        let c = client(1);
        // The burst: four MiB at once, no wait.
        let t = clock::tokio_now();
        for _ in 0..4 {
            assert_eq!(b.admit(&c), Admission::Go);
            b.charge(&c, 1 << 20).await;
        }
        assert!(
            t.elapsed() < Duration::from_millis(500),
            "{:?}",
            t.elapsed()
        );
        assert_eq!(b.slowed.get(), 0);
        // Past it: 64 KiB more waits about 1/16 s.
        let t = clock::tokio_now();
        b.charge(&c, 64 << 10).await;
        assert!(
            t.elapsed() >= Duration::from_millis(50),
            "{:?}",
            t.elapsed()
        );
        assert_eq!(b.slowed.get(), 1);
        // Charged without waiting (concurrent requests) far past the
        // burst: refused, before any work.
        let at = b.lock().at[&c] + Duration::from_secs(10);
        b.lock().at.insert(c.clone(), at);
        assert!(matches!(b.admit(&c), Admission::Refused(d) if d > Duration::from_secs(7)));
        assert_eq!(b.refused.get(), 1);
        // Another client is not touched.
        assert_eq!(b.admit(&client(2)), Admission::Go);
        // A debt paid is forgotten.
        b.lock().at.insert(c.clone(), clock::tokio_now());
        assert_eq!(b.admit(&c), Admission::Go);
    }

    #[tokio::test]
    async fn all_clients_together_are_held_to_the_total() {
        let b = ReadBudget::new(BudgetLimits {
            rate: 1 << 20,
            burst: 1 << 20,
            total_rate: 2 << 20,
            max_event_streams: 2,
        });
        // Four clients, each within its own burst, fill the total's
        // (four bursts: 4 MiB, two seconds at 2 MiB/s).
        for n in 1..=4 {
            assert_eq!(b.admit(&client(n)), Admission::Go);
            b.charge(&client(n), 1 << 20).await;
        }
        assert_eq!(b.slowed.get(), 0);
        // A fifth, its own account clear, waits for the total: 1 MiB past
        // its burst is half a second.
        let t = clock::tokio_now();
        b.charge(&client(5), 1 << 20).await;
        assert!(
            t.elapsed() >= Duration::from_millis(400),
            "{:?}",
            t.elapsed()
        );
        assert_eq!(b.slowed.get(), 1);
        assert!(b.lock().at[&client(5)] <= clock::tokio_now() + Duration::from_millis(600));
        // Far past the total, a new client is refused before any work;
        // the total is never forgotten by a sweep.
        let at = clock::tokio_now() + Duration::from_secs(10);
        b.lock().at.insert(Client::All, at);
        assert!(matches!(b.admit(&client(6)), Admission::Refused(d) if d > Duration::from_secs(5)));
        let now = clock::tokio_now();
        for n in 0..100 {
            let c = Client::of(None, Some(IpAddr::from([10, 0, 1, n])));
            b.lock().at.insert(c, now);
        }
        b.lock().sweep(now + Duration::from_secs(60));
        assert_eq!(b.lock().at.len(), 1, "only the total is kept");
        assert!(b.lock().at.contains_key(&Client::All));
    }

    #[test]
    fn event_streams_are_capped_in_all_and_per_client() {
        let b = ReadBudget::new(BudgetLimits {
            max_event_streams: 5,
            ..BudgetLimits::default()
        });
        let mine: Vec<_> = (0..MAX_EVENT_STREAMS_PER_CLIENT)
            .map(|_| b.stream(&client(1)).expect("a place"))
            .collect();
        assert!(b.stream(&client(1)).is_none(), "the cap per client");
        let other = b.stream(&client(2)).expect("another client");
        assert!(b.stream(&client(3)).is_none(), "the cap of all");
        assert_eq!(b.streams_refused.get(), 2);
        drop(mine);
        drop(other);
        assert!(b.streams.lock().unwrap().is_empty());
        assert_eq!(b.open_streams.get(), 0);
    }

    #[test]
    fn settings_are_checked_by_flag() {
        assert!(BudgetLimits::default().validate().is_ok());
        let e = BudgetLimits {
            rate: 0,
            ..BudgetLimits::default()
        }
        .validate()
        .unwrap_err();
        assert!(e.contains("--admin-read-rate"), "{e}");
        let e = BudgetLimits {
            burst: 10,
            ..BudgetLimits::default()
        }
        .validate()
        .unwrap_err();
        assert!(
            e.contains("--admin-read-burst") && e.contains("4096"),
            "{e}"
        );
        let e = BudgetLimits {
            total_rate: 1,
            ..BudgetLimits::default()
        }
        .validate()
        .unwrap_err();
        assert!(e.contains("--admin-read-rate-total"), "{e}");
    }
}
