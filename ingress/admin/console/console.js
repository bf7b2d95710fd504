// The admin console: signs in with an admin key or with the OIDC provider (a session cookie and a CSRF token,
// session.py, sso.py), then reads and changes keys and tenants, and reads spend and the audit log, through
// /admin/v1 alone. Plain DOM: every value from the API is set as text, never parsed as markup.
"use strict";

const API = "/admin/v1";
const state = { actor: null, role: null, csrf: null, keys: [], tenants: [], auditNext: null, auditFrom: 0 };
const $ = (selector) => document.querySelector(selector);

class ApiError extends Error {
  constructor(status, message, retryAfter) {
    super(message);
    this.status = status;
    this.retryAfter = retryAfter;
  }
}

async function api(method, path, body) {
  const headers = { Accept: "application/json" };
  if (body !== undefined) headers["Content-Type"] = "application/json";
  if (method !== "GET" && state.csrf) headers["X-CSRF-Token"] = state.csrf;
  const answer = await fetch(API + path, {
    method, headers, body: body === undefined ? undefined : JSON.stringify(body),
    credentials: "same-origin", cache: "no-store",
  });
  let data = null;
  try { data = await answer.json(); } catch (_) { data = null; }
  if (!answer.ok) {
    const message = data && data.error ? data.error.message : `${answer.status} ${answer.statusText}`;
    throw new ApiError(answer.status, message, answer.headers.get("Retry-After"));
  }
  return data;
}

function el(tag, text, attrs) {
  const node = document.createElement(tag);
  if (text !== undefined && text !== null) node.textContent = String(text);
  for (const [name, value] of Object.entries(attrs || {})) node.setAttribute(name, value);
  return node;
}

function when(seconds) {  // UTC, to the second
  return seconds === null || seconds === undefined ? "" : new Date(seconds * 1000).toISOString().slice(0, 19).replace("T", " ");
}

function compact(value) {
  return JSON.stringify(value || {});
}

function say(text) {
  $("#status").textContent = text;
  $("#error").textContent = "";
}

function fail(error) {
  if (error instanceof ApiError && error.status === 401) return signedOut();
  $("#error").textContent = error.message;
  $("#status").textContent = "";
}

function models(text) {
  const list = text.split(",").map((m) => m.trim()).filter((m) => m);
  return list.length ? list : ["*"];
}

function limits(text, what) {
  try {
    const value = JSON.parse(text.trim() || "{}");
    if (value === null || typeof value !== "object" || Array.isArray(value)) throw new Error("not an object");
    return value;
  } catch (error) {
    throw new ApiError(0, `${what}: not a JSON object (${error.message})`);
  }
}

// --- signing in and out -------------------------------------------------------------------------------

function signedIn(who) {
  state.actor = who.actor;
  state.role = who.role;
  state.csrf = who.csrf_token;
  document.body.classList.toggle("viewer", who.role !== "admin");
  $("#actor").textContent = `${who.actor} (${who.role})`;
  $("#who").hidden = false;
  $("#sign-in").hidden = true;
  $("#app").hidden = false;
  route();
}

function signedOut() {
  state.actor = state.role = state.csrf = null;
  document.body.classList.remove("viewer");
  $("#who").hidden = true;
  $("#app").hidden = true;
  $("#sign-in").hidden = false;
  $("#admin-key").focus();
}

// What a refused "Sign in with SSO" comes back with (/admin/#signin-error=<reason>: sso.py).
const SSO_ERRORS = {
  state: "The sign-in could not be matched to one started here (it expired, was used, or was started elsewhere). Try again.",
  denied: "The sign-in provider did not sign you in.",
  exchange: "The sign-in provider's answer could not be used. Try again.",
  token: "The sign-in provider's ID token was refused.",
  no_role: "You are signed in with the provider, but your account has no admin role here.",
  rate_limited: "Too many sign-ins from this address (failed, or started and not finished); wait a minute.",
  unavailable: "The sign-in provider or the session store did not answer. Try again.",
};

function ssoError() {  // shown once; the address loses the fragment
  const match = /^#signin-error=([a-z_]+)$/.exec(location.hash);
  if (!match) return;
  history.replaceState(null, "", location.pathname + location.search);
  $("#sign-in-error").textContent = SSO_ERRORS[match[1]] || "The sign-in failed.";
}

async function signIn(event) {
  event.preventDefault();
  const input = $("#admin-key");
  $("#sign-in-error").textContent = "";
  try {
    const who = await api("POST", "/session", { key: input.value.trim() });
    input.value = "";
    signedIn(who);
  } catch (error) {
    const wait = error.retryAfter ? ` (wait ${error.retryAfter} s)` : "";
    $("#sign-in-error").textContent = error.message + wait;
  }
}

