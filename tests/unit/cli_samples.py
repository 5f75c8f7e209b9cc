"""Small inputs the CLI tests share: a profile cheap to simulate."""

TINY_PROFILE = """\
name: tiny
max_batch_size: 8
startup_seconds: 5
gpus_per_replica: 1
batch_latency_ms: {1: 2.0, 8: 5.0}
"""
