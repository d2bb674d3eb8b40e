"""The HTTP service (``qres serve``): search, durable writes, health and Prometheus metrics,
and the "similar questions" widget, over one backend and its encoders."""
