// Keyboard shortcuts: j/k next/previous issue, a accept suggestions, Enter apply,
// r toggle triage review, b bisect, o open, ? help. Every key only clicks or follows
// something that is on the page anyway, so the pages work the same without this file.
(function () {
  "use strict";

  function typing(target) {
    var tag = target && target.tagName;
    return tag === "INPUT" || tag === "TEXTAREA" || tag === "SELECT" || (target && target.isContentEditable);
  }

  function rows() { return Array.prototype.slice.call(document.querySelectorAll("[data-issue-row]")); }

  function selectedRow() { return document.querySelector("[data-issue-row].selected"); }

  function select(row) {
    var old = selectedRow();
    if (old) old.classList.remove("selected");
    if (!row) return;
    row.classList.add("selected");
    row.scrollIntoView({ block: "nearest" });
    sessionStorage.setItem("pt2-selected", row.getAttribute("data-issue-row"));
  }

  function move(step) {
    var issue = document.querySelector("[data-issue]");
    if (issue) {  // on an issue page, j/k go to the neighbouring issue of the queue
      var href = issue.getAttribute(step > 0 ? "data-next" : "data-prev");
      if (href) window.location.href = href;
      return;
    }
    var all = rows();
    if (!all.length) return;
    var i = all.indexOf(selectedRow());
    select(all[i < 0 ? 0 : Math.min(Math.max(i + step, 0), all.length - 1)]);
  }

  function click(selector, scope) {
    var el = (scope || document).querySelector(selector);
    if (el) { el.click(); return true; }
    return false;
  }

  function accept() {
    var row = selectedRow();
    if (row) return click("[data-accept]", row);
    var form = document.getElementById("triage-form");
    if (!form) return false;
    form.reset();  // back to the rendered state, which is the rubric's suggestions
    return click("[data-accept]", form);
  }

  function apply() {
    // The visible Apply button of the current preview; in the queue, the selected row's.
    var row = selectedRow();
    if (row) {
      var slot = document.getElementById("apply-preview-" + row.getAttribute("data-issue-row"));
      return slot ? click("[data-apply]", slot) : false;
    }
    return click("[data-apply]");
  }

  function toggleReview() {
    var box = document.querySelector("#triage-form input[name=review]");
    if (!box) return false;
    box.checked = !box.checked;
    box.dispatchEvent(new Event("change", { bubbles: true }));
    return true;
  }

  function bisect() {
    var row = selectedRow();
    if (row) { window.location.href = row.getAttribute("data-href") + "#bisection"; return true; }
    return click("[data-bisect]");
  }

  function openIssue() {
    // In the queue: the selected row's issue page. On an issue page: the issue on GitHub, in a new tab.
    var row = selectedRow();
    if (row) { window.location.href = row.getAttribute("data-href"); return true; }
    var link = document.querySelector("[data-github]");
    if (!link) return false;
    window.open(link.href, "_blank", "noopener");
    return true;
  }

  function toggleHelp(force) {
    var help = document.getElementById("help");
    if (help) help.hidden = force === undefined ? !help.hidden : !force;
  }

  document.addEventListener("click", function (event) {
    if (event.target.closest("[data-help-toggle]")) toggleHelp();
  });

  document.addEventListener("keydown", function (event) {
    if (event.ctrlKey || event.metaKey || event.altKey) return;
    if (event.key === "Escape") { toggleHelp(false); return; }
    if (typing(event.target)) return;
    var handled = true;
    switch (event.key) {
      case "j": move(1); break;
      case "k": move(-1); break;
      case "a": handled = accept(); break;
      case "Enter": handled = apply(); break;
      case "r": handled = toggleReview(); break;
      case "b": handled = bisect(); break;
      case "o": handled = openIssue(); break;
      case "?": toggleHelp(); break;
      default: handled = false;
    }
    if (handled) event.preventDefault();
  });

  // Keep the selection across htmx swaps of the queue table.
  function restore() {
    if (selectedRow()) return;
    var number = sessionStorage.getItem("pt2-selected");
    var row = number && document.querySelector('[data-issue-row="' + CSS.escape(number) + '"]');
    if (row) row.classList.add("selected");
  }
  document.addEventListener("htmx:afterSwap", restore);
  document.addEventListener("DOMContentLoaded", restore);
})();
