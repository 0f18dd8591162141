//! `verify --cluster`: what the repository is judged against, read live
//! from the current kubeconfig (namespace labels, MaximumPolicies, and the
//! AgentSandboxes whose committed policy a proposal would change).

use anyhow::Context as _;
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, ListParams};
use kube::{Client, ResourceExt};

use crate::plugin::{Connection, connect};
use crate::verify::repository::NamespaceLabels;
use agentgate_api::crd::{AgentSandbox, MaximumPolicy};

/// The live state verify reads.
pub struct Live {
    /// Every namespace's labels.
    pub namespace_labels: NamespaceLabels,
    /// Every MaximumPolicy.
    pub maximums: Vec<MaximumPolicy>,
    /// Every AgentSandbox.
    pub sandboxes: Vec<AgentSandbox>,
}

/// Lists namespaces, maximums and sandboxes (blocking: runs its own
/// single-threaded runtime).
pub fn read(context: Option<String>) -> anyhow::Result<Live> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the runtime")?;
    runtime.block_on(async move {
        let connection = Connection {
            namespace: None,
            context,
            as_user: None,
            as_groups: Vec::new(),
        };
        let (client, _) = connect(&connection).await?;
        list_all(client).await
    })
}

async fn list_all(client: Client) -> anyhow::Result<Live> {
    let params = ListParams::default();
    let namespaces = Api::<Namespace>::all(client.clone())
        .list(&params)
        .await
        .context("listing namespaces")?;
    let maximums = Api::<MaximumPolicy>::all(client.clone())
        .list(&params)
        .await
        .context("listing MaximumPolicies")?;
    let sandboxes = Api::<AgentSandbox>::all(client)
        .list(&params)
        .await
        .context("listing AgentSandboxes")?;
    Ok(Live {
        namespace_labels: namespaces
            .items
            .iter()
            .map(|ns| (ns.name_any(), ns.labels().clone()))
            .collect(),
        maximums: maximums.items,
        sandboxes: sandboxes.items,
    })
}
