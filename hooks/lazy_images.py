"""Let the browser fetch a page's images only as they come into view (on_page_content).

Every <img> in the content that loads a file and has no loading attribute gets loading="lazy".
Images inlined as data: URIs (a notebook's plots) are already in the page, so there is nothing to
defer and they are left as they are; so are the theme's own images (logo, favicon), which are not
content.
"""
import re

_IMG = re.compile(r"<img(?=[\s/>])(?![^>]*\sloading=)(?![^>]*\ssrc=\"data:)")


def on_page_content(html, page, config, files):
    return _IMG.sub('<img loading="lazy"', html)
