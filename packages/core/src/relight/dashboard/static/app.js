// relight dashboard: one page, four views (#/ runs, #/rollouts, #/rollout/<id>, #/compare), over the JSON API.
// Plain DOM and uPlot; no build step. Server-sent events on /api/events say when to refetch.
"use strict";

const view = document.getElementById("view");
const FILTERS = ["status", "mode", "group_id", "role", "step", "policy_version", "min_reward", "max_reward",
  "min_attempts", "reason"];
const charts = {};
let refresh = () => {};

// -- helpers --------------------------------------------------------------------------------------

function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (value === null || value === undefined || value === false) continue;
    if (key === "text") node.textContent = value;
    else if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
    else node.setAttribute(key, value === true ? "" : value);
  }
  for (const child of children.flat()) {
    if (child !== null && child !== undefined) node.append(child instanceof Node ? child : String(child));
  }
  return node;
}

function put(node, ...children) {  // replaceChildren, leaving out what is not there
  node.replaceChildren(...children.flat().filter((child) => child !== null && child !== undefined));
}

async function api(path) {
  const response = await fetch(path, { credentials: "same-origin" });
  const body = await response.json();
  if (!response.ok) throw new Error(`${body.error}: ${body.detail}`);
  return body;
}

const fmt = (value, digits = 3) =>
  value === null || value === undefined ? "–" : typeof value === "number" ? String(+value.toFixed(digits)) : value;
const when = (seconds) => (seconds ? new Date(seconds * 1000).toLocaleTimeString() : "–");
const status = (value) => el("span", { class: `status s-${value}`, text: value });
const link = (id) => el("a", { href: `#/rollout/${encodeURIComponent(id)}`, text: id });

function showError(error) {
  view.replaceChildren(el("p", { class: "error", "data-testid": "error", text: String(error.message || error) }));
}

// -- runs -----------------------------------------------------------------------------------------

function chart(name, title, series, points, pick, yMin = 1) {
  const xs = points.map((p) => p.policy_version);
  const data = [xs, ...series.map((s) => points.map((p) => pick(p, s.key)))];
  const holder = document.getElementById(`chart-${name}`);
  const drawn = data.slice(1).reduce((n, ys) => n + ys.filter((y) => y !== null).length, 0);
  holder.dataset.points = String(drawn);
  const width = Math.max(320, holder.clientWidth || 520);
  if (charts[name] && charts[name].series.length === series.length + 1) {
    charts[name].setData(data);
    return;
  }
  holder.replaceChildren();
  charts[name] = new uPlot(
    {
      title, width, height: 240,
      scales: { x: { time: false }, y: { range: (u, min, max) => [Math.min(0, min ?? 0), Math.max(yMin, max ?? yMin)] } },
      axes: [{ label: "policy version", incrs: [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000] }, {}],
      series: [{ label: "policy version" },
        ...series.map((s) => ({ label: s.label, stroke: s.color, width: 2, points: { size: 6 }, spanGaps: true }))],
    },
    data, holder,
  );
}

async function runsView() {
  view.replaceChildren(
    el("section", { class: "cards", id: "overview" }),
    el("div", { class: "charts" },
      el("div", { id: "chart-reward", class: "chart", "data-testid": "reward-chart" }),
      el("div", { id: "chart-speed", class: "chart" }),
      el("div", { id: "chart-kept", class: "chart" })),
    el("h2", { text: "By policy version" }),
    el("table", { id: "versions", "data-testid": "versions" }),
    el("div", { id: "policies" }),
    el("div", { id: "prompts" }),
  );
  for (const key of Object.keys(charts)) delete charts[key];
  refresh = drawRuns;
  await drawRuns();
}

