// The trial-run page: each turn goes to the run API as an event stream; the reply is shown as it
// streams, then the server-rendered turn (with the inbox's answer widget for what it asks) replaces it.
(function () {
  "use strict";
  // Another agent starts at its current version.
  const agentSelect = document.getElementById("agent-select");
  if (agentSelect) {
    agentSelect.addEventListener("change", () => {
      agentSelect.form.version.value = "";
      agentSelect.form.requestSubmit();
    });
  }
  const settings = document.getElementById("trial-settings");
  if (!settings) return;
  const csrf = document.querySelector('meta[name="csrf-token"]').content;
  const conversation = document.getElementById("conversation");
  const messageForm = document.getElementById("message-form");
  const progress = document.getElementById("progress");
  const sendError = document.getElementById("send-error");
  const versionSelect = document.getElementById("version-select");
  const attachments = [];
  let busy = false;
  // The tools of the calls a streamed turn started, by call id (`tool.execution_complete` names only the call).
  const running = new Map();

  function el(tag, cls, text) {
    const node = document.createElement(tag);
    if (cls) node.className = cls;
    if (text !== undefined) node.textContent = text;
    return node;
  }

  function parameters() {
    const values = {};
    settings.querySelectorAll("[data-param]").forEach((box) => {
      const name = box.dataset.param;
      const input = box.querySelector("input");
      if (box.dataset.kind === "boolean") values[name] = input.checked;
      else if (input.value === "") return;
      else if (box.dataset.kind === "number") values[name] = Number(input.value);
      else values[name] = input.value;
    });
    return values;
  }

  function documents() {
    return Array.from(document.querySelectorAll("#documents .document"))
      .map((row) => ({ name: row.querySelector("input").value.trim(), content: row.querySelector("textarea").value }))
      .filter((doc) => doc.name || doc.content);
  }

  document.getElementById("add-document").addEventListener("click", () => {
    const row = el("div", "document");
    const name = el("input");
    name.type = "text";
    name.placeholder = "name, e.g. notes.md";
    const content = el("textarea");
    content.rows = 3;
    content.placeholder = "content (sent apart from the instructions)";
    const remove = el("button", "secondary small", "Remove");
    remove.type = "button";
    remove.addEventListener("click", () => row.remove());
    row.append(name, content, remove);
    document.getElementById("documents").append(row);
  });

  document.getElementById("attachment-input").addEventListener("change", async (event) => {
    for (const file of event.target.files) {
      const body = new FormData();
      body.append("file", file);
      const item = el("li", "chip", file.name + " …");
      document.getElementById("attachments").append(item);
      const response = await fetch("/api/attachments", { method: "POST", body, headers: { "X-CSRFToken": csrf } });
      const data = await response.json();
      if (response.ok) {
        attachments.push(data.id);
        item.textContent = `${data.name} (${data.size} bytes)`;
      } else {
        item.textContent = `${file.name}: ${data.detail}`;
        item.classList.add("error");
      }
    }
    event.target.value = "";
  });

  // What a refused API call says (application/problem+json), in one line.
  async function problemOf(response) {
    const problem = await response.json().catch(() => ({ detail: response.statusText }));
    const fields = (problem.errors || []).map((e) => `${e.field}: ${e.message}`).join("; ");
    return problem.detail + (fields ? ` (${fields})` : "");
  }

  // A message while requests of the session wait is refused (409 pending_requests): say so in the page's
  // words and offer to send it anyway, which closes those requests unanswered (`abandonPending`).
  function offerAbandon(body, userText) {
    sendError.textContent = "This session still waits for answers above. Answer them first, or ";
    const anyway = el("button", "link", "send anyway");
    anyway.type = "button";
    anyway.id = "send-anyway";
    anyway.title = "Close the waiting requests unanswered and send this message";
    anyway.addEventListener("click", async () => {
      if (await runTurn({ ...body, abandonPending: true }, userText)) messageForm.message.value = "";
    });
    sendError.append(anyway, " (the waiting requests are closed unanswered).");
  }

  function parseFrames(buffer, onFrame) {
    let index;
    while ((index = buffer.indexOf("\n\n")) >= 0) {
      const raw = buffer.slice(0, index);
      buffer = buffer.slice(index + 2);
      const frame = { event: "message", data: "" };
      raw.split("\n").forEach((line) => {
        if (line.startsWith("event: ")) frame.event = line.slice(7);
        else if (line.startsWith("data: ")) frame.data += line.slice(6);
      });
      onFrame(frame.event, JSON.parse(frame.data));
    }
    return buffer;
  }

  // While a turn runs, the send buttons are disabled (a second turn would be refused anyway).
  function setBusy(on) {
    progress.hidden = !on;
    document.getElementById("send").disabled = on;
  }

  async function runTurn(body, userText) {
    if (busy) return false;
    busy = true;
    setBusy(true);
    sendError.textContent = "";
    const empty = document.getElementById("empty-note");
    const turn = el("article", "turn streaming");
    if (userText) turn.append(el("div", "bubble user", userText));
    const reply = el("div", "bubble assistant");
    const text = el("div", "reply");
    const activity = el("div", "activity muted");
    reply.append(text, activity);
    turn.append(reply);
    let runId = null;
    try {
      const response = await fetch(`/api/agents/${encodeURIComponent(settings.dataset.agent)}/runs`, {
        method: "POST",
        headers: { "Content-Type": "application/json", Accept: "text/event-stream", "X-CSRFToken": csrf },
        body: JSON.stringify({ sessionId: settings.dataset.session, definitionVersion: Number(settings.dataset.version), ...body }),
      });
      if (response.status === 409 && !body.abandonPending) {
        const problem = await response.clone().json().catch(() => ({}));
        if (problem.code === "pending_requests") {
          offerAbandon(body, userText);
          return false;
        }
      }
      if (!response.ok) throw new Error(await problemOf(response));
      if (empty) empty.remove();
      conversation.append(turn);
      // Keep the session in the address, so a reload shows the conversation again.
      const address = new URL(location.href);
      address.searchParams.set("agent", settings.dataset.agent);
      address.searchParams.set("version", settings.dataset.version);
      address.searchParams.set("session", settings.dataset.session);
      history.replaceState(null, "", address);
      const reader = response.body.getReader();
      const decoder = new TextDecoder();
      let buffer = "";
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buffer = parseFrames(buffer + decoder.decode(value, { stream: true }), (type, data) => {
          if (type === "done") runId = data.runId;
          else if (type === "run.started") runId = data.runId;
          else if (type === "assistant.message_delta") text.textContent += data.data.deltaContent;
          else if (type === "assistant.turn_start" && text.textContent) text.textContent += "\n";
          else if (type === "tool.execution_start") {
            running.set(data.data.toolCallId, data.data.toolName);
            activity.textContent = `running ${data.data.toolName}…`;
          } else if (type === "tool.execution_complete") activity.textContent = `${running.get(data.data.toolCallId) || "the tool"} done`;
        });
      }
      if (runId) {
        known.add(runId);
        const url = settings.dataset.turnUrl.replace("00000000-0000-0000-0000-000000000000", runId);
        const page = await fetch(url, { headers: { "HX-Request": "true" } });
        swapTurn(turn, await page.text());
        conversation.dispatchEvent(new Event("airlock:turn"));
      }
      return true;
    } catch (error) {
      sendError.textContent = error.message;
      return false;
    } finally {
      busy = false;
      setBusy(false);
    }
  }

  // The server-rendered turn in the place of `turn`, its htmx attributes live (the widget's "always" asks first).
  function swapTurn(turn, html) {
    const template = document.createElement("template");
    template.innerHTML = html;
    const nodes = [...template.content.children];
    turn.replaceWith(template.content);
    nodes.forEach((node) => htmx.process(node));
  }

  // An example puts its message in the box, to send as it is or changed.
  document.getElementById("trial-examples")?.addEventListener("click", (event) => {
    const example = event.target.closest("[data-example]");
    if (!example) return;
    messageForm.message.value = example.dataset.example;
    messageForm.message.focus();
  });

  messageForm.addEventListener("submit", async (event) => {
    event.preventDefault();
    const message = messageForm.message.value;
    if (!message.trim()) {
      sendError.textContent = "Write a message first.";
      return;
    }
    const culture = settings.culture.value.trim();
    const body = { message, parameters: parameters(), documents: documents(), attachmentIds: attachments.slice() };
    if (culture) body.culture = culture;
    if (await runTurn(body, message)) messageForm.message.value = "";
  });

  // The trial page of a session, at a version.
  function sessionAddress(sessionKey, version) {
    const address = new URL("/trial/", location.href);
    address.searchParams.set("agent", settings.dataset.agent);
    address.searchParams.set("version", String(version));
    address.searchParams.set("session", sessionKey);
    return address.href;
  }

  // What the inbox's answer view said about a refused answer, read from the card it sent back: the card's
  // message, and each field's beside the widget's own input. A request closed meanwhile loses its form.
  function refused(widget, form, html) {
    const card = new DOMParser().parseFromString(html, "text/html");
    widget.querySelector("[data-card-error]").textContent = card.querySelector("[data-card-error]")?.textContent || "";
    card.querySelectorAll("[data-error-for]").forEach((said) => {
      const mine = form.querySelector(`[data-error-for="${CSS.escape(said.dataset.errorFor)}"]`);
      if (mine) mine.textContent = said.textContent;
    });
    if (card.querySelector("[data-dismiss]")) form.remove();
  }

  // An answer, given with the inbox card's widget: posted to the inbox's answer view as htmx posts it, and
  // stored at once. The session's stream then says who answered (answeredElsewhere below) and brings the
  // continuation the last answer of the turn starts; an answer at an earlier turn goes on in its fork.
  conversation.addEventListener("submit", async (event) => {
    const form = event.target.closest("form[data-answer-form]");
    if (!form) return;
    event.preventDefault();
    const widget = form.closest(".request-widget");
    const body = new FormData(form, event.submitter);
    body.append("via", "trial"); // for the audit: answered here, not in the inbox
    const buttons = form.querySelectorAll("button");
    widget.querySelector("[data-card-error]").textContent = "";
    form.querySelectorAll("[data-error-for]").forEach((p) => (p.textContent = ""));
    buttons.forEach((b) => (b.disabled = true));
    try {
      // getAttribute: an elicitation form has a field named "action" (accept, decline, cancel), which form.action
      // would return instead of the address.
      const response = await fetch(form.getAttribute("action"), { method: "POST", body, headers: { "HX-Request": "true" } });
      if (!response.ok) throw new Error(`The answer was not sent (${response.status} ${response.statusText}).`);
      const html = await response.text();
      // A held answer's notice (its Undo: templates/approvals/_undo.html) goes into the page's notices, out of band.
      const held = "airlock:held" in JSON.parse(response.headers.get("HX-Trigger") || "{}");
      if (held) htmx.swap(document.body, html, { swapStyle: "none" });
      else if (html.trim()) return refused(widget, form, html);
      const version = body.get("definition_version") || settings.dataset.version;
      const forked = JSON.parse(response.headers.get("HX-Trigger") || "{}")["airlock:forked"];
      if (forked) return location.assign(sessionAddress(forked.sessionId, version));
      // An answer that continues on another version: the session's next turns run that one too.
      settings.dataset.version = String(version);
      if (versionSelect) versionSelect.value = settings.dataset.version;
      form.replaceWith(el("p", "answered-here muted", "Sent: the agent goes on once every request of the turn is answered."));
    } catch (error) {
      widget.querySelector("[data-card-error]").textContent = error.message;
    } finally {
      buttons.forEach((b) => (b.disabled = false));
    }
  });

  // Live: the session's stream brings what happens away from this page (an answer from the inbox, the
  // continuation it starts) without a reload. A form whose request was answered elsewhere gives way to who
  // answered it, so it can never be sent stale; a run this page did not start streams into a turn of its own,
  // which the server-rendered turn replaces once it ends; turns that waited are rendered again.
  const known = new Set([...conversation.querySelectorAll(".turn[data-run]")].map((t) => t.dataset.run));
  const streaming = new Map();
  let source = null;
  // What each request's SDK completion said (`permission.completed`'s result kind, a plan's `approved`), for the
  // `request.answered` that names who answered it.
  const decided = new Map();
  const WORDS = { approved: "Approved", "denied-interactively-by-user": "Denied" };
  const PLAN_WORDS = { true: "Approved", false: "Sent back" };

  async function rerender(turn, runId) {
    const url = settings.dataset.turnUrl.replace("00000000-0000-0000-0000-000000000000", runId);
    const page = await fetch(url, { headers: { "HX-Request": "true" } });
    if (page.ok) swapTurn(turn, await page.text());
  }

  // The widgets of the requests still open (an earlier turn's, answered differently in a fork, are not).
  const openWidgets = (within) => [...within.querySelectorAll(".request-widget")].filter((w) => !w.closest("[data-fork]"));

  // A `request.answered` event (who answered; the SDK's completion before it said what) or a `request.terminated`
  // one (closed unanswered: `kind`).
  function answeredElsewhere(envelope) {
    const data = envelope.data;
    const box = openWidgets(conversation).find((w) => w.dataset.requestId === data.requestId);
    if (!box) return;
    const turn = box.closest(".turn");
    const closed = envelope.type === "request.terminated" ? data.kind : null;
    const how = closed ? `Closed: ${closed}` : decided.get(data.requestId) || "Answered";
    const when = new Date(envelope.timestamp).toLocaleTimeString([], { hour: "2-digit", minute: "2-digit", hourCycle: "h23" });
    const note = el("p", "answered-elsewhere muted", `${how}${data.answeredBy ? ` by ${data.answeredBy}` : ""}${data.onBehalfOf ? ` for ${data.onBehalfOf}` : ""} · ${when}`);
    box.replaceWith(note);
    if (turn && !closed) turn.dataset.answered = "true";
    const waiting = turn && !openWidgets(turn).length && turn.querySelector(".reply.muted");
    if (waiting) waiting.textContent = "Answered: the conversation goes on below.";
    // The turn's status no longer waits once nothing of it is open (the server's TrialTurn.status_label says
    // the same on a reload): not "Awaiting approval" until the page is reloaded.
    const label = turn && !openWidgets(turn).length && turn.querySelector(".meta .pill");
    if (label) label.textContent = turn.dataset.answered ? "Answered" : "Closed";
  }

  function followSession() {
    if (source || !window.EventSource) return;
    source = new EventSource(`/api/sessions/${encodeURIComponent(settings.dataset.session)}/events`);
    const on = (type, handle) => source.addEventListener(type, (event) => handle(JSON.parse(event.data)));
    on("run.started", (envelope) => {
      if (known.has(envelope.runId) || busy) return known.add(envelope.runId);
      known.add(envelope.runId);
      document.getElementById("empty-note")?.remove();
      const turn = el("article", "turn streaming");
      turn.dataset.run = envelope.runId;
      const reply = el("div", "bubble assistant");
      const text = el("div", "reply");
      const activity = el("div", "activity muted", "continuing…");
      reply.append(text, activity);
      turn.append(reply);
      conversation.append(turn);
      streaming.set(envelope.runId, { turn, text, activity });
    });
    on("assistant.message_delta", (envelope) => {
      const live = streaming.get(envelope.runId);
      if (live && !envelope.agentId) live.text.textContent += envelope.data.deltaContent;
    });
    on("tool.execution_start", (envelope) => {
      const live = streaming.get(envelope.runId);
      if (live) live.activity.textContent = `running ${envelope.data.toolName}…`;
    });
    on("session.idle", (envelope) => {
      const live = streaming.get(envelope.runId);
      streaming.delete(envelope.runId);
      const turn = live ? live.turn : conversation.querySelector(`.turn[data-run="${CSS.escape(envelope.runId)}"]`);
      if (turn && (live || ["queued", "running"].includes(turn.dataset.status))) rerender(turn, envelope.runId);
    });
    on("permission.completed", (envelope) => {
      const word = WORDS[envelope.data.result.kind];
      if (word) decided.set(envelope.data.requestId, word);
    });
    on("exit_plan_mode.completed", (envelope) => {
      const word = PLAN_WORDS[envelope.data.approved];
      if (word) decided.set(envelope.data.requestId, word);
    });
    on("request.answered", answeredElsewhere);
    // Closed unanswered (abandoned by a message sent anyway, the run cancelled from the inbox or its page, the
    // deadline passed): the form gives way too; a cancelled turn is rendered again, with its new status.
    on("request.terminated", (envelope) => {
      const box = openWidgets(conversation).find((w) => w.dataset.requestId === envelope.data.requestId);
      const turn = box && box.closest(".turn[data-run]");
      answeredElsewhere(envelope);
      if (turn && envelope.data.kind === "cancelled") rerender(turn, turn.dataset.run);
    });
  }

  if (known.size || "live" in conversation.dataset) followSession();
  conversation.addEventListener("airlock:turn", followSession);
})();
