// The rollout dashboard: one page, routed by the URL's hash.
//
//   #/                 modules: phase, target/stable revision, a progress bar per stage
//   #/modules/NAME     stages with their clocks and buttons, clusters per stage, decisions
//   #/clusters         every cluster, filtered and paginated by the server
//   #/clusters/NAME    one cluster: per-module state and its assemblages
//   #/dead-letters     inputs the engine rejected, newest first
//
// Each view mounts its controls once and refreshes its data from the JSON API. Server-sent
// events (/api/events) say what changed; the view on screen refetches only when it shows
// something that changed, so a rollout is watched without reloading the page. A command
// button posts the CLI's command and then asks for the engine's verdict on that event id.
//
// Who: the page starts by asking /api/me (the server sent the login page instead of this one
// to anyone not logged in). Its answer names the user, the session's CSRF token — sent back
// in X-CSRF-Token with every POST, which a page of another origin cannot read — and, per
// namespace, whether RBAC lets the user create RolloutCommands and RolloutApprovals: the
// buttons a user may not press are not shown (the server refuses them anyway, 403).
// No inline script or style anywhere: the Content-Security-Policy forbids both.
"use strict";

const PAGE_SIZE = 500;
const VERDICT_WAIT_MS = 15000;
const STATE_ORDER = ["succeeded", "awaiting_release", "updating", "failed", "pending", "not_ready", "pinned", "blocked", "held", "deferred", "excluded", "awaited"];
const app = { view: null, skew: 0, live: null, me: null };

