// The inbox's live parts. console.js re-dispatches every websocket push as "airlock:push"; here pushed
// cards come in (once, and only when they match the filters) and go out, the list is re-synced after every
// (re)connect, the title carries the pending count, a hidden tab gets a browser notification, deadlines
// count down, answer forms are checked before they are posted, each run with several approvals gets
// its "Approve all / Deny all" bar, the keyboard triages (j/k, a, d, e, r, 1-9, x, c, ?), and on a wide
// screen the list is one row per request with the selected request's card beside it (inbox.css), on a phone
// one row per request that opens its card under it.
(function () {
  "use strict";
  const list = document.getElementById("inbox-list");
  if (!list) return;
  const filters = document.getElementById("inbox-filters");
  const batchTemplate = document.getElementById("batch-template");
  const notifyButton = document.getElementById("enable-notifications");
  const TITLE = "Inbox · Airlock";

  const cards = () => Array.from(list.querySelectorAll(".request-card"));

  function nextCard(node) {
    let sibling = node.nextElementSibling;
    while (sibling && !sibling.classList.contains("request-card")) sibling = sibling.nextElementSibling;
    return sibling;
  }

  function parse(html) {
    const template = document.createElement("template");
    template.innerHTML = html;
    return template.content;
  }

  function activeFilters() {
    const data = new FormData(filters);
    return ["agent", "kind", "tool", "view", "group"].map((name) => [name, String(data.get(name) || "").trim()]).filter(([, v]) => v);
  }

  // The saved views, as a pushed card is checked against them (the server picks the listed ones).
  const VIEWS = {
    mine: (card) => card.hasAttribute("data-answerable"),
    claimed: (card) => card.querySelector("[data-claim]").dataset.claimedBy === list.dataset.username,
    answered: () => false, // answered requests are listed once; a new request is not one of them
  };

  function matches(card) {
    return activeFilters().every(([name, value]) => {
      if (name === "view") return !VIEWS[value] || VIEWS[value](card);
      if (name === "group") return card.dataset.approvers.split(",").includes(value);
      return card.dataset[name] === value;
    });
  }

  function setPending(count) {
    document.title = count > 0 ? `(${window.airlockPendingLabel(count)}) ${TITLE}` : TITLE;
  }

  // --- pushed cards -----------------------------------------------------------------------------

  function insert(html) {
    const added = [];
    parse(html).querySelectorAll(".request-card").forEach((card) => {
      if (document.getElementById(card.id) || !matches(card)) return;
      list.insertBefore(card, list.querySelector(".inbox-empty"));
      htmx.process(card);
      added.push(card);
    });
    return added;
  }

  function remove(ids) {
    if (list.dataset.view === "answered") return; // those cards are closed already, and stay to look back at
    ids.forEach((id) => {
      const card = document.getElementById(`request-${id}`);
      if (card) card.remove();
    });
  }

  // After a (re)connect, pushes may have been missed, and after a membership change the reader may answer
  // other cards: ask for the list again (the current filters) and merge it in, keeping the cards already
  // shown (and whatever is typed into them) in place unless whether the reader may answer them changed.
  function refresh() {
    const query = new URLSearchParams(activeFilters()).toString();
    htmx.ajax("GET", list.dataset.url + (query ? `?${query}` : ""), {
      source: list, target: list, swap: "none", headers: { "X-Inbox-Refresh": "true" },
    });
  }

  function merge(html) {
    const fresh = parse(html);
    const wanted = Array.from(fresh.querySelectorAll(".request-card"));
    const keep = new Set(wanted.map((card) => card.id));
    cards().forEach((card) => { if (!keep.has(card.id)) card.remove(); });
    // Walk the wanted order; a card already in its place (bars aside) is not moved, so it keeps its focus.
    let next = cards()[0] || null;
    wanted.forEach((card) => {
      let shown = document.getElementById(card.id);
      if (shown && shown.hasAttribute("data-answerable") !== card.hasAttribute("data-answerable")) {
        // The reader's role or groups changed: the card comes again, with its forms or without them.
        if (shown === next) next = nextCard(shown);
        shown.remove();
        shown = null;
      }
      if (shown && shown === next) {
        next = nextCard(shown);
        return;
      }
      const node = shown || card;
      list.insertBefore(node, next || list.querySelector(".inbox-empty"));
      if (!shown) htmx.process(node);
    });
    const empty = fresh.querySelector(".inbox-empty");
    if (empty) list.querySelector(".inbox-empty").replaceWith(empty);
    list.dataset.synced = "true";
  }

  document.body.addEventListener("htmx:beforeSwap", (event) => {
    const config = event.detail.requestConfig;
    if (event.detail.target !== list || !config || !config.headers["X-Inbox-Refresh"]) return;
    event.detail.shouldSwap = false;
    if (!event.detail.isError) merge(event.detail.serverResponse);
  });

  // --- notifications --------------------------------------------------------------------------

  function showNotifyButton() {
    notifyButton.hidden = !("Notification" in window) || Notification.permission !== "default";
  }

  notifyButton.addEventListener("click", () => {
    Notification.requestPermission().then(showNotifyButton);
  });
  showNotifyButton();

  function notify(titles) {
    if (!document.hidden || !titles.length || !("Notification" in window) || Notification.permission !== "granted") return;
    const heading = titles.length === 1 ? "An agent is waiting for an answer" : `${titles.length} requests are waiting`;
    const note = new Notification(heading, { body: titles.join("\n"), tag: "airlock-inbox" });
    note.addEventListener("click", () => { window.focus(); note.close(); });
  }

  document.addEventListener("airlock:push", (event) => {
    const push = event.detail;
    if (push.type === "requests_opened") {
      const added = new Set(insert(push.html).map((card) => card.dataset.requestId));
      notify(push.ids.map((id, i) => (added.has(id) ? push.titles[i] : null)).filter(Boolean));
    } else if (push.type === "requests_closed") {
      remove(push.ids);
    } else if (push.type === "request_approvals") {
      approvals(push.id, push.html);
    } else if (push.type === "request_claimed") {
      showClaim(push.id, push.claimedBy, push.claimedAt);
    } else if (push.type === "heartbeat") {
      refresh();
    }
    if (typeof push.pending === "number") setPending(push.pending);
  });
  // The socket may have said its first heartbeat before this script ran (console.js opens it first): re-sync.
  if (window.airlockHeartbeat) refresh();

  // A quorum's approvals (SPEC section 14): the card's line says them; a card not shown (its approver's, held) comes back.
  function approvals(id, html) {
    const card = document.getElementById(`request-${id}`);
    if (!card) return insert(html);
    const fresh = parse(html).getElementById(`request-${id}`);
    ["[data-approvals]", ".row-quorum"].forEach((part) => {
      const now = fresh && fresh.querySelector(part);
      if (now && card.querySelector(part)) card.querySelector(part).replaceWith(now);
    });
  }

  // "claimed by ada" on the card in every inbox; the claimer's own button offers the release.
  function showClaim(id, claimedBy, claimedAt) {
    const card = document.getElementById(`request-${id}`);
    if (!card) return;
    const line = card.querySelector("[data-claim]");
    line.dataset.claimedBy = claimedBy || "";
    line.replaceChildren();
    if (claimedBy) {
      const who = document.createElement("strong");
      who.textContent = claimedBy;
      const when = document.createElement("time");
      when.dateTime = claimedAt;
      when.textContent = new Date(claimedAt).toLocaleTimeString([], { hour: "2-digit", minute: "2-digit", hourCycle: "h23" });
      line.append("claimed by ", who, " ", when);
    }
    const row = card.querySelector("[data-row-claim]");
    if (row) row.textContent = claimedBy ? `claimed by ${claimedBy}` : "";
    if (list.dataset.view === "claimed" && !VIEWS.claimed(card)) card.remove();
    const button = card.querySelector("[data-claim-button]");
    if (!button) return;
    const mine = Boolean(claimedBy) && claimedBy === list.dataset.username;
    button.value = mine ? "release" : "claim";
    button.textContent = mine ? "Release" : "Claim";
  }

  // A batch answer names the requests it answered; the pushes remove them too, a moment later.
  document.body.addEventListener("airlock:answered", (event) => remove(event.detail.ids || []));

  // --- batch bars: one per run with two or more selectable cards (approvals) shown -------------

  function syncBatches() {
    if (!batchTemplate) return;
    const runs = new Map();
    // Only cards this user may answer (a request routed to a group they are not in has no form).
    cards().filter((card) => card.hasAttribute("data-selectable") && card.querySelector("[data-answer-form]")).forEach((card) => {
      if (!runs.has(card.dataset.run)) runs.set(card.dataset.run, []);
      runs.get(card.dataset.run).push(card);
    });
    list.querySelectorAll(".batch-bar").forEach((bar) => {
      if ((runs.get(bar.dataset.batchRun) || []).length < 2) bar.remove();
    });
    runs.forEach((approvals, run) => {
      if (approvals.length < 2) return;
      let bar = list.querySelector(`.batch-bar[data-batch-run="${run}"]`);
      if (!bar) {
        bar = batchTemplate.content.firstElementChild.cloneNode(true);
        bar.dataset.batchRun = run;
        bar.querySelector('[name="run"]').value = run;
        htmx.process(bar);
      }
      const ids = approvals.map((card) => card.dataset.requestId);
      const listed = Array.from(bar.querySelectorAll('[name="request"]'));
      if (listed.map((input) => input.value).join() !== ids.join()) {
        listed.forEach((input) => input.remove());
        ids.forEach((id) => {
          const input = document.createElement("input");
          Object.assign(input, { type: "hidden", name: "request", value: id });
          bar.prepend(input);
        });
        bar.querySelector("[data-batch-count]").textContent = String(ids.length);
      }
      if (approvals[0].previousElementSibling !== bar) list.insertBefore(bar, approvals[0]);
    });
  }

  // Cards come and go by pushes, swaps and merges; the bars follow whatever the list holds.
  new MutationObserver(syncBatches).observe(list, { childList: true });
  syncBatches();

  // --- deadlines --------------------------------------------------------------------------------

  function remaining(seconds) {
    const days = Math.floor(seconds / 86400);
    const hours = Math.floor((seconds % 86400) / 3600);
    const minutes = Math.floor((seconds % 3600) / 60);
    const secs = String(seconds % 60).padStart(2, "0");
    if (days) return `${days} d ${hours} h`;
    return hours ? `${hours}:${String(minutes).padStart(2, "0")}:${secs}` : `${minutes}:${secs}`;
  }

  function age(seconds) {
    if (seconds < 60) return "just now";
    const minutes = Math.floor(seconds / 60);
    if (minutes < 60) return `${minutes} min ago`;
    const hours = Math.floor(minutes / 60);
    if (hours < 48) return `${hours} h ${minutes % 60} min ago`;
    return `${Math.floor(hours / 24)} days ago`;
  }

  function tick() {
    const now = Date.now();
    list.querySelectorAll("[data-age]").forEach((time) => {
      time.textContent = age(Math.max(0, Math.floor((now - Date.parse(time.dateTime)) / 1000)));
    });
    list.querySelectorAll("[data-countdown]").forEach((clock) => {
      const left = Math.ceil((Date.parse(clock.dataset.countdown) - now) / 1000);
      const expired = left <= 0;
      clock.textContent = expired ? "expired" : `expires in ${remaining(left)}`;
      clock.classList.toggle("soon", !expired && left < 60);
      clock.classList.toggle("expired", expired);
      clock.closest(".request-card").classList.toggle("expired", expired);
    });
  }
  tick();
  setInterval(tick, 1000);

  // --- answer forms: checked here first, the server checks again ---------------------------

  // By the fields the card's kind put in its form, never by the kind: a field with `data-needed-for` must be
  // filled in for that button (its `data-needed` says so).
  function check(form, intent) {
    const errors = [];
    const fail = (message, field) => errors.push([field, message]);
    const remember = form.querySelector('[name="remember"]:checked');
    const exact = form.querySelector('[name="remember_arguments_only"]');
    if (intent === "deny" && ((remember && remember.value) || (exact && exact.checked))) {
      fail("A denial cannot be remembered: uncheck \u201cDon't ask again\u201d to deny.");
    }
    const edited = form.querySelector('[name="arguments"]');
    if (intent === "approve" && edited && edited.value.trim()) {
      try {
        const value = JSON.parse(edited.value);
        if (value === null || typeof value !== "object" || Array.isArray(value)) fail("Give a JSON object: {…}.", "arguments");
      } catch (error) {
        fail(`Not valid JSON: ${error.message}`, "arguments");
      }
    }
    form.querySelectorAll("[data-needed-for]").forEach((input) => {
      if (input.dataset.neededFor === intent && !input.value.trim()) fail(input.dataset.needed, input.name);
    });
    if (intent === "accept") {
      form.querySelectorAll("[data-field]").forEach((box) => {
        const name = box.dataset.field;
        const input = box.querySelector(`[name="field-${CSS.escape(name)}"]`);
        const value = input.type === "checkbox" ? "on" : input.value.trim();
        if (!value) {
          if (box.hasAttribute("data-required")) fail("This field is required.", name);
        } else if (box.dataset.input === "number" && !Number.isFinite(Number(value))) {
          fail("Give a number.", name);
        } else if (box.dataset.input === "integer" && !Number.isInteger(Number(value))) {
          fail("Give a whole number.", name);
        } else if (box.dataset.input === "json") {
          try { JSON.parse(value); } catch { fail("Not valid JSON.", name); }
        }
      });
      const content = form.querySelector('[name="content"]');
      if (content && content.value.trim()) {
        try { JSON.parse(content.value); } catch { fail("Not valid JSON.", "content"); }
      }
    }
    return errors;
  }

  function showErrors(form, errors) {
    const card = form.closest(".request-card");
    card.querySelectorAll("[data-error-for]").forEach((p) => { p.textContent = ""; });
    card.querySelector("[data-card-error]").textContent = "";
    errors.forEach(([field, message]) => {
      const target = field ? card.querySelector(`[data-error-for="${field}"]`) : card.querySelector("[data-card-error]");
      target.textContent = message;
      if (field === "arguments") target.closest("details").open = true;
    });
    if (errors.some(([field]) => field)) card.querySelector("[data-card-error]").textContent = "Check the highlighted fields.";
    card.classList.toggle("invalid", errors.length > 0);
  }

  // Capturing on the document runs before htmx's own submit handler on the form, so an invalid answer
  // is stopped before it is posted.
  document.addEventListener("submit", (event) => {
    const form = event.target;
    if (!form.matches("[data-answer-form]")) return;
    const errors = check(form, event.submitter ? event.submitter.value : "");
    showErrors(form, errors);
    if (errors.length) {
      event.preventDefault();
      event.stopImmediatePropagation();
    }
  }, true);

  list.addEventListener("click", (event) => {
    const dismiss = event.target.closest("[data-dismiss]");
    if (dismiss) dismiss.closest(".request-card").remove();
  });

  // --- keyboard triage: j/k move; a, d, e, r and 1-9 answer each kind as its card offers; x selects -----

  const keys = document.getElementById("inbox-keys");
  const selection = document.getElementById("selection");
  const skip = document.querySelector("[data-skip-to-first]");
  const wide = window.matchMedia("(min-width: 1000px)");
  const phone = window.matchMedia("(max-width: 700px)"); // rows that open their card under them (inbox.css)
  let focused = null; // the card that had the focus last
  let known = []; // the cards in order when the operator came to the focused one: the focus moves on among them
  let moved = { card: null, at: 0 }; // the card the focus moved to by itself (after an answer), and when
  const SETTLE_MS = 600; // a card the focus moved to by itself takes no answering key before this

  // Typing in these is never a shortcut (a checkbox or a button is not typing).
  const TYPING = "textarea, select, [contenteditable], input:not([type=checkbox]):not([type=radio]):not([type=submit]):not([type=button])";

  function focusCard(card, byItself = false) {
    if (!card) return;
    card.focus();
    card.scrollIntoView({ block: "nearest" });
    moved = byItself ? { card, at: Date.now() } : { card: null, at: 0 };
    if (byItself) {
      card.classList.add("settling");
      setTimeout(() => card.classList.remove("settling"), SETTLE_MS);
    }
  }

  function currentCard() {
    const active = document.activeElement;
    const card = active && active.closest ? active.closest(".request-card") : null;
    return card || (focused && focused.isConnected ? focused : null);
  }

  function move(step) {
    const all = cards();
    const card = currentCard();
    const at = card ? all.indexOf(card) : -1;
    if (at < 0) return focusCard(all[0]);
    focusCard(all[Math.max(0, Math.min(all.length - 1, at + step))]);
  }

  // The first key on arrival, no card focused yet: the card marked selected since the page loaded takes the
  // focus, so what the operator sees marked is what the key acts on, and j moves off it on the first press
  // rather than landing on it (`j a` once approved the marked card instead of the next). Only that card:
  // one marked later (a push into an emptied list) has not been seen, and no key acts on it unfocused.
  function takeSelected() {
    if (currentCard() || !selected || selected !== onArrival || !selected.isConnected) return;
    focusCard(selected);
  }

  // Whether an answering key may act on the card: the operator has it in view, and the focus did not just
  // move to it by itself (a second press of the key that answered the card before it).
  function ready(card) {
    const box = card.getBoundingClientRect();
    if (box.bottom <= 0 || box.top >= window.innerHeight) {
      focusCard(card);
      return false;
    }
    return !(moved.card === card && Date.now() - moved.at < SETTLE_MS);
  }

  function press(card, values) {
    const form = card && card.querySelector("[data-answer-form]");
    const button = form && values.map((v) => form.querySelector(`button[value="${v}"]`)).find(Boolean);
    if (button && ready(card)) button.click(); // a click, so htmx posts the button's value with the form
  }

  function field(card, name) {
    return card && card.querySelector(`[data-answer-form] [name="${name}"]`);
  }

  function focusField(input) {
    if (!input) return;
    const details = input.closest("details");
    if (details) details.open = true;
    input.focus();
    moved = { card: null, at: 0 }; // typing first is deliberate: Enter then sends
  }

  // What a, d and e do on a card, as its kind says (`Kind.keys`, the card's `data-keys`): buttons to press
  // (their values), or a field to type in first; `enter`, what Enter in a field sends (never the form's first
  // button: Approve, a choice).
  function keysOf(card) {
    return card && card.dataset.keys ? JSON.parse(card.dataset.keys) : {};
  }

  function act(card, key) {
    const does = keysOf(card)[key];
    if (!does) return;
    if (Array.isArray(does)) {
      const needed = field(card, keysOf(card).needs);
      if (key === "a" && needed && !needed.value.trim()) return focusField(needed); // the answer is typed first
      return press(card, does);
    }
    focusField(does === "field" ? card.querySelector("[data-answer-form] [data-field] :is(input, select, textarea)") : field(card, does));
  }

  function choose(card, number) {
    const choices = card ? card.querySelectorAll("[data-answer-form] button[name=choice]") : [];
    if (choices[number - 1] && ready(card)) choices[number - 1].click();
  }

  // r: "Don't ask again" in turn (ask next time, this session, always), on an approval that offers it. Each pick
  // is a change, as a click's: "always" brings its confirmation (templates/approvals/_always.html), whose confirm
  // button takes the focus (Enter confirms); Escape cancels it.
  function remember(card) {
    const options = card ? Array.from(card.querySelectorAll('[data-answer-form] [name="remember"]')) : [];
    if (!options.length) return;
    const next = options[(options.findIndex((o) => o.checked) + 1) % options.length];
    next.checked = true;
    next.focus();
    next.dispatchEvent(new Event("change", { bubbles: true }));
  }

  // Registered before the keys below, so Escape cancels an open "always" confirmation before anything else reads it.
  document.addEventListener("keydown", (event) => {
    if (event.key !== "Escape" || event.defaultPrevented || keys.open) return;
    if (event.target instanceof Element && event.target.closest(TYPING)) return; // Escape leaves the field first
    const cancel = currentCard()?.querySelector("[data-confirm-always] [data-cancel-always]");
    if (!cancel) return;
    event.preventDefault();
    cancel.click();
  });

  function toggleSelected(card) {
    const box = card && card.querySelector("[data-select]");
    if (!box) return;
    box.checked = !box.checked;
    syncSelection();
  }

  function claim(card) {
    const button = card && card.querySelector("[data-claim-button]");
    if (button) button.click();
  }

  function showKeys() {
    if (keys.open) keys.close();
    else keys.showModal();
  }

  document.addEventListener("keydown", (event) => {
    if (event.defaultPrevented || event.ctrlKey || event.metaKey || event.altKey) return;
    const target = event.target instanceof Element ? event.target : null;
    const typing = target && target.closest(TYPING);
    if (typing) {
      const card = typing.closest(".request-card");
      if (event.key === "Escape" && card) {
        event.preventDefault();
        focusCard(card);
      } else if (event.key === "Enter" && card && typing.matches("[data-answer-form] input") && typing.name in (keysOf(card).enter || {})) {
        event.preventDefault();
        press(card, [keysOf(card).enter[typing.name]]);
      }
      return;
    }
    if (keys.open && event.key !== "?") return; // the dialog closes itself on Escape
    const digit = /^[1-9]$/.test(event.key);
    if (digit || "jkaderxc".split("").includes(event.key)) takeSelected();
    const card = currentCard();
    const actions = {
      j: () => move(1),
      k: () => move(-1),
      a: () => act(card, "a"),
      d: () => act(card, "d"),
      e: () => act(card, "e"),
      r: () => remember(card),
      x: () => toggleSelected(card),
      c: () => claim(card),
      "?": showKeys,
    };
    if (digit) {
      event.preventDefault();
      return choose(card, Number(event.key));
    }
    if (!(event.key in actions)) return;
    event.preventDefault();
    actions[event.key]();
  });

  document.addEventListener("click", (event) => {
    if (event.target.closest("[data-show-keys]")) showKeys();
    if (event.target.closest("[data-edit-json]")) act(event.target.closest(".request-card"), "e");
    if (event.target.closest("[data-clear-selection]")) {
      list.querySelectorAll("[data-select]:checked").forEach((box) => { box.checked = false; });
      syncSelection();
    }
  });

  list.addEventListener("focusin", (event) => {
    const card = event.target.closest(".request-card");
    if (!card) return;
    if (card !== focused || !known.includes(card)) known = cards();
    focused = card;
    show(card);
    // On a phone the card the focus comes to as a whole (j/k, the skip link, after an answer) opens: keys act on what is seen.
    if (phone.matches && event.target === card) {
      setOpen(card, true);
      card.scrollIntoView({ block: "nearest" }); // opened, it is taller: its buttons in sight, above the notices
    }
  });

  // The skip link is the page's first Tab stop and lands on the first card.
  if (skip) {
    document.body.prepend(skip);
    skip.addEventListener("click", (event) => {
      event.preventDefault();
      focusCard(cards()[0] || list);
    });
  }

  // The card after `gone` (else the one before) among those listed when the operator came to it: never one
  // that arrived since, which they have not seen.
  function successor(gone) {
    const at = known.indexOf(gone);
    const after = at < 0 ? [] : known.slice(at + 1);
    const before = at < 0 ? [] : known.slice(0, at).reverse();
    return [...after, ...before].find((card) => card.isConnected && list.contains(card)) || null;
  }

  // After an answer (or any removal: a push, a batch) the focused card is gone: the next card, else the one
  // before, takes the focus; a card swapped for itself (an error) keeps it.
  function refocus() {
    if (!focused || focused.isConnected) return;
    const active = document.activeElement;
    if (active && active !== document.body && active.isConnected) return;
    const again = document.getElementById(focused.id);
    if (again) return focusCard(again);
    const next = successor(focused);
    focused = null;
    if (next) focusCard(next, true);
  }

  // --- the dense inbox: on a wide screen, the selected request's card stands beside the rows -------

  let selected = null; // the card shown beside the rows
  const opened = new Set(); // on a phone, the ids of the cards opened under their rows (a card swapped stays open)

  function show(card) {
    if (selected === card) return place();
    if (selected) {
      selected.classList.remove("selected");
      selected.querySelector("[data-card-row]").removeAttribute("aria-current");
    }
    selected = card;
    syncRows();
    if (!card) return;
    mark(card);
    place();
  }

  function mark(card) {
    card.classList.add("selected");
    card.querySelector("[data-card-row]").setAttribute("aria-current", "true");
  }

  // The card stays in sight while the rows scroll (as `position: sticky` would, were it in the flow).
  function place() {
    if (!selected) return;
    const body = selected.querySelector(".card-body");
    if (!wide.matches) return body.style.removeProperty("top");
    const top = Math.max(0, Math.min(-list.getBoundingClientRect().top + 8, list.offsetHeight - body.offsetHeight));
    body.style.top = `${top}px`;
  }

  // Each row says whether its card is shown: beside the rows on a wide screen (the selected one), under the row
  // on a phone (opened).
  function syncRows() {
    cards().forEach((card) => {
      card.classList.toggle("open", opened.has(card.id));
      const shown = wide.matches ? card === selected : opened.has(card.id);
      card.querySelector("[data-card-row]").setAttribute("aria-expanded", String(shown));
    });
  }

  function setOpen(card, open) {
    if (open) opened.add(card.id);
    else opened.delete(card.id);
    syncRows();
  }

  function keepShown() {
    if (selected && selected.isConnected) return place();
    const again = selected && document.getElementById(selected.id);
    show(again || (selected && successor(selected)) || cards()[0] || null);
  }

  list.addEventListener("click", (event) => {
    const row = event.target.closest("[data-card-row]");
    if (!row) return;
    const card = row.closest(".request-card");
    if (phone.matches) setOpen(card, !opened.has(card.id)); // a tap opens the card under its row, another closes it
    else focusCard(card);
  });
  window.addEventListener("scroll", () => window.requestAnimationFrame(place), { passive: true });
  wide.addEventListener("change", place);
  wide.addEventListener("change", syncRows);
  phone.addEventListener("change", syncRows);
  keepShown();
  const onArrival = selected; // the card marked as the page loaded (takeSelected)

  // --- the selection: ticked cards of any run, answered at once from the selection bar -------

  function syncSelection() {
    if (!selection) return;
    const bar = document.getElementById("selection");
    const count = list.querySelectorAll("[data-select]:checked").length;
    bar.querySelector("[data-selection-count]").textContent = String(count);
    bar.classList.toggle("empty", count === 0);
  }

  document.addEventListener("change", (event) => {
    if (event.target.matches("[data-select]")) syncSelection();
  });
  document.body.addEventListener("htmx:afterSettle", syncSelection); // the bar swapped for its answer

  new MutationObserver(() => { syncRows(); refocus(); keepShown(); syncSelection(); }).observe(list, { childList: true });
  // A card swapped for itself (an answer refused, a claim) settles with the server's attributes, which htmx puts
  // back after the swap: its class loses "selected" (and "open"), so the card and its error would vanish.
  list.addEventListener("htmx:afterSettle", () => {
    if (selected && selected.isConnected) mark(selected);
    syncRows();
  });
  syncSelection();
})();
