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

export function trend(flow) {
  if (!flow) return h("span", { class: "flat" }, "→");
  const arrow = { rising: "↑", falling: "↓" }[flow.direction] || "→";
  const cls = { rising: "up", falling: "down" }[flow.direction] || "flat";
  const slope = flow.slope_1m || flow.slope || 0;
  const label = flow.direction === "flat" ? "flat" : `${slope > 0 ? "+" : ""}${rate(slope)}/s`;
  return h(
    "span",
    { class: cls, title: `1 min ${rate(flow.slope_1m)}/s, 5 min ${rate(flow.slope_5m)}/s` },
    `${arrow} ${label}`,
    flow.eta_ms !== null && flow.eta_ms !== undefined ? h("span", { class: "muted" }, ` empty in ${age(flow.eta_ms)}`) : null,
  );
}
