// worksession console: two pages, read only but for one form: the answer to a harness's permission request, a POST of
// JSON to this console's own origin. Every text from the API is set with textContent (never as markup): prompts,
// screens, messages and requests may be written by anyone who can comment on an issue.
"use strict";

const $ = (selector) => document.querySelector(selector);

function cell(text, className) {
  const td = document.createElement("td");
  td.textContent = text == null ? "" : String(text);
  if (className) td.className = className;
  return td;
}

function setRows(tbody, rows) {
  tbody.replaceChildren(...rows);
}

function live(text) {
  $("#live").textContent = text;
}

// The list: every WorkSession, from the watch (one server-sent event per change), filtered by namespace here.
function listPage() {
  const select = $("#namespace");
  let wanted = new URLSearchParams(location.search).get("namespace") || "";
  let sessions = [];
  function render() {
    const namespaces = [...new Set(sessions.map((s) => s.namespace))].sort();
    const chosen = select.value || wanted;
    select.replaceChildren(new Option("All namespaces", ""), ...namespaces.map((ns) => new Option(ns, ns)));
    select.value = namespaces.includes(chosen) ? chosen : "";
    const shown = sessions.filter((s) => !select.value || s.namespace === select.value);
    setRows($("#sessions tbody"), shown.map((s) => {
      const tr = document.createElement("tr");
      tr.dataset.session = s.namespace + "/" + s.name;
      const name = document.createElement("td");
      const link = document.createElement("a");
      link.href = "/sessions/" + encodeURIComponent(s.namespace) + "/" + encodeURIComponent(s.name);
      link.textContent = s.name;
      name.append(link);
      tr.append(cell(s.namespace), name, cell(s.phase, "phase phase-" + s.phase), cell(s.activity), cell(s.resumed),
        cell(s.conversation, "mono"), cell(s.pull_request), cell(s.spent), cell(s.node), cell(s.age),
        cell(s.failure, "failure"));
      return tr;
    }));
    $("#empty").hidden = shown.length > 0;
  }
  select.addEventListener("change", () => {
    wanted = select.value;
    const url = new URL(location.href);
    url.searchParams.delete("token");
    if (select.value) url.searchParams.set("namespace", select.value); else url.searchParams.delete("namespace");
    history.replaceState(null, "", url);
    render();
  });
  const stream = new EventSource("/api/watch");
  stream.addEventListener("sessions", (e) => {
    const data = JSON.parse(e.data);
    if (data.error) { live("cannot read: " + data.error); return; }
    sessions = data.sessions;
    live("live · " + sessions.length + " sessions · " + new Date().toLocaleTimeString());
    render();
  });
  stream.onerror = () => live("reconnecting…");
}

