"""The reading side: from ``Stream``s to the samples a (rank, worker) yields, and to exact resumption.

Users import the public names from ``stream_plugin``; this package holds their implementation. The
path of one sample, a module per step, is in docs/architecture.md ("How it fits together").
"""
