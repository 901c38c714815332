"""Telemetry for the data plane: OpenTelemetry setup and the capcom receiver.

The tracing, metrics and ``telemetry.capcom`` receiver arrive with the
observability issue; this package exists so the layout and type checks are in
place from the start.
"""