// One session: its summary, conditions, WorkEvents and Events (again at each change), and its screen every 2 s.
function sessionPage() {
  const [, , namespace, name] = location.pathname.split("/").map(decodeURIComponent);
  const base = "/api/sessions/" + encodeURIComponent(namespace) + "/" + encodeURIComponent(name);
  document.title = name + " · worksession console";
  $("#title").textContent = namespace + "/" + name;

  function summary(d) {
    const r = d.row;
    const items = [["Phase", r.phase], ["Activity", r.activity], ["Resumed", r.resumed], ["Conversation", r.conversation],
      ["Pull request", r.pull_request], ["Spent", r.spent],
      ["Node", r.node], ["Harness", r.harness], ["Work item", d.workItem], ["Workdir", d.workdir],
      ["tmux session", d.tmuxSession], ["Age", r.age], ["Last failure", r.failure]];
    $("#summary").replaceChildren(...items.flatMap(([k, v]) => {
      const dt = document.createElement("dt"); dt.textContent = k;
      const dd = document.createElement("dd"); dd.textContent = v || "—";
      if (k === "Phase") dd.id = "phase";
      return [dt, dd];
    }));
  }

  // One refresh at a time; changes meanwhile make one more, so the last answer shown is the newest.
  let busy = false, again = false;
  async function refresh() {
    if (busy) { again = true; return; }
    busy = true;
    try { await show(); } finally {
      busy = false;
      if (again) { again = false; refresh(); }
    }
  }

  // The latest permission request, and the answer buttons while it waits.
  let asked = null;
  function approval(a) {
    $("#approval").hidden = !a;
    if (!a) return;
    if (asked !== a.id) {
      // Another request than the one read: its buttons wait a moment, and the reason typed for the last is gone.
      $("#approval-reason").value = "";
      $("#approval-said").textContent = asked ? "A new request." : "";
      for (const b of [$("#approve"), $("#deny")]) { b.disabled = true; setTimeout(() => { b.disabled = false; }, 1500); }
    }
    asked = a.id;
    $("#approval-id").textContent = a.id;
    $("#approval-request").textContent = a.request;
    $("#approval-deadline").textContent = a.deadline;
    const waiting = !a.decidedTime;
    $("#approval-answer").textContent = waiting ? "waiting" :
      [a.decision || "ended", "by " + (a.by || "?"), a.reason || ""].filter(Boolean).join(" · ");
    $("#approval-form").hidden = !waiting;
  }
  async function answer(decision) {
    const reason = $("#approval-reason").value.trim();
    const response = await fetch(base + "/answer", {
      method: "POST",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify({ request: asked, decision, reason: reason || null }),
    });
    const text = await response.text();
    let d;
    try { d = JSON.parse(text); } catch { d = { error: text || response.statusText }; }
    $("#approval-said").textContent = d.error || d.said;
  }
  $("#approve").addEventListener("click", () => answer("Allow"));
  $("#deny").addEventListener("click", () => answer("Deny"));

  async function show() {
    const response = await fetch(base);
    const d = await response.json();
    if (d.error) { live(d.error); return; }
    summary(d);
    approval(d.approval);
    setRows($("#conditions tbody"), d.conditions.map((c) => {
      const tr = document.createElement("tr");
      tr.append(cell(c.since, "mono"), cell(c.type), cell(c.status), cell(c.reason), cell(c.message));
      return tr;
    }));
    setRows($("#events tbody"), d.events.map((e) => {
      const tr = document.createElement("tr");
      tr.dataset.event = e.name;
      const from = document.createElement("td");
      if (e.url) {
        const a = document.createElement("a");
        a.href = e.url; a.rel = "noreferrer noopener"; a.textContent = e.source;
        from.append(a);
      } else {
        from.textContent = e.source;
      }
      tr.append(cell(e.created, "mono"), cell(e.name), cell(e.phase, "phase phase-" + e.phase), cell(e.via), from,
        cell(e.message));
      return tr;
    }));
    if (d.eventsError) live("WorkEvents: " + d.eventsError);
    if (d.kubeEvents && d.kubeEvents.error) live("Events: " + d.kubeEvents.error);
    const kubeEvents = Array.isArray(d.kubeEvents) ? d.kubeEvents : [];
    setRows($("#kube-events tbody"), kubeEvents.map((n) => {
      const tr = document.createElement("tr");
      tr.append(cell(n.time, "mono"), cell(n.kind), cell(n.reason), cell(n.count), cell(n.note));
      return tr;
    }));
  }

  async function screen() {
    if (document.hidden) { setTimeout(screen, 2000); return; } // a tab not looked at starts no kubectl
    try {
      const d = await (await fetch(base + "/screen")).json();
      const pre = $("#screen");
      if (d.error) { pre.textContent = "(no screen: " + d.error + ")"; return; }
      pre.replaceChildren(...d.runs.map((r) => {
        const span = document.createElement("span");
        span.textContent = r.text;
        if (r.fg) span.style.color = r.fg;
        if (r.bg) span.style.backgroundColor = r.bg;
        span.className = [r.bold && "b", r.dim && "d", r.italic && "i", r.underline && "u"].filter(Boolean).join(" ");
        return span;
      }));
    } finally {
      setTimeout(screen, 2000);
    }
  }

  const stream = new EventSource("/api/watch");
  stream.addEventListener("sessions", () => {
    live("live · " + new Date().toLocaleTimeString());
    refresh();
  });
  stream.onerror = () => live("reconnecting…");
  screen();
}

if (document.body.dataset.page === "list") listPage(); else sessionPage();
