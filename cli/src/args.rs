//! Command-line parsing for the `ratekeeper` binary.
//!
//! Hand-written rather than `clap`: there is one command with a handful of numeric flags, and a
//! dependency-free parser keeps the CLI quick to build in the shared workspace.

use std::time::Duration;

use crate::demo::Config;

/// What the command line asks for.
#[derive(Debug, PartialEq)]
pub enum Command {
    /// Print the top-level usage.
    Help,
    /// Print the version.
    Version,
    /// Print the usage of `demo`.
    DemoHelp,
    /// Run the demo.
    Demo(Config),
}

/// A command line that cannot be understood; printed with a hint and exit code 2.
#[derive(Debug, PartialEq)]
pub struct UsageError {
    /// What is wrong, e.g. "unknown flag `--foo`".
    pub message: String,
    /// The help command that would have helped (`ratekeeper --help` or `ratekeeper demo --help`).
    pub help: &'static str,
}

pub const USAGE: &str = "\
ratekeeper - distributed rate limiting

Usage: ratekeeper <COMMAND> [OPTIONS]

Commands:
  demo    Ingest records into a simulated throttled service, naively and through a
          ratekeeper limiter, and compare the traffic (the Azure rate limiting pattern)
  help    Print this message

Options:
  -h, --help       Print this message
  -V, --version    Print the version

Run `ratekeeper demo --help` for the demo's options.
";

pub const DEMO_USAGE: &str = "\
Ingest records into a simulated throttled service twice and compare the traffic.

The service accepts CAPACITY units per fixed window (aligned to the wall clock) and answers
\"throttled, retry after T\" (like HTTP 429 Retry-After) once a window is used up. The naive
client sends everything and retries what is refused; the second client paces its sends with one
ratekeeper token bucket shared by all workers (memory backend).

Usage: ratekeeper demo [OPTIONS]

Options:
      --records N       Records to ingest                          [default: 10000]
      --workers N       Concurrent workers (tokio tasks)            [default: 8]
      --capacity UNITS  Units the service accepts per window        [default: 20000]
      --cost UNITS      Units one record costs                      [default: 10]
      --window-ms MS    Length of the service's throttling window   [default: 1000]
  -h, --help            Print this message
";

/// Parses the arguments after the program name.
pub fn parse<I: IntoIterator<Item = String>>(args: I) -> Result<Command, UsageError> {
    let mut args = args.into_iter();
    let top = |message: String| UsageError { message, help: "ratekeeper --help" };
    match args.next().as_deref() {
        None => Err(top("no command given".into())),
        Some("-h" | "--help" | "help") => Ok(Command::Help),
        Some("-V" | "--version") => Ok(Command::Version),
        Some("demo") => parse_demo(args),
        Some(flag) if flag.starts_with('-') => Err(top(format!("unknown flag `{flag}`"))),
        Some(other) => Err(top(format!("unknown command `{other}`"))),
    }
}

fn parse_demo(mut args: impl Iterator<Item = String>) -> Result<Command, UsageError> {
    let error = |message: String| UsageError { message, help: "ratekeeper demo --help" };
    let mut config = Config::default();
    while let Some(arg) = args.next() {
        if arg == "-h" || arg == "--help" {
            return Ok(Command::DemoHelp);
        }
        // Accept both `--flag value` and `--flag=value`.
        let (flag, inline) = match arg.split_once('=') {
            Some((flag, value)) if flag.starts_with("--") => (flag.to_owned(), Some(value.to_owned())),
            _ => (arg.clone(), None),
        };
        if !matches!(flag.as_str(), "--records" | "--workers" | "--capacity" | "--cost" | "--window-ms") {
            return Err(error(if flag.starts_with('-') {
                format!("unknown flag `{flag}` for `ratekeeper demo`")
            } else {
                format!("unexpected argument `{arg}` for `ratekeeper demo`")
            }));
        }
        let value = match inline.or_else(|| args.next()) {
            Some(value) => value,
            None => return Err(error(format!("`{flag}` needs a value"))),
        };
        let number: u64 = value
            .replace('_', "")
            .parse()
            .map_err(|_| error(format!("`{flag}` expects a whole number, got `{value}`")))?;
        match flag.as_str() {
            "--records" => config.records = number,
            "--workers" => config.workers = number as usize,
            "--capacity" => config.capacity = number,
            "--cost" => config.cost = number,
            _ => config.window = Duration::from_millis(number),
        }
    }
    config.validate().map_err(error)?;
    Ok(Command::Demo(config))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_str(line: &str) -> Result<Command, UsageError> {
        parse(line.split_whitespace().map(str::to_owned))
    }

    #[test]
    fn demo_defaults_are_the_seed() {
        let Ok(Command::Demo(config)) = parse_str("demo") else { panic!("demo did not parse") };
        assert_eq!(config, Config::default());
        assert_eq!((config.records, config.capacity, config.cost), (10_000, 20_000, 10));
    }

    #[test]
    fn demo_flags_in_both_spellings() {
        let Ok(Command::Demo(config)) =
            parse_str("demo --records 500 --workers=3 --capacity 1_000 --cost=5 --window-ms 200")
        else {
            panic!("flags did not parse")
        };
        assert_eq!((config.records, config.workers, config.capacity, config.cost), (500, 3, 1000, 5));
        assert_eq!(config.window, Duration::from_millis(200));
    }

    #[test]
    fn help_and_version() {
        assert_eq!(parse_str("--help"), Ok(Command::Help));
        assert_eq!(parse_str("help"), Ok(Command::Help));
        assert_eq!(parse_str("-V"), Ok(Command::Version));
        assert_eq!(parse_str("demo --records 5 --help"), Ok(Command::DemoHelp));
    }

    #[test]
    fn bad_command_lines_are_usage_errors() {
        for line in [
            "",
            "frobnicate",
            "--frob",
            "demo --frob 1",
            "demo extra",
            "demo --records",
            "demo --records ten",
            "demo --workers 0",
            "demo --cost 30 --capacity 20",
        ] {
            let err = parse_str(line).expect_err(line);
            assert!(!err.message.is_empty(), "{line}");
        }
        assert_eq!(parse_str("demo --frob").unwrap_err().help, "ratekeeper demo --help");
        assert_eq!(parse_str("frobnicate").unwrap_err().help, "ratekeeper --help");
    }
}
