//! Held calls (docs/proxy.md, "Held calls"): a tool call a `mode: ask`
//! entry holds is put to the approval service (the operator's `POST
//! /v1/hold`, which records it as a HeldCall a person decides with
//! `kubectl agentgate approve|deny`), and the proxy waits for the answer
//! while the agent's request waits. No kube client: one HTTPS request per
//! held call ([`crate::operator_api`]), authenticated by the Pod's projected
//! ServiceAccount token.

use std::path::{Path, PathBuf};
use std::time::Duration;

use bytes::Bytes;
use http::{Method, StatusCode};
use http_body_util::{BodyExt, Limited};

use crate::operator_api::{Endpoint, EndpointError};
use crate::resolve::Resolver;
use agentgate_judgement::held::{HoldAnswer, HoldRequest};

/// The longest answer read from the approval service.
const MAX_ANSWER_BYTES: usize = 64 << 10;
/// What the service may take beyond the hold's own timeout to answer
/// (it expires the hold itself, then writes the answer).
const ANSWER_MARGIN: Duration = Duration::from_secs(15);

/// Why a held call could not be put to a person.
#[derive(Debug, thiserror::Error)]
pub enum ApprovalError {
    /// `--approvals` cannot be used, or its roots or token cannot be read.
    #[error(transparent)]
    Endpoint(#[from] EndpointError),
    /// The service did not answer as it should.
    #[error("the approval service {0}")]
    Service(String),
}

/// The approval service, as `--approvals` and its companions name it.
pub struct Approvals {
    endpoint: Endpoint,
    /// How long a person has to decide.
    pub timeout: Duration,
}

impl Approvals {
    /// The service at `url` ([`Endpoint::new`], roots `ca`, token file
    /// `token`); a file missing at start refuses the holds, not the proxy.
    pub fn new(
        url: &str,
        ca: Option<&Path>,
        token: Option<PathBuf>,
        timeout: Duration,
    ) -> Result<Approvals, ApprovalError> {
        Ok(Approvals {
            endpoint: Endpoint::new("--approvals", url, ca, token, "/v1/hold")?,
            timeout,
        })
    }

    /// Puts `request` to the service and waits for its answer: at most the
    /// hold's timeout plus a margin, after which the call is refused.
    pub async fn ask(
        &self,
        resolver: &Resolver,
        request: &HoldRequest,
    ) -> Result<HoldAnswer, ApprovalError> {
        let service = |reason: String| ApprovalError::Service(reason);
        let body = serde_json::to_vec(request).map_err(|e| service(e.to_string()))?;
        let exchange = async {
            let response = self
                .endpoint
                .send(resolver, Method::POST, "", Some(Bytes::from(body)))
                .await
                .map_err(|e| service(e.to_string()))?;
            let status = response.status();
            let bytes = Limited::new(response.into_body(), MAX_ANSWER_BYTES)
                .collect()
                .await
                .map_err(|e| service(format!("answer unreadable: {e}")))?
                .to_bytes();
            Ok::<_, ApprovalError>((status, bytes))
        };
        let (status, bytes) = tokio::time::timeout(self.timeout + ANSWER_MARGIN, exchange)
            .await
            .map_err(|_| service("did not answer in time".into()))??;
        if status != StatusCode::OK {
            let text = String::from_utf8_lossy(&bytes);
            let reason = serde_json::from_slice::<serde_json::Value>(&bytes)
                .ok()
                .and_then(|v| v.get("reason").and_then(|r| r.as_str()).map(str::to_string))
                .unwrap_or_else(|| text.chars().take(200).collect());
            return Err(service(format!("answered {status}: {reason}")));
        }
        serde_json::from_slice(&bytes)
            .map_err(|e| service(format!("answered something that is not an answer: {e}")))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn plain_http_goes_to_loopback_only_and_https_needs_roots() {
        let t = Duration::from_secs(5);
        assert!(Approvals::new("http://127.0.0.1:9/v1/hold", None, None, t).is_ok());
        assert!(Approvals::new("http://[::1]:9/v1/hold", None, None, t).is_ok());
        let far = Approvals::new("http://10.0.0.7/v1/hold", None, None, t)
            .err()
            .unwrap()
            .to_string();
        assert!(far.contains("loopback"), "{far}");
        let rootless = Approvals::new("https://op.example/v1/hold", None, None, t)
            .err()
            .unwrap()
            .to_string();
        assert!(rootless.contains("roots"), "{rootless}");
        assert!(Approvals::new("ftp://x/y", None, None, t).is_err());
    }
}
