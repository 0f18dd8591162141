//! The labelled corpus (`tests/corpus/labelled/`): small agents written
//! the way public agent code is written, across frameworks, each with a
//! `labels.yaml` saying which trifecta findings a reader expects (by sink,
//! with the acceptable control and data sources and the cut size). Unlike
//! `tests/corpus/<case>/expected.yaml`, the labels were written from the
//! code's behaviour, not from the scanner's output, so this measures how
//! detection generalises: recall, precision and witness validity, per
//! framework. `cargo test -p agentgate-tests --test labelled_corpus --
//! --nocapture` prints the table (docs/trifecta.md records it); the test
//! fails when a figure drops below what was measured.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use agentgate_trifecta::analysis::{Finding, analyze, has_trifecta};
use agentgate_trifecta::graph::{Graph, LLM};
use agentgate_trifecta::scan::scan_path;
use serde::Deserialize;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Labels {
    framework: String,
    language: String,
    benign: bool,
    #[serde(default)]
    findings: Vec<Expected>,
    #[serde(default)]
    #[allow(dead_code)]
    notes: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Expected {
    sink: String,
    control: Vec<String>,
    data: Vec<String>,
    cut: usize,
}

/// Counts for one framework (or the total).
#[derive(Debug, Default, Clone, Copy)]
struct Tally {
    agents: usize,
    expected: usize,
    true_positives: usize,
    false_positives: usize,
    false_negatives: usize,
    witnesses_valid: usize,
    witnesses_real: usize,
    witnesses_checked: usize,
}

impl Tally {
    fn add(&mut self, other: &Tally) {
        self.agents += other.agents;
        self.expected += other.expected;
        self.true_positives += other.true_positives;
        self.false_positives += other.false_positives;
        self.false_negatives += other.false_negatives;
        self.witnesses_valid += other.witnesses_valid;
        self.witnesses_real += other.witnesses_real;
        self.witnesses_checked += other.witnesses_checked;
    }

    fn recall(&self) -> f64 {
        ratio(
            self.true_positives,
            self.true_positives + self.false_negatives,
        )
    }

    fn precision(&self) -> f64 {
        ratio(
            self.true_positives,
            self.true_positives + self.false_positives,
        )
    }
}

fn ratio(a: usize, b: usize) -> f64 {
    if b == 0 { 1.0 } else { a as f64 / b as f64 }
}

fn corpus() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("corpus/labelled")
}

/// Whether a witness is a real path of the graph: consecutive hops joined
/// by an edge, starting at a source the labels accept, ending at the sink.
fn real_path(graph: &Graph, nodes: &[&str], sink: &str, sources: &[String]) -> bool {
    let edges: BTreeSet<(&str, &str)> = graph
        .edges
        .iter()
        .map(|e| (e.from.as_str(), e.to.as_str()))
        .collect();
    nodes.len() >= 2
        && nodes.last() == Some(&sink)
        && nodes
            .first()
            .is_some_and(|s| sources.iter().any(|x| x == s))
        && nodes.windows(2).all(|w| edges.contains(&(w[0], w[1])))
}

/// Whether removing the finding's cut leaves no trifecta at its sink.
fn real_cut(graph: &Graph, finding: &Finding) -> bool {
    let Ok(indexed) = graph.indexed() else {
        return false;
    };
    let Some(&sink) = indexed.index.get(finding.sink.as_str()) else {
        return false;
    };
    let mut removed = vec![false; graph.nodes.len()];
    for node in &finding.cut {
        match indexed.index.get(node.as_str()) {
            Some(&i) => removed[i] = true,
            None => return false,
        }
    }
    !finding.cut.is_empty() && !has_trifecta(&indexed, sink, &removed)
}

