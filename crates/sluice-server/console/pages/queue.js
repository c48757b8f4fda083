// A queue: its numbers, a governed queue's adaptive rate and breaker, its keys with the most
// waiting, depth charts over
// 1 h / 6 h / 24 h, rates, configuration, and pause, resume and purge with a confirmation
// naming the count.

import { enc, queuePath } from "../api.js";
import { lineChart } from "../charts.js";
import { confirmBox, errorBox, fill, h } from "../dom.js";
import { flowSection } from "./flow.js";
import { keysSection } from "./keys.js";
import { age, num, rate, trend } from "../format.js";
import { fmtMs, fmtRate, fmtSize, parseDuration, parseRate, parseSize } from "../human.js";
import { can, me } from "../session.js";

const RANGES = { "1h": 3600e3, "6h": 6 * 3600e3, "24h": 24 * 3600e3 };

// Each field with its label and how it is written: durations as `30s` or `4d`, rates as
// `100/min`, sizes as `256KiB`, read and shown as the command line reads and shows them.
const CONFIG_FIELDS = [
  ["visibility_timeout_ms", "Visibility timeout, e.g. 30s", "duration"],
  ["max_receive_count", "Max receive count (0: unlimited)"],
  ["dead_letter_queue", "Dead-letter queue (empty: none)", "nullable-text"],
  ["backoff_base_ms", "Backoff base, e.g. 1s", "duration"],
  ["backoff_max_ms", "Backoff max, e.g. 15m", "duration"],
  ["delay_ms", "Delivery delay, e.g. 0s or 5m", "duration"],
  ["retention_ms", "Retention, e.g. 4d", "duration"],
  ["max_message_bytes", "Max message size, e.g. 256KiB", "size"],
  ["dedup_window_ms", "Dedup window, e.g. 5m", "duration"],
  ["max_in_flight", "Max in flight (empty: no limit)", "nullable"],
  ["max_depth", "Max depth (empty: no limit)", "nullable"],
  ["rate_limit", "Rate limit, e.g. 100/min or 10/s (empty: none)", "rate"],
  ["result_ttl_ms", "Result TTL, e.g. 1h", "duration"],
];

function configValue(kind, v) {
  if (v === null || v === undefined) return "";
  if (kind === "rate") return fmtRate(v);
  if (kind === "duration") return fmtMs(v);
  if (kind === "size") return fmtSize(v);
  return String(v);
}

// The value to send for what was typed; throws with the command line's message when it is
// not one.
function parseConfig(kind, text) {
  const t = text.trim();
  if (kind === "nullable-text") return t === "" ? null : t;
  if (kind === "rate") return t === "" ? null : parseRate(t);
  if (kind === "duration") return parseDuration(t);
  if (kind === "size") return parseSize(t);
  if (kind === "nullable" && t === "") return null;
  return t === "" ? NaN : Number(t);
}

// The configuration, editable by roles that may manage queues; the broker's refusal shows
// inline.
function configForm(page, name, view) {
  const editable = can("manage_queues");
  const inputs = {};
  const out = h("div", { id: "config-out" });
  const form = h(
    "form",
    {
      class: "config",
      id: "config",
      onsubmit: async (ev) => {
        ev.preventDefault();
        const patch = {};
        const wrong = [];
        for (const [key, label, kind] of CONFIG_FIELDS) {
          const now = inputs[key].value;
          if (now === configValue(kind, view.config[key])) continue;
          try {
            patch[key] = parseConfig(kind, now);
          } catch (e) {
            wrong.push(h("div", { class: "error", role: "alert" }, `${label.split(",")[0]}: ${e.message}`));
          }
        }
        if (wrong.length > 0) {
          fill(out, wrong);
          return;
        }
        if (Object.keys(patch).length === 0) {
          fill(out, h("div", { class: "muted" }, "Nothing changed."));
          return;
        }
        try {
          const updated = await page.api("PUT", queuePath(name), patch);
          view.config = updated.config;
          // Shown back as the broker holds it: `96h` reads `4d`.
          for (const [key, , kind] of CONFIG_FIELDS) inputs[key].value = configValue(kind, view.config[key]);
          fill(out, h("div", { class: "ok" }, "Saved."), (updated.warnings || []).map((w) => h("div", { class: "muted" }, w)));
        } catch (e) {
          if (e.status === 401) page.refused();
          else fill(out, errorBox(e));
        }
      },
    },
    CONFIG_FIELDS.map(([key, label, kind]) => {
      inputs[key] = h("input", { id: `cfg-${key}`, name: key, value: configValue(kind, view.config[key]), disabled: !editable });
      return [h("label", { for: `cfg-${key}` }, label), inputs[key], h("span")];
    }),
  );
  return h(
    "div",
    {},
    form,
    editable
      ? h("div", { class: "row" }, h("button", { class: "primary", type: "submit", form: "config" }, "Save configuration"))
      : h("p", { class: "muted" }, `Role ${me.role} may not change configuration.`),
    out,
  );
}

const RATE_KINDS = ["sent", "received", "acked", "nacked", "dead_lettered", "redriven", "expired"];

function ratesTable(s) {
  return h(
    "table",
    { id: "rates" },
    h("thead", {}, h("tr", {}, h("th", {}, "per second"), RATE_KINDS.map((k) => h("th", { class: "num" }, k.replace("_", "-"))))),
    h(
      "tbody",
      {},
      [["last minute", s.rates], ["5 minutes", s.rates_5m], ["15 minutes", s.rates_15m]].map(([label, r]) =>
        h("tr", {}, h("td", {}, label), RATE_KINDS.map((k) => h("td", { class: "num" }, rate(r[k])))),
      ),
    ),
  );
}

