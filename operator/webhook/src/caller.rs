//! Who may ask `/v1/decide` about a sandbox (docs/webhook.md, "Who may
//! ask"). The answer reveals what a sandbox's committed policy allows, so
//! the caller proves who it is with a bearer token (a TokenReview) and is
//! either the sandbox's own agent or someone who may `get` the
//! AgentSandbox (a SubjectAccessReview). Pure: the server sends the
//! reviews; this module reads the header, decides, and caches answers.

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use axum::http::HeaderMap;
use axum::http::header::AUTHORIZATION;
use k8s_openapi::api::authentication::v1::UserInfo;
use k8s_openapi::api::authorization::v1::ResourceAttributes;
use sha2::{Digest, Sha256};

use agentgate_governance::access::core_resource;

/// How long an authenticated token's identity is reused. Short enough that
/// a deleted ServiceAccount or an expired token stops working quickly;
/// long enough that an agent's stream of calls costs one TokenReview.
pub const AUTHENTICATED_TTL: Duration = Duration::from_secs(30);
/// How long a refused token stays refused without a new review.
pub const REFUSED_TTL: Duration = Duration::from_secs(5);
/// How long a SubjectAccessReview's "allowed" is reused.
pub const ALLOWED_TTL: Duration = Duration::from_secs(30);
/// How long a SubjectAccessReview's "denied" is reused (short, so a new
/// RoleBinding takes effect within seconds).
pub const DENIED_TTL: Duration = Duration::from_secs(5);
/// Entries per cache before expired ones are dropped (and, when all are
/// live, the cache starts over): bounds memory against a flood of tokens.
const CAPACITY: usize = 10_000;

/// Why a caller gets no answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CallerRefusal {
    /// 401: no bearer token, or one the API server does not accept.
    #[error("{0}")]
    Unauthenticated(String),
    /// 403: a known caller that may not read this sandbox.
    #[error("{0}")]
    Forbidden(String),
    /// 503: the API server could not be asked (fail closed).
    #[error("{0}")]
    Unavailable(String),
}

impl CallerRefusal {
    /// The HTTP status a refused caller is answered with.
    pub fn status(&self) -> axum::http::StatusCode {
        use axum::http::StatusCode;
        match self {
            CallerRefusal::Unauthenticated(_) => StatusCode::UNAUTHORIZED,
            CallerRefusal::Forbidden(_) => StatusCode::FORBIDDEN,
            CallerRefusal::Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
        }
    }
}

/// The bearer token of an `Authorization: Bearer …` header.
pub fn bearer_token(headers: &HeaderMap) -> Result<&str, CallerRefusal> {
    let missing = || {
        CallerRefusal::Unauthenticated(
            "no bearer token: send Authorization: Bearer <a ServiceAccount or user token>".into(),
        )
    };
    let mut values = headers.get_all(AUTHORIZATION).iter();
    let value = values.next().ok_or_else(missing)?;
    if values.next().is_some() {
        return Err(CallerRefusal::Unauthenticated(
            "more than one Authorization header".into(),
        ));
    }
    let value = value.to_str().map_err(|_| {
        CallerRefusal::Unauthenticated("the Authorization header is not ASCII".into())
    })?;
    let (scheme, token) = value.split_once(' ').ok_or_else(missing)?;
    let token = token.trim();
    if !scheme.eq_ignore_ascii_case("bearer") || token.is_empty() {
        return Err(missing());
    }
    Ok(token)
}

/// The cache key of a token: its SHA-256, so the cache never holds a
/// usable credential.
pub fn token_key(token: &str) -> [u8; 32] {
    Sha256::digest(token.as_bytes()).into()
}

/// Whether `user` is the agent of the sandbox: one of its agent identities
/// (`agentServiceAccount`, or the account its pod runs as), as user names.
pub fn is_agent<'a>(user: &UserInfo, mut identities: impl Iterator<Item = &'a String>) -> bool {
    user.username
        .as_deref()
        .is_some_and(|name| identities.any(|identity| identity == name))
}

/// What a non-agent caller must hold to read the sandbox's decisions:
/// `get` on that AgentSandbox.
pub fn read_sandbox(namespace: &str, name: &str) -> ResourceAttributes {
    ResourceAttributes {
        group: Some("agentgate.dev".into()),
        ..core_resource("get", "agentsandboxes", namespace, Some(name))
    }
}

