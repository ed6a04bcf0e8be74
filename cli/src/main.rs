//! The `ratekeeper` command: `demo` (the README's first command); operator commands come later.

mod args;
mod demo;

use std::process::ExitCode;

use args::Command;

fn main() -> ExitCode {
    let command = match args::parse(std::env::args().skip(1)) {
        Ok(command) => command,
        Err(e) => {
            eprintln!("error: {}\n\nRun `{}` for usage.", e.message, e.help);
            return ExitCode::from(2);
        }
    };
    match command {
        Command::Help => print!("{}", args::USAGE),
        Command::Version => println!("ratekeeper {}", env!("CARGO_PKG_VERSION")),
        Command::DemoHelp => print!("{}", args::DEMO_USAGE),
        Command::Demo(config) => {
            if let Err(e) = demo::run(&config) {
                eprintln!("error: {e}");
                return ExitCode::FAILURE;
            }
        }
    }
    ExitCode::SUCCESS
}
