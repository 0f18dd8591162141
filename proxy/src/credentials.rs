//! Credentials at the enforcement point (docs/policy-semantics.md §9.4,
//! docs/proxy.md, "Credentials"): the agent holds a placeholder per
//! credential, and the proxy puts the secret in its place only on a
//! request the policy allows with that credential.
//!
//! This module knows the sandbox's declarations (`credentials.json` beside
//! the policy), this Pod's placeholders (`--placeholders`, which it writes)
//! and the secrets (`--credential-secrets`, re-read on every poll so a
//! rotated Secret applies at once). It tells which credential a request
//! carries and where a placeholder or a secret sits outside its attach
//! form (misuse), attaches the secret, and scans bodies as they stream.
//! Secrets and placeholders are kept in types that print `<redacted>`, and
//! every reason it writes names a credential, never a value.

use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::fmt;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll};

use agentgate_judgement::refusal::{Refusal, RefusalCode};
use agentgate_policy::action::check_credential_name;
use agentgate_policy::credentials::{
    AttachForm, Credential, PLACEHOLDER_PREFIX, PLACEHOLDER_RANDOM_HEX, is_placeholder,
    secret_value,
};
use base64::Engine;
use base64::engine::general_purpose::{GeneralPurpose, GeneralPurposeConfig};
use base64::engine::{DecodePaddingMode, general_purpose};
use bytes::{Bytes, BytesMut};
use http::header::{AUTHORIZATION, HeaderMap, HeaderName, HeaderValue};
use http::uri::{PathAndQuery, Uri};
use hyper::body::{Body, Frame, SizeHint};
use memchr::memmem::Finder;
use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, percent_decode};

/// How long a placeholder is: the prefix, then the random hex digits.
const PLACEHOLDER_LEN: usize = PLACEHOLDER_PREFIX.len() + PLACEHOLDER_RANDOM_HEX;

/// The error type of every body the proxy passes on.
pub type BodyError = Box<dyn std::error::Error + Send + Sync>;

/// A secret value. It is attached to requests and compared, never shown:
/// `Debug` and `Display` print `<redacted>`.
#[derive(Clone, PartialEq, Eq)]
pub struct SecretValue(Bytes);

impl SecretValue {
    /// The value, from a Secret key's bytes ([`secret_value`]: without one
    /// trailing line end).
    pub fn from_file(raw: &[u8]) -> SecretValue {
        SecretValue(Bytes::copy_from_slice(secret_value(raw)))
    }

    fn expose(&self) -> &[u8] {
        &self.0
    }
}

impl fmt::Debug for SecretValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<redacted>")
    }
}

impl fmt::Display for SecretValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<redacted>")
    }
}

/// A placeholder of this Pod. Worthless outside it, but still not echoed:
/// `Debug` and `Display` print `<redacted>`.
#[derive(Clone, PartialEq, Eq)]
pub struct PlaceholderValue(String);

impl PlaceholderValue {
    fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for PlaceholderValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<redacted>")
    }
}

impl fmt::Display for PlaceholderValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<redacted>")
    }
}

/// An attach form, checked, with the header name parsed once.
#[derive(Debug, Clone)]
struct Form {
    attach: AttachForm,
    /// The header the form reads: its own for a header form,
    /// `authorization` for basic auth, none for a query parameter.
    header: Option<HeaderName>,
}

impl Form {
    fn new(attach: AttachForm) -> Result<Form, String> {
        let header = match &attach {
            AttachForm::Header { name, .. } => Some(
                HeaderName::from_bytes(name.as_bytes())
                    .map_err(|_| format!("header {name} is not a header name"))?,
            ),
            AttachForm::Basic { .. } => Some(AUTHORIZATION),
            AttachForm::Query { .. } => None,
        };
        Ok(Form { attach, header })
    }
}

/// One credential as the proxy knows it.
#[derive(Debug, Clone)]
struct Entry {
    name: String,
    /// How its secret travels, or why it cannot (the declarations are
    /// invalid, it is not declared, its attach form is not valid).
    form: Result<Form, String>,
    /// This Pod's placeholder for it, when the proxy has one.
    placeholder: Option<PlaceholderValue>,
    /// The secret, or why the proxy does not hold one.
    secret: Result<SecretValue, String>,
}

/// What a request may carry that the proxy looks for: this Pod's
/// placeholders and the secrets themselves.
pub struct Needles {
    prefix: Finder<'static>,
    /// Placeholders by their random part, to the entry they belong to.
    placeholders: HashMap<[u8; PLACEHOLDER_RANDOM_HEX], usize>,
    /// Each secret, with its entry.
    secrets: Vec<(usize, Finder<'static>)>,
    /// Why a placeholder-shaped value that is none of this Pod's known
    /// placeholders is refused (the proxy cannot tell whose it is), or
    /// `None`: such a value is not ours and passes.
    foreign: Option<String>,
    /// The first bytes of every secret, to decide quickly whether a
    /// chunk's tail could begin one.
    firsts: [bool; 256],
    /// The longest needle.
    longest: usize,
}

impl fmt::Debug for Needles {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Needles")
            .field("placeholders", &self.placeholders.len())
            .field("secrets", &self.secrets.len())
            .field("foreign", &self.foreign)
            .finish()
    }
}

/// A needle found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Needle {
    /// A placeholder: of this entry, or (`None`) placeholder-shaped but
    /// of no known credential while [`Needles::foreign`] says why that is
    /// refused.
    Placeholder(Option<usize>),
    /// A secret, of this entry.
    Secret(usize),
}

fn is_lower_hex(b: u8) -> bool {
    b.is_ascii_digit() || (b'a'..=b'f').contains(&b)
}

impl Needles {
    fn new(entries: &[Entry], foreign: Option<String>) -> Needles {
        let mut placeholders = HashMap::new();
        let mut found = Vec::new();
        let mut firsts = [false; 256];
        let mut longest = PLACEHOLDER_LEN;
        for (i, entry) in entries.iter().enumerate() {
            if let Some(p) = &entry.placeholder
                && let Some(random) = p.expose().as_bytes().get(PLACEHOLDER_PREFIX.len()..)
                && let Ok(random) = <[u8; PLACEHOLDER_RANDOM_HEX]>::try_from(random)
            {
                placeholders.entry(random).or_insert(i);
            }
            if let Ok(secret) = &entry.secret {
                let bytes = secret.expose();
                if let Some(first) = bytes.first() {
                    firsts[usize::from(*first)] = true;
                }
                longest = longest.max(bytes.len());
                found.push((i, Finder::new(bytes).into_owned()));
            }
        }
        Needles {
            prefix: Finder::new(PLACEHOLDER_PREFIX.as_bytes()).into_owned(),
            placeholders,
            secrets: found,
            foreign,
            firsts,
            longest,
        }
    }

    /// Needles for the answer to a request that carried `secret`: only it,
    /// to mask where the server echoes it.
    fn only_secret(secret: &SecretValue) -> Needles {
        let entry = Entry {
            name: String::new(),
            form: Err(String::new()),
            placeholder: None,
            secret: Ok(secret.clone()),
        };
        let mut needles = Needles::new(std::slice::from_ref(&entry), None);
        needles.longest = secret.expose().len();
        needles
    }

    /// The first needle in `hay`, if any.
    fn find(&self, hay: &[u8]) -> Option<Needle> {
        for (i, finder) in &self.secrets {
            if finder.find(hay).is_some() {
                return Some(Needle::Secret(*i));
            }
        }
        if self.placeholders.is_empty() && self.foreign.is_none() {
            return None;
        }
        for at in self.prefix.find_iter(hay) {
            let Some(random) = hay.get(at + PLACEHOLDER_PREFIX.len()..at + PLACEHOLDER_LEN) else {
                continue;
            };
            if !random.iter().copied().all(is_lower_hex) {
                continue;
            }
            let known = <[u8; PLACEHOLDER_RANDOM_HEX]>::try_from(random)
                .ok()
                .and_then(|r| self.placeholders.get(&r).copied());
            match known {
                Some(i) => return Some(Needle::Placeholder(Some(i))),
                None if self.foreign.is_some() => return Some(Needle::Placeholder(None)),
                None => {}
            }
        }
        None
    }

