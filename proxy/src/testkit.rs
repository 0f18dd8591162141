//! Test and benchmark support (feature `testkit`, never in a release
//! build): a CA that issues certificates, and a local HTTPS/HTTP upstream
//! speaking HTTP/1.1 and HTTP/2 with a few fixed routes.
//!
//! Routes: `/bytes/N` answers N bytes; `/hang` never answers; `/reset`
//! closes the connection; `/mcp` is a small MCP server (JSON-RPC answers as
//! JSON, or as an event stream when the path is `/mcp-sse`) that records
//! every method it receives ([`mcp_received`]); `/record/…` reads the
//! request whole, keeps it ([`recorded`]: what an upstream saw, to check
//! what the proxy attached) and echoes it; anything else echoes the
//! request as JSON (`method`, `path`, `query`, `version`, `headers`).

#![allow(missing_docs)]

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
};
use rustls::ServerConfig;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;

/// A throwaway certificate authority.
pub struct TestCa {
    pub cert_pem: String,
    pub key_pem: String,
    issuer: Issuer<'static, KeyPair>,
}

impl TestCa {
    pub fn new(name: &str) -> Result<TestCa, rcgen::Error> {
        let mut params = CertificateParams::new(Vec::<String>::new())?;
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(DnType::CommonName, name);
        let key = KeyPair::generate()?;
        let cert = params.self_signed(&key)?;
        let (cert_pem, key_pem) = (cert.pem(), key.serialize_pem());
        let issuer = Issuer::new(params, key);
        Ok(TestCa {
            cert_pem,
            key_pem,
            issuer,
        })
    }

    /// A leaf for `hosts`: (certificate PEM, key PEM).
    pub fn issue(&self, hosts: &[&str]) -> Result<(String, String), rcgen::Error> {
        let mut params =
            CertificateParams::new(hosts.iter().map(|h| h.to_string()).collect::<Vec<_>>())?;
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        let key = KeyPair::generate()?;
        let cert = params.signed_by(&key, &self.issuer)?;
        Ok((cert.pem(), key.serialize_pem()))
    }

    /// A rustls server configuration for `hosts` with ALPN h2 and http/1.1.
    pub fn server_config(&self, hosts: &[&str]) -> Result<Arc<ServerConfig>, String> {
        let (cert, key) = self.issue(hosts).map_err(|e| e.to_string())?;
        let cert = CertificateDer::from_pem_slice(cert.as_bytes()).map_err(|e| e.to_string())?;
        let key = PrivateKeyDer::from_pem_slice(key.as_bytes()).map_err(|e| e.to_string())?;
        let mut config =
            ServerConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
                .with_safe_default_protocol_versions()
                .map_err(|e| e.to_string())?
                .with_no_client_auth()
                .with_single_cert(vec![cert], key)
                .map_err(|e| e.to_string())?;
        config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        Ok(Arc::new(config))
    }
}

fn respond(req: &Request<Incoming>) -> Option<Response<Full<Bytes>>> {
    let path = req.uri().path();
    if path == "/hang" || path == "/reset" {
        return None;
    }
    if let Some(n) = path
        .strip_prefix("/bytes/")
        .and_then(|n| n.parse::<usize>().ok())
    {
        return Some(Response::new(Full::new(Bytes::from(vec![
            b'x';
            n.min(64 << 20)
        ]))));
    }
    let headers: serde_json::Map<String, serde_json::Value> = req
        .headers()
        .iter()
        .map(|(k, v)| {
            (
                k.to_string(),
                serde_json::Value::String(String::from_utf8_lossy(v.as_bytes()).into()),
            )
        })
        .collect();
    let body = serde_json::json!({
        "method": req.method().as_str(),
        "path": path,
        "query": req.uri().query(),
        "version": format!("{:?}", req.version()),
        "headers": headers,
    });
    let mut response = Response::new(Full::new(Bytes::from(body.to_string())));
    *response.status_mut() = StatusCode::OK;
    response
        .headers_mut()
        .insert("x-upstream", http::HeaderValue::from_static("test"));
    Some(response)
}

/// One request the `/record/…` route received whole.
#[derive(Debug, Clone)]
pub struct Recorded {
    pub method: String,
    /// Path and query, as sent.
    pub target: String,
    pub headers: Vec<(String, Vec<u8>)>,
    pub body: Vec<u8>,
}

impl Recorded {
    /// Everything the upstream received, as one byte string (to search).
    pub fn bytes(&self) -> Vec<u8> {
        let mut out = format!("{} {}\n", self.method, self.target).into_bytes();
        for (name, value) in &self.headers {
            out.extend_from_slice(name.as_bytes());
            out.extend_from_slice(b": ");
            out.extend_from_slice(value);
            out.push(b'\n');
        }
        out.extend_from_slice(&self.body);
        out
    }
}

static RECORDED: Mutex<Vec<Recorded>> = Mutex::new(Vec::new());

impl Recorded {
    /// A request as the upstream received it: head and whole body.
    fn of(parts: &http::request::Parts, body: &[u8]) -> Recorded {
        Recorded {
            method: parts.method.to_string(),
            target: parts
                .uri
                .path_and_query()
                .map_or_else(|| parts.uri.path().to_string(), |p| p.to_string()),
            headers: parts
                .headers
                .iter()
                .map(|(n, v)| (n.to_string(), v.as_bytes().to_vec()))
                .collect(),
            body: body.to_vec(),
        }
    }
}

/// Every request the `/record/…` routes of this process received whole,
/// in order.
pub fn recorded() -> Vec<Recorded> {
    RECORDED.lock().map(|r| r.clone()).unwrap_or_default()
}

