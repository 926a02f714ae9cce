// The log page's live tail: appends the try's new lines as they arrive, marks a re-place when a
// new epoch's system line appears, and stops at the try's outcome. Same-origin only: it reads
// /ui/…/log/tail with the page's own cookie. Without scripts the page refreshes itself instead.
"use strict";
(function () {
  const POLL_MS = 1000;
  const log = document.getElementById("log");
  const status = document.getElementById("tail-status");
  if (!log || !status || log.hasAttribute("data-finished")) return;
  const empty = document.getElementById("log-empty");
  let next = Number(log.dataset.next);

  function say(text, state) {
    status.textContent = text;
    status.dataset.state = state;
  }

  function append(line) {
    const span = document.createElement("span");
    span.className = line.kind === "line" ? "line" : line.kind === "system" ? "line sysline" : "line sysline replace";
    span.textContent = line.text;  // text, never markup
    log.appendChild(span);
  }

  async function poll() {
    let answer;
    try {
      const resp = await fetch(log.dataset.tail + "?offset=" + next,
        {credentials: "same-origin", redirect: "manual", headers: {Accept: "application/json"}});
      if (!resp.ok) throw new Error(resp.type === "opaqueredirect" ? "logged out" : "HTTP " + resp.status);
      answer = await resp.json();
    } catch (err) {
      say("stopped following (" + err.message + ") · reload the page to resume", "stopped");
      return;
    }
    const atBottom = window.innerHeight + window.scrollY >= document.body.scrollHeight - 8;
    for (const line of answer.lines) {
      append(line);
      if (line.kind === "replace") say("re-placed · now following epoch " + line.epoch, "replaced");
    }
    if (answer.lines.length) {
      if (empty) empty.hidden = true;
      if (atBottom) window.scrollTo(0, document.body.scrollHeight);
    }
    next = answer.next;
    if (answer.finished) {
      say("the try ended" + (answer.state ? " · " + answer.state : "") + " · no more lines", "finished");
      return;
    }
    setTimeout(poll, answer.more ? 0 : POLL_MS);
  }

  say("live · following new lines", "following");
  setTimeout(poll, POLL_MS);
})();
