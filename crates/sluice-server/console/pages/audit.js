// The audit log: who did what and when, newest first, filtered by kind (operators' actions,
// the broker's record of dead letters and expiries, its other records), actor, action, queue
// and time, a page at a time.

import { enc } from "../api.js";
import { errorBox, fill, h } from "../dom.js";
import { when } from "../format.js";

const KINDS = [
  ["", "every entry"],
  ["operator", "operators' actions"],
  ["message", "dead letters and expiries"],
  ["broker", "the broker's other records"],
];

// Links for what an entry names.
function queueLink(q) {
  return q ? h("a", { href: `#/queues/${enc(q)}` }, q) : "—";
}

function messageLink(id) {
  return id ? h("a", { href: `#/messages/${enc(id)}` }, id) : "—";
}

function details(d) {
  const keys = Object.keys(d || {}).sort();
  return keys.length === 0 ? "—" : keys.map((k) => `${k}=${d[k]}`).join(", ");
}

function row(e) {
  return h(
    "tr",
    {},
    h("td", {}, when(e.at)),
    h("td", {}, e.actor),
    h("td", {}, e.action),
    h("td", {}, queueLink(e.queue)),
    h("td", {}, messageLink(e.message_id)),
    h("td", { class: "details" }, details(e.details)),
    h("td", {}, e.outcome),
  );
}

export async function auditPage(page) {
  const field = (id, label, placeholder) => {
    const input = h("input", { id, name: id, placeholder, size: 18 });
    return [input, h("label", { for: id }, label, " ", input)];
  };
  const kind = h("select", { id: "audit-kind", "aria-label": "kind" }, KINDS.map(([v, t]) => h("option", { value: v }, t)));
  const [actor, actorLabel] = field("audit-actor", "Actor", "a key's name");
  const [action, actionLabel] = field("audit-action", "Actions", "queue.purge,redrive.create");
  const [queue, queueLabel] = field("audit-queue", "Queue", "and its DLQ");
  const [since, sinceLabel] = field("audit-since", "Since", "1h or an RFC 3339 time");
  const out = h("div", { id: "audit-out" });
  const body = h("tbody");
  const older = h("button", { id: "audit-older", type: "button", hidden: true }, "Older entries");
  let cursor = null;

  const query = () => {
    const q = new URLSearchParams({ limit: "100" });
    const add = (k, v) => {
      if (v.trim() !== "") q.set(k, v.trim());
    };
    add("kind", kind.value);
    add("actor", actor.value);
    add("action", action.value);
    add("queue", queue.value);
    add("since", since.value);
    if (cursor) q.set("cursor", cursor);
    return q;
  };
  // A page of entries, newest first: the first replaces what is shown, older ones follow it.
  const load = async (more) => {
    if (!more) cursor = null;
    try {
      const r = await page.api("GET", `/v1/audit?${query()}`);
      const rows = [...r.entries].reverse().map(row);
      if (more) body.append(...rows);
      else fill(body, rows);
      cursor = r.more ? r.next_cursor : null;
      older.hidden = !r.more;
      fill(out, body.children.length === 0 ? h("p", { class: "muted" }, "No entries match.") : null);
    } catch (e) {
      if (!page.alive) return;
      if (e.status === 401) page.refused();
      else fill(out, errorBox(e));
    }
  };
  older.onclick = () => load(true);
  const form = h(
    "form",
    {
      id: "audit-filter",
      class: "row",
      onsubmit: (ev) => {
        ev.preventDefault();
        load(false);
      },
    },
    h("label", { for: "audit-kind" }, "Show ", kind),
    actorLabel,
    actionLabel,
    queueLabel,
    sinceLabel,
    h("button", { class: "primary", type: "submit" }, "Show"),
  );
  page.show(
    h("h1", {}, "Audit log"),
    form,
    out,
    h(
      "table",
      { id: "audit" },
      h("thead", {}, h("tr", {}, ["when", "actor", "action", "queue", "message", "details", "outcome"].map((c) => h("th", {}, c)))),
      body,
    ),
    h("div", { class: "row" }, older),
  );
  await load(false);
}
