// Keyboard shortcuts: j/k next/previous issue, a accept suggestions, l add a label, Enter apply,
// r toggle triage review, b bisect, o open, ? help. Every key only clicks or follows
// something that is on the page anyway, so the pages work the same without this file.
(function () {
  "use strict";

  // Keys that type text into a field are the field's. A clicked radio, checkbox or button keeps the focus but takes no
  // text: after a click on a lane (a radio), j and a must still work.
  var NOT_TEXT = ["checkbox", "radio", "button", "submit", "reset", "image", "range", "color", "file"];

  function typing(target) {
    var tag = target && target.tagName;
    if (tag === "INPUT") return NOT_TEXT.indexOf((target.type || "text").toLowerCase()) < 0;
    return tag === "TEXTAREA" || tag === "SELECT" || !!(target && target.isContentEditable);
  }

  // Scroll the page up or down, never sideways, just enough to show el (scrollIntoView also scrolls a wide
  // table's container sideways to its left edge).
  function reveal(el) {
    if (!el) return;
    var box = el.getBoundingClientRect(), top = 0, bottom = window.innerHeight;
    if (box.bottom > bottom) window.scrollBy(0, Math.min(box.bottom - bottom + 8, box.top - top - 8));
    else if (box.top < top) window.scrollBy(0, box.top - top - 8);
  }

  function rows() { return Array.prototype.slice.call(document.querySelectorAll("[data-issue-row]")); }

  function selectedRow() { return document.querySelector("[data-issue-row].selected"); }

  // The preview a row left behind closes when the selection moves on (`j`, `k`): one live "Apply to GitHub" form on
  // the page, the selected row's. A decision on its way stays: its slot shows GitHub's answer as it comes.
  function closePreview(row) {
    var slot = row && document.querySelector(slotOf(row));
    if (!slot || slot.querySelector("[data-decision-status]")) return;
    if (!slot.querySelector("[data-queue-edit], .preview, [data-form-errors]")) return;
    if (pending && pending.slot === slotOf(row)) pending = null;
    slot.innerHTML = "";
    slot.classList.remove("refused");
  }

  function select(row) {
    var old = selectedRow();
    if (old && old !== row) closePreview(old);
    if (old) old.classList.remove("selected");
    // Space and Tab must not act on a box of the preview left behind.
    var focused = document.activeElement;
    if (focused && focused.closest && focused.closest("[data-queue-edit]")) focused.blur();
    if (!row) return;
    row.classList.add("selected");
    reveal(row);
    sessionStorage.setItem("pt2-selected", row.getAttribute("data-issue-row"));
  }

  // A row already waiting needs nothing from the triager now: flagged for the meeting (R11) or with a decision on
  // its way (the server marks both in data-waiting), or decided from this page (its slot shows the decision).
  function waitingRow(row) {
    if (row.getAttribute("data-waiting")) return true;
    var slot = row.nextElementSibling;
    var shown = slot && slot.querySelector("[data-decision-status]");
    return !!shown && ["pending", "applying", "applied"].indexOf(shown.getAttribute("data-decision-status")) >= 0;
  }

  function move(step) {
    var issue = document.querySelector("[data-issue]");
    if (issue) {  // on an issue page, j/k go to the neighbouring issue of the queue (the server skips the waiting)
      var href = issue.getAttribute(step > 0 ? "data-next" : "data-prev");
      if (href) window.location.href = href;
      return;
    }
    var all = rows();
    if (!all.length) return;
    var i = all.indexOf(selectedRow());
    if (i < 0) i = step > 0 ? -1 : all.length;
    for (var j = i + step; j >= 0 && j < all.length; j += step) {
      if (!waitingRow(all[j])) { select(all[j]); return; }
    }
  }

  function click(selector, scope) {
    var el = (scope || document).querySelector(selector);
    if (el) { el.click(); return true; }
    return false;
  }

  function slotOf(row) { return "#apply-preview-" + CSS.escape(row.getAttribute("data-issue-row")); }

  // The preview `a` opened in the selected row: its own form, to untick or add a label before Enter.
  function queueEdit(row) { return row ? document.querySelector(slotOf(row) + " [data-queue-edit]") : null; }

  // The row whose preview `a` asked for: once it is there, the keys reach its boxes (Space unticks, Tab moves on).
  var focusPreview = null;

  // The form `a` submits: in a row, the form of its Accept button (the row holds other forms too, e.g. "take it");
  // on the issue page, the triage form.
  function acceptForm(row) {
    var button = row && row.querySelector("[data-accept]");
    return row ? button && button.form : document.getElementById("triage-form");
  }

  function accept() {
    var row = selectedRow();
    var form = acceptForm(row);
    if (!form) return false;
    pending = null;  // a new preview is coming: an earlier Enter must not apply the one it replaces
    focusPreview = row ? "apply-preview-" + row.getAttribute("data-issue-row") : null;
    return click("[data-accept]", form);  // on the issue page the click listener below resets the boxes
  }

  // `l`: the label picker of the preview in sight (the selected row's) or of the issue page's triage form.
  function pickerField() {
    var row = selectedRow();
    var scope = row ? queueEdit(row) : document.getElementById("triage-form");
    var field = scope && scope.querySelector("[data-label-picker] input[list]");
    if (!field) return false;
    field.focus({ preventScroll: true });
    reveal(field);
    return true;
  }

  // What a form says will be applied: the ticked labels, route, hand-off and review flag. The triage
  // form and the preview's Apply form carry the same field names, so equal strings mean the preview
  // shows exactly what is ticked.
  function choices(form) {
    var data = new FormData(form);
    var labels = data.getAll("labels").concat(data.getAll("add_labels").filter(function (v) { return v.trim(); }));
    return JSON.stringify([labels.sort(), data.get("route") || "", data.get("handoff_to") || "",
                           data.get("transfer_to") || "", data.get("duplicate_of") || "", data.get("review") === "on",
                           data.get("hold") === "on"]);
  }

  function busy(form) { return !!form && form.classList.contains("htmx-request"); }

  // htmx shows a swapped preview at once but wires its forms only when it settles (20 ms on): an Apply button clicked
  // before then sends a plain POST and leaves the page. htmx:afterSettle calls applyWhenCurrent again.
  function settling(slot) {
    var el = document.querySelector(slot);
    return !!el && (el.classList.contains("htmx-settling") || !!el.querySelector(".htmx-settling"));
  }

  // Enter applies the preview only once it is the preview of what is ticked: typed fast, `a r Enter`
  // would otherwise apply the preview of `a` while the box of `r` shows ticked.
  var pending = null;

  function applyWhenCurrent() {
    var p = pending;
    if (!p || reviewAfter) return;  // `a r Enter` typed fast: Enter waits for the preview with the flag
    // Its preview is on the way (a row's: `a`'s, or that of a box just unticked): htmx:afterSettle calls again.
    if (busy(p.form) || busy(document.querySelector(p.slot + " [data-queue-edit]")) || settling(p.slot)) return;
    var button = document.querySelector(p.slot + " [data-apply]");
    var current = button && (p.form.id !== "triage-form" || choices(button.form) === choices(p.form));
    if (current) { pending = null; button.click(); return; }
    if (!p.asked && p.form.id === "triage-form") {  // stale preview, nothing in flight: ask for the current one
      p.asked = true;
      if (p.form.requestSubmit) p.form.requestSubmit(); else htmx.trigger(p.form, "submit");
      return;
    }
    pending = null;  // the fresh preview still differs (form errors): show it, apply nothing
  }

  function apply() {
    // The Apply button of the current preview; in the queue, the selected row's.
    var row = selectedRow();
    var form = acceptForm(row);
    var page = document.querySelector("[data-issue]");
    var number = row ? row.getAttribute("data-issue-row") : page && page.getAttribute("data-issue");
    var slot = "#apply-preview-" + CSS.escape(number || "");
    if (!form) return click(row ? slot + " [data-apply]" : "[data-apply]");  // a preview opened by mouse
    // Nothing previewed and nothing on its way: Enter applies only what the triager has seen.
    if (!busy(form) && !busy(queueEdit(row)) && !document.querySelector(slot + " [data-apply]")) return false;
    pending = { form: form, slot: slot, asked: false };
    applyWhenCurrent();
    return true;
  }

  // `r` in the queue: the review box of the selected row's preview, opened first by `a` where it is not open yet.
  var reviewAfter = null;

  function toggleReview() {
    var row = selectedRow();
    var edit = row && queueEdit(row);
    var box = row ? edit && edit.querySelector("input[name=review]") : document.querySelector("#triage-form input[name=review]");
    if (box) { box.click(); return true; }  // as the mouse does: the same events, so the preview follows
    if (!row || !acceptForm(row)) return false;
    reviewAfter = "apply-preview-" + row.getAttribute("data-issue-row");
    return accept();
  }

  // htmx keeps sending the last submit button clicked in a form with its later requests until that
  // button loses focus, which a key press never gives it: after `a`, the change of `r` went out as
  // "accept" again and the server previewed the suggestions, dropping the ticked flag. Only a submit
  // by the Accept button itself asks for the suggestions.
  document.addEventListener("htmx:configRequest", function (event) {
    if (!event.detail.elt || event.detail.elt.id !== "triage-form") return;
    var trigger = event.detail.triggeringEvent;
    var submitter = trigger && trigger.type === "submit" ? trigger.submitter : null;
    if (submitter && submitter.hasAttribute("data-accept")) return;
    var params = event.detail.parameters;
    if (typeof params.delete === "function") params.delete("accept"); else delete params.accept;
  });

  // The possible-duplicate mark's preview of the close: the selected row's form; on the issue page the triage form
  // set to close as a duplicate of the marked original, so the preview is of what the form shows and Enter applies it.
  function previewDuplicate() {
    var row = selectedRow();
    if (row) return click("[data-mark-duplicate]", row);
    var mark = document.querySelector("[data-possible-duplicate]");
    var form = document.getElementById("triage-form");
    var route = form && form.querySelector('input[name=route][value="duplicate"]');
    var original = form && form.querySelector("input[name=duplicate_of]");
    if (!mark || !route || !original) return click("[data-mark-duplicate]");
    route.checked = true;
    original.value = mark.getAttribute("data-possible-duplicate");
    pending = null;
    if (form.requestSubmit) form.requestSubmit(); else htmx.trigger(form, "submit");
    return true;
  }

  function bisect() {
    var row = selectedRow();
    if (row) { window.location.href = row.getAttribute("data-href") + "#bisection"; return true; }
    return click("[data-bisect]");  // the run it starts is scrolled to once it is there (htmx:afterSettle below)
  }

  // Put el at the top of the window (never sideways), and the focus on it: a run started far down the page.
  function showAtTop(el) {
    window.scrollBy(0, el.getBoundingClientRect().top - 8);
    if (!el.hasAttribute("tabindex")) el.setAttribute("tabindex", "-1");
    el.focus({ preventScroll: true });
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
    // Accept previews the rubric's suggestions: show them ticked too (the rendered state), before
    // htmx reads the form, so the boxes never disagree with the preview; labels picked by hand go.
    var accepting = event.target.closest("#triage-form [data-accept]");
    if (accepting) {
      accepting.form.reset();
      Array.prototype.forEach.call(accepting.form.querySelectorAll("[data-picked]"), function (el) { el.remove(); });
    }
  });
  document.addEventListener("htmx:afterSettle", applyWhenCurrent);

  // A preview or a decision that a click or a key asked for (a POST) appears where the eye is: the page scrolls just
  // enough to show it (on the issue page it also sticks to the bottom of the window, triage.css).
  // A poll that grows a result already in sight (GitHub's answer) keeps it whole in sight; one the triager scrolled
  // away from stays where it is. Once settled: an outerHTML swap has replaced the target by then, so the element is
  // looked up by its id.
  document.addEventListener("htmx:afterSettle", function (event) {
    var config = event.detail.requestConfig;
    var shown = document.getElementById((event.detail.target && event.detail.target.id) || "");
    if (!config || !shown) return;
    // A bisection `b` started (or why it was refused): in sight where the eye is, far down the issue page.
    if (shown.hasAttribute("data-show-started") && config.verb === "post") { showAtTop(shown); return; }
    if (!shown.classList.contains("outcome")) return;
    var top = shown.getBoundingClientRect().top;
    if (config.verb === "post" || (top >= 0 && top < window.innerHeight)) reveal(shown);
    if (focusPreview && shown.id === focusPreview) {
      focusPreview = null;
      var box = shown.querySelector("[data-queue-labels] input[type=checkbox]");
      if (box) box.focus({ preventScroll: true });  // Space unticks it, Tab reaches the next and the picker
    }
    if (reviewAfter && shown.id === reviewAfter) {
      reviewAfter = null;
      var review = shown.querySelector("[data-queue-edit] input[name=review]");
      if (review) review.click();
      applyWhenCurrent();
    }
  });

  // The label picker (web/forms.py LabelPicker): a catalog label typed or picked in its field becomes a ticked box
  // beside it, and the field empties for the next one. Without JS the field itself is posted (names, comma-separated).
  // The one label whose name holds every word typed ("correctness": module: correctness (silent)), as the server
  // reads it (labels.picked_label); words several labels share pick none, and the preview says which they are.
  function onlyLabelWith(list, typed) {
    var words = (typed.match(/[a-z0-9]+/g) || []).filter(function (w) { return w !== "module"; });
    if (!words.length) return null;
    var within = Array.prototype.filter.call(list.options, function (o) {
      var own = o.value.toLowerCase().match(/[a-z0-9]+/g) || [];
      return words.every(function (w) { return own.indexOf(w) >= 0; });
    });
    return within.length === 1 ? within[0] : null;
  }

  function pickLabel(input) {
    var list = input.list, typed = input.value.trim().toLowerCase();
    if (!list || !typed) return;
    // As the server reads it (labels.CatalogLabelsField): any case, and "crash" stands for "module: crash".
    var option = Array.prototype.find.call(list.options, function (o) { return o.value.toLowerCase() === typed; }) ||
      Array.prototype.find.call(list.options, function (o) { return o.value.toLowerCase() === "module: " + typed; }) ||
      onlyLabelWith(list, typed);
    if (!option) return;
    var name = option.value;
    var picked = input.closest("[data-label-picker]").querySelector(".picked");
    var already = Array.prototype.find.call(picked.querySelectorAll("input"), function (b) { return b.value === name; });
    if (already) { already.checked = true; input.value = ""; return; }
    var label = document.createElement("label");
    label.setAttribute("data-picked", "");
    var box = document.createElement("input");
    box.type = "checkbox"; box.name = input.name; box.value = name; box.checked = true; box.defaultChecked = true;
    label.appendChild(box);
    label.appendChild(document.createTextNode(" " + name + " "));
    picked.appendChild(label);
    input.value = "";
  }
  document.addEventListener("change", function (event) {
    var input = event.target;
    if (input.matches && input.matches("[data-label-picker] input[list]")) pickLabel(input);
  });

  // Enter in a label picker picks the label typed (a ticked box, and the preview follows) instead of sending the form;
  // on an empty picker of a queue row's preview it applies, as Enter does elsewhere. Esc leaves the field.
  function pickerKey(event) {
    var input = event.target;
    if (!input.matches || !input.matches("[data-label-picker] input[list]")) return false;
    if (event.key === "Escape") { input.blur(); return true; }
    if (event.key !== "Enter") return false;
    if (!input.value.trim()) {
      if (!input.form || !input.form.hasAttribute("data-queue-edit")) return false;
      apply();
      return true;
    }
    pickLabel(input);
    // The form previews on change (a label the list does not know stays in the field, and the preview says why, G7).
    input.dispatchEvent(new Event("change", { bubbles: true }));
    return true;
  }

  document.addEventListener("keydown", function (event) {
    if (event.ctrlKey || event.metaKey || event.altKey) return;
    if (pickerKey(event)) { event.preventDefault(); return; }
    if (event.key === "Escape") { toggleHelp(false); return; }
    if (typing(event.target)) return;
    if (event.key === "Enter" && event.target.closest && event.target.closest("a[href]")) return;  // a link's own
    var handled = true;
    switch (event.key) {
      case "j": move(1); break;
      case "k": move(-1); break;
      case "a": handled = accept(); break;
      case "l": handled = pickerField(); break;
      case "Enter": handled = apply(); break;
      case "r": handled = toggleReview(); break;
      case "b": handled = bisect(); break;
      case "o": handled = openIssue(); break;
      case "d": handled = previewDuplicate(); break;
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

  // The queue's filters as the table shows them, in the page's HTML: htmx keeps the page's HTML for Back, and a
  // clicked lane or a typed word lives only in the fields' state, so Back would bring the table of one lane under the
  // highlight of another. The fields the triager changed keep what they show (a default does not move them).
  function settleFilters() {
    var table = document.getElementById("queue-table"), form = document.getElementById("queue-filters");
    if (!table || !form || !table.hasAttribute("data-lane")) return;
    Array.prototype.forEach.call(form.querySelectorAll("input[name=lane]"), function (radio) {
      radio.defaultChecked = radio.value === table.getAttribute("data-lane");
    });
    ["module", "author", "q"].forEach(function (name) {
      var field = form.elements[name];
      if (field) field.defaultValue = table.getAttribute("data-" + name) || "";
    });
  }
  document.addEventListener("htmx:afterSwap", function () { restore(); settleFilters(); });

  // Leaving the page aborts the polls in flight, and htmx logs each abort as an error: the requests still in flight
  // when the page goes finish their handlers (htmx's own bookkeeping) with that log silenced, and none starts after.
  var inFlight = [], leaving = false;
  document.addEventListener("htmx:beforeRequest", function (event) { if (leaving) event.preventDefault(); });
  document.addEventListener("htmx:beforeSend", function (event) { inFlight.push(event.detail.xhr); });
  document.addEventListener("htmx:afterRequest", function (event) {
    inFlight = inFlight.filter(function (xhr) { return xhr !== event.detail.xhr; });
  });
  function quietly(handler) {
    return function () {
      var log = console.error;
      console.error = function () {};
      try { return handler && handler.apply(this, arguments); } finally { console.error = log; }
    };
  }
  window.addEventListener("beforeunload", function () {
    leaving = true;
    setTimeout(function () { leaving = false; }, 5000);  // still here (a download): the polls go on
    inFlight.forEach(function (xhr) {
      xhr.onerror = quietly(xhr.onerror);
      xhr.onabort = quietly(xhr.onabort);
    });
  });
  window.addEventListener("pageshow", function () { leaving = false; });
  document.addEventListener("DOMContentLoaded", restore);
})();