async function drawRuns() {
  const [overview, curves] = await Promise.all([api("api/overview"), api("api/curves")]);
  const stats = overview.stats;
  const byStatus = Object.entries(stats.rollouts_by_status).map(([k, v]) => `${v} ${k}`).join(", ") || "none";
  put(document.getElementById("overview"),
    el("div", { class: "card" }, el("b", { text: overview.rollouts }), " rollouts: ", byStatus),
    el("div", { class: "card" }, el("b", { text: stats.spans }), " spans"),
    el("div", { class: "card" }, el("b", { text: stats.resources_versions }), " policy versions"),
    overview.pending ? el("div", { class: "card warn", text: `reading ${overview.pending} rollout(s)…` }) : null,
  );
  const points = curves.points;
  const value = (p, key) => (p[key] === undefined ? null : p[key]);
  // A run with several policies: each policy's reward (its calls' credited reward in the update that made the version).
  const policyNames = [...new Set(points.flatMap((p) => Object.keys(p.policies || {})))];
  const palette = ["#db2777", "#0891b2", "#ca8a04", "#7c3aed", "#ea580c", "#0d9488"];
  const rewardOf = (p, key) => (key.startsWith("policy:")
    ? (p.policies?.[key.slice(7)]?.reward ?? null) : value(p, key));
  chart("reward", "Reward", [
    { key: "train_reward", label: "train", color: "#2563eb" },
    { key: "val_reward", label: "validation", color: "#16a34a" },
    ...policyNames.map((name, i) => ({ key: `policy:${name}`, label: `policy ${name}`, color: palette[i % 6] }))],
  points, rewardOf);
  chart("speed", "Rollouts per second", [{ key: "rollouts_per_s", label: "rollouts/s", color: "#9333ea" }],
    points, value);
  chart("kept", "LLM calls", [
    { key: "trained_calls", label: "trained", color: "#16a34a" },
    { key: "dropped_calls", label: "not trained", color: "#dc2626" },
    { key: "failed", label: "failed rollouts", color: "#f59e0b" }], points, value);
  const head = el("tr", {}, ["version", "steps", "train rollouts", "train reward", "val rollouts", "val reward",
    "rollouts/s", "failed", "calls trained", "not trained (why)"].map((h) => el("th", { text: h })));
  const rows = points.map((p) => el("tr", {},
    el("td", {}, el("a", { href: `#/rollouts?policy_version=${p.policy_version}`, text: p.policy_version })),
    el("td", { text: p.steps.join(", ") || "–" }),
    el("td", { text: p.train_rollouts }), el("td", { text: fmt(p.train_reward) }),
    el("td", { text: p.val_rollouts }), el("td", { text: fmt(p.val_reward) }),
    el("td", { text: fmt(p.rollouts_per_s, 2) }), el("td", { text: p.failed }),
    el("td", { text: p.trained_calls }),
    el("td", { text: [...Object.entries(p.dropped).map(([k, v]) => `${v} ${k}`),
      // A retried attempt's calls are judged on the rollout's page; here only how many attempts were retried.
      ...(p.retried_attempts ? [`and the calls of ${p.retried_attempts} retried attempt(s)`] : [])].join(", ") || "–" })));
  document.getElementById("versions").replaceChildren(el("thead", {}, head), el("tbody", {}, rows));
  drawPolicies(points, policyNames);
  await drawPrompts();
}

// A prompt optimisation run (relight-apo): each prompt version, its parent, validation reward, critique and diff.
async function drawPrompts() {
  const holder = document.getElementById("prompts");
  const versions = (await api("api/prompts")).versions;
  if (!versions.length) {
    holder.replaceChildren();
    return;
  }
  const head = el("tr", {}, ["version", "parent", "round", "edited", "val reward", "val rollouts",
    "best after round"].map((h) => el("th", { text: h })));
  const rows = versions.map((v) => el("tr", { "data-prompt-version": v.version },
    el("td", {}, el("a", { href: `#/rollouts?policy_version=${v.version}`, text: `v${v.version}` })),
    el("td", { text: v.parent === null ? "seed" : `v${v.parent}` }), el("td", { text: v.round }),
    el("td", { text: v.edited || "–" }), el("td", { text: fmt(v.val_reward) }), el("td", { text: v.val_rollouts }),
    el("td", { text: v.selected.join(", ") || "–" })));
  const diffs = versions.filter((v) => v.diff).map((v) => el("details", { class: "call", "data-diff": v.version },
    el("summary", { text: `v${v.version} from v${v.parent} (round ${v.round}): ${v.edited}` }),
    v.critique ? el("p", { class: "facts", text: `critique: ${v.critique}` }) : null,
    el("pre", {}, v.diff.split("\n").map((line) => el("span", {
      class: line.startsWith("+") ? "add" : line.startsWith("-") ? "del" : "ctx", text: `${line}\n` })))));
  holder.replaceChildren(el("h2", { text: "Prompt versions" }),
    el("table", { id: "prompt-table", "data-testid": "prompts" }, el("thead", {}, head), el("tbody", {}, rows)),
    ...diffs);
}

