//! The values a REST request carries, as the runtime trifecta reads them
//! where the sink is a tool the agent runs in process and its call is a
//! plain HTTP request (docs/trifecta.md, "At run time"): path segments,
//! query parameters, header values and the body's leaves, each a string
//! judged like a tool call's argument, and every name the request gives
//! (query, form and JSON keys, header names), since a name can carry a
//! value as well as a value can.
//!
//! The request becomes one JSON object, so the walk, the rule and the
//! names a refusal shows are the ones tool calls have:
//! `{"path": [SEGMENT…], "query": {NAME: VALUE | [VALUE…]}, "headers":
//! {NAME: VALUE | [PART…]}, "body": JSON | {NAME: VALUE} | TEXT, "names":
//! [NAME…]}` (`query.to`, `body.items[2].iban`, `path[3]`, `names[0]`).
//! A body is read as its type says (`body`: JSON for `application/json`
//! and `*+json`, a form for `application/x-www-form-urlencoded`, the text
//! for `text/*` or no type) and every other way a server might read the
//! same bytes: `bodyText`, `bodyJson` where it parses, `bodyForm`. All
//! UTF-8 with no content coding; what cannot be read so (another type,
//! declared JSON that does not parse), or could be read two ways (two
//! `Content-Type` headers, a JSON key given twice), is an
//! [`UnreadableRequest`]: the caller fails closed.

use std::collections::BTreeSet;

use serde::de;
use serde_json::{Map, Value};

use agentgate_policy::strict_json::{self, Checked};

/// Request headers that frame the message rather than carry data a tool
/// chose to send: never judged. `Content-Type` and `Accept` are judged
/// without their media type (their parameters are data).
pub const FRAMING_HEADERS: &[&str] = &[
    "connection",
    "content-encoding",
    "content-length",
    "host",
    "keep-alive",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
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
    /// The body says it is JSON and is not, or gives a key twice.
    #[error("its body is not the JSON its type names: {0}")]
    NotJson(String),
    /// A type the runtime does not read (binary, multipart, …).
    #[error("its body's type {0:?} is not read")]
    Type(String),
    /// More than one `Content-Type`: servers differ on which applies.
    #[error("it has {0} Content-Type headers")]
    Types(usize),
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
    let mut names = BTreeSet::new();
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
    values.insert(
        "query".into(),
        Value::Object(pairs(query.as_bytes(), &mut names)),
    );
    let mut content_types = Vec::new();
    let mut kept = Map::new();
    for (name, value) in headers {
        let name = name.to_ascii_lowercase();
        let text = String::from_utf8_lossy(value).trim().to_string();
        match name.as_str() {
            "content-encoding" if content_coded(&text) => {
                return Err(UnreadableRequest::Encoded(text));
            }
            "content-type" => content_types.push(text.to_ascii_lowercase()),
            _ => {}
        }
        if FRAMING_HEADERS.contains(&name.as_str()) {
            continue;
        }
        let judged = match name.as_str() {
            // The media type frames the body; its parameters do not.
            "content-type" | "accept" => text
                .split_once(';')
                .map(|(_, parameters)| parameters.trim().to_string())
                .unwrap_or_default(),
            _ => text,
        };
        names.insert(name.clone());
        push(&mut kept, name, header_value(&judged));
    }
    values.insert("headers".into(), Value::Object(kept));
    if content_types.len() > 1 {
        return Err(UnreadableRequest::Types(content_types.len()));
    }
    if !body.is_empty() {
        let content_type = content_types.first().map(String::as_str);
        for (key, value) in body_values(content_type, body, &mut names)? {
            values.insert(key.into(), value);
        }
    }
    values.insert(
        "names".into(),
        Value::Array(names.into_iter().map(Value::String).collect()),
    );
    Ok(values)
}

/// True when a `Content-Encoding` value names a coding other than
/// `identity`: every coding listed applies, so one is enough.
pub fn content_coded(value: &str) -> bool {
    value
        .split(',')
        .any(|c| !matches!(c.trim().to_ascii_lowercase().as_str(), "identity" | ""))
}

