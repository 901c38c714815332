"""The BFF's ASGI entry point: ``hypercorn -k trio dataplane.app:app``.

The BFF itself lives in :mod:`dataplane.bff`; this module keeps the name that
deployments, the README and the design card type.
"""

from dataplane.bff.app import app, create_app, quart_app

__all__ = ["app", "create_app", "quart_app"]
