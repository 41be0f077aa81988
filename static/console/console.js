// The console's shared behaviours, declared in the markup (the Content-Security-Policy runs no inline
// handlers): `data-submit-on-change` submits its form when it changes, `data-confirm` on a form asks before
// it is posted, `data-remove-row` removes its table row, `data-opens="id"` opens a <details>. Listeners sit on
// the document, so content htmx swaps in behaves the same. `data-menu-toggle` opens and closes the folded
// menu of narrow screens (base.html; console.css shows the button under 700 px only).
(function () {
  "use strict";
  document.addEventListener("change", (event) => {
    const field = event.target.closest("[data-submit-on-change]");
    if (field && field.form) field.form.requestSubmit();
  });
  document.addEventListener("submit", (event) => {
    const question = event.target.dataset.confirm;
    if (question && !window.confirm(question)) event.preventDefault();
  });
  document.addEventListener("click", (event) => {
    const remover = event.target.closest("[data-remove-row]");
    if (remover) remover.closest("tr").remove();
    const opener = event.target.closest("[data-opens]");
    const details = opener && document.getElementById(opener.dataset.opens);
    if (details) details.open = true;
    const toggle = event.target.closest("[data-menu-toggle]");
    if (toggle) {
      const open = toggle.getAttribute("aria-expanded") !== "true";
      toggle.setAttribute("aria-expanded", String(open));
      document.getElementById(toggle.getAttribute("aria-controls")).classList.toggle("open", open);
    }
  });
  document.addEventListener("keydown", (event) => {
    const toggle = document.querySelector('[data-menu-toggle][aria-expanded="true"]');
    if (event.key === "Escape" && toggle) { toggle.click(); toggle.focus(); }
  });
})();

// A pending count as people read it: past where the console stops counting (approvals/push.py, PENDING_COUNTED,
// given on the navigation's badge) it reads "1000+".
window.airlockPendingLabel = (count) => {
  const badge = document.getElementById("pending-count");
  const counted = badge ? Number(badge.dataset.pendingCounted) : Infinity;
  return count > counted ? `${counted}+` : String(count);
};

