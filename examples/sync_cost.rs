//! Prints what one durability barrier of the embedded store costs, against
//! a plain fdatasync of a file in the same directory measured in the same
//! run. Usage: `cargo run --release --example sync_cost [DIR]`.

use std::io::Write;
use std::os::unix::fs::FileExt;
use std::time::{Duration, Instant};

use leasehold::lease::{LeaseRecord, Limits, Token};
use leasehold::store::sled::SledStore;
use leasehold::store::Store;

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn main() {
    let dir = std::env::args()
        .nth(1)
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| std::env::temp_dir().join("leasehold-sync-cost"));
    let _ = std::fs::remove_dir_all(&dir);
    let store = SledStore::open(&dir).expect("open store");
    let job = Limits::default().job("bench").unwrap();
    let holder = Limits::default().holder("h").unwrap();
    let raw = std::fs::File::create(dir.join("raw")).unwrap();
    let rounds = 50;
    let (mut s, mut f) = (Vec::new(), Vec::new());
    for i in 0..rounds {
        // Interleave the two, so that both see the same disk weather.
        let rec = LeaseRecord {
            issued: Default::default(),
            holder: Some(holder.clone()),
            token: Token(i + 1),
            ttl: Duration::from_secs(10),
            owner: None,
            value: None,
        };
        store.put_lease(&job, &rec, &[], 0).unwrap();
        let t = Instant::now();
        store.sync().unwrap();
        s.push(t.elapsed());
        // What the flusher does after releasing the waiters: not timed.
        store.checkpoint_if_due().unwrap();
        raw.write_all_at(&[i as u8; 64], i * 64).unwrap();
        let t = Instant::now();
        raw.sync_data().unwrap();
        f.push(t.elapsed());
    }
    let (s, f) = (median(s), median(f));
    let mut out = std::io::stdout();
    writeln!(
        out,
        "store sync (write-ahead log: pwrite + fdatasync): median {s:?} over {rounds}"
    )
    .unwrap();
    writeln!(
        out,
        "plain fdatasync of a 64-byte write:                median {f:?} over {rounds}"
    )
    .unwrap();
    writeln!(
        out,
        "ratio store/plain: {:.2}",
        s.as_secs_f64() / f.as_secs_f64()
    )
    .unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}
