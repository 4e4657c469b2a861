"""The Evolve playground (Streamlit): chat with an evolved agent and watch it learn.

Run it with ``evolve playground [SPEC]`` or ``streamlit run apps/playground.py -- --spec SPEC [--tenant T]``
(``EVOLVE_PLAYGROUND_SPEC`` works too; the default is the embedded ``data/facility_codes.toml``: local
SmolLM2 + MiniLM + SQLite/FAISS, no API key). Five tabs:

- Chat: answers from ``Deployment.answer``; thumbs up/down reinforce the memories an answer recalled; "Why these
  memories" shows every candidate's similarity, Q, z-scores and selection score (``MemoryStore.explain``);
- Memory: the tenant's memories with filters, and their Q-value distribution;
- Prompts: the versions, a diff against HEAD and one-click rollback (the next answer uses it);
- Learning: success per round per run, and the round table;
- Team: how the agents work together, the latest diagnosis (accuracy, K*, the similarity heat map; run one
  from here or with ``evolve team diagnose``) and the members each re-composition kept.

The layout lives here; every table and chart is shaped by ``apps.playground_data``.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import altair as alt
import pandas as pd
import streamlit as st

from apps import playground_data as data
from apps.playground_cli import script_args
from apps.team_cli import diagnose_spec, diagnosis_folder, save_diagnosis
from connectors import EvolveError, Message, StoreError
from evolve import PromptGraph, list_runs
from evolve.serve.answers import Answer
from evolve.serve.deployment import Deployment
from evolve.serve.feedback import namespace_of
from evolve.spec import check_tenant, load_spec
from evolve.teams.ordered import OrderedTeam
from evolve.teams.parallel import ParallelTeam
from memory import MemoryItem, MemoryStore

THUMBS = (("Good", ":material/thumb_up:", 1.0), ("Bad", ":material/thumb_down:", 0.0))
TABS = (
    ":material/chat: Chat",
    ":material/memory: Memory",
    ":material/edit_note: Prompts",
    ":material/show_chart: Learning",
    ":material/groups: Team",
)
THINKING = "Thinking… (on a local model the first answer also loads it: about 20 s)"


@st.cache_resource(show_spinner="Loading the spec's models and memory…")
def load_deployment(spec_path: str, db: str | None) -> Deployment:
    """One Deployment per (spec, database) for the whole server: models load once, sessions share it."""
    spec = load_spec(spec_path)
    if db:
        spec = spec.model_copy(update={"run": spec.run.model_copy(update={"database": db})})
    return Deployment(spec)


def state() -> Any:
    st.session_state.setdefault("turns", {})  # tenant -> [{"role": ..., ...}]
    st.session_state.setdefault("notes", {})  # answer id -> what its feedback did
    return st.session_state


# ---- sidebar ---------------------------------------------------------------------------------------


def sidebar(deployment: Deployment, default_tenant: str | None) -> tuple[str | None, bool]:
    spec = deployment.spec
    st.sidebar.title("Evolve playground")
    raw = st.sidebar.text_input("Tenant", value=default_tenant or "", key="tenant", help="empty: the run itself")
    tenant = raw.strip() or None
    if tenant is not None:
        try:
            check_tenant(tenant)
        except EvolveError as e:
            st.sidebar.error(str(e))
            st.stop()
    history = st.sidebar.toggle("Send earlier turns", value=False, key="history", help="off: each question alone")
    if st.sidebar.button("Clear chat", key="clear"):
        state()["turns"][tenant or ""] = []
    st.sidebar.divider()
    st.sidebar.markdown(f"**run** `{deployment.run_name(tenant)}`")
    st.sidebar.caption(
        f"spec {spec.path.name if spec.path else '(inline)'} · model {spec.model.chat} · "
        f"embedder {spec.embedder.name} · agents {', '.join(a.name for a in spec.agents)}"
    )
    st.sidebar.caption(f"database {spec.run.database or '$EVOLVE_HOME/evolve.db'}")
    return tenant, history


# ---- chat ------------------------------------------------------------------------------------------


def rate(deployment: Deployment, tenant: str | None, answer_id: str, score: float) -> None:
    try:
        receipt = deployment.feedback(answer_id, score, tenant=tenant, key="thumbs")
        state()["notes"][answer_id] = data.feedback_note(receipt)
    except EvolveError as e:
        state()["notes"][answer_id] = f"feedback failed: {e}"


def current_items(store: MemoryStore, ids: list[str], namespace: str) -> dict[str, MemoryItem]:
    out = {}
    for memory_id in ids:
        try:
            out[memory_id] = store.get(memory_id, namespace=namespace)
        except StoreError:  # evicted since the recall
            continue
    return out


def why_these_memories(deployment: Deployment, answer: Answer) -> None:
    store = deployment.store
    if store is None:
        st.caption("Memory is off in this spec: nothing was recalled.")
        return
    recalled = [s for s in answer.steps if s.recall_id is not None]
    if not recalled:
        st.caption("No agent recalled memories for this answer.")
    for step in recalled:
        namespace = namespace_of(step, answer.run)
        explanation = store.explain(step.recall_id or "", namespace=namespace)
        candidates = [c["id"] for c in explanation["candidates"]]
        rows = data.why_rows(explanation, current_items(store, candidates, namespace))
        st.markdown(f"**{step.agent}** recalled for _{explanation['query']}_")
        st.caption(data.recall_summary(explanation))
        if rows:
            st.dataframe(pd.DataFrame(rows), hide_index=True, column_config=WHY_COLUMNS)
        else:
            st.caption("The agent's memory was empty: nothing to recall yet.")


WHY_COLUMNS = {
    "similarity": st.column_config.NumberColumn(format="%.3f", help="cosine similarity of intent and question"),
    "Q": st.column_config.NumberColumn(format="%+.3f", help="learned utility when recalled"),
    "z(sim)": st.column_config.NumberColumn(format="%+.2f"),
    "z(Q)": st.column_config.NumberColumn(format="%+.2f"),
    "score": st.column_config.NumberColumn(format="%+.3f", help="(1 − λ)·z(sim) + λ·z(Q)"),
    "Q now": st.column_config.NumberColumn(format="%+.3f", help="after the feedback given since"),
}


def show_answer(deployment: Deployment, tenant: str | None, answer: Answer) -> None:
    st.markdown(answer.text or "_(empty answer)_")
    st.caption(
        f"prompt version `{answer.prompt_version[:12]}` · {answer.usage.total_tokens} tokens · "
        f"{len(answer.recall_ids)} recall(s) · `{answer.id}`"
    )
    up, down, note = st.columns([1, 1, 6], vertical_alignment="center")
    for column, (label, icon, score) in zip((up, down), THUMBS, strict=True):
        column.button(
            label,
            icon=icon,
            key=f"{'up' if score else 'down'}-{answer.id}",
            on_click=rate,
            args=(deployment, tenant, answer.id, score),
            help=f"rate this answer {score:g}: reinforce the memories it recalled",
        )
    if answer.id in state()["notes"]:
        note.markdown(state()["notes"][answer.id])
    with st.expander("Why these memories"):
        why_these_memories(deployment, answer)
    with st.expander("Prompt sent"):
        for step in answer.steps:
            for m in step.messages:
                st.markdown(f"**{step.agent} · {m.role}**")
                st.code(m.content, language=None, wrap_lines=True)


def show_turn(deployment: Deployment, tenant: str | None, turn: dict[str, Any]) -> None:
    if turn["role"] == "user":
        with st.chat_message("user"):
            st.markdown(turn["content"])
    elif turn["role"] == "assistant":
        with st.chat_message("assistant"):
            show_answer(deployment, tenant, turn["answer"])
    else:
        with st.chat_message("assistant", avatar=":material/error:"):
            st.error(turn["content"])


def to_messages(turns: list[dict[str, Any]], history: bool) -> list[Message]:
    if not history:
        return [Message("user", turns[-1]["content"])]
    out = []
    for t in turns:
        if t["role"] == "user":
            out.append(Message("user", t["content"]))
        elif t["role"] == "assistant":
            out.append(Message("assistant", t["answer"].text))
    return out


def chat_tab(deployment: Deployment, tenant: str | None, history: bool) -> None:
    turns: list[dict[str, Any]] = state()["turns"].setdefault(tenant or "", [])
    box = st.container()
    prompt = st.chat_input("Ask the agent…", key="chat-input")
    with box:
        if not turns and not prompt:
            st.caption("Ask a question; rate the answer (thumbs up or down) and watch the recalled memories' Q move.")
        for turn in turns:
            show_turn(deployment, tenant, turn)
        if not prompt:
            return
        turns.append({"role": "user", "content": prompt})
        show_turn(deployment, tenant, turns[-1])
        with st.chat_message("assistant"), st.spinner(THINKING):
            try:
                answer = deployment.answer(to_messages(turns, history), tenant=tenant)
                turns.append({"role": "assistant", "answer": answer})
            except EvolveError as e:
                turns.append({"role": "error", "content": f"the agent could not answer: {e}"})
    st.rerun()


# ---- memory ----------------------------------------------------------------------------------------


def memory_tab(deployment: Deployment, tenant: str | None) -> None:
    store = deployment.store
    if store is None:
        st.info("Memory is off in this spec ([memory] enabled = false).")
        return
    run = deployment.run_name(tenant)
    namespaces = [f"{run}/{a.name}" for a in deployment.spec.agents if a.memory]
    rows = data.memory_rows(it for ns in namespaces for it in store.items(ns))
    search, min_q, outcome, namespace = st.columns([3, 2, 3, 2])
    text = search.text_input("Search intent or experience", key="mem-search")
    q_floor = min_q.slider("Min Q", -1.0, 1.0, -1.0, 0.05, key="mem-min-q")
    picked = outcome.radio("Outcome", data.OUTCOMES, horizontal=True, key="mem-outcome")
    ns = namespace.selectbox("Agent namespace", ["all", *namespaces], key=f"mem-namespace:{run}")
    flt = data.MemoryFilter(
        text=text, min_q=None if q_floor <= -1.0 else q_floor, outcome=picked, namespace=None if ns == "all" else ns
    )
    shown = data.filter_rows(rows, flt)
    st.caption(f"{len(shown)} of {len(rows)} memories in {', '.join(namespaces) or 'no namespace'}")
    columns = ["intent", "experience", "Q", "visits", "kind", "state", "success", "namespace", "created", "id"]
    st.dataframe(
        pd.DataFrame(shown, columns=columns),
        hide_index=True,
        column_config={"Q": st.column_config.NumberColumn(format="%+.3f")},
    )
    st.subheader("Q-value distribution")
    hist = pd.DataFrame(data.q_histogram([r["Q"] for r in shown]))
    chart = (
        alt.Chart(hist)
        .mark_bar()
        .encode(
            x=alt.X("from:Q", bin="binned", title="Q (learned utility)"),
            x2="to:Q",
            y=alt.Y("count:Q", title="memories"),
            tooltip=["from", "to", "count"],
        )
    )
    st.altair_chart(chart)


# ---- prompts ---------------------------------------------------------------------------------------


def roll_back(graph: PromptGraph, version_id: str) -> None:
    try:
        before = graph.head().id
        after = graph.rollback(version_id, reason="playground rollback")
        state()["prompt-note"] = f"HEAD moved {before[:12]} → {after.id[:12]}: the next answer uses it."
    except EvolveError as e:
        state()["prompt-note"] = f"rollback failed: {e}"


def prompts_tab(deployment: Deployment, tenant: str | None) -> None:
    graph = deployment.graph(tenant)
    head = graph.head()
    versions = graph.log()
    st.dataframe(pd.DataFrame(data.version_rows(versions, head.id)), hide_index=True)
    by_id = {v.id: v for v in versions}
    chosen = st.selectbox(
        "Version",
        list(by_id),
        format_func=lambda vid: data.version_label(by_id[vid], head.id),
        key=f"prompt-version:{graph.name}",
    )
    if chosen is None:
        return
    st.button(
        "Roll back to this version",
        key="rollback",
        type="primary",
        disabled=chosen == head.id,
        on_click=roll_back,
        args=(graph, chosen),
        help="moves HEAD; nothing is deleted",
    )
    if "prompt-note" in state():
        st.success(state()["prompt-note"])
    st.markdown(f"**Diff** `{chosen[:12]}` → HEAD `{head.id[:12]}`")
    st.code(graph.diff(chosen, head.id) or "identical to HEAD", language="diff")
    with st.expander("This version's prompts"):
        for component, text in by_id[chosen].nodes.items():
            st.markdown(f"**{component}**")
            st.code(text or "(empty)", language=None, wrap_lines=True)
    moves = graph.history(limit=10)
    if moves:
        st.caption("HEAD moves, newest first")
        st.dataframe(pd.DataFrame(moves), hide_index=True)


# ---- learning --------------------------------------------------------------------------------------

METRICS = ("success_rate", "mean_reward", "memory_size", "q_mean", "tokens")


def learning_tab(deployment: Deployment, tenant: str | None) -> None:
    run = deployment.run_name(tenant)
    every = list_runs(deployment.engine)  # a tenant sees its own run only
    curves = {n: every[n] for n in data.visible_runs(list(every), run, tenant=tenant is not None)}
    if not curves:
        st.info("No rounds recorded yet: `evolve run SPEC` or `evolve job SPEC --once` records them here.")
        return
    names = list(curves)
    chosen = st.multiselect("Runs", names, default=data.default_runs(names, run), key="runs")
    metric = st.selectbox("Metric", METRICS, key="metric")
    frame = pd.DataFrame(data.curve_rows({n: curves[n] for n in chosen}, metric=metric))
    if not frame.empty:
        y = alt.Y(f"{metric}:Q", scale=alt.Scale(domain=[0, 1]) if metric == "success_rate" else alt.Undefined)
        chart = (
            alt.Chart(frame)
            .mark_line(point=True)
            .encode(x=alt.X("round:Q", axis=alt.Axis(tickMinStep=1)), y=y, color="run:N", tooltip=list(frame))
        )
        st.altair_chart(chart)
    for name in chosen:
        st.markdown(f"**{name}**")
        st.dataframe(pd.DataFrame(data.round_rows(curves[name])), hide_index=True)


# ---- team ------------------------------------------------------------------------------------------


def order_section(team: OrderedTeam) -> None:
    """A learned order as the run learned it: per task group the order served, and the agents' priorities."""
    groups = team.policy.table()
    if not groups:
        st.info(f"No order learned yet: served in the listed order ({' → '.join(team.policy.agents)}) until a "
                "round of `evolve run` rewards it.")  # fmt: skip
        return
    st.markdown("**Learned order per task group**")
    st.dataframe(pd.DataFrame(data.order_rows(groups)), hide_index=True)
    priorities = pd.DataFrame([g["priorities"] for g in groups], index=[f"group {g['group']}" for g in groups])
    st.bar_chart(priorities, horizontal=True, stack=False)