    /// Whether `tail` could be the beginning of a needle (shorter than it):
    /// such bytes are held back until the next chunk tells.
    fn could_begin(&self, tail: &[u8]) -> bool {
        let Some(first) = tail.first() else {
            return false;
        };
        let prefix = PLACEHOLDER_PREFIX.as_bytes();
        let placeholders = !self.placeholders.is_empty() || self.foreign.is_some();
        let placeholder = placeholders
            && if tail.len() <= prefix.len() {
                prefix.starts_with(tail)
            } else {
                tail.len() < PLACEHOLDER_LEN
                    && tail.starts_with(prefix)
                    && tail[prefix.len()..].iter().copied().all(is_lower_hex)
            };
        placeholder
            || (self.firsts[usize::from(*first)]
                && self
                    .secrets
                    .iter()
                    .any(|(_, f)| f.needle().len() > tail.len() && f.needle().starts_with(tail)))
    }

    /// How many bytes at the end of `buf` to hold back: the longest tail
    /// that could begin a needle, so that no byte of a needle split across
    /// chunks is passed on before the rest of it arrives, and nothing else
    /// waits.
    fn hold(&self, buf: &[u8]) -> usize {
        let most = buf.len().min(self.longest.saturating_sub(1));
        (1..=most)
            .rev()
            .find(|&n| self.could_begin(&buf[buf.len() - n..]))
            .unwrap_or(0)
    }

    /// Overwrites every secret in `buf` with `*`, byte for byte (lengths,
    /// and so `Content-Length`, stay as they were). Whether any was.
    fn mask(&self, buf: &mut [u8]) -> bool {
        let mut masked = false;
        for (_, finder) in &self.secrets {
            let len = finder.needle().len();
            let at: Vec<usize> = finder.find_iter(buf).collect();
            for start in at {
                buf[start..start + len].fill(b'*');
                masked = true;
            }
        }
        masked
    }
}

/// Where a placeholder sits in its attach form.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Site {
    /// The one value of this header (basic auth: `authorization`).
    Header(HeaderName),
    /// The query parameter at this position (pairs split on `&`).
    Query(usize),
}

/// The credential a request carries: its placeholder is in its attach
/// form, and nowhere else is a placeholder or a secret.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Carried {
    index: usize,
    name: String,
    site: Site,
}

impl Carried {
    /// The credential's name.
    pub fn name(&self) -> &str {
        &self.name
    }
}

/// Why a request is refused for what it carries (misuse), or for a
/// credential the proxy cannot attach (unavailable).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CredentialIssue {
    /// The credential named (empty when no credential can be told).
    pub credential: String,
    /// `CredentialMisuse` or `CredentialUnavailable`.
    pub code: RefusalCode,
    /// What it carries, after `REQUEST: ` in the refusal's reason.
    pub what: String,
}

impl CredentialIssue {
    fn misuse(credential: &str, what: String) -> CredentialIssue {
        CredentialIssue {
            credential: credential.to_string(),
            code: RefusalCode::CredentialMisuse,
            what,
        }
    }

    fn unavailable(credential: &str, what: String) -> CredentialIssue {
        CredentialIssue {
            credential: credential.to_string(),
            code: RefusalCode::CredentialUnavailable,
            what,
        }
    }

    /// The outcome label of `agentgate_proxy_credentials_total`.
    pub fn outcome(&self) -> &'static str {
        match self.code {
            RefusalCode::CredentialMisuse => "misuse",
            _ => "unavailable",
        }
    }

    /// The refusal of `request` (`POST https://host:443/x by /usr/bin/curl`).
    pub fn refusal(&self, request: &str) -> Refusal {
        Refusal::new(self.code, format!("{request}: {}", self.what))
    }
}

/// A credential the policy allowed on a request, with the secret to put in
/// its placeholder's place.
#[derive(Debug, Clone)]
pub struct Attachment {
    name: String,
    form: AttachForm,
    site: Site,
    secret: SecretValue,
}

/// The characters a query-attached secret keeps as they are (RFC 3986's
/// unreserved); every other byte is percent-encoded.
const QUERY_VALUE: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

impl Attachment {
    /// The credential's name.
    pub fn credential(&self) -> &str {
        &self.name
    }

    /// Puts the secret where the placeholder is: the header's value
    /// (marked sensitive, so HTTP/2 never indexes it), the basic auth
    /// header, or the query parameter's value (percent-encoded; the rest
    /// of the target stays byte for byte).
    pub fn apply(&self, headers: &mut HeaderMap, uri: &mut Uri) -> Result<(), String> {
        let secret = self.secret.expose();
        match (&self.form, &self.site) {
            (AttachForm::Header { prefix, suffix, .. }, Site::Header(name)) => {
                let mut value = Vec::with_capacity(prefix.len() + secret.len() + suffix.len());
                value.extend_from_slice(prefix.as_bytes());
                value.extend_from_slice(secret);
                value.extend_from_slice(suffix.as_bytes());
                headers.insert(name.clone(), sensitive(&value)?);
            }
            (AttachForm::Basic { username }, Site::Header(name)) => {
                let mut pair = Vec::with_capacity(username.len() + 1 + secret.len());
                pair.extend_from_slice(username.as_bytes());
                pair.push(b':');
                pair.extend_from_slice(secret);
                let value = format!("Basic {}", general_purpose::STANDARD.encode(&pair));
                headers.insert(name.clone(), sensitive(value.as_bytes())?);
            }
            (AttachForm::Query { .. }, Site::Query(at)) => {
                let (path, query) = (uri.path(), uri.query().unwrap_or_default());
                let encoded: String =
                    percent_encoding::percent_encode(secret, QUERY_VALUE).collect();
                let pairs: Vec<Cow<'_, str>> = query
                    .split('&')
                    .enumerate()
                    .map(|(i, pair)| {
                        if i != *at {
                            return Cow::Borrowed(pair);
                        }
                        let name = pair.split_once('=').map_or(pair, |(name, _)| name);
                        Cow::Owned(format!("{name}={encoded}"))
                    })
                    .collect();
                let target = format!("{path}?{}", pairs.join("&"));
                let mut parts = uri.clone().into_parts();
                parts.path_and_query = Some(
                    PathAndQuery::from_maybe_shared(Bytes::from(target))
                        .map_err(|_| "the query with the secret is not a valid target")?,
                );
                *uri = Uri::from_parts(parts)
                    .map_err(|_| "the query with the secret is not a valid target")?;
            }
            _ => return Err("the placeholder is not where its form puts it".to_string()),
        }
        Ok(())
    }

    /// Masks the secret in the answer to the request it was attached to:
    /// a server that echoes what it received (a header, a debugging
    /// endpoint) must not hand the secret to the agent.
    pub fn response_mask(&self) -> ResponseMask {
        ResponseMask(Arc::new(Needles::only_secret(&self.secret)))
    }
}

fn sensitive(value: &[u8]) -> Result<HeaderValue, String> {
    let mut value =
        HeaderValue::from_bytes(value).map_err(|_| "the secret is not a header value")?;
    value.set_sensitive(true);
    Ok(value)
}

/// Masks an attached secret in a response (request extension, read where
/// the response comes back).
#[derive(Debug, Clone)]
pub struct ResponseMask(Arc<Needles>);

impl ResponseMask {
    /// Masks the secret in every header value.
    pub fn headers(&self, headers: &mut HeaderMap) {
        for value in headers.values_mut() {
            if self.0.find(value.as_bytes()).is_none() {
                continue;
            }
            let mut bytes = value.as_bytes().to_vec();
            self.0.mask(&mut bytes);
            if let Ok(masked) = HeaderValue::from_bytes(&bytes) {
                *value = masked;
            }
        }
    }

    /// Masks the secret in a body as it streams.
    pub fn body<B>(&self, body: B) -> Scanned<B> {
        Scanned::new(body, self.0.clone(), Scan::Mask)
    }
}

/// A lenient base64 for reading `Basic` credentials: with or without
/// padding, as servers accept them.
const BASIC: GeneralPurpose = GeneralPurpose::new(
    &base64::alphabet::STANDARD,
    GeneralPurposeConfig::new().with_decode_padding_mode(DecodePaddingMode::Indifferent),
);

