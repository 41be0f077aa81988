// The trial-run page: each turn goes to the run API as an event stream; the reply is shown as it
// streams, then the server-rendered turn (with its answer forms) replaces it.
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
    document
      .querySelectorAll('#send, form[data-answers] button[type="submit"], form[data-fork] button[type="submit"]')
      .forEach((b) => (b.disabled = on));
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
      if (!response.ok) throw new Error(await problemOf(response));
      if (empty) empty.remove();
      // An answer that continued on another version: the session's next turns run that one too.
      if (body.definitionVersion) {
        settings.dataset.version = String(body.definitionVersion);
        if (versionSelect) versionSelect.value = settings.dataset.version;
      }
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
          else if (type === "tool.execution_start") activity.textContent = `running ${data.data.toolName}…`;
          else if (type === "tool.execution_complete") activity.textContent = `${data.data.toolName} done`;
        });
      }
      if (runId) {
        known.add(runId);
        const url = settings.dataset.turnUrl.replace("00000000-0000-0000-0000-000000000000", runId);
        const page = await fetch(url, { headers: { "HX-Request": "true" } });
        turn.outerHTML = await page.text();
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

  // One fieldset's answer as [the run request's list it goes in, the answer]; `fail` marks what is wrong.
  function answerOf(box, fail) {
    const requestId = box.dataset.requestId;
    if (box.dataset.kind === "approval") {
      const approved = box.querySelector(`input[name="decision-${requestId}"]:checked`).value === "approve";
      const answer = { requestId, approved, reason: box.querySelector('[name="reason"]').value || null };
      const override = box.querySelector('[name="override"]');
      const remember = box.querySelector('[name="remember"]');
      if (override && approved && override.value.trim() !== override.dataset.original.trim()) {
        try {
          answer.overrideArguments = JSON.parse(override.value);
        } catch (error) {
          fail(`The edited arguments are not valid JSON: ${error.message}`);
        }
      }
      answer.remember = Boolean(remember && approved && remember.checked);
      answer.rememberArgumentsOnly = answer.remember && box.querySelector('[name="remember-args"]').checked;
      if (remember && !approved && remember.checked) fail("A denial cannot be remembered.");
      return ["approvals", answer];
    } else if (box.dataset.kind === "question") {
      const typed = box.querySelector('[name="text"]');
      const chosen = box.querySelector(`input[name="choice-${requestId}"]:checked`);
      const text = (typed && typed.value.trim()) || (chosen && chosen.value) || "";
      if (!text) fail("Choose an answer or write one.");
      return ["answers", { requestId, text }];
    } else if (box.dataset.kind === "plan") {
      const approved = box.querySelector(`input[name="decision-${requestId}"]:checked`).value === "approve";
      const text = box.querySelector('[name="text"]').value.trim();
      if (!approved && !text) fail("Say what to revise.");
      return ["answers", approved ? { requestId, approved } : { requestId, approved, text }];
    } else if (box.dataset.kind === "continuation") {
      const approved = box.querySelector(`input[name="decision-${requestId}"]:checked`).value === "continue";
      return ["answers", { requestId, approved }];
    } else if (box.dataset.kind === "client_tool") {
      const raw = box.querySelector('[name="result"]').value.trim();
      const error = box.querySelector('[name="error"]').value.trim();
      const outcome = box.querySelector('[name="outcome"]').value;
      const answer = { callId: box.dataset.callId };
      if (outcome) answer.outcome = outcome;
      if (outcome === "background") {
        if (raw || error) fail("A call running in the background takes no result or error yet.");
      } else if (outcome === "rejected" && !error) fail("Say why the client refuses.");
      else if (error) answer.errorMessage = error;
      else if (!raw) fail("Give a result or an error message.");
      else {
        try {
          answer.result = JSON.parse(raw);
        } catch {
          answer.result = raw;
        }
      }
      return ["toolResults", answer];
    } else {
      const action = box.querySelector('[name="action"]').value;
      const content = {};
      box.querySelectorAll("[data-field]").forEach((field) => {
        const name = field.dataset.field;
        const input = field.querySelector(`[name="field-${name}"]`);
        if (field.dataset.input === "checkbox") content[name] = input.checked;
        else if (input.value === "") {
          if (action === "accept" && field.hasAttribute("data-required")) fail("This field is required.", name);
        } else if (field.dataset.input === "number" || field.dataset.input === "integer") {
          const number = Number(input.value);
          if (field.dataset.input === "integer" && !Number.isInteger(number)) fail("Give a whole number.", name);
          content[name] = number;
        } else if (field.dataset.input === "json") {
          try {
            content[name] = JSON.parse(input.value);
          } catch {
            fail("Not valid JSON.", name);
          }
        } else content[name] = input.value;
      });
      return ["inputResponses", action === "accept" ? { requestId, action, content } : { requestId, action }];
    }
  }

  // The answers of a form, each with its fieldset; null when one is not valid (the errors are shown).
  function formAnswers(form) {
    const given = [];
    let valid = true;
    form.querySelectorAll("[data-error], [data-error-for]").forEach((p) => (p.textContent = ""));
    form.querySelectorAll("fieldset.request").forEach((box) => {
      const fail = (message, field) => {
        valid = false;
        const target = field ? box.querySelector(`[data-error-for="${field}"]`) : box.querySelector("[data-error]");
        target.textContent = message;
      };
      const [list, answer] = answerOf(box, fail);
      given.push({ box, list, answer });
    });
    return valid ? given : null;
  }

  // The next turn's body: the answers in the lists of the run request, and the version to continue on.
  function collectAnswers(form) {
    const given = formAnswers(form);
    if (!given) return null;
    const body = { approvals: [], toolResults: [], inputResponses: [], answers: [] };
    given.forEach(({ list, answer }) => body[list].push(answer));
    const version = form.querySelector('[name="definition-version"]');
    if (version) body.definitionVersion = Number(version.value);
    return body;
  }

  // Answer one request through the respond API (SPEC section 9); anything but `accepted` is an error here.
  async function respond(runId, body) {
    const response = await fetch(`/api/runs/${encodeURIComponent(runId)}/responses`, {
      method: "POST",
      headers: { "Content-Type": "application/json", Accept: "application/json", "X-CSRFToken": csrf },
      body: JSON.stringify(body),
    });
    if (!response.ok) throw new Error(await problemOf(response));
    const outcome = await response.json();
    if (outcome.status !== "accepted") throw new Error(`${outcome.status}: ${outcome.message}`);
    return outcome;
  }

  // A run request's answer as the respond API takes it: one request, named by its id.
  function responseOf(box, answer) {
    const fields = { ...answer, requestId: box.dataset.requestId };
    delete fields.callId;
    return fields;
  }

  // The fork's copy of the request a fieldset shows (a fork copies every request open where it starts).
  function copyOf(box, pending, used) {
    return pending.find(
      (p) =>
        !used.has(p.requestId) &&
        p.kind === box.dataset.kind &&
        (p.callId || "") === box.dataset.callId &&
        (p.toolName || "") === box.dataset.tool,
    );
  }

  // Wait (a while) for a queued continuation to end, so the fork's page shows what it did.
  async function ended(runId) {
    const deadline = Date.now() + 30000;
    while (Date.now() < deadline) {
      const response = await fetch(`/api/runs/${encodeURIComponent(runId)}`, { headers: { Accept: "application/json" } });
      if (!response.ok || !["queued", "running"].includes((await response.json()).status)) return;
      await new Promise((resolve) => setTimeout(resolve, 300));
    }
  }

  function forkAddress(sessionKey, version) {
    const address = new URL("/trial/", location.href);
    address.searchParams.set("agent", settings.dataset.agent);
    address.searchParams.set("version", String(version));
    address.searchParams.set("session", sessionKey);
    return address.href;
  }

  // "Answer differently (fork)": the first answer goes to the respond API at the turn's checkpoint, which
  // forks the session; the other requests open there are answered on the fork's copies. Then on to the fork.
  async function fork(form) {
    const given = formAnswers(form);
    if (!given || busy) return;
    const error = form.querySelector("[data-fork-error]");
    const version = form.querySelector('[name="definition-version"]');
    const chosen = version ? { definitionVersion: Number(version.value) } : {};
    let forked = null;
    busy = true;
    setBusy(true);
    error.textContent = "";
    form.querySelector("[data-fork-progress]").hidden = false;
    try {
      const [first, ...rest] = given;
      const body = { ...responseOf(first.box, first.answer), ...chosen, checkpointId: form.dataset.checkpoint };
      forked = await respond(first.box.dataset.runId, body);
      let continuation = forked.continuationRunId;
      if (rest.length) {
        const response = await fetch(`/api/sessions/${encodeURIComponent(forked.sessionId)}/state`, {
          headers: { Accept: "application/json" },
        });
        if (!response.ok) throw new Error(await problemOf(response));
        const pending = (await response.json()).pendingRequests;
        const used = new Set([forked.requestId]);
        for (const { box, answer } of rest) {
          const copy = copyOf(box, pending, used);
          if (!copy) throw new Error(`The fork has no copy of the request ${box.dataset.requestId}.`);
          used.add(copy.requestId);
          const outcome = await respond(box.dataset.runId, { ...responseOf(box, answer), ...chosen, requestId: copy.requestId });
          continuation = outcome.continuationRunId || continuation;
        }
      }
      if (continuation) await ended(continuation);
      location.assign(forkAddress(forked.sessionId, chosen.definitionVersion || settings.dataset.version));
    } catch (failure) {
      error.textContent = failure.message;
      if (forked) {
        // The fork exists: what is left to answer waits on its page.
        const link = el("a", null, " Open the fork");
        link.href = forkAddress(forked.sessionId, chosen.definitionVersion || settings.dataset.version);
        error.append(link);
      }
    } finally {
      form.querySelector("[data-fork-progress]").hidden = true;
      busy = false;
      setBusy(false);
    }
  }

  conversation.addEventListener("submit", async (event) => {
    const forking = event.target.closest("form[data-fork]");
    const form = event.target.closest("form[data-answers]");
    if (!forking && !form) return;
    event.preventDefault();
    if (forking) {
      await fork(forking);
      return;
    }
    const body = collectAnswers(form);
    if (!body) return;
    if (await runTurn(body, null)) form.remove();
  });

  // Live: the session's stream brings what happens away from this page (an answer from the inbox, the
  // continuation it starts) without a reload. A form whose request was answered elsewhere gives way to who
  // answered it, so it can never be sent stale; a run this page did not start streams into a turn of its own,
  // which the server-rendered turn replaces once it ends; turns that waited are rendered again.
  const known = new Set([...conversation.querySelectorAll(".turn[data-run]")].map((t) => t.dataset.run));
  const streaming = new Map();
  let source = null;
  const WORDS = { approved: "Approved", "denied-interactively-by-user": "Denied", "approved-by-rule": "Approved by a rule" };

  async function rerender(turn, runId) {
    const url = settings.dataset.turnUrl.replace("00000000-0000-0000-0000-000000000000", runId);
    const page = await fetch(url, { headers: { "HX-Request": "true" } });
    if (page.ok) turn.outerHTML = await page.text();
  }

  function answeredElsewhere(envelope) {
    const data = envelope.data;
    const form = conversation.querySelector("form[data-answers]");
    const box = form && [...form.querySelectorAll("fieldset.request")].find((f) => f.dataset.requestId === data.requestId);
    if (!box || busy) return;
    const how = data.closed ? `Closed: ${data.closed.kind}` : (data.result && WORDS[data.result.kind]) || "Answered";
    const when = new Date(envelope.timestamp).toLocaleTimeString([], { hour: "2-digit", minute: "2-digit" });
    const note = el("p", "answered-elsewhere muted", `${how}${data.answeredBy ? ` by ${data.answeredBy}` : ""} · ${when}`);
    box.replaceWith(note);
    if (!form.querySelector("fieldset.request")) {
      form.querySelector('button[type="submit"]')?.remove();
      const waiting = form.closest(".turn")?.querySelector(".reply.muted");
      if (waiting) waiting.textContent = "Answered: the conversation goes on below.";
    }
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
    for (const kind of ["permission", "external_tool", "elicitation", "user_input", "exit_plan_mode", "session_limits_exhausted"]) {
      on(`${kind}.completed`, answeredElsewhere);
    }
  }

  if (known.size) followSession();
  conversation.addEventListener("airlock:turn", followSession);
})();
