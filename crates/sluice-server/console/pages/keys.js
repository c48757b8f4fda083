// A queue's keys on its page: the keys (tenants) with the most waiting, each with what is in
// flight, its oldest visible message, its deliveries in the last minute, and the weight and
// limit the queue gives it. Shown while the queue has keys. On a queue that governs keys one
// by one (scope key), the keys whose own breaker is open come first, with each key's learned
// rate and breaker.

import { queuePath } from "../api.js";
import { fill, h } from "../dom.js";
import { age, num } from "../format.js";

// Keys shown: the most waiting; `sluice keys QUEUE` pages through the rest.
const SHOWN = 10;

// A key's own breaker: its state, and whether an operator forced it.
function breakerCell(flow) {
  if (!flow || !flow.breaker) {
    return "—";
  }
  const text = flow.forced ? `${flow.breaker} (forced)` : flow.breaker.replace("_", "-");
  return flow.breaker === "closed" ? text : h("span", { class: "badge bad" }, text);
}

function keysTable(page, governed) {
  const own = governed ? ["learned rate", "breaker"] : [];
  return h(
    "table",
    { id: "keys" },
    h(
      "thead",
      {},
      h(
        "tr",
        {},
        h("th", {}, "key"),
        ["backlog", "in flight", "oldest", "delivered / min", "weight", "max in flight", ...own].map((c) => h("th", { class: "num" }, c)),
      ),
    ),
    h(
      "tbody",
      {},
      page.keys.map((k) =>
        h(
          "tr",
          {},
          // The messages sent without a key share one implicit key.
          h("td", {}, k.key === null || k.key === undefined ? h("span", { class: "muted" }, "(no key)") : k.key),
          h("td", { class: "num" }, num(k.backlog)),
          h("td", { class: "num" }, num(k.in_flight)),
          h("td", { class: "num" }, k.visible > 0 ? age(k.oldest_visible_age_ms) : "—"),
          h("td", { class: "num" }, k.delivered_1m === undefined ? "—" : num(k.delivered_1m)),
          h("td", { class: "num" }, num(k.weight)),
          h("td", { class: "num" }, k.max_in_flight === undefined ? "—" : num(k.max_in_flight)),
          governed ? h("td", { class: "num" }, k.flow && k.flow.rate_per_min !== undefined ? `${num(k.flow.rate_per_min)} / min` : "—") : null,
          governed ? h("td", { class: "num" }, breakerCell(k.flow)) : null,
        ),
      ),
    ),
  );
}

// The section and `draw(stats)`, which reads the keys when the stats count any.
export function keysSection(page, name) {
  const box = h("div", { id: "keys-box" });
  const draw = async (stats) => {
    if (!stats.active_keys) {
      fill(box);
      return;
    }
    // A queue that governs keys lists the keys whose breaker is open first.
    const kf = stats.key_flows;
    const order = kf ? "breaker" : "backlog";
    const got = await page.api("GET", `${queuePath(name)}/keys?order=${order}&limit=${SHOWN}`);
    const which = kf ? "open breakers first, then the most waiting" : "the most waiting";
    const more = got.next_cursor ? ` — the ${SHOWN} with ${which}; sluice keys ${name} lists them all` : "";
    const broken = kf && (kf.open || kf.half_open) ? `; ${num(kf.open)} with an open breaker, ${num(kf.half_open)} half-open` : "";
    fill(
      box,
      h("h2", {}, "Keys"),
      h("p", { class: "muted", id: "keys-count" }, `${num(got.active_keys)} active ${got.active_keys === 1 ? "key" : "keys"}${broken}${more}`),
      keysTable(got, Boolean(kf)),
    );
  };
  return { box, draw };
}
