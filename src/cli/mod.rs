//! The `leasehold` command's parts: `serve`, the client subcommands,
//! `run`, the data dir's tools, and the health probe.

use std::time::Duration;

/// `println!` for the commands' output: a reader that has gone (`leasehold
/// status | head -1`) ends the command quietly, with status 0, instead of
/// the panic `println!` makes of a closed pipe.
macro_rules! outln {
    ($($arg:tt)*) => {
        $crate::cli::out_line(format_args!($($arg)*))
    };
}

/// Writes one line to standard output; see [`outln`].
pub(crate) fn out_line(line: std::fmt::Arguments<'_>) {
    use std::io::Write as _;
    let mut out = std::io::stdout().lock();
    if let Err(e) = writeln!(out, "{line}").and_then(|()| out.flush()) {
        if e.kind() == std::io::ErrorKind::BrokenPipe {
            std::process::exit(0);
        }
        eprintln!("error: cannot write to standard output: {e}");
        std::process::exit(1);
    }
}

pub mod client;
pub mod data;
pub mod guard;
pub mod health;
pub mod run;
pub mod serve;

/// Parses `1500ms`, `10s`, `2m`, `1h`, or a combination like `1m30s`
/// (humantime's syntax), naming the input and the form expected.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    humantime::parse_duration(s.trim())
        .map_err(|e| format!("{s:?}: {e}; expected a duration like 500ms, 10s, 2m, 1h or 1m30s"))
}

#[cfg(test)]
mod tests {
    use super::parse_duration;
    use std::time::Duration;

    #[test]
    fn durations_parse() {
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("1m30s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_duration("0"), Ok(Duration::ZERO));
        assert_eq!(parse_duration("1h"), Ok(Duration::from_secs(3600)));
        assert!(parse_duration("10").is_err());
        assert!(parse_duration("5x")
            .unwrap_err()
            .contains("unknown time unit"));
        assert!(parse_duration("").is_err());
        // No silent wrap-around on a huge number.
        assert!(parse_duration("99999999999999999999h").is_err());
        assert!(parse_duration("5124095576030432h").is_err());
    }
}
