// Sluice's console: one page, hash routes, the v1 API with the operator's key.
//
// Everything shown is built with DOM calls (`h` below) and text nodes: no data ever goes
// through innerHTML, so a message body or an error text is shown, never run. The broker
// checks every permission; the page only hides what the key's role may not do.
//
// Over 1,000 lines: the API client, the DOM helpers and the seven pages sit in one module so
// the broker serves the console in three requests; charts live in charts.js. The pages are
// the next to move into modules of their own as they grow.

import { lineChart } from "./charts.js";

// ---- API ---------------------------------------------------------------------------------

const KEY = "sluice.key";

class ApiError extends Error {
  constructor(status, code, message) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

async function api(method, path, body) {
  const headers = {};
  const key = sessionStorage.getItem(KEY);
  if (key) headers.Authorization = `Bearer ${key}`;
  if (body !== undefined) headers["Content-Type"] = "application/json";
  const resp = await fetch(path, {
    method,
    headers,
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  if (resp.status === 204) return null;
  const text = await resp.text();
  let data = null;
  try {
    data = text ? JSON.parse(text) : null;
  } catch {
    data = text;
  }
  if (!resp.ok) {
    const err = data && data.error ? data.error : { code: "unknown", message: resp.statusText };
    throw new ApiError(resp.status, err.code, err.message);
  }
  return data;
}

const enc = encodeURIComponent;
const queuePath = (q) => `/v1/queues/${enc(q)}`;

// ---- DOM ---------------------------------------------------------------------------------

// Children as nodes: nested arrays flattened, absent ones (null, undefined, false) dropped,
// everything else a text node.
function nodes(kids) {
  return kids
    .flat(Infinity)
    .filter((k) => k !== null && k !== undefined && k !== false)
    .map((k) => (k instanceof Node ? k : document.createTextNode(String(k))));
}

// Replaces the children of `el`.
function fill(el, ...kids) {
  el.replaceChildren(...nodes(kids));
  return el;
}

// An element with properties and children; strings become text nodes.
function h(tag, props, ...kids) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(props || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k.startsWith("on")) e.addEventListener(k.slice(2), v);
    else if (k === "class") e.className = v;
    else if (k === "value") e.value = v;
    else e.setAttribute(k, v === true ? "" : String(v));
  }
  e.append(...nodes(kids));
  return e;
}

const main = () => document.getElementById("main");

function show(...kids) {
  fill(main(), ...kids);
}

function errorBox(err) {
  return h("div", { class: "error", role: "alert" }, err instanceof Error ? err.message : String(err));
}

// ---- Formatting --------------------------------------------------------------------------

function num(n) {
  return n === null || n === undefined ? "—" : Number(n).toLocaleString("en-US");
}

function rate(r) {
  if (!r) return "0";
  if (r >= 100) return r.toFixed(0);
  if (r >= 1) return r.toFixed(1);
  if (r === 0) return "0";
  return r.toFixed(2);
}

function age(ms) {
  if (ms === null || ms === undefined) return "—";
  const s = Math.round(ms / 1000);
  if (s < 60) return `${s}s`;
  if (s < 3600) return `${Math.floor(s / 60)}m${String(s % 60).padStart(2, "0")}s`;
  if (s < 86400) return `${Math.floor(s / 3600)}h${String(Math.floor((s % 3600) / 60)).padStart(2, "0")}m`;
  return `${Math.floor(s / 86400)}d${Math.floor((s % 86400) / 3600)}h`;
}

function when(iso) {
  if (!iso) return "—";
  const d = new Date(iso);
  return `${d.toLocaleString()} (${age(Date.now() - d.getTime())} ago)`;
}

function trend(flow) {
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

// ---- Who is calling ----------------------------------------------------------------------

let me = null;

const can = (what) => me !== null && me.may.includes(what);

async function identify() {
  try {
    me = await api("GET", "/v1/whoami");
  } catch (e) {
    if (e.status === 401) {
      me = null;
      return false;
    }
    throw e;
  }
  const who = document.getElementById("who");
  fill(who, 
    me.auth ? `key ${me.name} · ${me.role}` : "no API keys · full access",
    me.auth
      ? h("a", { href: "#/", id: "sign-out", onclick: () => { sessionStorage.removeItem(KEY); location.reload(); } }, " sign out")
      : null,
  );
  return true;
}

function signIn(message) {
  const input = h("input", { type: "password", id: "key", size: 48, autocomplete: "off", placeholder: "API key" });
  const err = h("div");
  const form = h(
    "form",
    {
      onsubmit: async (ev) => {
        ev.preventDefault();
        sessionStorage.setItem(KEY, input.value.trim());
        try {
          if (await identify()) route();
          else fill(err, errorBox("That key is not known to this broker."));
        } catch (e) {
          fill(err, errorBox(e));
        }
      },
    },
    h("p", {}, message || "This broker checks API keys. The key is kept in this tab only (session storage)."),
    h("div", { class: "row" }, input, h("button", { class: "primary", type: "submit" }, "Sign in")),
    err,
  );
  show(h("h1", {}, "Sign in"), form);
}

// ---- Live pages --------------------------------------------------------------------------

// Bumped on every navigation: a page's timers stop when it is no longer shown.
let generation = 0;

// Runs `fn` now (its error is the page's) and then every `ms` while the page is shown.
async function every(ms, fn) {
  const mine = generation;
  await fn();
  const tick = async () => {
    if (mine !== generation) return;
    try {
      await fn();
    } catch (e) {
      if (e.status === 401) {
        signIn("The key was refused; give it again.");
        return;
      }
      console.warn(e);
    }
    if (mine === generation) setTimeout(tick, ms);
  };
  setTimeout(tick, ms);
}

// An inline confirmation: `question`, then `action` on Confirm.
function confirmBox(question, label, action) {
  const out = h("div");
  const box = h(
    "div",
    { class: "confirm", role: "dialog" },
    h("p", {}, question),
    h(
      "div",
      { class: "row" },
      h("button", {
        class: "danger",
        id: "confirm",
        onclick: async () => {
          try {
            await action();
            box.remove();
          } catch (e) {
            fill(out, errorBox(e));
          }
        },
      }, label),
      h("button", { onclick: () => box.remove() }, "Cancel"),
    ),
    out,
  );
  return box;
}

// ---- Overview ----------------------------------------------------------------------------

// `seen` holds, per queue, the DLQ depth and oldest age last read and when the DLQ last grew,
// so a queue stays highlighted for a minute after its DLQ grew.
const overviewState = { filter: "", sort: "name", asc: true, seen: new Map(), all: false };

// Rows the overview draws before asking (highlighted queues come first).
const DRAWN_ROWS = 300;

const HIGHLIGHT_MS = 60000;

const COLUMNS = [
  ["name", "Queue", (r) => r.queue, false],
  ["visible", "Visible", (r) => r.visible, true],
  ["in_flight", "In flight", (r) => r.in_flight, true],
  ["delayed", "Delayed", (r) => r.delayed, true],
  ["dlq", "DLQ", (r) => r.dead_letter_depth, true],
  ["oldest", "Oldest", (r) => r.oldest_visible_age_ms, true],
  ["sent", "Sent/s", (r) => r.rates.sent, true],
  ["acked", "Acked/s", (r) => r.rates.acked, true],
  ["dead", "Dead-lettered/s", (r) => r.rates.dead_lettered, true],
  ["trend", "Backlog trend", (r) => r.backlog_trend.slope_1m, true],
  ["dlq_trend", "DLQ trend", (r) => r.dlq_trend.slope_1m, true],
];

async function overview() {
  const filter = h("input", {
    id: "filter",
    placeholder: "Filter by name",
    value: overviewState.filter,
    oninput: (ev) => {
      overviewState.filter = ev.target.value;
      draw();
    },
  });
  const status = h("span", { class: "muted" });
  const table = h("div");
  show(h("h1", {}, "Queues"), h("div", { class: "row" }, filter, status), table);
  let rows = [];
  const draw = () => {
    const f = overviewState.filter.toLowerCase();
    const col = COLUMNS.find((c) => c[0] === overviewState.sort) || COLUMNS[0];
    const shown = rows
      .filter((r) => r.queue.toLowerCase().includes(f))
      .sort((a, b) => {
        const x = col[2](a), y = col[2](b);
        const c = typeof x === "string" ? x.localeCompare(y) : x - y;
        return overviewState.asc ? c : -c;
      });
    const head = h(
      "tr",
      {},
      COLUMNS.map(([id, label, , numeric]) =>
        h(
          "th",
          {
            class: `sortable${numeric ? " num" : ""}${overviewState.sort === id ? " sorted" : ""}${overviewState.sort === id && overviewState.asc ? " asc" : ""}`,
            "data-sort": id,
            onclick: () => {
              if (overviewState.sort === id) overviewState.asc = !overviewState.asc;
              else {
                overviewState.sort = id;
                overviewState.asc = !numeric;
              }
              draw();
            },
          },
          label,
        ),
      ),
    );
    // Past DRAWN_ROWS, highlighted queues come first and the rest wait for a click, so a
    // broker with thousands of queues stays quick to draw and to filter.
    const drawn =
      overviewState.all || shown.length <= DRAWN_ROWS
        ? shown
        : [...shown.filter((r) => r.alert), ...shown.filter((r) => !r.alert)].slice(0, DRAWN_ROWS);
    const body = drawn.map((r) =>
      h(
        "tr",
        { "data-queue": r.queue, class: r.alert ? "alert" : null, title: r.alert || null },
        h(
          "td",
          {},
          h("a", { href: `#/queues/${enc(r.queue)}` }, r.queue),
          r.is_dead_letter_queue ? h("span", { class: "badge" }, "DLQ") : null,
          r.paused ? h("span", { class: "badge" }, "paused") : null,
        ),
        h("td", { class: "num" }, num(r.visible)),
        h("td", { class: "num" }, num(r.in_flight)),
        h("td", { class: "num" }, num(r.delayed)),
        h(
          "td",
          { class: "num", "data-col": "dlq" },
          r.dead_letter_queue
            ? h("a", { href: `#/dlq/${enc(r.dead_letter_queue)}`, class: r.dead_letter_depth ? "up" : null }, num(r.dead_letter_depth))
            : "—",
        ),
        h("td", { class: "num" }, r.visible ? age(r.oldest_visible_age_ms) : "—"),
        h("td", { class: "num" }, rate(r.rates.sent)),
        h("td", { class: "num" }, rate(r.rates.acked)),
        h("td", { class: "num" }, rate(r.rates.dead_lettered)),
        h("td", {}, trend(r.backlog_trend)),
        h("td", {}, r.dead_letter_queue ? trend(r.dlq_trend) : "—"),
      ),
    );
    fill(
      table,
      h("table", { id: "queues" }, h("thead", {}, head), h("tbody", {}, body)),
      drawn.length < shown.length
        ? h("p", {}, `${shown.length - drawn.length} more match; narrow the filter or `, h("button", { id: "show-all", onclick: () => { overviewState.all = true; draw(); } }, `show all ${num(shown.length)}`))
        : null,
    );
    status.textContent = `${shown.length} of ${rows.length} queues · updated ${new Date().toLocaleTimeString()}`;
  };
  await every(3000, async () => {
    const data = await api("GET", "/v1/stats");
    const now = Date.now();
    rows = data.queues.map((r) => {
      const before = overviewState.seen.get(r.queue);
      const seen = {
        dlq: r.dead_letter_depth,
        age: r.oldest_visible_age_ms,
        dlqRose: before && r.dead_letter_depth > before.dlq ? now : before ? before.dlqRose : 0,
        ageRose: before && r.visible > 0 && r.oldest_visible_age_ms >= 30000 && r.oldest_visible_age_ms > before.age,
      };
      overviewState.seen.set(r.queue, seen);
      let alert = null;
      if (r.dead_letter_queue && (r.dlq_trend.direction === "rising" || now - seen.dlqRose < HIGHLIGHT_MS)) {
        alert = "its dead-letter queue is growing";
      } else if (seen.ageRose) alert = "its oldest message keeps waiting";
      return { ...r, alert };
    });
    draw();
  });
}

// ---- Queue page --------------------------------------------------------------------------

const RANGES = { "1h": 3600e3, "6h": 6 * 3600e3, "24h": 24 * 3600e3 };

const CONFIG_FIELDS = [
  ["visibility_timeout_ms", "Visibility timeout (ms)"],
  ["max_receive_count", "Max receive count (0: unlimited)"],
  ["dead_letter_queue", "Dead-letter queue (empty: none)", "nullable-text"],
  ["backoff_base_ms", "Backoff base (ms)"],
  ["backoff_max_ms", "Backoff max (ms)"],
  ["delay_ms", "Delivery delay (ms)"],
  ["retention_ms", "Retention (ms)"],
  ["max_message_bytes", "Max message bytes"],
  ["dedup_window_ms", "Dedup window (ms)"],
  ["max_in_flight", "Max in flight (empty: no limit)", "nullable"],
  ["max_depth", "Max depth (empty: no limit)", "nullable"],
  ["rate_limit", "Rate limit: deliveries per period, e.g. 100/60000 (empty: none)", "rate"],
  ["result_ttl_ms", "Result TTL (ms)"],
];

function configValue(kind, v) {
  if (kind === "rate") return v ? `${v.limit}/${v.period_ms}` : "";
  return v === null || v === undefined ? "" : String(v);
}

function parseConfig(kind, text) {
  const t = text.trim();
  if (kind === "nullable-text") return t === "" ? null : t;
  if (kind === "rate") {
    if (t === "") return null;
    const [limit, period] = t.split("/");
    return { limit: Number(limit), period_ms: Number(period) };
  }
  if (kind === "nullable" && t === "") return null;
  return t === "" ? NaN : Number(t);
}

function configForm(name, view) {
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
        for (const [field, , kind] of CONFIG_FIELDS) {
          const now = inputs[field].value;
          if (now !== configValue(kind, view.config[field])) patch[field] = parseConfig(kind, now);
        }
        if (Object.keys(patch).length === 0) {
          fill(out, h("div", { class: "muted" }, "Nothing changed."));
          return;
        }
        try {
          const updated = await api("PUT", queuePath(name), patch);
          view.config = updated.config;
          fill(out, 
            h("div", { class: "ok" }, "Saved."),
            (updated.warnings || []).map((w) => h("div", { class: "muted" }, w)),
          );
        } catch (e) {
          fill(out, errorBox(e));
        }
      },
    },
    CONFIG_FIELDS.map(([field, label, kind]) => {
      inputs[field] = h("input", { name: field, value: configValue(kind, view.config[field]), disabled: !editable });
      return [h("label", { for: field }, label), inputs[field], h("span")];
    }),
  );
  return h(
    "div",
    {},
    form,
    editable ? h("div", { class: "row" }, h("button", { class: "primary", type: "submit", form: "config" }, "Save configuration")) : h("p", { class: "muted" }, `Role ${me.role} may not change configuration.`),
    out,
  );
}

