# agentgate — see README.md. Every target installs what it needs, idempotently.
SHELL := /bin/bash
# Every recipe line fails on its first failing command, an unset variable or
# a failing stage of a pipeline, not only on its last command's status.
.SHELLFLAGS := -euo pipefail -c
.DEFAULT_GOAL := help
CARGO ?= cargo
export PATH := $(HOME)/.cargo/bin:$(PATH)
# A clean CI clone never reuses incremental state, which only costs disk there.
ifeq ($(CI),true)
export CARGO_INCREMENTAL := 0
endif
# Where cargo writes: CARGO_TARGET_DIR when it is set, as cargo reads it.
TARGET_DIR := $(or $(CARGO_TARGET_DIR),target)
RELEASE_DIR := $(TARGET_DIR)/release
# The dev binaries the golden, packaging and end-to-end tests run: agentgate,
# kubectl-agentgate, agentgate-proxy and agentgate-exec (cargo test builds
# another package's binaries only for that package's own tests).
DEV_BINS := -p agentgate -p agentgate-proxy -p agentgate-sandbox --bins
# Every target of every package (libs, bins, tests, examples): the
# dev-dependencies' features (the policy crate's `testing`, the proxy's
# `testkit`, and what jsonschema and mlua turn on in shared crates) are then
# unified as `cargo test --workspace` unifies them. A narrower `cargo build
# -p` resolves other features and compiles much of the workspace again.
ALL_TARGETS := --workspace --all-targets
# make test's two lanes of test targets (each file in a crate's tests/ is
# one): the e2e suites but the real node, and every other crate's.
E2E_SUITES := $(filter-out real_node,$(basename $(notdir $(wildcard e2e/tests/*.rs))))
OTHER_SUITES := $(sort $(basename $(notdir $(filter-out e2e/%,$(wildcard */tests/*.rs)))))
DEBUG_DIR := $(TARGET_DIR)/debug

.PHONY: help disk z3 sccache control-plane node kstatus helm netns-tools mcp-sdk agentdojo chart build exec-static dist dist-check image image-check agent-image sizes check test lint fmt-check unit-tests e2e bench bench-surfaces bench-operator bench-webhook bench-trifecta bench-scan bench-proxy bench-scale bench-requests bench-fleet bench-delivery bench-verify bench-mcp bench-agentdojo bench-smoke fuzz demo demo-down demo-cli fmt clean crds

help: ## list targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | sed 's/:.*## /\t/' | column -t -s $$'\t'

disk: ## fail early when the disk holding target/ has too little room for a build
	@./hack/check-disk.sh

z3: ## install the pinned Z3 shared library into .tools/z3
	@./hack/install-z3.sh

control-plane: ## build (once, cached in ~/.cache/agentgate) kube-apiserver, etcd, kubectl for e2e
	@bash e2e/hack/install-control-plane.sh >/dev/null

node: ## build, once, cached, kubelet, kube-proxy, scheduler, controller-manager, containerd, runc, CNI plugins for the real-node e2e
	@bash e2e/hack/install-node.sh >/dev/null
	@bash e2e/hack/check-node.sh

kstatus: ## build (once, cached in ~/.cache/agentgate) the kstatus checker (sigs.k8s.io/cli-utils) the e2e tests judge statuses with
	@bash e2e/hack/install-kstatus.sh >/dev/null

helm: ## build (once, cached in ~/.cache/agentgate) helm from its Go module
	@./hack/install-helm.sh >/dev/null

netns-tools: ## nft, unshare, setpriv, ip, curl, python3 for the proxy's transparent-mode test (apt-get, once)
	@./hack/install-netns-tools.sh

agentdojo: netns-tools ## AgentDojo 0.1.35 and the MCP SDK, every package pinned (e2e/agentdojo/requirements.txt), in a venv of Debian's python3 under ~/.cache/agentgate (pip, once)
	@./hack/install-agentdojo.sh

mcp-sdk: netns-tools ## the official MCP Python SDK, pinned, in a venv of Debian's python3 under ~/.cache/agentgate (the MCP end-to-end tests and the pod runner's SDK agent; pip, once)
	@./hack/install-mcp-sdk.sh

chart: helm ## helm lint and helm template of charts/agentgate over several value sets
	@./hack/test-chart.sh

build: z3 ## release binaries into target/release/ (agentgate, kubectl-agentgate, agentgate-proxy, static agentgate-exec)
	$(CARGO) build --release --locked -p agentgate -p agentgate-proxy
	@# The static agentgate-exec, built and checked once; its path is the
	@# script's only stdout, and a failing script fails here.
	exec_bin="$$(./hack/check-static-exec.sh)"; \
	  cp "$$exec_bin" $(RELEASE_DIR)/.agentgate-exec.tmp; \
	  mv -f $(RELEASE_DIR)/.agentgate-exec.tmp $(RELEASE_DIR)/agentgate-exec

dist: build ## dist/agentgate-<version>-linux-amd64.tar.gz: bin/ (all four binaries, debug sections stripped, finding lib/ beside them) and lib/libz3
	@./hack/dist.sh $(RELEASE_DIR) $(RELEASE_DIR)/agentgate-exec dist

image: build netns-tools ## dist/agentgate-<version>.oci.tar: the OCI image (all four binaries, libz3, nft, user 65532), built without a container engine
	@./hack/image.sh $(RELEASE_DIR) $(RELEASE_DIR)/agentgate-exec dist

image-check: netns-tools ## build the image from the dev binaries and the static agentgate-exec, unpack its layers, run every binary there under chroot; the same for the agent and pause images (part of make test)
	@./hack/test-image.sh
	@./hack/test-agent-image.sh

agent-image: ## dist/triage-bot-demo.oci.tar: the demo/e2e agent image ghcr.io/acme/triage-bot:demo (bash, curl, python3, coreutils; user 1000) for `ctr images import`; prints its path and manifest digest
	@./hack/agent-image.sh dist

dist-check: ## pack the dev binaries and the static agentgate-exec like make dist, unpack elsewhere, run each there (part of make test)
	@./hack/test-dist.sh

exec-static: ## agentgate-exec as a static binary, checked to link nothing dynamically and to run
	@./hack/check-static-exec.sh >/dev/null

sizes: build ## print the release binaries' sizes and whether each links Z3 (docs/benchmarks.md)
	@./hack/binary-sizes.sh $(addprefix $(RELEASE_DIR)/,agentgate kubectl-agentgate agentgate-proxy agentgate-exec)

lint: fmt-check disk z3 ## rustfmt and clippy, warnings are errors
	$(CARGO) clippy --locked --workspace --all-targets -- -D warnings

fmt-check: ## rustfmt, checking only
	$(CARGO) fmt --all -- --check

# The everyday loop: needs only Z3. The tests it leaves out need root, network
# namespaces, apt packages, helm or a control plane: the e2e crate, and the
# #[ignore = "..."] tests, which make test runs (--include-ignored) and which
# say what they need (tests/README.md). It compiles as make test does (the
# exports below serve both): one build of every target, linted by
# clippy-driver, the same artefacts, so either leaves the other warm.
check: z3 sccache ## the everyday loop, a few minutes warm: fmt check, clippy, and every unit, property and golden test that needs only Z3 (tests/README.md)
	$(CARGO) fmt --all -- --check
	@# The lint: every workspace crate and target compiled by clippy-driver
	@# with warnings as errors (e2e's too), and every test binary built.
	$(CARGO) build --locked $(ALL_TARGETS)
	@# Selected with --workspace and named targets, as make test's lanes:
	@# --exclude would resolve other features and compile again.
	$(CARGO) test --locked --workspace --lib --bins $(addprefix --test ,$(OTHER_SUITES))
	$(CARGO) test --locked --workspace --doc

unit-tests: disk z3 control-plane node kstatus helm netns-tools mcp-sdk agentdojo ## every Rust test (unit, property, golden, e2e incl. the real node, proxy processes), the ignored ones too
	@# One build of every target with the features the tests unify: cargo
	@# test then only runs, and the dev binaries the golden tests, the pod
	@# runner, the real node and bench-smoke run are these.
	$(CARGO) build --locked $(ALL_TARGETS)
	@# --include-ignored: the tests make check leaves out (they need root,
	@# network namespaces or helm) run here; nothing is skipped. Two lanes
	@# side by side, each line prefixed with its lane (hack/lanes.sh): the
	@# e2e suites on their control planes; every other test (mostly CPU)
	@# and then the real node (mostly waiting on the kubelet).
	@# Every lane selects with --workspace and names targets, so that
	@# cargo resolves the features of the build above and compiles nothing
	@# (-p or --exclude would resolve another set and rebuild most crates).
	@./hack/lanes.sh \
	  tests '$(CARGO) test --locked --workspace --lib --bins $(addprefix --test ,$(OTHER_SUITES)) -- --include-ignored && $(CARGO) test --locked --workspace --doc && $(CARGO) test --locked --workspace --test real_node -- --include-ignored' \
	  e2e '$(CARGO) test --locked --workspace $(addprefix --test ,$(E2E_SUITES)) -- --include-ignored'

sccache: ## install (once, cached in ~/.cache/agentgate) sccache, the compilation cache of make test's dependencies
	@./hack/install-sccache.sh

# make test compiles each crate once. The workspace's crates are compiled by
# clippy-driver with warnings as errors (hack/clippy-rustc.sh), so the build
# of every target the tests run is also make lint's clippy, and no dependency
# is checked a second time for clippy alone; the dependencies go through
# sccache (hack/rustc-cached.sh), whose cache outlives the clone. Exported to
# every prerequisite's recipe, so cargo test, bench-smoke and exec-static find
# the same build and compile nothing again (docs/testing.md). make check
# compiles the same way.
check test: export RUSTC_WORKSPACE_WRAPPER := $(CURDIR)/hack/clippy-rustc.sh
check test: export RUSTC_WRAPPER := $(CURDIR)/hack/rustc-cached.sh
check test: export SCCACHE_DIR := $(or $(AGENTGATE_CACHE),$(or $(XDG_CACHE_HOME),$(HOME)/.cache)/agentgate)/sccache
check test: export SCCACHE_CACHE_SIZE := 6G
check test: export SCCACHE_IDLE_TIMEOUT := 120
test: fmt-check sccache chart unit-tests exec-static dist-check image-check bench-smoke ## everything CI runs

e2e: z3 exec-static control-plane node kstatus helm netns-tools mcp-sdk agentdojo ## only the end-to-end tests (real etcd + kube-apiserver + kubectl, and the real node; docs/testing.md)
	@# What the suites run: the operator and plugin, the proxy and
	@# agentgate-exec (the pod runner copies these), the static agentgate-exec
	@# (exec-static) and, from them, the node's images (packed by the test
	@# through e2e/hack/node-images.sh, cached).
	$(CARGO) build --locked $(DEV_BINS)
	$(CARGO) test --locked -p agentgate-e2e -- --include-ignored

FUZZ_SECONDS ?= 600
fuzz: z3 ## bad input for FUZZ_SECONDS (default 600) per target: admission endpoints and /v1/decide through the router in process, policy load/compile/prove; prints executions and failures
	$(CARGO) run --release --locked -q -p agentgate-tests --bin fuzz -- --seconds $(FUZZ_SECONDS)

bench: z3 ## containment latency benchmark (prints p50/p99; see docs/benchmarks.md)
	$(CARGO) run --release --locked -p agentgate-bench --bin bench-containment

bench-surfaces: z3 ## containment latency at N=100 with the surfaces of docs/policy-semantics.md §10 in the mix, beside the plain mix, in one run
	BENCH_SIZES=100 BENCH_NAIVE_SAMPLES=0 BENCH_DRIFT_CHECKS=0 $(CARGO) run --release --locked -q -p agentgate-bench --bin bench-containment
	BENCH_SURFACES=1 BENCH_SIZES=100 BENCH_NAIVE_SAMPLES=0 BENCH_DRIFT_CHECKS=0 $(CARGO) run --release --locked -q -p agentgate-bench --bin bench-containment

bench-scan: z3 ## scanner throughput over 10,000 generated Python tool modules (files/s)
	$(CARGO) run --release --locked -q -p agentgate-bench --bin bench-scan

bench-operator: z3 control-plane ## proposal creation -> Applied latency and commits/s on the local control plane
	$(CARGO) build --release --locked -q -p agentgate --bin agentgate
	$(CARGO) run --release --locked -q -p agentgate-bench --bin bench-proposals

bench-scale: z3 control-plane helm ## 1,000 sandboxes in 50 namespaces under 3 ceilings: admission p99, proposal burst commits/s, a tightened ceiling re-verifying all, operator RSS/CPU, idle reconciles (about 20 minutes)
	$(CARGO) build --release --locked -q -p agentgate --bin agentgate
	$(CARGO) run --release --locked -q -p agentgate-bench --bin bench-scale

bench-requests: z3 control-plane helm ## count before cutting: the API requests (verb, resource, bytes, API server time) and the operator's work of one proposal commit
	$(CARGO) build --release --locked -q -p agentgate --bin agentgate
	$(CARGO) run --release --locked -q -p agentgate-bench --bin bench-requests

bench-fleet: z3 ## the operator's re-verification and commit paths at 10,000 and 100,000 sandboxes in one process, no API server: memory per cached sandbox, storm with and without shared revocations, verdicts/s
	$(CARGO) build --release --locked -q -p agentgate-bench --bin bench-fleet
	$(RELEASE_DIR)/bench-fleet

bench-verify: z3 ## agentgate verify over 500 generated sandboxes under 3 maximums in one process, beside 500 separate runs
	$(CARGO) build --release --locked -q -p agentgate --bin agentgate
	$(CARGO) build --release --locked -q -p agentgate-bench --bin bench-verify
	$(RELEASE_DIR)/bench-verify

bench-mcp: z3 ## tool-call authority: containment of tool policies and decisions on 1,000 tool rules beside the same as rest rules, and the proxy's added latency per tools/call
	$(CARGO) run --release --locked -q -p agentgate-bench --bin bench-mcp
	$(CARGO) build --release --locked -q -p agentgate-proxy --bin agentgate-proxy
	$(CARGO) build --release --locked -q -p agentgate-bench --bin bench-proxy
	BENCH_PROXY_ONLY=mcp $(RELEASE_DIR)/bench-proxy

bench-agentdojo: netns-tools agentdojo ## AgentDojo's four suites (test split) replayed through agentgate-proxy with no model, per policy configuration side by side: clean and attacked utility, attack success rate (TRACES=FILE replays that JSONL file instead; docs/benchmarks.md)
	$(CARGO) build --release --locked -q -p agentgate-proxy --bin agentgate-proxy
	python3 e2e/agentdojo/bench.py $(RELEASE_DIR)/agentgate-proxy "$$(./hack/install-agentdojo.sh --print)" $(if $(TRACES),--traces $(TRACES))

bench-trifecta: z3 ## trifecta analysis: minimum cut and analysis on a 10,000-tool graph, scanner throughput
	$(CARGO) run --release --locked -q -p agentgate-bench --bin bench-trifecta

bench-webhook: z3 control-plane helm ## admission latency over TLS (10/100 rules, pods at 500/s) and /v1/decide, from a separate load process
	$(CARGO) build --release --locked -q -p agentgate --bins
	$(CARGO) run --release --locked -q -p agentgate-bench --bin bench-decide
	$(CARGO) run --release --locked -q -p agentgate-bench --bin bench-webhook

bench-delivery: z3 control-plane node helm netns-tools mcp-sdk ## policy delivery: 1,000 proxies subscribed to one replica's policy stream (simulated, in process: memory, one commit's latency, a tightened ceiling's fan-out), then the real node at the kubelet's default sync: 20 approvals and revocations seen by the running agent (p50/p99), and one tightened ceiling over 100 running sandbox Pods
	$(CARGO) build --release --locked -q -p agentgate-bench --bin bench-delivery
	$(RELEASE_DIR)/bench-delivery
	@# The node runs release binaries, as a cluster does (make test's real
	@# node runs the debug build with a fleet of 3), and only the two trials
	@# whose names hold "delivery".
	$(CARGO) build --release --locked -q -p agentgate -p agentgate-proxy --bins
	AGENTGATE_DELIVERY_TRIALS=20 AGENTGATE_FLEET_PODS=100 $(CARGO) test --release --locked -q -p agentgate-e2e --test real_node -- --include-ignored --nocapture delivery > $(TARGET_DIR)/bench-delivery-node.log 2>&1 || { tail -60 $(TARGET_DIR)/bench-delivery-node.log; exit 1; }
	@# A trial's lines may follow the harness's "test name ... " on its line.
	grep -oE 'real node: (proposal|delivery|fleet|policy stream cut|booted).*' $(TARGET_DIR)/bench-delivery-node.log

bench-proxy: ## egress proxy: added latency, requests/s, CPU, RSS, new connections, tunnel GB/s, decision and reload cost
	$(CARGO) build --release --locked -q -p agentgate-proxy --bin agentgate-proxy
	$(CARGO) build --release --locked -q -p agentgate-bench --bin bench-proxy
	$(RELEASE_DIR)/bench-proxy

bench-smoke: z3 control-plane helm netns-tools agentdojo ## every benchmark program with tiny sizes; fails when one no longer works
	@# Dev profile, the build make test's unit-tests made (fresh there); the
	@# e2e benchmarks run target/debug/agentgate.
	$(CARGO) build --locked -q $(ALL_TARGETS)
	AGENTGATE_BENCH_SMOKE=1 $(DEBUG_DIR)/bench-containment
	AGENTGATE_BENCH_SMOKE=1 BENCH_SURFACES=1 BENCH_NAIVE_SAMPLES=0 $(DEBUG_DIR)/bench-containment
	AGENTGATE_BENCH_SMOKE=1 $(DEBUG_DIR)/bench-decide
	AGENTGATE_BENCH_SMOKE=1 $(DEBUG_DIR)/bench-scan
	AGENTGATE_BENCH_SMOKE=1 $(DEBUG_DIR)/bench-trifecta
	AGENTGATE_BENCH_SMOKE=1 $(DEBUG_DIR)/bench-verify
	AGENTGATE_BENCH_SMOKE=1 $(DEBUG_DIR)/bench-fleet
	AGENTGATE_BENCH_SMOKE=1 $(DEBUG_DIR)/bench-delivery
	AGENTGATE_BENCH_SMOKE=1 $(DEBUG_DIR)/bench-mcp
	AGENTGATE_BENCH_SMOKE=1 $(DEBUG_DIR)/bench-proposals
	AGENTGATE_BENCH_SMOKE=1 $(DEBUG_DIR)/bench-requests
	AGENTGATE_BENCH_SMOKE=1 $(DEBUG_DIR)/bench-webhook
	AGENTGATE_BENCH_SMOKE=1 $(DEBUG_DIR)/bench-scale
	AGENTGATE_BENCH_SMOKE=1 $(DEBUG_DIR)/bench-proxy
	python3 e2e/agentdojo/bench.py $(DEBUG_DIR)/agentgate-proxy "$$(./hack/install-agentdojo.sh --print)" --smoke

demo: build control-plane node helm netns-tools ## a local cluster with a real node, the chart installed from make image's image, examples/, an enforcing sandbox Pod run by the kubelet, left running (stop: make demo-down)
	@# Release, like the image it installs (hack/image.sh from target/release).
	$(CARGO) run --release --locked -q -p agentgate-e2e --bin agentgate-demo -- up

demo-down: ## stop what make demo started
	$(CARGO) run --release --locked -q -p agentgate-e2e --bin agentgate-demo -- down

demo-cli: build ## the CLI on examples/: verify, diff with its cost, import openshell
	@./hack/demo.sh

crds: z3 ## regenerate crds/agentgate.yaml (and the chart's copy) from the Rust types
	@mkdir -p crds
	@# Each file is written beside itself, then renamed into place: a failed
	@# build leaves both as they were.
	@tmp=crds/.agentgate.yaml.tmp chart_tmp=charts/agentgate/files/.crds.yaml.tmp; \
	  trap 'rm -f "$$tmp" "$$chart_tmp"' EXIT; \
	  $(CARGO) run --locked -q -p agentgate --bin agentgate -- crds >"$$tmp"; \
	  test -s "$$tmp"; \
	  cp "$$tmp" "$$chart_tmp"; \
	  mv -f "$$chart_tmp" charts/agentgate/files/crds.yaml; \
	  mv -f "$$tmp" crds/agentgate.yaml

fmt: ## format the code
	$(CARGO) fmt --all

clean: ## remove build output and the local Z3
	$(CARGO) clean
	rm -rf .tools
