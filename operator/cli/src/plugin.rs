//! `kubectl agentgate`: the reviewer's and the GitOps engineer's commands.
//! - `approve NAME` / `deny NAME`: set the `Approved`/`Denied` condition
//!   of a proposal, or of a held tool call (`heldcall/NAME`), through the
//!   status subresource (server-side apply, field manager
//!   `kubectl-agentgate`); the webhook lets it through only for users who
//!   hold the `approve` verb and did not make the request.
//! - `why NAME`: verdict, reason, counterexample, new authority, the
//!   credential reach of what it adds, cost and proof record of a proposal.
//! - `export SANDBOX`: the committed effective policy as an AgentSandbox
//!   manifest, to promote runtime-approved grants into git.
//! - `lineage SANDBOX`: what the sandbox's agent did in its session, as its
//!   proxy observed it ([`crate::lineage`]).

use std::fmt::Write as _;
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};
use k8s_openapi::api::authentication::v1::SelfSubjectReview;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config, ResourceExt};
use serde_json::json;

use crate::{EXIT_EXCEEDS, EXIT_USAGE, EXIT_WITHIN};
use agentgate_api::conditions;
use agentgate_api::crd::{
    AgentSandbox, AgentSandboxSpec, AgentSandboxStatus, HeldCall, PolicyProposal,
    review_message_prefix,
};
use agentgate_governance::authority::Reviewed;
use agentgate_policy::model::PolicyDocument;

/// The field manager of approvals and denials.
pub const FIELD_MANAGER: &str = "kubectl-agentgate";

/// kubectl agentgate: review PolicyProposals and export effective policies.
#[derive(Debug, Parser)]
#[command(
    name = "kubectl-agentgate",
    bin_name = "kubectl agentgate",
    version,
    about
)]
pub struct PluginCli {
    /// Connection flags, as kubectl's.
    #[command(flatten)]
    pub connection: Connection,
    /// What to do.
    #[command(subcommand)]
    pub command: PluginCommand,
}

/// kubectl's usual connection flags.
#[derive(Debug, Args)]
pub struct Connection {
    /// Namespace (default: the context's).
    #[arg(short = 'n', long, global = true)]
    pub namespace: Option<String>,
    /// Kubeconfig context to use.
    #[arg(long, global = true)]
    pub context: Option<String>,
    /// Username to impersonate.
    #[arg(long = "as", global = true)]
    pub as_user: Option<String>,
    /// Group to impersonate (repeatable).
    #[arg(long = "as-group", global = true)]
    pub as_groups: Vec<String>,
}

/// Subcommands.
#[derive(Debug, Subcommand)]
pub enum PluginCommand {
    /// Approve a PolicyProposal (NAME) or a held tool call
    /// (heldcall/NAME); needs the approve verb, and not on your own.
    Approve(Review),
    /// Deny a PolicyProposal (NAME) or a held tool call (heldcall/NAME);
    /// needs the approve verb, and not on your own.
    Deny(Review),
    /// Explain a PolicyProposal's verdict.
    Why {
        /// The proposal.
        name: String,
    },
    /// Print a sandbox's committed effective policy as an AgentSandbox
    /// manifest, or fold it into the manifest in git (`--into`).
    Export {
        /// The sandbox.
        sandbox: String,
        /// Rewrite only this file's `spec.policy` of the sandbox, keeping
        /// every other field, document and comment.
        #[arg(long, value_name = "FILE")]
        into: Option<std::path::PathBuf>,
        /// Print a unified diff instead of writing: against `--into FILE`,
        /// or without it, from the declared to the effective policy.
        #[arg(long)]
        diff: bool,
    },
    /// Print what a sandbox's agent did in its session, as its proxy saw
    /// it: where each argument value came from, and the last refusals.
    Lineage {
        /// The sandbox.
        sandbox: String,
        /// `text`, `json` (the proxy's whole answer) or `graph` (the
        /// observed graph in the AgentScan graph schema).
        #[arg(short = 'o', long, value_enum, default_value = "text")]
        output: crate::lineage::LineageFormat,
    },
}