/// Reads the request whole, keeps it, and echoes it (with its body as
/// text); a request whose body fails (the proxy aborted it) is not kept.
async fn record_respond(req: Request<Incoming>) -> Response<Full<Bytes>> {
    let (parts, body) = req.into_parts();
    let Ok(body) = body.collect().await.map(|b| b.to_bytes()) else {
        let mut response = Response::new(Full::new(Bytes::from_static(b"aborted")));
        *response.status_mut() = StatusCode::BAD_REQUEST;
        return response;
    };
    let recorded = Recorded::of(&parts, &body);
    let echo = serde_json::json!({
        "method": recorded.method,
        "target": recorded.target,
        "headers": recorded.headers.iter().map(|(n, v)| (n.clone(), serde_json::Value::String(String::from_utf8_lossy(v).into()))).collect::<serde_json::Map<_, _>>(),
        "body": String::from_utf8_lossy(&recorded.body),
    });
    if let Ok(mut all) = RECORDED.lock() {
        all.push(recorded);
    }
    let mut response = Response::new(Full::new(Bytes::from(echo.to_string())));
    response.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/json"),
    );
    response
}

/// What the MCP route received, as `METHOD NAME` lines, in order.
static MCP_RECEIVED: Mutex<Vec<String>> = Mutex::new(Vec::new());

/// Every MCP message the `/mcp` routes of this process received so far.
pub fn mcp_received() -> Vec<String> {
    MCP_RECEIVED.lock().map(|r| r.clone()).unwrap_or_default()
}

/// The tools the MCP route lists.
pub const MCP_TOOLS: &[&str] = &["get_balance", "send_money", "delete_account"];

fn mcp_answer(message: &serde_json::Value) -> Option<serde_json::Value> {
    use serde_json::json;
    let method = message.get("method")?.as_str()?;
    let name = message["params"]["name"]
        .as_str()
        .or(message["params"]["uri"].as_str())
        .unwrap_or_default();
    if let Ok(mut received) = MCP_RECEIVED.lock() {
        received.push(format!("{method} {name}").trim_end().to_string());
    }
    let id = message.get("id")?.clone();
    let result = match method {
        "tools/list" => {
            json!({"tools": MCP_TOOLS.iter().map(|t| json!({"name": t, "inputSchema": {"type": "object"}})).collect::<Vec<_>>()})
        }
        "tools/call" => json!({"content": [{"type": "text", "text": format!("called {name}")}]}),
        _ => json!({}),
    };
    Some(json!({"jsonrpc": "2.0", "id": id, "result": result}))
}

/// The MCP route: answers each request of a single message or a batch.
async fn mcp_respond(req: Request<Incoming>) -> Response<Full<Bytes>> {
    let sse = req.uri().path() == "/mcp-sse";
    let (parts, body) = req.into_parts();
    let bytes = match body.collect().await {
        Ok(body) => body.to_bytes(),
        Err(_) => Bytes::new(),
    };
    // Kept with the `/record/…` requests too: what the server received,
    // headers and all.
    if let Ok(mut all) = RECORDED.lock() {
        all.push(Recorded::of(&parts, &bytes));
    }
    let parsed: serde_json::Value = serde_json::from_slice(&bytes).unwrap_or_default();
    let answers: Vec<serde_json::Value> = match &parsed {
        serde_json::Value::Array(items) => items.iter().filter_map(mcp_answer).collect(),
        single => mcp_answer(single).into_iter().collect(),
    };
    if answers.is_empty() {
        let mut response = Response::new(Full::new(Bytes::new()));
        *response.status_mut() = StatusCode::ACCEPTED;
        return response;
    }
    let (body, content_type) = if sse {
        let events: String = answers
            .iter()
            .map(|a| format!("event: message\ndata: {a}\n\n"))
            .collect();
        (events, "text/event-stream")
    } else if parsed.is_array() {
        (
            serde_json::Value::Array(answers).to_string(),
            "application/json",
        )
    } else {
        (answers[0].to_string(), "application/json")
    };
    let mut response = Response::new(Full::new(Bytes::from(body)));
    response.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static(content_type),
    );
    response
        .headers_mut()
        .insert("mcp-session-id", http::HeaderValue::from_static("s-1"));
    response
}

/// Serves the routes on `listener`, with TLS when `tls` is given, forever.
pub async fn serve_upstream(listener: TcpListener, tls: Option<Arc<ServerConfig>>) {
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            continue;
        };
        let _ = stream.set_nodelay(true);
        let tls = tls.clone();
        tokio::spawn(async move {
            let service = service_fn(|req: Request<Incoming>| async move {
                if req.uri().path().starts_with("/mcp") {
                    return Ok(mcp_respond(req).await);
                }
                if req.uri().path().starts_with("/record/") {
                    return Ok(record_respond(req).await);
                }
                match respond(&req) {
                    Some(response) => Ok::<_, String>(response),
                    None if req.uri().path() == "/reset" => Err("reset".to_string()),
                    None => std::future::pending().await,
                }
            });
            let builder = auto::Builder::new(TokioExecutor::new());
            match tls {
                Some(config) => {
                    let Ok(stream) = TlsAcceptor::from(config).accept(stream).await else {
                        return;
                    };
                    let _ = builder
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                }
                None => {
                    let _ = builder
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                }
            }
        });
    }
}

/// Binds 127.0.0.1:0 and serves there in the background; returns the address.
pub async fn start_upstream(tls: Option<Arc<ServerConfig>>) -> std::io::Result<SocketAddr> {
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    tokio::spawn(serve_upstream(listener, tls));
    Ok(addr)
}
