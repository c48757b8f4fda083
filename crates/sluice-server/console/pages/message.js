// One message: where it is, its attempts, its body (JSON pretty, text, or a hex dump of
// bytes; always shown as text), and delete with a confirmation.

import { enc } from "../api.js";
import { confirmBox, fill, h } from "../dom.js";
import { num, span, when } from "../format.js";
import { can } from "../session.js";

const HEX_LIMIT = 4096;

function hexDump(b64) {
  const bytes = Uint8Array.from(atob(b64), (c) => c.charCodeAt(0));
  const lines = [];
  for (let i = 0; i < bytes.length && i < HEX_LIMIT; i += 16) {
    const row = Array.from(bytes.slice(i, i + 16));
    const hex = row.map((b) => b.toString(16).padStart(2, "0")).join(" ");
    const text = row.map((b) => (b >= 32 && b < 127 ? String.fromCharCode(b) : ".")).join("");
    lines.push(`${i.toString(16).padStart(8, "0")}  ${hex.padEnd(48)}  ${text}`);
  }
  if (bytes.length > HEX_LIMIT) lines.push(`… ${bytes.length - HEX_LIMIT} more bytes`);
  return lines.join("\n");
}

function bodyText(m) {
  if (m.body_base64 !== undefined && m.body_base64 !== null) return ["bytes", hexDump(m.body_base64)];
  if (m.body === undefined || m.body === null) return ["none", "(no body: a completed record)"];
  if (m.body_encoding === "text") return ["text", String(m.body)];
  return ["JSON", JSON.stringify(m.body, null, 2)];
}

export async function messagePage(page, id) {
  const m = await page.api("GET", `/v1/messages/${enc(id)}`);
  const [kind, text] = bodyText(m);
  const out = h("div");
  const row = (label, value) => h("tr", {}, h("th", {}, label), h("td", {}, value));
  page.show(
    h("h1", {}, `Message ${m.id}`),
    h(
      "table",
      { id: "message" },
      h(
        "tbody",
        {},
        row("queue", h("a", { href: `#/queues/${enc(m.queue)}` }, m.queue)),
        row("state", `${m.state}${m.dead_lettered ? " (dead letter)" : ""}`),
        row("receive count", num(m.receive_count)),
        row("last error", m.last_error || "—"),
        row("dead-letter reason", m.dead_letter_reason || "—"),
        row("source queue", m.source_queue || "—"),
        row("sent", when(m.enqueued_at)),
        row("dead-lettered", when(m.dead_lettered_at)),
        row("attributes", Object.keys(m.attributes).length ? Object.entries(m.attributes).map(([k, v]) => h("div", {}, `${k} = ${v}`)) : "—"),
      ),
    ),
    h("h2", {}, "Attempts"),
    h(
      "table",
      { id: "attempts" },
      h("thead", {}, h("tr", {}, ["ended", "ran", "outcome", "error", "consumer"].map((c) => h("th", {}, c)))),
      h("tbody", {}, m.attempts.map((a) => h("tr", {}, h("td", {}, when(a.at)), h("td", {}, span(a.started_at, a.at)), h("td", {}, a.outcome), h("td", {}, a.error || "—"), h("td", {}, a.consumer || "—")))),
    ),
    h("h2", {}, `Body (${kind})`),
    h("pre", { class: "body", id: "body" }, text),
    can("inspect")
      ? h("div", { class: "row" }, h("button", {
          class: "danger",
          id: "delete",
          onclick: () =>
            fill(
              out,
              confirmBox(`Delete message ${m.id} from ${m.queue}? It is gone for good.`, "Delete message", async () => {
                await page.api("DELETE", `/v1/messages/${enc(m.id)}`);
                fill(out, h("div", { class: "ok" }, "Deleted."));
              }),
            ),
        }, "Delete…"))
      : null,
    out,
  );
}
