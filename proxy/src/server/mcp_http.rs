//! MCP over HTTP (docs/proxy.md, "MCP"): a POST's messages judged before
//! anything is forwarded, the session's event stream and the answers
//! filtered and recorded as they pass.

use super::*;

/// The canonical path of a request to an MCP server of the policy, or
/// `None` when (host, port, path) is judged as a plain request.
pub(super) fn mcp_path(snapshot: &Snapshot, host: &str, port: u16, target: &str) -> Option<String> {
    let policy = snapshot.policy.as_ref().ok()?;
    let path = request_path(target).ok()?;
    let server = McpServer {
        host,
        port,
        path: &path,
    };
    is_mcp_server(&policy.compiled, &policy.index, server).then_some(path)
}

/// A message to an MCP server whose target has a query, where a `rest`
/// entry on the server's host and port reads queries: a call's transport
/// is judged as `POST path` without one (docs/policy-semantics.md §10.1),
/// so such a message is refused rather than judged as another request.
pub(super) fn mcp_query_refusal(
    snapshot: &Snapshot,
    host: &str,
    port: u16,
    uri: &http::Uri,
) -> Option<Refusal> {
    let policy = snapshot.policy.as_ref().ok()?;
    let query = uri.query().filter(|q| !q.is_empty())?;
    reads_query_at(&policy.compiled, &policy.index, host, port).then(|| {
        Refusal::new(
            RefusalCode::NonCanonicalQuery,
            format!(
                "POST https://{host}:{port}{}?{query}: an MCP message is judged as POST {} without a query, and a rule on this server reads queries",
                uri.path(),
                uri.path()
            ),
        )
    })
}

/// The largest JSON list answer filtered (an event stream is filtered
/// event by event instead).
pub(super) const MAX_LIST_BYTES: usize = 16 << 20;

/// An MCP server's event stream as it passes: its list results filtered
/// and, on the HTTP+SSE transport (MCP 2024-11-05), linked to the messages
/// endpoint it announces so that the proxy's refusals of calls POSTed
/// there are put on the stream the client reads.
pub(super) struct McpEvents {
    pub(super) inner: Body,
    pub(super) filter: mcp::SseFilter,
    pub(super) visible: Box<Visible>,
    pub(super) done: bool,
    /// Where a GET stream came from, to link it when it announces its
    /// endpoint (`None` for the answer to a POST, which announces none).
    pub(super) origin: Option<StreamOrigin>,
    pub(super) link: Option<SessionLink>,
    /// The proxy whose session records the answers' content, when the
    /// policy keeps a record (docs/policy-semantics.md §8.3).
    pub(super) recorder: Option<Arc<Proxy>>,
}

/// Whether a `*/list` result shows an entry (see [`mcp_query_carrying`]).
pub(super) type Visible = dyn Fn(McpQuery<'_>) -> bool + Send + Sync;

/// Who opened a GET event stream, and where.
pub(super) struct StreamOrigin {
    pub(super) proxy: Arc<Proxy>,
    pub(super) binary: Binary,
    pub(super) upstream: UpstreamKey,
    /// The GET's path, which a relative endpoint resolves against.
    pub(super) path: String,
    /// The credential the GET carried: the stream's lists are filtered as
    /// for requests carrying it.
    pub(super) credential: Option<String>,
}

/// A stream's entry in [`Proxy::sse_sessions`], removed when the stream
/// ends (the body is dropped).
pub(super) struct SessionLink {
    pub(super) proxy: Arc<Proxy>,
    pub(super) key: mcp::SessionKey,
    pub(super) session: Arc<mcp::SseSession>,
}

impl Drop for SessionLink {
    fn drop(&mut self) {
        self.proxy.sse_sessions.close(&self.key, &self.session);
    }
}

/// The key of the HTTP+SSE stream `binary` holds whose messages endpoint
/// on `upstream` is `target` (path and query).
pub(super) fn session_key(
    upstream: &UpstreamKey,
    binary: &Binary,
    target: String,
) -> mcp::SessionKey {
    mcp::SessionKey {
        tls: upstream.tls,
        host: upstream.host.clone(),
        port: upstream.port,
        binary: binary.0.clone(),
        target,
    }
}

/// Whether the policy in force when an entry is listed shows it, for lists
/// answering requests to `path` on the upstream that carry `credential`
/// (only the rules that bind it may show an entry then, as only they may
/// allow its calls).
pub(super) fn visible_at(
    proxy: Arc<Proxy>,
    caller: Binary,
    upstream: &UpstreamKey,
    path: String,
    credential: Option<String>,
) -> Box<Visible> {
    let host = upstream.host.clone();
    let port = upstream.port;
    Box::new(move |query: McpQuery<'_>| {
        let snapshot = proxy.snapshot();
        let Ok(policy) = &snapshot.policy else {
            return false;
        };
        let server = McpServer {
            host: &host,
            port,
            path: &path,
        };
        mcp_query_carrying(
            &policy.compiled,
            &policy.index,
            caller.caller(),
            credential.as_deref(),
            server,
            query,
        )
    })
}