/// The cache key of an authorization answer: who (name, groups, uid) and
/// which sandbox.
pub type AccessKey = (String, Vec<String>, String, String, String);

/// The key of `user` reading sandbox `namespace/name`.
pub fn access_key(user: &UserInfo, namespace: &str, name: &str) -> AccessKey {
    (
        user.username.clone().unwrap_or_default(),
        user.groups.clone().unwrap_or_default(),
        user.uid.clone().unwrap_or_default(),
        namespace.to_string(),
        name.to_string(),
    )
}

/// A small map whose entries expire: review answers reused for a while.
pub struct ReviewCache<K, V> {
    entries: Mutex<HashMap<K, (Instant, V)>>,
}

impl<K, V> Default for ReviewCache<K, V> {
    fn default() -> Self {
        ReviewCache {
            entries: Mutex::new(HashMap::new()),
        }
    }
}

impl<K: Eq + Hash, V: Clone> ReviewCache<K, V> {
    /// The live answer for `key` at `now`.
    pub fn get(&self, key: &K, now: Instant) -> Option<V> {
        let entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        entries
            .get(key)
            .filter(|(expires, _)| *expires > now)
            .map(|(_, value)| value.clone())
    }

    /// Remembers `value` for `key` until `now + ttl`.
    pub fn insert(&self, key: K, value: V, ttl: Duration, now: Instant) {
        let mut entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        if entries.len() >= CAPACITY {
            entries.retain(|_, (expires, _)| *expires > now);
            if entries.len() >= CAPACITY {
                entries.clear();
            }
        }
        entries.insert(key, (now + ttl, value));
    }

    /// How many entries (live or not) the cache holds.
    pub fn len(&self) -> usize {
        self.entries.lock().unwrap_or_else(|e| e.into_inner()).len()
    }

    /// Whether the cache is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use axum::http::HeaderValue;

    fn headers(values: &[&str]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for v in values {
            h.append(AUTHORIZATION, HeaderValue::from_str(v).unwrap());
        }
        h
    }

    #[test]
    fn reads_exactly_one_bearer_token() {
        assert_eq!(bearer_token(&headers(&["Bearer abc"])), Ok("abc"));
        assert_eq!(bearer_token(&headers(&["bearer  abc "])), Ok("abc"));
        for bad in [
            &[][..],
            &["Basic YTpi"][..],
            &["Bearer"][..],
            &["Bearer "][..],
            &["Bearer a", "Bearer b"][..],
        ] {
            assert!(
                matches!(
                    bearer_token(&headers(bad)),
                    Err(CallerRefusal::Unauthenticated(_))
                ),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn the_agent_is_one_of_the_sandbox_identities() {
        let ids = [
            "system:serviceaccount:agents:bot".to_string(),
            "system:serviceaccount:agents:runner".to_string(),
        ];
        let user = |name: &str| UserInfo {
            username: Some(name.into()),
            ..UserInfo::default()
        };
        assert!(is_agent(
            &user("system:serviceaccount:agents:bot"),
            ids.iter()
        ));
        assert!(!is_agent(
            &user("system:serviceaccount:other:bot"),
            ids.iter()
        ));
        assert!(!is_agent(&UserInfo::default(), ids.iter()));
    }

    #[test]
    fn answers_expire_and_the_cache_is_bounded() {
        let cache: ReviewCache<u32, bool> = ReviewCache::default();
        let now = Instant::now();
        cache.insert(1, true, Duration::from_secs(5), now);
        assert_eq!(cache.get(&1, now), Some(true));
        assert_eq!(cache.get(&1, now + Duration::from_secs(6)), None);
        for i in 0..(CAPACITY as u32 + 10) {
            cache.insert(i, false, Duration::from_secs(60), now);
        }
        assert!(cache.len() <= CAPACITY);
    }

    #[test]
    fn the_key_of_a_token_is_not_the_token() {
        let key = token_key("secret-token");
        assert_ne!(&key[..], b"secret-token".as_slice());
        assert_eq!(key, token_key("secret-token"));
    }
}