/// The decoded `user:password` of a `Basic` authorization value.
fn basic_decoded(value: &[u8]) -> Option<Vec<u8>> {
    let text = std::str::from_utf8(value).ok()?.trim();
    let (scheme, rest) = text.split_once(' ')?;
    if !scheme.eq_ignore_ascii_case("basic") {
        return None;
    }
    BASIC.decode(rest.trim()).ok()
}

/// The percent-decoded bytes of `text`, when it has an escape.
fn decoded(text: &str) -> Option<Cow<'_, [u8]>> {
    text.contains('%')
        .then(|| Cow::from(percent_decode(text.as_bytes())))
}

/// The sandbox's credentials as the proxy holds them now.
#[derive(Debug, Clone)]
pub struct CredentialSet {
    entries: Vec<Entry>,
    needles: Arc<Needles>,
    /// Why the proxy is not ready: a placeholder it must write (before the
    /// agent starts, so that its subPath mount finds the file) could not
    /// be written.
    pub not_ready: Option<String>,
}

impl Default for CredentialSet {
    fn default() -> CredentialSet {
        CredentialSet::new(Vec::new(), None, None)
    }
}

impl CredentialSet {
    fn new(
        entries: Vec<Entry>,
        foreign: Option<String>,
        not_ready: Option<String>,
    ) -> CredentialSet {
        let needles = Arc::new(Needles::new(&entries, foreign));
        CredentialSet {
            entries,
            needles,
            not_ready,
        }
    }

    /// Whether nothing is declared: requests are not read for
    /// credentials at all.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty() && self.needles.foreign.is_none()
    }

    /// The credentials known, by name, each with why it cannot be
    /// attached (`None`: it can).
    pub fn status(&self) -> Vec<(&str, Option<&str>)> {
        self.entries
            .iter()
            .map(|e| {
                let why = match (&e.form, &e.secret, &e.placeholder) {
                    (Err(why), _, _) | (_, Err(why), _) => Some(why.as_str()),
                    (_, _, None) => Some("the proxy has no placeholder for it"),
                    _ => None,
                };
                (e.name.as_str(), why)
            })
            .collect()
    }

    /// The issue of `needle` found at `at` (a header, the path, the body).
    fn issue(&self, needle: Needle, at: &str) -> CredentialIssue {
        match needle {
            Needle::Secret(i) => {
                let name = self.name_of(i);
                CredentialIssue::misuse(
                    name,
                    format!(
                        "carries the secret of credential {name} itself ({at}); agents hold placeholders, and only the proxy attaches the secret"
                    ),
                )
            }
            Needle::Placeholder(Some(i)) => {
                let name = self.name_of(i);
                match &self.entries[i].form {
                    Ok(_) => CredentialIssue::misuse(
                        name,
                        format!(
                            "carries the placeholder of credential {name} outside its attach form ({at})"
                        ),
                    ),
                    Err(why) => CredentialIssue::unavailable(
                        name,
                        format!(
                            "carries the placeholder of credential {name}, which cannot be attached: {why}"
                        ),
                    ),
                }
            }
            Needle::Placeholder(None) => CredentialIssue::unavailable(
                "",
                format!(
                    "carries a credential placeholder ({at}) that cannot be attached: {}",
                    self.needles.foreign.as_deref().unwrap_or("it is unknown")
                ),
            ),
        }
    }

    fn name_of(&self, i: usize) -> &str {
        self.entries.get(i).map_or("", |e| e.name.as_str())
    }

    fn scan(&self, hay: &[u8], at: impl FnOnce() -> String) -> Result<(), CredentialIssue> {
        match self.needles.find(hay) {
            Some(needle) => Err(self.issue(needle, &at())),
            None => Ok(()),
        }
    }

    /// Which credential a request's head carries (docs/policy-semantics.md
    /// §9.4): the one whose placeholder is in its attach form. A
    /// placeholder anywhere else (another header, a second copy, the path,
    /// the query, inside basic auth with another user name), placeholders
    /// of two credentials, or a secret itself anywhere is misuse; a
    /// placeholder of a credential the proxy cannot attach at all is
    /// unavailable. The body is read as it streams ([`Scanned`]).
    pub fn detect(
        &self,
        uri: &Uri,
        headers: &HeaderMap,
    ) -> Result<Option<Carried>, CredentialIssue> {
        if self.is_empty() {
            return Ok(None);
        }
        let mut carried: Option<Carried> = None;
        for (index, entry) in self.entries.iter().enumerate() {
            let (Ok(form), Some(placeholder)) = (&entry.form, &entry.placeholder) else {
                continue;
            };
            let Some(site) = in_form(form, placeholder.expose(), uri, headers) else {
                continue;
            };
            if let Some(first) = &carried {
                return Err(CredentialIssue::misuse(
                    &entry.name,
                    format!(
                        "carries the placeholders of two credentials, {} and {}; a request carries at most one",
                        first.name, entry.name
                    ),
                ));
            }
            carried = Some(Carried {
                index,
                name: entry.name.clone(),
                site,
            });
        }
        let site = carried.as_ref().map(|c| &c.site);
        for (name, value) in headers {
            if matches!(site, Some(Site::Header(h)) if h == name) {
                // Exactly prefix + placeholder + suffix (or the basic
                // pair): nothing else is in it.
                continue;
            }
            self.scan(value.as_bytes(), || format!("header {name}"))?;
            if name == AUTHORIZATION
                && let Some(pair) = basic_decoded(value.as_bytes())
            {
                self.scan(&pair, || {
                    "header authorization, decoded as basic auth".into()
                })?;
            }
        }
        let path = uri.path();
        self.scan(path.as_bytes(), || "the request path".into())?;
        if let Some(path) = decoded(path) {
            self.scan(&path, || "the request path".into())?;
        }
        if let Some(query) = uri.query() {
            let rest: Cow<'_, str> = match site {
                Some(Site::Query(at)) => Cow::Owned(
                    query
                        .split('&')
                        .enumerate()
                        .filter(|(i, _)| i != at)
                        .map(|(_, pair)| pair)
                        .collect::<Vec<_>>()
                        .join("&"),
                ),
                _ => Cow::Borrowed(query),
            };
            self.scan(rest.as_bytes(), || "the query".into())?;
            if let Some(query) = decoded(&rest) {
                self.scan(&query, || "the query".into())?;
            }
        }
        Ok(carried)
    }

    /// The secret to attach for `carried`, or why the proxy cannot: never
    /// is the request forwarded with its placeholder, or without it.
    pub fn attachment(&self, carried: &Carried) -> Result<Attachment, CredentialIssue> {
        let unavailable = |why: &str| {
            CredentialIssue::unavailable(
                &carried.name,
                format!("credential {} has no secret: {why}", carried.name),
            )
        };
        let entry = self
            .entries
            .get(carried.index)
            .ok_or_else(|| unavailable("it is no longer known"))?;
        let form = entry.form.as_ref().map_err(|why| unavailable(why))?;
        let secret = entry.secret.as_ref().map_err(|why| unavailable(why))?;
        Ok(Attachment {
            name: entry.name.clone(),
            form: form.attach.clone(),
            site: carried.site.clone(),
            secret: secret.clone(),
        })
    }

    /// `text` with every placeholder and secret replaced: what a reason
    /// quoting a request's path or a header may hold before it is logged,
    /// kept or answered.
    pub fn redact<'t>(&self, text: &'t str) -> Cow<'t, str> {
        if self.is_empty() && !text.contains(PLACEHOLDER_PREFIX) {
            return Cow::Borrowed(text);
        }
        let mut bytes = text.as_bytes().to_vec();
        let mut changed = false;
        for (_, finder) in &self.needles.secrets {
            let needle = finder.needle().len();
            // Searched from past each replacement: a secret that reads
            // `<secret>` must not be found in its own replacement forever.
            let mut from = 0;
            while let Some(at) = bytes.get(from..).and_then(|rest| finder.find(rest)) {
                let at = from + at;
                bytes.splice(at..at + needle, b"<secret>".iter().copied());
                from = at + b"<secret>".len();
                changed = true;
            }
        }
        // `<placeholder>` holds no prefix: each replacement ends a match.
        while let Some(at) = self.needles.prefix.find(&bytes) {
            let random = bytes[at + PLACEHOLDER_PREFIX.len()..]
                .iter()
                .take(PLACEHOLDER_RANDOM_HEX)
                .take_while(|b| is_lower_hex(**b))
                .count();
            bytes.splice(
                at..at + PLACEHOLDER_PREFIX.len() + random,
                b"<placeholder>".iter().copied(),
            );
            changed = true;
        }
        if !changed {
            return Cow::Borrowed(text);
        }
        Cow::Owned(String::from_utf8_lossy(&bytes).into_owned())
    }

    /// [`CredentialSet::redact`] on a refusal's reason.
    pub fn redact_refusal(&self, refusal: &mut Refusal) {
        if let Cow::Owned(reason) = self.redact(&refusal.reason) {
            refusal.reason = reason;
        }
    }
}

