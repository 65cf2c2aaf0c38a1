//! Each gRPC connection's budget of frames that cost the server work but
//! carry no call: SETTINGS, PING, RST_STREAM, PRIORITY and CONTINUATION
//! frames the client sends, and streams the server has to refuse or reset
//! (a client that pipelines requests past `--max-streams-per-connection`
//! makes it refuse each one with RST_STREAM).
//!
//! The transport ([`super::conn`]) follows both directions of a connection
//! frame by frame, reading only each frame's 9-byte header (and the error
//! code of a RST_STREAM or GOAWAY the server sends): a [`Cursor`] each
//! way, a [`Meter`] per connection. Nothing is decoded twice; hyper and h2
//! still parse every frame. Over budget, a connection goes down a ladder,
//! each step counted in `leasehold_flood_steps_total{step}`:
//!
//! 1. **slowed**: its bytes are no longer read until the budget has
//!    refilled enough to pay for what it sent (its frames wait in its
//!    own socket buffer, and then in its own kernel's: the flood costs the
//!    server nothing while it waits);
//! 2. **refused**: after [`REFUSE_AFTER`] over budget without a pause in
//!    the flood, its new calls (all but renewals) are answered at once with
//!    RESOURCE_EXHAUSTED, reason OVERLOADED, naming
//!    `--max-frame-rate-per-connection`;
//! 3. **goaway**: after [`GOAWAY_AFTER`], the server sends GOAWAY with
//!    ENHANCE_YOUR_CALM and closes it.
//!
//! A connection leaves the ladder once its budget is half full again. Renewals
//! on other connections are never slowed: the budget is the connection's
//! own.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// The frame types ([RFC 9113 §6]).
const DATA: u8 = 0x0;
/// HEADERS: opens a stream.
pub const HEADERS: u8 = 0x1;
const RST_STREAM: u8 = 0x3;
const SETTINGS: u8 = 0x4;
const PING: u8 = 0x6;
/// GOAWAY: a peer closing the connection.
pub const GOAWAY: u8 = 0x7;
const WINDOW_UPDATE: u8 = 0x8;
/// The ACK flag of SETTINGS and PING.
const ACK: u8 = 0x1;
/// RST_STREAM's and GOAWAY's error codes that say nothing against the
/// peer.
const NO_ERROR: u32 = 0x0;
const CANCEL: u32 = 0x8;
/// GOAWAY's error code for a peer that generates excessive load.
pub const ENHANCE_YOUR_CALM: u32 = 0xb;

/// How long a connection stays over budget, its flood never pausing,
/// before its new calls are refused.
pub const REFUSE_AFTER: Duration = Duration::from_secs(2);
/// How long before it is closed with GOAWAY.
pub const GOAWAY_AFTER: Duration = Duration::from_secs(5);
/// How much longer the server waits for the end of the frame it is
/// writing, to send the GOAWAY after it, before it closes the connection
/// without one (a client that reads nothing never lets that frame out).
pub const GOAWAY_GRACE: Duration = Duration::from_secs(2);
/// How long a new connection waits before its first byte is read, for
/// each time its address was sent away in the last [`STRIKE_MEMORY`], at
/// most [`MAX_PENALTY`]: a client that reconnects after each GOAWAY to
/// flood again is slowed too.
pub const PENALTY_PER_STRIKE: Duration = Duration::from_millis(250);
/// The longest wait of [`PENALTY_PER_STRIKE`]s.
pub const MAX_PENALTY: Duration = Duration::from_millis(1500);
/// How long an address's strikes are remembered after its last one.
pub const STRIKE_MEMORY: Duration = Duration::from_secs(60);

/// The steps reached, for `/metrics`.
pub static STEPS: Steps = Steps {
    slowed: AtomicU64::new(0),
    refused: AtomicU64::new(0),
    goaway: AtomicU64::new(0),
};

/// The default of `--max-frame-rate-per-connection`.
pub const DEFAULT_MAX_FRAME_RATE: u32 = 1_000;
/// How many seconds of the rate a connection may spend at once: a client
/// that cancels a thousand waiting calls at once is not slowed for it.
const BURST_SECONDS: f64 = 2.0;

/// One frame's header, and the first bytes of its payload when they say
/// something (a RST_STREAM's or GOAWAY's error code).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Frame {
    /// The frame type.
    pub kind: u8,
    /// Its flags.
    pub flags: u8,
    /// Its stream (0 for the connection).
    pub stream: u32,
    /// RST_STREAM's error code, or GOAWAY's; 0 for other frames.
    pub code: u32,
}

