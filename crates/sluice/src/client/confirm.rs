//! Confirmation of destructive commands (`queue delete`, `queue purge`): on a terminal the
//! command asks, naming what would be lost; in a script it needs `--yes`.

use std::io::{BufRead, IsTerminal, Write};

use super::Failure;

/// The exit code of a destructive command run without `--yes` and without a terminal to
/// ask on: a usage error.
pub const NEEDS_YES: u8 = 2;

/// A count with thousands separators: `1,204`.
pub fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// `1 message`, `1,204 messages`.
pub fn messages(n: u64) -> String {
    if n == 1 {
        "1 message".to_owned()
    } else {
        format!("{} messages", thousands(n))
    }
}

/// Goes ahead when `yes`, or when the person at the terminal answers `y` to `question`.
/// Without a terminal (stdin and stdout) and without `yes`, fails with exit code 2 and a
/// message that says what would be lost (`what`) and to pass `--yes`.
///
/// # Errors
/// [`Failure::Code`] when not confirmed; nothing has been done then.
pub fn confirm(yes: bool, question: &str, what: &str) -> Result<(), Failure> {
    if yes {
        return Ok(());
    }
    if !(std::io::stdin().is_terminal() && std::io::stdout().is_terminal()) {
        return Err(Failure::Code(
            NEEDS_YES,
            format!("{what}; pass --yes to go ahead without a prompt (nothing was changed)"),
        ));
    }
    let mut out = std::io::stdout();
    let _ = write!(out, "{question} [y/N] ");
    let _ = out.flush();
    let mut answer = String::new();
    std::io::stdin()
        .lock()
        .read_line(&mut answer)
        .map_err(|e| Failure::Other(format!("could not read the answer: {e}")))?;
    if matches!(answer.trim().to_ascii_lowercase().as_str(), "y" | "yes") {
        Ok(())
    } else {
        Err(Failure::Code(
            1,
            "not confirmed; nothing was changed".to_owned(),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_read_with_separators() {
        assert_eq!(thousands(0), "0");
        assert_eq!(thousands(999), "999");
        assert_eq!(thousands(1204), "1,204");
        assert_eq!(thousands(1_234_567), "1,234,567");
        assert_eq!(messages(1), "1 message");
        assert_eq!(messages(1204), "1,204 messages");
    }
}