/// A header's value as judged: the whole, then, where it has more than one
/// part, each part between spaces, `,`, `;` and `=` (the credential of
/// `Authorization: Bearer X`, each cookie of `Cookie: a=X; b=Y`).
fn header_value(text: &str) -> Value {
    let parts: Vec<&str> = text
        .split(|c: char| c.is_ascii_whitespace() || matches!(c, ',' | ';' | '='))
        .filter(|part| !part.is_empty())
        .collect();
    if parts.len() < 2 {
        return Value::String(text.to_string());
    }
    let mut all = vec![Value::String(text.to_string())];
    all.extend(parts.into_iter().map(|p| Value::String(p.to_string())));
    Value::Array(all)
}

/// A body's readings, under the keys the request object gives them:
/// `body` as its type says, and every other way a server might read the
/// same bytes (a type can be wrong, and servers that expect JSON often
/// parse whatever comes): `bodyText`, `bodyJson` where it parses, and
/// `bodyForm`.
fn body_values(
    content_type: Option<&str>,
    body: &[u8],
    names: &mut BTreeSet<String>,
) -> Result<Vec<(&'static str, Value)>, UnreadableRequest> {
    let media = content_type
        .map(|t| t.split(';').next().unwrap_or_default().trim())
        .unwrap_or("");
    let json_type = media == "application/json" || media.ends_with("+json");
    let form_type = media == "application/x-www-form-urlencoded";
    let text_type = media.is_empty() || media.starts_with("text/");
    if !(json_type || form_type || text_type) {
        return Err(UnreadableRequest::Type(media.to_string()));
    }
    let text = std::str::from_utf8(body).map_err(|_| UnreadableRequest::NotText)?;
    let json = match json_body(text, names) {
        Ok(json) => Some(json),
        // Declared JSON must be JSON; JSON with a key twice is read two
        // ways, whatever the type says.
        Err(e) if json_type || serde_json::from_str::<de::IgnoredAny>(text).is_ok() => {
            return Err(e);
        }
        Err(_) => None,
    };
    let form = Value::Object(pairs(body, names));
    let whole = Value::String(text.to_string());
    let mut readings = Vec::new();
    match (json_type, form_type, json) {
        (true, _, Some(json)) => {
            readings.push(("body", json));
            readings.push(("bodyText", whole));
            readings.push(("bodyForm", form));
        }
        (_, true, json) => {
            readings.push(("body", form));
            readings.push(("bodyText", whole));
            readings.extend(json.map(|json| ("bodyJson", json)));
        }
        (_, _, json) => {
            readings.push(("body", whole));
            readings.extend(json.map(|json| ("bodyJson", json)));
            readings.push(("bodyForm", form));
        }
    }
    Ok(readings)
}

/// A JSON body, every object key added to `names`; a key given twice in
/// one object is an error (parsers differ on which value wins).
fn json_body(text: &str, names: &mut BTreeSet<String>) -> Result<Value, UnreadableRequest> {
    let checked: Checked = serde_json::from_str(text)
        .map_err(|e| UnreadableRequest::NotJson(strict_json::duplicate_or(e).to_string()))?;
    collect_keys(&checked.0, names);
    Ok(checked.0)
}

fn collect_keys(value: &Value, names: &mut BTreeSet<String>) {
    match value {
        Value::Object(members) => {
            for (key, member) in members {
                names.insert(key.clone());
                collect_keys(member, names);
            }
        }
        Value::Array(items) => items.iter().for_each(|item| collect_keys(item, names)),
        _ => {}
    }
}

/// `name=value&…` decoded, each name added to `names`; a name given more
/// than once holds every value.
fn pairs(encoded: &[u8], names: &mut BTreeSet<String>) -> Map<String, Value> {
    let mut map = Map::new();
    for (name, value) in form_urlencoded::parse(encoded) {
        names.insert(name.to_string());
        push(
            &mut map,
            name.into_owned(),
            Value::String(value.into_owned()),
        );
    }
    map
}

