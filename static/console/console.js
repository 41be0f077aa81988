// The console's live parts: the websocket that keeps the pending count in the navigation bar current.
(function () {
  "use strict";
  const badge = document.getElementById("pending-count");
  if (!badge) return;
  let delay = 1000;
  function connect() {
    const scheme = location.protocol === "https:" ? "wss://" : "ws://";
    const socket = new WebSocket(scheme + location.host + "/ws/console/");
    socket.addEventListener("open", () => { delay = 1000; });
    socket.addEventListener("message", (event) => {
      const data = JSON.parse(event.data);
      if (typeof data.pending === "number") {
        document.querySelectorAll("[data-live-pending]").forEach((el) => (el.textContent = String(data.pending)));
        badge.classList.toggle("hot", data.pending > 0);
      }
      document.dispatchEvent(new CustomEvent("airlock:push", { detail: data }));
    });
    socket.addEventListener("close", () => {
      setTimeout(connect, delay);
      delay = Math.min(delay * 2, 30000);
    });
  }
  connect();
})();
