"""The page ↔ lab ↔ results contract of the site: pages, shortcodes, results, rendering, strings."""
