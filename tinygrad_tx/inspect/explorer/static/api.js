// What every view shares, on one global object, TX (the page's scripts are plain scripts, run in the
// order index.html lists them, so that a saved page can hold them all inline):
// - TX.api(path, body): asks the server (GET, or POST with a JSON body); in a saved page it reads
//   the answers saved inside it (export.py) and asks nothing of anyone;
// - TX.onNews(listener): the run's news while it trains (new metrics, a new checkpoint), from one
//   server-sent event stream that the shell (explore.js) opens;
// - TX.showView(name), which the shell provides.
"use strict";
window.TX = { views: {} };

(() => {
  const holder = document.getElementById("tx-saved");
  const saved = holder ? JSON.parse(holder.textContent) : null;
  TX.saved = saved !== null;

  TX.api = async (path, body) => {
    if (saved) return fromSaved(path, body);
    const options = body === undefined ? {} :
      { method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(body) };
    const response = await fetch(path, options);
    const answer = await response.json();
    if (!response.ok) throw new Error(answer.error || response.statusText);
    damaged(answer);
    return answer;
  };

  // A checkpoint that does not read (cut short): every answer shown from another says so, in one
  // banner at the top of the page.
  function damaged(answer) {
    const why = answer && answer.shows && answer.shows.damaged;
    const banner = document.getElementById("damaged");
    if (why && banner) { banner.textContent = why; banner.hidden = false; }
  }

  function fromSaved(path, body) {
    const key = body === undefined ? path : `POST ${path} ${JSON.stringify(body)}`;
    if (key in saved) { damaged(saved[key]); return saved[key]; }
    throw new Error("this saved page holds only what was saved with it (the step, its walk, the example " +
                    "sentence): serve the run (python -m models explore RUN) to ask for anything else");
  }

  const listeners = [], heard = [];  // a view started later hears the news so far first
  TX.onNews = (listener) => { listeners.push(listener); for (const event of heard) listener(event); };
  TX.news = (event) => { heard.push(event); for (const listener of listeners) listener(event); };

  let show = null;
  TX.onShowView = (how) => { show = how; };
  TX.showView = (name) => show(name);
})();
