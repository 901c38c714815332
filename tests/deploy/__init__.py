"""Offline checks of the files under deploy/ and of compose.yaml: no container runs."""
