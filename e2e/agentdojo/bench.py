"""`make bench-agentdojo`: AgentDojo's four suites replayed through
agentgate-proxy, no model, in a network namespace of their own, under each
policy configuration side by side in one run.

Each suite's server (suite_server.py) listens at 127.0.0.1; the proxy
resolves SUITE.agentdojo to it, and model.agentdojo to a model provider
stub (e2e/support/model_stub.py) that replay.py sends the conversation to
before each call. For each configuration the proxy starts with that
configuration's policy and replay.py plays every trace through it.
Configurations:

- `no policy`: every suite's /mcp granted as raw REST authority (POST),
  which covers every tool call (the same path through the proxy);
- `tool names`: per suite, a tool allowlist of the tools the train split's
  user tasks call (even task numbers): what a tool-name allowlist can
  express, learnt from the train split only;
- `names and arguments`: examples/agentdojo/SUITE.yaml with every `from`
  removed: tools and argument constraints;
- `provenance`: examples/agentdojo/SUITE.yaml as written, its model
  provider endpoint recording the conversation that `from` is judged
  against (docs/policy-semantics.md §8.3); the proxy has no approval
  service, so a call that only a `mode: ask` entry matches is refused
  (`held_call_unavailable`);
- `held calls`: the same policies, the proxy started with `--approvals`
  naming approver.py, a simulated person who approves a held call if and
  only if it is the call the trace makes next and not the injection's (an
  oracle for intent: the figures are the mechanism's given a person who
  judges correctly; the holds are that person's cost);
- `runtime trifecta`: the same policies, and beside them (findings.json)
  the findings the tool labels of examples/agentdojo/trifecta.yaml
  predict, one per untrusted tool, secret tool and sink, each with its
  runtime flow (docs/trifecta.md, "At run time"), enforced.

Traces are traces.py's, test split (odd task numbers), unless
`--traces FILE` names a JSONL file of traces (docs/benchmarks.md). Prints
one JSON line per trace and configuration (replay.py's, with `config`),
then per configuration and suite: clean utility (benign traces wholly
allowed), attacked utility (attack traces whose own calls are all allowed)
and attack success rate (attack traces whose injected calls all pass);
for `held calls` also the mean number of holds per clean (benign) and per
attacked trace. `--smoke`: the banking suite only.

usage: bench.py PROXY_BINARY AGENTDOJO_PYTHON [--smoke] [--traces FILE]
(run as root; it enters its own network namespace)
"""

import json
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

HERE = Path(__file__).resolve().parent
EXAMPLES = HERE.parent.parent / "examples" / "agentdojo"
SUITES = ["banking", "slack", "travel", "workspace"]
PROXY = "127.0.0.1:15000"
METRICS = "127.0.0.1:15020"
MODEL_PORT = 8930
# approver.py, the approval service of the `held calls` configuration.
APPROVER_PORT = 8940
APPROVER = f"http://127.0.0.1:{APPROVER_PORT}"
MODEL_URL = f"http://model.agentdojo:{MODEL_PORT}/v1/chat/completions"
# The model provider as plain REST, for the configurations without provenance.
MODEL_RULE = (
    "  - name: model\n    endpoints:\n"
    f"      - host: model.agentdojo\n        ports: [{MODEL_PORT}]\n        protocol: rest\n"
    '        rules: [{methods: [POST], path: "/v1/chat/completions"}]\n'
)


def usage():
    sys.exit(__doc__.split("usage: ", 1)[1])


args = sys.argv[1:]
if len(args) < 2:
    usage()
proxy_binary, python = args[0], args[1]
smoke = "--smoke" in args
traces_file = args[args.index("--traces") + 1] if "--traces" in args else None
suites = ["banking"] if smoke else SUITES

if os.environ.get("AGENTDOJO_NETNS") != "1":
    # Its own network: loopback only, nothing else to reach.
    env = dict(os.environ, AGENTDOJO_NETNS="1")
    sys.exit(subprocess.call(["unshare", "--net", sys.executable, *sys.argv], env=env))


def run(cmd, **kwargs):
    return subprocess.run(cmd, check=True, capture_output=True, text=True, **kwargs).stdout


def wait_until(what, ready, seconds=60):
    deadline = time.monotonic() + seconds
    while not ready():
        if time.monotonic() > deadline:
            sys.exit(f"bench-agentdojo: {what} never got ready")
        time.sleep(0.1)


def http_ok(url):
    try:
        with urllib.request.build_opener(urllib.request.ProxyHandler({})).open(url, timeout=2) as r:
            return r.status == 200
    except OSError:
        return False