/// Arguments of approve and deny.
#[derive(Debug, Args)]
pub struct Review {
    /// NAME or policyproposal/NAME (a proposal), heldcall/NAME (a held
    /// tool call).
    pub name: String,
    /// Why (recorded in the condition's message).
    #[arg(long)]
    pub reason: Option<String>,
}

pub(crate) async fn connect(c: &Connection) -> anyhow::Result<(Client, String)> {
    use anyhow::Context as _;
    let options = KubeConfigOptions {
        context: c.context.clone(),
        ..KubeConfigOptions::default()
    };
    let mut config = match Kubeconfig::read() {
        Ok(kubeconfig) => Config::from_custom_kubeconfig(kubeconfig, &options)
            .await
            .context("reading the kubeconfig")?,
        Err(_) => Config::infer()
            .await
            .context("no kubeconfig and not in a cluster")?,
    };
    if c.as_user.is_some() {
        config.auth_info.impersonate = c.as_user.clone();
    }
    if !c.as_groups.is_empty() {
        config.auth_info.impersonate_groups = Some(c.as_groups.clone());
    }
    let namespace = c
        .namespace
        .clone()
        .unwrap_or_else(|| config.default_namespace.clone());
    let client = Client::try_from(config).context("building the API client")?;
    Ok((client, namespace))
}

/// Runs the plugin; returns the process exit code.
pub fn main(cli: PluginCli) -> ExitCode {
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("kubectl agentgate: {e}");
            return ExitCode::from(EXIT_USAGE);
        }
    };
    match runtime.block_on(run(cli)) {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            eprintln!("kubectl agentgate: {e:#}");
            ExitCode::from(EXIT_EXCEEDS)
        }
    }
}

async fn run(cli: PluginCli) -> anyhow::Result<u8> {
    let (client, namespace) = connect(&cli.connection).await?;
    match cli.command {
        PluginCommand::Approve(review) => {
            set_review(&client, &namespace, &review, "Approved", "Denied").await
        }
        PluginCommand::Deny(review) => {
            set_review(&client, &namespace, &review, "Denied", "Approved").await
        }
        PluginCommand::Why { name } => {
            let api: Api<PolicyProposal> = Api::namespaced(client.clone(), &namespace);
            let proposal = api
                .get(&name)
                .await
                .map_err(|e| not_found(e, "policyproposal", &namespace, &name))?;
            print!("{}", explain(&proposal));
            // Whether its commit has reached the sandbox's Pods.
            let sandboxes: Api<AgentSandbox> = Api::namespaced(client, &namespace);
            if let Ok(Some(sandbox)) = sandboxes.get_opt(&proposal.spec.sandbox_ref.name).await {
                for (i, line) in delivery(&proposal, &sandbox).into_iter().enumerate() {
                    println!("  {:<15} {line}", if i == 0 { "enforced:" } else { "" });
                }
            }
            Ok(EXIT_WITHIN)
        }
        PluginCommand::Export {
            sandbox,
            into,
            diff,
        } => {
            let api: Api<AgentSandbox> = Api::namespaced(client, &namespace);
            let sandbox = api
                .get(&sandbox)
                .await
                .map_err(|e| not_found(e, "agentsandbox", &namespace, &sandbox))?;
            match into {
                None if !diff => print!("{}", export(&sandbox)?),
                None => print!("{}", export_diff(&sandbox)?),
                Some(path) => export_into(&sandbox, &path, diff)?,
            }
            Ok(EXIT_WITHIN)
        }
        PluginCommand::Lineage { sandbox, output } => {
            print!(
                "{}",
                crate::lineage::lineage(&client, &namespace, &sandbox, output).await?
            );
            Ok(EXIT_WITHIN)
        }
    }
}

