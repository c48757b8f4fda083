// A task looked up by id: status, deliveries, progress, result; followed live through the
// broker's status events, and cancelled on request.

import { ApiError, authHeaders, enc } from "../api.js";
import { errorBox, fill, h } from "../dom.js";
import { num } from "../format.js";
import { can } from "../session.js";

const WAITING = ["PENDING", "STARTED", "RETRY"];

// Splits server-sent events out of `buf`: complete events and what is left over.
export function sseEvents(buf) {
  const events = [];
  let cut;
  while ((cut = buf.indexOf("\n\n")) >= 0) {
    const block = buf.slice(0, cut);
    buf = buf.slice(cut + 2);
    let type = "message";
    const data = [];
    for (const line of block.split("\n")) {
      if (line.startsWith("event:")) type = line.slice(6).trim();
      else if (line.startsWith("data:")) data.push(line.slice(5).replace(/^ /, ""));
    }
    if (data.length) events.push({ type, data: data.join("\n") });
  }
  return [events, buf];
}

// Reads the task's status events until the task is final, the stream fails, or the page is
// left (the fetch is aborted with it). `onStatus` gets each status; returns an error text,
// or null when the stream just ended.
async function follow(page, id, onStatus) {
  const resp = await fetch(`/v1/tasks/${enc(id)}/events`, { headers: authHeaders(), signal: page.signal });
  if (resp.status === 401) throw new ApiError(401, "unauthenticated", "the key was refused");
  if (!resp.ok || !resp.body) return `status events answered ${resp.status}`;
  const reader = resp.body.pipeThrough(new TextDecoderStream()).getReader();
  let buf = "";
  try {
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return null;
      let events;
      [events, buf] = sseEvents(buf + value);
      for (const ev of events) {
        if (ev.type === "error") return ev.data;
        if (ev.type === "status") onStatus(JSON.parse(ev.data));
      }
    }
  } finally {
    reader.cancel().catch(() => {});
  }
}

export async function taskPage(page, id) {
  const input = h("input", { id: "task-id", placeholder: "task id", value: id || "", size: 24 });
  const out = h("div");
  const live = h("div");
  page.show(
    h("h1", {}, "Tasks"),
    h(
      "form",
      { class: "row", onsubmit: (ev) => { ev.preventDefault(); location.hash = `#/tasks/${enc(input.value.trim())}`; } },
      h("label", { for: "task-id" }, "Task id"),
      input,
      h("button", { class: "primary", type: "submit" }, "Look up"),
    ),
    out,
    live,
  );
  if (!id) return;
  let status = null;
  const draw = (t) => {
    if (!page.alive) return;
    status = String(t.status).toUpperCase();
    fill(
      out,
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
      can("cancel_tasks") && WAITING.includes(status)
        ? h("div", { class: "row" }, h("button", { class: "danger", id: "cancel-task", onclick: page.act(live, async () => draw(await page.api("POST", `/v1/tasks/${enc(id)}/cancel`))) }, "Cancel task"))
        : null,
    );
  };
  draw(await page.api("GET", `/v1/tasks/${enc(id)}`));
  // Follow while the task can still change; a stream that ends early (the broker closes
  // them after an hour) is opened again.
  while (page.alive && WAITING.includes(status)) {
    let problem;
    try {
      problem = await follow(page, id, draw);
    } catch (e) {
      if (!page.alive) return;
      if (e.status === 401) {
        page.refused();
        return;
      }
      problem = e.message;
    }
    if (!page.alive) return;
    if (problem) fill(live, errorBox(`Live status stopped: ${problem}. Trying again in 5 s.`));
    else fill(live);
    if (!WAITING.includes(status)) break;
    await new Promise((r) => setTimeout(r, problem ? 5000 : 500));
  }
}