/// Follows one direction of an HTTP/2 connection frame by frame.
#[derive(Debug, Clone)]
pub struct Cursor {
    /// Bytes to pass over before the next frame header: the client's
    /// 24-byte preface, or the rest of a payload.
    skip: usize,
    /// The header being read, and the payload bytes wanted after it.
    head: [u8; 17],
    have: usize,
}

impl Cursor {
    /// A cursor that first passes over `skip` bytes (the client preface).
    pub fn new(skip: usize) -> Cursor {
        Cursor {
            skip,
            head: [0; 17],
            have: 0,
        }
    }

    /// Whether the bytes so far end exactly at a frame's end.
    pub fn at_boundary(&self) -> bool {
        self.skip == 0 && self.have == 0
    }

    /// The bytes of a frame header (and of the payload it wants) still to
    /// come, once 9 are in.
    fn wanted(&self) -> usize {
        if self.have < 9 {
            return 9;
        }
        let len = u32::from_be_bytes([0, self.head[0], self.head[1], self.head[2]]) as usize;
        let peek = match self.head[3] {
            RST_STREAM => 4,
            GOAWAY => 8,
            _ => 0,
        };
        9 + peek.min(len)
    }

    /// Follows `bytes`, calling `each` for every frame whose header (and
    /// wanted payload) they complete.
    pub fn follow(&mut self, mut bytes: &[u8], mut each: impl FnMut(Frame)) {
        while !bytes.is_empty() {
            if self.skip > 0 {
                let n = self.skip.min(bytes.len());
                self.skip -= n;
                bytes = &bytes[n..];
                continue;
            }
            let want = self.wanted();
            let n = (want - self.have).min(bytes.len());
            self.head[self.have..self.have + n].copy_from_slice(&bytes[..n]);
            self.have += n;
            bytes = &bytes[n..];
            if self.have < want {
                continue;
            }
            if want == 9 && self.wanted() > 9 {
                continue; // its error code comes next
            }
            let h = &self.head;
            let len = u32::from_be_bytes([0, h[0], h[1], h[2]]) as usize;
            let code = match h[3] {
                RST_STREAM if want >= 13 => u32::from_be_bytes([h[9], h[10], h[11], h[12]]),
                GOAWAY if want >= 17 => u32::from_be_bytes([h[13], h[14], h[15], h[16]]),
                _ => 0,
            };
            each(Frame {
                kind: h[3],
                flags: h[4],
                stream: u32::from_be_bytes([h[5], h[6], h[7], h[8]]) & 0x7fff_ffff,
                code,
            });
            self.skip = len - (want - 9);
            self.have = 0;
        }
    }
}

/// What a frame the client sent costs: those that carry a call or its
/// bytes cost nothing here (the in-flight and rate limits count those),
/// the others one each; a WINDOW_UPDATE, which a client reading large
/// answers sends now and then, a tenth.
pub fn client_cost(f: &Frame) -> f64 {
    match f.kind {
        DATA | HEADERS | GOAWAY => 0.0,
        SETTINGS | PING if f.flags & ACK != 0 => 0.0,
        WINDOW_UPDATE => 0.1,
        _ => 1.0,
    }
}

/// What a frame the server sent costs its client: a stream the server had
/// to refuse or reset (not one it cancelled itself) counts one.
pub fn server_cost(f: &Frame) -> f64 {
    match f.kind {
        RST_STREAM if f.code != NO_ERROR && f.code != CANCEL => 1.0,
        _ => 0.0,
    }
}

/// Whether a frame the server sent is a GOAWAY that blames the client.
pub fn is_goaway_for_cause(f: &Frame) -> bool {
    f.kind == GOAWAY && f.code != NO_ERROR
}

/// A GOAWAY frame: last stream `last`, error `code`.
pub fn goaway(last: u32, code: u32) -> [u8; 17] {
    let mut f = [0u8; 17];
    f[2] = 8; // length
    f[3] = GOAWAY;
    f[9..13].copy_from_slice(&(last & 0x7fff_ffff).to_be_bytes());
    f[13..17].copy_from_slice(&code.to_be_bytes());
    f
}

/// Where a connection is on the ladder.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Step {
    /// Within its budget.
    Within,
    /// Its reads wait.
    Slowed,
    /// Its new calls are refused too.
    Refused,
    /// It is sent away.
    Goaway,
}

/// `leasehold_flood_steps_total{step}`: how many connections reached each
/// step of the ladder, all ports' connections together.
#[derive(Debug)]
pub struct Steps {
    /// Connections slowed (their reads waited).
    pub slowed: AtomicU64,
    /// Connections whose calls were refused.
    pub refused: AtomicU64,
    /// Connections sent away.
    pub goaway: AtomicU64,
}

