// A governed queue's adaptive rate and circuit breaker on its page: the rate now with its
// bounds and any hold, the breaker's state with its window and totals, its last transitions,
// buttons to force it open or closed, and a chart of both from the stats' `history`.

import { queuePath } from "../api.js";
import { lineChart, stateStrip } from "../charts.js";
import { fill, h } from "../dom.js";
import { age, num, when } from "../format.js";
import { can } from "../session.js";

const STATE_LABEL = { closed: "closed", open: "open", half_open: "half-open" };
const STATE_CLASS = { closed: "good", open: "bad", half_open: "warn" };
const REASON_LABEL = {
  failures: "too many failures",
  pause_over: "pause over: probing",
  probes_succeeded: "probes succeeded",
  probe_failed: "a probe failed",
  forced: "forced by an operator",
};
// The charts look back at least this far, and further when the history does.
const CHART_MIN_MS = 5 * 60e3;
const TRANSITIONS_SHOWN = 5;

const plural = (n, one, many) => `${num(n)} ${n === 1 ? one : many}`;
const share = (permille) => `${(permille / 10).toFixed(permille % 10 ? 1 : 0)}%`;

function line(label, ...value) {
  return h("div", { class: "flow-line" }, h("span", { class: "label" }, label), h("span", {}, ...value));
}

function rateCard(a) {
  const bounds = `${num(a.min_per_min)} – ${num(a.max_per_min)}/min`;
  const held = a.hold_until ? Date.parse(a.hold_until) - Date.now() : 0;
  return h(
    "div",
    { class: "card", id: "adaptive" },
    h("div", { class: "label" }, "Adaptive rate"),
    h("div", { class: "value", id: "adaptive-rate" }, `${num(a.rate_per_min)}/min`),
    line("bounds", bounds),
    a.ceiling_per_min !== undefined && a.ceiling_per_min !== null ? line("rate_limit ceiling", `${num(a.ceiling_per_min)}/min`) : null,
    held > 0 ? line("held", h("span", { class: "badge warn", id: "adaptive-hold" }, `for ${age(held)}`), " (a Retry-After)") : null,
    line("congestion", `${plural(a.congestion_total, "signal", "signals")}, ${plural(a.decreases_total, "decrease", "decreases")}`),
  );
}

function breakerCard(b, buttons) {
  return h(
    "div",
    { class: "card", id: "breaker" },
    h("div", { class: "label" }, "Circuit breaker"),
    h(
      "div",
      { class: "value" },
      h("span", { class: `state ${STATE_CLASS[b.state] || ""}`, id: "breaker-state" }, STATE_LABEL[b.state] || b.state),
      b.forced ? h("span", { class: "badge bad", id: "breaker-forced" }, "forced") : null,
    ),
    line("since", when(b.since)),
    line("window", `${share(b.failure_share_permille)} of ${plural(b.calls_in_window, "call", "calls")} failed`),
    line("opened", `${plural(b.opened_total, "time", "times")}, ${age(b.open_ms_total)} open in all`),
    b.next_probe_at ? line("probes from", when(b.next_probe_at)) : null,
    b.state === "half_open" ? line("probes left", num(b.probes_left)) : null,
    buttons,
  );
}

function transitionsTable(b) {
  const shown = b.transitions.slice(-TRANSITIONS_SHOWN).reverse();
  if (shown.length === 0) return h("p", { class: "muted" }, "No transitions yet.");
  return h(
    "table",
    { id: "transitions" },
    h("thead", {}, h("tr", {}, ["when", "change", "why", "failed", "calls"].map((c) => h("th", { class: c === "failed" || c === "calls" ? "num" : null }, c)))),
    h(
      "tbody",
      {},
      shown.map((t) =>
        h(
          "tr",
          {},
          h("td", {}, when(t.at)),
          h("td", {}, `${STATE_LABEL[t.from] || t.from} → ${STATE_LABEL[t.to] || t.to}`),
          h("td", {}, REASON_LABEL[t.reason] || t.reason),
          h("td", { class: "num" }, share(t.failure_share_permille)),
          h("td", { class: "num" }, num(t.calls)),
        ),
      ),
    ),
  );
}

// The rate as steps and the breaker as bands, from the history's changes up to now.
function charts(flow) {
  const now = Date.now();
  const points = flow.history.map((p) => ({ ...p, t: Date.parse(p.at) }));
  const from = Math.min(now - CHART_MIN_MS, ...points.map((p) => p.t));
  const out = [];
  if (flow.adaptive) {
    const steps = [];
    for (const p of points) {
      if (p.rate_per_min === undefined || p.rate_per_min === null) continue;
      if (steps.length) steps.push({ t: p.t, v: steps[steps.length - 1].v });
      steps.push({ t: p.t, v: p.rate_per_min });
    }
    if (steps.length) steps.push({ t: now, v: steps[steps.length - 1].v });
    steps.push({ t: now, v: flow.adaptive.rate_per_min });
    out.push(lineChart("Adaptive rate (per minute)", steps, from, now));
  }
  if (flow.breaker) {
    const spans = [];
    for (const p of points) {
      if (!p.breaker) continue;
      if (spans.length) spans[spans.length - 1].to = p.t;
      spans.push({ from: p.t, to: now, state: p.breaker });
    }
    out.push(
      stateStrip(
        "Breaker state",
        spans.map((s) => ({ ...s, cls: STATE_CLASS[s.state], label: STATE_LABEL[s.state] })),
        from,
        now,
        [
          ["good", "closed"],
          ["warn", "half-open"],
          ["bad", "open"],
          ["none", "before the history"],
        ],
      ),
    );
  }
  return out;
}

// The section of a queue's page that shows `flow`; `draw(flow)` redraws it with fresh stats.
export function flowSection(page, name) {
  const box = h("div", { id: "flow" });
  const notice = h("div", { id: "flow-out" });
  const body = h("div");
  let last = null;
  const force = (state) =>
    page.act(notice, async () => {
      const flow = await page.api("POST", `${queuePath(name)}/breaker`, { state });
      fill(notice, h("div", { class: "ok" }, state === "open" ? "Breaker forced open: nothing is delivered until it is forced closed." : "Breaker closed: deliveries resume."));
      draw(flow);
    });
  const buttons = () =>
    can("manage_queues")
      ? h(
          "div",
          { class: "row" },
          h("button", { id: "force-open", class: "danger", onclick: force("open"), disabled: last.breaker.forced }, "Force open"),
          h("button", { id: "force-closed", onclick: force("closed"), disabled: last.breaker.state === "closed" }, "Force closed"),
        )
      : null;
  const draw = (flow) => {
    last = flow || null;
    if (!last) {
      fill(box);
      return;
    }
    fill(
      body,
      h("div", { class: "flow-cards" }, last.adaptive ? rateCard(last.adaptive) : null, last.breaker ? breakerCard(last.breaker, buttons()) : null),
      last.breaker ? [h("h3", {}, "Last transitions"), transitionsTable(last.breaker)] : null,
      h("div", { class: "charts flow-charts" }, charts(last)),
    );
    if (!box.firstChild) fill(box, h("h2", {}, "Adaptive rate and breaker"), notice, body);
  };
  return { box, draw };
}
