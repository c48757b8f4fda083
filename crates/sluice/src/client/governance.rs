//! The `--adaptive` and `--breaker` flags of `queue create|update`, and how a governed
//! queue's rate and breaker are shown by `queue show`, `queue breaker` and `stats`.
//!
//! Both flags take comma-separated `key=value` settings:
//! - `--adaptive min=60,max=6000[,signal=retry_after|errors:429;503][,window=60s]
//!   [,increase=N][,decrease=0.7][,scope=key][,key_idle=10m]`;
//! - `--breaker [share=0.5][,window=60s][,min_calls=20][,probe_every=30s][,probes=3]
//!   [,scope=key][,key_idle=10m]`, a bare `--breaker` taking every default.

use sluice_core::adaptive::{AdaptiveRate, BreakerConfig, CongestionSignal, FlowScope};
use sluice_wire::{BreakerView, FlowView};

use super::args::{fmt_ms, parse_duration, short_time};

const ADAPTIVE_KEYS: &str = "min, max, signal, window, increase, decrease, scope, key_idle";
const ADAPTIVE_EXAMPLE: &str = "--adaptive 'min=60,max=6000,signal=errors:429;503,window=60s'";
const BREAKER_KEYS: &str = "share, window, min_calls, probe_every, probes, scope, key_idle";
const BREAKER_EXAMPLE: &str = "--breaker share=0.5,window=60s,min_calls=10,probe_every=30s";

/// The `key=value` pairs of a compound flag, in order.
fn pairs<'a>(flag: &str, s: &'a str, example: &str) -> Result<Vec<(&'a str, &'a str)>, String> {
    s.split(',')
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .map(|p| {
            p.split_once('=')
                .map(|(k, v)| (k.trim(), v.trim()))
                .ok_or_else(|| {
                    format!(
                        "\"{p}\" in --{flag} is not a key=value setting; write it like {example}"
                    )
                })
        })
        .collect()
}

fn number<T: std::str::FromStr>(flag: &str, key: &str, v: &str) -> Result<T, String> {
    v.parse().map_err(|_| {
        format!("--{flag} {key}=\"{v}\" is not a whole number; write it like {key}=10")
    })
}

