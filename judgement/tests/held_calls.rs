//! Held calls (`mode: ask`, docs/policy-semantics.md §8.6): where `mode` may
//! be written, what the matcher does with a call only a held entry
//! matches, how a body holding one is judged, and what the agent reads
//! when a person denies it or nobody decides.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use agentgate_judgement::findings::CompiledFindings;
use agentgate_judgement::held::{HoldAnswer, HoldDecision, HoldRequest, unavailable};
use agentgate_judgement::mcp_messages::{Judge, Judged, judge_messages};
use agentgate_judgement::refusal::RefusalCode;
use agentgate_policy::action::{Action, McpAction, McpKind};
use agentgate_policy::compile::{CompiledPolicy, Limits, Role, compile};
use agentgate_policy::index::HostIndex;
use agentgate_policy::load::load_document;
use agentgate_policy::matcher::{Caller, McpServer, allows, decide_mcp_indexed, held_by};
use serde_json::{Map, Value, json};

const DRIVE: &str = r#"network:
  - name: drive
    endpoints:
      - host: drive.internal
        ports: [443]
        protocol: mcp
        path: /mcp
        tools:
          - name: list_files
          - name: delete_file
            arguments:
              file_id: {oneOf: ["7"]}
          - {name: delete_file, mode: ask}
          - {name: wipe_*, mode: ask}
        denyTools:
          - name: wipe_all
"#;

fn compiled(text: &str, role: Role) -> Result<CompiledPolicy, String> {
    let limits = Limits::default();
    let doc = load_document(text, &limits).map_err(|e| e.to_string())?;
    compile(&doc.policy, role, &limits).map_err(|e| e.to_string())
}

fn call(name: &str, args: Value) -> McpAction {
    let Value::Object(args) = args else {
        panic!("arguments are an object")
    };
    McpAction {
        binary: "/usr/bin/agent".into(),
        host: "drive.internal".into(),
        port: 443,
        path: "/mcp".into(),
        kind: McpKind::Tool,
        name: name.into(),
        args,
        sources: None,
        credential: None,
    }
}

#[test]
fn mode_is_written_on_a_sandboxs_tools_only() {
    assert!(compiled(DRIVE, Role::Sandbox).is_ok());
    let ceiling = compiled(DRIVE, Role::Maximum).unwrap_err();
    assert!(
        ceiling.contains("network[0].endpoints[0].tools[2].mode"),
        "{ceiling}"
    );
    let denied = DRIVE.replace("- name: wipe_all", "- {name: wipe_all, mode: ask}");
    let error = compiled(&denied, Role::Sandbox).unwrap_err();
    assert!(error.contains("denyTools[0].mode"), "{error}");
    let prompt = DRIVE.replace(
        "        denyTools:",
        "        prompts: [{name: p, mode: ask}]\n        denyTools:",
    );
    let error = compiled(&prompt, Role::Sandbox).unwrap_err();
    assert!(error.contains("prompts[0].mode"), "{error}");
    let unknown = DRIVE.replace(
        "mode: ask}\n          - {name: wipe",
        "mode: maybe}\n          - {name: wipe",
    );
    assert!(compiled(&unknown, Role::Sandbox).is_err());
}

#[test]
fn a_held_entry_holds_what_no_allow_entry_allows_and_deny_still_wins() {
    let policy = compiled(DRIVE, Role::Sandbox).unwrap();
    let index = HostIndex::build(&policy);
    let decide = |t: &McpAction| decide_mcp_indexed(&policy, &index, Caller::Binary(&t.binary), t);
    let held = |t: &McpAction| held_by(&policy, &index, Caller::Binary(&t.binary), t, None);

    let named = call("delete_file", json!({"file_id": "7"}));
    assert!(decide(&named).allow);

    let other = call("delete_file", json!({"file_id": "13"}));
    assert!(!decide(&other).allow, "a held call is not allowed");
    assert_eq!(held(&other).as_deref(), Some("drive"));
    assert!(allows(&policy, &Action::Mcp(other)), "but it is authority");

    let wipe = call("wipe_all", json!({}));
    assert_eq!(held(&wipe), None, "a denyTools entry refuses, never holds");
    assert!(!allows(&policy, &Action::Mcp(wipe)));

    let stranger = call("rename_file", json!({}));
    assert_eq!(held(&stranger), None);
}

