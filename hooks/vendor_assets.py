"""Serve Mermaid and MathJax from the site itself (on_files), never from a CDN.

The files come from the pinned npm packages in node_modules/ (package-lock.json). Runs after
mkdocs-static-i18n's on_files (priority -100), which rejects files from outside docs_dir.
"""
from pathlib import Path

from mkdocs.exceptions import PluginError
from mkdocs.plugins import event_priority
from mkdocs.structure.files import File

ROOT = Path(__file__).resolve().parents[1]
ASSETS = {
    "assets/vendor/mermaid.min.js": "node_modules/mermaid/dist/mermaid.min.js",
    "assets/vendor/tex-svg.js": "node_modules/mathjax/es5/tex-svg.js",
}


@event_priority(-200)
def on_files(files, config):
    for dest, src in ASSETS.items():
        path = ROOT / src
        if not path.is_file():
            raise PluginError(f"{src} is missing: run `make setup` (npm ci) before building the site")
        files.append(File.generated(config, dest, abs_src_path=str(path)))
    return files