function drawPolicies(points, names) {
  const holder = document.getElementById("policies");
  if (!names.length) {
    holder.replaceChildren();
    return;
  }
  const head = el("tr", {}, ["version", "policy", "its version", "reward", "loss", "calls trained",
    "calls left out (so far)"].map((h) => el("th", { text: h })));
  const rows = points.flatMap((p) => names.filter((n) => p.policies?.[n]).map((n) => {
    const f = p.policies[n];
    return el("tr", {},
      el("td", { text: p.policy_version }), el("td", { text: n }), el("td", { text: f.policy_version ?? "–" }),
      el("td", { text: fmt(f.reward) }), el("td", { text: fmt(f.loss) }),
      el("td", { text: f.transitions ?? "–" }), el("td", { text: f.calls_left_out ?? "–" }));
  }));
  holder.replaceChildren(el("h2", { text: "By policy" }),
    el("table", { id: "policy-table", "data-testid": "policies" }, el("thead", {}, head), el("tbody", {}, rows)));
}

// -- rollout list ---------------------------------------------------------------------------------

function select(name, options) {
  return el("select", { name }, el("option", { value: "", text: `any ${name.replace("_", " ")}` }),
    options.map((o) => el("option", { value: o, text: o })));
}

async function rolloutsView(params) {
  const overview = await api("api/overview");
  const form = el("form", { class: "filters", "data-testid": "filters" },
    select("status", ["queued", "running", "succeeded", "failed", "cancelled"]),
    select("mode", ["train", "val"]),
    el("input", { name: "group_id", placeholder: "group" }),
    el("input", { name: "role", placeholder: "role" }),
    el("input", { name: "step", placeholder: "step", type: "number", min: 0 }),
    el("input", { name: "policy_version", placeholder: "policy version", type: "number", min: 0 }),
    el("input", { name: "min_reward", placeholder: "reward ≥", type: "number", step: "any" }),
    el("input", { name: "max_reward", placeholder: "reward ≤", type: "number", step: "any" }),
    el("input", { name: "min_attempts", placeholder: "attempts ≥", type: "number", min: 0 }),
    select("reason", overview.reasons),
    el("button", { type: "submit", text: "Filter" }));
  for (const name of FILTERS) if (params.has(name)) form.elements[name].value = params.get(name);
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    const next = new URLSearchParams();
    for (const name of FILTERS) if (form.elements[name].value !== "") next.set(name, form.elements[name].value);
    location.hash = `#/rollouts?${next}`;
  });
  view.replaceChildren(form, el("div", { id: "pager", class: "pager" }),
    el("table", { id: "rollouts", "data-testid": "rollouts" }));
  refresh = () => drawRollouts(params);
  await drawRollouts(params);
}