async function signOut() {
  try { await api("DELETE", "/session"); } catch (_) { /* signed out either way */ }
  signedOut();
}

// --- views --------------------------------------------------------------------------------------------

const VIEWS = { keys: showKeys, tenants: showTenants, spend: showSpend, audit: showAudit };

function route() {
  if (!state.actor) return;
  const name = VIEWS[location.hash.slice(1)] ? location.hash.slice(1) : "keys";
  for (const view of document.querySelectorAll(".view")) view.hidden = view.id !== `view-${name}`;
  for (const link of document.querySelectorAll("nav a")) {
    if (link.id === `nav-${name}`) link.setAttribute("aria-current", "page"); else link.removeAttribute("aria-current");
  }
  for (const panel of document.querySelectorAll(".panel")) panel.hidden = true;
  $("#status").textContent = "";
  $("#error").textContent = "";
  VIEWS[name]().catch(fail);
}

function actions(row, buttons) {
  const cell = el("td", null, { class: "writer" });
  for (const [label, onClick] of buttons) {
    const button = el("button", label, { type: "button" });
    button.addEventListener("click", onClick);
    cell.append(button);
  }
  row.append(cell);
}

function empty(body, text, columns) {
  const row = el("tr");
  row.append(el("td", text, { colspan: String(columns) }));
  body.append(row);
}

function openPanel(selector, subject, fill) {
  for (const panel of document.querySelectorAll(".panel")) panel.hidden = true;
  const form = $(selector);
  form.dataset.subject = subject;
  form.querySelector(".subject").textContent = subject;
  if (fill) fill(form);
  form.hidden = false;
  const first = form.querySelector("input, textarea, button");
  if (first) first.focus();
}

// keys

async function showKeys() {
  const [keys, tenants] = await Promise.all([api("GET", "/keys"), api("GET", "/tenants")]);
  state.keys = keys.data;
  const names = $("#tenant-names");
  names.replaceChildren(...tenants.data.map((t) => el("option", null, { value: t.name })));
  const body = $("#keys-table tbody");
  body.replaceChildren();
  for (const key of state.keys) {
    const row = el("tr", null, { "data-id": key.id });
    row.append(el("td", key.id), el("td", key.name || ""), el("td", key.tenant), el("td", key.models.join(", ")),
      el("td", compact(key.limits), { class: "limits" }), el("td", when(key.expires_at), { class: "when" }),
      el("td", when(key.rotating_until), { class: "when" }), el("td", when(key.created_at), { class: "when" }));
    actions(row, [["Edit", () => openPanel("#key-edit", key.id, (form) => {
      form.elements.name.value = key.name || "";
      form.elements.models.value = key.models.join(", ");
      form.elements.limits.value = JSON.stringify(key.limits || {}, null, 1);
    })], ["Rotate", () => openPanel("#key-rotate", key.id)], ["Revoke", () => openPanel("#key-revoke", key.id)]]);
    body.append(row);
  }
  if (!state.keys.length) empty(body, "No stored key.", 9);
}

function showSecret(secret) {
  $("#secret-value").textContent = secret;
  $("#secret").hidden = false;
}

// Each writing form's change: made with the form's values (its panel's subject, the key or tenant it opened
// for), answering what to say; wired by changes() below.

async function createKey(form) {
  const body = { tenant: form.elements.tenant.value.trim(), models: models(form.elements.models.value),
    limits: limits(form.elements.limits.value, "limits") };
  if (form.elements.name.value.trim()) body.name = form.elements.name.value.trim();
  const made = await api("POST", "/keys", body);
  showSecret(made.key);
  return `Key ${made.id} created.`;
}

async function editKey(form, id) {
  await api("PATCH", `/keys/${encodeURIComponent(id)}`, { models: models(form.elements.models.value),
    limits: limits(form.elements.limits.value, "limits"), name: form.elements.name.value.trim() || null });
  return `Key ${id} saved.`;
}

async function rotateKey(form, id) {
  const rotated = await api("POST", `/keys/${encodeURIComponent(id)}/rotate`,
    { grace_seconds: Number(form.elements.grace.value || 0) });
  showSecret(rotated.key);
  return `Key ${id} rotated.`;
}

async function revokeKey(form, id) {
  await api("DELETE", `/keys/${encodeURIComponent(id)}`);
  return `Key ${id} revoked.`;
}

// tenants