/// Scores one agent; returns its tally and lines describing misses.
fn score(dir: &Path) -> (Labels, Tally, Vec<String>) {
    let name = dir.file_name().unwrap().to_string_lossy().into_owned();
    let labels: Labels =
        serde_saphyr::from_str(&std::fs::read_to_string(dir.join("labels.yaml")).unwrap())
            .unwrap_or_else(|e| panic!("{name}/labels.yaml: {e}"));
    assert_eq!(
        labels.benign,
        labels.findings.is_empty(),
        "{name}: benign exactly when no finding is expected"
    );
    let scan = scan_path(dir).unwrap_or_else(|e| panic!("{name}: {e}"));
    let findings = analyze(&scan.graph).unwrap_or_else(|e| panic!("{name}: {e}"));
    let mut tally = Tally {
        agents: 1,
        expected: labels.findings.len(),
        ..Tally::default()
    };
    let mut misses = Vec::new();
    let found: BTreeMap<&str, &Finding> = findings.iter().map(|f| (f.sink.as_str(), f)).collect();
    for want in &labels.findings {
        let Some(got) = found.get(want.sink.as_str()) else {
            tally.false_negatives += 1;
            misses.push(format!("{name}: missed the finding at {}", want.sink));
            continue;
        };
        tally.true_positives += 1;
        tally.witnesses_checked += 1;
        let control = real_path(&scan.graph, &got.control.nodes(), &want.sink, &want.control);
        let data = real_path(&scan.graph, &got.data.nodes(), &want.sink, &want.data);
        let cut = real_cut(&scan.graph, got) && got.cut.len() == want.cut;
        // Whatever the labels say of the sources: real paths and a real cut.
        let any = |nodes: &[&str]| {
            let first = nodes
                .first()
                .map(|n| vec![n.to_string()])
                .unwrap_or_default();
            real_path(&scan.graph, nodes, &want.sink, &first)
        };
        if any(&got.control.nodes()) && any(&got.data.nodes()) && real_cut(&scan.graph, got) {
            tally.witnesses_real += 1;
        }
        if control && data && cut {
            tally.witnesses_valid += 1;
        } else {
            misses.push(format!(
                "{name}: {}: witness or cut not as labelled (control {:?}, data {:?}, cut {:?})",
                want.sink,
                got.control.nodes(),
                got.data.nodes(),
                got.cut
            ));
        }
    }
    let expected: BTreeSet<&str> = labels.findings.iter().map(|f| f.sink.as_str()).collect();
    for sink in found
        .keys()
        .filter(|s| !expected.contains(**s) && **s != LLM)
    {
        tally.false_positives += 1;
        let why = found[sink]
            .control
            .path
            .first()
            .and_then(|h| h.source.as_ref())
            .map(|s| format!(" (control source at {s})"))
            .unwrap_or_default();
        misses.push(format!("{name}: false finding at {sink}{why}"));
    }
    (labels, tally, misses)
}

/// The floors: what was measured when the corpus was written (see
/// docs/trifecta.md). A change that loses detections fails here.
const MIN_RECALL: f64 = 0.97;
const MIN_PRECISION: f64 = 0.93;
const MIN_WITNESS_VALIDITY: f64 = 0.95;

#[test]
fn recall_precision_and_witnesses_hold_on_the_labelled_corpus() {
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(corpus())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.join("labels.yaml").is_file())
        .collect();
    dirs.sort();
    assert!(dirs.len() >= 60, "the corpus holds {} agents", dirs.len());
    let mut by_framework: BTreeMap<(String, String), Tally> = BTreeMap::new();
    let mut total = Tally::default();
    let mut benign = 0;
    let mut all_misses = Vec::new();
    for dir in &dirs {
        let (labels, tally, misses) = score(dir);
        benign += usize::from(labels.benign);
        by_framework
            .entry((labels.language.clone(), labels.framework.clone()))
            .or_default()
            .add(&tally);
        total.add(&tally);
        all_misses.extend(misses);
    }
    println!(
        "| language | framework | agents | expected findings | recall | precision | witnesses valid |"
    );
    println!("|---|---|---:|---:|---:|---:|---:|");
    for ((language, framework), t) in by_framework
        .iter()
        .chain([(&("all".to_string(), "all".to_string()), &total)])
    {
        println!(
            "| {language} | {framework} | {} | {} | {:.0}% ({}/{}) | {:.0}% ({}/{}) | {}/{} | {}/{} |",
            t.agents,
            t.expected,
            100.0 * t.recall(),
            t.true_positives,
            t.true_positives + t.false_negatives,
            100.0 * t.precision(),
            t.true_positives,
            t.true_positives + t.false_positives,
            t.witnesses_valid,
            t.witnesses_checked,
            t.witnesses_real,
            t.witnesses_checked
        );
    }
    println!("{benign} benign agents of {}", dirs.len());
    for miss in &all_misses {
        println!("  {miss}");
    }
    assert!(benign >= 20, "at least 20 benign traps, found {benign}");
    assert_eq!(
        total.witnesses_real, total.witnesses_checked,
        "every reported witness is a real path of the graph and every cut a real cut"
    );
    let validity = ratio(total.witnesses_valid, total.witnesses_checked);
    assert!(
        total.recall() >= MIN_RECALL
            && total.precision() >= MIN_PRECISION
            && validity >= MIN_WITNESS_VALIDITY,
        "recall {:.3} (floor {MIN_RECALL}), precision {:.3} (floor {MIN_PRECISION}), witness validity {validity:.3} (floor {MIN_WITNESS_VALIDITY}):\n{}",
        total.recall(),
        total.precision(),
        all_misses.join("\n")
    );
}
