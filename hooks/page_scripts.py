"""Load Mermaid and MathJax only on the pages that use them (on_config, on_post_page).

mkdocs.yml's extra_javascript puts both on every page: 0.8 MB and 0.3 MB compressed that most pages
never run. A page keeps Mermaid only when its content has a `mermaid` block: Material draws those
`pre.mermaid` blocks itself and would fetch Mermaid from unpkg.com unless `window.mermaid` exists,
which the vendored assets/vendor/mermaid.min.js provides, so diagrams keep working offline. A page
keeps MathJax (and its configuration) only when pymdownx.arithmatex wrote maths into it; MathJax is
configured to typeset nothing else.

Removing a page's scripts is only sound while every page is a full load: with Material's
navigation.instant a later page would run without them, so on_config refuses that feature.
"""
import re

from mkdocs.exceptions import PluginError

USERS = {  # extra_javascript entry -> what in a page's content needs it
    "assets/vendor/mermaid.min.js": re.compile(r'<[a-z]+ class="(?:[^"]* )?mermaid[ "]'),
    "javascripts/mathjax-config.js": re.compile(r'<[a-z]+ class="(?:[^"]* )?arithmatex[ "]'),
    "assets/vendor/mathjax/tex-chtml.js": re.compile(r'<[a-z]+ class="(?:[^"]* )?arithmatex[ "]'),
}


def _script(path: str) -> re.Pattern:
    return re.compile(rf'<script src="(?:[^"]*/)?{re.escape(path)}"[^>]*></script>\n?')


def on_config(config):
    if "navigation.instant" in config.theme.get("features", []):
        raise PluginError("hooks/page_scripts.py drops scripts from pages that do not need them, "
                          "which navigation.instant cannot follow: turn one of them off")
    scripts = [str(s) for s in config.extra_javascript]
    missing = [p for p in USERS if p not in scripts]
    if missing:
        raise PluginError(f"hooks/page_scripts.py: {', '.join(missing)} not in mkdocs.yml's extra_javascript")
    return config


def on_post_page(output, page, config):
    content = page.content or ""
    for path, used in USERS.items():
        if not used.search(content):
            output = _script(path).sub("", output, count=1)
    return output
