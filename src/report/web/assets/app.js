// Live updates for the supervisor's pages. The server renders everything;
// this only swaps in what it sends. Without JavaScript the pages refresh
// themselves (a <noscript> refresh in the head).
"use strict";
(function () {
  const main = document.getElementById("main");
  // The sign-in and not-found pages have nothing to follow.
  if (!main || !window.EventSource || main.classList.contains("signin") || main.dataset.static) return;
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
    // Browsers that can inflate get the live part gzipped: a tenth of the bytes.
    const gzip = "DecompressionStream" in window;
    const url = "/api/v1/operations/" + encodeURIComponent(op) + "/events" + (gzip ? "?z=gzip" : "");
    const source = new EventSource(url);
    let shown = Number(main.dataset.version || 0);
    const apply = (at, html) => {
      // Updates inflate asynchronously: never let an older one win.
      if (at && Number(at) < shown) return;
      shown = Number(at || shown);
      // Keep what the reader typed in the filter and which details are open.
      const typed = document.getElementById("log-filter");
      const value = typed ? typed.value : "";
      const open = [...live.querySelectorAll("details[open]")].map((d) => d.className);
      live.innerHTML = html;
      main.dataset.version = at;
      const again = document.getElementById("log-filter");
      if (again) again.value = value;
      for (const d of live.querySelectorAll("details")) {
        if (open.includes(d.className)) d.open = true;
      }
      filter();
    };
    source.addEventListener("update", (e) => apply(e.lastEventId, e.data));
    source.addEventListener("update-gzip", async (e) => {
      const bytes = Uint8Array.from(atob(e.data), (c) => c.charCodeAt(0));
      const stream = new Blob([bytes]).stream().pipeThrough(new DecompressionStream("gzip"));
      apply(e.lastEventId, await new Response(stream).text());
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
