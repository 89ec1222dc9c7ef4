"""Serve Mermaid and MathJax from the site itself (on_files), never from a CDN.

The files come from the pinned npm packages in node_modules/ (package-lock.json). Runs after
mkdocs-static-i18n's on_files (priority -100), which rejects files from outside docs_dir.

MathJax is its CommonHTML build: a third of the SVG build's size, because its fonts are separate
woff files that the browser fetches only for the glyphs a page uses. MathJax finds those fonts, and
the TeX extensions its autoload fetches on first use (\\cancel, say), beside tex-chtml.js, so both
folders are served under assets/vendor/mathjax/ as in the npm package.
(axe-core, also in node_modules, is for tests/test_a11y.py only and is never copied into the site.)
"""
from pathlib import Path

from mkdocs.exceptions import PluginError
from mkdocs.plugins import event_priority
from mkdocs.structure.files import File

ROOT = Path(__file__).resolve().parents[1]
MATHJAX = "node_modules/mathjax/es5"
ASSETS = {  # site path: file or folder in node_modules
    "assets/vendor/mermaid.min.js": "node_modules/mermaid/dist/mermaid.min.js",
    "assets/vendor/mathjax/tex-chtml.js": f"{MATHJAX}/tex-chtml.js",
    "assets/vendor/mathjax/output/chtml/fonts/woff-v2": f"{MATHJAX}/output/chtml/fonts/woff-v2",
    "assets/vendor/mathjax/input/tex/extensions": f"{MATHJAX}/input/tex/extensions",
}


@event_priority(-200)
def on_files(files, config):
    for dest, src in ASSETS.items():
        path = ROOT / src
        if not path.exists():
            raise PluginError(f"{src} is missing: run `make setup` (npm ci) before building the site")
        for f in sorted(path.rglob("*")) if path.is_dir() else [path]:
            if f.is_file():
                name = dest if f == path else f"{dest}/{f.relative_to(path).as_posix()}"
                files.append(File.generated(config, name, abs_src_path=str(f)))
    return files