async function showTenants() {
  const tenants = await api("GET", "/tenants");
  state.tenants = tenants.data;
  const body = $("#tenants-table tbody");
  body.replaceChildren();
  for (const tenant of state.tenants) {
    const row = el("tr", null, { "data-name": tenant.name });
    row.append(el("td", tenant.name), el("td", tenant.models.join(", ")),
      el("td", compact(tenant.limits), { class: "limits" }), el("td", tenant.configured ? "yes" : "no"),
      el("td", when(tenant.updated_at), { class: "when" }));
    actions(row, [["Edit", () => openPanel("#tenant-edit", tenant.name, (form) => {
      form.elements.models.value = tenant.models.join(", ");
      form.elements.limits.value = JSON.stringify(tenant.limits || {}, null, 1);
    })], ["Delete", () => openPanel("#tenant-delete", tenant.name)]]);
    body.append(row);
  }
  if (!state.tenants.length) empty(body, "No stored tenant.", 6);
}

async function createTenant(form) {
  const name = form.elements.name.value.trim();
  await api("POST", "/tenants", { name, models: models(form.elements.models.value),
    limits: limits(form.elements.limits.value, "limits") });
  return `Tenant ${name} created.`;
}

async function editTenant(form, name) {
  await api("PATCH", `/tenants/${encodeURIComponent(name)}`,
    { models: models(form.elements.models.value), limits: limits(form.elements.limits.value, "limits") });
  return `Tenant ${name} saved.`;
}

async function deleteTenant(form, name) {
  await api("DELETE", `/tenants/${encodeURIComponent(name)}`);
  return `Tenant ${name} deleted.`;
}

// A writing form submitted: its change made and said, then the form emptied (a panel closed) and its view
// read again. A refusal is said, and the form kept as it was, to be corrected.
function changes(selector, change, show) {
  $(selector).addEventListener("submit", async (event) => {
    event.preventDefault();
    const form = event.target;
    try {
      const done = await change(form, form.dataset.subject);
      if (form.classList.contains("panel")) form.hidden = true; else form.reset();
      say(done);
      await show();
    } catch (error) { fail(error); }
  });
}

// spend: cost_usd is a decimal string; it is summed exactly, as integers of its smallest digit

function decimal(text) {
  const [whole, fraction = ""] = String(text).split(".");
  return { digits: BigInt(whole + fraction || "0"), scale: fraction.length };
}

function scaled(value, scale) {
  return value.digits * 10n ** BigInt(scale - value.scale);
}

function formatted(digits, scale) {
  const negative = digits < 0n;
  const text = (negative ? -digits : digits).toString().padStart(scale + 1, "0");
  const whole = scale ? text.slice(0, -scale) : text;
  return (negative ? "-" : "") + whole + (scale ? "." + text.slice(-scale) : "");
}

function byDay(rows) {
  const scale = Math.max(0, ...rows.map((row) => decimal(row.cost_usd ?? "0").scale));
  const days = new Map();
  for (const row of rows) {
    const day = days.get(row.period) || { requests: 0, cost: 0n };
    day.requests += Number(row.requests || 0);
    day.cost += scaled(decimal(row.cost_usd ?? "0"), scale);
    days.set(row.period, day);
  }
  return { scale, days: [...days.entries()].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)) };
}

function svg(tag, attrs, text) {
  const node = document.createElementNS("http://www.w3.org/2000/svg", tag);
  for (const [name, value] of Object.entries(attrs)) node.setAttribute(name, String(value));
  if (text !== undefined) node.textContent = text;
  return node;
}

function chart(days, scale) {
  const figure = $("#spend-chart");
  const title = $("#spend-chart-title");
  figure.replaceChildren(title);
  const width = 720, height = 260, left = 100, bottom = 30, top = 10;
  const most = days.reduce((m, [, day]) => (day.cost > m ? day.cost : m), 0n);
  const plot = height - bottom - top;
  const step = (width - left - 10) / Math.max(days.length, 1);
  figure.append(svg("line", { class: "axis", x1: left, y1: top, x2: left, y2: height - bottom }),
    svg("line", { class: "axis", x1: left, y1: height - bottom, x2: width - 10, y2: height - bottom }),
    svg("text", { x: left - 6, y: top + 10, "text-anchor": "end" }, formatted(most, scale)),
    svg("text", { x: left - 6, y: height - bottom, "text-anchor": "end" }, "0"));
  days.forEach(([period, day], i) => {
    const h = most > 0n && day.cost > 0n ? Math.max(Number((day.cost * 10000n) / most) / 10000 * plot, 1) : 0;
    const bar = svg("rect", { class: "bar", x: left + i * step + step * 0.1, y: height - bottom - h,
      width: Math.max(step * 0.8, 1), height: h });
    bar.append(svg("title", {}, `${period}: ${formatted(day.cost, scale)} USD`));
    figure.append(bar);
    if (i === 0 || i === days.length - 1 || days.length <= 10) {
      figure.append(svg("text", { x: left + i * step + step / 2, y: height - 10, "text-anchor": "middle" }, period));
    }
  });
}