function statCards(s) {
  const card = (label, value, id) => h("div", { class: "card", "data-stat": id }, h("div", { class: "label" }, label), h("div", { class: "value" }, value));
  return [
    card("Visible", num(s.visible), "visible"),
    card("In flight", num(s.in_flight), "in_flight"),
    card("Delayed", num(s.delayed), "delayed"),
    card("Dead letters", num(s.dead_letter_depth), "dead_letter_depth"),
    card("Oldest waiting", s.visible ? age(s.oldest_visible_age_ms) : "—", "oldest"),
    card("Completed (kept)", num(s.completed), "completed"),
    s.active_keys ? card("Active keys", num(s.active_keys), "active_keys") : null,
    h("div", { class: "card" }, h("div", { class: "label" }, "Backlog trend"), h("div", {}, trend(s.backlog_trend))),
    h("div", { class: "card" }, h("div", { class: "label" }, "DLQ trend"), h("div", {}, trend(s.dlq_trend))),
  ];
}

export async function queuePage(page, name) {
  const [view, stats] = await Promise.all([page.api("GET", queuePath(name)), page.api("GET", `${queuePath(name)}/stats`)]);
  const actions = h("div", { class: "row" });
  const notice = h("div");
  const cards = h("div", { class: "cards" });
  const rates = h("div");
  const charts = h("div", { class: "charts" });
  const flow = flowSection(page, name);
  const keys = keysSection(page, name);
  let range = "1h";
  let current = stats;
  const setPaused = (paused) =>
    page.act(notice, async () => {
      await page.api("POST", `${queuePath(name)}/${paused ? "pause" : "resume"}`);
      view.config.paused = paused;
      fill(notice);
      drawActions();
    });
  const drawActions = () => {
    const backlog = current.visible + current.delayed + current.in_flight;
    fill(
      actions,
      view.config.dead_letter_queue
        ? h("a", { href: `#/dlq/${enc(view.config.dead_letter_queue)}` }, `Dead-letter queue ${view.config.dead_letter_queue} (${num(current.dead_letter_depth)})`)
        : null,
      can("inspect") && current.visible + current.delayed > 0 ? h("a", { href: `#/dlq/${enc(name)}` }, "Browse messages") : null,
      can("manage_queues")
        ? [
            view.config.paused
              ? h("button", { id: "resume", onclick: setPaused(false) }, "Resume deliveries")
              : h("button", { id: "pause", onclick: setPaused(true) }, "Pause deliveries"),
            h("button", {
              id: "purge",
              class: "danger",
              onclick: () =>
                fill(
                  notice,
                  confirmBox(`Purge ${num(backlog)} messages from ${name}? They are deleted for good.`, `Purge ${num(backlog)} messages`, async () => {
                    const r = await page.api("POST", `${queuePath(name)}/purge`);
                    fill(notice, h("div", { class: "ok" }, `Purged ${num(r.purged)} messages.`));
                  }),
                ),
            }, "Purge…"),
          ]
        : null,
      view.config.paused ? h("span", { class: "badge bad" }, "paused") : null,
    );
  };
  const drawStats = (s) => {
    current = s;
    fill(cards, statCards(s));
    fill(rates, ratesTable(s));
    flow.draw(s.flow);
    drawActions();
    return keys.draw(s);
  };
  const drawHistory = async () => {
    const shown = range;
    const to = Date.now();
    const from = to - RANGES[shown];
    const hist = await page.api("GET", `${queuePath(name)}/stats/history?since=${shown}`);
    if (shown !== range) return;
    // The stored samples, then the numbers read just now, so a chart ends where the cards
    // above are.
    const pts = (f) => [...hist.samples.map((p) => ({ t: Date.parse(p.at), v: f(p) })), { t: to, v: f(current) }];
    fill(
      charts,
      lineChart("Backlog (visible + delayed)", pts((p) => p.visible + p.delayed), from, to),
      lineChart("In flight", pts((p) => p.in_flight), from, to),
      lineChart("Dead letters", pts((p) => p.dead_letter_depth), from, to),
    );
  };
  const chartsFailed = (e) => fill(charts, errorBox(`The history could not be read: ${e.message}. Retrying.`));
  const tabs = h(
    "div",
    { class: "row tabs", role: "tablist" },
    Object.keys(RANGES).map((r) =>
      h("button", {
        "data-range": r,
        role: "tab",
        class: r === range ? "active" : null,
        onclick: (ev) => {
          range = r;
          for (const b of tabs.querySelectorAll("button")) b.classList.toggle("active", b === ev.target);
          drawHistory().catch((e) => (page.alive ? chartsFailed(e) : null));
        },
      }, r),
    ),
  );
  page.show(
    h("h1", {}, `Queue ${name}`),
    actions,
    notice,
    cards,
    flow.box,
    keys.box,
    h("h2", {}, "Depth over time"),
    tabs,
    charts,
    h("h2", {}, "Rates"),
    rates,
    h("h2", {}, "Configuration"),
    configForm(page, name, view),
  );
  await drawStats(stats);
  // The charts fail on their own: the numbers above stay live.
  page.every(10000, drawHistory, chartsFailed);
  await page.every(3000, async () => drawStats(await page.api("GET", `${queuePath(name)}/stats`)));
}