fn not_found(e: kube::Error, kind: &str, namespace: &str, name: &str) -> anyhow::Error {
    match &e {
        kube::Error::Api(s) if s.code == 404 => {
            anyhow::anyhow!("{kind} {namespace}/{name} not found")
        }
        kube::Error::Api(s) => anyhow::anyhow!("reading {kind} {namespace}/{name}: {}", s.message),
        _ => anyhow::Error::new(e).context(format!("reading {kind} {namespace}/{name}")),
    }
}

/// What `approve` and `deny` decide: `NAME` or `proposal/NAME` is a
/// PolicyProposal, `heldcall/NAME` a held tool call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Reviewable {
    Proposal,
    HeldCall,
}

/// The kind and name `approve`/`deny` were given.
fn reviewable(target: &str) -> anyhow::Result<(Reviewable, &str)> {
    match target.split_once('/') {
        None => Ok((Reviewable::Proposal, target)),
        Some((kind, name)) if !name.is_empty() => match kind.to_ascii_lowercase().as_str() {
            "proposal" | "policyproposal" | "policyproposals" | "pprop" => {
                Ok((Reviewable::Proposal, name))
            }
            "heldcall" | "heldcalls" | "hcall" => Ok((Reviewable::HeldCall, name)),
            other => anyhow::bail!(
                "{other:?} is not something to approve or deny: give NAME or policyproposal/NAME for a proposal, heldcall/NAME for a held tool call"
            ),
        },
        Some(_) => anyhow::bail!("{target:?} names no object"),
    }
}

async fn set_review(
    client: &Client,
    namespace: &str,
    review: &Review,
    kind: &str,
    opposite: &str,
) -> anyhow::Result<u8> {
    match reviewable(&review.name)? {
        (Reviewable::Proposal, name) => {
            let api: Api<PolicyProposal> = Api::namespaced(client.clone(), namespace);
            set_review_of(client, &api, namespace, name, review, kind, opposite).await
        }
        (Reviewable::HeldCall, name) => {
            let api: Api<HeldCall> = Api::namespaced(client.clone(), namespace);
            set_review_of(client, &api, namespace, name, review, kind, opposite).await
        }
    }
}

async fn set_review_of<K>(
    client: &Client,
    api: &Api<K>,
    namespace: &str,
    name: &str,
    review: &Review,
    kind: &str,
    opposite: &str,
) -> anyhow::Result<u8>
where
    K: kube::Resource<DynamicType = ()> + Reviewed + Clone + std::fmt::Debug,
    K: serde::de::DeserializeOwned + serde::Serialize,
{
    let what = K::KIND;
    let object = api
        .get(name)
        .await
        .map_err(|e| not_found(e, what, namespace, name))?;
    let existing = object.conditions();
    if conditions::is_true(existing, opposite) {
        anyhow::bail!(
            "{what} {namespace}/{name} is already {}; a decided review is final",
            opposite.to_lowercase()
        );
    }
    if conditions::is_true(existing, kind) {
        println!(
            "{what} {namespace}/{name} is already {}",
            kind.to_lowercase()
        );
        return Ok(EXIT_WITHIN);
    }
    if let Some(closed) = object.closed() {
        anyhow::bail!(
            "{what} {namespace}/{name} is already {closed}; a review would change nothing"
        );
    }
    // The webhook admits a review only under the reviewer's own name, so
    // the record can say who decided.
    let me = Api::<SelfSubjectReview>::all(client.clone())
        .create(&PostParams::default(), &SelfSubjectReview::default())
        .await
        .map_err(|e| anyhow::anyhow!("cannot learn who you are (SelfSubjectReview): {e}"))?
        .status
        .and_then(|s| s.user_info)
        .and_then(|u| u.username)
        .ok_or_else(|| anyhow::anyhow!("the API server did not say who you are"))?;
    let prefix = review_message_prefix(kind, &me);
    let message = match &review.reason {
        Some(reason) => format!("{prefix}: {reason}"),
        None => prefix,
    };
    let patch = json!({
        "apiVersion": K::api_version(&()),
        "kind": K::kind(&()),
        "status": {"conditions": [{
            "type": kind,
            "status": "True",
            "reason": format!("Reviewer{kind}"),
            "message": message,
            "observedGeneration": object.generation(),
            "lastTransitionTime": k8s_openapi::jiff::Timestamp::now().to_string(),
        }]},
    });
    api.patch_status(
        name,
        &PatchParams::apply(FIELD_MANAGER).force(),
        &Patch::Apply(&patch),
    )
    .await
    .map_err(|e| match e {
        kube::Error::Api(s) => anyhow::anyhow!("{}", s.message),
        e => anyhow::Error::new(e),
    })?;
    println!("{what} {namespace}/{name} {}", kind.to_lowercase());
    Ok(EXIT_WITHIN)
}

