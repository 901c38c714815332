"""The demo LMS surfaces — users, learnerviews, accounting, skills — as a surface package.

Installed next to the plane (``pip install -e examples/lms``), it registers
:data:`PACKAGE` under the entry-point group ``dataplane.surfaces``: the BFF, the
workers, ``/openapi.json`` and ``dataplane dev`` then serve its four surfaces, and
``dataplane demo-db`` / ``dataplane dev`` build its seeded client DB
(:func:`dataplane_lms.demo_db.create_demo_db`).
"""

from dataplane import SurfacePackage
from dataplane_lms import accounting, learnerviews, skills, users
from dataplane_lms.demo_db import create_demo_db

PACKAGE = SurfacePackage(
    name="dataplane-lms",
    surfaces=(users.SURFACE, learnerviews.SURFACE, accounting.SURFACE, skills.SURFACE),
    build_demo_db=create_demo_db,
    description="The demo LMS: a user directory, learning progress, invoices, skills.",
)
SURFACES = PACKAGE.surfaces
