"""Catalog data package: makes importlib.resources return a real directory (a namespace package
gives a MultiplexedPath whose str() is not a path), so the installed wheel finds its YAML files."""
