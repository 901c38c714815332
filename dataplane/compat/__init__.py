"""Everything that reaches into a dependency's internals, installed explicitly.

One module per upstream (:mod:`~dataplane.compat.hypercorn` with
:mod:`~dataplane.compat.http11`, :mod:`~dataplane.compat.quart_trio`,
:mod:`~dataplane.compat.psycopg`, :mod:`~dataplane.compat.opentelemetry`); each says
what it replaces, why, the versions it was tested with (``TESTED``), the private names
it reads (``REACHES``), and which replacements are correctness workarounds
(``CORRECTNESS``: always on) and which are for speed (``SPEED``). Only this package
imports the private modules of those libraries (``tests/unit/test_private_imports.py``).
trio-asyncio needs no module: :mod:`dataplane.db.bridge` uses its public API.

Nothing is installed at import: the entry points call :func:`install_process` (the
worker's main, the command line, the BFF's and capcom's apps from their startup) and
the apps :func:`install_edge` too, before Hypercorn accepts a connection.

``DATAPLANE_STOCK_STACK=1`` leaves every speed replacement out; a comma-separated list
of names (``keep_alive_timer,lean_wait``) leaves out those only, for an A/B. Outside
the tested versions a module installs nothing and says so in one line (psycopg's
``running_loop`` stays: without it the plane cannot reach its database at all).
"""

from __future__ import annotations

import importlib.metadata
import logging
import os

from quart_trio import QuartTrio

from dataplane.compat import hypercorn, opentelemetry, psycopg, quart_trio
from dataplane.compat.http11 import guard_connections

log = logging.getLogger(__name__)

STOCK_STACK = "DATAPLANE_STOCK_STACK"
SPEED = (*hypercorn.SPEED, *quart_trio.SPEED, *psycopg.SPEED, *opentelemetry.SPEED)


def stock_names(value: str | None = None) -> frozenset[str]:
    """The speed replacements the kill switch leaves out (``1``: all of them)."""
    raw = os.environ.get(STOCK_STACK, "") if value is None else value
    raw = raw.strip()
    if raw in ("", "0"):
        return frozenset()
    if raw == "1":
        return frozenset(SPEED)
    names = frozenset(part.strip() for part in raw.split(",") if part.strip())
    unknown = names - set(SPEED)
    if unknown:
        log.warning("%s names no speed replacement: %s", STOCK_STACK, ", ".join(sorted(unknown)))
    return names


def tested(distribution: str, minors: tuple[tuple[int, int], ...], version: str) -> bool:
    """Whether ``version`` of ``distribution`` is one we tested; says so when not."""
    try:
        major, minor = (int(part) for part in version.split(".")[:2])
    except ValueError:
        major = minor = -1
    if (major, minor) in minors:
        return True
    log.warning(
        "%s %s is not a tested version (%s): its replacements are not installed, stock behaviour",
        distribution,
        version,
        ", ".join(f"{a}.{b}" for a, b in minors),
    )
    return False


def install_edge(app: QuartTrio) -> list[str]:
    """Install the HTTP edge's replacements (Hypercorn's process-wide, Quart-Trio's
    for ``app``); log one line saying what was installed and what not."""
    stock = stock_names()
    installed: list[str] = []
    left: list[str] = []
    for module in (hypercorn, quart_trio):
        names = [*module.CORRECTNESS, *module.SPEED]
        version = importlib.metadata.version(module.DISTRIBUTION)
        if not tested(module.DISTRIBUTION, module.TESTED, version):
            if module is hypercorn:
                guard_connections()  # HTTP/1.1 only, closed on FIN: a safety fix, kept
                hypercorn.shield_final_sends()  # connections close: kept too
                installed.append("shielded_final_send")
            else:
                quart_trio.unmerge_slashes(app)  # public API: kept too
                installed.append("unmerged_slashes")
            left += [name for name in names if name not in installed]
            continue
        done = hypercorn.install(stock) if module is hypercorn else quart_trio.install(app)
        installed += done
        left += [name for name in names if name not in done]
    log.info(
        "edge replacements installed: %s; not installed: %s",
        ", ".join(installed) or "none",
        ", ".join(left) or "none",
    )
    return installed


def install_process() -> list[str]:
    """Install what every process gets (psycopg's and the OpenTelemetry SDK's
    replacements; idempotent): from the entry points, before a database connection is
    opened or telemetry is set up. Log one line saying what was installed and what not."""
    stock = stock_names()
    installed: list[str] = []
    left: list[str] = []
    for module in (psycopg, opentelemetry):
        names = [*module.CORRECTNESS, *module.SPEED]
        version = importlib.metadata.version(module.DISTRIBUTION)
        if not tested(module.DISTRIBUTION, module.TESTED, version):
            if module is psycopg:
                psycopg.bind_running_loop()  # correctness: the plane's only way to its DB
                installed.append("running_loop")
            if module is opentelemetry:  # the stock path, whatever ran before
                opentelemetry.install(frozenset(module.SPEED), tested=False)
            else:
                module.install(frozenset(module.SPEED))
            left += [name for name in names if name not in installed]
            continue
        done = module.install(stock)
        installed += done
        left += [name for name in names if name not in done]
    # Everything in place is the normal case and says nothing at INFO: a process that
    # refuses to boot keeps its one line of why. Something left out is worth a line.
    log.log(
        logging.INFO if left else logging.DEBUG,
        "process replacements installed: %s; not installed: %s",
        ", ".join(installed) or "none",
        ", ".join(left) or "none",
    )
    return installed
