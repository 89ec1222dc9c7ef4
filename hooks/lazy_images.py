"""Let the browser fetch a page's images only as they come into view (on_page_content).

Every <img> in the content without a loading attribute gets loading="lazy"; the theme's own images
(logo, favicon) are not content and are left alone.
"""
import re

_IMG = re.compile(r"<img(?![^>]*\sloading=)(?=[\s/>])")


def on_page_content(html, page, config, files):
    return _IMG.sub('<img loading="lazy"', html)