fn judge_body(policy: &CompiledPolicy, body: Value) -> Judged {
    let index = HostIndex::build(policy);
    let findings = CompiledFindings::default();
    let judge = Judge {
        policy,
        index: &index,
        caller: Caller::Binary("/usr/bin/agent"),
        shown: "/usr/bin/agent",
        findings: &findings,
        server: McpServer {
            host: "drive.internal",
            port: 443,
            path: "/mcp",
        },
        record: None,
        credential: None,
    };
    judge_messages(body.to_string().as_bytes(), &|m| judge.message(m))
}

fn tools_call(id: u64, name: &str, args: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {"name": name, "arguments": args}})
}

#[test]
fn a_body_of_one_held_call_is_held_and_a_batch_is_refused() {
    let policy = compiled(DRIVE, Role::Sandbox).unwrap();
    let Judged::Hold(held) = judge_body(
        &policy,
        tools_call(4, "delete_file", json!({"file_id": "13"})),
    ) else {
        panic!("one held call is held")
    };
    assert_eq!(held.held.rule, "drive");
    assert!(
        held.held
            .reason
            .contains("no rule allows tools/call delete_file"),
        "{}",
        held.held.reason
    );

    let request = HoldRequest::of(&held, 120);
    assert_eq!(request.tool, "delete_file");
    assert_eq!(request.arguments.get("file_id"), Some(&json!("13")));
    assert_eq!(request.server.host, "drive.internal");
    let wire = serde_json::to_value(&request).unwrap();
    assert_eq!(wire["timeoutSeconds"], 120);

    // Approved: the body goes on as one forwarded call.
    let Judged::Forward { calls, .. } = (*held).clone().approved() else {
        panic!("approved is forwarded")
    };
    assert_eq!(calls.len(), 1);

    // Denied, expired, or not asked: a JSON-RPC refusal to its id.
    for (answer, code) in [
        (HoldDecision::Denied, RefusalCode::HeldCallDenied),
        (HoldDecision::Expired, RefusalCode::HeldCallExpired),
    ] {
        let answer = HoldAnswer {
            decision: answer,
            held_call: Some("drive-bot-x7k2p".into()),
            decided_by: Some("alice".into()),
            message: Some("not this file".into()),
        };
        let refusal = answer.verdict(&held).unwrap_err();
        assert_eq!(refusal.code, code);
        assert!(
            refusal.reason.contains("heldcall drive-bot-x7k2p"),
            "{}",
            refusal.reason
        );
        let Judged::Answer { status, body, .. } = held.refused(refusal) else {
            panic!("refused is answered")
        };
        assert_eq!(status, 200);
        let body: Value = serde_json::from_str(&body).unwrap();
        assert_eq!(body["id"], 4);
        assert_eq!(body["error"]["data"]["code"], code.as_str());
    }
    let refusal = unavailable(&held, "this proxy has no approval service");
    assert_eq!(refusal.code, RefusalCode::HeldCallUnavailable);
    assert!(
        refusal.reason.contains("no rule allows"),
        "{}",
        refusal.reason
    );

    // An allowed call is forwarded with its call, held entries or not.
    let Judged::Forward { calls, .. } = judge_body(&policy, tools_call(5, "list_files", json!({})))
    else {
        panic!("an allowed call is forwarded")
    };
    assert_eq!(calls.len(), 1, "the forwarded body keeps its call");

    let batch = json!([
        tools_call(1, "list_files", json!({})),
        tools_call(2, "delete_file", json!({"file_id": "13"})),
    ]);
    let Judged::Answer { body, refusal, .. } = judge_body(&policy, batch) else {
        panic!("a batch with a held call is answered")
    };
    assert_eq!(refusal.code, RefusalCode::HeldCallUnavailable);
    assert!(
        refusal.reason.contains("send the call alone"),
        "{}",
        refusal.reason
    );
    let answers: Vec<Value> = serde_json::from_str(&body).unwrap();
    assert_eq!(answers.len(), 2, "every message of the batch is answered");
}

#[test]
fn an_answer_reads_one_way() {
    let answer: HoldAnswer =
        serde_json::from_str(r#"{"decision": "approved", "heldCall": "x"}"#).unwrap();
    assert_eq!(answer.decision, HoldDecision::Approved);
    assert!(serde_json::from_str::<HoldAnswer>(r#"{"decision": "maybe"}"#).is_err());
    let request: Result<HoldRequest, _> = serde_json::from_value(json!({
        "kind": "tools/call", "tool": "t", "arguments": Map::new(), "binary": "b",
        "server": {"host": "h", "port": 1, "path": "/"}, "rule": "r", "reason": "x",
        "timeoutSeconds": 5, "extra": true
    }));
    assert!(request.is_err(), "an unknown field is refused");
}
