"""What operators see of a running mediagraph: metrics, logs with request ids, traces.

Every instrument is defined here (`metrics.py`) and the code being watched only calls
it, so the rest of the package never spells a metric name, a log field or a span
attribute. This folder sits low in the layers (it imports only `settings`), so any layer
may report into it; what must read the stores (worker lags, pool usage, readiness) is
measured by the layers that own them and handed in as plain numbers.
"""
