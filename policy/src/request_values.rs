//! The values a REST request carries, as the runtime trifecta reads them
//! where the sink is a tool the agent runs in process and its call is a
//! plain HTTP request (docs/trifecta.md, "At run time"): path segments,
//! query parameters, header values and the body's leaves, each a string
//! judged by the provenance rule (docs/policy-semantics.md §8.3) like a
//! tool call's argument.
//!
//! The request becomes one JSON object, so the walk, the rule and the
//! names a refusal shows are the ones tool calls have:
//! `{"path": [SEGMENT…], "query": {NAME: VALUE | [VALUE…]}, "headers":
//! {NAME: VALUE}, "body": JSON | {NAME: VALUE} | TEXT}` (`query.to`,
//! `body.items[2].iban`, `path[3]`). A body is read as its type says: JSON
//! (`application/json`, `*+json`), a form (`application/x-www-form-urlencoded`)
//! or text (`text/*`, or no type), all UTF-8 with no content coding. What
//! cannot be read so is an [`UnreadableRequest`]: the caller fails closed.

use serde_json::{Map, Value};

/// Request headers whose values describe the transport or the client, not
/// data a tool chose to send: never judged, so a secret's content that
/// happens to hold `application/json` does not make every request carry it.
pub const TRANSPORT_HEADERS: &[&str] = &[
    "accept",
    "accept-charset",
    "accept-encoding",
    "accept-language",
    "cache-control",
    "connection",
    "content-encoding",
    "content-length",
    "content-type",
    "host",
    "keep-alive",
    "pragma",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
    "user-agent",
];

/// Why a request's values could not all be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UnreadableRequest {
    /// A content coding other than `identity` (gzip, br, …).
    #[error("its body has the content coding {0:?}")]
    Encoded(String),
    /// The body is not UTF-8.
    #[error("its body is not UTF-8 text")]
    NotText,
    /// The body says it is JSON and is not.
    #[error("its body is not the JSON its type names: {0}")]
    NotJson(String),
    /// A type the runtime does not read (binary, multipart, …).
    #[error("its body's type {0:?} is not read")]
    Type(String),
}

/// The request's values as one JSON object (the module's documentation
/// gives its shape). `target` is the request's path and query as sent;
/// `headers` every header, by name; `body` the whole body.
pub fn request_values<'h>(
    target: &str,
    headers: impl IntoIterator<Item = (&'h str, &'h [u8])>,
    body: &[u8],
) -> Result<Map<String, Value>, UnreadableRequest> {
    let (path, query) = target.split_once('?').unwrap_or((target, ""));
    let mut values = Map::new();
    let segments: Vec<Value> = path
        .split('/')
        .filter(|segment| !segment.is_empty())
        .map(|segment| {
            Value::String(
                percent_encoding::percent_decode_str(segment)
                    .decode_utf8_lossy()
                    .into_owned(),
            )
        })
        .collect();
    values.insert("path".into(), Value::Array(segments));
    values.insert("query".into(), Value::Object(pairs(query.as_bytes())));
    let mut content_type = None;
    let mut kept = Map::new();
    for (name, value) in headers {
        let name = name.to_ascii_lowercase();
        let text = String::from_utf8_lossy(value).trim().to_string();
        match name.as_str() {
            "content-encoding" if content_coded(&text) => {
                return Err(UnreadableRequest::Encoded(text));
            }
            "content-type" => content_type = Some(text.to_ascii_lowercase()),
            _ => {}
        }
        if !TRANSPORT_HEADERS.contains(&name.as_str()) {
            push(&mut kept, name, text);
        }
    }
    values.insert("headers".into(), Value::Object(kept));
    if !body.is_empty() {
        values.insert("body".into(), body_values(content_type.as_deref(), body)?);
    }
    Ok(values)
}

/// True when a `Content-Encoding` value names a coding other than
/// `identity`: every coding listed applies, so one is enough.
pub fn content_coded(value: &str) -> bool {
    value
        .split(',')
        .any(|c| !matches!(c.trim().to_ascii_lowercase().as_str(), "identity" | ""))
}

