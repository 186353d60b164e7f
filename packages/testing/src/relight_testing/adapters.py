"""The adapter conformance kit: one base test class every framework adapter's test suite subclasses.

Each test runs the real framework driving a real agent through relight's whole loop: runner,
gateway on 127.0.0.1 and a :class:`~relight.scripted.server.ScriptedUpstream` with known token
ids. A subclass says which adapter it tests, how to build and run its agent against an ``llm``
handle, and which roles one run's LLM calls belong to::

    import pytest
    from relight_testing.adapters import AdapterConformance
    from relight.scripted import by_system_prompt, turns
    from relight_myframework import MyFrameworkAdapter

    class TestMyFrameworkConformance(AdapterConformance):
        adapter_name = "myframework"          # its entry point in the ``relight`` group
        adapter = MyFrameworkAdapter
        roles = ("planner", "writer")         # the role of each LLM call of one run, in order
        modes = ("sync", "async", "stream")   # the ways of running it that the suite exercises

        def script(self):
            return by_system_prompt({"You plan": turns("A plan."), "You write": turns("A text.")})

        def run_sync(self, task, llm):        # needed only with "sync" in modes
            build_agent(llm).run(task)

        async def run_async(self, task, llm, *, stream):
            await build_agent(llm, stream=stream).arun(task)

The task text must reach every LLM request of the run (a chat history does that): the kit checks
that each transition's prompt holds its own rollout's task and no other, which is how it sees
rollouts mixing. Override :meth:`AdapterConformance.after_run` when the framework reports calls
from elsewhere (a thread pool) and must be flushed before the rollout ends,
:meth:`AdapterConformance.break_hook` if the adapter records without :func:`relight.tracing.otel.tracer`,
and :meth:`AdapterConformance.fail_a_tool` to have the failed-tool promise checked.

What every adapter is held to:

- ``instrument()``/``uninstrument()`` are idempotent, and the adapter is registered under its name;
- every LLM call becomes exactly one role span, joined to exactly one gateway LLM span, giving one
  transition with the right role, token ids and reward, in sync, async and streaming runs;
- training one role (a role filter) yields transitions of that role alone;
- with one policy per role (``Trainer(policies=...)``) every call reaches the gateway naming its role, so
  the upstream is asked for its role's policy, and each transition names that policy;
- many rollouts at once in one process don't mix;
- an exception inside the adapter's hook is logged and never reaches the agent;
- a tool call that fails is a failed tool span of the role that called it, and the run goes on;
- outside a rollout the agent runs as usual, and after ``uninstrument()`` nothing is recorded.
"""

from __future__ import annotations

import io
import logging
import threading
import uuid
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

import pytest
from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace import Span as SdkSpan
from pydantic import JsonValue
from rich.console import Console

from relight import semconv
from relight.agent import LLM, Agent, FunctionAgent
from relight.plugins import registry
from relight.records import Rollout, RolloutStatus, Span, SpanKind, Transition
from relight.scripted import Script, ScriptedUpstream, Served, decode
from relight.stores.memory import InMemoryStore
from relight.tracing import hook_failures as guard
from relight.tracing import otel as tracing
from relight.tracing.agent_spans import MAX_TOOL_TEXT
from relight.tracing.instrumentation import Adapter, instrument
from relight.training.trainer import Trainer
from relight.transitions.builder import TransitionBuilder
from relight_testing.algorithms import PoliciesRecordingAlgorithm

__all__ = ["AdapterConformance", "Batch", "HookSabotage", "RunMode", "RunRecord"]

RunMode = Literal["sync", "async", "stream"]
RUN_MODES: tuple[RunMode, ...] = ("sync", "async", "stream")
_MODEL = "scripted"
"""The model name the kit's agents are told to use: the base model, and the one a run with policies routes."""
ATTEMPT_TIMEOUT = 120.0
"""Seconds one rollout may take before the kit calls it hung; reached only when broken."""


class HookSabotage(RuntimeError):
    """What :meth:`AdapterConformance.break_hook` makes the adapter's span recording raise."""