async function drawRollouts(params) {
  const page = await api(`api/rollouts?${params}`);
  const head = el("tr", {}, ["rollout", "status", "mode", "group", "step", "version", "attempts", "reward", "roles",
    "trained", "not trained (why)", "error"].map((h) => el("th", { text: h })));
  const rows = page.rows.map((r) => el("tr", { "data-rollout": r.rollout_id },
    el("td", {}, link(r.rollout_id)), el("td", {}, status(r.status)), el("td", { text: r.mode }),
    el("td", { text: r.group_id }), el("td", { text: fmt(r.step) }), el("td", { text: fmt(r.policy_version) }),
    el("td", { text: `${r.attempts}/${r.max_attempts}` }), el("td", { text: fmt(r.reward) }),
    el("td", { text: r.roles.join(", ") || "–" }),
    el("td", { text: `${r.trained}/${r.calls}` }),
    el("td", { text: Object.entries(r.reasons).map(([k, v]) => `${v} ${k}`).join(", ") }),
    el("td", { class: "err", text: r.error || "" })));
  document.getElementById("rollouts").replaceChildren(el("thead", {}, head), el("tbody", {}, rows));
  const go = (cursor, id) => {  // keyset pages: as quick deep in the list as at its top
    const next = new URLSearchParams(params);
    for (const name of ["before", "after", "offset"]) next.delete(name);
    if (cursor) next.set(cursor, id);
    location.hash = `#/rollouts?${next}`;
  };
  const shown = page.rows.length;
  const last = page.offset + shown;
  const newer = () => (!shown || page.offset <= page.limit ? go(null) : go("after", page.rows[0].rollout_id));
  put(document.getElementById("pager"),
    el("button", { "data-testid": "prev", disabled: page.offset === 0, onclick: newer, text: "‹ newer" }),
    el("span", { "data-testid": "range", text: shown ? `${page.offset + 1}–${last} of ${page.total}` : page.total ? `none here, of ${page.total}` : "no rollouts" }),
    el("button", { "data-testid": "next", disabled: !shown || last >= page.total,
      onclick: () => go("before", page.rows[shown - 1].rollout_id), text: "older ›" }),
    page.pending ? el("span", { class: "warn", text: ` reading ${page.pending} rollout(s)…` }) : null);
}

// -- one rollout ----------------------------------------------------------------------------------

function timeline(spans) {
  const end = Math.max(1e-9, ...spans.map((s) => s.start_ms + s.duration_ms));
  return el("div", { class: "timeline", "data-testid": "span-tree" }, spans.map((s) =>
    el("div", { class: `span k-${s.kind}${s.status === "ERROR" ? " failed" : ""}`, "data-kind": s.kind },
      el("div", { class: "label", style: `padding-left:${s.depth * 14}px` },
        el("span", { class: "kind", text: s.kind }), " ", s.name,
        s.role ? el("span", { class: "role", text: ` ${s.role}` }) : null,
        s.reward !== null && s.reward !== undefined ? el("b", { text: ` reward ${fmt(s.reward)}` }) : null,
        s.handoff_to ? el("span", { class: "role", text: ` ${s.handoff_from} → ${s.handoff_to}` }) : null,
        s.arguments ? el("code", { class: "io", text: ` (${s.arguments})` }) : null,
        s.result ? el("code", { class: "io", text: ` → ${s.result}` }) : null,
        s.error ? el("span", { class: "err", text: ` ${s.error}` }) : null),
      el("div", { class: "track" }, el("div", {
        class: "bar", title: `${fmt(s.start_ms, 1)} ms + ${fmt(s.duration_ms, 1)} ms`,
        style: `left:${(100 * s.start_ms) / end}%;width:${Math.max(0.4, (100 * s.duration_ms) / end)}%`,
      })))));
}

function messages(list) {
  if (!Array.isArray(list)) return el("pre", { text: JSON.stringify(list, null, 1) });
  return el("div", { class: "messages" }, list.map((m) => el("div", { class: `msg m-${m.role}` },
    el("span", { class: "who", text: m.role }),
    el("pre", { text: messageText(m) }))));
}

// A message's text, and the tool calls an assistant message makes (its content is often empty then).
function messageText(m) {
  const content = m.content ?? m.parts;
  let text = typeof content === "string" ? content
    : Array.isArray(content) ? content.map((p) => p.text ?? p.content ?? (p.type === "tool_call" ? "" : JSON.stringify(p))).join("")
    : content ? JSON.stringify(content, null, 1) : "";
  const calls = (m.tool_calls || []).map((c) => c.function || c)
    .concat((Array.isArray(m.parts) ? m.parts : []).filter((p) => p.type === "tool_call"));
  for (const c of calls) {
    const args = typeof c.arguments === "string" ? c.arguments : JSON.stringify(c.arguments ?? {});
    text += `${text ? "\n" : ""}→ tool call ${c.name}(${args})`;
  }
  return text || JSON.stringify(m, null, 1);
}

