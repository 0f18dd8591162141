//! What an agent's requests to its model provider say about provenance
//! (docs/policy-semantics.md §8.3): the pieces of content the agent put in
//! front of the model, each with its source. The agent sends its whole
//! conversation with every request, so every piece arrives many times;
//! [`agentgate_policy::provenance::Lineage`] keeps each once.
//!
//! Three request formats, told apart by the request path:
//! - OpenAI Chat Completions (`…/chat/completions`): `messages[]`; roles
//!   `system`, `developer` and `user` are `user`, role `tool` is the tool
//!   whose call (`tool_call_id`, in an earlier `assistant` message's
//!   `tool_calls`) it answers;
//! - OpenAI Responses (`…/responses`): `instructions`, and `input` (a
//!   string, or items: messages as above, `function_call` items naming the
//!   tool of a `call_id`, `function_call_output` items answering one);
//! - Anthropic Messages (`…/messages`): `system`, and `messages[]` whose
//!   `user` content is text (`user`) or `tool_result` blocks (the tool of
//!   the `tool_use` block with that `id`).
//!
//! Assistant content is the model's own output and no source. A tool
//! result whose call the request does not name is the tool
//! [`UNKNOWN_TOOL`]: it is never `user`. Pure: no I/O.

use std::collections::HashMap;
use std::collections::hash_map::RandomState;
use std::hash::BuildHasher;

use agentgate_policy::provenance::{Lineage, Origin, Position, Record, Source};
use serde_json::Value;

/// The tool a tool result is recorded as when the request shows no
/// earlier call with its id: never `user`; `tool:*` covers it, a `from`
/// naming a real tool does not.
pub const UNKNOWN_TOOL: &str = "(unknown call)";

/// A model provider's request format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProviderApi {
    /// OpenAI Chat Completions.
    ChatCompletions,
    /// OpenAI Responses.
    Responses,
    /// Anthropic Messages.
    AnthropicMessages,
}

impl ProviderApi {
    /// The format a request path names (its last segments, so versioned or
    /// prefixed paths such as `/openai/v1/chat/completions` are read too).
    pub fn from_path(path: &str) -> Option<ProviderApi> {
        let path = path.split('?').next().unwrap_or(path).trim_end_matches('/');
        if path.ends_with("/chat/completions") {
            Some(ProviderApi::ChatCompletions)
        } else if path.ends_with("/responses") {
            Some(ProviderApi::Responses)
        } else if path.ends_with("/messages") {
            Some(ProviderApi::AnthropicMessages)
        } else {
            None
        }
    }
}

/// Why a request body could not be read. The caller fails closed: the
/// request is refused (its content would otherwise go unrecorded).
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ProviderError {
    /// The body is not JSON.
    #[error("the model request is not JSON: {0}")]
    NotJson(String),
    /// A field has a shape the format does not allow.
    #[error("the model request's {field} is not {expected}")]
    Shape {
        /// Where, as a JSON path (`messages[2].content`).
        field: String,
        /// What the format allows there.
        expected: &'static str,
    },
}

fn shape(field: impl Into<String>, expected: &'static str) -> ProviderError {
    ProviderError::Shape {
        field: field.into(),
        expected,
    }
}

/// The pieces of content of a request body to a provider of format `api`,
/// with their sources, in the order they appear.
pub fn conversation_pieces(
    api: ProviderApi,
    body: &[u8],
) -> Result<Vec<(Source, String)>, ProviderError> {
    let body: Value =
        serde_json::from_slice(body).map_err(|e| ProviderError::NotJson(e.to_string()))?;
    if !body.is_object() {
        return Err(shape("body", "an object"));
    }
    let mut out = Vec::new();
    match api {
        ProviderApi::ChatCompletions => chat_completions(&body, &mut out)?,
        ProviderApi::Responses => responses(&body, &mut out)?,
        ProviderApi::AnthropicMessages => anthropic(&body, &mut out)?,
    }
    Ok(out)
}

