// Values as people type them, read and written as the command line does (`sluice_core::human`
// in the broker): durations (`500ms`, `30s`, `5m`, `2h`, `4d`, `1h30m`), rates (`100/min`,
// `10/s`, `1000/60s`) and sizes (`4096`, `256KiB`, `1MiB`). The rules and the messages are the
// same; a test runs both against one table of cases.

const DURATION_UNITS = {
  ms: 0.001, s: 1, sec: 1, secs: 1, m: 60, min: 60, mins: 60,
  h: 3600, hr: 3600, hrs: 3600, d: 86400, day: 86400, days: 86400,
};

// Seconds as whole milliseconds, or null when not a duration Rust can hold.
function secsToMs(secs) {
  if (!Number.isFinite(secs) || secs < 0) return null;
  return Math.floor(secs * 1000 + 1e-6);
}

// A number as Rust's `f64` parsing reads one: a sign, digits with at most one dot, an exponent.
// (Its `inf` and `NaN` are no durations either way.)
function decimal(text) {
  return /^[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?$/.test(text) ? Number(text) : null;
}

// Milliseconds, or throws an Error whose message says how to write a duration.
export function parseDuration(s) {
  const text = s.trim();
  const bad = () => new Error(`"${s}" is not a duration; write it like 500ms, 30s, 5m, 2h, 4d or 1h30m`);
  if (text === "") throw bad();
  const plain = decimal(text);
  if (plain !== null) {
    const ms = secsToMs(plain);
    if (ms === null) throw bad();
    return ms;
  }
  let total = 0;
  let rest = text;
  while (rest !== "") {
    const num = rest.match(/^[\d.]+/);
    if (!num) throw bad();
    const value = decimal(num[0]);
    if (value === null) throw bad();
    rest = rest.slice(num[0].length);
    const unit = rest.match(/^[^\d.]*/)[0];
    const scale = DURATION_UNITS[unit.trim()];
    if (scale === undefined) throw bad();
    total += value * scale;
    rest = rest.slice(unit.length);
  }
  const ms = secsToMs(total);
  if (ms === null) throw bad();
  return ms;
}

// Milliseconds compactly: `500ms`, `30s`, `1.5s`, `15m`, `4d`, `1h30m`.
export function fmtMs(ms) {
  if (ms === 0) return "0s";
  if (ms % 1000 !== 0) return ms < 60000 ? `${ms / 1000}s` : `${ms}ms`;
  let secs = ms / 1000;
  let out = "";
  for (const [unit, size] of [["d", 86400], ["h", 3600], ["m", 60], ["s", 1]]) {
    if (secs >= size) {
      out += `${Math.floor(secs / size)}${unit}`;
      secs %= size;
    }
  }
  return out;
}

const RATE_PERIODS = {
  s: 1000, sec: 1000, second: 1000, m: 60000, min: 60000, minute: 60000,
  h: 3600000, hr: 3600000, hour: 3600000, d: 86400000, day: 86400000,
};

const U32_MAX = 4294967295;

// `{limit, period_ms}`, or throws an Error whose message says how to write a rate.
export function parseRate(s) {
  const bad = () => new Error(`"${s}" is not a rate; write it like 100/min, 10/s, 5/h or 1000/60s`);
  const text = s.trim();
  const slash = text.indexOf("/");
  if (slash < 0) throw bad();
  const count = text.slice(0, slash).trim();
  const period = text.slice(slash + 1).trim();
  if (!/^\+?\d+$/.test(count) || Number(count) > U32_MAX) throw bad();
  let periodMs = RATE_PERIODS[period];
  if (periodMs === undefined) {
    try {
      periodMs = parseDuration(period);
    } catch {
      throw bad();
    }
  }
  return { limit: Number(count), period_ms: periodMs };
}

// A rate back: `100/min`, `10/s`, `7/1500ms`.
export function fmtRate(r) {
  const named = { 1000: "s", 60000: "min", 3600000: "h", 86400000: "d" }[r.period_ms];
  return `${r.limit}/${named || fmtMs(r.period_ms)}`;
}

const SIZE_UNITS = {
  "": 1, b: 1, kb: 1000, k: 1024, kib: 1024, mb: 1e6, m: 1048576, mib: 1048576,
  gb: 1e9, g: 1073741824, gib: 1073741824,
};

// Bytes (at most 4 GiB), or throws an Error whose message says how to write a size.
export function parseSize(s) {
  const bad = () => new Error(`"${s}" is not a size; write it like 4096, 256KiB, 1MiB or 2GiB`);
  const text = s.trim();
  const digits = text.match(/^\d*/)[0];
  if (digits === "") throw bad();
  const scale = SIZE_UNITS[text.slice(digits.length).trim().toLowerCase()];
  if (scale === undefined) throw bad();
  // Exact, as the broker's 64-bit arithmetic is: past 2^64 is no size, past 4 GiB too large.
  const n = BigInt(digits) * BigInt(scale);
  if (n >= 2n ** 64n) throw bad();
  if (n > BigInt(U32_MAX)) throw new Error(`"${s}" is too large; at most 4 GiB`);
  return Number(n);
}

// Bytes compactly, in the largest binary unit that divides them: `4096` reads `4KiB`.
export function fmtSize(n) {
  for (const [unit, size] of [["GiB", 1073741824], ["MiB", 1048576], ["KiB", 1024]]) {
    if (n >= size && n % size === 0) return `${n / size}${unit}`;
  }
  return String(n);
}
