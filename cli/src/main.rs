//! The `ratekeeper` command: `demo` (the README's first command) and the operator's tools for
//! the limiters of a fleet (`limits`, `inspect`, `set`, `unset`, `reset`, `resume`, `block`,
//! `unblock`, `run`, `serve`).

mod cli;
mod demo;
mod demo_fleet;
mod ops;
mod run;
mod serve;
mod serve_guard;
mod words;

use std::process::ExitCode;
use std::time::SystemTime;

use clap::{CommandFactory, Parser};
use ratekeeper::{block_on, Backend};

use cli::{Cli, Command};
use ops::Failure;

fn main() -> ExitCode {
    // clap prints usage errors and exits with 2, and --help/--version with 0.
    let cli = Cli::parse();
    // The registry names this process's language; the CLI's own limiters say what they are.
    ratekeeper::set_client_language("ratekeeper-cli");
    match execute(cli) {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

fn execute(cli: Cli) -> Result<u8, Failure> {
    match &cli.command {
        Command::Demo(args) => {
            let config = demo::Config::from(args);
            if let Err(message) = config.validate() {
                Cli::command().error(clap::error::ErrorKind::ValueValidation, message).exit();
            }
            if let Some(service) = args.fleet_worker {
                let backend = ops::connect_redis(&cli.backend)?;
                demo_fleet::work(&config, args, &backend, service)?;
                return Ok(0);
            }
            if let Some(processes) = args.processes {
                if let Err(message) = demo_fleet::run(&config, args, &cli.backend, processes) {
                    Cli::command().error(clap::error::ErrorKind::ValueValidation, message).exit();
                }
                return Ok(0);
            }
            // The README's first command stays on memory unless a flag says otherwise: a
            // RATEKEEPER_REDIS_URL set for the operator commands does not move it.
            let explicit =
                cli.backend.redis.is_some() || !cli.backend.cluster.is_empty() || !cli.backend.sentinel.is_empty();
            let backend = if explicit { ops::connect(&cli.backend)? } else { None };
            let backend = backend.unwrap_or_else(Backend::memory);
            demo::run(&config, &backend)?;
        }
        Command::Limits { json } => {
            let backend = ops::connect_redis(&cli.backend)?;
            let views = block_on(ops::limiters(&backend))?;
            if *json {
                println!("{}", serde_json::to_string_pretty(&views).expect("views serialize"));
            } else {
                print!("{}", ops::table(&views, SystemTime::now()));
            }
        }
        Command::Inspect { name, key, json } => {
            let backend = ops::connect_redis(&cli.backend)?;
            let view = block_on(ops::inspect(&backend, name, key.get()))?;
            if *json {
                println!("{}", serde_json::to_string_pretty(&view).expect("views serialize"));
            } else {
                print!("{}", ops::inspect_text(&view));
            }
        }
        Command::Set { name, spec, key } => {
            let backend = ops::connect_redis(&cli.backend)?;
            backend.set_limit_json_blocking(name, spec, key.get())?;
            println!("{} now decides with {spec}", target(name, key.get()));
        }
        Command::Unset { name, key } => {
            let backend = ops::connect_redis(&cli.backend)?;
            backend.clear_limit_blocking(name, key.get())?;
            println!("{} is back to its own spec", target(name, key.get()));
        }
        Command::Reset { name, key } => {
            let backend = ops::connect_redis(&cli.backend)?;
            block_on(ops::reset(&backend, name, key.get()))?;
            println!("{} is reset", target(name, key.get()));
        }
        Command::Resume { name, key } => {
            let backend = ops::connect_redis(&cli.backend)?;
            let was_paused = block_on(ops::resume(&backend, name, key.get()))?;
            let who = target(name, key.get());
            println!("{who} {}", if was_paused { "is resumed" } else { "was not paused" });
        }
        Command::Block { name, seconds, key } => {
            let backend = ops::connect_redis(&cli.backend)?;
            let in_effect = block_on(ops::block(&backend, name, key.get(), *seconds))?;
            println!("{} is blocked for {}s", target(name, key.get()), in_effect.as_secs_f64());
        }
        Command::Unblock { name, key } => {
            let backend = ops::connect_redis(&cli.backend)?;
            let was_blocked = block_on(ops::unblock(&backend, name, key.get()))?;
            let who = target(name, key.get());
            println!("{who} {}", if was_blocked { "is unblocked" } else { "was not blocked" });
        }
        Command::Forget { name } => {
            let backend = ops::connect_redis(&cli.backend)?;
            if backend.forget_limiter_blocking(name)? {
                println!("limiter {name:?} is forgotten (a process still using it registers it again within a minute)");
            } else {
                println!("limiter {name:?} was not in the registry");
            }
        }
        Command::Run(args) => {
            let backend = ops::connect_redis(&cli.backend)?;
            return block_on(run::run(&backend, args));
        }
        Command::Serve(args) => {
            let backend = ops::connect_redis(&cli.backend)?;
            serve::serve(backend, args)?;
        }
        Command::Completions { shell } => {
            clap_complete::generate(*shell, &mut Cli::command(), "ratekeeper", &mut std::io::stdout());
        }
        Command::ManPages { dir } => {
            let written = std::fs::create_dir_all(dir).and_then(|()| clap_mangen::generate_to(Cli::command(), dir));
            written.map_err(|e| Failure::Io(format!("cannot write the man pages into {}: {e}", dir.display())))?;
        }
    }
    Ok(0)
}

/// "limiter \"api\"" or "key \"tenant-7\" of limiter \"api\"", for confirmations.
fn target(name: &str, key: Option<&str>) -> String {
    match key {
        Some(key) => format!("key {key:?} of limiter {name:?}"),
        None => format!("limiter {name:?}"),
    }
}