/// The text of a content value: a string, or parts whose `text` (or, for
/// nested tool results, `content`) is collected; other parts (images,
/// files) carry no text.
fn texts(value: &Value, field: &str, out: &mut Vec<String>) -> Result<(), ProviderError> {
    match value {
        Value::Null => Ok(()),
        Value::String(s) => {
            out.push(s.clone());
            Ok(())
        }
        Value::Array(parts) => {
            for (i, part) in parts.iter().enumerate() {
                let at = format!("{field}[{i}]");
                match part {
                    Value::String(s) => out.push(s.clone()),
                    Value::Object(o) => {
                        if let Some(text) = o.get("text") {
                            let text = text
                                .as_str()
                                .ok_or_else(|| shape(format!("{at}.text"), "a string"))?;
                            out.push(text.to_string());
                        }
                        if let Some(inner) = o.get("content") {
                            texts(inner, &format!("{at}.content"), out)?;
                        }
                    }
                    _ => return Err(shape(at, "a string or a content part")),
                }
            }
            Ok(())
        }
        _ => Err(shape(field, "a string or a list of content parts")),
    }
}

fn push_texts(
    source: Source,
    value: &Value,
    field: &str,
    out: &mut Vec<(Source, String)>,
) -> Result<(), ProviderError> {
    let mut found = Vec::new();
    texts(value, field, &mut found)?;
    out.extend(found.into_iter().map(|t| (source.clone(), t)));
    Ok(())
}

fn array<'a>(body: &'a Value, field: &str) -> Result<&'a [Value], ProviderError> {
    match body.get(field) {
        None | Some(Value::Null) => Ok(&[]),
        Some(Value::Array(items)) => Ok(items),
        Some(_) => Err(shape(field, "a list")),
    }
}

fn str_field<'a>(item: &'a Value, key: &str, at: &str) -> Result<&'a str, ProviderError> {
    item.get(key)
        .and_then(Value::as_str)
        .ok_or_else(|| shape(format!("{at}.{key}"), "a string"))
}

fn tool_source(calls: &HashMap<String, String>, id: &str) -> Source {
    Source::Tool(
        calls
            .get(id)
            .cloned()
            .unwrap_or_else(|| UNKNOWN_TOOL.to_string()),
    )
}

/// Roles whose content the agent wrote for the model: the user's.
fn is_user_role(role: &str) -> bool {
    matches!(role, "system" | "developer" | "user")
}

fn chat_completions(body: &Value, out: &mut Vec<(Source, String)>) -> Result<(), ProviderError> {
    let mut calls: HashMap<String, String> = HashMap::new();
    for (i, message) in array(body, "messages")?.iter().enumerate() {
        let at = format!("messages[{i}]");
        let role = str_field(message, "role", &at)?;
        let content = message.get("content").unwrap_or(&Value::Null);
        match role {
            r if is_user_role(r) => {
                push_texts(Source::User, content, &format!("{at}.content"), out)?
            }
            "assistant" => {
                for (j, call) in array(message, "tool_calls")?.iter().enumerate() {
                    let call_at = format!("{at}.tool_calls[{j}]");
                    let id = str_field(call, "id", &call_at)?;
                    let function = call
                        .get("function")
                        .ok_or_else(|| shape(format!("{call_at}.function"), "an object"))?;
                    let name = str_field(function, "name", &format!("{call_at}.function"))?;
                    calls.insert(id.to_string(), name.to_string());
                }
            }
            "tool" => {
                let id = str_field(message, "tool_call_id", &at)?;
                push_texts(
                    tool_source(&calls, id),
                    content,
                    &format!("{at}.content"),
                    out,
                )?;
            }
            // Legacy function results name their function themselves.
            "function" => {
                let name = str_field(message, "name", &at)?;
                push_texts(
                    Source::Tool(name.to_string()),
                    content,
                    &format!("{at}.content"),
                    out,
                )?;
            }
            _ => return Err(shape(format!("{at}.role"), "a known role")),
        }
    }
    Ok(())
}

fn responses(body: &Value, out: &mut Vec<(Source, String)>) -> Result<(), ProviderError> {
    if let Some(instructions) = body.get("instructions") {
        push_texts(Source::User, instructions, "instructions", out)?;
    }
    let items = match body.get("input") {
        None | Some(Value::Null) => return Ok(()),
        Some(Value::String(s)) => {
            out.push((Source::User, s.clone()));
            return Ok(());
        }
        Some(Value::Array(items)) => items,
        Some(_) => return Err(shape("input", "a string or a list of items")),
    };
    let mut calls: HashMap<String, String> = HashMap::new();
    for (i, item) in items.iter().enumerate() {
        let at = format!("input[{i}]");
        let kind = item
            .get("type")
            .and_then(Value::as_str)
            .unwrap_or("message");
        match kind {
            "message" => {
                let role = str_field(item, "role", &at)?;
                let content = item.get("content").unwrap_or(&Value::Null);
                if is_user_role(role) {
                    push_texts(Source::User, content, &format!("{at}.content"), out)?;
                } else if role != "assistant" {
                    return Err(shape(format!("{at}.role"), "a known role"));
                }
            }
            "function_call" | "custom_tool_call" => {
                let id = str_field(item, "call_id", &at)?;
                let name = str_field(item, "name", &at)?;
                calls.insert(id.to_string(), name.to_string());
            }
            "function_call_output" | "custom_tool_call_output" => {
                let id = str_field(item, "call_id", &at)?;
                let output = item.get("output").unwrap_or(&Value::Null);
                push_texts(
                    tool_source(&calls, id),
                    output,
                    &format!("{at}.output"),
                    out,
                )?;
            }
            // The model's own output, echoed back: no source.
            "reasoning" | "output_text" => {}
            _ => return Err(shape(format!("{at}.type"), "a known item type")),
        }
    }
    Ok(())
}