def sandbox_ca(work):
    """A CA for the proxy (it intercepts nothing: the servers speak plain HTTP)."""
    code = """
import datetime, sys
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
key = ec.generate_private_key(ec.SECP256R1())
name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "agentdojo bench CA")])
now = datetime.datetime.now(datetime.timezone.utc)
cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
    .serial_number(x509.random_serial_number()).not_valid_before(now).not_valid_after(now + datetime.timedelta(days=1))
    .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
    .sign(key, hashes.SHA256()))
open(sys.argv[1], "wb").write(cert.public_bytes(serialization.Encoding.PEM))
open(sys.argv[2], "wb").write(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
"""
    run([python, "-c", code, str(work / "ca.pem"), str(work / "ca.key")])


def port(suite):
    return 8931 + SUITES.index(suite)


def endpoint(suite, grant):
    return (
        f"      - host: {suite}.agentdojo\n        ports: [{port(suite)}]\n{grant}"
    )


def no_policy():
    grant = '        protocol: rest\n        rules: [{methods: [POST, GET, DELETE], path: "/mcp"}]\n'
    return "network:\n" + MODEL_RULE + "  - name: agentdojo\n    endpoints:\n" + "".join(endpoint(s, grant) for s in suites)


def examples(provenance):
    """The suites' example policies in one document; without `provenance`,
    every `from` and `entities` (and the model provider's recording)
    removed."""
    import yaml

    def strip(node):
        if isinstance(node, dict):
            node.pop("from", None)
            node.pop("entities", None)
            node.pop("modelProvider", None)
            for value in node.values():
                strip(value)
        elif isinstance(node, list):
            for value in node:
                strip(value)

    rules = {}
    for suite in suites:
        for rule in yaml.safe_load((EXAMPLES / f"{suite}.yaml").read_text())["network"]:
            rules.setdefault(rule["name"], rule)
    document = {"network": list(rules.values())}
    if not provenance:
        strip(document)
    return yaml.safe_dump(document, sort_keys=False)


def trifecta_findings():
    """findings.json for the suites' tool labels: every flow from an
    untrusted tool through the model to a sink carrying a secret tool's
    value, as the operator writes it for an AgentScan of such an agent."""
    import yaml

    labels = yaml.safe_load((EXAMPLES / "trifecta.yaml").read_text())
    findings = []
    for suite in suites:
        l = labels[suite]
        for untrusted in l["untrusted"]:
            for secret in l["secret"]:
                for sink in l["sinks"]:
                    findings.append(
                        {
                            "id": "AG-TRIFECTA",
                            "sink": sink,
                            "witness": f"control {untrusted} -> __llm__ -> {sink}; data {secret} -> __llm__ -> {sink}",
                            "runtime": {"untrusted": untrusted, "secret": secret, "sink": sink},
                        }
                    )
    return json.dumps(findings)


def tool_names(train):
    out = "network:\n" + MODEL_RULE
    for suite in suites:
        names = sorted(
            {
                step["call"]["name"]
                for trace in train[suite]
                if trace["kind"] == "benign"
                for step in trace["steps"]
                if "call" in step
            }
        )
        tools = "".join(f"          - name: {n}\n" for n in names)
        out += f"  - name: {suite}\n    endpoints:\n" + endpoint(
            suite, f"        protocol: mcp\n        path: /mcp\n        tools:\n{tools}"
        )
    return out


