//! The Markdown report, the goals with their ratios, and the chart.

use std::fmt::Write as _;
use std::path::Path;
use std::time::Duration;

use crate::fleet::{FleetResult, How, MillionResult};
use crate::run::Row;
use crate::sys::{self, Res, Sys, Work};
use crate::Plan;

pub struct Group {
    pub name: String,
    pub clients: usize,
    pub fsync_probe_us: f64,
    pub rows: Vec<Row>,
}

pub struct Report {
    pub quick: bool,
    pub plan: Plan,
    pub command_line: String,
    pub elapsed: Duration,
    pub groups: Vec<Group>,
    pub fleet: Vec<FleetResult>,
    pub fleet_acquire_secs: f64,
    pub fleet_leases: usize,
    pub million: MillionResult,
    pub lh_rss_after_groups: u64,
}

fn shell(cmd: &str, args: &[&str]) -> String {
    std::process::Command::new(cmd)
        .args(args)
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
        .unwrap_or_default()
}

fn what(sys: Sys, work: Work) -> String {
    let s = sys.label();
    match (sys, work) {
        (Sys::Leasehold, Work::Renew) => "leasehold Renew (unary)".into(),
        (Sys::Leasehold, Work::Write) => "leasehold CheckedWrite".into(),
        (Sys::Leasehold, Work::Read) => "leasehold Read".into(),
        (Sys::Leasehold, Work::Churn) => "leasehold Acquire+Release".into(),
        (Sys::Leasehold, Work::Stream) => {
            format!("leasehold KeepAlive stream, {} per message", sys::BATCH)
        }
        (Sys::Etcd, Work::Stream) => format!("etcd LeaseKeepAlive, {} pipelined", sys::BATCH),
        (Sys::Etcd, Work::Renew) => "etcd txn (compare owner, put with lease)".into(),
        (Sys::Etcd, Work::Write) => "etcd txn (compare token key, put)".into(),
        (Sys::Postgres, Work::Renew) => "PostgreSQL upsert acquire-or-renew".into(),
        (Sys::Postgres, Work::Write) => "PostgreSQL upsert WHERE epoch <=".into(),
        (Sys::RedisAof | Sys::Redis, Work::Stream) => {
            format!("{s}, Lua renew, {} pipelined", sys::BATCH)
        }
        (Sys::RedisAof | Sys::Redis, Work::Renew) => format!("{s}, Lua renew"),
        (Sys::RedisAof | Sys::Redis, Work::Write) => format!("{s}, Lua compare-and-set"),
        (Sys::Leasehold, Work::WriteStream) => "leasehold WriteStream, 1 write per message".into(),
        (Sys::Echo, Work::EchoSync) => {
            "floor: tonic echo + pwrite + fdatasync in the handler".into()
        }
        (Sys::Echo, _) => "floor: tonic echo round trip".into(),
        (Sys::Disk, _) => "floor: one fdatasync".into(),
        _ => format!("{s} {work:?}"),
    }
}

fn rate(x: f64) -> String {
    if x >= 100.0 {
        format!("{:.0}", x)
    } else {
        format!("{:.1}", x)
    }
}

fn us(x: f64) -> String {
    if x.is_nan() {
        "-".into()
    } else if x >= 10_000.0 {
        format!("{:.1} ms", x / 1000.0)
    } else {
        format!("{:.0} µs", x)
    }
}

/// CPU microseconds per item: a tenth of a microsecond below 10.
fn cpu_us(x: f64) -> String {
    if x.is_nan() {
        "-".into()
    } else if x < 10.0 {
        format!("{x:.1} µs")
    } else {
        us(x)
    }
}

fn mib(b: u64) -> String {
    format!("{:.0} MiB", b as f64 / (1 << 20) as f64)
}

impl Report {
    /// The row of `sys` doing `work` in the group `name` at `clients`.
    fn find(&self, name: &str, clients: usize, sys: Sys, work: Work) -> Option<&Row> {
        self.groups
            .iter()
            .filter(|g| g.name == name && g.clients == clients)
            .flat_map(|g| &g.rows)
            .find(|r| r.sys == sys && r.work == work)
    }