impl McpEvents {
    /// Links the stream to the messages endpoint `data` announces, when
    /// that is an MCP server of the policy: POSTs there by the same binary
    /// get their refusals on this stream, and their list results filtered
    /// by the policy for that path.
    pub(super) fn announce(&mut self, data: &str) {
        let Some(origin) = &self.origin else {
            return;
        };
        let upstream = &origin.upstream;
        let Some(target) = mcp::resolve_endpoint(
            upstream.tls,
            &upstream.host,
            upstream.port,
            &origin.path,
            data,
        ) else {
            tracing::info!(host = %upstream.host, port = upstream.port, endpoint = data, "an MCP event stream announced an endpoint the proxy does not link; refusals of its calls are answered on the POST");
            return;
        };
        let snapshot = origin.proxy.snapshot();
        let target_path = target.split('?').next().unwrap_or_default();
        let Some(path) = mcp_path(&snapshot, &upstream.host, upstream.port, target_path) else {
            tracing::info!(host = %upstream.host, port = upstream.port, endpoint = %target, "an MCP event stream announced a messages endpoint no mcp endpoint of the policy covers; its POSTs are judged as REST");
            return;
        };
        let key = session_key(upstream, &origin.binary, target);
        let Some(session) = origin.proxy.sse_sessions.open(key.clone()) else {
            tracing::warn!(host = %upstream.host, port = upstream.port, endpoint = %key.target, "an MCP event stream could not be linked (another holds its endpoint, or too many are open); refusals of its calls are answered on the POST");
            return;
        };
        tracing::debug!(host = %upstream.host, port = upstream.port, endpoint = %key.target, "MCP event stream linked to its messages endpoint");
        self.visible = visible_at(
            origin.proxy.clone(),
            origin.binary.clone(),
            upstream,
            path,
            origin.credential.clone(),
        );
        self.link = Some(SessionLink {
            proxy: origin.proxy.clone(),
            key,
            session,
        });
    }
}

impl hyper::body::Body for McpEvents {
    type Data = Bytes;
    type Error = BodyError;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<hyper::body::Frame<Bytes>, BodyError>>> {
        use std::task::Poll;
        let this = &mut *self;
        loop {
            if this.done {
                return Poll::Ready(None);
            }
            // The proxy's own answers go out between the server's events:
            // what the filter returns always ends at an event's end.
            if let Some(link) = &this.link {
                let queued = link.session.take_events(cx.waker());
                if !queued.is_empty() {
                    return Poll::Ready(Some(Ok(hyper::body::Frame::data(queued.into()))));
                }
            }
            match std::pin::Pin::new(&mut this.inner).poll_frame(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Some(Err(e))) => return Poll::Ready(Some(Err(e))),
                Poll::Ready(Some(Ok(frame))) => match frame.into_data() {
                    Ok(data) => {
                        // Lists and calls POSTed before these bytes were
                        // sent are known by now.
                        if let Some(link) = &this.link {
                            this.filter.expect(link.session.take_lists());
                            this.filter.expect_results(link.session.take_results());
                        }
                        let out = match this.filter.push(&data, &*this.visible) {
                            Ok(out) => out,
                            Err(e) => {
                                tracing::warn!(error = %e, "ending an MCP event stream");
                                this.done = true;
                                return Poll::Ready(None);
                            }
                        };
                        // Recorded before the bytes that carry them pass.
                        let observed = this.filter.take_observed();
                        if let Some(proxy) = &this.recorder
                            && !observed.is_empty()
                        {
                            proxy.record_answers(observed);
                        }
                        let answered = this.filter.take_answered();
                        if let Some(link) = &this.link {
                            link.session.set_awaited(this.filter.awaited());
                            link.session
                                .set_awaited_results(this.filter.awaited_results());
                            link.session.answered(&answered);
                        }
                        if this.link.is_none()
                            && let Some(endpoint) = this.filter.take_endpoint()
                        {
                            this.announce(&endpoint);
                        }
                        if !out.is_empty() {
                            return Poll::Ready(Some(Ok(hyper::body::Frame::data(out.into()))));
                        }
                    }
                    // Trailers pass unchanged.
                    Err(frame) => return Poll::Ready(Some(Ok(frame))),
                },
                Poll::Ready(None) => {
                    this.done = true;
                    let rest = this.filter.finish();
                    if !rest.is_empty() {
                        return Poll::Ready(Some(Ok(hyper::body::Frame::data(rest.into()))));
                    }
                }
            }
        }
    }
}

