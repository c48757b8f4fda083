//! `sluice`: the broker (`sluice serve`) and its command-line tools.
//!
//! Module layout: `serve` runs the broker, `config` reads the TOML file, `key` manages API
//! keys, `client` holds the subcommands that talk to a running broker over HTTP, `bench`
//! and `drill` measure and exercise one.

mod bench;
mod client;
mod config;
mod drill;
mod key;
mod serve;
mod tls_args;

use std::process::ExitCode;

// jemalloc, not the system allocator: with 10 million messages queued, glibc's malloc
// spent a sixth of the broker's time searching its free lists and throughput at batch 100
// fell to 0.46x of that with 1 million queued; with jemalloc it stays level (1.07x).
// See docs/benchmarks.md, "Sluice alone under a backlog".
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

use clap::{Parser, Subcommand};

/// A durable task queue for work that fails.
#[derive(Debug, Parser)]
#[command(name = "sluice", version, about, long_about = None)]
#[command(after_long_help = client::EXIT_CODES_HELP)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the broker.
    Serve(serve::ServeArgs),
    /// Manage API keys.
    #[command(subcommand)]
    Key(key::KeyCommand),
    /// Measure a running broker: throughput and end-to-end latency.
    Bench(bench::BenchArgs),
    /// Run a failure drill: a scripted outage of a rate-limited upstream, with pass/fail
    /// criteria and a report.
    Drill(drill::DrillArgs),
    /// Print a shell completion script for `sluice`: `sluice completions bash >
    /// /etc/bash_completion.d/sluice`, `sluice completions zsh > "${fpath[1]}/_sluice"`,
    /// `sluice completions fish > ~/.config/fish/completions/sluice.fish`.
    Completions {
        /// The shell.
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// The client subcommands (`queue`, `send`, `receive`, `ack`, `nack`, `reject`,
    /// `message`, `stats`, `task`, `dlq`, `redrive`, `audit`, `schedule`), implemented in
    /// `client/` as HTTP clients sharing `--url`/`SLUICE_URL`, `--token`/`SLUICE_TOKEN` and
    /// `--json`.
    #[command(flatten)]
    Client(client::Command),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    if matches!(
        cli.command,
        Command::Client(_) | Command::Key(_) | Command::Completions { .. }
    ) {
        end_quietly_when_the_reader_leaves();
    }
    let result = match cli.command {
        Command::Serve(args) => return serve::run(args),
        Command::Key(cmd) => key::run(cmd),
        Command::Bench(args) => bench::run(args),
        Command::Client(cmd) => return client::run(cmd),
        Command::Drill(args) => return drill::run(args),
        Command::Completions { shell } => {
            let mut cmd = <Cli as clap::CommandFactory>::command();
            clap_complete::generate(shell, &mut cmd, "sluice", &mut std::io::stdout());
            Ok(())
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("sluice: error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// Commands that print end quietly when their reader goes away (`sluice queue show q | head
/// -1`), with the status of a process that SIGPIPE ended (141), as Unix filters do. Rust
/// ignores SIGPIPE so that a write to a closed pipe fails instead, and `println!` turns that
/// failure into a panic: this hook ends such a panic as the signal would have, and leaves
/// every other panic to the default hook. Not for `serve` and the commands that run a broker
/// inside, whose panics must all be reported.
fn end_quietly_when_the_reader_leaves() {
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let message = info
            .payload()
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| info.payload().downcast_ref::<&str>().copied())
            .unwrap_or("");
        if message.starts_with("failed printing to stdout") && message.contains("Broken pipe") {
            std::process::exit(141);
        }
        default(info);
    }));
}