fn millis(flag: &str, key: &str, v: &str) -> Result<u64, String> {
    let d = parse_duration(v).map_err(|_| {
        format!("--{flag} {key}=\"{v}\" is not a duration; write it like {key}=60s or {key}=500ms")
    })?;
    Ok(u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// A share as `0.5` or `50%`, in permille.
fn share(flag: &str, key: &str, v: &str) -> Result<u16, String> {
    let bad = || {
        format!(
            "--{flag} {key}=\"{v}\" is not a share over 0 and at most 1; write it like {key}=0.5 or {key}=50%"
        )
    };
    let x: f64 = match v.strip_suffix('%') {
        Some(pct) => pct.trim().parse::<f64>().map_err(|_| bad())? / 100.0,
        None => v.parse().map_err(|_| bad())?,
    };
    if !x.is_finite() || x <= 0.0 || x > 1.0 {
        return Err(bad());
    }
    // In 0..=1000 by the check above.
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    let p = (x * 1000.0).round() as u16;
    if p == 0 {
        return Err(bad());
    }
    Ok(p)
}

/// `scope=queue|key`.
fn scope(flag: &str, v: &str) -> Result<FlowScope, String> {
    match v {
        "queue" => Ok(FlowScope::Queue),
        "key" => Ok(FlowScope::Key),
        _ => Err(format!(
            "--{flag} scope=\"{v}\" is not a scope; write scope=queue (one state for the \
             queue) or scope=key (one per message key)"
        )),
    }
}

/// Parses `--adaptive`.
///
/// # Errors
/// What was wrong and how to write it, for an unknown key, a bad value, a missing `min` or
/// `max`, or a setting the broker would refuse.
pub fn parse_adaptive(s: &str) -> Result<AdaptiveRate, String> {
    const F: &str = "adaptive";
    let (mut min, mut max) = (None, None);
    let mut a = AdaptiveRate::new(0, 0);
    for (k, v) in pairs(F, s, ADAPTIVE_EXAMPLE)? {
        match k {
            "min" => min = Some(number(F, k, v)?),
            "max" => max = Some(number(F, k, v)?),
            "signal" => a.signal = parse_signal(v)?,
            "window" => a.window_ms = Some(millis(F, k, v)?),
            "increase" => a.increase_per_min = Some(number(F, k, v)?),
            "decrease" => a.decrease_permille = Some(share(F, k, v)?),
            "scope" => a.scope = scope(F, v)?,
            "key_idle" => a.key_idle_ms = Some(millis(F, k, v)?),
            _ => {
                return Err(format!(
                    "--adaptive has no setting \"{k}\"; use {ADAPTIVE_KEYS}, e.g. {ADAPTIVE_EXAMPLE}"
                ));
            }
        }
    }
    let (Some(min), Some(max)) = (min, max) else {
        return Err(format!(
            "--adaptive needs min and max (deliveries per minute), e.g. {ADAPTIVE_EXAMPLE}"
        ));
    };
    a.min_per_min = min;
    a.max_per_min = max;
    a.validate().map_err(|e| format!("--adaptive: {e}"))?;
    Ok(a)
}

fn parse_signal(v: &str) -> Result<CongestionSignal, String> {
    if v == "retry_after" {
        return Ok(CongestionSignal::RetryAfter);
    }
    match v.strip_prefix("errors:") {
        Some(list) => Ok(CongestionSignal::Errors(
            list.split(';').map(|p| p.trim().to_owned()).collect(),
        )),
        None => Err(format!(
            "--adaptive signal=\"{v}\" is not a signal; write signal=retry_after (only nacks \
             carrying a Retry-After) or 'signal=errors:429;503' (also nacks whose error \
             contains one of these; quoted for the shell)"
        )),
    }
}

/// Parses `--breaker`; an empty value takes every default.
///
/// # Errors
/// What was wrong and how to write it, for an unknown key, a bad value, or a setting the
/// broker would refuse.
pub fn parse_breaker(s: &str) -> Result<BreakerConfig, String> {
    const F: &str = "breaker";
    let mut b = BreakerConfig::default();
    for (k, v) in pairs(F, s, BREAKER_EXAMPLE)? {
        match k {
            "share" => b.failure_share_permille = share(F, k, v)?,
            "window" => b.window_ms = millis(F, k, v)?,
            "min_calls" => b.min_calls = number(F, k, v)?,
            "probe_every" => b.probe_every_ms = millis(F, k, v)?,
            "probes" => b.probes = number(F, k, v)?,
            "scope" => b.scope = scope(F, v)?,
            "key_idle" => b.key_idle_ms = Some(millis(F, k, v)?),
            _ => {
                return Err(format!(
                    "--breaker has no setting \"{k}\"; use {BREAKER_KEYS}, e.g. {BREAKER_EXAMPLE}"
                ));
            }
        }
    }
    b.validate().map_err(|e| format!("--breaker: {e}"))?;
    Ok(b)
}

fn permille(p: u16) -> String {
    format!("{}", f64::from(p) / 1000.0)
}

/// A queue's adaptive setting on one line, as `--adaptive` takes it.
pub fn fmt_adaptive(a: &AdaptiveRate) -> String {
    let mut s = format!("min={},max={}", a.min_per_min, a.max_per_min);
    if let CongestionSignal::Errors(p) = &a.signal {
        s.push_str(&format!(",signal=errors:{}", p.join(";")));
    }
    if let Some(w) = a.window_ms {
        s.push_str(&format!(",window={}", fmt_ms(w)));
    }
    if let Some(i) = a.increase_per_min {
        s.push_str(&format!(",increase={i}"));
    }
    if let Some(d) = a.decrease_permille {
        s.push_str(&format!(",decrease={}", permille(d)));
    }
    s.push_str(&fmt_scope(a.scope, a.key_idle_ms));
    s
}

/// `,scope=key[,key_idle=…]` for per-key state; nothing for the queue's.
fn fmt_scope(scope: FlowScope, idle: Option<u64>) -> String {
    match (scope, idle) {
        (FlowScope::Queue, _) => String::new(),
        (FlowScope::Key, None) => ",scope=key".into(),
        (FlowScope::Key, Some(ms)) => format!(",scope=key,key_idle={}", fmt_ms(ms)),
    }
}

/// A queue's breaker setting on one line, as `--breaker` takes it.
pub fn fmt_breaker(b: &BreakerConfig) -> String {
    format!(
        "share={},window={},min_calls={},probe_every={},probes={}",
        permille(b.failure_share_permille),
        fmt_ms(b.window_ms),
        b.min_calls,
        fmt_ms(b.probe_every_ms),
        b.probes
    ) + &fmt_scope(b.scope, b.key_idle_ms)
}

/// The adaptive rate now: `120/min (60 – 6000, ceiling 600), held until …`.
pub fn rate_line(f: &FlowView) -> Option<String> {
    let a = f.adaptive.as_ref()?;
    let mut s = format!(
        "{}/min (bounds {} – {}",
        a.rate_per_min, a.min_per_min, a.max_per_min
    );
    if let Some(c) = a.ceiling_per_min {
        s.push_str(&format!(", rate_limit ceiling {c}"));
    }
    s.push(')');
    if let Some(h) = &a.hold_until {
        s.push_str(&format!(", held until {}", short_time(h)));
    }
    s.push_str(&format!(
        "; {} congestion signals, {} decreases",
        a.congestion_total, a.decreases_total
    ));
    Some(s)
}

/// The breaker now: `open (forced) since …; 50% of 20 calls failed; opened 2 times, 1m30s
/// open in all`.
pub fn breaker_line(b: &BreakerView) -> String {
    let mut s = b.state.as_str().to_owned();
    if b.forced {
        s.push_str(" (forced)");
    }
    s.push_str(&format!(" since {}", short_time(&b.since)));
    if let Some(p) = &b.next_probe_at {
        s.push_str(&format!(", probes from {}", short_time(p)));
    }
    s.push_str(&format!(
        "; {}% of {} calls failed; opened {} time{}, {} open in all",
        f64::from(b.failure_share_permille) / 10.0,
        b.calls_in_window,
        b.opened_total,
        if b.opened_total == 1 { "" } else { "s" },
        fmt_ms(b.open_ms_total)
    ));
    s
}

/// The last breaker transition: `closed → open (forced) at …`.
pub fn last_transition(b: &BreakerView) -> Option<String> {
    let t = b.transitions.last()?;
    Some(format!(
        "{} → {} ({}) at {}",
        t.from.as_str(),
        t.to.as_str(),
        t.reason.as_str(),
        short_time(&t.at)
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn adaptive_flags() {
        let a = parse_adaptive("min=60,max=6000").unwrap();
        assert_eq!((a.min_per_min, a.max_per_min), (60, 6000));
        assert_eq!(a.signal, CongestionSignal::RetryAfter);
        let a = parse_adaptive("min=60, max=6000, signal=errors:429;503, window=30s, decrease=50%")
            .unwrap();
        assert_eq!(
            a.signal,
            CongestionSignal::Errors(vec!["429".into(), "503".into()])
        );
        assert_eq!(
            (a.window_ms, a.decrease_permille),
            (Some(30_000), Some(500))
        );
        assert_eq!(
            fmt_adaptive(&a),
            "min=60,max=6000,signal=errors:429;503,window=30s,decrease=0.5"
        );
        for (bad, says) in [
            ("max=10", "needs min and max"),
            ("min=1,max=10,speed=3", "no setting \"speed\""),
            ("min=ten,max=10", "not a whole number"),
            ("min=1,max=10,window=soon", "not a duration"),
            ("min=1,max=10,signal=429", "not a signal"),
            ("min=20,max=10", "min_per_min must be"),
            (
                "min=1,max",
                "\"max\" in --adaptive is not a key=value setting",
            ),
        ] {
            let err = parse_adaptive(bad).unwrap_err();
            assert!(err.contains(says), "{bad}: {err}");
        }
    }

    #[test]
    fn breaker_flags() {
        assert_eq!(parse_breaker("").unwrap(), BreakerConfig::default());
        let b =
            parse_breaker("share=0.25,window=2m,min_calls=10,probe_every=30s,probes=2").unwrap();
        assert_eq!(
            (
                b.failure_share_permille,
                b.window_ms,
                b.min_calls,
                b.probe_every_ms,
                b.probes
            ),
            (250, 120_000, 10, 30_000, 2)
        );
        assert_eq!(
            fmt_breaker(&b),
            "share=0.25,window=2m,min_calls=10,probe_every=30s,probes=2"
        );
        let k = parse_breaker("min_calls=10,scope=key,key_idle=10m").unwrap();
        assert_eq!((k.scope, k.key_idle_ms), (FlowScope::Key, Some(600_000)));
        assert_eq!(
            fmt_breaker(&k),
            "share=0.5,window=1m,min_calls=10,probe_every=30s,probes=3,scope=key,key_idle=10m"
        );
        let a = parse_adaptive("min=20,max=300,scope=key").unwrap();
        assert_eq!(fmt_adaptive(&a), "min=20,max=300,scope=key");
        for (bad, says) in [
            ("share=2", "not a share"),
            ("probes=0", "breaker.probes must be"),
            ("calls=3", "no setting \"calls\""),
            ("scope=tenant", "not a scope"),
            ("key_idle=10m", "key_idle_ms applies to per-key state"),
        ] {
            let err = parse_breaker(bad).unwrap_err();
            assert!(err.contains(says), "{bad}: {err}");
        }
    }
}