/// Whether a response is a server-sent event stream.
/// Remembers the refusal texts of a JSON-RPC answer the proxy gives in a
/// server's place (one message or a batch), so that a tool result quoting
/// one is not recorded as that tool's content ([`crate::model_provider::ConversationRecord`]).
pub(super) fn remember_refusals(
    conversation: &Mutex<crate::model_provider::ConversationRecord>,
    body: &str,
) {
    let Ok(answer) = serde_json::from_str::<serde_json::Value>(body) else {
        return;
    };
    let messages = match &answer {
        serde_json::Value::Array(batch) => batch.iter().collect(),
        single => vec![single],
    };
    let mut conversation = mcp::lock(conversation);
    // The reason: the model-facing message quotes it whole.
    for message in messages {
        if let Some(reason) = message
            .pointer("/error/data/reason")
            .and_then(|m| m.as_str())
        {
            conversation.remember_refusal(reason);
        }
    }
}

pub(super) fn is_event_stream(response: &Response<Body>) -> bool {
    response
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| {
            v.trim_start()
                .to_ascii_lowercase()
                .starts_with("text/event-stream")
        })
}

/// What the answer to forwarded MCP messages is read for: the lists to
/// filter, the results and other content to record, and the credential
/// the request carried (lists show what calls carrying it could do).
pub(super) struct AnswerRead {
    pub(super) lists: Vec<mcp::ListRequest>,
    pub(super) results: Vec<mcp::ResultRequest>,
    pub(super) others: Option<Source>,
    pub(super) credential: Option<String>,
}

impl Inspected {
    /// A request to an MCP server (docs/proxy.md, "MCP"): a POST's
    /// JSON-RPC messages are judged one by one before anything is
    /// forwarded, a refused one answered here; GET (the server's event
    /// stream) and DELETE (the end of a session) carry no call and pass
    /// when a session with the server is allowed.
    pub(super) async fn mcp_request(
        &self,
        req: Request<Body>,
        snapshot: &Snapshot,
        key: UpstreamKey,
        path: &str,
        carrying: &Carrying,
    ) -> Response<Body> {
        let server = McpServer {
            host: &key.host,
            port: key.port,
            path,
        };
        if req.method() != Method::POST {
            return self
                .mcp_session(req, snapshot, &key, server, carrying)
                .await;
        }
        let proxy = &self.proxy;
        let credential = carrying.name();
        if let Some(name) = METHOD_OVERRIDES
            .iter()
            .find(|name| req.headers().contains_key(**name))
        {
            let refusal = Refusal::new(
                RefusalCode::MalformedMcp,
                format!(
                    "{name} on a POST to an MCP server: its messages could not be judged as sent"
                ),
            );
            self.refuse_mcp(&key, &refusal);
            return refusal_response(&refusal);
        }
        let (parts, body) = req.into_parts();
        let bytes = match read_whole(body, mcp::MAX_BODY_BYTES).await {
            Ok(bytes) => bytes,
            Err(_) if carrying.body_misuse().is_some() => {
                return carrying.body_refusal_response();
            }
            Err(e) => {
                let refusal = Refusal::new(
                    RefusalCode::MalformedMcp,
                    format!(
                        "the body of a POST to an MCP server could not be read whole within {} bytes: {e}",
                        mcp::MAX_BODY_BYTES
                    ),
                );
                self.refuse_mcp(&key, &refusal);
                return refusal_response(&refusal);
            }
        };
        // `from` is judged by the session's record where the policy keeps
        // one (a `modelProvider` endpoint), else with no record (§8.3).
        let records = policy_of(snapshot).is_ok_and(|p| p.records_sessions);
        let (lists, results, linked) = match self
            .judge_mcp_post(snapshot, server, credential, records, &bytes)
            .await
        {
            // Resolved in judge_mcp_post; a second hold is never waited for.
            Judged::Hold(held) => {
                let refusal = held::unavailable(&held, "it was held again after its approval");
                self.refuse_mcp(&key, &refusal);
                return refusal_response(&refusal);
            }
            Judged::Answer {
                status,
                body,
                refusal,
            } => {
                self.refuse_mcp_judged(&key, credential, &refusal);
                if records {
                    remember_refusals(&proxy.conversation, &body);
                }
                return self.mcp_answered(&key, &parts, status, body);
            }
            Judged::Forward {
                lists,
                calls,
                audits,
            } => {
                for audit in &audits {
                    self.refuse_mcp(&key, audit);
                }
                match self.admit_mcp_calls(&key, &parts.uri, records, &lists, &calls) {
                    Ok((results, linked)) => {
                        proxy.metrics.decision(true, "mcp", "allowed");
                        tracing::debug!(decision = "allow", host = %key.host, port = key.port, path, calls = ?calls.iter().map(ToString::to_string).collect::<Vec<_>>(), "mcp messages allowed");
                        (lists, results, linked)
                    }
                    Err(refusal) => {
                        self.refuse_mcp(&key, &refusal);
                        return refusal_response(&refusal);
                    }
                }
            }
        };
        let req = match self.attach_carried(carrying, parts, full(bytes), &key) {
            Ok(req) => req,
            Err(response) => return response,
        };
        let response = self.forward(key.clone(), req).await;
        // Answers to calls POSTed to a linked stream's endpoint arrive on
        // that stream, which records them.
        let results = if linked { Vec::new() } else { results };
        if lists.is_empty() && !records {
            return response;
        }
        let others = records.then(|| Source::Host(key.host.clone()));
        let listing = AnswerRead {
            lists,
            results,
            others,
            credential: credential.map(str::to_string),
        };
        self.answer(response, listing, key, path.to_string()).await
    }

