"""Smoke tests: a few quick, representative tests of real processes and real HTTP (one
per concern), so the fast tier still starts a BFF and a worker and talks to them."""