function tokens(list, decoded) {
  return el("div", { class: "tokens", "data-testid": "tokens" }, list.map((t) => {
    const p = t.logprob === null ? null : Math.exp(t.logprob);
    const text = decoded ? t.text : `[${t.id}]`;
    return el("span", {
      class: "tok", "data-logprob": t.logprob,
      style: p === null ? "" : `background:hsl(${Math.round(120 * p)},75%,82%)`,
      title: `id ${t.id}` + (t.logprob === null ? "" : `  logprob ${t.logprob.toFixed(3)}  p ${p.toFixed(3)}`),
      text: text.replace(/\n/g, "↵\n"),
    });
  }));
}

function call(c, decoded) {
  const fate = c.trained
    ? el("span", { class: "trained", text: "trained" + (c.notes.length ? ` (${c.notes.join(", ")})` : "") })
    : el("span", { class: "dropped", title: c.detail, text: `not trained: ${c.reason}` });
  return el("section", { class: "call", "data-testid": "call", "data-span": c.span_id },
    el("h3", {}, `call ${c.number} `, c.role ? el("span", { class: "role", text: c.role }) : "",
      c.policy ? el("span", { class: "role", "data-testid": "policy", text: ` policy ${c.policy}` }) : "", " ", fate),
    c.served_by ? el("p", { class: "facts", "data-testid": "served-by", text: `served by ${c.served_by}` }) : null,
    el("p", { class: "facts" },
      `reward after credit ${fmt(c.reward)} · group ${c.group_id ?? "–"} · policy version ${fmt(c.policy_version)}`,
      c.trained_into === null ? "" : el("span", { "data-testid": "advantage",
        text: ` · advantage ${c.advantage === null ? "not reported by the algorithm" : fmt(c.advantage)}`
          + ` (trained into version ${c.trained_into})` }),
      ` · ${c.prompt_tokens ?? "?"} prompt → ${c.tokens.length} response tokens · ${fmt(c.duration_ms, 1)} ms`,
      c.finish_reasons ? ` · finish ${c.finish_reasons.join(", ")}` : ""),
    c.trained ? null : el("p", { class: "why", text: c.detail }),
    el("details", {}, el("summary", { text: "messages" }), messages(c.messages)),
    el("h4", { text: "response" }), messages(c.output),
    el("h4", { text: decoded ? "tokens by probability" : "token ids (no tokenizer known)" }),
    tokens(c.tokens, decoded));
}

async function rolloutView(id) {
  refresh = () => drawRollout(id);
  await drawRollout(id);
}

async function drawRollout(id) {
  const d = await api(`api/rollouts/${encodeURIComponent(id)}`);
  const r = d.rollout;
  view.replaceChildren(
    el("h2", {}, `Rollout ${r.rollout_id} `, status(r.status)),
    el("p", { class: "facts" }, `${r.mode} · group ${r.group_id} · policy version ${fmt(r.resources_version)}`,
      ` · attempts ${r.attempt_count}/${r.max_attempts} · reward ${fmt(d.reward)}`),
    el("p", { class: d.verdict.reason ? "why" : "facts", "data-testid": "verdict",
      text: (d.verdict.reason ? `Not trained: ${d.verdict.reason}. ` : "") + d.verdict.summary }),
    el("details", {}, el("summary", { text: "task input" }), el("pre", { text: JSON.stringify(r.input, null, 1) })),
    ...d.attempts.map((a) => el("section", { class: "attempt" },
      el("h3", {}, `Attempt ${a.number} `, status(a.status), ` · worker ${a.worker_id} · `,
        a.finished_at ? `${fmt(a.finished_at - a.started_at, 2)} s` : "running"),
      a.error ? el("pre", { class: "err", text: a.error }) : null,
      timeline(a.spans))),
    ...(d.annotations.length ? [el("section", { class: "annotations", "data-testid": "annotations" },
      el("h2", { text: `Annotations (${d.annotations.length})` }),
      ...d.annotations.map((a) => el("div", { class: "annotation" },
        el("h4", { text: a.name }), el("pre", { text: JSON.stringify(a.payload, null, 1) }))))] : []),
    el("h2", { text: `LLM calls (${d.calls.length})` }),
    ...d.calls.map((c) => call(c, d.decoded)));
}

