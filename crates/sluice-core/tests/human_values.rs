//! Values as people type them (`sluice_core::human`) against the table in
//! `human_values.json`, which the console's `human.js` is held to as well
//! (`crates/sluice-server/tests/console_forms.rs`): the command line and the console read
//! `4d`, `100/min` and `256KiB` alike and refuse the same text with the same message.

use std::time::Duration;

use serde_json::Value;
use sluice_core::config::RateLimit;
use sluice_core::human::{fmt_ms, fmt_rate, fmt_size, parse_duration, parse_rate, parse_size};

fn table(name: &str) -> Vec<Value> {
    let all: Value =
        serde_json::from_str(include_str!("human_values.json")).expect("the table is JSON");
    all[name].as_array().expect("a list").clone()
}

/// What a case expects: `Ok` with the value, or `Err` with the message.
fn expected(case: &Value) -> (&str, Result<&Value, &str>) {
    let input = case[0].as_str().expect("the input");
    match &case[1] {
        Value::String(message) => (input, Err(message.as_str())),
        v => (input, Ok(v)),
    }
}

#[test]
fn durations_read_as_the_table_says() {
    for case in table("durations") {
        let (input, want) = expected(&case);
        let got = parse_duration(input).map(|d| d.as_millis() as u64);
        match want {
            Ok(ms) => assert_eq!(got, Ok(ms.as_u64().expect("ms")), "{input:?}"),
            Err(message) => assert_eq!(got, Err(message.to_owned()), "{input:?}"),
        }
    }
    for case in table("formatted_durations") {
        let ms = case[0].as_u64().expect("ms");
        assert_eq!(fmt_ms(ms), case[1].as_str().expect("text"), "{ms}");
    }
}

#[test]
fn rates_read_as_the_table_says() {
    for case in table("rates") {
        let (input, want) = expected(&case);
        let got = parse_rate(input).map(|r| (r.limit, r.period.as_millis() as u64));
        match want {
            Ok(r) => {
                let limit = r["limit"].as_u64().expect("limit") as u32;
                let period = r["period_ms"].as_u64().expect("period");
                assert_eq!(got, Ok((limit, period)), "{input:?}");
            }
            Err(message) => assert_eq!(got, Err(message.to_owned()), "{input:?}"),
        }
    }
    for case in table("formatted_rates") {
        let rate = RateLimit {
            limit: case[0]["limit"].as_u64().expect("limit") as u32,
            period: Duration::from_millis(case[0]["period_ms"].as_u64().expect("period")),
            burst: None,
        };
        assert_eq!(fmt_rate(&rate), case[1].as_str().expect("text"), "{rate:?}");
    }
}

#[test]
fn sizes_read_as_the_table_says() {
    for case in table("sizes") {
        let (input, want) = expected(&case);
        let got = parse_size(input).map(u64::from);
        match want {
            Ok(n) => assert_eq!(got, Ok(n.as_u64().expect("bytes")), "{input:?}"),
            Err(message) => assert_eq!(got, Err(message.to_owned()), "{input:?}"),
        }
    }
    for case in table("formatted_sizes") {
        let n = case[0].as_u64().expect("bytes");
        assert_eq!(fmt_size(n), case[1].as_str().expect("text"), "{n}");
    }
}