def team_tab(deployment: Deployment, tenant: str | None) -> None:
    spec = deployment.spec.for_tenant(tenant)
    team, _ = deployment.team(tenant)
    st.markdown(data.team_shape(team))
    if isinstance(team, OrderedTeam):
        order_section(team)
    folder = diagnosis_folder(spec)
    left, middle, right = st.columns([1, 1, 2])
    tasks = left.number_input("Sample tasks", min_value=1, max_value=200, value=5, key="diag_tasks")
    pool = middle.checkbox("Every agent (the pool)", value=not isinstance(team, ParallelTeam), key="diag_pool")
    if right.button("Diagnose now", key="diagnose"):
        try:
            with st.spinner(f"Running the team on {tasks} tasks…"):
                d = diagnose_spec(spec, deployment.chat, deployment.store, tasks=int(tasks), pool=pool)
                save_diagnosis(d, folder, title=spec.run.name)
        except EvolveError as e:
            st.error(str(e))
    figures = folder / "diagnosis.json"
    if not figures.exists():
        st.info("No diagnosis yet: press Diagnose now, or run `evolve team diagnose SPEC`.")
    else:
        shown = json.loads(figures.read_text(encoding="utf-8"))
        st.markdown(data.diagnosis_headline(shown))
        st.dataframe(pd.DataFrame(data.diagnosis_rows(shown)), hide_index=True)
        for note in shown.get("notes", []):
            st.caption(note)
        if (folder / "heat_map.png").exists():
            st.image(str(folder / "heat_map.png"), caption="mean cosine similarity of the members' answers")
    kept = data.recompose_rows(list_runs(deployment.engine).get(deployment.run_name(tenant), []))
    if kept:
        st.markdown("**Re-compositions**")
        st.dataframe(pd.DataFrame(kept), hide_index=True)


# ---- page ------------------------------------------------------------------------------------------


def main() -> None:
    args = script_args(sys.argv[1:])
    st.set_page_config(page_title="Evolve playground", page_icon=":material/psychology:", layout="wide")
    try:
        deployment = load_deployment(str(args.spec), args.db)
    except EvolveError as e:
        st.error(f"cannot start the playground: {e}")
        st.stop()
    tenant, history = sidebar(deployment, args.tenant)
    chat, memory, prompts, learning, team = st.tabs(TABS)
    with chat:
        chat_tab(deployment, tenant, history)
    with memory:
        memory_tab(deployment, tenant)
    with prompts:
        prompts_tab(deployment, tenant)
    with learning:
        learning_tab(deployment, tenant)
    with team:
        team_tab(deployment, tenant)


main()