/// The `why` report of a proposal.
pub fn explain(proposal: &PolicyProposal) -> String {
    let mut out = String::new();
    let name = format!(
        "{}/{}",
        proposal.namespace().unwrap_or_default(),
        proposal.name_any()
    );
    let _ = writeln!(
        out,
        "policyproposal {name} (sandbox {})",
        proposal.spec.sandbox_ref.name
    );
    let Some(status) = &proposal.status else {
        let _ = writeln!(out, "  not evaluated yet");
        return out;
    };
    let field = |label: &str, value: String, out: &mut String| {
        let _ = writeln!(out, "  {label:<15} {value}");
    };
    field(
        "verdict:",
        format!(
            "{} (phase {})",
            status
                .verdict
                .map(|v| format!("{v:?}"))
                .unwrap_or_else(|| "-".into()),
            status
                .phase
                .as_ref()
                .map(|p| format!("{p:?}"))
                .unwrap_or_else(|| "-".into())
        ),
        &mut out,
    );
    if let Some(reason) = &status.reason {
        field("reason:", reason.clone(), &mut out);
    }
    if let Some(c) = &status.counterexample {
        field("counterexample:", c.to_string(), &mut out);
    }
    for (i, a) in status.new_authority.iter().enumerate() {
        field(
            if i == 0 { "new authority:" } else { "" },
            a.to_string(),
            &mut out,
        );
    }
    // Where the proposal would attach each credential it binds
    // (docs/policy-semantics.md §9).
    let reach: Vec<String> = proposal
        .spec
        .add
        .iter()
        .flat_map(|add| &add.network)
        .filter(|rule| !rule.credentials.is_empty())
        .flat_map(|rule| {
            let credentials = rule.credentials.join(", ");
            agentgate_governance::credentials::reach_lines(rule)
                .into_iter()
                .map(move |line| format!("{credentials}: {line}"))
        })
        .collect();
    for (i, line) in reach.into_iter().enumerate() {
        field(
            if i == 0 { "credential reach:" } else { "" },
            line,
            &mut out,
        );
    }
    if let Some(cost) = status.cost {
        let items: Vec<String> = status
            .cost_breakdown
            .iter()
            .map(|c| format!("{} +{}", c.item, c.weight))
            .collect();
        let detail = if items.is_empty() {
            String::new()
        } else {
            format!(" ({})", items.join("; "))
        };
        field("cost:", format!("{cost}{detail}"), &mut out);
    }
    if let Some(p) = &status.proof {
        let maximums: Vec<String> = p
            .maximums
            .iter()
            .map(|m| format!("{}@generation {}", m.name, m.generation))
            .collect();
        field(
            "proof:",
            format!(
                "{} (model {}, maximums {}, sandbox revision {}, candidate {}, {:.1} ms)",
                p.result,
                p.model,
                if maximums.is_empty() {
                    "-".into()
                } else {
                    maximums.join(", ")
                },
                p.sandbox_revision,
                p.candidate_hash.as_deref().unwrap_or("-"),
                p.solver_millis
            ),
            &mut out,
        );
    }
    for c in status
        .conditions
        .iter()
        .filter(|c| c.type_ == "Approved" || c.type_ == "Denied")
    {
        field(
            "review:",
            format!("{}={} ({}: {})", c.type_, c.status, c.reason, c.message),
            &mut out,
        );
    }
    out
}

