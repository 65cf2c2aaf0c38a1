//! The data dir's tools: check, backup, restore, recover
//! (`leasehold_store::repair`).

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context as _;
use clap::Subcommand;

use leasehold::store::repair;

use crate::cli::client::Conn;

/// The data dir's tools.
#[derive(Subcommand)]
pub enum DataCommand {
    /// Check a stopped server's data dir: read every file, print what it
    /// holds and every problem. Exits 0 only when it is healthy. Writes
    /// nothing: it reads a copy.
    Check {
        /// The data dir.
        #[arg(long, env = "LEASEHOLD_DATA_DIR")]
        data_dir: PathBuf,
    },
    /// Save a consistent backup of a running server's durable state.
    Backup {
        #[command(flatten)]
        conn: Conn,
        /// The backup file to write (written whole, then renamed into
        /// place: an interrupted backup leaves no file).
        #[arg(long)]
        out: PathBuf,
    },
    /// Replace a stopped server's data dir with a backup. Every lease is
    /// released and the token floor raised above every token that may have
    /// been issued since the backup; the old files are kept in a
    /// `replaced-<time>` folder inside the data dir.
    Restore {
        /// The data dir (created if missing).
        #[arg(long, env = "LEASEHOLD_DATA_DIR")]
        data_dir: PathBuf,
        /// The backup file.
        file: PathBuf,
        /// The token floor, if you know better than the rule (never below
        /// the highest token found).
        #[arg(long)]
        floor: Option<u64>,
    },
    /// Keep what a damaged data dir still holds: every readable record in a
    /// new store, every lease released, the token floor raised; the damaged
    /// files are kept in a `damaged-<time>` folder inside it.
    Recover {
        /// The data dir.
        #[arg(long, env = "LEASEHOLD_DATA_DIR")]
        data_dir: PathBuf,
        /// The token floor, if you know better than the rule (never below
        /// the highest token found).
        #[arg(long)]
        floor: Option<u64>,
    },
}

impl DataCommand {
    /// Runs the subcommand.
    pub async fn run(self) -> anyhow::Result<ExitCode> {
        match self {
            DataCommand::Check { data_dir } => {
                let report = repair::check(&data_dir)?;
                print!("{report}");
                Ok(if report.inspection.problems.is_empty() {
                    ExitCode::SUCCESS
                } else {
                    ExitCode::FAILURE
                })
            }
            DataCommand::Backup { conn, out } => {
                let client = crate::cli::client::connect(&conn).await?;
                let tmp = out.with_extension("partial");
                let mut f = tokio::fs::File::create(&tmp)
                    .await
                    .with_context(|| format!("cannot create {}", tmp.display()))?;
                let n = match client.backup_to(&mut f).await {
                    Ok(n) => n,
                    Err(e) => {
                        let _ = tokio::fs::remove_file(&tmp).await;
                        return Err(e.into());
                    }
                };
                f.sync_all().await?;
                drop(f);
                // Verify before the file takes its name.
                let b = repair::read_backup(&tmp)?;
                tokio::fs::rename(&tmp, &out).await?;
                println!(
                    "backup {}: {n} bytes, {} records, highest token {}",
                    out.display(),
                    b.records.len(),
                    b.max_token
                );
                Ok(ExitCode::SUCCESS)
            }
            DataCommand::Restore {
                data_dir,
                file,
                floor,
            } => {
                let o = repair::restore(&data_dir, &file, floor)?;
                print_outcome("restored", &o);
                Ok(ExitCode::SUCCESS)
            }
            DataCommand::Recover { data_dir, floor } => {
                let o = repair::recover(&data_dir, floor)?;
                print_outcome("recovered", &o);
                Ok(ExitCode::SUCCESS)
            }
        }
    }
}

fn print_outcome(what: &str, o: &repair::Outcome) {
    println!(
        "{what}: {} job(s), {} value record(s); every lease released",
        o.jobs, o.values
    );
    println!(
        "highest token found {}{}; every next grant is above {}",
        o.highest,
        if o.proven {
            " (proven: manifest and log intact)"
        } else {
            " (not provable: the floor adds a margin of 2^32)"
        },
        o.floor
    );
    if let Some(k) = &o.kept {
        println!("the previous files are in {}", k.display());
    }
    for l in &o.lost {
        println!("lost or unreadable: {l}");
    }
}
