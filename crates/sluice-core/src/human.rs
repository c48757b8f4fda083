//! Values as people type them: durations (`500ms`, `30s`, `5m`, `2h`, `4d`, `1h30m`), rates
//! (`100/min`, `10/s`), sizes (`4096`, `256KiB`) and points in time, written either as RFC 3339
//! or as how long ago (`10m` = ten minutes ago). The command line, the API's query parameters
//! and the console (its `human.js`, held to the same table of cases in
//! `tests/human_values.json`) read them alike.

use std::time::Duration;

use crate::config::RateLimit;
use crate::error::StoreError;
use crate::time::Timestamp;

/// Parses a duration: one or more `<number><unit>` parts (`ms`, `s`, `m`, `h`, `d`), e.g.
/// `500ms`, `30s`, `1.5s`, `1h30m`; a bare number is seconds.
///
/// # Errors
/// A message saying how to write a duration.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let text = s.trim();
    let bad =
        || format!("\"{s}\" is not a duration; write it like 500ms, 30s, 5m, 2h, 4d or 1h30m");
    if text.is_empty() {
        return Err(bad());
    }
    if let Ok(secs) = text.parse::<f64>() {
        return secs_to_duration(secs).ok_or_else(bad);
    }
    let mut total = 0f64;
    let mut rest = text;
    while !rest.is_empty() {
        let num_len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .ok_or_else(bad)?;
        if num_len == 0 {
            return Err(bad());
        }
        let value: f64 = rest[..num_len].parse().map_err(|_| bad())?;
        rest = &rest[num_len..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let scale = match rest[..unit_len].trim() {
            "ms" => 0.001,
            "s" | "sec" | "secs" => 1.0,
            "m" | "min" | "mins" => 60.0,
            "h" | "hr" | "hrs" => 3600.0,
            "d" | "day" | "days" => 86_400.0,
            _ => return Err(bad()),
        };
        total += value * scale;
        rest = &rest[unit_len..];
    }
    secs_to_duration(total).ok_or_else(bad)
}

/// Formats milliseconds compactly: `500ms`, `30s`, `1.5s`, `15m`, `4d`, `1h30m`.
pub fn fmt_ms(ms: u64) -> String {
    if ms == 0 {
        return "0s".to_owned();
    }
    if !ms.is_multiple_of(1000) {
        return if ms < 60_000 {
            format!("{}s", ms as f64 / 1000.0)
        } else {
            format!("{ms}ms")
        };
    }
    let mut secs = ms / 1000;
    let mut out = String::new();
    for (unit, size) in [("d", 86_400), ("h", 3600), ("m", 60), ("s", 1)] {
        if secs >= size {
            out.push_str(&format!("{}{unit}", secs / size));
            secs %= size;
        }
    }
    out
}