impl Steps {
    /// How many connections reached `slowed`, `refused` and `goaway`.
    pub fn get(&self) -> [(&'static str, u64); 3] {
        [
            ("slowed", self.slowed.load(Ordering::Relaxed)),
            ("refused", self.refused.load(Ordering::Relaxed)),
            ("goaway", self.goaway.load(Ordering::Relaxed)),
        ]
    }

    fn count(&self, step: Step) {
        let c = match step {
            Step::Within => return,
            Step::Slowed => &self.slowed,
            Step::Refused => &self.refused,
            Step::Goaway => &self.goaway,
        };
        c.fetch_add(1, Ordering::Relaxed);
    }
}

/// One connection's budget: a bucket of `rate` a second, holding at most
/// two seconds of it.
#[derive(Debug)]
pub struct Meter {
    rate: f64,
    burst: f64,
    level: f64,
    at: Instant,
    /// Since when the connection has been slowed without its budget
    /// filling up to half again (its flood has not paused).
    slowed_since: Option<Instant>,
    /// The furthest step reached since then.
    step: Step,
}

impl Meter {
    /// A full budget of `rate` frames a second.
    pub fn new(rate: u32, now: Instant) -> Meter {
        let rate = f64::from(rate.max(1));
        Meter {
            rate,
            burst: rate * BURST_SECONDS,
            level: rate * BURST_SECONDS,
            at: now,
            slowed_since: None,
            step: Step::Within,
        }
    }

    fn refill(&mut self, now: Instant) {
        let dt = now.saturating_duration_since(self.at).as_secs_f64();
        self.at = now;
        self.level = (self.level + dt * self.rate).min(self.burst);
        if self.level >= self.burst / 2.0 {
            self.slowed_since = None;
            self.step = Step::Within;
        }
    }

    /// Sets the rate (a policy reload may change a principal's).
    pub fn set_rate(&mut self, rate: u32) {
        let rate = f64::from(rate.max(1));
        if rate != self.rate {
            self.rate = rate;
            self.burst = rate * BURST_SECONDS;
            self.level = self.level.min(self.burst);
        }
    }

    /// The rate, frames a second.
    pub fn rate(&self) -> u32 {
        self.rate as u32
    }

    /// Whether the budget is spent.
    pub fn empty(&self) -> bool {
        self.level < 0.0
    }

    /// Charges `cost` at `now`.
    pub fn charge(&mut self, cost: f64, now: Instant) {
        if cost > 0.0 {
            self.refill(now);
            self.level -= cost;
        }
    }

    /// The step the connection is on at `now`, newly reached steps counted
    /// in `steps`, and how long its reads wait (zero once its budget is
    /// above empty again).
    pub fn step(&mut self, now: Instant, steps: &Steps) -> (Step, Duration) {
        self.refill(now);
        let wait = if self.level < 0.0 {
            Duration::from_secs_f64(-self.level / self.rate)
        } else {
            Duration::ZERO
        };
        if self.level < 0.0 && self.slowed_since.is_none() {
            self.slowed_since = Some(now);
        }
        let step = match self.slowed_since {
            None => Step::Within,
            // Refilling: the flood paused, or was never more than a burst.
            Some(_) if self.level >= self.burst / 10.0 => self.step,
            Some(since) => {
                let slowed = now.saturating_duration_since(since);
                if slowed >= GOAWAY_AFTER {
                    Step::Goaway
                } else if slowed >= REFUSE_AFTER {
                    Step::Refused
                } else {
                    Step::Slowed
                }
            }
        };
        while self.step < step {
            self.step = match self.step {
                Step::Within => Step::Slowed,
                Step::Slowed => Step::Refused,
                _ => Step::Goaway,
            };
            steps.count(self.step);
        }
        (self.step, wait)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
        let mut v = (payload.len() as u32).to_be_bytes()[1..].to_vec();
        v.push(kind);
        v.push(flags);
        v.extend_from_slice(&stream.to_be_bytes());
        v.extend_from_slice(payload);
        v
    }

