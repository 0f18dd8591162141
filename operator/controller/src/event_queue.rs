//! Events told by the reconcilers, published by one task in the order they
//! were told (docs/design.md §5). A reconcile never waits on an Event's
//! request: in a storm (a tightened ceiling over a fleet) each sandbox's
//! commit and the ConfigMap the policy stream pushes go to the API server
//! before the Events that describe them, which follow one at a time.
//! An Event is a view of a decision the status already records, so one
//! still queued when the process stops is lost, never the decision.

use k8s_openapi::api::core::v1::ObjectReference;
use kube::Client;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use tokio::sync::mpsc;

use agentgate_k8s::k8s::events::event_note;

/// One Event to publish: type, reason (CamelCase) and the note.
pub type Note = (EventType, &'static str, String);

/// Events told and not yet published, at most: beyond it a reconcile waits
/// for room (the queue's back-pressure), as it waited for each Event before.
pub const QUEUED_EVENTS: usize = 4096;

/// What one reconcile told about one object.
struct Told {
    reference: ObjectReference,
    action: String,
    notes: Vec<Note>,
}

/// The reconcilers' end of the queue; the publishing task starts with the
/// first Event told (it needs the runtime) and ends when this is dropped.
pub struct EventQueue {
    recorder: Recorder,
    sender: std::sync::OnceLock<mpsc::Sender<Told>>,
}

impl EventQueue {
    /// A queue publishing through `client` as `reporter`.
    pub fn new(client: Client, reporter: Reporter) -> EventQueue {
        EventQueue {
            recorder: Recorder::new(client, reporter),
            sender: std::sync::OnceLock::new(),
        }
    }

    /// Queues Events about the object `reference` names, for `action`
    /// (e.g. `Verify`); returns once they are queued.
    pub async fn tell(&self, reference: &ObjectReference, action: &str, notes: Vec<Note>) {
        if notes.is_empty() {
            return;
        }
        let sender = self.sender.get_or_init(|| {
            let (sender, receiver) = mpsc::channel(QUEUED_EVENTS);
            tokio::spawn(publish_all(self.recorder.clone(), receiver));
            sender
        });
        let told = Told {
            reference: reference.clone(),
            action: action.to_string(),
            notes,
        };
        if sender.send(told).await.is_err() {
            tracing::warn!(object = ?reference.name, "the Event publisher has stopped; Events not published");
        }
    }
}

/// Publishes what is told, in order, until every sender is gone.
async fn publish_all(recorder: Recorder, mut queue: mpsc::Receiver<Told>) {
    while let Some(told) = queue.recv().await {
        for (type_, reason, note) in told.notes {
            let event = Event {
                type_,
                reason: reason.into(),
                note: Some(event_note(note)),
                action: told.action.clone(),
                secondary: None,
            };
            if let Err(e) = recorder.publish(&event, &told.reference).await {
                tracing::warn!(object = ?told.reference.name, reason, error = %e, "could not publish an event");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use http::{Request, Response};
    use kube::client::Body;
    use serde_json::Value;

    use super::*;

    /// A client whose API server takes Events only once `open` is sent,
    /// keeping each in `posted`.
    fn gated_client(
        posted: Arc<Mutex<Vec<Value>>>,
        open: tokio::sync::watch::Receiver<bool>,
    ) -> Client {
        let service = tower::service_fn(move |request: Request<Body>| {
            let (posted, mut open) = (posted.clone(), open.clone());
            async move {
                let _ = open.wait_for(|open| *open).await;
                let bytes = request
                    .into_body()
                    .collect_bytes()
                    .await
                    .unwrap_or_default();
                let event: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
                posted.lock().unwrap().push(event.clone());
                Ok::<_, std::convert::Infallible>(
                    Response::builder()
                        .status(201)
                        .body(Body::from(serde_json::to_vec(&event).unwrap_or_default()))
                        .unwrap(),
                )
            }
        });
        Client::new(service, "default")
    }

    #[tokio::test]
    async fn a_reconcile_does_not_wait_for_its_events_and_they_go_out_in_order() {
        let posted = Arc::new(Mutex::new(Vec::new()));
        let (open, gate) = tokio::sync::watch::channel(false);
        let queue = EventQueue::new(
            gated_client(posted.clone(), gate),
            Reporter {
                controller: "agentgate".into(),
                instance: None,
            },
        );
        let sandbox = ObjectReference {
            api_version: Some("agentgate.dev/v1alpha1".into()),
            kind: Some("AgentSandbox".into()),
            name: Some("triage-bot".into()),
            namespace: Some("agents".into()),
            uid: Some("sandbox-uid".into()),
            ..ObjectReference::default()
        };
        let notes = |reasons: &[&'static str]| -> Vec<Note> {
            reasons
                .iter()
                .map(|r| (EventType::Normal, *r, format!("{r} happened")))
                .collect()
        };
        // Told while the API server answers nothing: tell returns anyway.
        tokio::time::timeout(
            std::time::Duration::from_secs(5),
            queue.tell(&sandbox, "Verify", notes(&["Verified", "Committed"])),
        )
        .await
        .expect("told without waiting for the API server");
        queue
            .tell(&sandbox, "CreatePod", notes(&["PodCreated"]))
            .await;
        assert!(posted.lock().unwrap().is_empty());
        open.send_replace(true);
        let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(5);
        while posted.lock().unwrap().len() < 3 {
            assert!(
                tokio::time::Instant::now() < deadline,
                "the Events were never published"
            );
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        let reasons: Vec<String> = posted
            .lock()
            .unwrap()
            .iter()
            .map(|e| e["reason"].as_str().unwrap_or_default().to_string())
            .collect();
        assert_eq!(reasons, ["Verified", "Committed", "PodCreated"]);
    }
}
