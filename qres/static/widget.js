/* qres "similar questions" widget: plain JavaScript, no dependencies.
 *
 * As someone types a question's title, it lists the questions already asked that look
 * the same, from a qres service's GET /search.
 *
 *   <input id="title" name="title" data-qres-similar data-qres-link="/questions/{id}">
 *   <script src="https://qres.example.org/widget.js" defer></script>
 *
 * Options: data- attributes on the input, or qresSimilar.attach(input, {...}):
 *   data-qres-endpoint   the qres service [default: the folder widget.js was loaded from]
 *   data-qres-k          how many questions to show [5]
 *   data-qres-link       a question's page, "{id}" replaced by its id [none: titles only]
 *   data-qres-min-chars  fewest characters before searching [3]
 *   data-qres-debounce   milliseconds of quiet typing before searching [250]
 *   data-qres-timeout    milliseconds before a search counts as failed [4000]
 * A question whose answer count the index holds shows it beside its title ("3 answers").
 * Choosing a question (click, or arrow keys then Enter) fires a bubbling "qres:select"
 * event on the input ({detail: {id, title}}), then follows its link unless the event's
 * default was prevented.
 */
(function () {
  "use strict";

  var script = document.currentScript;
  // the folder widget.js was loaded from: behind a proxy's /qres/, its /search is /qres/search
  var scriptBase = script && script.src ? new URL(".", new URL(script.src, location.href)).href : "";
  var widgets = 0;
  var MAX_QUERY_CHARS = 2000; // what the service takes (qres serve's max_query_chars)
  var MAX_K = 100; // and how many it gives at most (--max-k)

  var CSS =
    ".qres-similar{margin:.5rem 0 1rem;padding:.6rem .8rem;border:1px solid #d0d7de;" +
    "border-radius:6px;background:#f6f8fa}" +
    ".qres-similar[hidden],.qres-similar [hidden]{display:none}" +
    ".qres-similar[data-state=empty]{background:none;border-style:dashed}" +
    ".qres-similar[data-state=error]{border-color:#cf222e;background:#fff5f5}" +
    ".qres-heading{margin:0 0 .3rem;font-weight:600}" +
    ".qres-list{list-style:none;margin:0;padding:0}" +
    ".qres-option{padding:.3rem .45rem;border-radius:4px;cursor:pointer;overflow-wrap:anywhere;" +
    "display:-webkit-box;-webkit-box-orient:vertical;-webkit-line-clamp:3;overflow:hidden}" +
    ".qres-option:hover{background:#eaeef2}" +
    ".qres-option a{color:#0969da;text-decoration:none}" +
    ".qres-option.qres-active{background:#ddf4ff;box-shadow:inset 0 0 0 2px #0969da}" +
    ".qres-answers{margin-left:.5em;color:#57606a;font-size:.85em;white-space:nowrap}" +
    ".qres-status{margin:.2rem 0 0;color:#57606a;font-size:.9em}" +
    ".qres-similar[data-state=error] .qres-status{color:#cf222e}";

  function addStyle() {
    if (document.getElementById("qres-similar-style")) return;
    var style = document.createElement("style");
    style.id = "qres-similar-style";
    style.textContent = CSS;
    document.head.appendChild(style);
  }

  function element(tag, className, attributes) {
    var el = document.createElement(tag);
    el.className = className;
    Object.keys(attributes || {}).forEach(function (name) {
      el.setAttribute(name, attributes[name]);
    });
    return el;
  }

  function attach(input, options) {
    options = options || {};
    var data = input.dataset;
    function option(name, fallback) {
      var value = options[name] !== undefined ? options[name] : data["qres" + name[0].toUpperCase() + name.slice(1)];
      return value === undefined || value === "" ? fallback : value;
    }
    var endpoint = String(option("endpoint", scriptBase)).replace(/\/+$/, "");
    var k = Math.min(MAX_K, Math.max(1, Math.floor(Number(option("k", 5))) || 5));
    var link = option("link", "");
    var minChars = Number(option("minChars", 3));
    var debounce = Number(option("debounce", 250));
    var timeout = Number(option("timeout", 4000));

    addStyle();
    var id = "qres-similar-" + ++widgets;
    var box = element("div", "qres-similar", { "data-state": "idle" });
    var heading = element("p", "qres-heading", { id: id + "-heading" });
    heading.textContent = "These questions may already have your answer:";
    var list = element("ul", "qres-list", {
      id: id + "-list",
      role: "listbox",
      "aria-labelledby": id + "-heading",
    });
    var status = element("p", "qres-status", { role: "status", "aria-live": "polite" });
    box.appendChild(heading);
    box.appendChild(list);
    box.appendChild(status);
    box.hidden = true;
    input.insertAdjacentElement("afterend", box);

    input.setAttribute("role", "combobox");
    input.setAttribute("aria-autocomplete", "list");
    input.setAttribute("aria-expanded", "false");
    input.setAttribute("aria-controls", list.id);
    input.setAttribute("autocomplete", "off");

    var timer = null;
    var pending = null; // the AbortController of the search in flight
    var shown = null; // the text whose answer is on screen
    var items = [];
    var active = -1;

    function cancel() {
      // the search waiting or in flight is for text no longer in the box
      clearTimeout(timer);
      timer = null;
      if (pending) pending.abort();
      pending = null;
      box.removeAttribute("aria-busy");
    }

    function show(state, message) {
      box.setAttribute("data-state", state);
      box.hidden = state === "idle";
      heading.hidden = state !== "results";
      status.textContent = message || "";
    }

    function clear() {
      list.textContent = "";
      items = [];
      active = -1;
      input.setAttribute("aria-expanded", "false");
      input.removeAttribute("aria-activedescendant");
    }

    function highlight(index) {
      items.forEach(function (item, i) {
        item.setAttribute("aria-selected", i === index ? "true" : "false");
        item.classList.toggle("qres-active", i === index);
      });
      active = index;
      input.setAttribute("aria-activedescendant", items[index].id);
      items[index].scrollIntoView({ block: "nearest" });
    }

    function choose(index) {
      var item = items[index];
      var event = new CustomEvent("qres:select", {
        bubbles: true,
        cancelable: true,
        detail: { id: item.getAttribute("data-id"), title: item.getAttribute("data-title") },
      });
      var anchor = item.querySelector("a");
      if (input.dispatchEvent(event) && anchor) location.href = anchor.href;
    }

    function render(results) {
      clear();
      results.forEach(function (result, i) {
        var label = result.title || result.id;
        var title = document.createElement("bdi"); // its right-to-left text stays its own
        title.textContent = label;
        var item = element("li", "qres-option", {
          id: id + "-option-" + i,
          role: "option",
          "aria-selected": "false",
          "data-id": result.id,
          "data-title": label,
        });
        if (link) {
          var anchor = element("a", "", { href: link.split("{id}").join(encodeURIComponent(result.id)), tabindex: "-1" });
          anchor.appendChild(title);
          item.appendChild(anchor);
        } else {
          item.appendChild(title);
        }
        var count = result.answer_count;
        if (typeof count === "number" && isFinite(count) && count >= 0) {
          var answers = element("span", "qres-answers");
          answers.textContent = count === 1 ? "1 answer" : count + " answers";
          item.appendChild(document.createTextNode(" ")); // read as "title, 3 answers"
          item.appendChild(answers);
        }
        item.addEventListener("mousedown", function (event) {
          event.preventDefault(); // keep the focus in the input
          // a plain click chooses; a right, middle or modified click is the browser's (a new tab)
          if (event.button === 0 && !(event.ctrlKey || event.metaKey || event.shiftKey || event.altKey)) choose(i);
        });
        list.appendChild(item);
        items.push(item);
      });
      if (results.length) {
        input.setAttribute("aria-expanded", "true");
        var n = results.length;
        show("results", n + (n === 1 ? " similar question" : " similar questions") + ". Use the arrow keys to read them.");
      } else {
        show("empty", "No similar questions yet.");
      }
    }

    function search(text, typing) {
      if (pending) pending.abort(); // an older search's answer would be stale
      var mine = (pending = new AbortController());
      var timedOut = false;
      var limit = setTimeout(function () {
        timedOut = true;
        mine.abort();
      }, timeout);
      box.setAttribute("aria-busy", "true");
      var params = { q: text.slice(0, MAX_QUERY_CHARS), k: String(k) };
      if (typing) params.typing = "true"; // the last word may be unfinished: the server completes it
      var url = endpoint + "/search?" + new URLSearchParams(params);
      fetch(url, { signal: mine.signal, headers: { Accept: "application/json" } })
        .then(function (response) {
          if (!response.ok) throw Object.assign(new Error("HTTP " + response.status), { status: response.status });
          return response.json();
        })
        .then(function (answer) {
          if (mine !== pending) return;
          shown = text;
          render(answer.results || []);
        })
        .catch(function (error) {
          if (mine !== pending || (error.name === "AbortError" && !timedOut)) return;
          shown = null;
          clear();
          var refused = error.status >= 400 && error.status < 500;
          show(
            "error",
            refused
              ? "Similar questions are unavailable: the search service refused this request (HTTP " + error.status + ")."
              : "Similar questions are unavailable right now: the search service is not answering."
          );
        })
        .finally(function () {
          clearTimeout(limit);
          if (mine === pending) {
            pending = null;
            box.removeAttribute("aria-busy");
          }
        });
    }

    input.addEventListener("input", function () {
      clearTimeout(timer);
      var text = input.value.trim();
      var typing = !/\s$/.test(input.value); // a space after the last word: it is finished
      if (text.length < minChars) {
        cancel();
        shown = null;
        clear();
        show("idle");
        return;
      }
      timer = setTimeout(function () {
        timer = null;
        if (text !== shown) search(text, typing);
        else cancel(); // back to the text on screen: an answer for another would replace it
      }, debounce);
    });

    input.addEventListener("keydown", function (event) {
      if (event.key === "Escape" && (!box.hidden || pending || timer)) {
        cancel(); // else a search already under way would open it again
        clear();
        show("idle");
        shown = null;
        return;
      }
      if (!items.length) return;
      if (event.key === "ArrowDown") {
        event.preventDefault();
        highlight((active + 1) % items.length);
      } else if (event.key === "ArrowUp") {
        event.preventDefault();
        highlight(active <= 0 ? items.length - 1 : active - 1);
      } else if (event.key === "Enter" && active >= 0) {
        event.preventDefault();
        choose(active);
      }
    });

    // The list stays on the page while the question is written; the combobox is closed.
    input.addEventListener("blur", function () {
      input.setAttribute("aria-expanded", "false");
      input.removeAttribute("aria-activedescendant");
      items.forEach(function (item) {
        item.classList.remove("qres-active");
        item.setAttribute("aria-selected", "false");
      });
      active = -1;
    });
    input.addEventListener("focus", function () {
      if (items.length) input.setAttribute("aria-expanded", "true");
    });

    return { search: search, element: box };
  }

  window.qresSimilar = { attach: attach };

  function attachAll() {
    Array.prototype.forEach.call(document.querySelectorAll("[data-qres-similar]"), function (input) {
      attach(input);
    });
  }
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", attachAll);
  else attachAll();
})();
