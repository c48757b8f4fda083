// Redrive jobs: the list, and one job's progress beside the backlog of where its messages
// go, with pause, resume and cancel.

import { enc, queuePath } from "../api.js";
import { fill, h, progressBar } from "../dom.js";
import { num, trend, when } from "../format.js";
import { fmtRate } from "../human.js";
import { can } from "../session.js";
import { describeFilter } from "./dlq.js";

// The queues that dead-letter into `dlq`: a walk over every page of the queue listing, read
// once per showing of a job.
async function sourcesOf(page, dlq) {
  const found = [];
  let cursor = null;
  do {
    const q = new URLSearchParams(cursor ? { cursor } : {});
    const p = await page.api("GET", `/v1/queues?${q}`);
    found.push(...p.queues.filter((v) => v.config.dead_letter_queue === dlq).map((v) => v.name));
    cursor = p.next_cursor;
  } while (cursor && page.alive);
  return found;
}

function redriveRate(j) {
  if (j.rate) return fmtRate(j.rate);
  return j.rate_per_second ? `${j.rate_per_second}/s` : "unlimited";
}

export async function redrivesPage(page) {
  const list = h("div");
  page.show(h("h1", {}, "Redrives"), list);
  await page.every(2000, async () => {
    const r = await page.api("GET", "/v1/redrives");
    fill(
      list,
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
                h(
                  "tr",
                  {},
                  h("td", {}, h("a", { href: `#/redrives/${enc(j.id)}` }, j.id)),
                  h("td", {}, j.state, j.dry_run ? " (dry run)" : ""),
                  h("td", {}, j.source),
                  h("td", { class: "num" }, num(j.moved)),
                  h("td", { class: "num" }, num(j.matched)),
                  h("td", {}, redriveRate(j)),
                  h("td", {}, when(j.created_at)),
                ),
              ),
            ),
          ),
    );
  });
}

export async function redrivePage(page, id) {
  const head = h("div");
  const controls = h("div", { class: "row" });
  const failed = h("div");
  const dest = h("div");
  page.show(h("h1", {}, `Redrive ${id}`), head, controls, failed, h("h2", {}, "Where the messages go"), dest);
  const control = (verb) => page.act(failed, async () => {
    await page.api("POST", `/v1/redrives/${enc(id)}/${verb}`);
    fill(failed);
  });
  // The queues to watch are found once: the job's destination, or every queue whose
  // dead-letter queue is the job's source.
  let targets = null;
  const seen = [];
  await page.every(1000, async () => {
    const j = await page.api("GET", `/v1/redrives/${enc(id)}`);
    const now = Date.now();
    seen.push([now, j.moved]);
    while (seen.length > 1 && now - seen[0][0] > 60000) seen.shift();
    const [t0, m0] = seen[0];
    const live = now > t0 ? ((j.moved - m0) / (now - t0)) * 60000 : 0;
    // What it will move in all, as the broker counts it while the job is active (its
    // matching messages still in the source, within its limit); once it has finished, what
    // it moved (a dry run: what matched).
    const total = j.to_move ?? (j.dry_run ? j.matched : j.moved);
    const pct = total ? Math.min(100, (100 * j.moved) / total) : j.state === "running" ? 0 : 100;
    fill(
      head,
      h("p", { id: "redrive-state" }, `State: ${j.state}`, j.paused_reason ? ` — ${j.paused_reason}` : "", j.blocked ? ` — ${j.blocked}` : ""),
      h("p", {}, `From ${j.source} to ${j.destination || "each message's source queue"}; where ${describeFilter(j.filter)}; rate ${redriveRate(j)}`, j.pause_if_failing ? `; pauses if ${j.pause_if_failing.percent}% fail again` : ""),
      h("div", { class: "row" }, progressBar(pct), h("span", { id: "redrive-moved" }, j.dry_run ? `${num(j.matched)} match, ${num(j.would_move ?? j.matched)} would move` : `${num(j.moved)} moved of ${num(total)}`), h("span", { class: "muted" }, `live ${live.toFixed(1)}/min`)),
      (j.skip_reasons || []).length ? h("ul", { id: "redrive-skips" }, j.skip_reasons.map((r) => h("li", {}, r))) : null,
    );
    const active = j.state === "running" || j.state === "paused";
    fill(
      controls,
      can("redrive") && active
        ? [
            j.state === "paused" ? h("button", { id: "resume", onclick: control("resume") }, "Resume") : h("button", { id: "pause", onclick: control("pause") }, "Pause"),
            h("button", { id: "cancel", class: "danger", onclick: control("cancel") }, "Cancel"),
          ]
        : null,
    );
    if (targets === null) {
      targets = j.destination ? [j.destination] : await sourcesOf(page, j.source);
    }
    const rows = await Promise.all(targets.map((q) => page.api("GET", `${queuePath(q)}/stats`)));
    fill(
      dest,
      h(
        "table",
        { id: "destinations" },
        h("thead", {}, h("tr", {}, h("th", {}, "queue"), h("th", { class: "num" }, "visible"), h("th", { class: "num" }, "in flight"), h("th", {}, "backlog trend"), h("th", { class: "num" }, "dead letters"))),
        h(
          "tbody",
          {},
          rows.map((s) =>
            h("tr", {}, h("td", {}, h("a", { href: `#/queues/${enc(s.queue)}` }, s.queue)), h("td", { class: "num" }, num(s.visible)), h("td", { class: "num" }, num(s.in_flight)), h("td", {}, trend(s.backlog_trend)), h("td", { class: "num" }, num(s.dead_letter_depth))),
          ),
        ),
      ),
    );
  });
}