// -- compare run folders --------------------------------------------------------------------------

const RUN_COLOURS = ["#2563eb", "#dc2626", "#16a34a", "#9333ea", "#ea580c", "#0891b2", "#ca8a04", "#db2777"];

// One chart of every run's curve (`key`: train or val) against the step; runs of different lengths share the x axis.
function overlay(name, title, runs, key) {
  const steps = [...new Set(runs.flatMap((r) => r[key].map(([s]) => s)))].sort((a, b) => a - b);
  const data = [steps, ...runs.map((r) => {
    const at = new Map(r[key]);
    return steps.map((s) => (at.has(s) ? at.get(s) : null));
  })];
  const holder = document.getElementById(`chart-${name}`);
  holder.dataset.points = String(runs.reduce((n, r) => n + r[key].length, 0));
  holder.dataset.series = String(runs.filter((r) => r[key].length).length);
  holder.replaceChildren();
  charts[name] = new uPlot(
    {
      title, width: Math.max(320, holder.clientWidth || 520), height: 260,
      scales: { x: { time: false }, y: { range: (u, min, max) => [Math.min(0, min ?? 0), Math.max(1, max ?? 1)] } },
      axes: [{ label: "step", incrs: [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000] }, {}],
      series: [{ label: "step" }, ...runs.map((r, i) => ({
        label: r.figures.status === "running" ? `${r.label} (running)` : r.label,
        stroke: RUN_COLOURS[i % RUN_COLOURS.length], width: 2, points: { size: 6 }, spanGaps: true,
        dash: key === "val" ? [6, 4] : undefined,
      }))],
    },
    data, holder,
  );
}

const seconds = (s) => (s === null || s === undefined ? "–" : s >= 120 ? `${fmt(s / 60, 1)} min` : `${fmt(s, 1)} s`);
const setting = (v) => (v === null || v === undefined ? "–" : typeof v === "object" ? JSON.stringify(v) : String(v));

async function compareView() {
  view.replaceChildren(
    el("div", { id: "compare-note" }),
    el("div", { class: "charts" },
      el("div", { id: "chart-compare-train", class: "chart", "data-testid": "compare-train" }),
      el("div", { id: "chart-compare-val", class: "chart", "data-testid": "compare-val" })),
    el("h2", { text: "Final figures" }),
    el("table", { id: "compare-figures", "data-testid": "compare-figures" }),
    el("h2", { text: "Settings that differ" }),
    el("table", { id: "compare-differing", "data-testid": "compare-differing" }),
    el("details", { id: "compare-shared" }),
  );
  for (const key of Object.keys(charts)) delete charts[key];
  refresh = drawCompare;
  await drawCompare();
}

