"""Benchmarks behind `pimrt bench NAME`, one module each (see pimrt/commands/bench.py)."""