/// Whether a proposal's commit has reached the sandbox's Pods
/// (docs/status.md, `Enforced`): one line per Pod, or why there is none.
pub fn delivery(proposal: &PolicyProposal, sandbox: &AgentSandbox) -> Vec<String> {
    let Some(status) = &sandbox.status else {
        return vec!["the sandbox has no committed policy yet".into()];
    };
    let uid = proposal.uid().unwrap_or_default();
    let committed = status
        .applied_proposals
        .iter()
        .any(|record| record.uid == uid && record.name == proposal.name_any());
    if !committed {
        return vec!["not committed: nothing to enforce".into()];
    }
    let Some(digest) = &status.policy_digest else {
        return vec![format!(
            "committed in revision {}; the operator reports no delivery",
            status.revision
        )];
    };
    if status.pods.is_empty() {
        return vec![format!(
            "committed in revision {}; no Pod has confirmed it yet",
            status.revision
        )];
    }
    status
        .pods
        .iter()
        .map(|pod| {
            if &pod.digest == digest {
                format!(
                    "revision {} by Pod {} since {}",
                    pod.revision, pod.name, pod.applied_at
                )
            } else {
                format!(
                    "not yet by Pod {}: it enforces revision {} (committed: {})",
                    pod.name, pod.revision, status.revision
                )
            }
        })
        .collect()
}

/// The sandbox's status and its committed effective policy, or why there
/// is none yet.
fn committed(sandbox: &AgentSandbox) -> anyhow::Result<(&AgentSandboxStatus, &PolicyDocument)> {
    sandbox
        .status
        .as_ref()
        .and_then(|s| Some((s, s.effective_policy.as_ref()?)))
        .ok_or_else(|| {
            anyhow::anyhow!(
                "agentsandbox {} has no committed policy yet",
                sandbox.name_any()
            )
        })
}

/// `export --diff` without `--into`: the declared policy against the
/// effective one, as a unified diff of their YAML (what the agent earned
/// at runtime).
pub fn export_diff(sandbox: &AgentSandbox) -> anyhow::Result<String> {
    let effective = serde_saphyr::to_string(committed(sandbox)?.1)?;
    let declared = serde_saphyr::to_string(&sandbox.spec.policy)?;
    let name = format!(
        "{}/{}/spec.policy",
        sandbox.namespace().unwrap_or_default(),
        sandbox.name_any()
    );
    let diff = crate::export::unified_diff(&name, &declared, &effective);
    if diff.is_empty() {
        eprintln!("the effective policy is the declared one");
    }
    Ok(diff)
}

/// `export --into FILE [--diff]`: fold the effective policy into the file
/// (written through a temporary file and a rename, so a failure leaves the
/// old file), or print the diff that would make.
pub fn export_into(
    sandbox: &AgentSandbox,
    path: &std::path::Path,
    diff: bool,
) -> anyhow::Result<()> {
    use anyhow::Context as _;
    let (status, effective) = committed(sandbox)?;
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let file = path.display().to_string();
    let namespace = sandbox.namespace().unwrap_or_default();
    let folded =
        crate::export::fold_policy(&file, &text, &sandbox.name_any(), &namespace, effective)?;
    let revision = status.revision;
    if diff {
        let diff = crate::export::unified_diff(file.trim_start_matches("./"), &text, &folded);
        if diff.is_empty() {
            eprintln!("{file}: already holds the effective policy (revision {revision})");
        }
        print!("{diff}");
        return Ok(());
    }
    if folded == text {
        eprintln!("{file}: already holds the effective policy (revision {revision})");
        return Ok(());
    }
    let temporary = path.with_extension("agentgate-export.tmp");
    std::fs::write(&temporary, &folded)
        .with_context(|| format!("writing {}", temporary.display()))?;
    std::fs::rename(&temporary, path).with_context(|| format!("replacing {}", path.display()))?;
    eprintln!(
        "{file}: spec.policy of agentsandbox {namespace}/{} is now its effective policy (revision {revision})",
        sandbox.name_any()
    );
    Ok(())
}