async function drawCompare() {
  const c = await api("api/runs");
  const runs = c.runs;
  put(document.getElementById("compare-note"),
    runs.length ? null : el("p", { class: "warn", text: "no run folder to compare yet" }),
    ...c.unreadable.map((u) => el("p", { class: "why", "data-testid": "unreadable", text: `${u.path}: ${u.error}` })));
  overlay("compare-train", "Training reward", runs, "train");
  overlay("compare-val", "Validation reward", runs, "val");
  const head = el("tr", {}, ["run", "status", "steps", "final train reward", "validation before", "final validation",
    "best validation", "policy version", "wall time"].map((h) => el("th", { text: h })));
  const rows = runs.map((r, i) => {
    const f = r.figures;
    return el("tr", { "data-run": r.label },
      el("td", {}, el("span", { class: "swatch", style: `background:${RUN_COLOURS[i % RUN_COLOURS.length]}` }), r.label),
      el("td", {}, status(f.status)), el("td", { text: f.steps }), el("td", { text: fmt(f.final_reward_mean) }),
      el("td", { text: fmt(f.initial_val_reward_mean) }), el("td", { text: fmt(f.final_val_reward_mean) }),
      el("td", { text: fmt(f.best_val_reward_mean) }), el("td", { text: fmt(f.policy_version) }),
      el("td", { text: seconds(f.wall_seconds) }));
  });
  document.getElementById("compare-figures").replaceChildren(el("thead", {}, head), el("tbody", {}, rows));
  const names = Object.keys(c.differing);
  const differingHead = el("tr", {}, el("th", { text: "setting" }), runs.map((r) => el("th", { text: r.label })));
  const cell = (v) => {  // a long value (a digest of the task list) shortened, whole on hover
    const text = setting(v);
    return el("td", { title: text.length > 40 ? text : null, text: text.length > 40 ? `${text.slice(0, 16)}…` : text });
  };
  const differingRows = names.map((name) => el("tr", { "data-setting": name }, el("td", { text: name }),
    c.differing[name].map(cell)));
  document.getElementById("compare-differing").replaceChildren(el("thead", {}, differingHead),
    el("tbody", {}, names.length ? differingRows
      : [el("tr", {}, el("td", { colspan: runs.length + 1, text: "none: the runs were set up alike" }))]));
  const shared = Object.entries(c.shared);
  put(document.getElementById("compare-shared"), el("summary", { text: `Settings they share (${shared.length})` }),
    el("table", {}, el("tbody", {}, shared.map(([k, v]) => el("tr", {}, el("td", { text: k }), el("td", { text: setting(v) }))))));
}

// -- routing and live updates ---------------------------------------------------------------------

// What this dashboard was given (`relight dashboard --store URL --runs DIR...`): a store, run folders, or both.
const hasStore = document.body.dataset.store !== "off";
const hasRuns = document.body.dataset.runs === "on";
for (const a of document.querySelectorAll("nav a")) {
  if (a.dataset.nav === "compare" ? !hasRuns : !hasStore) a.remove();
}

async function route() {
  const hash = location.hash.slice(1) || (hasStore ? "/" : "/compare");
  const [path, query] = hash.split("?");
  for (const a of document.querySelectorAll("nav a")) {
    a.classList.toggle("on", path.startsWith(`/${a.dataset.nav}`) || (a.dataset.nav === "runs" && path === "/"));
  }
  try {
    if (path.startsWith("/rollout/")) await rolloutView(decodeURIComponent(path.slice("/rollout/".length)));
    else if (path.startsWith("/rollouts")) await rolloutsView(new URLSearchParams(query || ""));
    else if (path.startsWith("/compare")) await compareView();
    else await runsView();
  } catch (error) {
    showError(error);
  }
}

let pending = null;
function live() {
  const badge = document.getElementById("live");
  const source = new EventSource("api/events");
  source.addEventListener("open", () => { badge.textContent = "live"; badge.className = "live on"; });
  source.addEventListener("error", () => { badge.textContent = "disconnected: retrying…"; badge.className = "live"; });
  source.addEventListener("change", (event) => {
    badge.dataset.version = JSON.parse(event.data).version;
    if (pending) return;
    pending = setTimeout(async () => {  // changes in a burst cost one refetch
      pending = null;
      try {
        await refresh();
      } catch (error) {  // keep what is shown (the run may have ended and its server with it)
        badge.textContent = `not updated: ${error.message || error}`;
        badge.className = "live";
      }
    }, 250);
  });
}

// A snapshot (`relight dashboard --no-live`, or `?live=0` in the URL) opens no event stream, so the page
// goes idle once drawn and a headless browser's --screenshot with --virtual-time-budget returns.
function snapshot() {
  return document.body.dataset.live === "off" || new URLSearchParams(location.search).get("live") === "0";
}

window.addEventListener("hashchange", route);
route();
if (snapshot()) {
  const badge = document.getElementById("live");
  badge.textContent = "snapshot: reload to update";
  badge.className = "live";
} else {
  live();
}