fn anthropic(body: &Value, out: &mut Vec<(Source, String)>) -> Result<(), ProviderError> {
    if let Some(system) = body.get("system") {
        push_texts(Source::User, system, "system", out)?;
    }
    let mut calls: HashMap<String, String> = HashMap::new();
    for (i, message) in array(body, "messages")?.iter().enumerate() {
        let at = format!("messages[{i}]");
        let role = str_field(message, "role", &at)?;
        let content = message.get("content").unwrap_or(&Value::Null);
        let blocks: &[Value] = match content {
            Value::String(s) => {
                if role == "user" {
                    out.push((Source::User, s.clone()));
                }
                continue;
            }
            Value::Array(blocks) => blocks,
            _ => {
                return Err(shape(
                    format!("{at}.content"),
                    "a string or a list of blocks",
                ));
            }
        };
        match role {
            "user" => {
                for (j, block) in blocks.iter().enumerate() {
                    let block_at = format!("{at}.content[{j}]");
                    match block.get("type").and_then(Value::as_str) {
                        Some("tool_result") => {
                            let id = str_field(block, "tool_use_id", &block_at)?;
                            let inner = block.get("content").unwrap_or(&Value::Null);
                            push_texts(
                                tool_source(&calls, id),
                                inner,
                                &format!("{block_at}.content"),
                                out,
                            )?;
                        }
                        Some("text") => {
                            out.push((Source::User, str_field(block, "text", &block_at)?.into()))
                        }
                        // Images and documents carry no text to match.
                        Some(_) => {}
                        None => return Err(shape(format!("{block_at}.type"), "a string")),
                    }
                }
            }
            "assistant" => {
                for (j, block) in blocks.iter().enumerate() {
                    if block.get("type").and_then(Value::as_str) == Some("tool_use") {
                        let block_at = format!("{at}.content[{j}]");
                        let id = str_field(block, "id", &block_at)?;
                        let name = str_field(block, "name", &block_at)?;
                        calls.insert(id.to_string(), name.to_string());
                    }
                }
            }
            _ => return Err(shape(format!("{at}.role"), "user or assistant")),
        }
    }
    Ok(())
}

/// The record of the conversation the agent holds with its model now
/// (docs/policy-semantics.md §8.3). A tool call is the model's answer to
/// the latest model request, so it is judged by that conversation's
/// content: a request whose opening (its first two pieces: the system
/// prompt and the user's first message, typically) differs from the
/// record's starts a new record. A value an earlier conversation held is
/// then seen nowhere, which only narrows what `from` allows.
///
/// A tool result that quotes one of agentgate's own refusals is not
/// recorded: a refusal echoes the refused call's arguments, and recording
/// that echo as the tool's content would launder a made-up value into
/// `tool:NAME` for the retry.
///
/// What the servers sent (MCP answers, host responses) is kept twice:
/// since the conversation's opening, which an allow entry's `from` and the
/// runtime trifecta read with the conversation, and for the whole session,
/// which a deny entry's `from` reads, so that an agent cannot make a tool
/// result forgotten by changing its system prompt. Content that reached
/// the agent unread is doubt for the rest of the session (see
/// [`ConversationRecord::record`]).
#[derive(Debug)]
pub struct ConversationRecord {
    opening: Option<u64>,
    lineage: Lineage,
    answers_now: Lineage,
    answers: Lineage,
    limit_bytes: usize,
    hasher: RandomState,
    refusals: std::collections::VecDeque<String>,
}

/// The most refusal texts a record remembers (oldest forgotten first).
pub const MAX_REMEMBERED_REFUSALS: usize = 256;