/// The site of `placeholder` in `form`, if the request has it there and
/// exactly there: one header with exactly the formatted value, one basic
/// authorization with the declared user name, one query parameter of the
/// name whose decoded value is exactly the placeholder.
fn in_form(form: &Form, placeholder: &str, uri: &Uri, headers: &HeaderMap) -> Option<Site> {
    let one = |name: &HeaderName| {
        let mut values = headers.get_all(name).iter();
        let value = values.next()?;
        values.next().is_none().then_some(value)
    };
    match (&form.attach, &form.header) {
        (AttachForm::Header { prefix, suffix, .. }, Some(name)) => {
            let value = one(name)?.as_bytes();
            let inner = value
                .strip_prefix(prefix.as_bytes())?
                .strip_suffix(suffix.as_bytes())?;
            (inner == placeholder.as_bytes()).then(|| Site::Header(name.clone()))
        }
        (AttachForm::Basic { username }, Some(name)) => {
            let pair = basic_decoded(one(name)?.as_bytes())?;
            let (user, password) = pair.split_at_checked(username.len())?;
            (user == username.as_bytes() && password.strip_prefix(b":")? == placeholder.as_bytes())
                .then(|| Site::Header(name.clone()))
        }
        (AttachForm::Query { name }, _) => {
            let mut named = 0;
            let mut at = None;
            for (i, pair) in uri.query()?.split('&').enumerate() {
                let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
                if percent_decode(key.as_bytes()).eq(name.bytes()) {
                    named += 1;
                    if percent_decode(value.as_bytes()).eq(placeholder.bytes()) {
                        at = Some(i);
                    }
                }
            }
            (named == 1).then_some(Site::Query(at?))
        }
        _ => None,
    }
}

/// A body read as it passes on its way to the upstream (request bodies,
/// [`Scan::Refuse`]) or to the agent (the answer to a request a secret was
/// attached to, [`Scan::Mask`]).
pub enum Scan {
    /// A needle in a request body ends the body with an error (the
    /// upstream request is aborted) and records the misuse.
    Refuse(Arc<BodyScan>),
    /// A secret in an answer is masked.
    Mask,
}

/// Logs and counts a body's misuse when it is found.
pub type Report = Box<dyn Fn(&CredentialIssue, &Refusal) + Send + Sync>;

/// What a request body's scan found, shared with the request's handler:
/// a body that fails because it carried a needle is answered as the
/// misuse it is, not as an upstream failure.
pub struct BodyScan {
    set: Arc<CredentialSet>,
    /// The request as reasons name it.
    request: String,
    hit: OnceLock<Refusal>,
    report: Report,
}

impl fmt::Debug for BodyScan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BodyScan")
            .field("request", &self.request)
            .field("hit", &self.hit.get())
            .finish()
    }
}

impl BodyScan {
    /// A scan of the body of `request` (as reasons name it: `POST
    /// https://host:443/x by /usr/bin/curl`) for `set`'s needles;
    /// `report` logs and counts a hit when it happens (the response may
    /// already be on its way).
    pub fn new(set: Arc<CredentialSet>, request: String, report: Report) -> Arc<BodyScan> {
        Arc::new(BodyScan {
            set,
            request,
            hit: OnceLock::new(),
            report,
        })
    }

    /// The misuse refusal, when the body carried a needle.
    pub fn hit(&self) -> Option<Refusal> {
        self.hit.get().cloned()
    }

    fn record(&self, needle: Needle, at: &str) {
        let issue = match needle {
            // Misuse whatever the credential's state: a body is never an
            // attach site.
            Needle::Placeholder(Some(i)) => {
                let name = self.set.name_of(i);
                CredentialIssue::misuse(
                    name,
                    format!(
                        "carries the placeholder of credential {name} outside its attach form ({at})"
                    ),
                )
            }
            needle => self.set.issue(needle, at),
        };
        let refusal = issue.refusal(&self.request);
        if self.hit.set(refusal.clone()).is_ok() {
            (self.report)(&issue, &refusal);
        }
    }
}

/// The error a scanned request body ends with when it carried a needle.
#[derive(Debug, thiserror::Error)]
#[error("the request body carries a credential's placeholder or secret: not forwarded")]
pub struct CredentialInBody;

/// A body scanned as it streams, holding back the bytes at the end of each
/// chunk that could begin a needle until the next chunk (or the end) tells
/// whether they do: no byte of a needle is ever passed on.
pub struct Scanned<B> {
    inner: B,
    needles: Arc<Needles>,
    scan: Scan,
    carry: Bytes,
    queue: VecDeque<Frame<Bytes>>,
    done: bool,
    failed: bool,
}

impl<B> Scanned<B> {
    fn new(inner: B, needles: Arc<Needles>, scan: Scan) -> Scanned<B> {
        Scanned {
            inner,
            needles,
            scan,
            carry: Bytes::new(),
            queue: VecDeque::new(),
            done: false,
            failed: false,
        }
    }

    /// A request body refused when it carries a needle of `scan`.
    pub fn refusing(inner: B, scan: Arc<BodyScan>) -> Scanned<B> {
        let needles = scan.set.needles.clone();
        Scanned::new(inner, needles, Scan::Refuse(scan))
    }

    /// Scans `data` after the held-back bytes: `Err` on a needle
    /// (refusing), otherwise queues what may pass. Bytes are copied only
    /// to join a held-back tail or to mask.
    fn push(&mut self, data: Bytes) -> Result<(), Needle> {
        let mut buf = if self.carry.is_empty() {
            data
        } else {
            let mut joined = BytesMut::with_capacity(self.carry.len() + data.len());
            joined.extend_from_slice(&self.carry);
            joined.extend_from_slice(&data);
            joined.freeze()
        };
        match &self.scan {
            Scan::Refuse(_) => {
                if let Some(needle) = self.needles.find(&buf) {
                    return Err(needle);
                }
            }
            Scan::Mask => {
                if self.needles.find(&buf).is_some() {
                    let mut masked = BytesMut::from(&buf[..]);
                    self.needles.mask(&mut masked);
                    buf = masked.freeze();
                }
            }
        }
        let keep = self.needles.hold(&buf);
        let out = buf.slice(..buf.len() - keep);
        self.carry = buf.slice(buf.len() - keep..);
        if !out.is_empty() {
            self.queue.push_back(Frame::data(out));
        }
        Ok(())
    }

    fn trailers(&mut self, mut trailers: HeaderMap) -> Result<(), Needle> {
        match &self.scan {
            Scan::Refuse(_) => {
                for value in trailers.values() {
                    if let Some(needle) = self.needles.find(value.as_bytes()) {
                        return Err(needle);
                    }
                }
            }
            Scan::Mask => ResponseMask(self.needles.clone()).headers(&mut trailers),
        }
        self.flush();
        self.queue.push_back(Frame::trailers(trailers));
        Ok(())
    }

    fn flush(&mut self) {
        if !self.carry.is_empty() {
            let rest = std::mem::take(&mut self.carry);
            self.queue.push_back(Frame::data(rest));
        }
    }

    fn fail(&mut self, needle: Needle, at: &str) -> BodyError {
        self.failed = true;
        self.queue.clear();
        self.carry = Bytes::new();
        if let Scan::Refuse(scan) = &self.scan {
            scan.record(needle, at);
        }
        Box::new(CredentialInBody)
    }
}

