//! AgentScan reconciler: recomputes the findings from the graph (the
//! scanner's own list is never trusted) and writes them with
//! `FindingsClear` and `Ready` (with `Stalled` while the image carries
//! findings or the graph is invalid).

use std::sync::Arc;

use kube::api::Api;
use kube::runtime::controller::{Action, Controller};
use kube::runtime::events::EventType;
use kube::runtime::watcher;
use kube::{Resource, ResourceExt};

use crate::{Context, ControllerError};
use agentgate_api::conditions::{self, Status, Summary};
use agentgate_api::crd::{AgentScan, AgentScanStatus};
use agentgate_governance::convert::{ToApi, ToDomain};
use agentgate_trifecta::{Finding, Severity, analyze};

/// `2 findings (1 CRITICAL, 1 HIGH): AG-TRIFECTA → send_email, …`
pub fn summary(findings: &[Finding]) -> String {
    if findings.is_empty() {
        return "no trifecta findings".to_string();
    }
    let count = |s: Severity| findings.iter().filter(|f| f.severity == s).count();
    let sinks: Vec<String> = findings.iter().map(Finding::title).collect();
    format!(
        "{} finding(s) ({} CRITICAL, {} HIGH, {} MEDIUM): {}",
        findings.len(),
        count(Severity::Critical),
        count(Severity::High),
        count(Severity::Medium),
        sinks.join(", ")
    )
}

async fn reconcile(scan: Arc<AgentScan>, ctx: Arc<Context>) -> Result<Action, ControllerError> {
    let name = scan.name_any();
    let generation = scan.meta().generation;
    let mut status: AgentScanStatus = scan.status.clone().unwrap_or_default();
    let before = status.clone();
    let now = super::now();
    let mut events = Vec::new();
    // Off the async runtime: a big graph is milliseconds to seconds of work.
    let graph = scan.spec.graph.to_domain();
    let analysed = ctx.solve(move || analyze(&graph)).await?;
    let summary = match analysed {
        Ok(findings) => {
            let message = summary(&findings);
            let findings = findings.to_api();
            if findings != status.findings {
                let type_ = if findings.is_empty() {
                    EventType::Normal
                } else {
                    EventType::Warning
                };
                events.push((type_, "Analyzed", message.clone()));
            }
            let clear = findings.is_empty();
            status.findings = findings;
            let (value, reason) = if clear {
                (Status::True, "NoFindings")
            } else {
                (Status::False, "TrifectaFindings")
            };
            conditions::set(
                &mut status.conditions,
                "FindingsClear",
                value,
                reason,
                &message,
                generation,
                &now,
            );
            if clear {
                Summary::ready("Analyzed", message)
            } else {
                // The image carries a lethal trifecta: until its code
                // changes (a new scan), each sandbox running it must sever
                // or accept every finding, and its pods are refused until
                // they do.
                Summary::stalled(reason, message)
            }
        }
        Err(error) => {
            let message = format!("spec.graph.{error}");
            status.findings.clear();
            conditions::set(
                &mut status.conditions,
                "FindingsClear",
                Status::Unknown,
                "InvalidGraph",
                "the graph cannot be analysed",
                generation,
                &now,
            );
            events.push((EventType::Warning, "InvalidGraph", message.clone()));
            Summary::stalled("InvalidGraph", message)
        }
    };
    conditions::summarize(&mut status.conditions, &summary, generation, &now);
    status.observed_generation = generation;
    if status != before {
        super::apply_status(
            &Api::<AgentScan>::all(ctx.client.clone()),
            scan.as_ref(),
            &status,
        )
        .await?;
        super::publish(&ctx, scan.as_ref(), "Analyze", events).await;
    }
    tracing::info!(scan = %name, findings = status.findings.len(), "reconciled");
    Ok(Action::requeue(super::RESYNC))
}

fn error_policy(scan: Arc<AgentScan>, error: &ControllerError, ctx: Arc<Context>) -> Action {
    super::retry_with_backoff("agentscan", scan.as_ref(), error, &ctx)
}

async fn counted(scan: Arc<AgentScan>, ctx: Arc<Context>) -> Result<Action, ControllerError> {
    super::counted("agentscan", scan, ctx, reconcile).await
}

/// Runs the AgentScan controller until shutdown.
pub async fn run(ctx: Arc<Context>) {
    super::drive(
        Controller::new(
            Api::<AgentScan>::all(ctx.client.clone()),
            watcher::Config::default(),
        ),
        counted,
        error_policy,
        ctx,
    )
    .await;
}