/// Formats a duration compactly, as [`fmt_ms`] does (whole milliseconds).
pub fn fmt_duration(d: Duration) -> String {
    fmt_ms(u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// Parses a rate: `<count>/<period>`, where the period is a unit (`s`, `sec`, `second`, `m`,
/// `min`, `minute`, `h`, `hr`, `hour`, `d`, `day`) or a duration (`60s`, `500ms`, a bare
/// number of seconds): `100/min`, `10/s`, `1000/60s`.
///
/// # Errors
/// A message saying how to write a rate.
pub fn parse_rate(s: &str) -> Result<RateLimit, String> {
    let bad = || format!("\"{s}\" is not a rate; write it like 100/min, 10/s, 5/h or 1000/60s");
    let (count, period) = s.trim().split_once('/').ok_or_else(bad)?;
    let limit: u32 = count.trim().parse().map_err(|_| bad())?;
    let period = match period.trim() {
        "s" | "sec" | "second" => Duration::from_secs(1),
        "m" | "min" | "minute" => Duration::from_secs(60),
        "h" | "hr" | "hour" => Duration::from_secs(3600),
        "d" | "day" => Duration::from_secs(86_400),
        other => parse_duration(other).map_err(|_| bad())?,
    };
    Ok(RateLimit::new(limit, period))
}

/// Formats a rate back: `100/min`, `10/s`, `7/1.5s`.
pub fn fmt_rate(rate: &RateLimit) -> String {
    let period = match rate.period.as_millis() {
        1000 => "s".to_owned(),
        60_000 => "min".to_owned(),
        3_600_000 => "h".to_owned(),
        86_400_000 => "d".to_owned(),
        _ => fmt_duration(rate.period),
    };
    format!("{}/{period}", rate.limit)
}

/// Parses a size in bytes, at most 4 GiB: a number with an optional unit, decimal (`kB`,
/// `MB`, `GB`) or binary (`KiB`/`K`, `MiB`/`M`, `GiB`/`G`), in any case: `4096`, `256KiB`.
///
/// # Errors
/// A message saying how to write a size, or that it is too large.
pub fn parse_size(s: &str) -> Result<u32, String> {
    parse_bytes(s)
        .and_then(|v| u32::try_from(v).map_err(|_| format!("\"{s}\" is too large; at most 4 GiB")))
}

/// Parses a size in bytes as [`parse_size`] does, up to 2^64.
///
/// # Errors
/// A message saying how to write a size.
pub fn parse_bytes(s: &str) -> Result<u64, String> {
    let bad = || format!("\"{s}\" is not a size; write it like 4096, 256KiB, 1MiB or 2GiB");
    let text = s.trim();
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (num, unit) = text.split_at(split);
    let n: u64 = num.parse().map_err(|_| bad())?;
    let scale: u64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "kb" => 1000,
        "k" | "kib" => 1024,
        "mb" => 1_000_000,
        "m" | "mib" => 1024 * 1024,
        "gb" => 1_000_000_000,
        "g" | "gib" => 1024 * 1024 * 1024,
        _ => return Err(bad()),
    };
    n.checked_mul(scale).ok_or_else(bad)
}

/// Formats bytes in the largest binary unit that divides them: `4KiB`, `1MiB`, `1000`.
pub fn fmt_size(n: u64) -> String {
    for (unit, size) in [("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)] {
        if n >= size && n.is_multiple_of(size) {
            return format!("{}{unit}", n / size);
        }
    }
    n.to_string()
}

fn secs_to_duration(secs: f64) -> Option<Duration> {
    (secs.is_finite() && secs >= 0.0)
        .then(|| Duration::try_from_secs_f64(secs).ok())
        .flatten()
}

/// Whether `text` is "how long ago" in the one form the API documents: 1 to 4 parts of
/// 1 – 9 digits (and up to 3 decimals) with a unit (`ms`, `s`, `sec`, `secs`, `m`, `min`,
/// `mins`, `h`, `hr`, `hrs`, `d`, `day`, `days`), or one bare number of seconds.
fn is_plain_ago(text: &str) -> bool {
    fn number(s: &str) -> Option<&str> {
        let int = s.bytes().take_while(u8::is_ascii_digit).count();
        if !(1..=9).contains(&int) {
            return None;
        }
        let rest = &s[int..];
        match rest.strip_prefix('.') {
            Some(frac) => {
                let n = frac.bytes().take_while(u8::is_ascii_digit).count();
                (1..=3).contains(&n).then(|| &frac[n..])
            }
            None => Some(rest),
        }
    }
    const UNITS: [&str; 13] = [
        "ms", "secs", "sec", "s", "mins", "min", "m", "hrs", "hr", "h", "days", "day", "d",
    ];
    if number(text) == Some("") {
        return true;
    }
    let mut rest = text;
    for _ in 0..4 {
        let Some(after) = number(rest) else {
            return false;
        };
        let unit_len = after.bytes().take_while(u8::is_ascii_alphabetic).count();
        if !UNITS.contains(&&after[..unit_len]) {
            return false;
        }
        rest = &after[unit_len..];
        if rest.is_empty() {
            return true;
        }
    }
    false
}

/// Parses a point in time: an RFC 3339 time (`2026-01-01T10:00:00Z`), or a duration meaning
/// that long before `now` (`10m`, `1h`, `90s`, `2d`).
///
/// # Errors
/// `InvalidArgument` naming `field` and both forms when `s` is neither.
pub fn parse_time(field: &str, s: &str, now: Timestamp) -> Result<Timestamp, StoreError> {
    let text = s;
    if let Ok(t) = crate::time::parse_rfc3339(field, text) {
        return Ok(t);
    }
    let ago = Some(text)
        .filter(|t| is_plain_ago(t))
        .ok_or(())
        .and_then(|t| parse_duration(t).map_err(|_| ()))
        .map_err(|_| {
            StoreError::invalid(format!(
                "{field} must be an RFC 3339 time like 2026-01-01T10:00:00Z, or how long ago, like \
             10m, 1h, 90s or 2d; got \"{s}\""
            ))
        })?;
    // Longer ago than 1970 is 1970: no message is older.
    let ms = i64::try_from(ago.as_millis()).unwrap_or(i64::MAX);
    Ok(Timestamp(now.as_millis().saturating_sub(ms).max(0)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        let d = |s| parse_duration(s).unwrap();
        assert_eq!(d("500ms"), Duration::from_millis(500));
        assert_eq!(d("30s"), Duration::from_secs(30));
        assert_eq!(d("5m"), Duration::from_secs(300));
        assert_eq!(d("2h"), Duration::from_secs(7200));
        assert_eq!(d("4d"), Duration::from_secs(4 * 86_400));
        assert_eq!(d("1h30m"), Duration::from_secs(5400));
        assert_eq!(d("1.5s"), Duration::from_millis(1500));
        assert_eq!(d("20"), Duration::from_secs(20));
        for bad in ["", "s", "5x", "-1s", "1.2.3s", "ten seconds"] {
            assert!(parse_duration(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn times_are_rfc3339_or_a_duration_ago() {
        let now = Timestamp(1_767_225_600_000);
        assert_eq!(
            parse_time("since", "2026-01-01T00:00:00Z", now).unwrap(),
            now
        );
        assert_eq!(
            parse_time("since", "10m", now).unwrap(),
            Timestamp(now.0 - 600_000)
        );
        assert_eq!(
            parse_time("since", "1h30m", now).unwrap(),
            Timestamp(now.0 - 5_400_000)
        );
        assert_eq!(
            parse_time("since", "90", now).unwrap(),
            Timestamp(now.0 - 90_000)
        );
        // Only the documented form: what the OpenAPI pattern allows.
        for odd in [
            " 10m",
            "10 m",
            "+5",
            ".5",
            "1.2345s",
            "1s1s1s1s1s",
            "1234567890s",
            "5x",
        ] {
            assert!(parse_time("since", odd, now).is_err(), "{odd}");
        }
        assert_eq!(
            parse_time("since", "2d", now).unwrap(),
            Timestamp(now.0 - 2 * 86_400_000)
        );
        let e = parse_time("since", "yesterday", now)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("since") && e.contains("\"yesterday\"") && e.contains("10m"),
            "{e}"
        );
    }
}
