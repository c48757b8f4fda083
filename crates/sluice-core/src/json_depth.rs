//! The one rule for how deeply a JSON body or result may nest.
//!
//! A message body or a task result sent as JSON may nest arrays and objects at most
//! [`MAX_JSON_DEPTH`](crate::config::limits::MAX_JSON_DEPTH) levels deep (`[]` and `{}` are one
//! level, `[[1]]` two; scalars add none). The broker keeps a JSON body as its text and never
//! builds it as a tree, so it could keep any depth; but every consumer parses it, and common
//! parsers stop far earlier (Ruby's and protobuf's JSON at 100 levels, serde_json at 128,
//! Python at about 1,000, by raising an error or exhausting their stack). A limit under all of
//! them means a stored body is one every consumer can decode. Deeper bodies are refused with
//! `invalid_argument` naming the limit; such data can still be sent as binary.
//!
//! The check costs one pass over the bytes outside strings; strings, where most of a body's
//! bytes usually are, are skipped with `memchr`'s vectorised search, and a text too short to
//! nest past the limit is not read at all.

use crate::config::limits::MAX_JSON_DEPTH;
use crate::error::StoreError;

/// True when `text`, a JSON text, nests arrays and objects more than [`MAX_JSON_DEPTH`]
/// levels deep. Brackets inside strings do not count. The text is not otherwise checked: for
/// text that is not JSON the answer means nothing (but it is always an answer).
pub fn too_deep(text: &[u8]) -> bool {
    // Nesting past the limit takes an opening and a closing bracket per level.
    if text.len() <= 2 * MAX_JSON_DEPTH {
        return false;
    }
    let mut depth = 0usize;
    let mut at = 0;
    while at < text.len() {
        // The structure up to the next string.
        let quote = memchr::memchr(b'"', &text[at..]).map_or(text.len(), |q| at + q);
        for &b in &text[at..quote] {
            match b {
                b'[' | b'{' => {
                    depth += 1;
                    if depth > MAX_JSON_DEPTH {
                        return true;
                    }
                }
                b']' | b'}' => depth = depth.saturating_sub(1),
                _ => {}
            }
        }
        // The string that begins there: to the first quote no backslash escapes.
        at = quote + 1;
        loop {
            match memchr::memchr2(b'"', b'\\', text.get(at..).unwrap_or_default()) {
                None => return false,
                Some(k) if text[at + k] == b'\\' => at += k + 2,
                Some(k) => {
                    at += k + 1;
                    break;
                }
            }
        }
    }
    false
}

/// Refuses a JSON `field` (`body`, `result`) that nests deeper than [`MAX_JSON_DEPTH`].
///
/// # Errors
/// `InvalidArgument` naming the field and the limit and saying what to do.
pub fn check(field: &str, text: &[u8]) -> Result<(), StoreError> {
    if too_deep(text) {
        return Err(StoreError::invalid(format!(
            "the {field} nests JSON arrays and objects more than {MAX_JSON_DEPTH} levels deep; \
             at most {MAX_JSON_DEPTH} are accepted: flatten it, or send it as binary"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nested(levels: usize) -> String {
        format!("{}1{}", "[".repeat(levels), "]".repeat(levels))
    }

    #[test]
    fn the_limit_is_inclusive() {
        assert!(!too_deep(nested(MAX_JSON_DEPTH).as_bytes()));
        assert!(too_deep(nested(MAX_JSON_DEPTH + 1).as_bytes()));
        assert!(too_deep(nested(100_000).as_bytes()));
        let objects = format!(
            "{}{}",
            "{\"a\":".repeat(MAX_JSON_DEPTH + 1),
            "}".repeat(MAX_JSON_DEPTH + 1)
        );
        assert!(too_deep(objects.as_bytes()));
    }

    #[test]
    fn width_is_not_depth() {
        let wide = format!("[{}]", vec!["[1]"; 10_000].join(","));
        assert!(!too_deep(wide.as_bytes()));
        let objects = format!("[{}]", vec!["{\"a\":{\"b\":[]}}"; 1000].join(","));
        assert!(!too_deep(objects.as_bytes()));
    }

    #[test]
    fn brackets_inside_strings_do_not_count() {
        let text = format!("{{\"k\": \"{}\", \"e\": \"\\\"[[\"}}", "[".repeat(1000));
        assert!(!too_deep(text.as_bytes()));
        // An escaped quote does not end the string; an escaped backslash before a quote does.
        let text = format!("[\"\\\\\", {}]", nested(MAX_JSON_DEPTH));
        assert!(too_deep(text.as_bytes()));
    }

    /// The rule written plainly, one byte at a time.
    fn reference(text: &[u8]) -> bool {
        let (mut depth, mut in_string, mut escaped) = (0usize, false, false);
        for &b in text {
            if in_string {
                if escaped {
                    escaped = false;
                } else if b == b'\\' {
                    escaped = true;
                } else if b == b'"' {
                    in_string = false;
                }
                continue;
            }
            match b {
                b'"' => in_string = true,
                b'[' | b'{' => {
                    depth += 1;
                    if depth > MAX_JSON_DEPTH {
                        return true;
                    }
                }
                b']' | b'}' => depth = depth.saturating_sub(1),
                _ => {}
            }
        }
        false
    }

    proptest::proptest! {
        #[test]
        fn agrees_with_the_plain_rule(
            parts in proptest::collection::vec(
                proptest::prop_oneof![3 => "\\[", 3 => "\\{", 1 => "\\]", 1 => "\\}", 1 => "\"", 1 => "\\\\", 1 => "[a-z0-9:,]{0,3}"],
                0..400,
            ),
        ) {
            let text = parts.concat();
            proptest::prop_assert_eq!(too_deep(text.as_bytes()), reference(text.as_bytes()), "{}", text);
        }
    }

    #[test]
    fn the_refusal_names_the_field_and_the_limit() {
        let e = check("result", nested(MAX_JSON_DEPTH + 1).as_bytes()).unwrap_err();
        assert_eq!(e.code(), crate::ErrorCode::InvalidArgument);
        let msg = e.to_string();
        assert!(
            msg.contains("result") && msg.contains(&MAX_JSON_DEPTH.to_string()),
            "{msg}"
        );
    }
}