    /// Logs an MCP refusal.
    pub(super) fn refuse_mcp(&self, key: &UpstreamKey, refusal: &Refusal) {
        self.proxy
            .log_refusal("mcp", &self.binary, &key.host, key.port, refusal);
    }

    /// Logs a refusal by the policy of MCP messages; of messages carrying a
    /// placeholder, as a credential's too (docs/policy-semantics.md §9.4).
    pub(super) fn refuse_mcp_judged(
        &self,
        key: &UpstreamKey,
        credential: Option<&str>,
        refusal: &Refusal,
    ) {
        self.proxy.log_judged_refusal(
            "mcp",
            credential,
            &self.binary,
            &key.host,
            key.port,
            refusal,
        );
    }

    /// A request to an MCP server's endpoint that is not a POST (the GET
    /// of its event stream, a DELETE of the session): judged as the
    /// session's, and a GET's event stream filtered as it flows.
    pub(super) async fn mcp_session(
        &self,
        req: Request<Body>,
        snapshot: &Snapshot,
        key: &UpstreamKey,
        server: McpServer<'_>,
        carrying: &Carrying,
    ) -> Response<Body> {
        let proxy = &self.proxy;
        let credential = carrying.name();
        if let Err(refusal) = mcp::judge_session(snapshot, &self.binary, server, credential) {
            self.refuse_mcp_judged(key, credential, &refusal);
            return refusal_response(&refusal);
        }
        let get = req.method() == Method::GET;
        let (parts, body) = req.into_parts();
        let req = match self.attach_carried(carrying, parts, body, key) {
            Ok(req) => req,
            Err(response) => return response,
        };
        proxy.metrics.decision(true, "mcp", "session");
        let response = self.forward(key.clone(), req).await;
        if !get || response.status() != StatusCode::OK || !is_event_stream(&response) {
            return response;
        }
        let origin = StreamOrigin {
            proxy: proxy.clone(),
            binary: self.binary.clone(),
            upstream: key.clone(),
            path: server.path.to_string(),
            credential: credential.map(str::to_string),
        };
        let visible = visible_at(
            proxy.clone(),
            self.binary.clone(),
            key,
            server.path.to_string(),
            credential.map(str::to_string),
        );
        let (parts, body) = response.into_parts();
        let records = policy_of(snapshot).is_ok_and(|p| p.records_sessions);
        let mut filter = mcp::SseFilter::new(Vec::new());
        if records {
            filter.record_others_as(Source::Host(key.host.clone()));
        }
        let events = McpEvents {
            inner: body,
            filter,
            visible,
            done: false,
            origin: Some(origin),
            link: None,
            recorder: records.then(|| proxy.clone()),
        };
        Response::from_parts(parts, events.boxed())
    }

