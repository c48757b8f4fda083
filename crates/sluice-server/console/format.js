// How numbers, rates, ages, times and trends read on the page.

import { h } from "./dom.js";

export function num(n) {
  return n === null || n === undefined ? "—" : Number(n).toLocaleString("en-US");
}

export function rate(r) {
  if (!r) return "0";
  if (r >= 100) return r.toFixed(0);
  if (r >= 1) return r.toFixed(1);
  return r.toFixed(2);
}

export function age(ms) {
  if (ms === null || ms === undefined) return "—";
  const s = Math.round(ms / 1000);
  if (s < 60) return `${s}s`;
  if (s < 3600) return `${Math.floor(s / 60)}m${String(s % 60).padStart(2, "0")}s`;
  if (s < 86400) return `${Math.floor(s / 3600)}h${String(Math.floor((s % 3600) / 60)).padStart(2, "0")}m`;
  return `${Math.floor(s / 86400)}d${Math.floor((s % 86400) / 3600)}h`;
}

export function when(iso) {
  if (!iso) return "—";
  const d = new Date(iso);
  return `${d.toLocaleString()} (${age(Date.now() - d.getTime())} ago)`;
}

// How long a delivery ran: from its lease's start to its end, finer than `age` below a minute.
export function span(startIso, endIso) {
  if (!startIso || !endIso) return "—";
  const ms = new Date(endIso).getTime() - new Date(startIso).getTime();
  if (ms < 1000) return `${Math.max(ms, 0)} ms`;
  if (ms < 60000) return `${(ms / 1000).toFixed(1)} s`;
  return age(ms);
}

export function trend(flow) {
  if (!flow) return h("span", { class: "flat" }, "→");
  const arrow = { rising: "↑", falling: "↓" }[flow.direction] || "→";
  const cls = { rising: "up", falling: "down" }[flow.direction] || "flat";
  // The direction is the sign of the last minute's change, which the label shows.
  // When the recent span turned against the minute, its pace instead.
  const change = flow.change_1m || 0;
  const agrees = (flow.direction === "rising" && change > 0) || (flow.direction === "falling" && change < 0);
  const label = flow.direction === "flat"
    ? "flat"
    : agrees
      ? `${change > 0 ? "+" : ""}${num(change)} in 1m`
      : `${flow.slope > 0 ? "+" : ""}${rate(flow.slope)}/s now`;
  const given = (v) => v !== null && v !== undefined;
  return h(
    "span",
    { class: cls, title: `1 min ${rate(flow.slope)}/s, 5 min ${rate(flow.slope_5m)}/s` },
    `${arrow} ${label}`,
    given(flow.eta_ms) ? h("span", { class: "muted" }, ` empty in ${age(flow.eta_ms)}`) : null,
    given(flow.stalled_for_ms) ? h("span", { class: "stalled" }, ` stalled ${age(flow.stalled_for_ms)}`) : null,
  );
}