async function queuePage(name) {
  const [view, stats] = await Promise.all([api("GET", queuePath(name)), api("GET", `${queuePath(name)}/stats`)]);
  const actions = h("div", { class: "row" });
  const notice = h("div");
  const cards = h("div", { class: "cards" });
  const rates = h("div");
  const charts = h("div", { class: "charts" });
  let range = "1h";
  const tabs = h(
    "div",
    { class: "row tabs" },
    Object.keys(RANGES).map((r) =>
      h("button", {
        "data-range": r,
        class: r === range ? "active" : null,
        onclick: (ev) => {
          range = r;
          for (const b of tabs.querySelectorAll("button")) b.classList.toggle("active", b === ev.target);
          drawHistory();
        },
      }, r),
    ),
  );
  let current = stats;
  const drawActions = () => {
    const backlog = current.visible + current.delayed + current.in_flight;
    fill(actions, 
      view.config.dead_letter_queue ? h("a", { href: `#/dlq/${enc(view.config.dead_letter_queue)}` }, `Dead-letter queue ${view.config.dead_letter_queue} (${num(current.dead_letter_depth)})`) : null,
      can("inspect") && current.visible + current.delayed > 0 ? h("a", { href: `#/dlq/${enc(name)}` }, "Browse messages") : null,
      can("manage_queues")
        ? [
            view.config.paused
              ? h("button", { id: "resume", onclick: async () => { await api("POST", `${queuePath(name)}/resume`); view.config.paused = false; drawActions(); } }, "Resume deliveries")
              : h("button", { id: "pause", onclick: async () => { await api("POST", `${queuePath(name)}/pause`); view.config.paused = true; drawActions(); } }, "Pause deliveries"),
            h("button", {
              id: "purge",
              class: "danger",
              onclick: () =>
                fill(notice, 
                  confirmBox(`Purge ${num(backlog)} messages from ${name}? They are deleted for good.`, `Purge ${num(backlog)} messages`, async () => {
                    const r = await api("POST", `${queuePath(name)}/purge`);
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
    const card = (label, value, id) => h("div", { class: "card", "data-stat": id }, h("div", { class: "label" }, label), h("div", { class: "value" }, value));
    fill(cards, 
      card("Visible", num(s.visible), "visible"),
      card("In flight", num(s.in_flight), "in_flight"),
      card("Delayed", num(s.delayed), "delayed"),
      card("Dead letters", num(s.dead_letter_depth), "dead_letter_depth"),
      card("Oldest waiting", s.visible ? age(s.oldest_visible_age_ms) : "—", "oldest"),
      card("Completed (kept)", num(s.completed), "completed"),
      h("div", { class: "card" }, h("div", { class: "label" }, "Backlog trend"), h("div", {}, trend(s.backlog_trend))),
      h("div", { class: "card" }, h("div", { class: "label" }, "DLQ trend"), h("div", {}, trend(s.dlq_trend))),
    );
    const kinds = ["sent", "received", "acked", "nacked", "dead_lettered", "redriven", "expired"];
    fill(rates, 
      h(
        "table",
        { id: "rates" },
        h("thead", {}, h("tr", {}, h("th", {}, "per second"), kinds.map((k) => h("th", { class: "num" }, k.replace("_", "-"))))),
        h(
          "tbody",
          {},
          [["last minute", s.rates], ["5 minutes", s.rates_5m], ["15 minutes", s.rates_15m]].map(([label, r]) =>
            h("tr", {}, h("td", {}, label), kinds.map((k) => h("td", { class: "num" }, rate(r[k])))),
          ),
        ),
      ),
    );
    drawActions();
  };
  const drawHistory = async () => {
    const to = Date.now();
    const from = to - RANGES[range];
    const hist = await api("GET", `${queuePath(name)}/stats/history?since=${range}`);
    const pts = (f) => hist.samples.map((p) => ({ t: Date.parse(p.at), v: f(p) }));
    fill(charts, 
      lineChart("Backlog (visible + delayed)", pts((p) => p.visible + p.delayed), from, to),
      lineChart("In flight", pts((p) => p.in_flight), from, to),
      lineChart("Dead letters", pts((p) => p.dead_letter_depth), from, to),
    );
  };
  show(
    h("h1", {}, `Queue ${name}`),
    actions,
    notice,
    cards,
    h("h2", {}, "Depth over time"),
    tabs,
    charts,
    h("h2", {}, "Rates"),
    rates,
    h("h2", {}, "Configuration"),
    configForm(name, view),
  );
  drawStats(stats);
  every(10000, drawHistory);
  every(3000, async () => drawStats(await api("GET", `${queuePath(name)}/stats`)));
}

// ---- Dead letters ------------------------------------------------------------------------

function filterQuery(filter) {
  const p = new URLSearchParams();
  if (filter.error_contains) p.set("error_contains", filter.error_contains);
  for (const [k, v] of Object.entries(filter.attributes || {})) p.append("attribute", `${k}=${v}`);
  if (filter.dead_lettered_after) p.set("dead_lettered_after", filter.dead_lettered_after);
  if (filter.dead_lettered_before) p.set("dead_lettered_before", filter.dead_lettered_before);
  return p;
}

function describeFilter(f) {
  const parts = [];
  if (f.error_contains) parts.push(`error contains "${f.error_contains}"`);
  for (const [k, v] of Object.entries(f.attributes || {})) parts.push(`${k} = "${v}"`);
  if (f.dead_lettered_after) parts.push(`dead-lettered after ${f.dead_lettered_after}`);
  if (f.dead_lettered_before) parts.push(`dead-lettered before ${f.dead_lettered_before}`);
  return parts.length ? parts.join(", ") : "every message";
}

// The filter that selects one summary group, or null when the API has none (reason,
// source, or messages without the key).
function groupFilter(groupBy, key) {
  if (key === null) return null;
  if (groupBy === "error") return { error_contains: key, attributes: {} };
  if (groupBy.startsWith("attribute:")) return { attributes: { [groupBy.slice(10)]: key } };
  return null;
}

async function dlqPage(name) {
  if (!can("inspect")) {
    show(h("h1", {}, `Messages of ${name} by cause`), errorBox(`Role ${me.role} may not browse messages.`));
    return;
  }
  let groupBy = "error";
  const select = h(
    "select",
    {
      id: "group-by",
      onchange: (ev) => {
        groupBy = ev.target.value === "attribute" ? `attribute:${attr.value.trim() || "tenant"}` : ev.target.value;
        load();
      },
    },
    ["error", "reason", "source", "attribute"].map((g) => h("option", { value: g }, g)),
  );
  const attr = h("input", { id: "attribute-name", placeholder: "attribute name", size: 14 });
  const summary = h("div");
  const detail = h("div");
  const load = async () => {
    const s = await api("GET", `${queuePath(name)}/summary?group_by=${enc(groupBy)}&limit=100`);
    fill(summary, 
      h("p", {}, `${num(s.total)} messages in ${num(s.group_count)} groups by ${s.group_by}`, s.more_groups ? " (largest 100 shown)" : ""),
      h(
        "table",
        { id: "groups" },
        h("thead", {}, h("tr", {}, h("th", {}, s.group_by), h("th", { class: "num" }, "messages"), h("th", {}, "first"), h("th", {}, "last"), h("th", {}, ""))),
        h(
          "tbody",
          {},
          s.groups.map((g) => {
            const f = groupFilter(s.group_by, g.key);
            return h(
              "tr",
              { "data-group": g.key === null ? "" : g.key },
              h("td", {}, g.key === null ? h("span", { class: "muted" }, "(none)") : g.key),
              h("td", { class: "num" }, num(g.count)),
              h("td", {}, when(g.first_at)),
              h("td", {}, when(g.last_at)),
              h(
                "td",
                {},
                f ? h("button", { class: "show", onclick: () => browse(f) }, "Messages") : h("a", { href: `#/messages/${enc(g.sample_id)}` }, "A sample"),
                " ",
                f && can("redrive") ? h("button", { class: "redrive", onclick: () => redriveForm(f, g.count) }, "Redrive…") : null,
              ),
            );
          }),
        ),
      ),
      can("redrive") ? h("div", { class: "row" }, h("button", { id: "redrive-all", onclick: () => redriveForm({ attributes: {} }, s.total) }, `Redrive all ${num(s.total)}…`)) : null,
    );
  };
  const browse = async (filter) => {
    const p = filterQuery(filter);
    p.set("limit", "50");
    const page = await api("GET", `${queuePath(name)}/messages?${p}`);
    fill(detail, 
      h("h2", {}, `Messages where ${describeFilter(filter)}`),
      h(
        "table",
        { id: "messages" },
        h("thead", {}, h("tr", {}, h("th", {}, "id"), h("th", {}, "last error"), h("th", {}, "reason"), h("th", {}, "from"), h("th", { class: "num" }, "deliveries"), h("th", {}, "dead-lettered"))),
        h(
          "tbody",
          {},
          page.messages.map((m) =>
            h(
              "tr",
              {},
              h("td", {}, h("a", { href: `#/messages/${enc(m.id)}` }, m.id)),
              h("td", {}, m.last_error || "—"),
              h("td", {}, m.dead_letter_reason || "—"),
              h("td", {}, m.source_queue || "—"),
              h("td", { class: "num" }, num(m.receive_count)),
              h("td", {}, when(m.dead_lettered_at)),
            ),
          ),
        ),
      ),
      page.next_cursor ? h("p", { class: "muted" }, "The first 50 are shown.") : null,
    );
  };
  const redriveForm = (filter, count) => {
    const rateN = h("input", { id: "rate", type: "number", min: 1, value: 10, size: 6 });
    const unit = h("select", { id: "rate-unit" }, h("option", { value: "1000" }, "per second"), h("option", { value: "60000" }, "per minute"));
    const limit = h("input", { id: "limit", type: "number", min: 1, placeholder: "all", size: 8 });
    const dest = h("input", { id: "destination", placeholder: "each message's source queue", size: 28 });
    const guard = h("input", { id: "guard", type: "number", min: 1, max: 100, placeholder: "off", size: 4 });
    const out = h("div");
    const spec = (dry) => {
      const body = {
        source: name,
        filter: {
          error_contains: filter.error_contains || null,
          attributes: filter.attributes || {},
          dead_lettered_after: filter.dead_lettered_after || null,
          dead_lettered_before: filter.dead_lettered_before || null,
        },
        rate: { limit: Number(rateN.value), period_ms: Number(unit.value) },
        dry_run: dry,
      };
      if (dest.value.trim()) body.destination = dest.value.trim();
      if (limit.value) body.limit = Number(limit.value);
      if (guard.value) body.pause_if_failing = { percent: Number(guard.value) };
      return body;
    };
    const dry = async () => {
      fill(out, h("p", { class: "muted" }, "Counting (dry run)…"));
      const mine = generation;
      // What is confirmed is what was counted: the request is fixed now, and later edits of
      // the fields need another dry run.
      const body = spec(false);
      const said = `${name} to ${body.destination || "their source queues"} at ${rateN.value} ${unit.selectedOptions[0].textContent}${guard.value ? `, pausing if ${guard.value}% fail again` : ""}`;
      try {
        let job = await api("POST", "/v1/redrives", spec(true));
        while (job.state === "running" && mine === generation) {
          await new Promise((r) => setTimeout(r, 300));
          job = await api("GET", `/v1/redrives/${enc(job.id)}`);
        }
        if (mine !== generation) return;
        if (job.state !== "completed") {
          fill(out, errorBox(`The dry run ended ${job.state}${job.paused_reason ? `: ${job.paused_reason}` : ""}${job.blocked ? `: ${job.blocked}` : ""}; nothing was counted for sure.`));
          return;
        }
        const n = job.matched;
        if (!body.limit || body.limit > n) body.limit = n;
        fill(out, 
          h("p", { id: "dry-run-count" }, `Dry run: ${num(n)} messages match.`),
          n > 0
            ? confirmBox(
                `Move ${num(body.limit)} messages from ${said}?`,
                `Redrive ${num(body.limit)} messages`,
                async () => {
                  const started = await api("POST", "/v1/redrives", body);
                  location.hash = `#/redrives/${enc(started.id)}`;
                },
              )
            : null,
        );
      } catch (e) {
        fill(out, errorBox(e));
      }
    };
    fill(detail, 
      h("h2", {}, `Redrive ${describeFilter(filter)} (${num(count)})`),
      h(
        "div",
        { class: "row" },
        h("label", {}, "Rate ", rateN, " ", unit),
        h("label", {}, "Limit ", limit),
        h("label", {}, "Destination ", dest),
        h("label", {}, "Pause if failing (%) ", guard),
        h("button", { class: "primary", id: "dry-run", onclick: dry }, "Dry run"),
      ),
      out,
    );
  };
  // Any filter, not only a group's: error text, one attribute, a dead-lettering window.
  const fErr = h("input", { id: "f-error", placeholder: "error contains", size: 18 });
  const fAttr = h("input", { id: "f-attribute", placeholder: "key=value", size: 14 });
  const fAfter = h("input", { id: "f-after", placeholder: "after (1h, RFC 3339)", size: 16 });
  const fBefore = h("input", { id: "f-before", placeholder: "before", size: 12 });
  const custom = () => {
    const f = { attributes: {} };
    if (fErr.value.trim()) f.error_contains = fErr.value.trim();
    const kv = fAttr.value.trim();
    if (kv.includes("=")) f.attributes[kv.slice(0, kv.indexOf("="))] = kv.slice(kv.indexOf("=") + 1);
    if (fAfter.value.trim()) f.dead_lettered_after = fAfter.value.trim();
    if (fBefore.value.trim()) f.dead_lettered_before = fBefore.value.trim();
    return f;
  };
  const countOf = async (f) => {
    const p = filterQuery(f);
    p.set("limit", "1");
    return (await api("GET", `${queuePath(name)}/summary?${p}`)).total;
  };
  const filterRow = h(
    "form",
    {
      class: "row",
      id: "filter-form",
      onsubmit: async (ev) => {
        ev.preventDefault();
        try {
          await browse(custom());
        } catch (e) {
          fill(detail, errorBox(e));
        }
      },
    },
    "Filter ",
    fErr,
    fAttr,
    fAfter,
    fBefore,
    h("button", { type: "submit", id: "filter-show" }, "Messages"),
    can("redrive")
      ? h("button", {
          type: "button",
          id: "filter-redrive",
          onclick: async () => {
            try {
              const f = custom();
              redriveForm(f, await countOf(f));
            } catch (e) {
              fill(detail, errorBox(e));
            }
          },
        }, "Redrive…")
      : null,
  );
  show(h("h1", {}, `Messages of ${name} by cause`), h("div", { class: "row" }, h("label", {}, "Group by ", select), attr), summary, filterRow, detail);
  await load();
}

// ---- One message -------------------------------------------------------------------------

function hexDump(b64) {
  const bytes = Uint8Array.from(atob(b64), (c) => c.charCodeAt(0));
  const lines = [];
  for (let i = 0; i < bytes.length && i < 4096; i += 16) {
    const row = Array.from(bytes.slice(i, i + 16));
    const hex = row.map((b) => b.toString(16).padStart(2, "0")).join(" ");
    const text = row.map((b) => (b >= 32 && b < 127 ? String.fromCharCode(b) : ".")).join("");
    lines.push(`${i.toString(16).padStart(8, "0")}  ${hex.padEnd(48)}  ${text}`);
  }
  if (bytes.length > 4096) lines.push(`… ${bytes.length - 4096} more bytes`);
  return lines.join("\n");
}

function bodyText(m) {
  if (m.body_base64 !== undefined && m.body_base64 !== null) return ["bytes", hexDump(m.body_base64)];
  if (m.body === undefined || m.body === null) return ["none", "(no body: a completed record)"];
  if (m.body_encoding === "text") return ["text", String(m.body)];
  return ["JSON", JSON.stringify(m.body, null, 2)];
}

async function messagePage(id) {
  const m = await api("GET", `/v1/messages/${enc(id)}`);
  const [kind, text] = bodyText(m);
  const out = h("div");
  const field = (label, value) => h("tr", {}, h("th", {}, label), h("td", {}, value));
  show(
    h("h1", {}, `Message ${m.id}`),
    h(
      "table",
      { id: "message" },
      h(
        "tbody",
        {},
        field("queue", h("a", { href: `#/queues/${enc(m.queue)}` }, m.queue)),
        field("state", `${m.state}${m.dead_lettered ? " (dead letter)" : ""}`),
        field("receive count", num(m.receive_count)),
        field("last error", m.last_error || "—"),
        field("dead-letter reason", m.dead_letter_reason || "—"),
        field("source queue", m.source_queue || "—"),
        field("sent", when(m.enqueued_at)),
        field("dead-lettered", when(m.dead_lettered_at)),
        field("attributes", Object.keys(m.attributes).length ? Object.entries(m.attributes).map(([k, v]) => h("div", {}, `${k} = ${v}`)) : "—"),
      ),
    ),
    h("h2", {}, "Attempts"),
    h(
      "table",
      { id: "attempts" },
      h("thead", {}, h("tr", {}, h("th", {}, "at"), h("th", {}, "outcome"), h("th", {}, "error"), h("th", {}, "consumer"))),
      h("tbody", {}, m.attempts.map((a) => h("tr", {}, h("td", {}, when(a.at)), h("td", {}, a.outcome), h("td", {}, a.error || "—"), h("td", {}, a.consumer || "—")))),
    ),
    h("h2", {}, `Body (${kind})`),
    h("pre", { class: "body", id: "body" }, text),
    can("inspect")
      ? h("div", { class: "row" }, h("button", {
          class: "danger",
          id: "delete",
          onclick: () =>
            fill(out, 
              confirmBox(`Delete message ${m.id} from ${m.queue}? It is gone for good.`, "Delete message", async () => {
                await api("DELETE", `/v1/messages/${enc(m.id)}`);
                fill(out, h("div", { class: "ok" }, "Deleted."));
              }),
            ),
        }, "Delete…"))
      : null,
    out,
  );
}

// ---- Redrives ----------------------------------------------------------------------------

function redriveRate(j) {
  if (j.rate) return j.rate.period_ms === 60000 ? `${j.rate.limit}/min` : `${j.rate.limit} per ${j.rate.period_ms} ms`;
  return j.rate_per_second ? `${j.rate_per_second}/s` : "unlimited";
}

// A bar `pct` percent full (sized through the CSS object model: the policy forbids inline
// style attributes).
function progressBar(pct) {
  const fill = h("div");
  fill.style.width = `${pct.toFixed(1)}%`;
  return h("div", { class: "progress" }, fill);
}

async function redrivesPage() {
  const list = h("div");
  show(h("h1", {}, "Redrives"), list);
  await every(2000, async () => {
    const r = await api("GET", "/v1/redrives");
    fill(list, 
      r.redrives.length === 0
        ? h("p", { class: "muted" }, "No redrives yet. Start one from a dead-letter queue's page.")
        : h(
            "table",
            { id: "redrives" },
            h("thead", {}, h("tr", {}, ["id", "state", "source", "moved", "matched", "rate", "started"].map((c) => h("th", {}, c)))),
            h(
              "tbody",
              {},
              r.redrives.map((j) =>
                h("tr", {}, h("td", {}, h("a", { href: `#/redrives/${enc(j.id)}` }, j.id)), h("td", {}, j.state, j.dry_run ? " (dry run)" : ""), h("td", {}, j.source), h("td", { class: "num" }, num(j.moved)), h("td", { class: "num" }, num(j.matched)), h("td", {}, redriveRate(j)), h("td", {}, when(j.created_at))),
              ),
            ),
          ),
    );
  });
}

async function redrivePage(id) {
  const head = h("div");
  const controls = h("div", { class: "row" });
  const dest = h("div");
  show(h("h1", {}, `Redrive ${id}`), head, controls, h("h2", {}, "Where the messages go"), dest);
  const seen = [];
  await every(1000, async () => {
    const j = await api("GET", `/v1/redrives/${enc(id)}`);
    const now = Date.now();
    seen.push([now, j.moved]);
    while (seen.length > 1 && now - seen[0][0] > 60000) seen.shift();
    const [t0, m0] = seen[0];
    const live = now > t0 ? ((j.moved - m0) / (now - t0)) * 60000 : 0;
    const total = j.limit !== null && j.limit !== undefined ? Math.min(j.limit, Math.max(j.matched, j.moved)) : Math.max(j.matched, j.moved);
    const pct = total ? Math.min(100, (100 * j.moved) / total) : j.state === "running" ? 0 : 100;
    fill(head, 
      h("p", { id: "redrive-state" }, `State: ${j.state}`, j.paused_reason ? ` — ${j.paused_reason}` : "", j.blocked ? ` — ${j.blocked}` : ""),
      h("p", {}, `From ${j.source} to ${j.destination || "each message's source queue"}; where ${describeFilter(j.filter)}; rate ${redriveRate(j)}`, j.pause_if_failing ? `; pauses if ${j.pause_if_failing.percent}% fail again` : ""),
      h("div", { class: "row" }, progressBar(pct), h("span", { id: "redrive-moved" }, `${num(j.moved)} moved of ${num(total)} matched`), h("span", { class: "muted" }, `live ${live.toFixed(1)}/min`)),
    );
    const active = j.state === "running" || j.state === "paused";
    fill(controls, 
      can("redrive") && active
        ? [
            j.state === "paused"
              ? h("button", { id: "resume", onclick: () => api("POST", `/v1/redrives/${enc(id)}/resume`) }, "Resume")
              : h("button", { id: "pause", onclick: () => api("POST", `/v1/redrives/${enc(id)}/pause`) }, "Pause"),
            h("button", { id: "cancel", class: "danger", onclick: () => api("POST", `/v1/redrives/${enc(id)}/cancel`) }, "Cancel"),
          ]
        : null,
    );
    const targets = j.destination ? [j.destination] : (await api("GET", "/v1/stats")).queues.filter((q) => q.dead_letter_queue === j.source).map((q) => q.queue);
    const rows = await Promise.all(targets.map((q) => api("GET", `${queuePath(q)}/stats`)));
    fill(dest, 
      h(
        "table",
        { id: "destinations" },
        h("thead", {}, h("tr", {}, h("th", {}, "queue"), h("th", { class: "num" }, "visible"), h("th", { class: "num" }, "in flight"), h("th", {}, "backlog trend"), h("th", { class: "num" }, "dead letters"))),
        h("tbody", {}, rows.map((s) => h("tr", {}, h("td", {}, h("a", { href: `#/queues/${enc(s.queue)}` }, s.queue)), h("td", { class: "num" }, num(s.visible)), h("td", { class: "num" }, num(s.in_flight)), h("td", {}, trend(s.backlog_trend)), h("td", { class: "num" }, num(s.dead_letter_depth))))),
      ),
    );
  });
}

// ---- Tasks -------------------------------------------------------------------------------

async function taskPage(id) {
  const input = h("input", { id: "task-id", placeholder: "task id", value: id || "", size: 24 });
  const out = h("div");
  show(
    h("h1", {}, "Tasks"),
    h("form", { class: "row", onsubmit: (ev) => { ev.preventDefault(); location.hash = `#/tasks/${enc(input.value.trim())}`; } }, input, h("button", { class: "primary", type: "submit" }, "Look up")),
    out,
  );
  if (!id) return;
  const mine = generation;
  const draw = (t) => {
    fill(out, 
      h(
        "table",
        { id: "task" },
        h(
          "tbody",
          {},
          h("tr", {}, h("th", {}, "status"), h("td", { id: "task-status" }, t.status)),
          h("tr", {}, h("th", {}, "queue"), h("td", {}, t.queue || "—")),
          h("tr", {}, h("th", {}, "deliveries"), h("td", {}, num(t.receive_count))),
          h("tr", {}, h("th", {}, "progress"), h("td", {}, t.progress ? `${t.progress.pct}%${t.progress.detail ? ` — ${t.progress.detail}` : ""}` : "—")),
          h("tr", {}, h("th", {}, "error"), h("td", {}, t.error || "—")),
          h("tr", {}, h("th", {}, "result"), h("td", {}, t.result === undefined || t.result === null ? "—" : h("pre", { class: "body" }, t.result_encoding === "text" ? String(t.result) : JSON.stringify(t.result, null, 2)))),
        ),
      ),
      can("cancel_tasks") && ["PENDING", "STARTED", "RETRY"].includes(String(t.status).toUpperCase())
        ? h("div", { class: "row" }, h("button", { class: "danger", id: "cancel-task", onclick: async () => draw(await api("POST", `/v1/tasks/${enc(id)}/cancel`)) }, "Cancel task"))
        : null,
    );
  };
  draw(await api("GET", `/v1/tasks/${enc(id)}`));
  // Status events (server-sent), read with fetch so the key goes along.
  const headers = {};
  const key = sessionStorage.getItem(KEY);
  if (key) headers.Authorization = `Bearer ${key}`;
  const resp = await fetch(`/v1/tasks/${enc(id)}/events`, { headers });
  if (!resp.ok || !resp.body) return;
  const reader = resp.body.pipeThrough(new TextDecoderStream()).getReader();
  let buf = "";
  while (mine === generation) {
    const { value, done } = await reader.read();
    if (done) break;
    buf += value;
    let cut;
    while ((cut = buf.indexOf("\n\n")) >= 0) {
      const event = buf.slice(0, cut);
      buf = buf.slice(cut + 2);
      const data = event.split("\n").filter((l) => l.startsWith("data:")).map((l) => l.slice(5).trimStart()).join("\n");
      if (data && event.includes("event: status")) draw(JSON.parse(data));
    }
  }
  reader.cancel().catch(() => {});
}

// ---- Routing -----------------------------------------------------------------------------

const ROUTES = [
  [/^#?\/?$/, overview],
  [/^#\/queues\/([^/]+)$/, queuePage],
  [/^#\/dlq\/([^/]+)$/, dlqPage],
  [/^#\/messages\/([^/]+)$/, messagePage],
  [/^#\/redrives$/, redrivesPage],
  [/^#\/redrives\/([^/]+)$/, redrivePage],
  [/^#\/tasks(?:\/([^/]*))?$/, taskPage],
];

async function route() {
  generation += 1;
  if (me === null && !(await identify())) {
    signIn();
    return;
  }
  const hash = location.hash || "#/";
  for (const [re, page] of ROUTES) {
    const m = hash.match(re);
    if (!m) continue;
    try {
      await page(...m.slice(1).map((p) => (p === undefined ? undefined : decodeURIComponent(p))));
    } catch (e) {
      if (e.status === 401) signIn("The key was refused; give it again.");
      else show(errorBox(e));
    }
    return;
  }
  show(h("h1", {}, "Not found"), h("p", {}, h("a", { href: "#/" }, "Back to the queues")));
}

window.addEventListener("hashchange", route);
route().catch((e) => show(errorBox(e)));