    /// Judges a POST's MCP messages; a call held for a person's approval is
    /// waited for and, approved, judged again under the policy in force
    /// then: a revocation while the person decided wins over the approval.
    pub(super) async fn judge_mcp_post(
        &self,
        snapshot: &Snapshot,
        server: McpServer<'_>,
        credential: Option<&str>,
        records: bool,
        bytes: &Bytes,
    ) -> Judged {
        let proxy = &self.proxy;
        let judge = |snapshot: &Snapshot| {
            let conversation = records.then(|| mcp::lock(&proxy.conversation));
            let record = conversation.as_deref().map(|c| c.record(Instant::now()));
            let record = record.as_ref().map(|r| r as &dyn Record);
            mcp::judge_post(snapshot, &self.binary, server, record, credential, bytes)
        };
        match judge(snapshot) {
            Judged::Hold(held) => match self.hold(&held).await {
                Ok(()) => match judge(&proxy.policy.borrow().clone()) {
                    Judged::Hold(_) => held.approved(),
                    judged => judged,
                },
                Err(refusal) => held.refused(refusal),
            },
            judged => judged,
        }
    }

    /// The HTTP+SSE stream this POST's answers go to, if `uri` is one's
    /// messages endpoint and this binary holds the stream.
    pub(super) fn linked_stream(
        &self,
        key: &UpstreamKey,
        uri: &Uri,
    ) -> Option<Arc<mcp::SseSession>> {
        let target = uri
            .path_and_query()
            .map_or_else(|| uri.path().to_string(), |p| p.as_str().to_string());
        self.proxy
            .sse_sessions
            .get(&session_key(key, &self.binary, target))
    }

    /// The answer to a POST whose messages were refused: JSON-RPC errors,
    /// on the client's event stream when it reads answers there (the POST
    /// is then accepted), else as the POST's answer.
    pub(super) fn mcp_answered(
        &self,
        key: &UpstreamKey,
        parts: &http::request::Parts,
        status: u16,
        body: String,
    ) -> Response<Body> {
        if status == 200
            && let Some(stream) = self.linked_stream(key, &parts.uri)
            && stream.deliver(body.as_bytes())
        {
            let mut response = Response::new(full("Accepted"));
            *response.status_mut() = StatusCode::ACCEPTED;
            response
                .headers_mut()
                .insert(DECISION_HEADER, HeaderValue::from_static("deny"));
            return response;
        }
        let mut response = Response::new(full(body));
        *response.status_mut() = StatusCode::from_u16(status).unwrap_or(StatusCode::FORBIDDEN);
        let headers = response.headers_mut();
        headers.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        headers.insert(DECISION_HEADER, HeaderValue::from_static("deny"));
        // The session continues: keep the client's session id.
        if let Some(session) = parts.headers.get("mcp-session-id") {
            headers.insert("mcp-session-id", session.clone());
        }
        response
    }

