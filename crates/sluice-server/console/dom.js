// DOM helpers. Everything shown is built with DOM calls and text nodes: no data ever goes
// through innerHTML, so a message body or an error text is shown, never run.

// Children as nodes: nested arrays flattened, absent ones (null, undefined, false) dropped,
// everything else a text node.
function nodes(kids) {
  return kids
    .flat(Infinity)
    .filter((k) => k !== null && k !== undefined && k !== false)
    .map((k) => (k instanceof Node ? k : document.createTextNode(String(k))));
}

// Replaces the children of `el`.
export function fill(el, ...kids) {
  el.replaceChildren(...nodes(kids));
  return el;
}

// An element with properties and children; strings become text nodes.
export function h(tag, props, ...kids) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(props || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k.startsWith("on")) e.addEventListener(k.slice(2), v);
    else if (k === "class") e.className = v;
    else if (k === "value") e.value = v;
    else e.setAttribute(k, v === true ? "" : String(v));
  }
  e.append(...nodes(kids));
  return e;
}

// A labelled input: the label names the field for screen readers and takes clicks.
export function field(label, input) {
  return h("label", { for: input.id }, label, " ", input);
}

export function errorBox(err) {
  return h("div", { class: "error", role: "alert" }, err instanceof Error ? err.message : String(err));
}

// An inline confirmation: `question`, then `action` on Confirm.
export function confirmBox(question, label, action) {
  const out = h("div");
  const box = h(
    "div",
    { class: "confirm", role: "dialog" },
    h("p", {}, question),
    h(
      "div",
      { class: "row" },
      h("button", {
        class: "danger",
        id: "confirm",
        onclick: async () => {
          try {
            await action();
            box.remove();
          } catch (e) {
            fill(out, errorBox(e));
          }
        },
      }, label),
      h("button", { onclick: () => box.remove() }, "Cancel"),
    ),
    out,
  );
  return box;
}

// A bar `pct` percent full (sized through the CSS object model: the policy forbids inline
// style attributes).
export function progressBar(pct) {
  const bar = h("div");
  bar.style.width = `${pct.toFixed(1)}%`;
  return h("div", { class: "progress" }, bar);
}
