//! `sluice key generate|hash`: API key secrets and the hashes the config file stores.

use std::io::Read;

use anyhow::{Context, bail};
use clap::Subcommand;
use rand::RngCore;
use sluice_server::auth::hash_secret;

/// Key management.
#[derive(Debug, Subcommand)]
pub enum KeyCommand {
    /// Print a new random secret and its SHA-256 for the config file.
    Generate,
    /// Read a secret from standard input and print its SHA-256 for the config file.
    Hash,
}

/// Runs a key subcommand.
pub fn run(cmd: KeyCommand) -> anyhow::Result<()> {
    match cmd {
        KeyCommand::Generate => {
            let mut raw = [0u8; 32];
            rand::rngs::OsRng.fill_bytes(&mut raw);
            // The prefix lets secret scanners recognise a leaked key.
            let secret = format!("sluice_{}", hex::encode(raw));
            println!("secret: {secret}");
            println!("sha256: {}", hash_secret(&secret));
            eprintln!(
                "Give the secret to the client (Authorization: Bearer <secret>) and put the sha256 \
                 in a [[keys]] entry of the config file; the secret is not shown again."
            );
        }
        KeyCommand::Hash => {
            let mut input = String::new();
            std::io::stdin()
                .read_to_string(&mut input)
                .context("reading the secret from standard input")?;
            let secret = input.trim_end_matches(['\r', '\n']);
            if secret.is_empty() {
                bail!("no secret on standard input; pipe one in, or run `sluice key generate`");
            }
            println!("{}", hash_secret(secret));
        }
    }
    Ok(())
}
