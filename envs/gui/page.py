"""What runs in the MiniWoB page, and how the page is shown to the agent.

The element list comes from MiniWoB's own ``core.getDOMInfo()``, so refs are MiniWoB's: stable within an episode
(an element keeps its ref across steps; new elements get new ones), assigned in document order, negative for the
pieces of text that sit between elements. Each observation lists the visible elements one per line, indented by
depth::

    [3] div#area (0,50 160x89)
      [5] input_text value="" (2,63 130x21) focused
      [7] button "Ok" (2,95 33x21)

Boxes are ``(left,top widthxheight)`` in CSS pixels of the viewport, the same coordinates ``click_xy`` takes and the
screenshot uses (its origin is the page's top-left corner).
"""

from __future__ import annotations

import json
from typing import Any

MAX_ELEMENTS = 150
MAX_TEXT = 80

# -> {utterance, done, reward, raw_reward, reason, elements: [{ref, depth, tag, id, text, value, box, flags, ...}]}
OBSERVE_JS = r"""
(() => {
  const out = {utterance: core.getUtterance(), done: WOB_DONE_GLOBAL, reward: WOB_REWARD_GLOBAL,
               raw_reward: WOB_RAW_REWARD_GLOBAL, reason: WOB_REWARD_REASON, elements: []};
  if (WOB_DONE_GLOBAL) return out;
  const walk = (info, depth) => {
    const el = info.ref > 0 ? core.previousDOMInfo[info.ref] : null;
    const e = {ref: info.ref, depth: depth, tag: info.tag.toLowerCase(), id: info.id || "",
               text: info.text || "", box: [info.left, info.top, info.width, info.height], flags: []};
    if (info.value !== undefined) e.value = info.value;
    if (info.focused) e.flags.push("focused");
    if (el) {
      for (const a of ["title", "placeholder", "aria-label", "name"]) {
        const v = el.getAttribute && el.getAttribute(a);
        if (v) e[a] = v;
      }
      if (el.disabled) e.flags.push("disabled");
      if (el.tagName === "SELECT") {
        e.options = Array.from(el.options).map(o => o.text.trim());
        e.value = el.selectedIndex >= 0 ? el.options[el.selectedIndex].text.trim() : "";
      }
    }
    out.elements.push(e);
    for (const c of info.children) walk(c, depth + 1);
  };
  const root = core.getDOMInfo();
  if (root) for (const c of root.children) walk(c, 0);
  return out;
})()
"""

# -> {x, y} to click with the mouse (the element's centre is on screen and hits it), or {clicked: true} after
#    MiniWoB's element click (hidden or covered elements), or {error}
CLICK_TARGET_JS = r"""
((ref) => {
  const el = core.previousDOMInfo[ref];
  if (!el || !el.isConnected) return {error: "no element [" + ref + "] on the page now"};
  const r = el.getBoundingClientRect();
  const x = r.left + r.width / 2, y = r.top + r.height / 2;
  const hit = document.elementFromPoint(x, y);
  if (hit && (hit === el || el.contains(hit))) return {x: x, y: y};
  const res = core.elementClick(ref);
  return res === true ? {clicked: true} : {error: String(res)};
})(%d)
"""

# focus a text field and select its content, so that the typed text replaces it
FOCUS_FIELD_JS = r"""
((ref) => {
  const el = core.previousDOMInfo[ref];
  if (!el || !el.isConnected) return "no element [" + ref + "] on the page now";
  const editable = el.tagName === "TEXTAREA" || el.isContentEditable || (el.tagName === "INPUT" &&
    !["checkbox", "radio", "button", "submit", "reset", "file", "image", "range", "color"].includes(el.type));
  if (!editable) return "[" + ref + "] is a " + el.tagName.toLowerCase() + ", not a text field";
  if (el.disabled || el.readOnly) return "[" + ref + "] is disabled";
  el.focus();
  if (el.isContentEditable) document.execCommand("selectAll");
  else { try { el.select(); } catch (e) {} }
  return "";
})(%d)
"""

SELECT_JS = r"""
((ref, option) => {
  const el = core.previousDOMInfo[ref];
  if (!el || !el.isConnected) return "no element [" + ref + "] on the page now";
  if (el.tagName !== "SELECT") return "[" + ref + "] is a " + el.tagName.toLowerCase() + ", not a select";
  const texts = Array.from(el.options).map(o => o.text.trim());
  let i = texts.indexOf(option.trim());
  if (i < 0) i = texts.map(t => t.toLowerCase()).indexOf(option.trim().toLowerCase());
  if (i < 0) return "[" + ref + "] has no option " + JSON.stringify(option) + "; its options: " + texts.join(", ");
  el.focus();
  el.selectedIndex = i;
  el.dispatchEvent(new Event("input", {bubbles: true}));
  el.dispatchEvent(new Event("change", {bubbles: true}));
  return "";
})(%d, %s)
"""

# let handlers, animations and re-renders after an action run before the page is read
SETTLE_JS = "new Promise(r => requestAnimationFrame(() => setTimeout(() => r(true), %d)))"

READY_JS = ("document.readyState === 'complete' && typeof core !== 'undefined' && typeof genProblem === 'function'"
            " && !!document.getElementById('sync-task-cover')")


def start_js(seed: int | str, episode_ms: int) -> str:
    """Seed the page's random numbers, lift MiniWoB's own clock (the env counts steps instead), start the task."""
    return (f"Math.seedrandom({json.dumps(seed)}); core.setDataMode('default'); core.EPISODE_MAX_TIME = {episode_ms};"
            " core.startEpisodeReal(); WOB_TASK_READY")


def _clip(text: str, limit: int = MAX_TEXT) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def element_line(e: dict[str, Any]) -> str:
    parts = [f"[{e['ref']}] {e['tag']}" + (f"#{e['id']}" if e.get("id") else "")]
    if e.get("text"):
        parts.append(json.dumps(_clip(e["text"]), ensure_ascii=False))
    for attr in ("title", "placeholder", "aria-label", "name"):
        if e.get(attr):
            parts.append(f"{attr}={json.dumps(_clip(e[attr], 40), ensure_ascii=False)}")
    if "value" in e:
        v = e["value"]
        if isinstance(v, bool):
            parts.append("checked" if v else "unchecked")
        else:
            parts.append(f"value={json.dumps(_clip(v), ensure_ascii=False)}")
    if e.get("options"):
        parts.append("options=" + json.dumps([_clip(o, 40) for o in e["options"][:30]], ensure_ascii=False))
    x, y, w, h = (round(v) for v in e["box"])
    parts.append(f"({x},{y} {w}x{h})")
    parts += e.get("flags", [])
    return "  " * e.get("depth", 0) + " ".join(parts)


def format_page(state: dict[str, Any]) -> str:
    elements = state.get("elements") or []
    lines = [f"Task: {state.get('utterance', '')}", "Page elements ([ref] tag \"text\" value (x,y wxh) flags):"]
    lines += [element_line(e) for e in elements[:MAX_ELEMENTS]]
    if len(elements) > MAX_ELEMENTS:
        lines.append(f"... and {len(elements) - MAX_ELEMENTS} more elements")
    if not elements:
        lines.append("(nothing visible)")
    return "\n".join(lines)
