// clore-run dashboard: keeps server-rendered parts of a page live, and follows a job's log.
// Plain JavaScript, loaded as a file (the Content-Security-Policy allows no inline script).
// Every fragment comes from the server already escaped; log text is set as text, never HTML.
"use strict";

(function () {
  const toLogin = function () {
    window.location.assign("/login?next=" + encodeURIComponent(location.pathname + location.search));
  };

  // An element with data-live="URL" is replaced by that URL's fragment every data-every ms,
  // while the tab is visible. An unchanged fragment comes back as an empty 304 (its ETag).
  function keepLive(el) {
    const every = Number(el.dataset.every || 2000);
    let tag = null;
    let busy = false;
    async function refresh() {
      if (busy || document.visibilityState !== "visible") return;
      busy = true;
      try {
        const headers = tag ? { "If-None-Match": tag } : {};
        const reply = await fetch(el.dataset.live, { credentials: "same-origin", cache: "no-store", headers: headers });
        if (reply.status === 401) return toLogin();
        if (reply.status === 200) {
          tag = reply.headers.get("ETag");
          el.innerHTML = await reply.text();
          el.dispatchEvent(new CustomEvent("live:updated", { bubbles: true }));
        }
      } catch (e) {
        // the server restarting: try again on the next tick
      } finally {
        busy = false;
      }
    }
    setInterval(refresh, every);
    document.addEventListener("visibilitychange", refresh);
  }

  // The log opens at its tail (a 10 MB log must not freeze the page), earlier chunks on demand,
  // new bytes while the job runs. Bytes are decoded as a stream: a character split between two
  // reads is joined again.
  function followLog(pre) {
    const url = pre.dataset.log;
    const chunk = Number(pre.dataset.chunk || 65536);
    const earlier = document.getElementById("log-earlier");
    const note = document.getElementById("log-note");
    const follow = document.getElementById("log-follow");
    const decoder = new TextDecoder("utf-8");
    let start = 0, end = 0, size = 0, final = false;

    function show() {
      earlier.hidden = start === 0;
      note.textContent = start === 0 && end === size
        ? size + " bytes"
        : "bytes " + start + "–" + end + " of " + size;
    }
    async function get(query) {
      const reply = await fetch(url + "?" + query, { credentials: "same-origin", cache: "no-store" });
      if (reply.status === 401) { toLogin(); return null; }
      if (!reply.ok) return null;
      size = Number(reply.headers.get("X-Log-Size"));
      final = reply.headers.get("X-Log-Final") === "1";
      return { start: Number(reply.headers.get("X-Log-Start")), end: Number(reply.headers.get("X-Log-End")), bytes: new Uint8Array(await reply.arrayBuffer()) };
    }
    async function first() {
      const got = await get("tail=" + chunk);
      if (!got) return;
      start = got.start; end = got.end;
      pre.textContent = decoder.decode(got.bytes, { stream: true });
      pre.scrollTop = pre.scrollHeight;
      show();
      setTimeout(more, 1000);
    }
    async function more() {
      if (document.visibilityState === "visible") {
        const atBottom = pre.scrollTop + pre.clientHeight >= pre.scrollHeight - 4;
        const got = await get("start=" + end);
        if (got && got.bytes.length) {
          end = got.end;
          pre.append(decoder.decode(got.bytes, { stream: true }));
          if (follow.checked && atBottom) pre.scrollTop = pre.scrollHeight;
          show();
        }
        if (final && end >= size) { pre.dataset.done = "1"; return; }
        if (got && got.end < size) return more();  // more than one read behind: catch up now
      }
      setTimeout(more, 1000);
    }
    earlier.addEventListener("click", async function () {
      const got = await get("end=" + start + "&tail=" + chunk);
      if (!got) return;
      const height = pre.scrollHeight;
      start = got.start;
      pre.prepend(new TextDecoder("utf-8").decode(got.bytes));
      pre.scrollTop += pre.scrollHeight - height;  // keep the lines being read in place
      show();
    });
    first();
  }

  // A form with data-confirm asks first (cancel). Delegated: live parts are replaced.
  document.addEventListener("submit", function (event) {
    const form = event.target;
    if (form.dataset && form.dataset.confirm && !window.confirm(form.dataset.confirm)) {
      event.preventDefault();
    }
  });

  document.addEventListener("DOMContentLoaded", function () {
    document.querySelectorAll("[data-live]").forEach(keepLive);
    const log = document.getElementById("log");
    if (log) followLog(log);
  });
})();