@dataclass(frozen=True, slots=True)
class RunRecord:
    """One rollout as the kit saw it: its task, its outcome and what its attempt recorded."""

    task: str
    reward: float
    rollout: Rollout
    spans: list[Span]
    transitions: list[Transition]
    """Its transitions, as trained with the run's role filter."""

    def of_kind(self, kind: SpanKind) -> list[Span]:
        """This attempt's spans of ``kind``, in the order they started."""
        return sorted((span for span in self.spans if span.kind is kind), key=lambda span: span.start_time)


@dataclass(frozen=True, slots=True)
class Batch:
    """Rollouts run at once, and every reply the scripted upstream sent them."""

    runs: list[RunRecord]
    served: list[Served]


class _Saboteur(SpanProcessor):
    """Makes starting a role or tool span raise while armed: an error inside the adapter's hook."""

    armed = False

    def on_start(self, span: SdkSpan, parent_context: Context | None = None) -> None:
        kind = (span.attributes or {}).get(semconv.SPAN_KIND)
        if self.armed and kind in (SpanKind.ROLE.value, SpanKind.TOOL.value):
            raise HookSabotage(f"the conformance kit broke the {kind} span {span.name!r}")

    def on_end(self, span: ReadableSpan) -> None:
        return None


_saboteur = _Saboteur()
_saboteur_lock = threading.Lock()
_saboteur_installed = False


def _install_saboteur() -> _Saboteur:
    """Add the saboteur to the SDK tracer provider once (a provider cannot drop a processor)."""
    global _saboteur_installed
    with _saboteur_lock:
        if not _saboteur_installed:
            tracing.tracer()  # makes relight's SDK provider the global one if none is yet
            provider = trace.get_tracer_provider()
            if not isinstance(provider, TracerProvider):
                raise RuntimeError("the adapter kit needs OpenTelemetry's SDK tracer provider (relight installs it)")
            provider.add_span_processor(_saboteur)
            _saboteur_installed = True
    return _saboteur


