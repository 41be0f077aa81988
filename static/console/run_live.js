// The run page follows its session while a turn of it has not ended (the session stream, SPEC section 10):
// when a turn starts or ends, the headline and the timeline are read again from the server, the turns the
// reader opened or closed kept as they were. The page without JavaScript shows the same, on reload.
(() => {
  "use strict";
  const timeline = document.getElementById("timeline");
  if (!timeline || !timeline.dataset.session || !window.EventSource) return;
  const source = new EventSource(`/api/sessions/${encodeURIComponent(timeline.dataset.session)}/events`);
  let timer;

  async function refresh() {
    const response = await fetch(window.location.href, { headers: { Accept: "text/html" } });
    if (!response.ok) return;
    const fresh = new DOMParser().parseFromString(await response.text(), "text/html");
    const folded = new Map([...timeline.querySelectorAll("li.session-turn[id] > details")].map(
      (details) => [details.parentElement.id, details.open]));
    for (const id of ["run-headline", "timeline"]) {
      const now = document.getElementById(id);
      const next = fresh.getElementById(id);
      if (now && next) now.replaceChildren(...next.childNodes);
    }
    for (const [id, open] of folded) {
      const details = document.querySelector(`li.session-turn[id="${CSS.escape(id)}"] > details`);
      if (details) details.open = open;
    }
    // Everything has ended: nothing more to follow.
    if (!fresh.getElementById("timeline")?.dataset.session) source.close();
  }

  const soon = () => {
    clearTimeout(timer);
    timer = setTimeout(refresh, 250);
  };
  source.addEventListener("run.started", soon);
  source.addEventListener("session.idle", soon);
})();