/// A body's values, read as its media type says.
fn body_values(content_type: Option<&str>, body: &[u8]) -> Result<Value, UnreadableRequest> {
    let media = content_type
        .map(|t| t.split(';').next().unwrap_or_default().trim())
        .unwrap_or("");
    let text = || std::str::from_utf8(body).map_err(|_| UnreadableRequest::NotText);
    if media == "application/json" || media.ends_with("+json") {
        return serde_json::from_str(text()?)
            .map_err(|e| UnreadableRequest::NotJson(e.to_string()));
    }
    if media == "application/x-www-form-urlencoded" {
        text()?;
        return Ok(Value::Object(pairs(body)));
    }
    if media.is_empty() || media.starts_with("text/") {
        return Ok(Value::String(text()?.to_string()));
    }
    Err(UnreadableRequest::Type(media.to_string()))
}

/// `name=value&…` decoded; a name given more than once holds every value.
fn pairs(encoded: &[u8]) -> Map<String, Value> {
    let mut map = Map::new();
    for (name, value) in form_urlencoded::parse(encoded) {
        push(&mut map, name.into_owned(), value.into_owned());
    }
    map
}

/// Adds `value` under `name`, turning a repeated name into an array.
fn push(map: &mut Map<String, Value>, name: String, value: String) {
    match map.get_mut(&name) {
        None => {
            map.insert(name, Value::String(value));
        }
        Some(Value::Array(items)) => items.push(Value::String(value)),
        Some(first) => {
            let first = first.take();
            map.insert(name, Value::Array(vec![first, Value::String(value)]));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn values(target: &str, headers: &[(&str, &str)], body: &str) -> Value {
        let headers = headers.iter().map(|(n, v)| (*n, v.as_bytes()));
        Value::Object(request_values(target, headers, body.as_bytes()).unwrap())
    }

    #[test]
    fn path_query_headers_and_a_json_body_are_values() {
        let got = values(
            "/v1/send%20it/x?to=a%40b.c&to=d&q=1+2",
            &[
                ("Content-Type", "application/json; charset=utf-8"),
                ("X-Note", " hi "),
                ("User-Agent", "curl"),
            ],
            r#"{"iban": "GB29", "n": [1, 2]}"#,
        );
        assert_eq!(
            got,
            json!({
                "path": ["v1", "send it", "x"],
                "query": {"to": ["a@b.c", "d"], "q": "1 2"},
                "headers": {"x-note": "hi"},
                "body": {"iban": "GB29", "n": [1, 2]},
            })
        );
    }

    #[test]
    fn forms_and_text_are_read_as_their_type_says() {
        let form = values(
            "/",
            &[("content-type", "application/x-www-form-urlencoded")],
            "a=1&b=x%2By",
        );
        assert_eq!(form["body"], json!({"a": "1", "b": "x+y"}));
        assert_eq!(
            values("/", &[], "plain words")["body"],
            json!("plain words")
        );
        assert_eq!(
            values("/", &[("content-type", "text/csv")], "a,b")["body"],
            json!("a,b")
        );
        assert!(values("/", &[], "").get("body").is_none());
    }

    #[test]
    fn what_cannot_be_read_is_an_error_not_an_empty_value() {
        let read = |headers: &[(&str, &str)], body: &[u8]| {
            request_values("/", headers.iter().map(|(n, v)| (*n, v.as_bytes())), body)
        };
        assert_eq!(
            read(&[("content-encoding", "identity, gzip")], b"x"),
            Err(UnreadableRequest::Encoded("identity, gzip".into()))
        );
        assert_eq!(read(&[], &[0xff, 0xfe]), Err(UnreadableRequest::NotText));
        assert!(matches!(
            read(&[("content-type", "application/json")], b"{"),
            Err(UnreadableRequest::NotJson(_))
        ));
        assert_eq!(
            read(
                &[("content-type", "multipart/form-data; boundary=x")],
                b"--x"
            ),
            Err(UnreadableRequest::Type("multipart/form-data".into()))
        );
        assert!(read(&[("content-encoding", "identity")], b"x").is_ok());
    }
}
