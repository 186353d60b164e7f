"""Conformance kits and test helpers for relight's parts and plugins.

Import the submodule you need (``relight.testing.store``, ``relight.testing.upstream``,
``relight.testing.adapters``, ``relight.testing.agents``, ``relight.testing.algorithms``,
``relight.testing.examples``); a store backend or adapter proves itself by subclassing a kit's
base test class, as a partner package does with langchain's standard tests.
"""
