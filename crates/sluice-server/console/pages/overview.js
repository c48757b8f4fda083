// The overview: queues with their depths, rates and trends, a page of up to 1000 at a time;
// sortable, filterable by the start of a name, live.

import { enc } from "../api.js";
import { field, fill, h } from "../dom.js";
import { age, num, rate, trend } from "../format.js";

// Kept across visits: the filter, the sort, and per queue the DLQ depth and oldest age last
// read and when the DLQ last grew, so a queue stays highlighted for a minute after that.
// `cursor` is the page shown (null: the first), `before` the cursors of the pages before it.
const state = { filter: "", sort: "name", asc: true, seen: new Map(), all: false, cursor: null, before: [] };

// Rows drawn before asking (highlighted queues come first).
const DRAWN_ROWS = 300;

// Queues read per page: the broker's largest page.
const PAGE_QUEUES = 1000;

// What a queue name may hold; a filter with anything else matches none.
const NAME_CHARS = /^[A-Za-z0-9_.-]*$/;

// The stats call for the page shown: the filter is the names' prefix, so the broker reads
// only the queues that match, however many it has.
export function statsPath(filter, cursor) {
  const q = new URLSearchParams({ limit: String(PAGE_QUEUES) });
  if (filter) q.set("prefix", filter);
  if (cursor) q.set("cursor", cursor);
  return `/v1/stats?${q}`;
}

const HIGHLIGHT_MS = 60000;

// [id, heading, sort value (null: nothing to show), numeric]
const COLUMNS = [
  ["name", "Queue", (r) => r.queue, false],
  ["visible", "Visible", (r) => r.visible, true],
  ["in_flight", "In flight", (r) => r.in_flight, true],
  ["delayed", "Delayed", (r) => r.delayed, true],
  ["dlq", "DLQ", (r) => (r.dead_letter_queue ? r.dead_letter_depth : null), true],
  ["oldest", "Oldest", (r) => (r.visible ? r.oldest_visible_age_ms : null), true],
  ["sent", "Sent/s", (r) => r.rates.sent, true],
  ["acked", "Acked/s", (r) => r.rates.acked, true],
  ["dead", "Dead-lettered/s", (r) => r.rates.dead_lettered, true],
  ["trend", "Backlog trend", (r) => r.backlog_trend.slope, true],
  ["dlq_trend", "DLQ trend", (r) => (r.dead_letter_queue ? r.dlq_trend.slope : null), true],
];

const absent = (v) => v === null || v === undefined || Number.isNaN(v);

// Orders rows by a column; rows without a value go last whichever way the column sorts.
export function byColumn(value, asc) {
  return (a, b) => {
    const x = value(a);
    const y = value(b);
    if (absent(x) || absent(y)) return absent(x) === absent(y) ? 0 : absent(x) ? 1 : -1;
    const c = typeof x === "string" ? x.localeCompare(y) : x - y;
    return asc ? c : -c;
  };
}

function row(r) {
  return h(
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
  );
}

// Marks the queues to look at: a DLQ that grows, or an oldest message that keeps waiting.
function withAlerts(queues) {
  const now = Date.now();
  return queues.map((r) => {
    const before = state.seen.get(r.queue);
    const seen = {
      dlq: r.dead_letter_depth,
      age: r.oldest_visible_age_ms,
      dlqRose: before && r.dead_letter_depth > before.dlq ? now : before ? before.dlqRose : 0,
      ageRose: before && r.visible > 0 && r.oldest_visible_age_ms >= 30000 && r.oldest_visible_age_ms > before.age,
    };
    state.seen.set(r.queue, seen);
    let alert = null;
    if (r.dead_letter_queue && (r.dlq_trend.direction === "rising" || now - seen.dlqRose < HIGHLIGHT_MS)) {
      alert = "its dead-letter queue is growing";
    } else if (seen.ageRose) alert = "its oldest message keeps waiting";
    return { ...r, alert };
  });
}

export async function overview(page) {
  const filter = h("input", {
    id: "filter",
    placeholder: "start of a name",
    value: state.filter,
    oninput: (ev) => {
      state.filter = ev.target.value;
      state.cursor = null;
      state.before = [];
      draw();
      load().catch(() => {});
    },
  });
  const status = h("span", { id: "overview-status", class: "muted" });
  const table = h("div");
  const pager = h("div", { class: "row" });
  page.show(h("h1", {}, "Queues"), h("div", { class: "row" }, field("Filter", filter), status), table, pager);
  let rows = [];
  let next = null;
  // Reads the page shown; a reply to an older filter or page is dropped.
  const load = async () => {
    const asked = statsPath(state.filter, state.cursor);
    if (!NAME_CHARS.test(state.filter)) {
      rows = [];
      next = null;
    } else {
      const data = await page.api("GET", asked);
      if (!page.alive || asked !== statsPath(state.filter, state.cursor)) return;
      rows = withAlerts(data.queues);
      next = data.next_cursor;
    }
    draw();
  };
  const turn = (cursor, before) => {
    window.scrollTo(0, 0);
    state.cursor = cursor;
    state.before = before;
    load().catch(() => {});
  };
  const draw = () => {
    const col = COLUMNS.find((c) => c[0] === state.sort) || COLUMNS[0];
    const shown = rows.filter((r) => r.queue.startsWith(state.filter)).sort(byColumn(col[2], state.asc));
    const head = h(
      "tr",
      {},
      COLUMNS.map(([id, label, , numeric]) =>
        h(
          "th",
          {
            class: `sortable${numeric ? " num" : ""}${state.sort === id ? " sorted" : ""}${state.sort === id && state.asc ? " asc" : ""}`,
            "data-sort": id,
            onclick: () => {
              if (state.sort === id) state.asc = !state.asc;
              else {
                state.sort = id;
                state.asc = !numeric;
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
      state.all || shown.length <= DRAWN_ROWS
        ? shown
        : [...shown.filter((r) => r.alert), ...shown.filter((r) => !r.alert)].slice(0, DRAWN_ROWS);
    fill(
      table,
      h("table", { id: "queues" }, h("thead", {}, head), h("tbody", {}, drawn.map(row))),
      drawn.length < shown.length
        ? h("p", {}, `${shown.length - drawn.length} more match; narrow the filter or `, h("button", { id: "show-all", onclick: () => { state.all = true; draw(); } }, `show all ${num(shown.length)}`))
        : null,
    );
    const paged = next !== null || state.before.length > 0;
    const first = state.before.length * PAGE_QUEUES;
    status.textContent = paged
      ? `queues ${num(first + 1)}–${num(first + shown.length)} by name · updated ${new Date().toLocaleTimeString()}`
      : `${shown.length} queues · updated ${new Date().toLocaleTimeString()}`;
    // Sorting and highlighting apply to the page shown; the filter narrows what is paged.
    fill(
      pager,
      state.before.length > 0 ? h("button", { id: "first-page", onclick: () => turn(null, []) }, "First page") : null,
      state.before.length > 0 ? h("button", { id: "previous-page", onclick: () => turn(state.before.at(-1), state.before.slice(0, -1)) }, "Previous page") : null,
      next !== null ? h("button", { id: "next-page", onclick: () => turn(next, [...state.before, state.cursor]) }, `Next ${num(PAGE_QUEUES)} queues`) : null,
      paged ? h("span", { class: "muted" }, "sorting orders the queues of this page; type the start of a name to narrow every page") : null,
    );
  };
  await page.every(3000, load);
}