// The websocket that keeps the pending count in the navigation bar current, and the console's honest states:
// while the socket is down the page says "Reconnecting…" and the forms that answer or claim a request are
// disabled (an answer would not reach the server, or would not be seen to), until the server speaks again;
// an htmx request whose session has ended (console/tenancy.py, `signed_out`) says so and offers to sign in.
// `data-connection` on the body ("lost", "signed-out", "stale") is the state console.css and the tests read.
(function () {
  "use strict";
  const badge = document.getElementById("pending-count");
  if (!badge) return;
  const NEEDS_SERVER = "[data-answer-form], .claim-form, .cancel-run, [data-selection]";
  const SUBMITS = "button:not([type=button]), input[type=submit]";
  // One live region, present (empty) from the start so that what is put in it is announced.
  const notice = document.createElement("div");
  notice.className = "connection-notice";
  notice.setAttribute("role", "status");
  document.querySelector(".topbar").after(notice);
  let leaving = false; // the page is being left: its socket closes, the server has not gone
  window.addEventListener("pagehide", () => (leaving = true));
  window.addEventListener("pageshow", () => (leaving = false));

  function setState(state, login) {
    if (state) document.body.dataset.connection = state;
    else delete document.body.dataset.connection;
    notice.replaceChildren();
    if (state === "lost") notice.textContent = "Reconnecting… Answers wait until the console is back.";
    if (state === "signed-out") {
      const link = document.createElement("a");
      link.href = login;
      link.textContent = "Sign in";
      notice.append("You were signed out · ", link);
    }
    if (state === "stale") {
      const link = document.createElement("a");
      link.href = location.href;
      link.textContent = "Reload";
      notice.append("This page was opened before you last signed in: nothing it sent was done · ", link);
    }
    // Disabled here, not only greyed out, so that neither a click, Enter nor a key of the inbox answers;
    // marked, so that coming back enables only what this disabled.
    document.querySelectorAll(`:is(${NEEDS_SERVER}) :is(${SUBMITS})`).forEach((button) => {
      if (state && !button.disabled) {
        button.disabled = true;
        button.dataset.waitsForServer = "";
      } else if (!state && "waitsForServer" in button.dataset) {
        button.disabled = false;
        delete button.dataset.waitsForServer;
      }
    });
  }
  // A form sent without its button (requestSubmit, a key of the inbox) is held too; capturing on the document
  // runs before htmx's handler and inbox.js's, and stops them.
  document.addEventListener("submit", (event) => {
    if (document.body.dataset.connection && event.target.matches(NEEDS_SERVER)) {
      event.preventDefault();
      event.stopImmediatePropagation();
    }
  }, true);
  document.addEventListener("airlock:signed-out", (event) => setState("signed-out", event.detail.login));
  // Its security token is out of date (console/errors.py, `csrf_failure`): only a reload renews it.
  document.addEventListener("airlock:stale", () => setState("stale"));

  let delay = 1000;
  function connect() {
    const scheme = location.protocol === "https:" ? "wss://" : "ws://";
    const socket = new WebSocket(scheme + location.host + "/ws/console/");
    socket.addEventListener("message", (event) => {
      delay = 1000; // a socket that speaks is a good one (one over the user's cap is closed before it does)
      // Back, or signed in again in another tab (after which the page is stale: its next request says so).
      if (document.body.dataset.connection && document.body.dataset.connection !== "stale") setState(null);
      const data = JSON.parse(event.data);
      if (typeof data.pending === "number") {
        const label = window.airlockPendingLabel(data.pending);
        document.querySelectorAll("[data-live-pending]").forEach((el) => (el.textContent = label));
        document.querySelectorAll(".badge[data-live-pending]").forEach((el) => el.classList.toggle("hot", data.pending > 0));
      }
      // A page script that runs after the first heartbeat (deferred scripts can wait on their download while
      // the socket opens) reads it here: inbox.js re-syncs its list on it.
      if (data.type === "heartbeat") window.airlockHeartbeat = data;
      document.dispatchEvent(new CustomEvent("airlock:push", { detail: data }));
    });
    socket.addEventListener("close", (event) => {
      // 4429: this user has too many consoles open; try again much later, not every second. The server is
      // there and answers this page's forms, so that is no reason to hold them.
      if (event.code === 4429) delay = 30000;
      else if (!leaving && document.body.dataset.connection !== "signed-out") setState("lost");
      setTimeout(connect, delay);
      delay = Math.min(delay * 2, 30000);
    });
  }
  connect();
})();

// A table or block of code wider than the screen scrolls in its own box (console.css); one that does is made
// focusable, so it can be scrolled from the keyboard too (WCAG 2.1.1).
(function () {
  "use strict";
  function markScrollers() {
    document.querySelectorAll("main table, main pre").forEach((box) => {
      const scrolls = box.scrollWidth > box.clientWidth + 1 && getComputedStyle(box).overflowX !== "visible";
      if (scrolls && !box.hasAttribute("tabindex")) box.setAttribute("tabindex", "0");
      else if (!scrolls && box.getAttribute("tabindex") === "0") box.removeAttribute("tabindex");
    });
  }
  let pending = 0;
  function soon() { cancelAnimationFrame(pending); pending = requestAnimationFrame(markScrollers); }
  document.addEventListener("DOMContentLoaded", soon);
  window.addEventListener("resize", soon);
  document.addEventListener("htmx:afterSettle", soon);
})();

// Undo notices (templates/approvals/_undo.html): a settled one goes by itself after a while, or on its
// Dismiss; the Undo itself is a plain form htmx posts.
(function () {
  "use strict";
  document.addEventListener("click", (event) => {
    const dismiss = event.target.closest("[data-dismiss-notice]");
    if (dismiss) dismiss.closest(".undo-notice").remove();
  });
  document.addEventListener("htmx:load", (event) => {
    const notice = event.detail.elt;
    if (notice.matches && notice.matches(".undo-notice[data-settled]")) {
      setTimeout(() => { if (!notice.contains(document.activeElement)) notice.remove(); }, 8000);
    }
  });
})();