function h(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
    else if (key === "style") Object.assign(node.style, value);  // CSSOM: allowed by the CSP, unlike style=""
    else if (key === "testid") node.dataset.testid = value;
    else node.setAttribute(key, value === true ? "" : value);
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

async function api(path, options) {
  const response = await fetch(path, options);
  if (response.status === 401) { location.assign("/login"); throw Object.assign(new Error("not logged in"), { status: 401 }); }
  const body = await response.json().catch(() => ({ error: `HTTP ${response.status}` }));
  if (!response.ok) throw Object.assign(new Error(body.error || `HTTP ${response.status}`), { status: response.status });
  return body;
}

function serverNow() { return Date.now() / 1000 + app.skew; }
function learnTime(serverTime) { if (serverTime) app.skew = serverTime - Date.now() / 1000; }
function when(at) { return at ? new Date(at * 1000).toLocaleString() : "-"; }
// A decision's `at` is engine time (from Ticks): 0 when it was decided before the engine's first tick.
function engineWhen(at) {
  return at > 0 ? h("span", { title: "engine time" }, new Date(at * 1000).toLocaleString())
    : h("span", { class: "muted", title: "decided before the engine's first tick: engine time is 0" }, "engine clock not started");
}
function duration(seconds) {
  const s = Math.max(0, Math.round(seconds));
  const parts = [[Math.floor(s / 3600), "h"], [Math.floor((s % 3600) / 60), "m"], [s % 60, "s"]];
  return parts.filter(([n], i) => n || i === 2).map(([n, u]) => `${n}${u}`).join(" ");
}
function link(href, text, testid) { return h("a", { href, testid }, text); }
function badge(text, kind) { return h("span", { class: `badge ${kind || String(text).toLowerCase()}` }, text); }

function progressBar(counts, testid) {
  const total = counts.members || 0;
  const bar = h("div", { class: "bar", testid, title: STATE_ORDER.map((s) => `${s} ${counts[s] || 0}`).join(", ") });
  for (const category of STATE_ORDER) {
    if (total && counts[category]) bar.append(h("span", { class: `fill ${category}`, style: { width: `${(100 * counts[category]) / total}%` } }));
  }
  return h("div", { class: "progress" }, bar, h("span", { class: "count" }, `${counts.succeeded || 0}/${total}`));
}

function pager(page, onMove) {
  const last = page.offset + page.items.length;
  return h("div", { class: "pager" },
    h("button", { disabled: page.offset === 0, onclick: () => onMove(Math.max(0, page.offset - page.limit)) }, "‹ prev"),
    h("span", { testid: "page-range" }, page.total ? `${page.offset + 1}–${last} of ${page.total}` : "none"),
    h("button", { disabled: last >= page.total, onclick: () => onMove(page.offset + page.limit) }, "next ›"));
}

function filters(fields, onChange) {
  const values = {};
  const controls = fields.map((field) => {
    values[field.name] = field.value || "";
    const input = field.options
      ? h("select", { name: field.name, testid: `filter-${field.name}` },
          field.options.map(([value, label]) => h("option", { value, selected: value === values[field.name] }, label)))
      : h("input", { name: field.name, type: "search", placeholder: field.placeholder, testid: `filter-${field.name}` });
    input.addEventListener("input", () => { values[field.name] = input.value; onChange(values); });
    return input;
  });
  return { node: h("div", { class: "filters" }, controls), values };
}

function queryString(values) {
  return new URLSearchParams(Object.entries(values).filter(([, v]) => v !== "" && v !== null)).toString();
}

// --- modules ---------------------------------------------------------------------------------

function modulesView(root) {
  const table = h("div", { testid: "modules" });
  root.append(h("h1", {}, "Modules"), table);
  return {
    async refresh() {
      const overview = await api("/api/overview");
      learnTime(overview.serverTime);
      const rows = overview.modules.map((m) => h("tr", { testid: `module-row-${m.name}` },
        h("td", {}, link(`#/modules/${encodeURIComponent(m.name)}`, m.name)),
        h("td", {}, m.kind),
        h("td", { testid: "phase" }, badge(m.phase), m.paused && m.phase !== "Paused" ? badge("paused") : null),
        h("td", { class: "mono" }, m.targetRevision), h("td", { class: "mono" }, m.stableRevision || "-"),
        h("td", {}, m.currentStage),
        h("td", { class: "stages" }, m.stages.map((s) => h("div", { class: "stage-line" },
          h("span", { class: "stage-name" }, s.name), progressBar(s.counts, `bar-${m.name}-${s.name}`))))));
      table.replaceChildren(overview.modules.length
        ? h("table", {}, h("thead", {}, h("tr", {}, ["Module", "Kind", "Phase", "Target", "Stable", "Stage", "Progress per stage"].map((c) => h("th", {}, c)))), h("tbody", {}, rows))
        : h("p", { class: "empty" }, overview.caughtUp ? "No modules yet: rollout apply -f module.yaml" : "Reading the topics…"),
        h("p", { class: "muted" }, `${overview.clusters} clusters · ${overview.deadLetters} dead letters`));
    },
    wants(change) { return change.all || change.modules.length > 0; },
  };
}

// --- one module ------------------------------------------------------------------------------

function moduleView(root, name) {
  const head = h("div", { testid: "module-head" });
  const verdict = h("div", { class: "verdict", testid: "verdict", hidden: true });
  const stages = h("div", { class: "stage-cards", testid: "stages" });
  const clusters = h("div", { testid: "stage-clusters" });
  const decisions = h("div", { testid: "decisions" });
  const refused = h("div", { testid: "values-refused" });
  const run = h("div", { testid: "run" });
  const release = h("div", { testid: "release" });
  let releaseMembers = [];
  let releaseName = "";
  let releaseLeader = "";  // a Release member's: who approves a stage for every member
  const selection = { stage: null, state: "", q: "", offset: 0 };  // stage null: follow the current stage
  const rejectReasons = {};  // stage → the reason typed so far: the cards are rebuilt on every refresh
  const glass = { reason: "", for: "1h" };  // the break-glass form's fields, kept across refreshes
  let currentStage = "";
  let dependsOn = [];
  let namespace = null;
  const shownStage = () => (selection.stage === null ? currentStage : selection.stage);
  const controls = h("div", { class: "commands", testid: "commands" },
    ["pause", "resume", "rollback", "abort"].map((command) =>
      h("button", { testid: `command-${command}`, class: command === "rollback" || command === "abort" ? "danger" : "",
        onclick: () => sendCommand(name, { command }, verdict) }, command)));
  const stageFilter = h("div", { class: "tabs", testid: "stage-tabs" });
  const cellFilters = filters([
    { name: "q", placeholder: "cluster name" },
    { name: "state", options: [["", "any state"], ...STATE_ORDER.map((s) => [s, s])] },
  ], (values) => { Object.assign(selection, values, { offset: 0 }); loadClusters(); });
  root.append(h("h1", {}, link("#/", "Modules"), " / ", name), head, release, controls, verdict, h("h2", {}, "Stages"), stages, run,
    h("h2", {}, "Clusters"), stageFilter, cellFilters.node, clusters, refused, h("h2", {}, "Decisions"), decisions);

  async function loadClusters() {
    const query = queryString({ ...selection, stage: shownStage(), limit: PAGE_SIZE });
    const page = await api(`/api/modules/${encodeURIComponent(name)}/clusters?${query}`);
    clusters.replaceChildren(
      h("div", { class: "cells" }, page.items.map((t) => h("a", {
        class: `cell ${t.state}`, href: `#/clusters/${encodeURIComponent(t.cluster)}`, testid: `cell-${t.cluster}`,
        "data-state": t.state, title: `${t.cluster}: ${t.state} at ${t.revision || "-"}${t.message ? ` — ${t.message}` : ""}`,
      }, t.cluster))),
      pager(page, (offset) => { selection.offset = offset; loadClusters(); }));
  }

  function stageCard(stage) {
    const limits = [`concurrency ${stage.maxConcurrency}`, `max failures ${stage.maxFailures}`];
    if (stage.minSuccessTime) limits.push(`soak ${stage.minSuccessTime}`);
    if (stage.approvalsRequired) {
      const counted = (stage.approvals || []).filter((a) => a.counted).length;
      limits.push(`approvals ${Math.min(counted, stage.approvalsRequired)}/${stage.approvalsRequired}`);
    } else if (stage.requireApproval) limits.push(stage.approved ? "approved" : "needs approval");
    const clock = stage.soakEndsAt
      ? h("div", { class: "clock", testid: "soak-clock", "data-until": stage.soakEndsAt }, "")
      : stage.awaitingApprovalSince
        ? h("div", { class: "clock", testid: "approval-clock", "data-since": stage.awaitingApprovalSince }, "")
        : null;
    const approve = stage.requireApproval && !stage.approved && may(namespace, "approvals")
      ? h("div", {}, h("button", { class: "approve", testid: `approve-${stage.name}`,
          onclick: () => sendCommand(name, { command: "approve", stage: stage.name }, verdict) }, `approve ${stage.name}`),
        // a Release member: the stage approved for every member at once, through the release's leader
        releaseLeader ? h("button", { class: "approve", testid: `approve-release-${stage.name}`,
          onclick: () => sendCommand(releaseLeader, { command: "approve", stage: stage.name, release: releaseName }, verdict) },
          `approve ${stage.name} for release ${releaseName}`) : null)
      : null;
    const reason = h("input", { class: "reject-reason", testid: `reject-reason-${stage.name}`, placeholder: "why reject",
      value: rejectReasons[stage.name] || "", oninput: (event) => { rejectReasons[stage.name] = event.target.value; } });
    const reject = stage.requireApproval && stage.state !== "Succeeded" && may(namespace, "approvals")
      ? h("div", { class: "reject" }, reason, h("button", { class: "reject", testid: `reject-${stage.name}`,
          onclick: () => sendCommand(name, { command: "reject", stage: stage.name, reason: rejectReasons[stage.name] || "" }, verdict) },
          `reject ${stage.name}`))
      : null;
    return h("section", { class: `stage-card ${stage.state.toLowerCase()}`, testid: `stage-${stage.name}` },
      h("div", { class: "stage-title" }, h("strong", {}, stage.name), h("span", { testid: "stage-state" }, badge(stage.state))),
      progressBar(stage.counts, `stage-bar-${stage.name}`),
      h("div", { class: "muted" }, STATE_ORDER.filter((s) => s !== "awaiting_release" || stage.counts[s])
        .map((s) => `${s.replace("_", " ")} ${stage.counts[s] || 0}`).join(" · ")),
      h("div", { class: "muted" }, limits.join(" · ")), clock, approvalsLine(stage), approve, reject,
      ...stageHolds(stage, dependsOn, releaseName));
  }

  // auto-promotion (rollout/engine/promotions.py): the range followed, its holds, the version available while held
  const promotionHeld = (p) => p.hold || Boolean(p.heldBy);
  const promotionText = (p) => {
    const chart = p.source.chart ? ` chart ${p.source.chart}` : "";
    let text = `follows ${p.semver} of ${p.source.kind} ${p.source.url}${chart}`;
    if (p.hold) text += "; held (autoPromote.hold)";
    if (p.heldBy) text += `; held${p.heldBy.user ? ` by ${p.heldBy.user}` : ""}${p.heldBy.via ? ` via ${p.heldBy.via}` : ""}: ${p.heldBy.reason}`;
    if (p.available) text += `; ${p.available} available, held${p.availableFrom ? ` (seen by ${p.availableFrom})` : ""}`;
    else if (p.promoted) text += `; last promoted ${p.promoted}`;
    return text;
  };

  // `rollout promotion hold|resume` as buttons: hold needs a reason (kept across refreshes)
  let promotionReason = "";
  const promotionControls = (p) => {
    const reason = h("input", { class: "reject-reason", testid: "promotion-reason", placeholder: "why hold",
      value: promotionReason, oninput: (event) => { promotionReason = event.target.value; } });
    return p.heldBy
      ? h("div", { class: "reject" }, h("button", { testid: "promotion-resume",
          onclick: () => sendCommand(name, { command: "resume-promotion" }, verdict) }, "resume promotion"))
      : h("div", { class: "reject" }, reason, h("button", { class: "danger", testid: "promotion-hold",
          onclick: () => sendCommand(name, { command: "hold-promotion", reason: promotionReason }, verdict) }, "hold promotion"));
  };

  // a Release auto-promoted as a unit (rollout/engine/promotions.py "releases"): its ranges, its leader's
  // hold and the combination available; hold and resume go to the leader, which keeps the release's hold
  const releasePromotionText = (p) => {
    let text = `as a unit: ${p.follow.map((f) => `${f.module} ${f.semver}`).join(", ")} — decided by ${p.leader}`;
    const versions = (map) => Object.keys(map).sort().map((m) => `${m} ${map[m]}`).join(", ");
    if (p.hold) text += "; held (the Release's autoPromote.hold)";
    if (p.heldBy) text += `; held${p.heldBy.user ? ` by ${p.heldBy.user}` : ""}${p.heldBy.via ? ` via ${p.heldBy.via}` : ""}: ${p.heldBy.reason}`;
    if (Object.keys(p.available || {}).length) text += `; available ${versions(p.available)}, held${p.availableFrom ? ` (seen by ${p.availableFrom})` : ""}`;
    else if (Object.keys(p.promoted || {}).length) text += `; last promoted ${versions(p.promoted)}`;
    return text;
  };
  const releasePromotionControls = (p) => {
    const reason = h("input", { class: "reject-reason", testid: "release-promotion-reason", placeholder: "why hold the release",
      value: promotionReason, oninput: (event) => { promotionReason = event.target.value; } });
    return p.heldBy
      ? h("div", { class: "reject" }, h("button", { testid: "release-promotion-resume",
          onclick: () => sendCommand(p.leader, { command: "resume-promotion" }, verdict) }, "resume the release's promotion"))
      : h("div", { class: "reject" }, reason, h("button", { class: "danger", testid: "release-promotion-hold",
          onclick: () => sendCommand(p.leader, { command: "hold-promotion", reason: promotionReason }, verdict) }, "hold the release's promotion"));
  };

  // Break-glass (rollout/engine/freeze_gate.py): needs a reason and how long; its own permission.
  function breakGlassForm() {
    return h("div", { class: "reject break-glass" },
      h("input", { class: "reject-reason", testid: "break-glass-reason", placeholder: "why break the freeze",
        value: glass.reason, oninput: (event) => { glass.reason = event.target.value; } }),
      h("input", { class: "reject-reason", testid: "break-glass-for", placeholder: "for (e.g. 1h)", size: 6,
        value: glass.for, oninput: (event) => { glass.for = event.target.value; } }),
      h("button", { class: "reject", testid: "break-glass-button",
        onclick: () => sendCommand(name, { command: "break-glass", reason: glass.reason, for: glass.for }, verdict) },
        "break glass"));
  }

  const missing = () => h("p", { class: "warning", testid: "module-missing" },
    `module ${name} has no status (not applied yet, or deleted); commands still go to the engine, which decides`);

  return {
    async refresh() {
      let page;
      try { page = await api(`/api/modules/${encodeURIComponent(name)}`); } catch (error) {
        if (error.status !== 404) throw error;
        controls.hidden = !may(null, "commands");
        head.replaceChildren(missing());
        stages.replaceChildren();
        return loadClusters();
      }
      learnTime(page.serverTime);
      const s = page.status;
      namespace = (s && s.namespace) || null;
      await knowNamespace(namespace);
      controls.hidden = !may(namespace, "commands");
      head.replaceChildren(s ? h("dl", { class: "facts" },
        h("dt", {}, "Phase"), h("dd", { testid: "module-phase" }, badge(s.phase), s.paused && s.phase !== "Paused" ? badge("paused") : null),
        h("dt", {}, "Target"), h("dd", { class: "mono" }, `${s.targetRevision} (generation ${s.generation})`),
        h("dt", {}, "Stable"), h("dd", { class: "mono" }, s.stableRevision || "-"),
        h("dt", {}, "Stage"), h("dd", { testid: "current-stage" }, s.currentStage),
        h("dt", {}, "Depends on"), h("dd", { testid: "depends-on" }, (s.dependsOn || []).join(", ") || "-"),
        h("dt", {}, "Why"), h("dd", {}, s.lastDecision || s.reason || "-"),
        // why it is not Complete or has not started: joining the fleet, re-sorting, members to go (rollout/engine/views.py)
        ...(s.waiting ? [h("dt", {}, "Waiting"), h("dd", { class: "warning", testid: "waiting" }, s.waiting)] : []),
        ...(s.restricted ? [h("dt", {}, "Restricted"), h("dd", { class: "warning", testid: "restricted" }, s.restricted)] : []),
        ...(s.deleting ? [h("dt", {}, "Deleting"), h("dd", { class: "warning", testid: "deleting" },
          "deleted: waits for the modules depending on it")] : []),
        ...(s.promotion ? [h("dt", {}, "Promotion"), h("dd", {},
          h("span", { class: promotionHeld(s.promotion) ? "warning" : "", testid: "promotion" }, promotionText(s.promotion)),
          may(namespace, "commands") && !s.release ? promotionControls(s.promotion) : null)] : []),
        ...(page.release && page.release.autoPromote ? [h("dt", {}, "Release promotion"), h("dd", {},
          h("span", { class: promotionHeld(page.release.autoPromote) ? "warning" : "", testid: "release-promotion" },
            releasePromotionText(page.release.autoPromote)),
          may(namespace, "commands") ? releasePromotionControls(page.release.autoPromote) : null)] : []),
        ...(s.frozen ? [h("dt", {}, "Frozen"), h("dd", { class: "warning", testid: "frozen" },
          `by calendar ${s.frozen.calendars.join(", ")}${s.frozen.untilAt ? ` until ${s.frozen.untilAt}` : ""}`,
          may(namespace, "breakGlass") ? breakGlassForm() : null)] : []),
        ...(s.breakGlass ? [h("dt", {}, "Break-glass"), h("dd", { class: "warning", testid: "break-glass" },
          `${s.breakGlass.calendar ? `freeze calendar ${s.breakGlass.calendar}` : "every freeze calendar"} overridden`
          + ` until ${s.breakGlass.untilAt}${s.breakGlass.user ? ` by ${s.breakGlass.user}` : ""}`
          + `${s.breakGlass.via ? ` via ${s.breakGlass.via}` : ""}: ${s.breakGlass.reason}`)] : []),
        // a calendar's own break-glass (`rollout break-glass calendar/NAME`): every module it governs
        ...(s.calendarBreakGlass || []).flatMap((g) => [h("dt", {}, "Calendar break-glass"),
          h("dd", { class: "warning", testid: "calendar-break-glass" },
            `freeze calendar ${g.calendar} overridden for every module it governs until ${g.untilAt}`
            + `${g.user ? ` by ${g.user}` : ""}${g.via ? ` via ${g.via}` : ""}: ${g.reason}`)]),
        ...(s.rejection ? [h("dt", {}, "Rejected"), h("dd", { class: "warning", testid: "rejection" },
          `at stage ${s.rejection.stage}${s.rejection.user ? ` by ${s.rejection.user}` : ""}: ${s.rejection.reason}`)] : []))
        : missing());
      const stageList = s ? s.stages : [];
      dependsOn = s ? s.dependsOn || [] : [];
      releaseMembers = page.release ? page.release.members.map((m) => m.module) : [];
      releaseName = page.release ? page.release.name : "";
      releaseLeader = page.release ? page.release.leader : "";
      release.replaceChildren(...(page.release ? releaseSection(page.release) : []));
      stages.replaceChildren(...stageList.map(stageCard));
      currentStage = s ? s.currentStage : "";
      stageFilter.replaceChildren(...[["", "all stages"], ...stageList.map((st) => [st.name, st.name])].map(([value, label]) =>
        h("button", { class: value === shownStage() ? "tab active" : "tab", testid: `tab-${value || "all"}`,
          onclick: () => { selection.stage = value; selection.offset = 0; this.refresh(); } }, label)));
      run.replaceChildren(...runSection(page.run));
      refused.replaceChildren(...(page.valuesRefused || []).length ? [h("h2", {}, "Helm values refused (readOnly)"),
        h("ul", {}, page.valuesRefused.map((r) => h("li", { class: "warning", testid: "value-refused" }, r.reason)))] : []);
      decisions.replaceChildren(h("table", {}, h("thead", {}, h("tr", {}, ["Time", "Action", "Cluster", "Reason"].map((c) => h("th", {}, c)))),
        h("tbody", {}, page.decisions.map((d) => h("tr", { testid: "decision" },
          h("td", { class: "nowrap" }, engineWhen(d.at)), h("td", {}, badge(d.action, "action")), h("td", {}, d.cluster || ""), h("td", {}, d.reason))))));
      await loadClusters();
      tickClocks();
    },
    wants(change) { return change.all || [name, ...releaseMembers].some((m) => change.modules.includes(m)); },
  };
}

// A Release member's release: its phase, every member, the clusters not done for it yet.
function releaseSection(r) {
  const members = h("table", {}, h("thead", {}, h("tr", {}, ["Module", "Phase", "Target", "Stable"].map((c) => h("th", {}, c)))),
    h("tbody", {}, r.members.map((m) => h("tr", { testid: `release-member-${m.module}` },
      h("td", {}, link(`#/modules/${encodeURIComponent(m.module)}`, m.module)), h("td", {}, badge(m.phase)),
      h("td", { class: "mono" }, m.targetRevision || "-"), h("td", { class: "mono" }, m.stableRevision || "-")))));
  const waiting = r.notDone.map((c) => h("li", { testid: `release-cluster-${c.cluster}` }, `${c.cluster}: `,
    ...Object.entries(c.members).map(([m, t]) => h("span", { class: "mono" }, `${m} ${t.revision || "-"} `, badge(t.state)))));
  return [h("h2", {}, "Release ", h("span", { testid: "release-name" }, r.name), " ",
      h("span", { testid: "release-phase" }, badge(r.phase))),
    h("p", { class: "muted", testid: "release-done" },
      `${r.done} of ${r.clusters} cluster(s) done: every member on its revision and succeeded there`),
    members, ...(waiting.length ? [h("ul", {}, waiting)] : [])];
}

async function sendCommand(module, request, box) {
  const label = request.stage ? `${request.command} ${request.stage}` : request.command;
  box.hidden = false;
  box.className = "verdict pending";
  box.textContent = `${label}: sending…`;
  let sent;
  try {
    sent = await api(`/api/modules/${encodeURIComponent(module)}/commands`, {
      method: "POST", headers: { "Content-Type": "application/json", "X-CSRF-Token": app.me.csrfToken }, body: JSON.stringify(request) });
  } catch (error) {
    box.className = "verdict refused";
    box.textContent = `${label}: not sent — ${error.message}`;
    return;
  }
  box.textContent = `${label}: sent (event ${sent.eventId.slice(0, 8)}), waiting for the engine's verdict…`;
  const deadline = Date.now() + VERDICT_WAIT_MS;
  while (Date.now() < deadline) {
    const verdict = await api(`/api/verdicts/${sent.eventId}`);
    if (verdict.state !== "pending") {
      box.className = `verdict ${verdict.state}`;
      box.dataset.state = verdict.state;
      box.textContent = verdict.state === "refused"
        ? `${label}: refused by the engine — ${verdict.reason}`
        : `${label}: accepted — ${(verdict.decisions || []).join("; ") || verdict.reason || "nothing to change"}`;
      return;
    }
    await new Promise((resolve) => setTimeout(resolve, 300));
  }
  box.className = "verdict sent";
  box.dataset.state = "sent";
  box.textContent = `${label}: sent; the engine refused nothing within ${VERDICT_WAIT_MS / 1000} s`;
}

// --- clusters ------------------------------------------------------------------------------

// Who approved a stage for the target and how many more it waits for (rollout/engine/approvals.py).
function approvalsLine(stage) {
  const given = stage.approvals || [];
  if (!stage.requireApproval || (!given.length && stage.state !== "AwaitingApproval")) return null;
  const counted = given.filter((a) => a.counted).length;
  const missing = stage.approved ? 0 : Math.max((stage.approvalsRequired || 1) - counted, 1);
  const groups = (stage.approvalGroups || []).length ? ` from ${stage.approvalGroups.join(" or ")}` : "";
  const who = given.map((a) => `${a.user || "?"} (${a.via || "?"}${a.counted ? "" : ", not counted"})`).join(", ");
  const text = (who ? `approved by ${who}` : "no approval yet") + (missing ? `; waiting for ${missing} more${groups}` : "");
  return h("div", { class: "hold approvals", testid: `approvals-${stage.name}` }, text);
}

// A stage of a stage graph (rollout/engine/stage_graph.py): each upstream edge — passed, soaking
// until when, or waited for — and how many must count (the quorum).
function upstreamHold(stage) {
  if (!stage.after) return null;
  if (!stage.after.length) {
    return h("div", { class: "hold upstream", testid: `upstream-${stage.name}` }, "a root: starts with the rollout");
  }
  const edges = stage.after.map((e) => h("span", { testid: `edge-${stage.name}-${e.stage}`, "data-counts": String(e.counts) },
    e.counts ? `${e.stage} passed` : e.passed ? `${e.stage} passed, soaking until ${e.soakUntil ? when(e.soakUntil) : "the first tick"}`
      : `waiting for ${e.stage}`));
  const counting = stage.after.filter((e) => e.counts).length;
  const parts = [];
  edges.forEach((edge, i) => { if (i) parts.push("; "); parts.push(edge); });
  return h("div", { class: "hold upstream", testid: `upstream-${stage.name}` }, "after ", ...parts,
    ` — ${counting} of ${stage.needed} needed (quorum ${stage.quorum})`);
}

// What holds a stage: its upstream stages, its maintenance window, its health gates, its waves,
// clusters blocked by dependencies, clusters on their target waiting for their release's other members.
function stageHolds(stage, dependsOn, releaseName) {
  const holds = [];
  const upstream = upstreamHold(stage);
  if (upstream) holds.push(upstream);
  const w = stage.window;
  if (w) {
    const text = w.open
      ? `window open${w.closesAt ? ` until ${when(Date.parse(w.closesAt) / 1000)}` : ""}`
      : `window closed${w.nextOpen ? `, opens ${when(w.nextOpen)}` : ""}`;
    holds.push(h("div", { class: `hold ${w.open ? "open" : "closed"}`, testid: `window-${stage.name}` }, text));
  }
  for (const g of stage.gateStates || []) {
    const kind = { pass: "succeeded", fail: "failed", pending: "pending", inconclusive: "updating" }[g.state];
    const a = g.analysis;
    holds.push(h("div", { class: "hold gate", testid: `gate-${stage.name}-${g.name}` },
      `gate ${g.name} (${g.kind}) `, badge(g.state, kind),
      g.dryRun ? h("span", { class: "muted", testid: `dry-run-${stage.name}-${g.name}` }, " dry run: holds nothing") : null,
      a ? h("span", { testid: `analysis-${stage.name}-${g.name}` },
        ` analysis run ${a.run}: ${a.measured}/${a.count} measured${a.interval ? ` every ${a.interval}` : ""}, `
        + `${a.successful} passed, ${a.failed} failed (limit ${a.failureLimit}), `
        + `${a.inconclusive} inconclusive (limit ${a.inconclusiveLimit})`
        + (a.phase === "Inconclusive" && !g.dryRun ? " — paused until resume" : "")) : null,
      g.soakedAt ? h("span", { class: "clock", "data-soaked": g.soakedAt }, "") : null,
      g.message ? h("span", { class: "muted" }, ` ${g.message}`) : null));
  }
  const v = stage.waves;
  if (v) {
    const order = v.seed !== null && v.seed !== undefined ? `random order, seed ${v.seed}` : "sorting order";
    const members = stage.waveMembers;
    holds.push(h("div", { class: "hold waves", testid: `waves-${stage.name}` },
      `waves of ${v.size} in ${order}${v.delay ? `, ${v.delay} apart` : ""}`,
      v.current ? h("span", { testid: `wave-${stage.name}` }, ` · wave ${v.current}/${v.count}`) : null,
      v.nextWave ? h("span", { class: "clock", "data-wave-at": v.nextWave, testid: `next-wave-${stage.name}` }, "") : null,
      members ? h("div", { class: "muted mono", testid: `wave-members-${stage.name}` },
        `wave ${members.wave}: ${members.clusters.join(", ")}${members.more > 0 ? ` and ${members.more} more` : ""}`) : null));
  }
  if (stage.blocked) {
    holds.push(h("div", { class: "hold blocked", testid: `blocked-${stage.name}` },
      `${stage.blocked} blocked, waiting for ${dependsOn.join(", ") || "dependencies"}`));
  }
  if (stage.counts && stage.counts.awaiting_release) {
    holds.push(h("div", { class: "hold blocked", testid: `awaiting-release-${stage.name}` },
      `${stage.counts.awaiting_release} on their target, waiting for release ${releaseName || "?"}'s other members there`));
  }
  if (stage.counts && stage.counts.held) {
    holds.push(h("div", { class: "hold blocked", testid: `held-${stage.name}` },
      `${stage.counts.held} held by their owners (rollout.dev/hold)`));
  }
  if (stage.counts && stage.counts.awaited) {
    holds.push(h("div", { class: "hold blocked", testid: `awaited-${stage.name}` },
      `waits for ${stage.counts.awaited} offline member(s) to come back (offline.wait)`));
  }
  if (stage.counts && (stage.counts.deferred || stage.counts.excluded)) {
    const late = [stage.counts.deferred ? `${stage.counts.deferred} deferred to the next run` : "",
      stage.counts.excluded ? `${stage.counts.excluded} excluded from this run` : ""].filter(Boolean).join(", ");
    holds.push(h("div", { class: "hold blocked", testid: `late-${stage.name}` }, `late joiners: ${late} (lateJoiners)`));
  }
  return holds;
}

// The module's run: its members fixed at its start, and who it went on without, and why.
function runSection(r) {
  if (!r) return [];
  const what = r.mode === "rollback" ? "rollback to" : "rollout of";
  // children, not one string: engineWhen is an element (with its title), not text
  const facts = [`run #${r.number}, ${what} generation ${r.generation}: ${r.members} member(s) fixed at its start`,
    ...(r.startedAt ? [" (", engineWhen(r.startedAt), ")"] : []), r.left ? `, ${r.left} left since` : "",
    r.followUp ? ` — the next run for the ${r.joiners} late joiner(s) the run before deferred`
      : r.joiners ? `, ${r.joiners} late joiner(s) of the run before taken in` : ""];
  const rows = r.exceptions.map((m) => h("tr", { testid: `run-member-${m.cluster}`, "data-state": m.state },
    h("td", {}, link(`#/clusters/${encodeURIComponent(m.cluster)}`, m.cluster)), h("td", {}, m.stage),
    h("td", {}, badge(m.state, m.state === "Failed" ? "failed"
      : ["Left", "SkippedOffline", "AwaitingReturn"].includes(m.state) ? "not_ready" : "pending")),
    h("td", {}, m.why || "")));
  const more = r.exceptionsTotal > r.exceptions.length
    ? h("p", { class: "muted" }, `… and ${r.exceptionsTotal - r.exceptions.length} more`) : null;
  return [h("h2", {}, "Run"), h("p", { testid: "run-facts" }, ...facts),
    rows.length ? h("table", {}, h("thead", {}, h("tr", {}, ["Cluster", "Stage", "State", "Why"].map((c) => h("th", {}, c)))),
      h("tbody", {}, rows)) : h("p", { class: "muted" }, "every member is on its way or on the target"),
    ...(more ? [more] : [])];  // replaceChildren would write a null as the text "null"
}

// A cluster's lease: left the fleet, the age of its latest heartbeat (expired past its lease), or none.
function leaseCell(lease, testid) {
  if (!lease) return h("span", { class: "muted" }, "-");
  if (lease.left) return h("span", { testid }, badge("left", "failed"));
  if (!lease.heartbeatAt) return h("span", { class: "muted", testid }, "no heartbeat");
  return h("span", { testid, class: "lease", "data-lease-at": lease.heartbeatAt, "data-lease-expires": lease.expiresAt }, "");
}

function clustersView(root) {
  const list = h("div", { testid: "clusters" });
  const selection = { q: "", state: "", offset: 0 };
  const controls = filters([
    { name: "q", placeholder: "name or label (ring=canary)" },
    { name: "state", options: [["", "in any state"], ...STATE_ORDER.map((s) => [s, `${s} in some module`])] },
  ], (values) => { Object.assign(selection, values, { offset: 0 }); view.refresh(); });
  root.append(h("h1", {}, "Clusters"), controls.node, list);
  const view = {
    async refresh() {
      const page = await api(`/api/clusters?${queryString({ ...selection, limit: 100 })}`);
      list.replaceChildren(h("table", {}, h("thead", {}, h("tr", {}, ["Cluster", "Namespace", "Ready", "Lease", "Labels", "Modules"].map((c) => h("th", {}, c)))),
        h("tbody", {}, page.items.map((c) => h("tr", { testid: `cluster-row-${c.name}` },
          h("td", {}, link(`#/clusters/${encodeURIComponent(c.name)}`, c.name)), h("td", {}, c.namespace || "-"),
          h("td", {}, c.observed ? badge(c.ready ? "ready" : "not ready", c.ready ? "succeeded" : "failed") : badge("unobserved", "pending")),
          h("td", {}, leaseCell(c.lease, `lease-${c.name}`)),
          h("td", { class: "mono small" }, Object.entries(c.labels).map(([k, v]) => `${k}=${v}`).join(" ")),
          h("td", {}, Object.entries(c.states).map(([s, n]) => badge(`${n} ${s}`, s))))))),
        pager(page, (offset) => { selection.offset = offset; view.refresh(); }));
      tickClocks();
    },
    wants(change) { return change.all || change.clusters.length > 0; },
  };
  return view;
}

function clusterView(root, name) {
  const body = h("div", { testid: "cluster" });
  root.append(h("h1", {}, link("#/clusters", "Clusters"), " / ", name), body);
  const helmValues = (s) => s.sync?.package?.helm
    ? h("pre", { class: "mono", testid: `helm-values-${s.module}` }, `values: ${JSON.stringify(s.sync.package.helm.values || {}, null, 2)}`)
    : null;
  const syncs = (snapshot) => snapshot ? h("ul", {}, (snapshot.spec?.syncs || []).map((s) =>
    h("li", { class: "mono" }, `${s.module}@${s.revision}`, helmValues(s)))) : h("p", { class: "muted" }, "none");
  return {
    async refresh() {
      const c = await api(`/api/clusters/${encodeURIComponent(name)}`);
      body.replaceChildren(
        h("dl", { class: "facts" }, h("dt", {}, "Ready"), h("dd", {}, c.cluster ? (c.ready ? "yes" : "no") : "not observed"),
          h("dt", {}, "Lease"), h("dd", {}, leaseCell(c.lease, "cluster-lease")),
          h("dt", {}, "Labels"), h("dd", { class: "mono" }, Object.entries(c.labels).map(([k, v]) => `${k}=${v}`).join(" ") || "-")),
        h("h2", {}, "Modules"),
        h("table", {}, h("thead", {}, h("tr", {}, ["Module", "Stage", "State", "Revision", "Message"].map((x) => h("th", {}, x)))),
          h("tbody", {}, c.modules.map((m) => h("tr", { testid: `cluster-module-${m.module}` },
            h("td", {}, link(`#/modules/${encodeURIComponent(m.module)}`, m.module)), h("td", {}, m.stage),
            h("td", {}, badge(m.state)), h("td", { class: "mono" }, m.revision || "-"), h("td", {}, m.message || ""))))),
        h("h2", {}, `RemoteAssemblage${c.remote ? ` (version ${c.remote.version})` : ""}`), syncs(c.remote),
        h("h2", {}, `ProxyAssemblage${c.proxy ? ` (version ${c.proxy.version})` : ""}`), syncs(c.proxy));
      tickClocks();
    },
    wants(change) { return change.all || change.clusters.includes(name); },
  };
}

// --- dead letters --------------------------------------------------------------------------

function deadLettersView(root) {
  const list = h("div", { testid: "dead-letters" });
  const selection = { q: "", offset: 0 };
  const controls = filters([{ name: "q", placeholder: "reason, stage, topic or key" }],
    (values) => { Object.assign(selection, values, { offset: 0 }); view.refresh(); });
  root.append(h("h1", {}, "Dead letters"), controls.node, list);
  const view = {
    async refresh() {
      const page = await api(`/api/dead-letters?${queryString({ ...selection, limit: 100 })}`);
      list.replaceChildren(h("table", {}, h("thead", {}, h("tr", {}, ["Time", "Stage", "Input", "Key", "Reason"].map((c) => h("th", {}, c)))),
        h("tbody", {}, page.items.map((d) => h("tr", { testid: "dead-letter" }, h("td", { class: "nowrap" }, when(d.at)),
          h("td", {}, d.stage || "-"), h("td", { class: "mono" }, `${d.topic}[${d.partition}]@${d.offset}`),
          h("td", { class: "mono" }, d.key || "-"), h("td", {}, d.reason))))),
        pager(page, (offset) => { selection.offset = offset; view.refresh(); }));
    },
    wants(change) { return change.deadLetters; },
  };
  return view;
}

// --- who is logged in ------------------------------------------------------------------------

async function loadMe() {
  app.me = await api("/api/me");
  document.getElementById("user").textContent = `${app.me.user}${app.me.groups.length ? ` (${app.me.groups.join(", ")})` : ""}`;
  document.getElementById("logout").hidden = app.me.source === "insecure";
  document.getElementById("insecure-banner").hidden = !app.me.insecure;
}

// May the user create RolloutCommands ("commands") / RolloutApprovals ("approvals") in `namespace`?
function may(namespace, what) {
  const can = app.me && app.me.can[namespace || app.me.fallbackNamespace];
  return Boolean(can && can[what]);
}

async function knowNamespace(namespace) {
  if (namespace && app.me && !(namespace in app.me.can)) await loadMe();  // a module in a namespace new to the page
}

async function logout() {
  try {
    await api("/auth/logout", { method: "POST", headers: { "X-CSRF-Token": app.me.csrfToken } });
  } finally { location.assign("/login"); }
}

// --- routing, live updates, clocks ---------------------------------------------------------

function mount() {
  const root = document.getElementById("view");
  root.replaceChildren();
  const [, page, name] = (location.hash.replace(/^#\/?/, "").match(/^([^/]*)\/?(.*)$/) || []);
  const decoded = name ? decodeURIComponent(name) : "";
  app.view = page === "modules" && decoded ? moduleView(root, decoded)
    : page === "clusters" && decoded ? clusterView(root, decoded)
      : page === "clusters" ? clustersView(root)
        : page === "dead-letters" ? deadLettersView(root) : modulesView(root);
  for (const a of document.querySelectorAll("nav a")) a.classList.toggle("active", a.dataset.nav === (page || "modules"));
  refresh();
}

async function refresh() {
  const view = app.view;
  try { await view.refresh(); } catch (error) {
    if (view === app.view) document.getElementById("view").prepend(h("p", { class: "warning" }, `cannot load: ${error.message}`));
  }
}

function connect() {
  const status = document.getElementById("live");
  const source = new EventSource("/api/events");
  source.addEventListener("hello", (event) => {
    learnTime(JSON.parse(event.data).serverTime);
    status.textContent = "live";
    status.className = "live on";
    refresh();
  });
  source.addEventListener("change", (event) => {
    const change = JSON.parse(event.data);
    learnTime(change.serverTime);
    if (app.view && app.view.wants(change)) refresh();
  });
  source.onerror = () => { status.textContent = "reconnecting…"; status.className = "live off"; };
}

function tickClocks() {
  const now = serverNow();
  for (const node of document.querySelectorAll("[data-until]")) {
    const left = Number(node.dataset.until) - now;
    node.textContent = left > 0 ? `soak ends in ${duration(left)}` : "soak over; waiting for the next tick";
  }
  for (const node of document.querySelectorAll("[data-soaked]")) {
    const left = Number(node.dataset.soaked) - now;
    node.textContent = left > 0 ? ` passing; soaked in ${duration(left)}` : " passed for its soak";
  }
  for (const node of document.querySelectorAll("[data-lease-at]")) {
    const age = `${duration(now - Number(node.dataset.leaseAt))} ago`;
    node.textContent = now > Number(node.dataset.leaseExpires) ? `${age} (expired)` : age;
    node.classList.toggle("expired", now > Number(node.dataset.leaseExpires));
  }
  for (const node of document.querySelectorAll("[data-wave-at]")) {
    const left = Number(node.dataset.waveAt) - now;
    node.textContent = left > 0 ? ` · next wave in ${duration(left)}` : " · next wave at the next tick";
  }
  for (const node of document.querySelectorAll("[data-since]")) {
    node.textContent = `awaiting approval for ${duration(now - Number(node.dataset.since))}`;
  }
}

window.addEventListener("hashchange", mount);
document.addEventListener("DOMContentLoaded", async () => {
  document.getElementById("logout").addEventListener("click", logout);
  await loadMe();
  mount(); connect(); setInterval(tickClocks, 1000);
});
