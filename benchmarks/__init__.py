"""Benchmarks run by `mediagraph bench …`; each reports ratios measured side by side in one run."""
