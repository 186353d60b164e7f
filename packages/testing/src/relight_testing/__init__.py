"""Conformance kits and test helpers for relight's parts and plugins.

Import the submodule you need (``relight_testing.store``, ``relight.scripted.server``,
``relight_testing.adapters``, ``relight_testing.agents``, ``relight_testing.algorithms``,
``relight_testing.examples``); a store backend or adapter proves itself by subclassing a kit's
base test class, as a partner package does with langchain's standard tests.
"""
