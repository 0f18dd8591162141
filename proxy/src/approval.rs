//! Held calls (docs/proxy.md, "Held calls"): a tool call a `mode: ask`
//! entry holds is put to the approval service (the operator's `POST
//! /v1/hold`, which records it as a HeldCall a person decides with
//! `kubectl agentgate approve|deny`), and the proxy waits for the answer
//! while the agent's request waits. No kube client: one HTTPS request per
//! held call, authenticated by the Pod's projected ServiceAccount token.

use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::header::{AUTHORIZATION, CONTENT_TYPE, HOST};
use http::{Request, StatusCode, Uri};
use http_body_util::{BodyExt, Full, Limited};
use hyper_util::rt::TokioIo;
use rustls::pki_types::ServerName;
use rustls::{ClientConfig, RootCertStore};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;

use crate::resolve::Resolver;
use agentgate_policy::held::{HoldAnswer, HoldRequest};

/// The longest answer read from the approval service.
const MAX_ANSWER_BYTES: usize = 64 << 10;
/// How long connecting (and the TLS handshake) may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// What the service may take beyond the hold's own timeout to answer
/// (it expires the hold itself, then writes the answer).
const ANSWER_MARGIN: Duration = Duration::from_secs(15);

/// Why a held call could not be put to a person.
#[derive(Debug, thiserror::Error)]
pub enum ApprovalError {
    /// `--approvals` is not a URL the proxy may use.
    #[error("--approvals {url:?}: {reason}")]
    BadUrl {
        /// The flag's value.
        url: String,
        /// What is wrong with it.
        reason: String,
    },
    /// `--approvals-ca` or `--approvals-token` cannot be read.
    #[error("{path}: {reason}")]
    File {
        /// The file.
        path: String,
        /// Why.
        reason: String,
    },
    /// The service could not be reached or did not answer as it should.
    #[error("the approval service {0}")]
    Service(String),
}

