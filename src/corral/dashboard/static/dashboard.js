// corral's dashboard: the page's own script (the CSP allows no inline script).
// - every htmx request carries the session's CSRF token (X-CSRF-Token);
// - the live stream closes while the tab is hidden and reopens when it shows again
//   (a page loaded in a hidden tab opens none until it is shown);
// - a filter <select> submits its form when it changes;
// - the header's status says whether the panels are live;
// - the tasks ticked in the Tasks panel stay ticked when the stream redraws it (and
//   are cleared once an action on them is done); a Dismiss or Back button empties
//   the panel's action area.
(function () {
  "use strict";
  var source = null;

  // Loaded before the SSE extension, which keeps an EventSource factory already set.
  htmx.createEventSource = function (url) {
    source = new EventSource(url, { withCredentials: true });
    if (document.hidden) {
      // A background tab: closed before it opens (the SSE extension has set its
      // handlers by then); shown, the page opens a new one.
      var opened = source;
      window.setTimeout(function () {
        if (source === opened && document.hidden) {
          pause();
        }
      }, 0);
    }
    return source;
  };

  function pause() {
    if (source) {
      source.close();
      source = null;
    }
    setState("paused");
  }

  function setState(state) {
    var el = document.getElementById("live-state");
    if (el) {
      el.textContent = state;
      el.setAttribute("data-state", state);
    }
  }

  function csrf() {
    var meta = document.querySelector('meta[name="csrf-token"]');
    return meta ? meta.getAttribute("content") : null;
  }

  document.addEventListener("htmx:configRequest", function (event) {
    var token = csrf();
    if (token) {
      event.detail.headers["X-CSRF-Token"] = token;
    }
  });
  document.addEventListener("htmx:sseOpen", function () {
    if (document.hidden) {
      pause();
    } else {
      setState("live");
    }
  });
  document.addEventListener("htmx:sseError", function () { setState("reconnecting"); });
  document.addEventListener("htmx:sseClose", function (event) {
    // The server ends the stream with "expired" when the session runs out.
    if (event.detail && event.detail.type === "message") {
      window.location.reload();
    }
  });

  document.addEventListener("visibilitychange", function () {
    var live = document.getElementById("live");
    if (!live) {
      return;
    }
    if (document.hidden) {
      pause();
    } else if (source === null) {
      // A fresh copy of the live region opens a new stream; the server sends every
      // panel as it is now.
      var fresh = live.cloneNode(true);
      live.replaceWith(fresh);
      htmx.process(fresh);
    }
  });

  var selected = new Set();

  function tickSelected() {
    document.querySelectorAll('#tasks input[name="task_id"]').forEach(function (box) {
      box.checked = selected.has(box.value);
    });
  }

  document.addEventListener("htmx:afterSettle", function (event) {
    if (event.target && event.target.id === "tasks") {
      tickSelected();
    }
  });
  document.addEventListener("htmx:afterRequest", function (event) {
    var source = event.detail && event.detail.elt;
    if (source && source.id === "task-selection" && event.detail.successful) {
      selected.clear();
      tickSelected();
    }
  });
  document.addEventListener("click", function (event) {
    var button = event.target.closest ? event.target.closest("[data-dismiss]") : null;
    var area = document.getElementById("task-action");
    if (button && area && area.contains(button)) {
      area.replaceChildren();
    }
  });

  document.addEventListener("change", function (event) {
    if (event.target.name === "task_id" && event.target.type === "checkbox") {
      if (event.target.checked) {
        selected.add(event.target.value);
      } else {
        selected.delete(event.target.value);
      }
    }
    var form = event.target.form;
    if (form && form.hasAttribute("data-autosubmit") && event.target.tagName === "SELECT") {
      form.requestSubmit();
    }
  });
})();