impl ConversationRecord {
    /// An empty record keeping at most `limit_bytes` of content.
    pub fn new(limit_bytes: usize) -> ConversationRecord {
        ConversationRecord {
            opening: None,
            lineage: Lineage::new(limit_bytes),
            answers_now: Lineage::new(limit_bytes),
            answers: Lineage::new(limit_bytes),
            limit_bytes,
            hasher: RandomState::new(),
            refusals: std::collections::VecDeque::new(),
        }
    }

    /// Remembers the text of a refusal the proxy answered a call with, so
    /// that a tool result quoting it is not recorded.
    pub fn remember_refusal(&mut self, text: &str) {
        if self.refusals.len() == MAX_REMEMBERED_REFUSALS {
            self.refusals.pop_front();
        }
        self.refusals.push_back(text.to_string());
    }

    /// Records the pieces of one model request, first starting a new
    /// record when the request opens another conversation. True when it did.
    pub fn observe_request(&mut self, pieces: &[(Source, String)]) -> bool {
        let opening = self.hasher.hash_one(&pieces[..pieces.len().min(2)]);
        let fresh = self.opening != Some(opening);
        if fresh {
            self.opening = Some(opening);
            self.lineage = Lineage::new(self.limit_bytes);
            self.answers_now = Lineage::new(self.limit_bytes);
        }
        for (source, text) in pieces {
            let echoes_refusal = matches!(source, Source::Tool(_))
                && self.refusals.iter().any(|r| text.contains(r.as_str()));
            if !echoes_refusal {
                self.lineage.observe(source.clone(), text);
            }
        }
        fresh
    }

    /// Records a piece of content an answer showed the agent (a tool's
    /// result as the MCP server sent it, a host's response body), in the
    /// current conversation.
    pub fn observe_answer(&mut self, source: Source, content: &str) {
        self.answers_now.observe(source.clone(), content);
        self.answers.observe(source, content);
    }

    /// Content reached the agent that could not be read to record: the
    /// record counts as evicted from now on, for the rest of the session
    /// (doubt never allows).
    pub fn lose(&mut self) {
        self.answers.mark_lost();
    }

    /// What `from` is judged by: the current conversation with what the
    /// servers sent since it opened, and for a deny entry what they sent
    /// in the whole session.
    pub fn record(&self) -> SessionRecord<'_> {
        SessionRecord {
            conversation: &self.lineage,
            answers_now: &self.answers_now,
            answers: &self.answers,
        }
    }

    /// Bytes of content kept, every part.
    pub fn kept_bytes(&self) -> usize {
        self.lineage.kept_bytes() + self.answers_now.kept_bytes() + self.answers.kept_bytes()
    }

    /// The current conversation's lineage (without the servers' answers).
    pub fn lineage(&self) -> &Lineage {
        &self.lineage
    }
}

/// The record a call is judged by: a value's sources are those the current
/// conversation shows joined with those the servers' answers since its
/// opening show; a deny entry (or a region) joins every answer of the
/// session instead, which can only make it hold. Doubt in any part
/// (content dropped or unread) is doubt in the whole.
#[derive(Debug, Clone, Copy)]
pub struct SessionRecord<'a> {
    conversation: &'a Lineage,
    answers_now: &'a Lineage,
    answers: &'a Lineage,
}

impl SessionRecord<'_> {
    fn joined(&self, answers: &Lineage, leaf: &Value) -> Origin {
        self.joined_by(answers, leaf, Lineage::origin)
    }

    fn joined_by(
        &self,
        answers: &Lineage,
        leaf: &Value,
        origin: fn(&Lineage, &Value) -> Origin,
    ) -> Origin {
        match (origin(self.conversation, leaf), origin(answers, leaf)) {
            (Origin::Untracked, _) | (_, Origin::Untracked) => Origin::Untracked,
            (Origin::Seen(mut a), Origin::Seen(b)) => {
                a.extend(b);
                Origin::Seen(a)
            }
            (Origin::Seen(a), Origin::Nowhere { .. })
            | (Origin::Nowhere { .. }, Origin::Seen(a)) => Origin::Seen(a),
            (Origin::Nowhere { .. }, Origin::Nowhere { .. }) => Origin::Nowhere {
                evicted: self.evicted(),
            },
        }
    }
}

