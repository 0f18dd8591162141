//! The operator's server as the proxy reaches it (the approval service and
//! the policy stream): an `https://HOST[:PORT]/PATH` verified with the roots
//! the operator publishes in the policy ConfigMap, and a bearer token from
//! a projected ServiceAccount token file. No kube client: plain HTTPS
//! requests. Both files are read afresh for every request, as projected
//! tokens and CAs rotate, and a file missing at start fails the requests,
//! not the proxy.

use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::header::{AUTHORIZATION, CONTENT_TYPE, HOST};
use http::{Method, Request, Response, Uri};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use rustls::pki_types::ServerName;
use rustls::{ClientConfig, RootCertStore};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;

use crate::resolve::Resolver;

/// How long connecting (and the TLS handshake) may take.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// Why the operator's server cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum EndpointError {
    /// The flag's URL is not one the proxy may use.
    #[error("{flag} {url:?}: {reason}")]
    BadUrl {
        /// The flag.
        flag: &'static str,
        /// Its value.
        url: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The roots or the token file cannot be read.
    #[error("{path}: {reason}")]
    File {
        /// The file.
        path: String,
        /// Why.
        reason: String,
    },
    /// The server could not be reached or the request failed.
    #[error("{0}")]
    Unreachable(String),
}

/// One endpoint of the operator's server.
#[derive(Debug, Clone)]
pub struct Endpoint {
    /// The roots file and the name to verify; `None` for plain http to a
    /// loopback address.
    tls: Option<(PathBuf, ServerName<'static>)>,
    host: String,
    port: u16,
    path: String,
    token: Option<PathBuf>,
}

impl Endpoint {
    /// The endpoint at `url` (the value of `flag`): `https://` verified with
    /// the roots in the file `ca`, or `http://` to a loopback address only
    /// (a token must never cross a network in the clear); `default_path`
    /// when the URL has none.
    pub fn new(
        flag: &'static str,
        url: &str,
        ca: Option<&Path>,
        token: Option<PathBuf>,
        default_path: &str,
    ) -> Result<Endpoint, EndpointError> {
        let bad = |reason: &str| EndpointError::BadUrl {
            flag,
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
        let path = match uri.path_and_query().map(|p| p.as_str()) {
            None | Some("") | Some("/") => default_path.to_string(),
            Some(p) => p.to_string(),
        };
        let (tls, port) = match uri.scheme_str() {
            Some("https") => {
                let ca =
                    ca.ok_or_else(|| bad("https needs the operator's roots (its -ca flag)"))?;
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
                        "plain http only to a loopback address: use https with the operator's roots",
                    ));
                }
                (None, uri.port_u16().unwrap_or(80))
            }
            _ => return Err(bad("the scheme is https (or http to a loopback address)")),
        };
        Ok(Endpoint {
            tls,
            host,
            port,
            path,
            token,
        })
    }

    /// The endpoint beside this one: the same server, the last path
    /// segment replaced by `segment` (`…/stream` → `…/applied`).
    pub fn sibling(&self, segment: &str) -> Endpoint {
        let base = self.path.split('?').next().unwrap_or_default();
        let parent = base.rsplit_once('/').map_or("", |(parent, _)| parent);
        Endpoint {
            path: format!("{parent}/{segment}"),
            ..self.clone()
        }
    }

    /// `host:port/path`, for logs.
    pub fn shown(&self) -> String {
        format!("{}:{}{}", self.host, self.port, self.path)
    }

    /// Sends one request to the endpoint's path (`suffix` appended) over a
    /// new connection and returns the response with its body still to be
    /// read; connecting is bounded by [`CONNECT_TIMEOUT`], the rest by the
    /// caller.
    pub async fn send(
        &self,
        resolver: &Resolver,
        method: Method,
        suffix: &str,
        body: Option<Bytes>,
    ) -> Result<Response<Incoming>, EndpointError> {
        let unreachable = EndpointError::Unreachable;
        let token = match &self.token {
            Some(path) => Some(
                std::fs::read_to_string(path)
                    .map_err(|e| EndpointError::File {
                        path: path.display().to_string(),
                        reason: e.to_string(),
                    })?
                    .trim()
                    .to_string(),
            ),
            None => None,
        };
        let mut builder = Request::builder()
            .method(method)
            .uri(format!("{}{suffix}", self.path))
            .header(HOST, format!("{}:{}", self.host, self.port));
        if body.is_some() {
            builder = builder.header(CONTENT_TYPE, "application/json");
        }
        if let Some(token) = token {
            builder = builder.header(AUTHORIZATION, format!("Bearer {token}"));
        }
        let request = builder
            .body(Full::new(body.unwrap_or_default()))
            .map_err(|e| unreachable(e.to_string()))?;
        let tcp = self.connect(resolver).await?;
        match &self.tls {
            Some((roots, name)) => {
                let config = client_config(roots)?;
                let tls = tokio::time::timeout(
                    CONNECT_TIMEOUT,
                    TlsConnector::from(config).connect(name.clone(), tcp),
                )
                .await
                .map_err(|_| unreachable("TLS handshake timed out".into()))?
                .map_err(|e| unreachable(format!("TLS: {e}")))?;
                send(tls, request).await
            }
            None => send(tcp, request).await,
        }
    }

    async fn connect(&self, resolver: &Resolver) -> Result<TcpStream, EndpointError> {
        let unreachable = EndpointError::Unreachable;
        let addrs = match self.host.parse::<IpAddr>() {
            Ok(ip) => vec![std::net::SocketAddr::new(ip, self.port)],
            Err(_) => {
                tokio::time::timeout(CONNECT_TIMEOUT, resolver.resolve(&self.host, self.port))
                    .await
                    .map_err(|_| unreachable(format!("{} did not resolve in time", self.host)))?
                    .map_err(|e| unreachable(e.to_string()))?
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
        Err(unreachable(format!(
            "{}:{} cannot be reached: {last}",
            self.host, self.port
        )))
    }
}

/// A TLS client trusting exactly the roots in `path`.
fn client_config(path: &Path) -> Result<Arc<ClientConfig>, EndpointError> {
    let file = |reason: String| EndpointError::File {
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

/// One HTTP/1.1 request over `io`.
async fn send<I>(io: I, request: Request<Full<Bytes>>) -> Result<Response<Incoming>, EndpointError>
where
    I: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let unreachable = EndpointError::Unreachable;
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(io))
        .await
        .map_err(|e| unreachable(e.to_string()))?;
    tokio::spawn(conn);
    sender
        .send_request(request)
        .await
        .map_err(|e| unreachable(format!("failed: {e}")))
}
