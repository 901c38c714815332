"""The operator console (``dataplane console``): a wallboard of every queue, job search
and a job's page, and the operators' actions, server-rendered for a browser.

* :mod:`~dataplane.console.app`: the Quart-Trio app, its configuration and lifespan;
* :mod:`~dataplane.console.views`: the routes;
* :mod:`~dataplane.console.session`: who is at the console (JWT, roles, cookie, CSRF);
* :mod:`~dataplane.console.reads`: the wallboard's, the list's and a job's reads;
* :mod:`~dataplane.console.board`: the wallboard's live loop and its subscribers;
* :mod:`~dataplane.console.actions`: the actions, through :mod:`dataplane.operator`.

The console imports no other process (BFF, worker, capcom).
"""
