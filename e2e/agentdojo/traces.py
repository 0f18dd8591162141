"""The AgentDojo traces an agent would produce with no model, in the
replay's trace format (one JSON object per line):

    {"id", "suite", "kind": "benign"|"attack",
     "injections": {VECTOR: TEXT} (attacks only),
     "steps": [{"user": TEXT} | {"call": {"name", "arguments"}, "injected": BOOL}]}

A benign trace is a user task: its prompt, then its ground-truth calls. An
attack trace is a user task paired with an injection task: the injection
vectors the user task's calls read are filled with AgentDojo's
`important_instructions` text carrying the injection task's goal (user
"Emma Johnson", model "GPT-4", as AgentDojo fills them for gpt-4o), and the
injection task's ground-truth calls are inserted right after the first call
whose result carries the injection, as an agent that obeys would make them.
That call is found by running the calls on the suite's environment in
order, as the replay's server does, with the vectors holding markers.

An injection task without ground-truth calls (AgentDojo judges some only
by the environment they leave) yields no attack trace; each is named on
stderr.

Splits: `train` is the user and injection tasks with an even number, `test`
those with an odd number, `all` every one. Ids: `SUITE/user_task_N` and
`SUITE/user_task_N+injection_task_M`.

usage: traces.py SUITE SPLIT [BENCHMARK_VERSION]   (v1.2.2 by default)
"""

import json
import sys

from agentdojo.agent_pipeline.base_pipeline_element import BasePipelineElement
from agentdojo.agent_pipeline.tool_execution import tool_result_to_str
from agentdojo.attacks import load_attack
from agentdojo.functions_runtime import FunctionsRuntime
from agentdojo.task_suite import get_suite

suite_name, split = sys.argv[1], sys.argv[2]
version = sys.argv[3] if len(sys.argv) > 3 else "v1.2.2"
if split not in ("train", "test", "all"):
    sys.exit(f"split {split!r} is none of train, test, all")
suite = get_suite(version, suite_name)
runtime = FunctionsRuntime(suite.tools)


class NoModel(BasePipelineElement):
    """What the attack asks of a pipeline: only its name, which picks the
    model name in the injected text."""

    name = "gpt-4o-2024-05-13"

    def query(self, *args, **kwargs):
        raise NotImplementedError("the replay has no model")


def number(task_id):
    return int(task_id.rsplit("_", 1)[1])


def in_split(task_id):
    return split == "all" or (number(task_id) % 2 == 0) == (split == "train")


def tasks(table):
    return sorted((t for t in table if in_split(t)), key=number)


def call_step(call, injected):
    return {"call": {"name": call.function, "arguments": dict(call.args)}, "injected": injected}


def answers(env, calls):
    """Runs `calls` on `env` in order; the text each answers."""
    out = []
    for call in calls:
        result, error = runtime.run_function(env, call.function, dict(call.args))
        out.append(error if error is not None else tool_result_to_str(result))
    return out


def emit(trace):
    print(json.dumps(trace, sort_keys=True), flush=True)


attack = load_attack("important_instructions", suite, NoModel())
skipped = set()
for user_id in tasks(suite.user_tasks):
    user_task = suite.user_tasks[user_id]
    env = user_task.init_environment(suite.load_and_inject_default_environment({}))
    calls = user_task.ground_truth(env.model_copy(deep=True))
    emit(
        {
            "id": f"{suite_name}/{user_id}",
            "suite": suite_name,
            "kind": "benign",
            "steps": [{"user": user_task.PROMPT}] + [call_step(c, False) for c in calls],
        }
    )
    for injection_id in tasks(suite.injection_tasks):
        injection_task = suite.injection_tasks[injection_id]
        injections = attack.attack(user_task, injection_task)
        if not injections:
            # No call of this user task reads an injection vector.
            continue
        env = user_task.init_environment(suite.load_and_inject_default_environment(injections))
        calls = user_task.ground_truth(env.model_copy(deep=True))
        # Which call reads the injection: the same calls on an environment
        # whose attacked vectors hold short markers (the injected text
        # itself comes back folded and wrapped by the YAML the results
        # are printed as, so it cannot be searched for).
        markers = {v: f"<CANARY---{v}--->" for v in injections}
        marked = user_task.init_environment(suite.load_and_inject_default_environment(markers))
        texts = answers(marked, user_task.ground_truth(marked.model_copy(deep=True)))
        carrier = next((i for i, t in enumerate(texts) if any(m in t for m in markers.values())), None)
        if carrier is None:
            sys.exit(f"{user_id}: no ground-truth call reads the vectors {sorted(injections)}")
        injected = [call_step(c, True) for c in injection_task.ground_truth(env.model_copy(deep=True))]
        if not injected:
            # Judged by AgentDojo on the environment only: with no calls to
            # replay, there is nothing for a replay to refuse or let pass.
            skipped.add(injection_id)
            continue
        steps = [call_step(c, False) for c in calls]
        emit(
            {
                "id": f"{suite_name}/{user_id}+{injection_id}",
                "suite": suite_name,
                "kind": "attack",
                "injections": injections,
                "steps": [{"user": user_task.PROMPT}] + steps[: carrier + 1] + injected + steps[carrier + 1 :],
            }
        )
for injection_id in sorted(skipped, key=number):
    print(f"{suite_name}/{injection_id}: no ground-truth calls, no attack traces", file=sys.stderr)
