"""Show when each page last changed, from git (on_page_context).

The date is the committer date of the last commit that touched the page's source (for a lab: the
notebook and its recorded result), as `git log -1 --format=%cs` gives it; Material prints
page.meta.revision_date under the page. A checkout without history (no git, not a repository, or a
shallow clone, whose one commit would date every file) shows no date rather than a wrong one.
"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from kb.history import last_change  # noqa: E402
from kb.strings import t  # noqa: E402


def on_page_context(context, page, config, nav):
    paths = [page.file.abs_src_path] if page.file.abs_src_path else []
    if page.file.src_uri.startswith("labs/") and page.file.src_uri.endswith(".ipynb"):
        paths.append(str(Path(config.config_file_path).parent / "notebooks" / Path(page.file.src_uri).name))
    date = last_change(paths)
    if date:
        page.meta["revision_date"] = t(config.theme["language"], "last_change", date=date)
    return context
