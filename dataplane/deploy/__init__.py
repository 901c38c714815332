"""``dataplane deploy render``: the Kubernetes manifests of a fleet (a kustomize base).

* :mod:`~dataplane.deploy.manifests`: the BFF, capcom, the migration Job, and the
  hardening every pod shares;
* :mod:`~dataplane.deploy.workers`: one worker Deployment per surface and tier, its
  KEDA ScaledObject, and a NetworkPolicy per component;
* :mod:`~dataplane.deploy.render`: the files of the base, from the installed surfaces;
* :mod:`~dataplane.deploy.yaml`: the YAML writer (the image has no YAML library).
"""