impl<B> Body for Scanned<B>
where
    B: Body<Data = Bytes, Error = BodyError> + Unpin,
{
    type Data = Bytes;
    type Error = BodyError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BodyError>>> {
        let this = &mut *self;
        loop {
            if this.failed {
                return Poll::Ready(None);
            }
            if let Some(frame) = this.queue.pop_front() {
                return Poll::Ready(Some(Ok(frame)));
            }
            if this.done {
                return Poll::Ready(None);
            }
            match Pin::new(&mut this.inner).poll_frame(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(None) => {
                    this.done = true;
                    this.flush();
                }
                Poll::Ready(Some(Err(e))) => {
                    this.done = true;
                    return Poll::Ready(Some(Err(e)));
                }
                Poll::Ready(Some(Ok(frame))) => match frame.into_data() {
                    Ok(data) => {
                        if let Err(needle) = this.push(data) {
                            return Poll::Ready(Some(Err(this.fail(needle, "the body"))));
                        }
                    }
                    // A frame of another kind than data or trailers has
                    // nothing to read in it.
                    Err(frame) => {
                        if let Ok(trailers) = frame.into_trailers()
                            && let Err(needle) = this.trailers(trailers)
                        {
                            return Poll::Ready(Some(Err(this.fail(needle, "a trailer"))));
                        }
                    }
                },
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.failed
            || (self.queue.is_empty() && self.carry.is_empty() && self.inner.is_end_stream())
    }

    fn size_hint(&self) -> SizeHint {
        // The bytes are the same bytes (masking keeps lengths); only
        // their timing changes.
        self.inner.size_hint()
    }
}

/// Where the sandbox's credentials come from.
#[derive(Debug, Clone)]
pub struct CredentialSource {
    /// `credentials.json` beside the policy: the declarations (no secrets).
    pub declarations: PathBuf,
    /// `--credential-secrets`: one file per credential, named by it,
    /// holding the secret.
    pub secrets: Option<PathBuf>,
    /// `--placeholders`: one file per credential, named by it, holding
    /// this Pod's placeholder, written by the proxy.
    pub placeholders: Option<PathBuf>,
}

/// What one poll read, compared with the last to tell a change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Observed {
    declarations: Option<Vec<u8>>,
    secrets: BTreeMap<String, Result<SecretValue, String>>,
    placeholders: BTreeMap<String, PlaceholderValue>,
    /// Why a placeholder could not be written.
    written: Result<(), String>,
}

impl Observed {
    /// The text of `credentials.json`, when there is one.
    pub fn declarations(&self) -> Option<&[u8]> {
        self.declarations.as_deref()
    }
}

impl Default for Observed {
    fn default() -> Observed {
        Observed {
            declarations: None,
            secrets: BTreeMap::new(),
            placeholders: BTreeMap::new(),
            written: Ok(()),
        }
    }
}

/// Parses `credentials.json`: a list of declarations with distinct valid
/// names (the operator checked them; a file that is not that cannot be
/// trusted, so every credential is unavailable).
pub fn parse_declarations(text: &[u8]) -> Result<Vec<Credential>, String> {
    let declared: Vec<Credential> =
        serde_json::from_slice(text).map_err(|e| format!("credentials.json: {e}"))?;
    let mut names = std::collections::BTreeSet::new();
    for c in &declared {
        check_credential_name(&c.name).map_err(|e| format!("credentials.json: {}", e.message))?;
        if !names.insert(c.name.as_str()) {
            return Err(format!(
                "credentials.json: credential {} is declared twice",
                c.name
            ));
        }
    }
    Ok(declared)
}

/// A fresh placeholder: the prefix and 128 bits of OS randomness in
/// lower-case hex.
pub fn fresh_placeholder() -> Result<String, String> {
    let mut random = [0u8; PLACEHOLDER_RANDOM_HEX / 2];
    getrandom::fill(&mut random).map_err(|e| format!("no OS randomness: {e}"))?;
    let mut value = String::with_capacity(PLACEHOLDER_LEN);
    value.push_str(PLACEHOLDER_PREFIX);
    for b in random {
        value.push_str(&format!("{b:02x}"));
    }
    Ok(value)
}

/// Makes sure `dir/name` holds a placeholder: an existing one is kept (the
/// emptyDir outlives a proxy restart, and the agent already holds it),
/// anything else is replaced by a fresh one, mode 0644, through a
/// temporary file and a rename so that no reader sees half of one.
pub fn ensure_placeholder(dir: &Path, name: &str) -> Result<String, String> {
    use std::io::Write;
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    let path = dir.join(name);
    if let Ok(text) = std::fs::read_to_string(&path)
        && is_placeholder(&text)
    {
        return Ok(text);
    }
    let value = fresh_placeholder()?;
    let temporary = dir.join(format!(".{name}.partial"));
    let failed = |what: &str, e: std::io::Error| format!("{what} {}: {e}", temporary.display());
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o644)
        .open(&temporary)
        .map_err(|e| failed("creating", e))?;
    file.write_all(value.as_bytes())
        .map_err(|e| failed("writing", e))?;
    // The umask may have narrowed the mode: agents of any uid read it.
    std::fs::set_permissions(&temporary, std::fs::Permissions::from_mode(0o644))
        .map_err(|e| failed("setting the mode of", e))?;
    std::fs::rename(&temporary, &path).map_err(|e| {
        format!(
            "renaming {} to {}: {e}",
            temporary.display(),
            path.display()
        )
    })?;
    Ok(value)
}

impl CredentialSource {
    /// The source beside a policy file, without secrets or placeholders.
    pub fn beside(policy: &Path) -> CredentialSource {
        CredentialSource {
            declarations: policy
                .parent()
                .unwrap_or_else(|| Path::new("."))
                .join("credentials.json"),
            secrets: None,
            placeholders: None,
        }
    }

    /// Reads the declarations, the secrets and the placeholders, writing
    /// a placeholder for every declared credential that has none.
    pub fn observe(&self) -> Observed {
        let mut observed = Observed {
            declarations: std::fs::read(&self.declarations).ok(),
            ..Observed::default()
        };
        let Some(text) = &observed.declarations else {
            return observed;
        };
        let declared = parse_declarations(text).unwrap_or_default();
        let mut problems = Vec::new();
        if let Some(dir) = &self.placeholders {
            for c in &declared {
                if let Err(e) = ensure_placeholder(dir, &c.name) {
                    problems.push(format!("placeholder of credential {}: {e}", c.name));
                }
            }
            // Every placeholder file there: the declared ones, and those
            // of credentials declared before (still this Pod's).
            if let Ok(listing) = std::fs::read_dir(dir) {
                for file in listing.flatten() {
                    let name = file.file_name().to_string_lossy().into_owned();
                    if check_credential_name(&name).is_err() {
                        continue;
                    }
                    if let Ok(text) = std::fs::read_to_string(file.path())
                        && is_placeholder(&text)
                    {
                        observed.placeholders.insert(name, PlaceholderValue(text));
                    }
                }
            }
        }
        if !problems.is_empty() {
            observed.written = Err(problems.join("; "));
        }
        for c in &declared {
            let secret = match &self.secrets {
                None => Err("this proxy has no --credential-secrets".to_string()),
                Some(dir) => match std::fs::read(dir.join(&c.name)) {
                    Ok(raw) => Ok(SecretValue::from_file(&raw)),
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => Err(format!(
                        "key {} of Secret {} is missing",
                        c.secret_ref.key, c.secret_ref.name
                    )),
                    Err(e) => Err(format!(
                        "key {} of Secret {} cannot be read: {}",
                        c.secret_ref.key,
                        c.secret_ref.name,
                        e.kind()
                    )),
                },
            };
            observed.secrets.insert(c.name.clone(), secret);
        }
        observed
    }

