//! Printing: aligned tables for people, the server's JSON for scripts (`--json`).

use serde::Serialize;
use sluice_client::DecodedBody;

use super::Failure;

/// Prints `value` as pretty JSON on stdout.
pub fn json<T: Serialize + ?Sized>(value: &T) -> Result<(), Failure> {
    let text = serde_json::to_string_pretty(value)
        .map_err(|e| Failure::Other(format!("cannot print the answer as JSON: {e}")))?;
    println!("{text}");
    Ok(())
}

/// A table with a header row, columns padded to their widest cell.
pub struct Table {
    header: Vec<String>,
    rows: Vec<Vec<String>>,
}

impl Table {
    /// A table with these column names.
    pub fn new(header: &[&str]) -> Self {
        Table {
            header: header.iter().map(|h| (*h).to_owned()).collect(),
            rows: Vec::new(),
        }
    }

    /// Adds a row.
    pub fn row(&mut self, cells: Vec<String>) {
        self.rows.push(cells);
    }

    /// Prints it on stdout.
    pub fn print(&self) {
        print!("{}", self.render());
    }

    /// The table as text, a line per row.
    pub fn render(&self) -> String {
        let cols = self.header.len();
        let mut widths: Vec<usize> = self.header.iter().map(|h| h.chars().count()).collect();
        for r in &self.rows {
            for (i, c) in r.iter().enumerate().take(cols) {
                widths[i] = widths[i].max(c.chars().count());
            }
        }
        let mut out = String::new();
        for r in std::iter::once(&self.header).chain(&self.rows) {
            let mut line = String::new();
            for (i, c) in r.iter().enumerate().take(cols) {
                if i + 1 == cols {
                    line.push_str(c);
                } else {
                    let pad = widths[i] - c.chars().count();
                    line.push_str(c);
                    line.push_str(&" ".repeat(pad + 2));
                }
            }
            out.push_str(line.trim_end());
            out.push('\n');
        }
        out
    }
}

/// Prints `field  value` lines, the fields aligned.
pub fn details(pairs: &[(&str, String)]) {
    let width = pairs.iter().map(|(k, _)| k.len()).max().unwrap_or(0);
    for (k, v) in pairs {
        println!("{k:<width$}  {v}");
    }
}

/// A body as one line of text: JSON and text as they are, bytes as base64.
pub fn body_text(body: &DecodedBody) -> String {
    match body {
        DecodedBody::Json(s) | DecodedBody::Text(s) => s.replace('\n', "\\n"),
        DecodedBody::Bytes(b) => {
            use base64::Engine as _;
            format!(
                "base64:{}",
                base64::engine::general_purpose::STANDARD.encode(b)
            )
        }
    }
}

/// Cuts `s` to `max` characters, marking the cut.
pub fn truncate(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        return s.to_owned();
    }
    let mut t: String = s.chars().take(max.saturating_sub(1)).collect();
    t.push('…');
    t
}

/// `-` for an absent value.
pub fn or_dash(v: Option<impl ToString>) -> String {
    v.map(|v| v.to_string()).unwrap_or_else(|| "-".to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_align() {
        let mut t = Table::new(&["NAME", "N"]);
        t.row(vec!["a-long-name".into(), "1".into()]);
        t.row(vec!["b".into(), "22".into()]);
        assert_eq!(
            t.render(),
            "NAME         N\na-long-name  1\nb            22\n"
        );
    }
}
