"""``dataplane deploy render [--out DIR] [--image IMAGE]``."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from dataplane import __version__
from dataplane.core.settings import from_env
from dataplane.surfaces import SurfacesConfig

DEFAULT_IMAGE = f"dataplane:{__version__}"  # an overlay's `images:` points it at a registry


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    deploy = sub.add_parser("deploy", help="Kubernetes manifests of the installed surfaces")
    actions = deploy.add_subparsers(dest="action", required=True)
    render_ = actions.add_parser(
        "render",
        help="a kustomize base: migration Job, BFF, capcom, console, a worker per surface and tier "
        "with its KEDA ScaledObject, NetworkPolicy (DATAPLANE_PROBE=1 adds probe)",
    )
    render_.add_argument(
        "--out", metavar="DIR", help="write the base's files here (default: one YAML stream)"
    )
    render_.add_argument("--image", default=DEFAULT_IMAGE, help=f"default: {DEFAULT_IMAGE}")


def run(args: argparse.Namespace) -> int:
    from dataplane.deploy.render import render, stream, write

    surfaces = from_env(SurfacesConfig).registry().surfaces
    files = render(surfaces, image=args.image, version=__version__)
    if args.out is None:
        sys.stdout.write(stream(files))
        return 0
    written = write(files, Path(args.out))
    workers = sum(1 for p in written if p.parent.name == "workers")
    print(
        f"wrote {len(written)} files to {args.out}: {workers} worker Deployments "
        f"for {len(surfaces)} surfaces x 2 tiers",
        file=sys.stderr,
    )
    return 0
