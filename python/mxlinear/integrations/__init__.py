"""Adapters that plug mxlinear's ops into other frameworks; each imports its framework lazily."""