/// The approval service, as `--approvals` and its companions name it.
pub struct Approvals {
    /// The roots file (read for every hold: the operator publishes a
    /// rotated CA into it) and the name to verify.
    tls: Option<(PathBuf, ServerName<'static>)>,
    host: String,
    port: u16,
    path: String,
    token: Option<PathBuf>,
    /// How long a person has to decide.
    pub timeout: Duration,
}

impl Approvals {
    /// The service at `url`: `https://HOST[:PORT]/PATH` verified with the
    /// roots in the file `ca`, or `http://` to a loopback address only (a
    /// token must never cross a network in the clear). Both files are read
    /// afresh for every hold, as projected tokens and CAs rotate, and a
    /// file missing at start refuses the holds, not the proxy.
    pub fn new(
        url: &str,
        ca: Option<&Path>,
        token: Option<PathBuf>,
        timeout: Duration,
    ) -> Result<Approvals, ApprovalError> {
        let bad = |reason: &str| ApprovalError::BadUrl {
            url: url.to_string(),
            reason: reason.to_string(),
        };
        let uri: Uri = url.parse().map_err(|_| bad("not a URL"))?;
        let host = uri
            .host()
            .ok_or_else(|| bad("no host"))?
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_string();
        let path = uri
            .path_and_query()
            .map_or("/v1/hold", |p| p.as_str())
            .to_string();
        let (tls, port) = match uri.scheme_str() {
            Some("https") => {
                let ca = ca.ok_or_else(|| bad("https needs --approvals-ca"))?;
                let name = ServerName::try_from(host.clone())
                    .map_err(|_| bad("the host is not a TLS server name"))?;
                (
                    Some((ca.to_path_buf(), name)),
                    uri.port_u16().unwrap_or(443),
                )
            }
            Some("http") => {
                let loopback =
                    host == "localhost" || host.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback());
                if !loopback {
                    return Err(bad(
                        "plain http only to a loopback address: use https with --approvals-ca",
                    ));
                }
                (None, uri.port_u16().unwrap_or(80))
            }
            _ => return Err(bad("the scheme is https (or http to a loopback address)")),
        };
        Ok(Approvals {
            tls,
            host,
            port,
            path,
            token,
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
        let token = match &self.token {
            Some(path) => Some(
                std::fs::read_to_string(path)
                    .map_err(|e| ApprovalError::File {
                        path: path.display().to_string(),
                        reason: e.to_string(),
                    })?
                    .trim()
                    .to_string(),
            ),
            None => None,
        };
        let mut builder = Request::post(self.path.as_str())
            .header(HOST, format!("{}:{}", self.host, self.port))
            .header(CONTENT_TYPE, "application/json");
        if let Some(token) = token {
            builder = builder.header(AUTHORIZATION, format!("Bearer {token}"));
        }
        let request = builder
            .body(Full::new(Bytes::from(body)))
            .map_err(|e| service(e.to_string()))?;
        let exchange = async {
            let tcp = self.connect(resolver).await?;
            match &self.tls {
                Some((roots, name)) => {
                    let config = client_config(roots)?;
                    let tls = tokio::time::timeout(
                        CONNECT_TIMEOUT,
                        TlsConnector::from(config).connect(name.clone(), tcp),
                    )
                    .await
                    .map_err(|_| service("TLS handshake timed out".into()))?
                    .map_err(|e| service(format!("TLS: {e}")))?;
                    exchange(tls, request).await
                }
                None => exchange(tcp, request).await,
            }
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

    async fn connect(&self, resolver: &Resolver) -> Result<TcpStream, ApprovalError> {
        let service = |reason: String| ApprovalError::Service(reason);
        let addrs = match self.host.parse::<IpAddr>() {
            Ok(ip) => vec![std::net::SocketAddr::new(ip, self.port)],
            Err(_) => {
                tokio::time::timeout(CONNECT_TIMEOUT, resolver.resolve(&self.host, self.port))
                    .await
                    .map_err(|_| service(format!("{} did not resolve in time", self.host)))?
                    .map_err(|e| service(e.to_string()))?
            }
        };
        let mut last = String::from("no address");
        for addr in addrs {
            match tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(addr)).await {
                Ok(Ok(stream)) => return Ok(stream),
                Ok(Err(e)) => last = format!("{addr}: {e}"),
                Err(_) => last = format!("{addr}: timed out"),
            }
        }
        Err(service(format!(
            "at {}:{} cannot be reached: {last}",
            self.host, self.port
        )))
    }
}

/// A TLS client trusting exactly the roots in `path`.
fn client_config(path: &Path) -> Result<Arc<ClientConfig>, ApprovalError> {
    let file = |reason: String| ApprovalError::File {
        path: path.display().to_string(),
        reason,
    };
    let mut roots = RootCertStore::empty();
    for cert in crate::tls::read_certificates(path).map_err(|e| file(e.to_string()))? {
        roots.add(cert).map_err(|e| file(e.to_string()))?;
    }
    let config =
        ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_safe_default_protocol_versions()
            .map_err(|e| file(e.to_string()))?
            .with_root_certificates(roots)
            .with_no_client_auth();
    Ok(Arc::new(config))
}

/// One HTTP/1.1 request over `io`; the status and the body (bounded).
async fn exchange<I>(
    io: I,
    request: Request<Full<Bytes>>,
) -> Result<(StatusCode, Bytes), ApprovalError>
where
    I: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let service = |reason: String| ApprovalError::Service(reason);
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(io))
        .await
        .map_err(|e| service(e.to_string()))?;
    tokio::spawn(conn);
    let response = sender
        .send_request(request)
        .await
        .map_err(|e| service(format!("failed: {e}")))?;
    let status = response.status();
    let bytes = Limited::new(response.into_body(), MAX_ANSWER_BYTES)
        .collect()
        .await
        .map_err(|e| service(format!("answer unreadable: {e}")))?
        .to_bytes();
    Ok((status, bytes))
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
        assert!(rootless.contains("--approvals-ca"), "{rootless}");
        assert!(Approvals::new("ftp://x/y", None, None, t).is_err());
    }
}