/// The sandbox as a manifest whose `spec.policy` is the committed effective
/// policy; everything the cluster added (status, uid, managed fields) is
/// left out, and a comment names the revision and the proposals it holds.
pub fn export(sandbox: &AgentSandbox) -> anyhow::Result<String> {
    let (status, effective) = committed(sandbox)?;
    let annotations: std::collections::BTreeMap<String, String> = sandbox
        .annotations()
        .iter()
        .filter(|(k, _)| k.as_str() != "kubectl.kubernetes.io/last-applied-configuration")
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    let manifest = AgentSandbox {
        metadata: ObjectMeta {
            name: sandbox.metadata.name.clone(),
            namespace: sandbox.metadata.namespace.clone(),
            labels: sandbox.metadata.labels.clone().filter(|l| !l.is_empty()),
            annotations: (!annotations.is_empty()).then_some(annotations),
            ..ObjectMeta::default()
        },
        spec: AgentSandboxSpec {
            policy: effective.clone(),
            ..sandbox.spec.clone()
        },
        status: None,
    };
    let yaml = serde_saphyr::to_string(&manifest)?;
    let applied = if status.applied_proposals.is_empty() {
        "none".to_string()
    } else {
        status
            .applied_proposals
            .iter()
            .filter(|r| r.pruned.is_none())
            .map(|r| format!("{} ({})", r.name, r.decided_by))
            .collect::<Vec<_>>()
            .join(", ")
    };
    Ok(format!(
        "# Effective policy of agentsandbox {}/{} at revision {} (applied proposals: {applied}).\n# Commit this to git to make the runtime-approved grants part of the declared policy.\n{yaml}",
        sandbox.namespace().unwrap_or_default(),
        sandbox.name_any(),
        status.revision
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use agentgate_api::crd::{AgentSandboxStatus, PolicyProposalStatus, ProofRecord};

    #[test]
    fn approve_and_deny_name_a_proposal_or_a_held_call() {
        assert_eq!(reviewable("p").unwrap(), (Reviewable::Proposal, "p"));
        assert_eq!(
            reviewable("policyproposal/p").unwrap(),
            (Reviewable::Proposal, "p")
        );
        assert_eq!(
            reviewable("heldcall/bot-x7k2p").unwrap(),
            (Reviewable::HeldCall, "bot-x7k2p")
        );
        assert_eq!(reviewable("hcall/h").unwrap(), (Reviewable::HeldCall, "h"));
        let wrong = reviewable("pod/p").unwrap_err().to_string();
        assert!(wrong.contains("heldcall/NAME"), "{wrong}");
        assert!(reviewable("heldcall/").is_err());
    }

    #[test]
    fn export_replaces_the_declared_policy_with_the_effective_one() {
        let mut sandbox: AgentSandbox =
            serde_saphyr::from_str(include_str!("../../../examples/sandbox.yaml")).unwrap();
        assert!(export(&sandbox).is_err());
        let effective: PolicyDocument = serde_saphyr::from_str(
            "network:\n  - name: extra\n    endpoints:\n      - {host: api.github.com, ports: [443]}\n",
        )
        .unwrap();
        sandbox.status = Some(AgentSandboxStatus {
            effective_policy: Some(effective.clone()),
            revision: 3,
            applied_proposals: vec![agentgate_api::crd::AppliedProposal {
                name: "p1".into(),
                uid: "u1".into(),
                generation: Some(1),
                change_hash: "sha256:00".into(),
                decided_by: "reviewer:alice".into(),
                at: None,
                removed: Vec::new(),
                pruned: None,
            }],
            ..AgentSandboxStatus::default()
        });
        let text = export(&sandbox).unwrap();
        assert!(
            text.contains("revision 3 (applied proposals: p1 (reviewer:alice))"),
            "{text}"
        );
        let back: AgentSandbox = serde_saphyr::from_str(&text).unwrap();
        assert_eq!(back.spec.policy, effective);
        assert_eq!(back.spec.mode, sandbox.spec.mode);
        assert!(back.status.is_none());
    }

    #[test]
    fn why_says_whether_a_commit_reached_the_pods() {
        let mut p: PolicyProposal = serde_saphyr::from_str(include_str!(
            "../../../examples/proposals/post-anywhere.yaml"
        ))
        .unwrap();
        p.metadata.uid = Some("p-uid".into());
        let mut sandbox: AgentSandbox =
            serde_saphyr::from_str(include_str!("../../../examples/sandbox.yaml")).unwrap();
        assert_eq!(
            delivery(&p, &sandbox),
            ["the sandbox has no committed policy yet"]
        );
        let mut status = AgentSandboxStatus {
            revision: 5,
            ..AgentSandboxStatus::default()
        };
        sandbox.status = Some(status.clone());
        assert_eq!(
            delivery(&p, &sandbox),
            ["not committed: nothing to enforce"]
        );
        status.applied_proposals = vec![agentgate_api::crd::AppliedProposal {
            name: p.name_any(),
            uid: "p-uid".into(),
            ..agentgate_api::crd::AppliedProposal::default()
        }];
        status.policy_digest = Some("sha256:five".into());
        sandbox.status = Some(status.clone());
        assert_eq!(
            delivery(&p, &sandbox),
            ["committed in revision 5; no Pod has confirmed it yet"]
        );
        let pod = |revision: u64, digest: &str| agentgate_api::crd::PodEnforcement {
            name: "triage-bot".into(),
            revision,
            digest: digest.into(),
            applied_at: "2026-12-06T21:00:00Z".into(),
        };
        status.pods = vec![pod(4, "sha256:four")];
        sandbox.status = Some(status.clone());
        assert_eq!(
            delivery(&p, &sandbox),
            ["not yet by Pod triage-bot: it enforces revision 4 (committed: 5)"]
        );
        status.pods = vec![pod(5, "sha256:five")];
        sandbox.status = Some(status);
        assert_eq!(
            delivery(&p, &sandbox),
            ["revision 5 by Pod triage-bot since 2026-12-06T21:00:00Z"]
        );
    }

    #[test]
    fn why_prints_every_part_of_the_verdict() {
        let mut p: PolicyProposal = serde_saphyr::from_str(include_str!(
            "../../../examples/proposals/post-anywhere.yaml"
        ))
        .unwrap();
        assert!(explain(&p).contains("not evaluated yet"));
        p.status = Some(PolicyProposalStatus {
            verdict: Some(agentgate_api::verdict::Decision::Reject),
            reason: Some("exceeds MaximumPolicy \"org-ceiling\"".into()),
            cost: Some(7),
            proof: Some(ProofRecord {
                result: "exceeds".into(),
                model: "boundary-v1".into(),
                sandbox_revision: 2,
                ..ProofRecord::default()
            }),
            ..PolicyProposalStatus::default()
        });
        let text = explain(&p);
        for needle in [
            "verdict:",
            "Reject",
            "reason:",
            "cost:",
            "7",
            "proof:",
            "boundary-v1",
        ] {
            assert!(text.contains(needle), "{needle} missing in\n{text}");
        }
    }

    #[test]
    fn why_shows_where_a_proposal_attaches_its_credentials() {
        let mut p: PolicyProposal = serde_saphyr::from_str(include_str!(
            "../../../examples/credentials/widen-comments.yaml"
        ))
        .unwrap();
        p.status = Some(PolicyProposalStatus {
            verdict: Some(agentgate_api::verdict::Decision::Reject),
            ..PolicyProposalStatus::default()
        });
        let text = explain(&p);
        assert!(
            text.contains("credential reach: github-token: gh-comments: POST api.github.com:443/repos/acme/*/issues/*/comments by /usr/bin/gh"),
            "{text}"
        );
    }
}
