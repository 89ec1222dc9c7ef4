// The site's own behaviour, no library: source notes beside quoted numbers, the study path's filter,
// and the reader's place kept across the language switch. Written here, served from the site.
(() => {
  "use strict";

  // 1. Source notes: <button class="kb-src-mark" aria-expanded aria-controls> beside each quoted number
  //    (kb/render.py source_mark) opens its note by click, tap, Enter or Space; Escape or a click elsewhere closes it.
  const note = (button) => document.getElementById(button.getAttribute("aria-controls"));
  const setOpen = (button, open) => {
    button.setAttribute("aria-expanded", String(open));
    const pop = note(button);
    if (pop) pop.hidden = !open;
  };
  const closeAll = (except) => document.querySelectorAll('.kb-src-mark[aria-expanded="true"]')
    .forEach((b) => b !== except && setOpen(b, false));

  document.addEventListener("click", (event) => {
    const button = event.target.closest && event.target.closest(".kb-src-mark");
    if (button) {
      closeAll(button);
      setOpen(button, button.getAttribute("aria-expanded") !== "true");
      return;
    }
    if (!(event.target.closest && event.target.closest(".kb-src-pop"))) closeAll(null);
  });
  document.addEventListener("keydown", (event) => {
    if (event.key !== "Escape") return;
    const open = document.querySelector('.kb-src-mark[aria-expanded="true"]');
    if (open) {
      closeAll(null);
      open.focus();
    }
  });

  // 2. The study path's filter (kb/study.py): difficulty and tags narrow the lists of questions.
  function setupFilter(form) {
    form.hidden = false;
    const update = () => {
      const levels = new Set([...form.querySelectorAll('input[name="difficulty"]:checked')].map((i) => i.value));
      const tags = [...form.querySelectorAll('input[name="tag"]:checked')].map((i) => i.value);
      let shown = 0;
      document.querySelectorAll("ol.kb-track").forEach((list) => {
        let here = 0;
        list.querySelectorAll("li[data-difficulty]").forEach((li) => {
          const own = li.dataset.tags.split("|");
          const ok = levels.has(li.dataset.difficulty) && (!tags.length || tags.some((t) => own.includes(t)));
          li.hidden = !ok;
          here += ok ? 1 : 0;
        });
        const none = list.nextElementSibling;
        if (none && none.classList.contains("kb-track__none")) none.hidden = here > 0;
        shown += here;
      });
      const count = form.querySelector(".kb-filter__count");
      if (count) count.textContent = (form.dataset.shown || "{n}").replace("{n}", String(shown));
    };
    form.addEventListener("change", update);
    update();
  }

  // 3. The language switch keeps the reader's place. The twin page has the same headings in the same
  //    order but other ids (a Chinese heading's id is _1, its English twin's short-answer), so the place
  //    travels as "the n-th heading, this far past it" (and the anchor, when the URL had one) in
  //    sessionStorage; the twin scrolls there and shows its own anchor in the URL.
  const KEY = "kb-language-switch";
  const headings = () => [...document.querySelectorAll(
    ".md-content h1[id], .md-content h2[id], .md-content h3[id], .md-content h4[id]")];
  const top = (el) => el.getBoundingClientRect().top + window.scrollY;

  document.addEventListener("click", (event) => {
    const link = event.target.closest && event.target.closest("a.md-select__link[hreflang]");
    if (!link || event.metaKey || event.ctrlKey || event.shiftKey) return;
    // Material's own handler (on document.body) maps pages through sitemaps and, failing that, sends
    // the reader to the language's home page; the link already leads to this page's twin.
    event.stopPropagation();
    const all = headings();
    const hash = decodeURIComponent(location.hash.slice(1));
    let index = hash ? all.findIndex((h) => h.id === hash) : -1;
    if (index < 0) {
      const line = (document.querySelector(".md-header") || { offsetHeight: 0 }).offsetHeight + 8;
      all.forEach((h, i) => { if (h.getBoundingClientRect().top <= line) index = i; });
    }
    const past = index >= 0 ? window.scrollY - top(all[index]) : 0;
    const room = document.documentElement.scrollHeight - window.innerHeight;
    const place = { path: new URL(link.href, location.href).pathname, hash, index, count: all.length, past,
                    ratio: room > 0 ? window.scrollY / room : 0 };
    try {
      sessionStorage.setItem(KEY, JSON.stringify(place));
    } catch (e) {
      if (hash) link.href = link.href.split("#")[0] + location.hash;  // no storage: carry the anchor at least
    }
  }, true);

  function restorePlace() {
    let place = null;
    try {
      place = JSON.parse(sessionStorage.getItem(KEY) || "null");
      sessionStorage.removeItem(KEY);
    } catch (e) {
      return;
    }
    if (!place || place.path !== location.pathname) return;
    const all = headings();
    const same = place.hash && document.getElementById(place.hash);
    const target = same || (place.index >= 0 && place.count === all.length ? all[place.index] : null);
    if (target && place.hash) {
      history.replaceState(null, "", "#" + encodeURIComponent(target.id));
      target.scrollIntoView();
    } else if (target) {
      window.scrollTo(0, top(target) + place.past);
    } else {
      window.scrollTo(0, place.ratio * (document.documentElement.scrollHeight - window.innerHeight));
    }
  }

  const start = () => {
    document.querySelectorAll("form.kb-filter").forEach(setupFilter);
    restorePlace();
  };
  if (document.readyState === "complete") start();
  else window.addEventListener("load", start);
})();
