// A queue's keys on its page: the keys (tenants) with the most waiting, each with what is in
// flight, its oldest visible message, its deliveries in the last minute, and the weight and
// limit the queue gives it. Shown while the queue has keys.

import { queuePath } from "../api.js";
import { fill, h } from "../dom.js";
import { age, num } from "../format.js";

// Keys shown: the most waiting; `sluice keys QUEUE` pages through the rest.
const SHOWN = 10;

function keysTable(page) {
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
        ["backlog", "in flight", "oldest", "delivered / min", "weight", "max in flight"].map((c) => h("th", { class: "num" }, c)),
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
    const got = await page.api("GET", `${queuePath(name)}/keys?limit=${SHOWN}`);
    const more = got.next_cursor ? ` — the ${SHOWN} with the most waiting; sluice keys ${name} lists them all` : "";
    fill(
      box,
      h("h2", {}, "Keys"),
      h("p", { class: "muted", id: "keys-count" }, `${num(got.active_keys)} active ${got.active_keys === 1 ? "key" : "keys"}${more}`),
      keysTable(got),
    );
  };
  return { box, draw };
}