    fn ratio(&self, name: &str, clients: usize, a: (Sys, Work), b: (Sys, Work)) -> Option<f64> {
        let x = self.find(name, clients, a.0, a.1)?;
        let y = self.find(name, clients, b.0, b.1)?;
        Some(x.median.per_sec / y.median.per_sec)
    }

    /// `a`'s server CPU per item over `b`'s, `a` in group `na` and `b` in
    /// group `nb`, at `clients`.
    fn cpu_ratio(
        &self,
        clients: usize,
        (na, a): (&str, (Sys, Work)),
        (nb, b): (&str, (Sys, Work)),
    ) -> Option<f64> {
        let x = self.find(na, clients, a.0, a.1)?;
        let y = self.find(nb, clients, b.0, b.1)?;
        Some(x.median.server_cpu_us / y.median.server_cpu_us)
    }

    /// The durable-write floor at one client: (CheckedWrite p50, echo p50
    /// + fdatasync p50).
    pub fn floor(&self) -> Option<(f64, f64, f64, f64)> {
        let g = "Fenced write";
        let w = self.find(g, 1, Sys::Leasehold, Work::Write)?.median.p50;
        let e = self.find(g, 1, Sys::Echo, Work::Echo)?.median.p50;
        let d = self.find(g, 1, Sys::Disk, Work::Fsync)?.median.p50;
        Some((w, e, d, w / (e + d)))
    }

    /// The p50 of `work` at one client in the fenced-write group.
    fn p50_1(&self, sys: Sys, work: Work) -> Option<f64> {
        Some(self.find("Fenced write", 1, sys, work)?.median.p50)
    }

