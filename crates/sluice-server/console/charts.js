// Line charts drawn as SVG with DOM calls: no library, no HTML strings.

const NS = "http://www.w3.org/2000/svg";

function el(name, attrs) {
  const e = document.createElementNS(NS, name);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, String(v));
  return e;
}

function fmtTime(ms) {
  const d = new Date(ms);
  return d.toTimeString().slice(0, 5);
}

function fmtNum(n) {
  if (n >= 1e6) return (n / 1e6).toFixed(1) + "M";
  if (n >= 1e4) return (n / 1e3).toFixed(0) + "k";
  if (n >= 1e3) return (n / 1e3).toFixed(1) + "k";
  return String(Math.round(n));
}

// A chart of `points` ([{t: ms, v: number}]) from `from` to `to` (ms), titled `title`.
export function lineChart(title, points, from, to) {
  const W = 380, H = 140, L = 40, R = 8, T = 8, B = 18;
  const box = document.createElement("div");
  box.className = "chart";
  const head = document.createElement("div");
  head.className = "title";
  const last = points.length ? points[points.length - 1].v : 0;
  head.textContent = `${title} — now ${fmtNum(last)}`;
  box.append(head);
  const svg = el("svg", { viewBox: `0 0 ${W} ${H}`, preserveAspectRatio: "none", role: "img" });
  svg.setAttribute("aria-label", title);
  // An even top keeps the middle gridline on a whole number.
  const max = Math.ceil(Math.max(2, ...points.map((p) => p.v)) / 2) * 2;
  const x = (t) => L + ((t - from) / Math.max(1, to - from)) * (W - L - R);
  const y = (v) => T + (1 - v / max) * (H - T - B);
  svg.append(el("line", { class: "axis", x1: L, y1: H - B, x2: W - R, y2: H - B }));
  for (const f of [0, 0.5, 1]) {
    const v = max * f;
    svg.append(el("line", { class: "axis", x1: L, y1: y(v), x2: W - R, y2: y(v) }));
    const label = el("text", { x: L - 4, y: y(v) + 3, "text-anchor": "end" });
    label.textContent = fmtNum(v);
    svg.append(label);
  }
  for (const f of [0, 0.5, 1]) {
    const t = from + (to - from) * f;
    const label = el("text", { x: x(t), y: H - 4, "text-anchor": f === 0 ? "start" : f === 1 ? "end" : "middle" });
    label.textContent = fmtTime(t);
    svg.append(label);
  }
  if (points.length > 1) {
    const d = points.map((p, i) => `${i ? "L" : "M"}${x(p.t).toFixed(1)},${y(p.v).toFixed(1)}`).join("");
    svg.append(el("path", { class: "area", d: `${d}L${x(points[points.length - 1].t).toFixed(1)},${H - B}L${x(points[0].t).toFixed(1)},${H - B}Z` }));
    svg.append(el("path", { class: "line", d }));
  }
  if (points.length > 0) {
    const p = points[points.length - 1];
    svg.append(el("circle", { class: "dot", cx: x(p.t).toFixed(1), cy: y(p.v).toFixed(1), r: 3 }));
  }
  box.append(svg);
  return box;
}

// A band per span of a state (`spans`: [{from, to, cls, label}], ms) from `from` to `to`,
// titled `title`, each coloured by its class, with a legend of `legend` ([[cls, label]]).
export function stateStrip(title, spans, from, to, legend) {
  const W = 380, H = 64, L = 40, R = 8, T = 8, B = 18;
  const box = document.createElement("div");
  box.className = "chart strip";
  const head = document.createElement("div");
  head.className = "title";
  const last = spans.length ? spans[spans.length - 1].label : "—";
  head.textContent = `${title} — now ${last}`;
  box.append(head);
  const svg = el("svg", { viewBox: `0 0 ${W} ${H}`, preserveAspectRatio: "none", role: "img" });
  svg.setAttribute("aria-label", title);
  const x = (t) => L + ((Math.max(from, Math.min(to, t)) - from) / Math.max(1, to - from)) * (W - L - R);
  svg.append(el("rect", { class: "band none", x: L, y: T, width: W - L - R, height: H - T - B }));
  for (const s of spans) {
    const band = el("rect", { class: `band ${s.cls || ""}`, x: x(s.from).toFixed(1), y: T, width: Math.max(1, x(s.to) - x(s.from)).toFixed(1), height: H - T - B });
    const tip = el("title", {});
    tip.textContent = `${s.label} from ${fmtTime(s.from)}`;
    band.append(tip);
    svg.append(band);
  }
  for (const f of [0, 0.5, 1]) {
    const t = from + (to - from) * f;
    const label = el("text", { x: x(t), y: H - 4, "text-anchor": f === 0 ? "start" : f === 1 ? "end" : "middle" });
    label.textContent = fmtTime(t);
    svg.append(label);
  }
  box.append(svg);
  const keys = document.createElement("div");
  keys.className = "legend";
  for (const [cls, label] of legend) {
    const key = document.createElement("span");
    key.className = `key ${cls}`;
    key.textContent = label;
    keys.append(key);
  }
  box.append(keys);
  return box;
}
