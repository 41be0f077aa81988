// The run page follows its session while a turn of it has not ended (the session stream, SPEC section 10):
// when a turn starts or ends, the headline and the timeline are read again from the server, the turns the
// reader opened or closed kept as they were. A run without a session (a replay) follows its own stream until
// it ends. The page without JavaScript shows the same, on reload.
(() => {
  "use strict";
  const timeline = document.getElementById("timeline");
  if (!timeline || !window.EventSource) return;
  const { session, run } = timeline.dataset;
  if (!session && !run) return;
  const source = new EventSource(
    session ? `/api/sessions/${encodeURIComponent(session)}/events` : `/api/runs/${encodeURIComponent(run)}/events`);
  let timer;

  async function refresh() {
    const response = await fetch(window.location.href, { headers: { Accept: "text/html" } });
    if (!response.ok) return;
    const fresh = new DOMParser().parseFromString(await response.text(), "text/html");
    const folded = new Map([...timeline.querySelectorAll("li.session-turn[id] > details")].map(
      (details) => [details.parentElement.id, details.open]));
    for (const id of ["run-headline", "run-requests", "timeline"]) {
      const now = document.getElementById(id);
      const next = fresh.getElementById(id);
      if (now && next) now.replaceChildren(...next.childNodes);
    }
    for (const [id, open] of folded) {
      const details = document.querySelector(`li.session-turn[id="${CSS.escape(id)}"] > details`);
      if (details) details.open = open;
    }
    // Everything has ended: nothing more to follow.
    const next = fresh.getElementById("timeline")?.dataset || {};
    if (!next.session && !next.run) source.close();
  }

  const soon = () => {
    clearTimeout(timer);
    timer = setTimeout(refresh, 250);
  };
  source.addEventListener("run.started", soon);
  source.addEventListener("session.idle", soon);
  // The run's own stream ends with `done`: read the page once more, and do not let EventSource reconnect.
  source.addEventListener("done", () => {
    source.close();
    refresh();
  });
})();