    /// The credentials `observed` describes.
    pub fn build(&self, observed: &Observed) -> CredentialSet {
        let not_ready = observed.written.clone().err();
        let Some(text) = &observed.declarations else {
            return CredentialSet::new(Vec::new(), None, not_ready);
        };
        let declared = match parse_declarations(text) {
            Ok(declared) => declared,
            Err(e) => {
                // Never absent-and-free: every placeholder of this Pod is
                // refused as unavailable, and so is any placeholder at all.
                let why = format!("the declarations are invalid ({e})");
                let entries = observed
                    .placeholders
                    .iter()
                    .map(|(name, p)| Entry {
                        name: name.clone(),
                        form: Err(why.clone()),
                        placeholder: Some(p.clone()),
                        secret: Err(why.clone()),
                    })
                    .collect();
                return CredentialSet::new(entries, Some(why), not_ready);
            }
        };
        let mut entries: Vec<Entry> = declared
            .iter()
            .map(|c| {
                let form = c
                    .attach_form()
                    .map_err(|e| format!("its attach form is invalid: {e}"))
                    .and_then(Form::new);
                let secret = match (&form, observed.secrets.get(&c.name)) {
                    (_, None) => Err("it has not been read yet".to_string()),
                    (_, Some(Err(why))) => Err(why.clone()),
                    (Err(why), Some(Ok(_))) => Err(why.clone()),
                    (Ok(form), Some(Ok(secret))) => {
                        let bytes = secret.expose();
                        form.attach
                            .accepts_secret(bytes)
                            .map_err(|e| {
                                format!(
                                    "key {} of Secret {} is not a value a {} can carry: {e}",
                                    c.secret_ref.key,
                                    c.secret_ref.name,
                                    form.attach.describe()
                                )
                            })
                            .map(|()| secret.clone())
                    }
                };
                Entry {
                    name: c.name.clone(),
                    form,
                    placeholder: observed.placeholders.get(&c.name).cloned(),
                    secret,
                }
            })
            .collect();
        for (name, placeholder) in &observed.placeholders {
            if declared.iter().any(|c| &c.name == name) {
                continue;
            }
            let why = format!("credential {name} is not declared (credentials.json)");
            entries.push(Entry {
                name: name.clone(),
                form: Err(why.clone()),
                placeholder: Some(placeholder.clone()),
                secret: Err(why),
            });
        }
        // Without --placeholders the proxy knows none: any placeholder is
        // one it could not attach.
        let foreign = (self.placeholders.is_none() && !declared.is_empty())
            .then(|| "this proxy has no --placeholders, so it attaches no credential".to_string());
        CredentialSet::new(entries, foreign, not_ready)
    }
}

