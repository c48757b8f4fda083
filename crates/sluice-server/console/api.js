// The v1 API as the console calls it: the operator's key from this tab's session storage,
// JSON in and out, the broker's error envelope turned into an ApiError.

export const KEY = "sluice.key";

export class ApiError extends Error {
  constructor(status, code, message) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

// The headers every call carries: the key, when one was given.
export function authHeaders() {
  const headers = {};
  const key = sessionStorage.getItem(KEY);
  if (key) headers.Authorization = `Bearer ${key}`;
  return headers;
}

// Calls the API; `signal` aborts the call when the page that made it is left.
export async function api(method, path, body, signal) {
  const headers = authHeaders();
  if (body !== undefined) headers["Content-Type"] = "application/json";
  const resp = await fetch(path, {
    method,
    headers,
    body: body === undefined ? undefined : JSON.stringify(body),
    signal,
  });
  if (resp.status === 204) return null;
  const text = await resp.text();
  let data = null;
  try {
    data = text ? JSON.parse(text) : null;
  } catch {
    data = text;
  }
  if (!resp.ok) {
    const err = data && data.error ? data.error : { code: "unknown", message: resp.statusText };
    throw new ApiError(resp.status, err.code, err.message);
  }
  return data;
}

export const enc = encodeURIComponent;
export const queuePath = (q) => `/v1/queues/${enc(q)}`;
