// Who is calling: the key's name and role, and what the role may do. The console only
// hides what the role may not do; the broker checks every call anyway.

import { KEY, api } from "./api.js";
import { errorBox, fill, h } from "./dom.js";
import { showOutside } from "./page.js";

export let me = null;

export const can = (what) => me !== null && me.may.includes(what);

// Asks the broker who the key is; false when it refuses the key.
export async function identify() {
  try {
    me = await api("GET", "/v1/whoami");
  } catch (e) {
    if (e.status === 401) {
      me = null;
      return false;
    }
    throw e;
  }
  fill(
    document.getElementById("who"),
    me.auth ? `key ${me.name} · ${me.role}` : "no API keys · full access",
    me.auth
      ? h("a", { href: "#/", id: "sign-out", onclick: () => { sessionStorage.removeItem(KEY); location.reload(); } }, " sign out")
      : null,
  );
  // The audit log needs the inspect permission; the link goes for roles without it.
  document.getElementById("nav-audit")?.toggleAttribute("hidden", !can("inspect"));
  return true;
}

// Asks for a key; `then` runs once the broker accepts it.
export function signIn(message, then) {
  me = null;
  const input = h("input", { type: "password", id: "key", size: 48, autocomplete: "off", placeholder: "API key" });
  const err = h("div");
  const form = h(
    "form",
    {
      onsubmit: async (ev) => {
        ev.preventDefault();
        sessionStorage.setItem(KEY, input.value.trim());
        try {
          if (await identify()) then();
          else fill(err, errorBox("That key is not known to this broker."));
        } catch (e) {
          fill(err, errorBox(e));
        }
      },
    },
    h("p", {}, message || "This broker checks API keys. The key is kept in this tab only (session storage)."),
    h("div", { class: "row" }, h("label", { for: "key" }, "API key"), input, h("button", { class: "primary", type: "submit" }, "Sign in")),
    err,
  );
  showOutside(h("h1", {}, "Sign in"), form);
}
