// Live updates for the supervisor's pages. The server renders everything;
// this only swaps in what it sends. Without JavaScript the pages refresh
// themselves (a <noscript> refresh in the head).
"use strict";
(function () {
  const main = document.getElementById("main");
  if (!main || !window.EventSource) return;
  const filter = () => {
    const input = document.getElementById("log-filter");
    if (!input) return;
    const words = input.value.trim().toLowerCase();
    for (const row of document.querySelectorAll("table.log tbody tr")) {
      row.hidden = words !== "" && !row.textContent.toLowerCase().includes(words);
    }
  };
  document.addEventListener("input", (e) => {
    if (e.target && e.target.id === "log-filter") filter();
  });
  const op = main.dataset.op;
  if (op) {
    const live = document.getElementById("live");
    const source = new EventSource("/api/v1/operations/" + encodeURIComponent(op) + "/events");
    source.addEventListener("update", (e) => {
      const at = e.lastEventId;
      if (at && main.dataset.version === at) return;
      // Keep what the reader typed in the filter and which details are open.
      const typed = document.getElementById("log-filter");
      const value = typed ? typed.value : "";
      const open = [...live.querySelectorAll("details[open]")].map((d) => d.className);
      live.innerHTML = e.data;
      main.dataset.version = at;
      const again = document.getElementById("log-filter");
      if (again) again.value = value;
      for (const d of live.querySelectorAll("details")) {
        if (open.includes(d.className)) d.open = true;
      }
      filter();
    });
    return;
  }
  // The operations list: any change refetches the list as the page shows it.
  const source = new EventSource("/api/v1/events");
  source.addEventListener("changed", async () => {
    const answer = await fetch(window.location.href, { credentials: "same-origin" });
    if (!answer.ok) return;
    const page = new DOMParser().parseFromString(await answer.text(), "text/html");
    const fresh = page.getElementById("main");
    if (fresh) main.innerHTML = fresh.innerHTML;
  });
})();