impl Record for SessionRecord<'_> {
    fn origin_at(&self, _at: &Position<'_>, leaf: &Value) -> Origin {
        self.joined(self.answers_now, leaf)
    }

    fn origin_for_deny(&self, _at: &Position<'_>, leaf: &Value) -> Origin {
        self.joined(self.answers, leaf)
    }

    fn evicted(&self) -> bool {
        self.conversation.evicted() || self.answers_now.evicted() || self.answers.evicted()
    }

    fn holds_content_from(&self, source: &Source) -> bool {
        self.conversation.holds_content_from(source) || self.answers_now.holds_content_from(source)
    }

    fn carrier_origin(&self, _at: &Position<'_>, leaf: &Value) -> Origin {
        self.joined_by(self.answers_now, leaf, Lineage::carrier_origin)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pieces(api: ProviderApi, body: Value) -> Vec<(String, String)> {
        conversation_pieces(api, body.to_string().as_bytes())
            .unwrap()
            .into_iter()
            .map(|(s, t)| (s.to_string(), t))
            .collect()
    }

    fn p(source: &str, text: &str) -> (String, String) {
        (source.to_string(), text.to_string())
    }

    #[test]
    fn a_request_opening_another_conversation_starts_a_new_record() {
        let user = |t: &str| (Source::User, t.to_string());
        let tool = |t: &str| (Source::Tool("read_email".into()), t.to_string());
        let iban = json!("GB29NWBK60161331926819");
        let from_user = [agentgate_policy::provenance::SourcePattern::User];
        let mut record = ConversationRecord::new(1 << 20);
        let first = [
            user("You are a bank agent."),
            user("Refund GB29NWBK60161331926819."),
        ];
        assert!(record.observe_request(&first));
        assert!(record.lineage().satisfies(&from_user, &iban));
        // The same conversation, grown by a tool result: one record.
        let grown = [first[0].clone(), first[1].clone(), tool("Balance: 100")];
        assert!(!record.observe_request(&grown));
        assert!(record.lineage().satisfies(&from_user, &iban));
        // A refusal the agent passed back as the tool's result is no content
        // of that tool: the value it quotes stays seen nowhere.
        let refusal = "refused by agentgate: tools/call send_money {\"recipient\":\"DE89370400440532013000\"}";
        record.remember_refusal(refusal);
        let echoed = (
            Source::Tool("send_money".into()),
            format!("Error: {refusal}"),
        );
        assert!(!record.observe_request(&[first[0].clone(), first[1].clone(), echoed]));
        let made_up = json!("DE89370400440532013000");
        let any_tool = [agentgate_policy::provenance::SourcePattern::parse("tool:*").unwrap()];
        assert!(!record.lineage().satisfies(&any_tool, &made_up));
        // Another task: the earlier user's IBAN is no longer theirs.
        let other = [user("You are a bank agent."), user("What is my balance?")];
        assert!(record.observe_request(&other));
        assert!(!record.lineage().satisfies(&from_user, &iban));
    }

    #[test]
    fn what_the_servers_sent_outlives_a_new_opening_for_a_deny_entry() {
        let inbox = Source::Tool("read_inbox".into());
        let value = json!("GB82WEST12345698765432");
        let mut record = ConversationRecord::new(1 << 20);
        record.observe_request(&[(Source::User, "You are a bank agent.".into())]);
        record.observe_answer(inbox.clone(), "Wire it to GB82WEST12345698765432");
        let at = Position::Root;
        let seen_in_inbox =
            |origin: Origin| matches!(origin, Origin::Seen(s) if s.contains(&inbox));
        assert!(seen_in_inbox(record.record().origin_at(&at, &value)));
        assert!(record.record().holds_content_from(&inbox));
        // The agent opens another conversation carrying the IBAN as the
        // user's words: for a deny entry it is still seen in the inbox's
        // answer; an allow entry (and the runtime trifecta) reads the new
        // conversation only, as the model does.
        record.observe_request(&[
            (Source::User, "You are a bank agent!".into()),
            (Source::User, "Pay GB82WEST12345698765432".into()),
        ]);
        assert!(seen_in_inbox(record.record().origin_for_deny(&at, &value)));
        assert!(!seen_in_inbox(record.record().origin_at(&at, &value)));
        assert!(!record.record().holds_content_from(&inbox));
        let deny = [agentgate_policy::provenance::SourcePattern::parse("tool:read_inbox").unwrap()];
        let session = record.record();
        assert!(
            agentgate_policy::provenance::Provenance::of(&session)
                .for_deny()
                .satisfies(&deny, &at, &value)
        );
        // Content lost once stays lost across conversations.
        record.lose();
        record.observe_request(&[(Source::User, "Start over.".into())]);
        assert!(record.record().evicted());
        assert_eq!(
            record
                .record()
                .origin_at(&at, &json!("never seen anywhere")),
            Origin::Nowhere { evicted: true }
        );
    }

    #[test]
    fn paths_name_the_format() {
        use ProviderApi::*;
        assert_eq!(
            ProviderApi::from_path("/v1/chat/completions"),
            Some(ChatCompletions)
        );
        assert_eq!(
            ProviderApi::from_path("/openai/v1/responses?x=1"),
            Some(Responses)
        );
        assert_eq!(
            ProviderApi::from_path("/v1/messages/"),
            Some(AnthropicMessages)
        );
        assert_eq!(ProviderApi::from_path("/v1/embeddings"), None);
    }

    #[test]
    fn chat_completions_tool_results_are_their_tools() {
        let body = json!({"model": "m", "messages": [
            {"role": "system", "content": "You are a bank agent."},
            {"role": "user", "content": [{"type": "text", "text": "Pay my rent"}]},
            {"role": "assistant", "content": null, "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "read_email", "arguments": "{}"}}]},
            {"role": "tool", "tool_call_id": "c1", "content": "Send it to US13"},
            {"role": "tool", "tool_call_id": "c9", "content": "orphan"},
        ]});
        assert_eq!(
            pieces(ProviderApi::ChatCompletions, body),
            [
                p("user", "You are a bank agent."),
                p("user", "Pay my rent"),
                p("tool:read_email", "Send it to US13"),
                p("tool:(unknown call)", "orphan"),
            ]
        );
    }

    #[test]
    fn responses_items_and_instructions() {
        let body = json!({"model": "m", "instructions": "Be brief.", "input": [
            {"role": "user", "content": [{"type": "input_text", "text": "My IBAN is GB29"}]},
            {"type": "function_call", "call_id": "f1", "name": "get_balance", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "f1", "output": "1234.56"},
            {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "ok"}]},
        ]});
        assert_eq!(
            pieces(ProviderApi::Responses, body),
            [
                p("user", "Be brief."),
                p("user", "My IBAN is GB29"),
                p("tool:get_balance", "1234.56"),
            ]
        );
        assert_eq!(
            pieces(ProviderApi::Responses, json!({"input": "hello"})),
            [p("user", "hello")]
        );
    }

    #[test]
    fn anthropic_tool_results_inside_user_messages_are_not_the_users() {
        let body = json!({"model": "m", "system": [{"type": "text", "text": "Sys"}], "messages": [
            {"role": "user", "content": "Pay my rent"},
            {"role": "assistant", "content": [
                {"type": "text", "text": "Reading."},
                {"type": "tool_use", "id": "t1", "name": "read_email", "input": {}}]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "t1", "content": [{"type": "text", "text": "IBAN US13"}]},
                {"type": "text", "text": "and hurry"}]},
        ]});
        assert_eq!(
            pieces(ProviderApi::AnthropicMessages, body),
            [
                p("user", "Sys"),
                p("user", "Pay my rent"),
                p("tool:read_email", "IBAN US13"),
                p("user", "and hurry"),
            ]
        );
    }

    #[test]
    fn what_cannot_be_read_is_an_error_at_its_path() {
        let err = |api, body: &str| conversation_pieces(api, body.as_bytes()).unwrap_err();
        assert!(matches!(
            err(ProviderApi::ChatCompletions, "{"),
            ProviderError::NotJson(_)
        ));
        assert_eq!(
            err(
                ProviderApi::ChatCompletions,
                r#"{"messages": [{"role": "user", "content": 5}]}"#
            )
            .to_string(),
            "the model request's messages[0].content is not a string or a list of content parts"
        );
        assert_eq!(
            err(
                ProviderApi::ChatCompletions,
                r#"{"messages": [{"role": "wizard", "content": "x"}]}"#
            )
            .to_string(),
            "the model request's messages[0].role is not a known role"
        );
        assert_eq!(
            err(
                ProviderApi::AnthropicMessages,
                r#"{"messages": [{"role": "user", "content": [{"type": "tool_result"}]}]}"#
            )
            .to_string(),
            "the model request's messages[0].content[0].tool_use_id is not a string"
        );
        assert!(matches!(
            err(ProviderApi::Responses, "[]"),
            ProviderError::Shape { .. }
        ));
    }
}