    /// Books the allowed calls of a POST before it is forwarded: the
    /// answers to await and record (where the policy keeps a record: a
    /// call's result as its tool's, a resource or prompt as the server
    /// host's), on the linked event stream if there is one, and the calls
    /// into the session. Returns the results to read from the POST's own
    /// answer and whether a stream is linked; refused when answers could
    /// not be told apart or too many await.
    pub(super) fn admit_mcp_calls(
        &self,
        key: &UpstreamKey,
        uri: &Uri,
        records: bool,
        lists: &[mcp::ListRequest],
        calls: &[ForwardedCall],
    ) -> Result<(Vec<mcp::ResultRequest>, bool), Refusal> {
        let proxy = &self.proxy;
        let results: Vec<mcp::ResultRequest> = if records {
            calls
                .iter()
                .filter_map(|call| {
                    let id = call.id.clone()?;
                    let source = match call.action.kind {
                        McpKind::Tool => Source::Tool(call.action.name.clone()),
                        McpKind::Resource | McpKind::Prompt => Source::Host(key.host.clone()),
                    };
                    Some(mcp::ResultRequest { id, source })
                })
                .collect()
        } else {
            Vec::new()
        };
        // Two awaited calls with one id: whose answer is whose could not
        // be told, and content could be recorded as another tool's.
        let reused = |id: &serde_json::Value| {
            Refusal::new(
                RefusalCode::MalformedMcp,
                format!(
                    "two calls of this MCP session await answers with the id {id}: their results could not be told apart"
                ),
            )
        };
        if let Some(id) = mcp::duplicate_id(&results) {
            return Err(reused(id));
        }
        let linked = self.linked_stream(key, uri);
        if let Some(stream) = &linked {
            let too_many = || {
                Refusal::new(
                    RefusalCode::MalformedMcp,
                    format!(
                        "more than {} requests of this MCP session await answers; their results could not be filtered and recorded",
                        mcp::MAX_PENDING_LISTS
                    ),
                )
            };
            if !stream.expect_lists(lists) {
                return Err(too_many());
            }
            match stream.expect_results(&results) {
                Ok(()) => {}
                Err(mcp::PendingError::TooMany) => return Err(too_many()),
                Err(mcp::PendingError::Reused(id)) => return Err(reused(&id)),
            }
        }
        let conversation = records.then(|| mcp::lock(&proxy.conversation));
        let record = conversation.as_deref().map(|c| c.record(Instant::now()));
        let record = record.as_ref().map(|r| r as &dyn Record);
        let mut session = mcp::lock(&proxy.session);
        for call in calls {
            session.called(&call.action, record);
        }
        Ok((results, linked.is_some()))
    }

    /// Filters the `*/list` results in an MCP server's answer, as JSON or
    /// as an event stream, by the policy in force when they arrive, and
    /// records the content of the answers to `results` before they pass,
    /// and of everything else the server sent as `others` (its host) where
    /// the session keeps a record.
    pub(super) async fn answer(
        &self,
        response: Response<Body>,
        listing: AnswerRead,
        key: UpstreamKey,
        path: String,
    ) -> Response<Body> {
        let AnswerRead {
            lists,
            mut results,
            others,
            credential,
        } = listing;
        let visible = visible_at(
            self.proxy.clone(),
            self.binary.clone(),
            &key,
            path,
            credential,
        );
        let event_stream = is_event_stream(&response);
        let (mut parts, body) = response.into_parts();
        parts.headers.remove(header::CONTENT_LENGTH);
        if event_stream {
            let recorder = (!results.is_empty() || others.is_some()).then(|| self.proxy.clone());
            let mut filter = mcp::SseFilter::new(lists);
            filter.expect_results(results);
            if let Some(others) = others {
                filter.record_others_as(others);
            }
            let filtered = McpEvents {
                inner: body,
                filter,
                visible,
                done: false,
                origin: None,
                link: None,
                recorder,
            };
            return Response::from_parts(parts, filtered.boxed());
        }
        let bytes = match read_whole(body, MAX_LIST_BYTES).await {
            Ok(bytes) => bytes,
            Err(e) => {
                return error_response(
                    StatusCode::BAD_GATEWAY,
                    "upstream_protocol",
                    &format!("the MCP server's answer could not be read whole: {e}"),
                );
            }
        };
        let mut observed = Vec::new();
        let filtered = match serde_json::from_slice::<serde_json::Value>(&bytes) {
            Ok(mut message) => {
                // JSON the client may read otherwise (a key twice, a number
                // it rounds differently): what the model saw is in doubt.
                if (!results.is_empty() || others.is_some())
                    && agentgate_policy::strict_json::parse(&bytes).is_err()
                {
                    observed.push(None);
                }
                mcp::observe_answers(&message, &mut results, others.as_ref(), &mut observed);
                if mcp::filter_lists(&mut message, &lists, &*visible) > 0 {
                    Bytes::from(message.to_string())
                } else {
                    bytes
                }
            }
            Err(_) if bytes.is_empty() => bytes,
            // Not JSON (an error page, a 202's "Accepted"): its text is the
            // host's content; what is not text is unread.
            Err(_) => {
                match (&others, std::str::from_utf8(&bytes)) {
                    (Some(host), Ok(text)) => {
                        observed.push(Some((host.clone(), vec![text.to_string()])))
                    }
                    (None, _) if results.is_empty() => {}
                    _ => observed.push(None),
                }
                bytes
            }
        };
        if !observed.is_empty() {
            self.proxy.record_answers(observed);
        }
        Response::from_parts(parts, full(filtered))
    }
}