/// Adds `value` under `name`, turning a repeated name into an array.
fn push(map: &mut Map<String, Value>, name: String, value: Value) {
    match map.get_mut(&name) {
        None => {
            map.insert(name, value);
        }
        Some(Value::Array(items)) if !value.is_array() => items.push(value),
        Some(first) => {
            let first = first.take();
            map.insert(name, Value::Array(vec![first, value]));
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

    fn read(
        headers: &[(&str, &str)],
        body: &[u8],
    ) -> Result<Map<String, Value>, UnreadableRequest> {
        request_values("/", headers.iter().map(|(n, v)| (*n, v.as_bytes())), body)
    }

    #[test]
    fn path_query_headers_a_json_body_and_every_name_are_values() {
        let mut got = values(
            "/v1/send%20it/x?to=a%40b.c&to=d&q=1+2&SECRETNAME",
            &[
                ("Content-Type", "application/json; charset=utf-8"),
                ("X-Note", " hi "),
                ("Content-Length", "30"),
                ("Authorization", "Bearer tok-123"),
            ],
            r#"{"iban": "GB29", "n": [1, 2], "deep": {"KEY": null}}"#,
        );
        // The same bytes read as text and as a form: the text is one name.
        let text = got["bodyText"].as_str().unwrap().to_string();
        assert_eq!(got["bodyForm"], json!({text.clone(): ""}));
        let object = got.as_object_mut().unwrap();
        object.remove("bodyText");
        object.remove("bodyForm");
        let names = object["names"].as_array_mut().unwrap();
        assert_eq!(names.pop(), Some(json!(text)));
        assert_eq!(
            got,
            json!({
                "path": ["v1", "send it", "x"],
                "query": {"to": ["a@b.c", "d"], "q": "1 2", "SECRETNAME": ""},
                "headers": {
                    "content-type": ["charset=utf-8", "charset", "utf-8"],
                    "x-note": "hi",
                    "authorization": ["Bearer tok-123", "Bearer", "tok-123"],
                },
                "body": {"iban": "GB29", "n": [1, 2], "deep": {"KEY": null}},
                "names": ["KEY", "SECRETNAME", "authorization", "content-type", "deep", "iban", "n", "q", "to", "x-note"],
            })
        );
    }

    #[test]
    fn forms_and_text_are_read_every_way_a_server_might() {
        let form = values(
            "/",
            &[("content-type", "application/x-www-form-urlencoded")],
            "a=1&b=x%2By",
        );
        assert_eq!(form["body"], json!({"a": "1", "b": "x+y"}));
        // No type: the text, and JSON and a form where they parse.
        let untyped = values("/", &[], r#"{"token": "hunter2"}"#);
        assert_eq!(untyped["body"], json!(r#"{"token": "hunter2"}"#));
        assert_eq!(untyped["bodyJson"], json!({"token": "hunter2"}));
        assert!(
            untyped["names"]
                .as_array()
                .unwrap()
                .contains(&json!("token"))
        );
        let text = values("/", &[("content-type", "text/plain")], "k=v w");
        assert_eq!(text["bodyForm"], json!({"k": "v w"}));
        assert!(text.get("bodyJson").is_none());
        // Declared a form, sent as JSON: read as JSON too.
        let mislabelled = values(
            "/",
            &[("content-type", "application/x-www-form-urlencoded")],
            r#"{"to": "hunter2"}"#,
        );
        assert_eq!(mislabelled["bodyJson"], json!({"to": "hunter2"}));
        assert!(values("/", &[], "").get("body").is_none());
    }

    #[test]
    fn what_cannot_be_read_or_reads_two_ways_is_an_error() {
        assert_eq!(
            read(&[("content-encoding", "identity, gzip")], b"x"),
            Err(UnreadableRequest::Encoded("identity, gzip".into()))
        );
        assert_eq!(read(&[], &[0xff, 0xfe]), Err(UnreadableRequest::NotText));
        assert!(matches!(
            read(&[("content-type", "application/json")], b"{"),
            Err(UnreadableRequest::NotJson(_))
        ));
        for content_type in ["application/json", "text/plain"] {
            assert!(matches!(
                read(&[("content-type", content_type)], br#"{"a": 1, "a": "SECRET"}"#),
                Err(UnreadableRequest::NotJson(e)) if e.contains("twice")
            ));
        }
        assert_eq!(
            read(
                &[("content-type", "multipart/form-data; boundary=x")],
                b"--x"
            ),
            Err(UnreadableRequest::Type("multipart/form-data".into()))
        );
        assert_eq!(
            read(
                &[
                    ("content-type", "application/x-www-form-urlencoded"),
                    ("content-type", "text/plain")
                ],
                b"a=1"
            ),
            Err(UnreadableRequest::Types(2))
        );
        assert!(read(&[("content-encoding", "identity")], b"x").is_ok());
    }
}