class AdapterConformance:
    """The promises every framework adapter keeps; subclass it in the adapter's test suite.

    Class attributes and methods to provide are listed first; see the module docstring.
    """

    adapter_name: ClassVar[str]
    """The adapter's name in the ``relight`` entry-point group (``relight.instrument(adapter_name)``)."""
    adapter: ClassVar[type[Adapter]]
    """The adapter class; ``adapter()`` is the process's adapter."""
    roles: ClassVar[Sequence[str]]
    """The role of each LLM call that one run of the agent makes, in call order."""
    tools: ClassVar[Sequence[tuple[str, str]]] = ()
    """(tool name, role of the agent that called it) for each tool one run executes, in order; all succeed."""
    handoffs: ClassVar[Sequence[tuple[str, str]]] = ()
    """(from role, to role) for each handoff one run makes, in order: each must be a handoff span."""
    modes: ClassVar[Sequence[RunMode]] = RUN_MODES
    """The ways of running the agent the suite exercises: ``sync`` needs :meth:`run_sync`."""
    trained_role: ClassVar[str | None] = None
    """The role the role-filter test trains; the first of :attr:`roles` by default."""
    rollouts_at_once: ClassVar[int] = 8

    def script(self) -> Script:
        """The scripted upstream's replies: what the model answers each of the agent's calls."""
        raise NotImplementedError(f"{type(self).__name__} must define script()")

    def task(self, index: int) -> str:
        """The text of the ``index``-th task; no task's text may contain another's."""
        return f"Task #{index} [{uuid.uuid4().hex[:8]}]"

    def run_sync(self, task: str, llm: LLM) -> None:
        """Build the agent against ``llm`` and run it on ``task`` the framework's blocking way."""
        raise NotImplementedError(f"{type(self).__name__} lists 'sync' in modes but defines no run_sync()")

    async def run_async(self, task: str, llm: LLM, *, stream: bool) -> None:
        """Build the agent against ``llm`` and run it on ``task`` the framework's async way, streaming if asked."""
        raise NotImplementedError(f"{type(self).__name__} must define run_async()")

    def after_run(self) -> None:
        """Called inside the rollout once the agent returns: flush callbacks the framework runs elsewhere."""

    def break_hook(self, monkeypatch: pytest.MonkeyPatch) -> type[BaseException]:
        """Make the adapter's hook raise; returns the exception type the adapter must log.

        By default starting any role or tool span raises :class:`HookSabotage`. Override it if the
        adapter marks its spans with ``relight.span.kind`` only after starting them.
        """
        saboteur = _install_saboteur()
        monkeypatch.setattr(saboteur, "armed", True)
        return HookSabotage

    def fail_a_tool(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """Make the run's one tool call fail (a script that calls it wrongly, a task it cannot do).

        The agent must still finish. The failed-tool test is skipped unless a subclass overrides this.
        """
        pytest.skip(f"{type(self).__name__} defines no fail_a_tool()")

    # -- fixtures ---------------------------------------------------------------------------------

    @pytest.fixture(autouse=True)
    def _instrumented(self) -> Iterator[Adapter]:
        adapter = self.adapter()
        adapter.instrument()
        yield adapter
        adapter.instrument()  # tests that uninstrument leave it as they found it

    # -- the promises -----------------------------------------------------------------------------

    def test_registered_under_its_name(self) -> None:
        assert isinstance(registry("adapters").get(self.adapter_name)(), self.adapter)
        assert instrument(self.adapter_name) == [self.adapter_name]

    async def test_instrument_and_uninstrument_are_idempotent(self) -> None:
        adapter = self.adapter()
        adapter.instrument()
        adapter.instrument()
        self.check(await self.run_rollouts(2, self._a_mode()))
        adapter.uninstrument()
        adapter.uninstrument()
        adapter.instrument()
        self.check(await self.run_rollouts(2, self._a_mode()))

    @pytest.mark.parametrize("mode", RUN_MODES)
    async def test_each_llm_call_becomes_one_transition_with_its_role(self, mode: RunMode) -> None:
        if mode not in self.modes:
            pytest.skip(f"{type(self).__name__} does not run its agent in {mode} mode")
        self.check(await self.run_rollouts(3, mode))

    async def test_training_one_role_yields_transitions_of_that_role_alone(self) -> None:
        role = self.trained_role or self.roles[0]
        self.check(await self.run_rollouts(3, self._a_mode(), roles=[role]), roles=[role])

    @pytest.mark.parametrize("mode", RUN_MODES)
    async def test_each_role_is_served_by_its_own_policy(self, mode: RunMode) -> None:
        if mode not in self.modes:
            pytest.skip(f"{type(self).__name__} does not run its agent in {mode} mode")
        policies = self.policies()
        of_role = {role: name for name, roles in policies.items() for role in roles}
        batch = await self.run_rollouts(2, mode, policies=policies)
        self.check(batch, policies=policies)
        for run in batch.runs:
            llm_spans = run.of_kind(SpanKind.LLM)
            assert [s.attributes.get(semconv.POLICY) for s in llm_spans] == [of_role[r] for r in self.roles], run.task
            assert not [s for s in llm_spans if semconv.POLICY_UNROUTED in s.attributes], run.task
            assert [s.attributes.get(semconv.GEN_AI_REQUEST_MODEL) for s in llm_spans] == [_MODEL] * len(self.roles)
        assert sorted(str(served.request.get("model")) for served in batch.served) == sorted(
            of_role[role] for role in self.roles for _ in batch.runs
        ), "the upstream was not asked for each call's own policy"

    async def test_many_rollouts_at_once_do_not_mix(self) -> None:
        for mode in self.modes:
            self.check(await self.run_rollouts(self.rollouts_at_once, mode))

    async def test_an_error_in_the_hook_is_logged_and_never_reaches_the_agent(
        self, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
    ) -> None:
        error_type = self.break_hook(monkeypatch)
        # Each place logs its first failure only; a fresh tally makes this test's first failure the logged one
        # whatever ran before it in the process.
        monkeypatch.setattr(guard, "_failures", Counter[str]())
        with caplog.at_level(logging.WARNING):
            batch = await self.run_rollouts(2, self._a_mode())
        for run in batch.runs:
            assert run.rollout.status is RolloutStatus.SUCCEEDED, run.rollout.error
            assert len(run.of_kind(SpanKind.LLM)) == len(self.roles)
        logged = [r for r in caplog.records if r.exc_info is not None and isinstance(r.exc_info[1], error_type)]
        assert logged, f"no log record carries the {error_type.__name__} raised inside the adapter's hook"
        assert guard.hook_failures(), (
            "the hook's failures were not counted (relight.tracing.hook_failures.hook_failures())"
        )

    async def test_uninstrument_stops_recording(self) -> None:
        self.adapter().uninstrument()
        for run in (await self.run_rollouts(2, self._a_mode())).runs:
            assert run.rollout.status is RolloutStatus.SUCCEEDED, run.rollout.error
            assert len(run.of_kind(SpanKind.LLM)) == len(self.roles)
            assert run.of_kind(SpanKind.ROLE) == []
            assert run.of_kind(SpanKind.TOOL) == []

    async def test_outside_a_rollout_the_agent_runs_as_usual(self) -> None:
        async with ScriptedUpstream(self.script()) as upstream:
            llm = LLM(base_url=upstream.base_url, api_key="unused", model=upstream.model)
            await self.run_async(self.task(0), llm, stream=False)
            assert len(upstream.served) == len(self.roles)

    async def test_a_failed_tool_call_is_a_failed_tool_span_of_the_calling_role(
        self, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        await self.failed_tool_span(monkeypatch)

    # -- machinery a subclass may reuse in its own tests ------------------------------------------

    async def failed_tool_span(self, monkeypatch: pytest.MonkeyPatch) -> Span:
        """Run once with :meth:`fail_a_tool`, check the failed tool's span and return it (for more checks)."""
        self.fail_a_tool(monkeypatch)
        (run,) = (await self.run_rollouts(1, self._a_mode())).runs
        assert run.rollout.status is RolloutStatus.SUCCEEDED, run.rollout.error
        (tool,) = run.of_kind(SpanKind.TOOL)
        name, role = self.tools[0]
        assert (tool.attributes[semconv.GEN_AI_TOOL_NAME], tool.attributes[semconv.ROLE]) == (name, role)
        assert tool.attributes[semconv.TOOL_SUCCESS] is False
        assert tool.status_code == "ERROR"
        assert tool.status_message, "a failed tool span says why it failed"
        return tool

    def policies(self) -> dict[str, list[str]]:
        """One policy per distinct role of :attr:`roles` (``policy0``, ``policy1``, …), naming it exactly."""
        distinct = list(dict.fromkeys(self.roles))
        return {f"policy{index}": [role] for index, role in enumerate(distinct)}

    async def run_rollouts(
        self,
        count: int,
        mode: RunMode,
        *,
        roles: Sequence[str] | None = None,
        policies: Mapping[str, Sequence[str]] | None = None,
    ) -> Batch:
        """Run ``count`` rollouts at once through the runner, gateway and scripted upstream.

        With ``policies`` the gateway routes each call to its role's policy, as ``Trainer(policies=...)``
        does: the scripted upstream then answers whatever policy name it is asked for.
        """
        texts = [self.task(index) for index in range(count)]
        rewards = [round(0.1 * (index + 1), 3) for index in range(count)]
        tasks: list[JsonValue] = [{"text": text, "reward": reward} for text, reward in zip(texts, rewards, strict=True)]
        store = InMemoryStore()
        async with ScriptedUpstream(self.script(), model=_MODEL) as upstream:
            trainer = Trainer(
                PoliciesRecordingAlgorithm(upstream) if policies is not None else None,
                store=store,
                concurrency=count,
                max_attempts=1,
                timeout=ATTEMPT_TIMEOUT,
                console=Console(file=io.StringIO()),
                policies=policies,
            )
            if policies is not None:
                results = await trainer.adev(self._agent(mode), tasks)
            else:
                results = await trainer.adev(
                    self._agent(mode), tasks, base_url=upstream.base_url, model=_MODEL, api_key="unused", vllm=True
                )
        records: list[RunRecord] = []
        builder = TransitionBuilder(roles=roles, policies=policies)
        for text, reward, result in zip(texts, rewards, results, strict=True):
            attempts = await store.list_attempts(result.rollout.rollout_id)
            spans = await store.query_spans(result.rollout.rollout_id, attempts[-1].attempt_id)
            transitions = await builder.from_store(store, [result.rollout])
            records.append(RunRecord(text, reward, result.rollout, spans, transitions))
        return Batch(records, list(upstream.served))

    def check(
        self,
        batch: Batch,
        *,
        roles: Sequence[str] | None = None,
        policies: Mapping[str, Sequence[str]] | None = None,
    ) -> None:
        """Assert the promises on a batch of finished rollouts; ``roles`` is the role filter they were trained
        with, ``policies`` the policies (each transition must name its role's)."""
        runs = batch.runs
        served = {(tuple(s.prompt_token_ids), tuple(s.token_ids)) for s in batch.served}
        expected_roles = [role for role in self.roles if roles is None or role in roles]
        for run in runs:
            assert run.rollout.status is RolloutStatus.SUCCEEDED, run.rollout.error
            llm_spans, role_spans = run.of_kind(SpanKind.LLM), run.of_kind(SpanKind.ROLE)
            assert len(llm_spans) == len(self.roles), f"{run.task}: {len(llm_spans)} LLM calls, not {len(self.roles)}"
            assert [s.attributes.get(semconv.ROLE) for s in role_spans] == list(self.roles), run.task
            llm_ids = [s.attributes.get(semconv.GEN_AI_RESPONSE_ID) for s in llm_spans]
            role_ids = [
                s.attributes[semconv.GEN_AI_RESPONSE_ID]
                for s in role_spans
                if semconv.GEN_AI_RESPONSE_ID in s.attributes
            ]
            assert len(set(role_ids)) == len(role_ids), f"{run.task}: two role spans claim one call: {role_ids}"
            assert all(llm_ids.count(i) == 1 for i in role_ids), f"{run.task}: {role_ids} are not all its own calls"
            tool_spans = run.of_kind(SpanKind.TOOL)
            assert [
                (s.attributes.get(semconv.GEN_AI_TOOL_NAME), s.attributes.get(semconv.ROLE)) for s in tool_spans
            ] == [tuple(tool) for tool in self.tools], run.task
            assert all(s.attributes.get(semconv.TOOL_SUCCESS) is True for s in tool_spans), run.task
            for tool in tool_spans:  # what the model asked and what the tool gave back, bounded in size
                for key in (semconv.GEN_AI_TOOL_CALL_ARGUMENTS, semconv.GEN_AI_TOOL_CALL_RESULT):
                    value = tool.attributes.get(key)
                    assert isinstance(value, str), f"{run.task}: tool span {tool.name} has no {key}"
                    assert len(value) <= MAX_TOOL_TEXT + 40
            handoffs = [
                (s.attributes.get(semconv.HANDOFF_FROM), s.attributes.get(semconv.HANDOFF_TO))
                for s in run.of_kind(SpanKind.HANDOFF)
            ]
            assert handoffs == [tuple(handoff) for handoff in self.handoffs], run.task
            transitions = sorted(run.transitions, key=lambda t: t.step)
            assert [t.role for t in transitions] == expected_roles, run.task
            if policies is not None:
                of_role = {role: name for name, named in policies.items() for role in named}
                assert [t.policy for t in transitions] == [of_role[r] for r in expected_roles], run.task
            others = [other.task for other in runs if other is not run]
            for transition in transitions:
                assert transition.reward == run.reward
                assert (tuple(transition.prompt_token_ids), tuple(transition.response_token_ids)) in served
                prompt = decode(transition.prompt_token_ids)
                assert run.task in prompt, f"a transition of {run.task!r} was prompted without it"
                assert not [task for task in others if task in prompt], f"{run.task!r} mixed with another rollout"

    def _a_mode(self) -> RunMode:
        return "async" if "async" in self.modes else self.modes[0]

    def _agent(self, mode: RunMode) -> Agent:
        kit = self

        if mode == "sync":

            def run_sync(task: dict[str, Any], llm: LLM) -> float:
                kit.run_sync(task["text"], llm)
                kit.after_run()
                return task["reward"]

            return FunctionAgent(run_sync)

        async def run_async(task: dict[str, Any], llm: LLM) -> float:
            await kit.run_async(task["text"], llm, stream=mode == "stream")
            kit.after_run()
            return task["reward"]

        return FunctionAgent(run_async)
