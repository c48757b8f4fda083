// A queue's messages by cause (typically a dead-letter queue): the server-side summary by
// error, reason, source, key or attribute; a group's or any filter's messages; and a redrive of
// them, counted by a dry run first and confirmed as counted.

import { enc, queuePath } from "../api.js";
import { confirmBox, errorBox, field, fill, h } from "../dom.js";
import { num, when } from "../format.js";
import { can, me } from "../session.js";

// The filter's query parameters, as browse and summary take them.
function filterQuery(f) {
  const p = new URLSearchParams();
  for (const k of ["error_contains", "error_is", "reason", "source_queue", "key", "dead_lettered_after", "dead_lettered_before"]) {
    if (f[k]) p.set(k, f[k]);
  }
  for (const [k, v] of Object.entries(f.attributes || {})) p.append("attribute", `${k}=${v}`);
  return p;
}

export function describeFilter(f) {
  const parts = [];
  if (f.error_contains) parts.push(`error contains "${f.error_contains}"`);
  if (f.error_is) parts.push(`error is "${f.error_is}"`);
  if (f.reason) parts.push(`reason ${f.reason}`);
  if (f.source_queue) parts.push(`from ${f.source_queue}`);
  if (f.key) parts.push(`key "${f.key}"`);
  for (const [k, v] of Object.entries(f.attributes || {})) parts.push(`${k} = "${v}"`);
  if (f.dead_lettered_after) parts.push(`dead-lettered after ${f.dead_lettered_after}`);
  if (f.dead_lettered_before) parts.push(`dead-lettered before ${f.dead_lettered_before}`);
  return parts.length ? parts.join(", ") : "every message";
}

// The filter that selects exactly one summary group, or null for the group of messages
// without the key (no error, never dead-lettered, no source, no key, no such attribute): the
// console shows a sample of that one.
function groupFilter(groupBy, key) {
  if (key === null) return null;
  if (groupBy === "error") return { error_is: key };
  if (groupBy === "reason") return { reason: key };
  if (groupBy === "source") return { source_queue: key };
  if (groupBy === "key") return { key };
  if (groupBy.startsWith("attribute:")) return { attributes: { [groupBy.slice(10)]: key } };
  return null;
}