    pub fn markdown(&self) -> String {
        let mut o = String::new();
        let p = &self.plan;
        let _ = writeln!(o, "Command: `{}`\n", self.command_line);
        let _ = writeln!(
            o,
            "Run of {} ({}), {} min: {} interleaved rounds (A B C D, D C B A, ...) of {:.1} s per cell after a warm-up, medians of the rounds. Machine: {} cores, Linux {}. Each client has its own connection and runs one operation at a time; jobs and keys are drawn at random from {}.\n",
            shell("date", &["-u", "+%Y-%m-%d %H:%M UTC"]),
            if self.quick { "--quick" } else { "full" },
            (self.elapsed.as_secs_f64() / 60.0).round(),
            p.rounds,
            p.cell.as_secs_f64(),
            std::thread::available_parallelism().map_or(0, |n| n.get()),
            shell("uname", &["-r"]),
            sys::JOBS,
        );
        self.goals(&mut o);
        let mut names: Vec<&str> = Vec::new();
        for g in &self.groups {
            if !names.contains(&g.name.as_str()) {
                names.push(&g.name);
            }
        }
        for name in names {
            let _ = writeln!(o, "### {name}\n");
            let _ = writeln!(
                o,
                "| clients | system | per second | rounds min–max | p50 | p99 | p99.9 | leasehold ÷ system | server CPU per item | load generator CPU per item | fsync probe |"
            );
            let _ = writeln!(o, "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
            for g in self.groups.iter().filter(|g| g.name == name) {
                let base = g.rows.first();
                for r in &g.rows {
                    let ratio = match base {
                        Some(b) if !matches!(r.sys, Sys::Echo | Sys::Disk) => {
                            format!("{:.2}", b.median.per_sec / r.median.per_sec)
                        }
                        _ => "-".into(),
                    };
                    let errors = if r.median.errors > 0 {
                        format!(" ({} errors)", r.median.errors)
                    } else {
                        String::new()
                    };
                    let lo = r.rounds.iter().map(|s| s.per_sec).fold(f64::MAX, f64::min);
                    let hi = r.rounds.iter().map(|s| s.per_sec).fold(0.0, f64::max);
                    let _ = writeln!(
                        o,
                        "| {} | {}{} | {} | {}–{} | {} | {} | {} | {} | {} | {} | {} |",
                        g.clients,
                        what(r.sys, r.work),
                        errors,
                        rate(r.median.per_sec),
                        rate(lo),
                        rate(hi),
                        us(r.median.p50),
                        us(r.median.p99),
                        us(r.median.p999),
                        ratio,
                        cpu_us(r.median.server_cpu_us),
                        cpu_us(r.median.client_cpu_us),
                        us(g.fsync_probe_us),
                    );
                }
            }
            let _ = writeln!(o);
        }
        self.fleet_md(&mut o);
        self.million_md(&mut o);
        o
    }

    fn goals(&self, o: &mut String) {
        let _ = writeln!(o, "### Goals\n");
        let _ = writeln!(o, "| goal | measured (ratio within this run) | met |");
        let _ = writeln!(o, "|---|---|---|");
        let mut goal = |text: String, value: Option<f64>, ok: &dyn Fn(f64) -> bool, fmt: &str| {
            let (v, m) = match value {
                Some(v) if v.is_finite() => (
                    fmt.replace("{}", &format!("{v:.2}")),
                    if text.starts_with("(context)") {
                        "-"
                    } else if ok(v) {
                        "yes"
                    } else {
                        "**no**"
                    },
                ),
                _ => ("not measured".into(), "-"),
            };
            let _ = writeln!(o, "| {text} | {v} | {m} |");
        };
        let (lr, lw, ls) = (
            (Sys::Leasehold, Work::Renew),
            (Sys::Leasehold, Work::Write),
            (Sys::Leasehold, Work::Stream),
        );
        for c in [16, 64] {
            goal(
                format!("Renew ≥ 1.5x PostgreSQL at {c} clients"),
                self.ratio("Renew", c, lr, (Sys::Postgres, Work::Renew)),
                &|v| v >= 1.5,
                "{}x",
            );
            goal(
                format!("Renew ≥ 4x etcd at {c} clients"),
                self.ratio("Renew", c, lr, (Sys::Etcd, Work::Renew)),
                &|v| v >= 4.0,
                "{}x",
            );
        }
        for c in [16, 64] {
            goal(
                format!("Durable CheckedWrite ≥ 1.2x PostgreSQL at {c} clients"),
                self.ratio("Fenced write", c, lw, (Sys::Postgres, Work::Write)),
                &|v| v >= 1.2,
                "{}x",
            );
            goal(
                format!(
                    "(context) the unary ceiling: a tonic echo doing no work vs PostgreSQL at {c} clients"
                ),
                self.ratio(
                    "Fenced write",
                    c,
                    (Sys::Echo, Work::Echo),
                    (Sys::Postgres, Work::Write),
                ),
                &|v| v >= 1.2,
                "{}x",
            );
            goal(
                format!("(context) unary CheckedWrite vs that echo at {c} clients"),
                self.ratio("Fenced write", c, lw, (Sys::Echo, Work::Echo)),
                &|v| v >= 1.0,
                "{}x",
            );
            goal(
                format!(
                    "(also) durable fenced writes on a WriteStream, 1 per message, vs PostgreSQL at {c} clients"
                ),
                self.ratio(
                    "Fenced write",
                    c,
                    (Sys::Leasehold, Work::WriteStream),
                    (Sys::Postgres, Work::Write),
                ),
                &|v| v >= 1.2,
                "{}x",
            );
        }
        goal(
            "Streamed renew ≥ 1x Redis AOF always (Lua renew per call) at 64 clients, leases/s"
                .into(),
            self.ratio("Streamed renew", 64, ls, (Sys::RedisAof, Work::Renew)),
            &|v| v >= 1.0,
            "{}x",
        );
        goal(
            "(also) Streamed renew vs Redis AOF always pipelined 100 per round trip, 64 clients"
                .into(),
            self.ratio("Streamed renew", 64, ls, (Sys::RedisAof, Work::Stream)),
            &|v| v >= 1.0,
            "{}x",
        );
        // Server CPU per item: the system under test's processes (the
        // machine's busy time less the load generator's own), per item.
        let (renew, write) = (("Renew", lr), ("Fenced write", lw));
        for c in [16, 64] {
            goal(
                format!(
                    "Unary CheckedWrite server CPU per write ≤ 0.5x PostgreSQL's at {c} clients"
                ),
                self.cpu_ratio(c, write, ("Fenced write", (Sys::Postgres, Work::Write))),
                &|v| v <= 0.5,
                "{}x",
            );
            goal(
                format!(
                    "Unary CheckedWrite server CPU per write ≤ 1.3x a unary Renew's at {c} clients"
                ),
                self.cpu_ratio(c, write, renew),
                &|v| v <= 1.3,
                "{}x",
            );
        }
        goal(
            "Unary Renew server CPU per renewal ≤ 0.25x PostgreSQL's at 64 clients".into(),
            self.cpu_ratio(64, renew, ("Renew", (Sys::Postgres, Work::Renew))),
            &|v| v <= 0.25,
            "{}x",
        );
        goal(
            "Unary Renew server CPU per renewal ≤ 0.5x Redis AOF always's at 64 clients".into(),
            self.cpu_ratio(64, renew, ("Renew", (Sys::RedisAof, Work::Renew))),
            &|v| v <= 0.5,
            "{}x",
        );
        let floor = self.floor();
        goal(
            "Single-client CheckedWrite p50 ≤ 1.3x floor (echo p50 + fdatasync p50)".into(),
            floor.map(|f| f.3),
            &|v| v <= 1.3,
            "{}x the floor",
        );
        goal(
            "(also) single-client WriteStream write p50 ≤ 1.3x the same floor".into(),
            self.p50_1(Sys::Leasehold, Work::WriteStream)
                .zip(floor)
                .map(|(w, f)| w / (f.1 + f.2)),
            &|v| v <= 1.3,
            "{}x the floor",
        );
        let combined = self.p50_1(Sys::Echo, Work::EchoSync);
        goal(
            "(also) single-client CheckedWrite p50 vs the measured durable echo (pwrite + fdatasync in the handler)".into(),
            self.p50_1(Sys::Leasehold, Work::Write)
                .zip(combined)
                .map(|(w, c)| w / c),
            &|v| v <= 1.3,
            "{}x",
        );
        goal(
            "(also) single-client WriteStream write p50 vs the same durable echo".into(),
            self.p50_1(Sys::Leasehold, Work::WriteStream)
                .zip(combined)
                .map(|(w, c)| w / c),
            &|v| v <= 1.3,
            "{}x",
        );
        let m = &self.million;
        let mib_f = |b: u64| b as f64 / (1u64 << 20) as f64;
        let quick = m.leases < 1_000_000;
        let _ = writeln!(
            o,
            "| {} leases held in ≤ 350 MiB RSS | {} ({:.0} bytes a lease over the empty server's {}) | {} |",
            m.leases,
            mib(m.rss),
            m.rss.saturating_sub(m.rss_empty) as f64 / m.leases.max(1) as f64,
            mib(m.rss_empty),
            if quick {
                "- (quick: fewer leases)"
            } else if mib_f(m.rss) <= 350.0 {
                "yes"
            } else {
                "**no**"
            }
        );
        let _ = writeln!(
            o,
            "| restart with {} persisted leases ≤ 1 s | {:.2} s ({:.1}x the empty server's {:.3} s) | {} |",
            m.leases,
            m.startup.as_secs_f64(),
            m.startup.as_secs_f64() / m.startup_empty.as_secs_f64(),
            m.startup_empty.as_secs_f64(),
            if quick {
                "- (quick: fewer leases)"
            } else if m.startup.as_secs_f64() <= 1.0 {
                "yes"
            } else {
                "**no**"
            }
        );
        let _ = writeln!(o);
        if let Some((w, e, d, r)) = floor {
            let _ = writeln!(
                o,
                "Durable-write floor, one client: CheckedWrite p50 {} against tonic echo p50 {} + fdatasync p50 {} = {} ({r:.2}x).\n",
                us(w),
                us(e),
                us(d),
                us(e + d)
            );
        }
    }

    fn fleet_md(&self, o: &mut String) {
        if self.fleet.is_empty() {
            return;
        }
        let s = &self.plan.fleet;
        let _ = writeln!(
            o,
            "### Fleet: {} leases, {} holders, TTL {} s, each renewing at ttl/3\n",
            s.leases,
            s.holders,
            s.ttl.as_secs()
        );
        let _ = writeln!(
            o,
            "One round each, on a fresh server (setting up the leasehold fleet took {:.1} s: {:.0} durable Acquires/s from 64 clients). CPU is the server process's user + system time over a {} s window after one full period.\n",
            self.fleet_acquire_secs,
            self.fleet_leases as f64 / self.fleet_acquire_secs,
            s.window.as_secs()
        );
        let _ = writeln!(
            o,
            "| renewing with | renewals/s | server CPU s per 1,000 renewals | ÷ leasehold stream | server RSS | RSS before the fleet |"
        );
        let _ = writeln!(o, "|---|---:|---:|---:|---:|---:|");
        let base = self
            .fleet
            .iter()
            .find(|r| r.how == How::Stream)
            .map(|r| r.cpu_per_1000());
        for r in &self.fleet {
            let _ = writeln!(
                o,
                "| {} | {:.0} | {:.4} | {} | {} | {} |",
                r.how.label(),
                r.renewals as f64 / r.secs,
                r.cpu_per_1000(),
                base.map_or("-".into(), |b| format!("{:.1}x", r.cpu_per_1000() / b)),
                mib(r.rss),
                mib(r.rss_idle),
            );
        }
        let _ = writeln!(o);
    }

    fn million_md(&self, o: &mut String) {
        let m = &self.million;
        let _ = writeln!(o, "### {} persisted leases: restart and memory\n", m.leases);
        let _ = writeln!(
            o,
            "| server | start-up to listening | RSS | |\n|---|---:|---:|---|\n| empty data dir (baseline) | {:.3} s | {} | |\n| {} held leases | {:.2} s ({:.1}x) | {} ({:.1}x) | {} of 1,000 random leases renewed with their token after the restart |\n",
            m.startup_empty.as_secs_f64(),
            mib(m.rss_empty),
            m.leases,
            m.startup.as_secs_f64(),
            m.startup.as_secs_f64() / m.startup_empty.as_secs_f64(),
            mib(m.rss),
            m.rss as f64 / m.rss_empty as f64,
            m.renewed
        );
        let _ = writeln!(
            o,
            "(The workload server's RSS after every group above: {}.)\n",
            mib(self.lh_rss_after_groups)
        );
    }
}

/// Draws ops/s per system and concurrency, one panel per workload, log
/// scale.
pub fn chart(rep: &Report, path: &Path) -> Res<()> {
    use plotters::prelude::*;
    let font = std::fs::read("/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf")
        .map_err(|e| format!("DejaVuSans.ttf (package fonts-dejavu-core): {e}"))?;
    let font: &'static [u8] = Box::leak(font.into_boxed_slice());
    plotters::style::register_font("sans-serif", FontStyle::Normal, font)
        .map_err(|_| "bad font file")?;

    let root = BitMapBackend::new(path, (1800, 1240)).into_drawing_area();
    root.fill(&WHITE)?;
    let (top, body) = root.split_vertically(50);
    top.titled(
        "leasehold and what users pick instead, log scales: above, operations (leases renewed) per second, higher is better; below, the server's CPU per operation, lower is better",
        ("sans-serif", 20),
    )?;
    let (above, below) = body.split_vertically(595);
    panels(rep, &above, "per second", |r| r.median.per_sec)?;
    panels(rep, &below, "server CPU µs per operation", |r| {
        r.median.server_cpu_us
    })?;
    root.present()?;
    Ok(())
}

/// One row of the chart: a panel per group, a bar per system and
/// concurrency, `value` of each row on a log scale.
fn panels<DB: plotters::prelude::DrawingBackend>(
    rep: &Report,
    row: &plotters::prelude::DrawingArea<DB, plotters::coord::Shift>,
    unit: &str,
    value: impl Fn(&Row) -> f64,
) -> Res<()>
where
    DB::ErrorType: 'static,
{
    use plotters::prelude::*;
    let panels = ["Renew", "Fenced write", "Streamed renew"];
    let clients = rep.plan.clients;
    let areas = row.split_evenly((1, panels.len()));
    let colors = [
        RGBColor(0x1f, 0x77, 0xb4),
        RGBColor(0xff, 0x7f, 0x0e),
        RGBColor(0x2c, 0xa0, 0x2c),
        RGBColor(0xd6, 0x27, 0x28),
        RGBColor(0x94, 0x67, 0xbd),
        RGBColor(0x8c, 0x56, 0x4b),
    ];
    for (area, name) in areas.iter().zip(panels) {
        let rows: Vec<&Row> = rep
            .groups
            .iter()
            .filter(|g| g.name == name)
            .flat_map(|g| &g.rows)
            .filter(|r| !matches!(r.sys, Sys::Echo | Sys::Disk))
            .filter(|r| value(r).is_finite() && value(r) > 0.0)
            .collect();
        let mut series: Vec<(Sys, Work)> = Vec::new();
        for r in &rows {
            if !series.contains(&(r.sys, r.work)) {
                series.push((r.sys, r.work));
            }
        }
        let lo = rows.iter().map(|r| value(r)).fold(f64::MAX, f64::min);
        let lo = if lo == f64::MAX { 1.0 } else { lo / 2.0 };
        let ymax = rows.iter().map(|r| value(r)).fold(lo * 10.0, f64::max) * 80.0;
        let mut chart = ChartBuilder::on(area)
            .caption(format!("{name}: {unit}"), ("sans-serif", 20))
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(70)
            .build_cartesian_2d(0f64..3f64, (lo..ymax).log_scale())?;
        chart
            .configure_mesh()
            .disable_x_mesh()
            .x_labels(7)
            .x_label_formatter(&|x| {
                let k = (x * 2.0).round() as i64;
                if k % 2 == 1 && (0..6).contains(&k) {
                    format!("{} clients", clients[(k / 2) as usize])
                } else {
                    String::new()
                }
            })
            .y_label_formatter(&|y| {
                if *y >= 1e6 {
                    format!("{:.0}M", y / 1e6)
                } else if *y >= 1e3 {
                    format!("{:.0}k", y / 1e3)
                } else if *y >= 1.0 {
                    format!("{y:.0}")
                } else {
                    format!("{y:.2}")
                }
            })
            .label_style(("sans-serif", 15))
            .draw()?;
        let w = 0.8 / series.len().max(1) as f64;
        for (k, &(sys, work)) in series.iter().enumerate() {
            let color = colors[k % colors.len()];
            let bars: Vec<_> = rows
                .iter()
                .filter(|r| r.sys == sys && r.work == work)
                .filter_map(|r| {
                    let ci = clients.iter().position(|&c| c == r.clients)?;
                    let x0 = ci as f64 + 0.1 + k as f64 * w;
                    Some(Rectangle::new(
                        [(x0, lo), (x0 + w * 0.9, value(r).max(lo))],
                        color.filled(),
                    ))
                })
                .collect();
            chart
                .draw_series(bars)?
                .label(what(sys, work))
                .legend(move |(x, y)| {
                    Rectangle::new([(x, y - 6), (x + 12, y + 6)], color.filled())
                });
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperLeft)
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .label_font(("sans-serif", 13))
            .draw()?;
    }
    Ok(())
}
