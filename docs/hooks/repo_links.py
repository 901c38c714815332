"""MkDocs hook: links from a page to a repository file outside docs/ (``../bench/load.py``,
``../dashboards/README.md``) point at ``extra.source_url`` on the site, and a link to a
file that does not exist is a warning (an error under ``--strict``), as MkDocs does for
links between pages."""

from __future__ import annotations

import logging
import re
from pathlib import Path
from typing import Any

log = logging.getLogger("mkdocs.plugins.repo_links")
LINK = re.compile(r"\]\((?!https?:|mailto:|#)([^)\s]+)\)")


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    docs = Path(config["docs_dir"]).resolve()
    root = docs.parent
    base = config["extra"]["source_url"]
    here = (docs / page.file.src_uri).parent

    def rewrite(match: re.Match[str]) -> str:
        target, _, anchor = match.group(1).partition("#")
        path = (here / target).resolve()
        if path.is_relative_to(docs):
            return match.group(0)  # a page or an asset: MkDocs checks it
        if not path.is_relative_to(root) or not path.exists():
            log.warning("%s links to %s, which is not in the repository", page.file.src_uri, target)
            return match.group(0)
        rel = path.relative_to(root).as_posix()
        return f"]({base}{rel}{'#' + anchor if anchor else ''})"

    return LINK.sub(rewrite, markdown)