function messagesTable(found) {
  return h(
    "table",
    { id: "messages" },
    h("thead", {}, h("tr", {}, ["id", "last error", "reason", "from"].map((c) => h("th", {}, c)), h("th", { class: "num" }, "deliveries"), h("th", {}, "dead-lettered"))),
    h(
      "tbody",
      {},
      found.messages.map((m) =>
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
  );
}

// The redrive form for `filter` (`count` messages matched it when asked): a dry run counts
// them, and the confirmation moves exactly what was counted.
function redriveForm(page, name, filter, count, detail) {
  const rateN = h("input", { id: "rate", type: "number", min: 1, value: 10, size: 6 });
  const unit = h("select", { id: "rate-unit", "aria-label": "rate unit" }, h("option", { value: "1000" }, "per second"), h("option", { value: "60000" }, "per minute"));
  const limit = h("input", { id: "limit", type: "number", min: 1, placeholder: "all", size: 8 });
  const dest = h("input", { id: "destination", placeholder: "each message's source queue", size: 28 });
  const guard = h("input", { id: "guard", type: "number", min: 1, max: 100, placeholder: "off", size: 4 });
  const out = h("div");
  const spec = (dry) => {
    const body = {
      source: name,
      filter: {
        error_contains: filter.error_contains || null,
        error_is: filter.error_is || null,
        reason: filter.reason || null,
        source_queue: filter.source_queue || null,
        key: filter.key || null,
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
  const dry = page.act(out, async () => {
    fill(out, h("p", { class: "muted" }, "Counting (dry run)…"));
    // What is confirmed is what was counted: the request is fixed now, and later edits of
    // the fields need another dry run.
    const body = spec(false);
    const said = `${name} to ${body.destination || "their source queues"} at ${rateN.value} ${unit.selectedOptions[0].textContent}${guard.value ? `, pausing if ${guard.value}% fail again` : ""}`;
    let job = await page.api("POST", "/v1/redrives", spec(true));
    while (job.state === "running" && page.alive) {
      await new Promise((r) => setTimeout(r, 300));
      job = await page.api("GET", `/v1/redrives/${enc(job.id)}`);
    }
    if (!page.alive) return;
    if (job.state !== "completed") {
      fill(out, errorBox(`The dry run ended ${job.state}${job.paused_reason ? `: ${job.paused_reason}` : ""}${job.blocked ? `: ${job.blocked}` : ""}; nothing was counted for sure.`));
      return;
    }
    // What would move: the matches that have a queue to go to, within the limit; the rest
    // stay, for the reasons the broker gives.
    const n = job.matched;
    const w = job.would_move ?? n;
    if (!body.limit || body.limit > w) body.limit = w;
    fill(
      out,
      h("p", { id: "dry-run-count" }, `Dry run: ${num(n)} messages match.${w !== n ? ` ${num(w)} would move.` : ""}`),
      (job.skip_reasons || []).length ? h("ul", { id: "dry-run-skips" }, job.skip_reasons.map((r) => h("li", {}, r))) : null,
      w > 0
        ? confirmBox(`Move ${num(body.limit)} messages from ${said}?`, `Redrive ${num(body.limit)} messages`, async () => {
            const started = await page.api("POST", "/v1/redrives", body);
            location.hash = `#/redrives/${enc(started.id)}`;
          })
        : null,
    );
  });
  fill(
    detail,
    h("h2", {}, `Redrive ${describeFilter(filter)} (${num(count)})`),
    h(
      "div",
      { class: "row" },
      h("label", { for: "rate" }, "Rate ", rateN, " ", unit),
      field("Limit", limit),
      field("Destination", dest),
      field("Pause if failing (%)", guard),
      h("button", { class: "primary", id: "dry-run", onclick: dry }, "Dry run"),
    ),
    out,
  );
}

export async function dlqPage(page, name) {
  if (!can("inspect")) {
    page.show(h("h1", {}, `Messages of ${name} by cause`), errorBox(`Role ${me.role} may not browse messages.`));
    return;
  }
  let groupBy = "error";
  const attr = h("input", { id: "attribute-name", placeholder: "tenant", size: 14 });
  const summary = h("div");
  const detail = h("div");
  const browse = page.act(detail, async (filter) => {
    const p = filterQuery(filter);
    p.set("limit", "50");
    const found = await page.api("GET", `${queuePath(name)}/messages?${p}`);
    fill(
      detail,
      h("h2", {}, `Messages where ${describeFilter(filter)}`),
      messagesTable(found),
      found.next_cursor ? h("p", { class: "muted" }, "The first 50 are shown.") : null,
    );
  });
  const redrive = (filter, count) => redriveForm(page, name, filter, count, detail);
  const groupRow = (s, g) => {
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
        f && can("redrive") ? h("button", { class: "redrive", onclick: () => redrive(f, g.count) }, "Redrive…") : null,
      ),
    );
  };
  const load = async () => {
    const s = await page.api("GET", `${queuePath(name)}/summary?group_by=${enc(groupBy)}&limit=100`);
    fill(
      summary,
      h("p", {}, `${num(s.total)} messages in ${num(s.group_count)} groups by ${s.group_by}`, s.more_groups ? " (largest 100 shown)" : ""),
      h(
        "table",
        { id: "groups" },
        h("thead", {}, h("tr", {}, h("th", {}, s.group_by), h("th", { class: "num" }, "messages"), h("th", {}, "first"), h("th", {}, "last"), h("th", {}, ""))),
        h("tbody", {}, s.groups.map((g) => groupRow(s, g))),
      ),
      can("redrive") ? h("div", { class: "row" }, h("button", { id: "redrive-all", onclick: () => redrive({}, s.total) }, `Redrive all ${num(s.total)}…`)) : null,
    );
  };
  const select = h(
    "select",
    {
      id: "group-by",
      onchange: page.act(summary, async (ev) => {
        groupBy = ev.target.value === "attribute" ? `attribute:${attr.value.trim() || "tenant"}` : ev.target.value;
        await load();
      }),
    },
    ["error", "reason", "source", "key", "attribute"].map((g) => h("option", { value: g }, g)),
  );
  // Any filter, not only a group's: error text, one attribute, a dead-lettering window.
  const fErr = h("input", { id: "f-error", placeholder: "timeout", size: 18 });
  const fAttr = h("input", { id: "f-attribute", placeholder: "key=value", size: 14 });
  const fAfter = h("input", { id: "f-after", placeholder: "1h or RFC 3339", size: 16 });
  const fBefore = h("input", { id: "f-before", placeholder: "10m or RFC 3339", size: 16 });
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
    return (await page.api("GET", `${queuePath(name)}/summary?${p}`)).total;
  };
  const filterRow = h(
    "form",
    {
      class: "row",
      id: "filter-form",
      onsubmit: (ev) => {
        ev.preventDefault();
        browse(custom());
      },
    },
    field("Error contains", fErr),
    field("Attribute", fAttr),
    field("Dead-lettered after", fAfter),
    field("before", fBefore),
    h("button", { type: "submit", id: "filter-show" }, "Messages"),
    can("redrive")
      ? h("button", {
          type: "button",
          id: "filter-redrive",
          onclick: page.act(detail, async () => {
            const f = custom();
            redrive(f, await countOf(f));
          }),
        }, "Redrive…")
      : null,
  );
  page.show(
    h("h1", {}, `Messages of ${name} by cause`),
    h("div", { class: "row" }, field("Group by", select), field("attribute", attr)),
    summary,
    h("h2", {}, "Filter"),
    filterRow,
    detail,
  );
  await load();
}
