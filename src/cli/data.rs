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
        /// The backup file to write (written whole into a file with no
        /// name, then linked into place: an interrupted backup, even a
        /// killed one, leaves no file).
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
                outln!("{}", report.to_string().trim_end_matches('\n'));
                // The store sees PEM blocks; whether they are keys, the
                // server's own reading says.
                let keys_ok = match report.signing_keys {
                    0 => true,
                    _ => match leasehold::proofs::read_data_dir_keys(&data_dir) {
                        Ok(kids) => {
                            outln!("signing key ids   {}", kids.join(", "));
                            true
                        }
                        Err(e) => {
                            outln!("signing keys      DAMAGED: {e}");
                            false
                        }
                    },
                };
                Ok(if report.inspection.problems.is_empty() && keys_ok {
                    ExitCode::SUCCESS
                } else {
                    ExitCode::FAILURE
                })
            }
            DataCommand::Backup { conn, out } => {
                let client = crate::cli::client::connect(&conn).await?;
                let mut tmp = Unnamed::create(&out)?;
                let mut f = tokio::fs::File::from_std(tmp.file.try_clone()?);
                let n = client.backup_to(&mut f).await?;
                f.sync_all().await?;
                drop(f);
                // Verify before the file takes its name.
                let b = repair::read_backup(&tmp.path())?;
                tmp.link(&out)?;
                outln!(
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

/// A file being written that takes its name only when it is whole: an
/// `O_TMPFILE` (no name at all until linked, so that even a SIGKILL
/// leaves nothing behind) in the target's directory, or, where the file
/// system has no `O_TMPFILE`, `NAME.partial`, removed on drop.
struct Unnamed {
    file: std::fs::File,
    /// The `.partial` name, when the file system had no `O_TMPFILE`.
    partial: Option<PathBuf>,
}

impl Unnamed {
    fn create(out: &std::path::Path) -> anyhow::Result<Unnamed> {
        use std::os::unix::fs::OpenOptionsExt as _;
        let dir = match out.parent() {
            Some(p) if !p.as_os_str().is_empty() => p.to_owned(),
            _ => PathBuf::from("."),
        };
        match std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .mode(0o600)
            .custom_flags(libc::O_TMPFILE)
            .open(&dir)
        {
            Ok(file) => Ok(Unnamed {
                file,
                partial: None,
            }),
            Err(e)
                if matches!(
                    e.raw_os_error(),
                    Some(libc::EOPNOTSUPP | libc::EISDIR | libc::EINVAL)
                ) =>
            {
                let partial = out.with_extension("partial");
                // A backup holds the signing keys: readable by its user only.
                let file = std::fs::OpenOptions::new()
                    .read(true)
                    .write(true)
                    .create(true)
                    .truncate(true)
                    .mode(0o600)
                    .open(&partial)
                    .with_context(|| format!("cannot create {}", partial.display()))?;
                Ok(Unnamed {
                    file,
                    partial: Some(partial),
                })
            }
            Err(e) => Err(e).with_context(|| format!("cannot create a file in {}", dir.display())),
        }
    }

    /// A path that reads the file.
    fn path(&self) -> PathBuf {
        use std::os::fd::AsRawFd as _;
        match &self.partial {
            Some(p) => p.clone(),
            None => PathBuf::from(format!("/proc/self/fd/{}", self.file.as_raw_fd())),
        }
    }

    /// Gives the file the name `out`, replacing what was there.
    fn link(&mut self, out: &std::path::Path) -> anyhow::Result<()> {
        if let Some(p) = self.partial.take() {
            return std::fs::rename(&p, out)
                .with_context(|| format!("cannot rename {} to {}", p.display(), out.display()));
        }
        // linkat takes no existing name: link beside it, then rename over.
        let beside = out.with_extension(format!("linking-{}", std::process::id()));
        let from = std::ffi::CString::new(self.path().into_os_string().into_encoded_bytes())?;
        let to = std::ffi::CString::new(beside.clone().into_os_string().into_encoded_bytes())?;
        // SAFETY: both are valid NUL-terminated paths for the call's
        // duration; AT_FDCWD makes them relative to the working directory.
        let r = unsafe {
            libc::linkat(
                libc::AT_FDCWD,
                from.as_ptr(),
                libc::AT_FDCWD,
                to.as_ptr(),
                libc::AT_SYMLINK_FOLLOW,
            )
        };
        if r != 0 {
            return Err(std::io::Error::last_os_error())
                .with_context(|| format!("cannot link the backup as {}", beside.display()));
        }
        std::fs::rename(&beside, out).with_context(|| {
            let _ = std::fs::remove_file(&beside);
            format!("cannot rename {} to {}", beside.display(), out.display())
        })?;
        // The name itself, durable.
        let dir = match out.parent() {
            Some(p) if !p.as_os_str().is_empty() => p,
            _ => std::path::Path::new("."),
        };
        std::fs::File::open(dir)
            .and_then(|d| d.sync_all())
            .with_context(|| format!("cannot sync {}", dir.display()))
    }
}

impl Drop for Unnamed {
    fn drop(&mut self) {
        if let Some(p) = &self.partial {
            let _ = std::fs::remove_file(p);
        }
    }
}

fn print_outcome(what: &str, o: &repair::Outcome) {
    outln!(
        "{what}: {} job(s), {} value record(s); every lease released",
        o.jobs,
        o.values
    );
    outln!(
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
        outln!("the previous files are in {}", k.display());
    }
    for l in &o.lost {
        outln!("lost or unreadable: {l}");
    }
}
