// One showing of a page. Navigating ends the page shown before: its timers stop, its calls
// in flight are aborted, and whatever it would still draw is dropped, so a slow page can
// never draw over the next one.

import { api } from "./api.js";
import { errorBox, fill } from "./dom.js";

let current = null;
let refusedHandler = () => {};

const main = () => document.getElementById("main");

// Where live updates say that they are failing (and clear when they work again).
function liveStatus(err) {
  const el = document.getElementById("live");
  if (!el) return;
  if (err === null) fill(el);
  else fill(el, errorBox(`Live updates are failing: ${err.message}. Retrying.`));
}

// What to do when the broker refuses the key: asked once, however many timers notice.
export function onRefused(fn) {
  refusedHandler = fn;
}

export class Page {
  constructor() {
    this.abort = new AbortController();
    // The live loops failing now, each with its last error: the status line shows while
    // any fails, so one loop working again does not hide another's failure.
    this.failing = new Map();
    this.loops = 0;
  }

  // Notes how a live loop's run went and shows the line accordingly.
  liveRun(loop, err) {
    if (!this.alive) return;
    if (err === null) this.failing.delete(loop);
    else this.failing.set(loop, err);
    const last = [...this.failing.values()].pop();
    liveStatus(last === undefined ? null : last);
  }

  // Whether this page is still the one shown.
  get alive() {
    return current === this;
  }

  get signal() {
    return this.abort.signal;
  }

  // Replaces the page's content, while the page is shown.
  show(...kids) {
    if (this.alive) fill(main(), ...kids);
  }

  // An API call that is aborted when the page is left.
  api(method, path, body) {
    return api(method, path, body, this.signal);
  }

  // The broker refused the key: the page ends and the operator is asked for a key.
  refused() {
    if (!this.alive) return;
    leave();
    refusedHandler();
  }

  // Runs `fn` now and then every `ms` while the page is shown. Without `onError` the first
  // run's error is the page's (it propagates) and later failures show in the live-status
  // line until a run works again; with it, every failure goes to `onError` and the runs go
  // on. A refused key ends the page either way.
  async every(ms, fn, onError) {
    const loop = (this.loops += 1);
    const run = async () => {
      try {
        await fn();
        if (!onError) this.liveRun(loop, null);
      } catch (e) {
        if (!this.alive) return;
        if (e.status === 401) this.refused();
        else if (onError) onError(e);
        else this.liveRun(loop, e);
      }
    };
    if (onError) await run();
    else await fn();
    const tick = async () => {
      if (!this.alive) return;
      await run();
      if (this.alive) setTimeout(tick, ms);
    };
    if (this.alive) setTimeout(tick, ms);
  }

  // A click handler that shows its failure in `box` instead of losing it.
  act(box, fn) {
    return async (ev) => {
      try {
        await fn(ev);
      } catch (e) {
        if (!this.alive) return;
        if (e.status === 401) this.refused();
        else fill(box, errorBox(e));
      }
    };
  }
}

// Starts a new page, ending the one shown.
export function enter() {
  leave();
  current = new Page();
  return current;
}

// Ends the page shown, if any.
export function leave() {
  if (current) {
    current.abort.abort();
    current = null;
  }
  liveStatus(null);
}

// The sign-in form and other content shown outside any page.
export function showOutside(...kids) {
  fill(main(), ...kids);
}