    #[test]
    fn a_cursor_finds_every_frame_however_the_bytes_are_cut() {
        let mut bytes = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
        bytes.extend(frame(SETTINGS, 0, 0, &[0, 4, 0, 0, 0, 0]));
        bytes.extend(frame(HEADERS, 4, 1, &[0x83; 20]));
        bytes.extend(frame(RST_STREAM, 0, 1, &7u32.to_be_bytes()));
        bytes.extend(frame(GOAWAY, 0, 0, &[0, 0, 0, 9, 0, 0, 0, 0xb, 1, 2]));
        bytes.extend(frame(PING, ACK, 0, &[0; 8]));
        bytes.extend(frame(DATA, 1, 3, &[]));
        let want = vec![
            (SETTINGS, 0, 0, 0),
            (HEADERS, 4, 1, 0),
            (RST_STREAM, 0, 1, 7),
            (GOAWAY, 0, 0, 0xb),
            (PING, ACK, 0, 0),
            (DATA, 1, 3, 0),
        ];
        for cut in [1, 2, 3, 5, 7, 9, 13, 64, bytes.len()] {
            let mut c = Cursor::new(24);
            let mut got = Vec::new();
            for chunk in bytes.chunks(cut) {
                c.follow(chunk, |f| got.push((f.kind, f.flags, f.stream, f.code)));
            }
            assert_eq!(got, want, "in chunks of {cut}");
            assert!(c.at_boundary());
        }
        let mut c = Cursor::new(0);
        c.follow(&frame(HEADERS, 4, 1, &[0; 20])[..12], |_| {});
        assert!(!c.at_boundary(), "in the middle of a frame");
    }

    #[test]
    fn a_flood_is_slowed_then_refused_then_sent_away_and_a_pause_forgives_it() {
        let t0 = Instant::now();
        let steps = Steps {
            slowed: AtomicU64::new(0),
            refused: AtomicU64::new(0),
            goaway: AtomicU64::new(0),
        };
        let mut m = Meter::new(100, t0);
        m.charge(199.0, t0);
        assert_eq!(
            m.step(t0, &steps),
            (Step::Within, Duration::ZERO),
            "the burst"
        );
        m.charge(101.0, t0);
        let (step, wait) = m.step(t0, &steps);
        assert_eq!(step, Step::Slowed);
        assert_eq!(wait, Duration::from_millis(1000));
        // It keeps sending as fast as it is read.
        let mut t = t0;
        for (i, want) in [Step::Slowed, Step::Refused, Step::Refused, Step::Refused]
            .into_iter()
            .enumerate()
        {
            t += Duration::from_secs(1);
            m.charge(100.0, t);
            assert_eq!(m.step(t, &steps).0, want, "{} s slowed", i + 1);
        }
        t += Duration::from_secs(1);
        m.charge(100.0, t);
        assert_eq!(m.step(t, &steps).0, Step::Goaway);
        assert_eq!(steps.slowed.load(Ordering::Relaxed), 1);
        assert_eq!(steps.refused.load(Ordering::Relaxed), 1);
        assert_eq!(steps.goaway.load(Ordering::Relaxed), 1);
        // A pause long enough to fill half the budget again forgives it.
        t += Duration::from_secs(6);
        assert_eq!(m.step(t, &steps), (Step::Within, Duration::ZERO));
    }

    #[test]
    fn the_frames_of_calls_cost_nothing_and_refusals_do() {
        let f = |kind, flags, code| Frame {
            kind,
            flags,
            stream: 1,
            code,
        };
        assert_eq!(client_cost(&f(HEADERS, 4, 0)), 0.0);
        assert_eq!(client_cost(&f(DATA, 0, 0)), 0.0);
        assert_eq!(client_cost(&f(PING, ACK, 0)), 0.0);
        assert_eq!(client_cost(&f(PING, 0, 0)), 1.0);
        assert_eq!(client_cost(&f(SETTINGS, 0, 0)), 1.0);
        assert_eq!(client_cost(&f(RST_STREAM, 0, 8)), 1.0);
        assert_eq!(server_cost(&f(RST_STREAM, 0, 7)), 1.0, "REFUSED_STREAM");
        assert_eq!(server_cost(&f(RST_STREAM, 0, CANCEL)), 0.0);
        assert_eq!(server_cost(&f(RST_STREAM, 0, NO_ERROR)), 0.0);
        assert!(is_goaway_for_cause(&f(GOAWAY, 0, ENHANCE_YOUR_CALM)));
        assert!(!is_goaway_for_cause(&f(GOAWAY, 0, NO_ERROR)));
        let mut c = Cursor::new(0);
        let mut got = None;
        c.follow(&goaway(41, ENHANCE_YOUR_CALM), |f| got = Some(f));
        assert_eq!(
            got,
            Some(Frame {
                kind: GOAWAY,
                flags: 0,
                stream: 0,
                code: ENHANCE_YOUR_CALM
            })
        );
    }
}