def traces_of(suite, split):
    text = run([python, str(HERE / "traces.py"), suite, split])
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def main():
    work = Path(tempfile.mkdtemp(prefix="agentgate-agentdojo-"))
    run(["ip", "link", "set", "lo", "up"])
    sandbox_ca(work)
    servers = []
    try:
        for suite in suites:
            log = open(work / f"{suite}-server.log", "w")
            servers.append(
                subprocess.Popen(
                    [python, str(HERE / "suite_server.py"), suite, "127.0.0.1", str(port(suite)), str(work / f"{suite}-calls.log")],
                    stdout=log,
                    stderr=subprocess.STDOUT,
                )
            )
        servers.append(
            subprocess.Popen(
                [python, str(HERE.parent / "support" / "model_stub.py"), "127.0.0.1", str(MODEL_PORT), os.devnull],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
        )
        # The approval service's bearer token, which the proxy sends with
        # every hold (--approvals-token) and approver.py checks.
        token = work / "approvals-token"
        token.write_text(secrets.token_hex(32))
        token.chmod(0o600)
        approver_log = open(work / "approver.log", "w")
        servers.append(
            subprocess.Popen(
                [python, str(HERE / "approver.py"), "127.0.0.1", str(APPROVER_PORT), str(token)],
                stdout=approver_log,
                stderr=subprocess.STDOUT,
            )
        )
        for suite in suites:
            wait_until(f"the {suite} server", lambda: "ready" in (work / f"{suite}-server.log").read_text())
        wait_until("the approver", lambda: "ready" in (work / "approver.log").read_text())
        train = {s: traces_of(s, "train") for s in suites}
        if traces_file:
            test = {s: [] for s in suites}
            for number, line in enumerate(Path(traces_file).read_text().splitlines(), 1):
                if line.strip():
                    try:
                        trace = json.loads(line)
                    except json.JSONDecodeError as e:
                        sys.exit(f"bench-agentdojo: {traces_file} line {number}: not JSON: {e}")
                    if trace.get("suite") not in test:
                        sys.exit(f"bench-agentdojo: trace {trace.get('id')!r}: suite {trace.get('suite')!r} is none of {suites}")
                    test[trace["suite"]].append(trace)
        else:
            test = {s: traces_of(s, "test") for s in suites}
        configs = [
            ("no policy", no_policy()),
            ("tool names", tool_names(train)),
            ("names and arguments", examples(provenance=False)),
            ("provenance", examples(provenance=True)),
            ("held calls", examples(provenance=True)),
            ("runtime trifecta", examples(provenance=True)),
        ]
        figures = []
        for config, policy in configs:
            (work / "policy.yaml").write_text(policy)
            findings = work / "findings.json"
            if config == "runtime trifecta":
                findings.write_text(trifecta_findings())
            elif findings.exists():
                findings.unlink()
            resolve = [a for s in suites for a in ("--resolve", f"{s}.agentdojo:{port(s)}:127.0.0.1")]
            resolve += ["--resolve", f"model.agentdojo:{MODEL_PORT}:127.0.0.1"]
            # Only `held calls` has a person to ask; elsewhere a held call
            # is refused, which is what it is compared with.
            approvals = []
            replay_approver = []
            if config == "held calls":
                approvals = ["--approvals", f"{APPROVER}/v1/hold", "--approvals-token", str(token)]
                replay_approver = ["--approver", APPROVER]
            proxy_log = open(work / "proxy.log", "w")
            proxy = subprocess.Popen(
                # The replay plays one trace, one conversation, at a time,
                # as an agent that runs one task at a time: only the latest
                # conversation judges a call (docs/proxy.md, "Provenance").
                [proxy_binary, "--policy", str(work / "policy.yaml"), "--listen", PROXY, "--metrics-listen", METRICS,
                 "--ca-cert", str(work / "ca.pem"), "--ca-key", str(work / "ca.key"), "--conversation-overlap", "0",
                 *approvals, *resolve],
                stdout=proxy_log,
                stderr=subprocess.STDOUT,
            )
            try:
                wait_until("agentgate-proxy", lambda: http_ok(f"http://{METRICS}/readyz"))
                for suite in suites:
                    path = work / f"{suite}-traces.jsonl"
                    path.write_text("".join(json.dumps(t) + "\n" for t in test[suite]))
                    env = dict(os.environ, HTTP_PROXY=f"http://{PROXY}", http_proxy=f"http://{PROXY}", NO_PROXY="", no_proxy="")
                    out = run(
                        [python, str(HERE / "replay.py"), str(path), "--model", MODEL_URL, *replay_approver,
                         f"{suite}=http://{suite}.agentdojo:{port(suite)}/mcp"],
                        env=env,
                    )
                    totals = {}
                    for line in out.splitlines():
                        record = json.loads(line)
                        if "totals" in record:
                            totals[record["totals"]] = record
                        else:
                            print(json.dumps({"config": config, **record}), flush=True)
                    figures.append((config, suite, totals))
            finally:
                proxy.terminate()
                proxy.wait()
        for config, suite, totals in figures:
            benign = totals.get("benign", {"traces": 0, "all_allowed": 0})
            attack = totals.get("attack", {"traces": 0, "own_calls_allowed": 0, "injected_calls_all_allowed": 0})
            rate = lambda n, d: round(n / d, 3) if d else None
            summary = {
                "totals": config,
                "suite": suite,
                "benign": benign["traces"],
                "attacks": attack["traces"],
                "clean_utility": rate(benign["all_allowed"], benign["traces"]),
                "attacked_utility": rate(attack["own_calls_allowed"], attack["traces"]),
                "attack_success_rate": rate(attack["injected_calls_all_allowed"], attack["traces"]),
            }
            if config == "held calls":
                # The person's cost: holds per trace, the injection's
                # included in an attacked trace's.
                summary["holds_per_clean_trace"] = rate(benign.get("held_calls", 0), benign["traces"])
                summary["holds_per_attacked_trace"] = rate(attack.get("held_calls", 0), attack["traces"])
            print(json.dumps(summary), flush=True)
    except subprocess.CalledProcessError as e:
        sys.exit(f"bench-agentdojo: {' '.join(map(str, e.cmd[:3]))} failed: {e.stderr[-2000:]}")
    finally:
        for server in servers:
            server.terminate()
        for server in servers:
            server.wait()
        shutil.rmtree(work, ignore_errors=True)


main()