function isoDay(date) {
  return date.toISOString().slice(0, 10);
}

async function showSpend() {
  const form = $("#spend-range");
  if (!form.elements.to.value) {
    const today = new Date();
    form.elements.to.value = isoDay(today);
    form.elements.from.value = isoDay(new Date(today.getTime() - 29 * 86400000));
  }
  await loadSpend();
}

async function loadSpend(event) {
  if (event) event.preventDefault();
  const form = $("#spend-range");
  const query = new URLSearchParams({ from: form.elements.from.value, to: form.elements.to.value,
    granularity: "day", group_by: "tenant", format: "json" });
  let answer;
  try {
    answer = await api("GET", `/spend?${query}`);
  } catch (error) {
    if (error.status !== 404) return fail(error);
    answer = { data: [] };  // no spend ledger on this edge
  }
  const rows = answer.data || [];
  $("#spend-empty").hidden = rows.length > 0;
  $("#spend-result").hidden = rows.length === 0;
  if (!rows.length) return;
  const { scale, days } = byDay(rows);
  const body = $("#spend-table tbody");
  body.replaceChildren();
  let requests = 0, cost = 0n;
  for (const [period, day] of days) {
    const row = el("tr", null, { "data-period": period });
    row.append(el("th", period, { scope: "row" }), el("td", day.requests), el("td", formatted(day.cost, scale)));
    body.append(row);
    requests += day.requests;
    cost += day.cost;
  }
  $("#spend-total-requests").textContent = String(requests);
  $("#spend-total-cost").textContent = formatted(cost, scale);
  chart(days, scale);
}

// audit log: the newest page first, older ones on demand

const AUDIT_PAGE = 100;

function changed(entry) {
  const before = entry.before || {}, after = entry.after || {};
  if (!entry.before) return "made";
  if (!entry.after) return entry.action === "delete" ? "deleted" : "revoked";
  const names = Object.keys({ ...before, ...after })
    .filter((name) => name !== "updated_at" && JSON.stringify(before[name]) !== JSON.stringify(after[name]));
  if (entry.action === "rotate") {
    return after.rotating_until ? `secret rotated; the former one works until ${when(after.rotating_until)}` : "secret rotated";
  }
  return names.map((name) => `${name}: ${compact(before[name])} → ${compact(after[name])}`).join("; ");
}

async function showAudit() {
  const { total } = await api("GET", "/audit?limit=0");
  $("#audit-table tbody").replaceChildren();
  $("#audit-count").textContent = `${total} entries.`;
  state.auditFrom = total;
  await olderAudit();
}

async function olderAudit() {
  const after = Math.max(state.auditFrom - AUDIT_PAGE, 0);
  const page = await api("GET", `/audit?after=${after}&limit=${state.auditFrom - after}`);
  const body = $("#audit-table tbody");
  for (const entry of page.data.reverse()) {
    const row = el("tr", null, { "data-seq": entry.seq });
    row.append(el("td", entry.seq), el("td", when(entry.at), { class: "when" }), el("td", entry.actor), el("td", entry.action),
      el("td", entry.key_id || entry.tenant || ""), el("td", entry.client || ""), el("td", changed(entry)));
    body.append(row);
  }
  state.auditFrom = after;
  $("#audit-older").hidden = after === 0;
}

// --- start ----------------------------------------------------------------------------------------------

document.addEventListener("DOMContentLoaded", async () => {
  $("#sign-in-form").addEventListener("submit", signIn);
  $("#sign-out").addEventListener("click", signOut);
  changes("#key-create", createKey, showKeys);
  changes("#key-edit", editKey, showKeys);
  changes("#key-rotate", rotateKey, showKeys);
  changes("#key-revoke", revokeKey, showKeys);
  changes("#tenant-create", createTenant, showTenants);
  changes("#tenant-edit", editTenant, showTenants);
  changes("#tenant-delete", deleteTenant, showTenants);
  $("#spend-range").addEventListener("submit", (event) => loadSpend(event).catch(fail));
  $("#audit-older").addEventListener("click", () => olderAudit().catch(fail));
  $("#secret-done").addEventListener("click", () => {
    $("#secret-value").textContent = "";
    $("#secret").hidden = true;
  });
  for (const cancel of document.querySelectorAll(".panel .cancel")) {
    cancel.addEventListener("click", () => { cancel.closest("form").hidden = true; });
  }
  window.addEventListener("hashchange", route);
  $("#sso").hidden = document.body.dataset.sso !== "on";
  ssoError();
  try {
    signedIn(await api("GET", "/session"));  // a session still open (the page reloaded)
  } catch (_) {
    signedOut();
  }
});
