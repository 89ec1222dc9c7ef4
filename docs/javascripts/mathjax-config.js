// MathJax is served from assets/vendor/mathjax/tex-chtml.js (npm mathjax 3.2.2), never from a CDN.
window.MathJax = {
  tex: { inlineMath: [["\\(", "\\)"]], displayMath: [["\\[", "\\]"]], processEscapes: true, processEnvironments: true },
  options: { ignoreHtmlClass: ".*|", processHtmlClass: "arithmatex" }
};
document$.subscribe(() => {
  if (!window.MathJax || !MathJax.typesetPromise) return;
  MathJax.typesetClear();
  MathJax.texReset();
  MathJax.typesetPromise();
});