/// A set from declarations, placeholders and secrets in memory (a
/// credential without a secret here has its key missing), as the watcher
/// would build it from files.
#[cfg(test)]
pub(crate) fn testing_set(
    declarations: &serde_json::Value,
    placeholders: &[(&str, &str)],
    secrets: &[(&str, &[u8])],
) -> CredentialSet {
    let source = CredentialSource {
        declarations: PathBuf::from("/nonexistent/credentials.json"),
        secrets: Some(PathBuf::from("/nonexistent/secrets")),
        placeholders: Some(PathBuf::from("/nonexistent/placeholders")),
    };
    let mut observed = Observed {
        declarations: Some(declarations.to_string().into_bytes()),
        ..Observed::default()
    };
    for (name, p) in placeholders {
        observed
            .placeholders
            .insert(name.to_string(), PlaceholderValue(p.to_string()));
        let secret = secrets
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, s)| SecretValue::from_file(s))
            .ok_or_else(|| "key k of Secret s is missing".to_string());
        observed.secrets.insert(name.to_string(), secret);
    }
    source.build(&observed)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use http_body_util::BodyExt;

    pub(crate) const GH: &str = "agentgate-placeholder-0123456789abcdef0123456789abcdef";
    pub(crate) const NPM: &str = "agentgate-placeholder-fedcba9876543210fedcba9876543210";
    pub(crate) const API: &str = "agentgate-placeholder-00000000000000001111111111111111";
    const GH_SECRET: &str = "ghp_realsecret0123456789";

    /// github (header `Authorization: Bearer {}`), npm (basic, user
    /// `npm`), api (query `access_token`), each with its placeholder and
    /// secret.
    pub(crate) fn set() -> CredentialSet {
        set_with(&[
            ("github", GH_SECRET.as_bytes()),
            ("npm", b"npm_secret_value"),
            ("api", "api sec/ret&ä".as_bytes()),
        ])
    }

    fn set_with(secrets: &[(&str, &[u8])]) -> CredentialSet {
        let declarations = serde_json::json!([
            {"name": "github", "secretRef": {"name": "gh", "key": "token"},
             "placeholder": {"env": "GITHUB_TOKEN"},
             "attach": {"header": {"name": "Authorization", "format": "Bearer {}"}}},
            {"name": "npm", "secretRef": {"name": "npm", "key": "password"},
             "placeholder": {"env": "NPM_TOKEN"}, "attach": {"basic": {"username": "npm"}}},
            {"name": "api", "secretRef": {"name": "api", "key": "key"},
             "placeholder": {"file": "/home/a/key"}, "attach": {"query": {"name": "access_token"}}},
        ]);
        testing_set(
            &declarations,
            &[("github", GH), ("npm", NPM), ("api", API)],
            secrets,
        )
    }

    fn head(uri: &str, headers: &[(&str, &str)]) -> (Uri, HeaderMap) {
        let mut map = HeaderMap::new();
        for (n, v) in headers {
            map.append(
                HeaderName::from_bytes(n.as_bytes()).unwrap(),
                HeaderValue::from_str(v).unwrap(),
            );
        }
        (uri.parse().unwrap(), map)
    }

    fn detect(uri: &str, headers: &[(&str, &str)]) -> Result<Option<String>, CredentialIssue> {
        let (uri, headers) = head(uri, headers);
        set()
            .detect(&uri, &headers)
            .map(|c| c.map(|c| c.name().to_string()))
    }

    fn misuse(result: Result<Option<String>, CredentialIssue>) -> String {
        let issue = result.expect_err("misuse");
        assert_eq!(issue.code, RefusalCode::CredentialMisuse, "{issue:?}");
        assert!(!issue.what.contains(GH) && !issue.what.contains(GH_SECRET));
        issue.what
    }

    fn basic(user: &str, password: &str) -> String {
        format!(
            "Basic {}",
            general_purpose::STANDARD.encode(format!("{user}:{password}"))
        )
    }

    #[test]
    fn each_attach_form_is_recognised_exactly() {
        let bearer = format!("Bearer {GH}");
        assert_eq!(
            detect("/x", &[("authorization", &bearer)]),
            Ok(Some("github".into()))
        );
        assert_eq!(
            detect("/x", &[("authorization", &basic("npm", NPM))]),
            Ok(Some("npm".into()))
        );
        // The scheme is case-insensitive; padding may be left out.
        let unpadded = basic("npm", NPM).replace("Basic", "bAsIc").replace('=', "");
        assert_eq!(
            detect("/x", &[("authorization", &unpadded)]),
            Ok(Some("npm".into()))
        );
        assert_eq!(
            detect(&format!("/x?a=1&access_token={API}&b=2"), &[]),
            Ok(Some("api".into()))
        );
        // Percent-encoded, it is the same value.
        let encoded = API.replace('a', "%61");
        assert_eq!(
            detect(&format!("/x?access_token={encoded}"), &[]),
            Ok(Some("api".into()))
        );
        assert_eq!(
            detect("/x", &[("authorization", "Bearer ghp_other")]),
            Ok(None)
        );
        // Not ours: a placeholder-shaped value of another Pod passes.
        let foreign = "agentgate-placeholder-99999999999999999999999999999999";
        assert_eq!(detect(&format!("/x?q={foreign}"), &[]), Ok(None));
    }

    #[test]
    fn a_placeholder_anywhere_else_is_misuse() {
        let what = misuse(detect("/x", &[("x-token", GH)]));
        assert!(
            what.contains(
                "placeholder of credential github outside its attach form (header x-token)"
            ),
            "{what}"
        );
        // In the query when its form is a header.
        let what = misuse(detect(&format!("/x?token={GH}"), &[]));
        assert!(what.contains("(the query)"), "{what}");
        // In the path, raw or escaped.
        let what = misuse(detect(&format!("/repos/{GH}"), &[]));
        assert!(what.contains("(the request path)"), "{what}");
        let what = misuse(detect(&format!("/repos/{}", GH.replace('a', "%61")), &[]));
        assert!(what.contains("(the request path)"), "{what}");
        // The header's value must be exactly the format.
        let what = misuse(detect(
            "/x",
            &[("authorization", &format!("Bearer {GH} x"))],
        ));
        assert!(what.contains("header authorization"), "{what}");
        // Basic auth with another user name.
        let what = misuse(detect("/x", &[("authorization", &basic("root", NPM))]));
        assert!(what.contains("credential npm"), "{what}");
        assert!(what.contains("decoded as basic auth"), "{what}");
        // A second copy in the attach header.
        let bearer = format!("Bearer {GH}");
        let what = misuse(detect(
            "/x",
            &[("authorization", &bearer), ("authorization", &bearer)],
        ));
        assert!(what.contains("header authorization"), "{what}");
        // Two query parameters of the attach name.
        misuse(detect(
            &format!("/x?access_token={API}&access_token=1"),
            &[],
        ));
        // In the query's other parameters beside an attached one.
        misuse(detect(&format!("/x?access_token={API}&x={API}"), &[]));
    }

    #[test]
    fn two_credentials_in_one_request_are_misuse() {
        let bearer = format!("Bearer {GH}");
        let what = misuse(detect(
            &format!("/x?access_token={API}"),
            &[("authorization", &bearer)],
        ));
        assert!(
            what.contains("placeholders of two credentials, github and api"),
            "{what}"
        );
        // One attached, another's placeholder elsewhere.
        let what = misuse(detect("/x", &[("authorization", &bearer), ("x-npm", NPM)]));
        assert!(what.contains("credential npm"), "{what}");
    }

    #[test]
    fn a_secret_itself_anywhere_is_misuse_and_never_echoed() {
        for (uri, headers) in [
            ("/x".to_string(), vec![("x-api-key", GH_SECRET.to_string())]),
            (format!("/x?k={GH_SECRET}"), vec![]),
            (format!("/{GH_SECRET}"), vec![]),
            ("/x".into(), vec![("authorization", basic("me", GH_SECRET))]),
        ] {
            let headers: Vec<(&str, &str)> =
                headers.iter().map(|(n, v)| (*n, v.as_str())).collect();
            let what = misuse(detect(&uri, &headers));
            assert!(
                what.contains("the secret of credential github itself"),
                "{what}"
            );
        }
        // A secret with a space and non-ASCII bytes, percent-encoded.
        let what = misuse(detect("/x?k=api%20sec%2Fret%26%C3%A4", &[]));
        assert!(what.contains("credential api"), "{what}");
    }

    #[test]
    fn attaching_puts_the_secret_in_the_placeholders_place() {
        let s = set();
        let attach = |uri: &str, headers: &[(&str, &str)]| {
            let (mut uri, mut headers) = head(uri, headers);
            let carried = s.detect(&uri, &headers).unwrap().unwrap();
            s.attachment(&carried)
                .unwrap()
                .apply(&mut headers, &mut uri)
                .unwrap();
            (uri, headers)
        };
        let (_, h) = attach("/x", &[("authorization", &format!("Bearer {GH}"))]);
        let value = h.get("authorization").unwrap();
        assert_eq!(value, &format!("Bearer {GH_SECRET}"));
        assert!(value.is_sensitive());
        let (_, h) = attach("/x", &[("authorization", &basic("npm", NPM))]);
        assert_eq!(
            h.get("authorization").unwrap(),
            &basic("npm", "npm_secret_value")
        );
        let (uri, _) = attach(&format!("/x?a=%41&access_token={API}&b=c+d"), &[]);
        assert_eq!(
            uri.path_and_query().unwrap().as_str(),
            "/x?a=%41&access_token=api%20sec%2Fret%26%C3%A4&b=c+d"
        );
        // The attachment prints no secret.
        let (u, hs) = head("/x", &[("authorization", &format!("Bearer {GH}"))]);
        let carried = s.detect(&u, &hs).unwrap().unwrap();
        let shown = format!("{:?}", s.attachment(&carried).unwrap());
        assert!(
            !shown.contains(GH_SECRET) && shown.contains("<redacted>"),
            "{shown}"
        );
        assert!(!format!("{s:?}").contains(GH_SECRET));
        assert!(!format!("{s:?}").contains(GH));
    }

    #[test]
    fn a_missing_or_invalid_secret_makes_the_credential_unavailable() {
        let s = set_with(&[("npm", b"npm_secret_value")]);
        let (uri, headers) = head("/x", &[("authorization", &format!("Bearer {GH}"))]);
        let carried = s.detect(&uri, &headers).unwrap().unwrap();
        let issue = s.attachment(&carried).unwrap_err();
        assert_eq!(issue.code, RefusalCode::CredentialUnavailable);
        assert_eq!(
            issue.what,
            "credential github has no secret: key k of Secret s is missing"
        );
        // A line end inside the value: a header cannot carry it.
        let s = set_with(&[("github", b"ghp_abcdefgh\nX-Evil: 1\n")]);
        let carried = s.detect(&uri, &headers).unwrap().unwrap();
        let issue = s.attachment(&carried).unwrap_err();
        assert_eq!(issue.code, RefusalCode::CredentialUnavailable);
        assert!(issue.what.contains("can carry"), "{}", issue.what);
        assert!(!issue.what.contains("ghp_"), "{}", issue.what);
        // Too short to search for.
        let s = set_with(&[("github", b"abc")]);
        let carried = s.detect(&uri, &headers).unwrap().unwrap();
        assert!(s.attachment(&carried).unwrap_err().what.contains("shorter"));
    }

    async fn scanned(set: &Arc<CredentialSet>, chunks: &[&[u8]]) -> (Vec<u8>, Option<Refusal>) {
        let reported = Arc::new(std::sync::Mutex::new(0));
        let counter = reported.clone();
        let scan = BodyScan::new(
            set.clone(),
            "POST https://a.io:443/x by /usr/bin/curl".into(),
            Box::new(move |_, _| *counter.lock().unwrap() += 1),
        );
        let frames: Vec<Result<Frame<Bytes>, BodyError>> = chunks
            .iter()
            .map(|c| Ok(Frame::data(Bytes::copy_from_slice(c))))
            .collect();
        let mut body = Scanned::refusing(Frames(frames.into()), scan.clone());
        let mut passed = Vec::new();
        while let Some(frame) = body.frame().await {
            match frame {
                Ok(frame) => passed.extend_from_slice(frame.data_ref().unwrap()),
                Err(_) => break,
            }
        }
        let hit = scan.hit();
        assert_eq!(*reported.lock().unwrap(), usize::from(hit.is_some()));
        (passed, hit)
    }

    /// A body of these frames, one per poll.
    struct Frames(VecDeque<Result<Frame<Bytes>, BodyError>>);

    impl Body for Frames {
        type Data = Bytes;
        type Error = BodyError;

        fn poll_frame(
            mut self: Pin<&mut Self>,
            _: &mut Context<'_>,
        ) -> Poll<Option<Result<Frame<Bytes>, BodyError>>> {
            Poll::Ready(self.0.pop_front())
        }
    }

    #[tokio::test]
    async fn a_needle_split_across_chunks_is_found_at_every_split_point() {
        let set = Arc::new(set());
        for needle in [GH, GH_SECRET] {
            let body = format!("{{\"text\": \"look: {needle} !\"}}");
            let bytes = body.as_bytes();
            for split in 0..=bytes.len() {
                let (passed, hit) = scanned(&set, &[&bytes[..split], &bytes[split..]]).await;
                let hit = hit.unwrap_or_else(|| panic!("split at {split}"));
                assert_eq!(hit.code, RefusalCode::CredentialMisuse);
                assert!(hit.reason.contains("credential github"), "{}", hit.reason);
                assert!(hit.reason.contains("(the body)"), "{}", hit.reason);
                // No byte of the needle passed.
                let start = body.find(needle).unwrap();
                assert!(
                    passed.len() <= start,
                    "split at {split}: passed {} bytes",
                    passed.len()
                );
            }
        }
        // Three chunks around the needle too.
        let body = format!("a{GH}b");
        let b = body.as_bytes();
        let (_, hit) = scanned(&set, &[&b[..5], &b[5..30], &b[30..]]).await;
        assert!(hit.is_some());
    }

    #[tokio::test]
    async fn clean_bodies_pass_whole_and_nothing_waits_that_could_not_begin_a_needle() {
        let set = Arc::new(set());
        let body = b"{\"a\": \"agentgate-placeholder-but not one\"}";
        for split in 0..=body.len() {
            let (passed, hit) = scanned(&set, &[&body[..split], &body[split..]]).await;
            assert!(hit.is_none());
            assert_eq!(passed, body, "split at {split}");
        }
        let needles = &set.needles;
        assert_eq!(needles.hold(b"xyz}"), 0);
        assert_eq!(needles.hold(b"xyz agentgate-pl"), "agentgate-pl".len());
        assert_eq!(needles.hold(b"x ghp_real"), "ghp_real".len());
    }

    #[tokio::test]
    async fn answers_have_an_attached_secret_masked() {
        let s = set();
        let (uri, headers) = head("/x", &[("authorization", &format!("Bearer {GH}"))]);
        let carried = s.detect(&uri, &headers).unwrap().unwrap();
        let mask = s.attachment(&carried).unwrap().response_mask();
        let echo = format!("{{\"authorization\": \"Bearer {GH_SECRET}\"}}");
        let b = echo.as_bytes();
        for split in 0..=b.len() {
            let frames: Vec<Result<Frame<Bytes>, BodyError>> = vec![
                Ok(Frame::data(Bytes::copy_from_slice(&b[..split]))),
                Ok(Frame::data(Bytes::copy_from_slice(&b[split..]))),
            ];
            let body = mask.body(Frames(frames.into()));
            let out = body.collect().await.unwrap().to_bytes();
            assert_eq!(out.len(), b.len());
            assert!(!String::from_utf8_lossy(&out).contains(GH_SECRET));
            assert!(String::from_utf8_lossy(&out).contains("Bearer ****"));
        }
        let mut h = HeaderMap::new();
        h.insert(
            "x-echo",
            HeaderValue::from_str(&format!("t={GH_SECRET}")).unwrap(),
        );
        mask.headers(&mut h);
        assert_eq!(h.get("x-echo").unwrap(), "t=************************");
    }

    #[test]
    fn reasons_are_redacted() {
        let s = set();
        let text = format!("GET /{GH}/{GH_SECRET}/agentgate-placeholder-12 x");
        assert_eq!(
            s.redact(&text),
            "GET /<placeholder>/<secret>/<placeholder> x"
        );
        assert!(matches!(s.redact("GET /x"), Cow::Borrowed(_)));
        // A secret that reads like its own replacement ends.
        let odd = set_with(&[("github", b"<secret>")]);
        assert_eq!(odd.redact("a <secret> b"), "a <secret> b");
    }

    fn temp(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!(
            "agentgate-credentials-{name}-{}",
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("secrets")).unwrap();
        std::fs::create_dir_all(dir.join("placeholders")).unwrap();
        dir
    }

    fn source(dir: &Path) -> CredentialSource {
        CredentialSource {
            declarations: dir.join("credentials.json"),
            secrets: Some(dir.join("secrets")),
            placeholders: Some(dir.join("placeholders")),
        }
    }

    const DECLARED: &str = r#"[{"name": "github", "secretRef": {"name": "gh", "key": "token"},
        "placeholder": {"env": "GITHUB_TOKEN"},
        "attach": {"header": {"name": "Authorization", "format": "Bearer {}"}}}]"#;

    #[test]
    fn placeholders_are_written_once_and_kept() {
        use std::os::unix::fs::PermissionsExt;
        let dir = temp("placeholders");
        std::fs::write(dir.join("credentials.json"), DECLARED).unwrap();
        let source = source(&dir);
        let first = source.observe();
        let file = dir.join("placeholders/github");
        let written = std::fs::read_to_string(&file).unwrap();
        assert!(is_placeholder(&written), "{written}");
        assert_eq!(
            std::fs::metadata(&file).unwrap().permissions().mode() & 0o777,
            0o644
        );
        // Kept across polls and restarts: the agent holds it.
        assert_eq!(source.observe(), first);
        assert_eq!(std::fs::read_to_string(&file).unwrap(), written);
        // Two fresh ones differ.
        assert_ne!(fresh_placeholder().unwrap(), fresh_placeholder().unwrap());
        // Something that is not a placeholder is replaced.
        std::fs::write(&file, "hello").unwrap();
        source.observe();
        assert!(is_placeholder(&std::fs::read_to_string(&file).unwrap()));
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_rotated_secret_is_attached_on_the_next_poll() {
        let dir = temp("rotation");
        std::fs::write(dir.join("credentials.json"), DECLARED).unwrap();
        std::fs::write(dir.join("secrets/github"), "ghp_first_value\n").unwrap();
        let source = source(&dir);
        let placeholder = {
            source.observe();
            std::fs::read_to_string(dir.join("placeholders/github")).unwrap()
        };
        let attached = |set: &CredentialSet| {
            let (mut uri, mut headers) =
                head("/x", &[("authorization", &format!("Bearer {placeholder}"))]);
            let carried = set.detect(&uri, &headers).unwrap().unwrap();
            match set.attachment(&carried) {
                Ok(a) => {
                    a.apply(&mut headers, &mut uri).unwrap();
                    Ok(headers
                        .get("authorization")
                        .unwrap()
                        .to_str()
                        .unwrap()
                        .to_string())
                }
                Err(issue) => Err(issue),
            }
        };
        let before = source.observe();
        assert_eq!(
            attached(&source.build(&before)),
            Ok("Bearer ghp_first_value".into())
        );
        // The kubelet swaps the file: the next poll sees a change.
        std::fs::write(dir.join("secrets/.tmp"), "ghp_second_value").unwrap();
        std::fs::rename(dir.join("secrets/.tmp"), dir.join("secrets/github")).unwrap();
        let after = source.observe();
        assert_ne!(after, before);
        let set = source.build(&after);
        assert_eq!(attached(&set), Ok("Bearer ghp_second_value".into()));
        // The old secret is no longer a needle, the new one is.
        assert!(set.needles.find(b"ghp_first_value").is_none());
        assert!(set.needles.find(b"ghp_second_value").is_some());
        // Removed: unavailable, naming the Secret's key.
        std::fs::remove_file(dir.join("secrets/github")).unwrap();
        let issue = attached(&source.build(&source.observe())).unwrap_err();
        assert_eq!(
            issue.what,
            "credential github has no secret: key token of Secret gh is missing"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn invalid_declarations_make_every_placeholder_unavailable() {
        let dir = temp("invalid");
        std::fs::write(dir.join("credentials.json"), DECLARED).unwrap();
        let source = source(&dir);
        source.observe();
        let placeholder = std::fs::read_to_string(dir.join("placeholders/github")).unwrap();
        std::fs::write(dir.join("credentials.json"), "[{\"name\": 1}]").unwrap();
        let set = source.build(&source.observe());
        assert!(!set.is_empty());
        for (uri, header) in [
            ("/x".to_string(), format!("Bearer {placeholder}")),
            (
                "/x".to_string(),
                "Bearer agentgate-placeholder-99999999999999999999999999999999".to_string(),
            ),
        ] {
            let (uri, headers) = head(&uri, &[("authorization", &header)]);
            let issue = set.detect(&uri, &headers).unwrap_err();
            assert_eq!(issue.code, RefusalCode::CredentialUnavailable, "{issue:?}");
            assert!(issue.what.contains("invalid"), "{}", issue.what);
        }
        // Absent: nothing is declared, nothing is read.
        std::fs::remove_file(dir.join("credentials.json")).unwrap();
        assert!(source.build(&source.observe()).is_empty());
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn without_placeholders_or_secrets_nothing_is_attached() {
        let dir = temp("bare");
        std::fs::write(dir.join("credentials.json"), DECLARED).unwrap();
        let bare = CredentialSource::beside(&dir.join("policy.yaml"));
        let set = bare.build(&bare.observe());
        let (uri, headers) = head("/x", &[("authorization", &format!("Bearer {GH}"))]);
        let issue = set.detect(&uri, &headers).unwrap_err();
        assert_eq!(issue.code, RefusalCode::CredentialUnavailable);
        assert!(issue.what.contains("--placeholders"), "{}", issue.what);
        // Placeholders but no secrets: detected, then unavailable.
        let source = CredentialSource {
            secrets: None,
            ..source(&dir)
        };
        let set = source.build(&source.observe());
        let placeholder = std::fs::read_to_string(dir.join("placeholders/github")).unwrap();
        let (uri, headers) = head("/x", &[("authorization", &format!("Bearer {placeholder}"))]);
        let carried = set.detect(&uri, &headers).unwrap().unwrap();
        let issue = set.attachment(&carried).unwrap_err();
        assert!(
            issue.what.contains("--credential-secrets"),
            "{}",
            issue.what
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}
