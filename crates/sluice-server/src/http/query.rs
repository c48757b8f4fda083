//! Query strings: parsed into a route's parameter struct, and refused with a 400
//! `invalid_argument` whose message names the parameter and its value, never with a parser's
//! raw text.

use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use serde::de::DeserializeOwned;

use crate::http::error::ApiError;

/// Query parameters; unknown or mistyped ones are a 400 that names them.
#[derive(Debug)]
pub struct ApiQuery<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequestParts<S> for ApiQuery<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, ApiError> {
        parse_query(parts.uri.query().unwrap_or_default()).map(ApiQuery)
    }
}

/// Parses a query string (without the `?`) into `T`.
///
/// A text parameter given with an empty value (`?queue=`) counts as not given, as an HTML
/// form's empty field does: it never means "the empty name" or "the empty filter". An empty
/// number or choice (`?limit=`) is still refused: the first parse, with the empty values,
/// checks every value's type; the second, without them, gives the result.
///
/// # Errors
/// `invalid_argument` naming the parameter at fault and what was wrong with it.
pub fn parse_query<T: DeserializeOwned>(query: &str) -> Result<T, ApiError> {
    // No text the broker reads may hold U+0000 (`sluice_core::text`), a filter's included.
    if let Some((name, _)) =
        form_urlencoded::parse(query.as_bytes()).find(|(_, v)| v.contains('\0'))
    {
        return Err(ApiError::invalid(format!(
            "query parameter {name:?} contains the character U+0000 (NUL), which no text may hold; remove it"
        )));
    }
    if form_urlencoded::parse(query.as_bytes()).any(|(_, v)| v.is_empty()) {
        parse_all::<T>(query)?;
        let without_empty = form_urlencoded::Serializer::new(String::new())
            .extend_pairs(form_urlencoded::parse(query.as_bytes()).filter(|(_, v)| !v.is_empty()))
            .finish();
        return parse_all(&without_empty);
    }
    parse_all(query)
}

fn parse_all<T: DeserializeOwned>(query: &str) -> Result<T, ApiError> {
    let de = serde_urlencoded::Deserializer::new(form_urlencoded::parse(query.as_bytes()));
    serde_path_to_error::deserialize(de).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner().to_string();
        ApiError::invalid(describe(query, &path, &inner))
    })
}

fn describe(query: &str, path: &str, inner: &str) -> String {
    const SEE: &str = "see /openapi.json for this route's parameters";
    if let Some(rest) = inner.strip_prefix("unknown field ") {
        let (name, expected) = rest.split_once(", expected ").unwrap_or((rest, ""));
        let name = name.trim_matches('`');
        let expected = expected.trim_start_matches("one of ").replace('`', "");
        return format!("unknown query parameter \"{name}\"; this route takes {expected}");
    }
    // serde reports a missing parameter at the top level, naming it in the text.
    if let Some(rest) = inner.strip_prefix("missing field ") {
        let name = rest.trim_matches('`');
        return format!("query parameter {name} is required; {SEE}");
    }
    if path.is_empty() || path == "." {
        return format!("the query string is not valid: {inner}; {SEE}");
    }
    let value = form_urlencoded::parse(query.as_bytes())
        .find(|(k, _)| k == path)
        .map(|(_, v)| v.into_owned());
    match value {
        Some(v) => format!("query parameter {path} has a bad value \"{v}\": {inner}; {SEE}"),
        None => format!("query parameter {path} is not valid: {inner}; {SEE}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;

    #[derive(Debug, Deserialize)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    struct Q {
        per_worker: u64,
        since: Option<String>,
    }

    fn err(query: &str) -> String {
        let e = parse_query::<Q>(query).expect_err(query);
        assert_eq!(e.code(), sluice_core::ErrorCode::InvalidArgument);
        e.message().to_owned()
    }

    #[test]
    fn a_value_holding_nul_is_refused_naming_its_parameter() {
        let e = err("error_contains=a%00b");
        assert!(e.contains("error_contains") && e.contains("U+0000"), "{e}");
    }

    #[test]
    fn errors_name_the_parameter() {
        let e = err("per_worker=abc");
        assert!(e.contains("per_worker has a bad value \"abc\""), "{e}");
        let e = err("per_worker=1&bogus=2");
        assert!(e.contains("unknown query parameter \"bogus\""), "{e}");
        assert!(e.contains("takes per_worker or since"), "{e}");
        let e = err("");
        assert!(e.contains("per_worker is required"), "{e}");
        assert_eq!(parse_query::<Q>("per_worker=3").unwrap().per_worker, 3);
    }

    #[test]
    fn an_empty_value_is_no_value() {
        let q = parse_query::<Q>("per_worker=3&since=").unwrap();
        assert_eq!(q.since, None);
        let e = err("per_worker=");
        assert!(e.contains("per_worker has a bad value \"\""), "{e}");
    }
}
