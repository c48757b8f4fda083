// Sluice's console: one page with hash routes over the v1 API, called with the operator's
// key. Each page lives in pages/; page.js ends a page when another is shown.

import { errorBox, h } from "./dom.js";
import { enter, leave, onRefused } from "./page.js";
import { auditPage } from "./pages/audit.js";
import { dlqPage } from "./pages/dlq.js";
import { messagePage } from "./pages/message.js";
import { overview } from "./pages/overview.js";
import { queuePage } from "./pages/queue.js";
import { redrivePage, redrivesPage } from "./pages/redrives.js";
import { taskPage } from "./pages/tasks.js";
import { identify, me, signIn } from "./session.js";

const ROUTES = [
  [/^#?\/?$/, overview],
  [/^#\/queues\/([^/]+)$/, queuePage],
  [/^#\/dlq\/([^/]+)$/, dlqPage],
  [/^#\/messages\/([^/]+)$/, messagePage],
  [/^#\/redrives$/, redrivesPage],
  [/^#\/redrives\/([^/]+)$/, redrivePage],
  [/^#\/tasks(?:\/([^/]*))?$/, taskPage],
  [/^#\/audit$/, auditPage],
];

async function route() {
  const page = enter();
  if (me === null) {
    let known;
    try {
      known = await identify();
    } catch (e) {
      page.show(errorBox(e));
      return;
    }
    if (!page.alive) return;
    if (!known) {
      leave();
      signIn(undefined, route);
      return;
    }
  }
  const hash = location.hash || "#/";
  for (const [re, show] of ROUTES) {
    const m = hash.match(re);
    if (!m) continue;
    try {
      await show(page, ...m.slice(1).map((p) => (p === undefined ? undefined : decodeURIComponent(p))));
    } catch (e) {
      if (!page.alive) return;
      if (e.status === 401) page.refused();
      else page.show(errorBox(e));
    }
    return;
  }
  page.show(h("h1", {}, "Not found"), h("p", {}, h("a", { href: "#/" }, "Back to the queues")));
}

onRefused(() => signIn("The key was refused; give it again.", route));
window.addEventListener("hashchange", route);
route();
