"""batchop: co-tunes Triton's dynamic-batching delay and replica count against a p99 SLO."""

__version__ = "0.1.0"
